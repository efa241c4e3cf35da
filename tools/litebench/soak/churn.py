"""The soak's churn and faults (tools/soak.py): processes killed mid-run, priority
class and QoS mode changes, LMRs allocated and freed, and node 2 leaving and
rejoining."""

import json
import re
import time

from litebench.cluster.cluster import Background
from litebench.soak.common import OP_TIMEOUT, Failed, Lost, check
from litebench.soak.kv import KV_BENCH_KEYS


class Churn:
    """Churn, a part of `Soak`: generators like the workloads, and node 2's leave and rejoin."""

    def victim(self, nodes):
        """A process doing real traffic, SIGKILLed mid-run: a flow, an lmr-integrity, a
        lite-kv bench on the bench keys, an RPC caller, or an LMR's master while another
        node maps it (which must then see EIDRM)."""
        kind = self.rng.choice(["flow", "integrity", "kvbench", "rpccaller", "master"])
        n, other = self.pick(1, nodes)[0], self.pick(1, nodes)[0]
        tag = self.tag(f"v{kind}{self.rng.randrange(1000)}")
        if kind == "master":
            holders = ",".join(map(str, sorted(self.pick(self.rng.randint(1, len(nodes)), nodes))))
            master = Background(self.c, n, tag, f"lite-selftest lmr-serve {tag} --size 64K --holders {holders} "
                                                "--perm rw")
            mapper = None
            try:
                master.wait_for("ready")
                mapper = Background(self.c, other, tag + "m", f"lite-selftest lmr-client {tag} --perm r --hold")
                mapper.wait_for("mapped")
                yield
                master.kill()
                self.faults["process_killed"] += 1
                mapper.send("read")
                out = mapper.wait_for("EIDRM", timeout=OP_TIMEOUT)
                check("ok" not in out.split("mapped", 1)[1], f"a killed master's LMR still read: {out}")
                yield
            finally:
                if mapper:
                    mapper.close()
                master.close()
            return
        server = None
        if kind == "flow":
            cmd = (f"lite-bench --quiet flow --holder {other} --size 4K --op {self.rng.choice(['write', 'read'])} "
                   "--seconds 300")
        elif kind == "integrity":
            cmd = f"lite-selftest lmr-integrity --size 1M --holders {other} --seed {self.rng.randrange(1000)}"
        elif kind == "kvbench":
            cmd = self.kv(f"bench --keys {KV_BENCH_KEYS} --prefix b- --ops 100000 --threads 2 --read-pct 70 "
                          f"--seed {self.rng.randrange(1 << 30)}")
        else:
            # Its own id: a round may have two RPC victims, on the same node.
            rid = 200 + self.rpc_victims % 100
            self.rpc_victims += 1
            server = Background(self.c, other, tag + "s", f"lite-selftest rpc-serve {rid} --threads 2")
            server.wait_for("ready")
            cmd = f"lite-selftest rpc-call {other} {rid} --count 100000 --threads 2 --size 2000 --reply 2000"
        try:
            job = self.c.exec_async(n, f"echo $$ > /tmp/{tag}.pid; exec {cmd}", timeout=OP_TIMEOUT)
            yield
            res = self.c.exec(n, f"i=0; while [ ! -s /tmp/{tag}.pid ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); "
                                 f"done; p=$(cat /tmp/{tag}.pid); kill -9 $p && echo killed; "
                                 "while kill -0 $p 2>/dev/null; do sleep 0.1; done", check=False)
            out = job.wait().out
            if "killed" in res.out:
                self.faults["process_killed"] += 1
            elif kind == "integrity":
                # Finished before the kill: then it must have been right.
                check(": ok," in out, f"node {n} lmr-integrity: {out[-1500:]}")
                self.ops["integrity_run"] += 1
            else:
                raise Failed(f"node {n} victim {kind} ended before the kill: {out[-1500:]}")
            yield
        finally:
            if server:
                server.close()
                out = server.output()
                corrupt = re.search(r"messages, (\d+) corrupt", out)
                if not corrupt or int(corrupt.group(1)):
                    raise Lost("rpc", int(corrupt.group(1)) if corrupt else 1,
                               f"the killed caller's server: {out[-500:]}")

    def class_churn(self, nodes):
        """A flow whose process the operator moves between classes while it runs (and
        whose rules are gone afterwards), then killed."""
        n, holder = self.pick(1, nodes)[0], self.pick(1, nodes)[0]
        tag = self.tag("cls")
        job = self.c.exec_async(n, f"echo $$ > /tmp/{tag}.pid; exec lite-bench --quiet flow --holder {holder} "
                                   "--size 1K --seconds 300", timeout=OP_TIMEOUT)
        try:
            yield
            pid = self.c.exec(n, f"i=0; while [ ! -s /tmp/{tag}.pid ] && [ $i -lt 300 ]; do sleep 0.1; "
                                 f"i=$((i+1)); done; cat /tmp/{tag}.pid").out.strip()
            for cls in self.rng.sample(["latency", "bulk", "default"], 2):
                self.c.exec(n, f"lite-admin class set --pid {pid} {cls}")
                rules = json.loads(self.c.exec(n, "lite-admin class list --json").out)
                check({"kind": "pid", "id": int(pid), "class": cls} in rules, f"rules after setting {cls}: {rules}")
                self.faults["class_change"] += 1
                time.sleep(self.rng.uniform(0.5, 2))
            self.c.exec(n, f"lite-admin class unset --pid {pid}")
            rules = self.c.exec(n, "lite-admin class list --json").out.strip()
            check(rules == "[]", f"rules left behind on node {n}: {rules}")
        finally:
            self.c.exec(n, f"kill -9 $(cat /tmp/{tag}.pid)", check=False)
            job.wait()

    def mode_churn(self, nodes):
        n = self.pick(1, nodes)[0]
        mode = self.rng.choice(["none", "hw-sep"])
        try:
            out = self.c.exec(n, f"lite-admin mode {mode}").out
            check(f"mode {mode}" in out, f"node {n}: {out}")
            self.faults["mode_change"] += 1
            yield
        finally:
            out = self.c.exec(n, "lite-admin mode sw-pri").out
            check("mode sw-pri" in out, f"node {n}: {out}")
            self.faults["mode_change"] += 1

    def lmr_churn(self, nodes):
        """LMRs allocated and left to the kernel (lmr-many exits without freeing), and
        one allocated, read by another node, freed, and then gone for everyone."""
        n, holder = self.pick(1, nodes)[0], self.pick(1, nodes)[0]
        count = self.rng.randint(8, 40)
        many = self.c.exec_async(n, f"lite-selftest lmr-many {count} --size {self.rng.choice(['4K', '16K'])} "
                                    f"--holders {holder}", timeout=OP_TIMEOUT)
        name = self.tag("lmr")
        master, reader = self.pick(1, nodes)[0], self.pick(1, nodes)[0]
        holders = ",".join(map(str, sorted(self.pick(self.rng.randint(1, len(nodes)), nodes))))
        serve = Background(self.c, master, name, f"lite-selftest lmr-serve {name} --size "
                                                 f"{self.rng.choice(['8K', '64K', '100000'])} --holders {holders} "
                                                 "--perm r")
        try:
            serve.wait_for("ready")
            yield
            res = self.c.exec(reader, f"lite-selftest lmr-client {name} --perm r --check-pattern",
                              timeout=OP_TIMEOUT, check=False)
            if res.rc != 0 and "pattern" in res.out.lower():
                raise Lost("lmr", 1, f"node {reader} read {name}: {res.out[-1000:]}")
            check(res.rc == 0, f"node {reader} read {name}: {res.out[-1000:]}")
            serve.send("free")
            serve.wait_for("freed")
            self.c.exec(reader, f"lite-selftest lmr-client {name} --perm r --expect-error ENOENT")
            res = many.wait()
            if "read back" in res.out:
                raise Lost("lmr", 1, f"node {n} lmr-many {count}: {res.out[-1000:]}")
            check(res.rc == 0, f"node {n} lmr-many {count}: {res.out[-1000:]}")
            self.faults["lmr_alloc_free"] += count + 1
        finally:
            serve.close()

    def leave_and_rejoin(self):
        """Node 2 leaves (its agent stops, every peer is torn down) while nodes 0 and 1
        keep working, then joins again as a new incarnation."""
        epoch = self.c.status(2)["epoch"]
        self.c.exec(2, "lite-admin leave", timeout=300)
        check(self.c.status(2)["node_id"] is None, "node 2 still joined after leave")
        self.faults["node_left"] += 1
        for n in (0, 1):
            res = self.c.exec(n, "lite-admin wait --timeout-s 120 --down 2", timeout=200, check=False)
            check(res.rc == 0, f"node {n} never saw node 2 down: {res.out.strip()}")
        time.sleep(self.rng.uniform(1, 5))
        self.c.start_agent(2)
        self.c.wait_connected([0, 1, 2], timeout=180)
        check(self.c.status(2)["epoch"] > epoch, "node 2 rejoined with an old epoch")
        self.faults["node_rejoined"] += 1
