#!/usr/bin/env python3
"""The LITE-RS soak (issue 22, item 6): the four applications and lite-bench
traffic on a joined three-node cluster for MINUTES, with churn, and every item
checked at the end.

Rounds run until the time is up. In each, a seeded RNG picks workloads (lite-log
appends through a small ring with a cleaner that checks every writer's sequence;
lite-kv loads, verified GETs and a mixed bench; a lite-mr word count checked against
its single-process reference; a lite-graph PageRank checked against its reference;
lite-bench flows; checksummed lmr-integrity runs; checked RPCs; fetch-and-adds and
locked increments that must add up exactly) and runs them at once on random nodes,
while it churns: processes killed mid-run (SIGKILL), LMRs allocated and freed (or
left to the kernel), priority class and QoS mode changes, and, every few rounds,
node 2 leaving and rejoining or a 1 % loss on node 2's wire. After each round every
node's LMR and RPC state must be back at its baseline (the kernel freed what the
killed processes held). At the end every lite-kv key must hold its last version
exactly, all state must be gone once the servers close, every node pings every
other, kmemleak (debug kernel) reports nothing of lite, and the consoles show no
kernel bug report.

Sizes are KiB, not MiB: Soft-RoCE moves ~0.2 MB/s on the emulated debug kernel.

  soak(cluster, minutes, seed) -> report        from a test, on a joined cluster
  tools/soak.py --kernel debug --minutes 3      boots its own cluster (run under
                                                `flock /tmp/lite-vm.lock`)

The report: minutes, rounds, operations per kind, faults injected per kind,
corrupt_or_lost (items found wrong or missing, per kind), failures (operations that
errored where they must not, state left behind), splats, and `passed`.
"""

import argparse
import json
import random
import re
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vcluster import Background, CommandFailed, Cluster, REPO  # noqa: E402
import vwire  # noqa: E402

WORKLOADS = ["log", "kv", "mr", "graph", "bench", "integrity", "rpc", "atomics"]
# Workloads started together in one round (a deck: every one runs within two rounds).
PER_ROUND = 4
# Node 2's membership and link faults: in each three rounds, both in random order,
# then a round without (so a 3-minute run, two rounds on the debug kernel, has both).
BIG_FAULTS = ["loss", "leave"]
# How long one workload command may take on the emulated debug kernel.
OP_TIMEOUT = 600
# lite-kv: servers on nodes 0 and 1 for the whole soak (node 2 leaves and rejoins).
KV_SERVERS = "0,1"
KV_GROUPS = 4
KV_GROUP_KEYS = 16
KV_BENCH_KEYS = 32
KV_SINGLES = 8
PROGRESS_S = 30
STATE_KEYS = ("mastered", "mappings", "held_bytes", "lock_queued", "barrier_queued")


class Failed(Exception):
    """An operation errored, or state was left behind."""


class Lost(Exception):
    """Items found corrupt or missing (`count` of them)."""

    def __init__(self, kind, count, msg):
        super().__init__(msg)
        self.kind, self.count = kind, count


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def summary(n, res, what):
    """The last JSON line of a command's output; Failed unless it exited 0 with one."""
    lines = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    if res.rc != 0 or not lines:
        raise Failed(f"node {n} {what}: rc {res.rc}: {res.out.strip()[-1500:]}")
    return json.loads(lines[-1])


def last_json(res):
    lines = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


class Soak:
    def __init__(self, c, seed, say=print):
        self.c, self.seed, self.say = c, seed, say
        self.rng = random.Random(seed)
        self.ops, self.volume, self.faults, self.corrupt = Counter(), Counter(), Counter(), Counter()
        self.failures, self.skipped = [], []
        self.round = self.rounds_done = 0
        self.nodes = [0, 1, 2]
        self.kv_versions = {g: 0 for g in range(KV_GROUPS)}
        self.kv_singles = {}
        self.kv_servers = []
        self.baseline = {}
        self.deck, self.fault_deck = [], []
        self.started = time.time()
        self.wired = self._node2_wired()

    # ---- bookkeeping ----

    def _node2_wired(self):
        try:
            self.c.wire_mgmt(2)
            return True
        except SystemExit as e:
            self.skipped.append(f"1 % loss phases: {e}")
            return False

    def fail(self, msg):
        self.failures.append(f"round {self.round}: {msg}")
        self.say(f"  FAIL round {self.round}: {msg[:3000]}", flush=True)

    def lost(self, kind, count, msg):
        self.corrupt[kind] += count
        self.fail(f"{count} {kind} item(s) corrupt or lost: {msg}")

    def guarded(self, what, fn, *args):
        """Runs `fn`; a failed check is recorded (the soak goes on), a dead node is not caught."""
        try:
            return fn(*args)
        except Lost as e:
            self.lost(e.kind, e.count, f"{what}: {e}")
        except (Failed, CommandFailed) as e:
            self.dead_node_check()
            self.fail(f"{what}: {e}")
        return None

    def dead_node_check(self):
        dead = [n for n in self.c.meta.get("nodes", []) if not self.c.alive(n)]
        if dead:
            raise CommandFailed(f"node(s) {dead} died (see their consoles)")

    def pick(self, k=1, among=None):
        return self.rng.sample(among or self.nodes, k)

    def tag(self, what):
        return f"soak{self.round}{what}"

    def elapsed(self):
        return time.time() - self.started

    # ---- state ----

    def state(self, n):
        st = self.c.status(n)
        m, r = st["memory"], st["rpc"]
        return {**{k: m[k] for k in STATE_KEYS}, "servers": r["servers"], "calls": r["calls"],
                "requests": r["requests"]}

    def wait_baseline(self, timeout=90):
        """Every node's LMRs, mappings, held bytes, lock and barrier queues, RPC servers,
        calls and requests back at what they were before the first round (a killed
        process's file is released asynchronously: waits a little)."""
        deadline = time.time() + timeout
        while True:
            now = {n: self.state(n) for n in self.nodes}
            if all(now[n] == self.baseline.get(n, dict.fromkeys(now[n], 0)) for n in self.nodes):
                return
            if time.time() > deadline:
                raise Failed(f"state left behind after the round: {now}, baseline {self.baseline}")
            time.sleep(1)

    def wait_all_gone(self, timeout=90):
        """Nothing of LITE left on any node: no LMR, mapping, held byte, queue, server,
        ring, call or request."""
        deadline = time.time() + timeout
        while True:
            sts = {n: self.c.status(n) for n in self.nodes}
            if all(all(st["memory"][k] == 0 for k in STATE_KEYS) and
                   all(st["rpc"][k] == 0 for k in ("servers", "rings", "calls", "requests"))
                   for st in sts.values()):
                return
            if time.time() > deadline:
                raise Failed("state left behind at the end: " + json.dumps(
                    {n: {"memory": st["memory"], "rpc": st["rpc"]} for n, st in sts.items()}))
            time.sleep(1)

    # ---- the long-lived lite-kv store ----

    def kv(self, args):
        return f"lite-kv {args.split()[0]} --servers {KV_SERVERS} {' '.join(args.split()[1:])}"

    def start_kv(self):
        self.kv_servers = [Background(self.c, n, f"soakkv{n}", "lite-kv serve --buckets 128 --threads 2")
                           for n in (0, 1)]
        for s in self.kv_servers:
            s.wait_for("ready")
        for g in range(KV_GROUPS):
            self.kv_load(0, g, 1)
        res = self.c.exec(1, self.kv(f"load --keys {KV_BENCH_KEYS} --prefix b- --version 0 --json"),
                          timeout=OP_TIMEOUT, check=False)
        summary(1, res, "lite-kv load")
        self.ops["kv_put"] += KV_BENCH_KEYS

    def kv_load(self, n, group, version):
        res = self.c.exec(n, self.kv(f"load --keys {KV_GROUP_KEYS} --prefix g{group}- --version {version} "
                                     "--threads 2 --json"), timeout=OP_TIMEOUT, check=False)
        # Whatever happened, the group's keys are checked for the new version from now on.
        self.kv_versions[group] = version
        summary(n, res, f"lite-kv load of group {group} at version {version}")
        self.ops["kv_put"] += KV_GROUP_KEYS

    def kv_verify(self, n, group):
        version = self.kv_versions[group]
        res = self.c.exec(n, self.kv(f"verify --keys {KV_GROUP_KEYS} --prefix g{group}- --exact {version} --json"),
                          timeout=OP_TIMEOUT, check=False)
        s = last_json(res)
        if s and s["missing"] + s["wrong"]:
            raise Lost("kv", s["missing"] + s["wrong"], f"node {n}: group {group} at version {version}: {s}")
        s = summary(n, res, f"lite-kv verify of group {group}")
        self.ops["kv_get"] += s["keys"]

    def kv_final(self):
        """Every key's last version, exactly: the groups, the single keys, and the bench
        keys (whose values any version may have, but must be whole and present)."""
        for g in range(KV_GROUPS):
            self.guarded(f"final lite-kv verify of group {g}", self.kv_verify, 2 - g % 3, g)
        res = self.c.exec(2, self.kv(f"verify --keys {KV_BENCH_KEYS} --prefix b- --json"), timeout=OP_TIMEOUT,
                          check=False)
        s = last_json(res)
        if s and s["missing"] + s["wrong"]:
            self.lost("kv", s["missing"] + s["wrong"], f"final verify of the bench keys: {s}")
        else:
            self.guarded("final verify of the bench keys", summary, 2, res, "lite-kv verify")
            self.ops["kv_get"] += KV_BENCH_KEYS
        if self.kv_singles:
            script = "; ".join(f"echo \"{k}=$({self.kv(f'get {k}')} 2>&1)\"" for k in sorted(self.kv_singles))
            out = self.c.exec(0, script, timeout=OP_TIMEOUT).out
            got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            wrong = {k: (got.get(k), v) for k, v in self.kv_singles.items() if got.get(k) != v}
            self.ops["kv_get"] += len(self.kv_singles)
            if wrong:
                self.lost("kv", len(wrong), f"single keys (got, want): {wrong}")

    # ---- workloads: generators that start their processes, yield, then check ----

    def w_log(self, nodes):
        """A 4 KiB ring held by one node takes the writers' entries (several times its
        size) only because the cleaner consumes them; the cleaner checks every writer's
        sequence. Then a few more appends and a replay in order."""
        name, holder = self.tag("log"), self.pick(1, nodes)[0]
        owner = Background(self.c, self.pick(1, nodes)[0], name, f"lite-log create {name} --capacity 4K "
                                                                   f"--holder {holder}")
        try:
            owner.wait_for("ready")
            writers = self.pick(self.rng.randint(1, len(nodes)), nodes)
            runs = [(n, self.rng.randint(10, 30), self.rng.choice([16, 40, 100, 200]), 10 * i)
                    for i, n in enumerate(writers)]
            total = sum(count * 2 for _, count, _, _ in runs)
            cleaner_node = self.pick(1, nodes)[0]
            cleaner = self.c.exec_async(cleaner_node, f"lite-log clean {name} --expect {total} --json",
                                        timeout=OP_TIMEOUT)
            jobs = [(n, self.c.exec_async(n, f"lite-log append {name} --count {count} --size {size} --threads 2 "
                                             f"--writer {w} --json", timeout=OP_TIMEOUT))
                    for n, count, size, w in runs]
            yield
            commits = 0
            for n, job in jobs:
                commits += summary(n, job.wait(), "lite-log append")["commits"]
            res = cleaner.wait()
            cleaned = last_json(res) or {}
            if cleaned.get("out_of_order") or (cleaned and cleaned.get("entries") != total):
                raise Lost("log", cleaned.get("out_of_order", 0) + abs(total - cleaned.get("entries", 0)),
                           f"{commits} commits of {total}, cleaner saw {cleaned}")
            cleaned = summary(cleaner_node, res, "lite-log clean")
            check(commits == total and cleaned["writers"] == 2 * len(runs),
                  f"{commits} commits of {total}, cleaner saw {cleaned}")
            more = self.rng.randint(2, 6)
            n = self.pick(1, nodes)[0]
            self.c.exec(n, f"lite-log append {name} --count {more} --writer 99", timeout=OP_TIMEOUT)
            replay = summary(n, self.c.exec(n, f"lite-log replay {name} --json", timeout=OP_TIMEOUT, check=False),
                             "lite-log replay")
            if replay["entries"] != more or replay["out_of_order"] or replay["uncommitted_bytes"]:
                raise Lost("log", max(1, abs(more - replay["entries"]) + replay["out_of_order"]),
                           f"replay after {more} appends: {replay}")
            self.ops["log_entry"] += total + more
        finally:
            owner.close()

    def w_kv(self, nodes):
        """A group of keys loaded at its next version and read back exactly, a single key
        put and read, and a mixed bench over the bench keys whose every GET is checked."""
        group = self.rng.randrange(KV_GROUPS)
        loader, reader, bencher, single = (self.pick(1, nodes)[0] for _ in range(4))
        bench = self.c.exec_async(bencher, self.kv(f"bench --keys {KV_BENCH_KEYS} --prefix b- --ops "
                                                   f"{self.rng.randint(20, 60)} --threads 2 --read-pct "
                                                   f"{self.rng.choice([50, 80, 95])} --dist "
                                                   f"{self.rng.choice(['uniform', 'zipfian'])} --seed "
                                                   f"{self.rng.randrange(1 << 30)} --json"), timeout=OP_TIMEOUT)
        yield
        self.kv_load(loader, group, self.kv_versions[group] + 1)
        self.kv_verify(reader, group)
        key, value = f"s{self.rng.randrange(KV_SINGLES)}", f"r{self.round}-{self.rng.randrange(1 << 30):x}"
        self.kv_singles[key] = value
        self.c.exec(single, self.kv(f"put {key} {value}"), timeout=OP_TIMEOUT)
        got = self.c.exec(single, self.kv(f"get {key}"), timeout=OP_TIMEOUT, check=False)
        if got.out.strip() != value:
            raise Lost("kv", 1, f"GET {key} after PUT {value}: {got}")
        self.ops["kv_put"] += 1
        self.ops["kv_get"] += 1
        res = bench.wait()
        s = last_json(res)
        if s and s["wrong_values"]:
            raise Lost("kv", s["wrong_values"], f"node {bencher} lite-kv bench: {s}")
        s = summary(bencher, res, "lite-kv bench")
        self.ops["kv_get"] += s["gets"]
        self.ops["kv_put"] += s["puts"]

    def w_mr(self, nodes):
        """WordCount of a small corpus on the workers of 2-3 nodes, compared with the
        single-process count."""
        workers = sorted(self.pick(self.rng.randint(2, len(nodes)), nodes)) if len(nodes) > 1 else nodes
        bgs = [Background(self.c, n, self.tag(f"mr{n}"), "lite-mr worker --threads 2") for n in workers]
        try:
            for b in bgs:
                b.wait_for("ready")
            master = self.pick(1, workers)[0]
            corpus, out = f"/tmp/{self.tag('corpus')}", f"/tmp/{self.tag('wc')}"
            size = self.rng.choice(["24K", "48K", "96K"])
            self.c.exec(master, f"lite-mr gen {corpus} --size {size} --seed {self.rng.randrange(1000)}",
                        timeout=OP_TIMEOUT)
            job = self.c.exec_async(master, f"lite-mr run {corpus} {out} --nodes {','.join(map(str, workers))} "
                                            f"--maps {self.rng.randint(2, 5)} --reduces {self.rng.randint(1, 3)} "
                                            f"--check --json; rc=$?; rm -f {corpus} {out} {out}.reference; "
                                            "exit $rc", timeout=OP_TIMEOUT)
            yield
            res = job.wait()
            s = last_json(res)
            if s and not s.get("identical", False):
                raise Lost("mr", 1, f"word count differs from the reference: {s}")
            s = summary(master, res, "lite-mr run")
            check(s.get("identical") and s["words"] > 0, f"word count: {s}")
            self.ops["mr_job"] += 1
            self.volume["mr_words"] += s["words"]
        finally:
            for b in bgs:
                b.close()

    def w_graph(self, nodes):
        """PageRank of a small power-law graph by one worker per node, ranks in LMRs,
        checked against the single-process run."""
        workers = self.pick(self.rng.randint(2, len(nodes)), nodes) if len(nodes) > 1 else nodes
        holders = ",".join(map(str, sorted(self.pick(self.rng.randint(1, len(nodes)), nodes))))
        iterations = self.rng.randint(3, 6)
        graph = (f"--vertices {self.rng.choice([1000, 2000, 4000])} --edges {self.rng.choice([5000, 10000, 20000])} "
                 f"--seed {self.rng.randrange(1000)} --iterations {iterations} --workers {len(workers)} "
                 f"--name {self.tag('pr')} --json")
        jobs = [(n, self.c.exec_async(n, f"lite-graph run {graph} --rank {rank}" +
                                      (f" --holders {holders}" if rank == 0 else ""), timeout=OP_TIMEOUT))
                for rank, n in enumerate(workers)]
        yield
        results = [(n, job.wait()) for n, job in jobs]
        n0, res0 = results[0]
        s = last_json(res0)
        if s and s.get("max_diff", 0) > 1e-6:
            raise Lost("graph", 1, f"ranks differ from the reference: {s}")
        for n, res in results:
            summary(n, res, "lite-graph run")
        s = summary(n0, res0, "lite-graph run")
        check(s["iterations"] == iterations and s["max_diff"] <= 1e-6 and abs(s["rank_sum"] - 1) < 1e-6,
              f"pagerank: {s}")
        self.ops["graph_run"] += 1
        self.volume["graph_iterations"] += iterations

    def w_bench(self, nodes):
        """lite-bench flows: LT_write or LT_read of KiB to an LMR on a random node."""
        jobs = []
        for _ in range(self.rng.randint(1, 2)):
            n, holder = self.pick(1, nodes)[0], self.pick(1, nodes)[0]
            cls = self.rng.choice(["", " --class bulk"])
            jobs.append((n, self.c.exec_async(n, f"lite-bench --quiet flow --holder {holder} --size "
                                                 f"{self.rng.choice(['64', '1K', '4K', '16K'])} --op "
                                                 f"{self.rng.choice(['write', 'read'])} --seconds "
                                                 f"{self.rng.randint(3, 8)}{cls}", timeout=OP_TIMEOUT)))
        yield
        for n, job in jobs:
            s = summary(n, job.wait(), "lite-bench flow")
            check(s.get("bench") == "flow" and s["ops"] > 0, f"flow: {s}")
            self.ops["bench_op"] += s["ops"]

    def w_integrity(self, nodes):
        """An LMR spread over random holders written, read back and compared piece by
        piece, across chunk boundaries, memset and memcpy (checksummed)."""
        n = self.pick(1, nodes)[0]
        holders = ",".join(map(str, sorted(self.pick(self.rng.randint(1, len(nodes)), nodes))))
        size = self.rng.randint(32 << 10, 256 << 10)
        job = self.c.exec_async(n, f"lite-selftest lmr-integrity --size {size} --holders {holders} --seed "
                                   f"{self.rng.randrange(1 << 30)} --piece {self.rng.choice(['4099', '16K', '64K'])} "
                                   "--json 2>/dev/null", timeout=OP_TIMEOUT)
        yield
        res = job.wait()
        s = last_json(res)
        if s and not s["ok"] and any("MISMATCH" in p or "differ" in p.lower() for p in s["problems"]):
            raise Lost("integrity", len(s["problems"]), f"node {n}, holders {holders}: {s}")
        s = summary(n, res, "lmr-integrity")
        check(s["ok"], f"node {n}, holders {holders}: {s}")
        self.volume["integrity_bytes"] += size
        self.ops["integrity_run"] += 1

    def w_rpc(self, nodes):
        """A server checks every request and answers a pattern; callers from 1-3 nodes
        check every reply; one-way messages are all counted in."""
        server, rid = self.pick(1, nodes)[0], 100 + self.round % 100
        callers = [(n, self.rng.randint(3, 10), self.rng.choice([False, False, True]))
                   for n in self.pick(self.rng.randint(1, len(nodes)), nodes)]
        calls = sum(count * 2 for _, count, oneway in callers if not oneway)
        messages = sum(count * 2 for _, count, oneway in callers if oneway)
        serve = Background(self.c, server, self.tag("rpc"), f"lite-selftest rpc-serve {rid} --threads 2 "
                                                            f"--limit {calls + messages}")
        try:
            serve.wait_for("ready")
            jobs = [(n, self.c.exec_async(n, f"lite-selftest rpc-call {server} {rid} --count {count} --threads 2 "
                                             f"--size {self.rng.choice(['16', '1000', '5000'])} --reply "
                                             f"{self.rng.choice(['0', '64', '3000'])}"
                                             + (" --oneway" if oneway else ""), timeout=OP_TIMEOUT))
                    for n, count, oneway in callers]
            yield
            for n, job in jobs:
                res = job.wait()
                s = last_json(res)
                if s and s["failed"] and "corrupt" in (s.get("first_error") or ""):
                    raise Lost("rpc", s["failed"], f"node {n} rpc-call: {s}")
                s = summary(n, res, "rpc-call")
                check(s["failed"] == 0, f"node {n} rpc-call: {s}")
            out = serve.wait_for("served", timeout=OP_TIMEOUT)
            line = next(ln for ln in out.splitlines() if ln.startswith("served"))
            got_calls, got_messages, corrupt = (int(w) for w in line.split()[1:6:2])
            if corrupt or got_calls != calls or got_messages != messages:
                raise Lost("rpc", corrupt + abs(calls - got_calls) + abs(messages - got_messages),
                           f"server on node {server}: {line}, want {calls} calls, {messages} messages")
            self.ops["rpc_call"] += calls
            self.ops["rpc_message"] += messages
        finally:
            serve.close()

    def w_atomics(self, nodes):
        """Fetch-and-add and compare-and-swap loops from several nodes on one word, and
        increments under LT_lock on another: both must add up exactly."""
        name, holder = self.tag("atom"), self.pick(1, nodes)[0]
        master = Background(self.c, self.pick(1, nodes)[0], name, f"lite-selftest lmr-serve {name} --size 4K "
                                                                    f"--holders {holder} --perm rw --zeroed")
        try:
            master.wait_for("ready")
            adders = [(n, f"--threads 2 --count {self.rng.randint(5, 20)}" + self.rng.choice(["", " --cas"]))
                      for n in self.pick(self.rng.randint(1, len(nodes)), nodes)]
            lockers = [(n, f"--offset 64 --threads 2 --count {self.rng.randint(3, 8)}")
                       for n in self.pick(self.rng.randint(1, len(nodes)), nodes)]
            jobs = ([("add", n, self.c.exec_async(n, f"lite-selftest atomic-count {name} --offset 8 {a}",
                                                  timeout=OP_TIMEOUT)) for n, a in adders] +
                    [("lock", n, self.c.exec_async(n, f"lite-selftest lock-count {name} {a}", timeout=OP_TIMEOUT))
                     for n, a in lockers])
            yield
            added = locked = 0
            for what, n, job in jobs:
                s = summary(n, job.wait(), f"{what}-count")
                if what == "add":
                    added += s["increments"]
                else:
                    locked += s["increments"]
            want_added = sum(2 * int(a.split()[3]) for _, a in adders)
            want_locked = sum(2 * int(a.split()[5]) for _, a in lockers)
            check(added == want_added and locked == want_locked,
                  f"{added} of {want_added} adds, {locked} of {want_locked} locked increments reported")
            n = self.pick(1, nodes)[0]
            out = self.c.exec(n, f"for o in 8 64 72; do lite-selftest atomic-read {name} --offset $o; done").out
            word, lock, counter = (int(line.split()[-1]) for line in out.strip().splitlines()[-3:])
            if word != added or counter != locked or lock != 0:
                raise Lost("atomics", abs(word - added) + abs(counter - locked) + (lock != 0),
                           f"word {word} after {added} adds, counter {counter} after {locked} locked increments, "
                           f"lock word {lock}")
            self.ops["atomic_add"] += added
            self.ops["locked_increment"] += locked
        finally:
            master.close()

    # ---- churn ----

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
            rid = 200 + self.round % 100
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

    # ---- rounds ----

    def next_workloads(self):
        out = []
        while len(out) < PER_ROUND:
            if not self.deck:
                self.deck = self.rng.sample(WORKLOADS, len(WORKLOADS))
            w = self.deck.pop()
            if w not in out:
                out.append(w)
        return out

    def next_big_fault(self):
        if not self.fault_deck:
            self.fault_deck = [None] + self.rng.sample(BIG_FAULTS, len(BIG_FAULTS))
        fault = self.fault_deck.pop()
        return None if fault == "loss" and not self.wired else fault

    def run_round(self):
        self.round += 1
        big = self.next_big_fault()
        nodes = [0, 1] if big == "leave" else [0, 1, 2]
        kinds = self.next_workloads()
        churn = ["victim"] * self.rng.randint(1, 2) + self.rng.sample(["class", "mode", "lmr"], self.rng.randint(1, 3))
        self.say(f"soak round {self.round} ({self.elapsed():.0f} s): {', '.join(kinds)}; churn "
                 f"{', '.join(churn)}{'; node 2 ' + ('leaves and rejoins' if big == 'leave' else 'behind 1 % loss') if big else ''}",
                 flush=True)
        gens = []
        loss_at = None
        try:
            if big == "loss":
                vwire.apply(self.c.wire_mgmt(2), vwire.fault_commands(["loss=1%"]))
                loss_at = time.time()
                wire = vwire.settings(self.c.wire_mgmt(2))
                if not all(vwire.base(v) == 1 for v in wire.get("loss", "0/0").split("/")):
                    self.fail(f"node 2's wire did not take the loss: {wire}")
                self.faults["loss_phase"] += 1
            # Nodes are picked at random: most workloads cross node 2's wire somewhere.
            makers = {"log": self.w_log, "kv": self.w_kv, "mr": self.w_mr, "graph": self.w_graph,
                      "bench": self.w_bench, "integrity": self.w_integrity, "rpc": self.w_rpc,
                      "atomics": self.w_atomics, "victim": self.victim, "class": self.class_churn,
                      "mode": self.mode_churn, "lmr": self.lmr_churn}
            for what in kinds + churn:
                gen = makers[what](nodes)
                if self.guarded(f"starting {what}", self.step, gen, what):
                    gens.append((what, gen))
            time.sleep(self.rng.uniform(1, 4))
            if big == "leave":
                self.guarded("node 2 leaving and rejoining", self.leave_and_rejoin)
            # Churn first (kills mid-run), then every workload is finished and checked.
            order = [g for g in gens if g[0] not in WORKLOADS] + [g for g in gens if g[0] in WORKLOADS]
            for what, gen in order:
                self.guarded(f"{what}", self.step, gen, what)
            for what, gen in gens:
                if what == "victim":
                    self.guarded(f"{what}", self.step, gen, what)
        finally:
            for what, gen in gens:
                # Only after an abort: a workload still started is stopped.
                try:
                    gen.close()
                except (Failed, Lost, CommandFailed, RuntimeError) as e:
                    self.fail(f"stopping {what}: {e}")
            if loss_at is not None:
                vwire.apply(self.c.wire_mgmt(2), ["loss 0"])
                self.faults["lossy_seconds"] += round(time.time() - loss_at)
        self.guarded("state after the round", self.wait_baseline)
        self.rounds_done += 1

    def step(self, gen, what):
        """Advances a workload or churn generator; False once it has finished."""
        try:
            next(gen)
            return True
        except StopIteration:
            return False

    def run(self, minutes, kmemleak=True):
        stop = threading.Event()

        def progress():
            while not stop.wait(PROGRESS_S):
                self.say(f"soak [{self.elapsed():5.0f} s of {minutes * 60:.0f}] round {self.round}: "
                         f"{sum(self.ops.values())} operations, {self.fault_total()} faults, "
                         f"{sum(self.corrupt.values())} corrupt or lost, {len(self.failures)} failures", flush=True)

        ticker = threading.Thread(target=progress, daemon=True)
        ticker.start()
        aborted = None
        try:
            self.start_kv()
            self.baseline = {n: self.state(n) for n in self.nodes}
            while self.elapsed() < minutes * 60:
                self.run_round()
            self.round += 1
            self.say(f"soak: {self.rounds_done} rounds in {self.elapsed():.0f} s; checking everything", flush=True)
            self.kv_final()
        except CommandFailed as e:
            aborted = str(e)
            self.fail(f"soak aborted: {e}")
        except Exception:
            aborted = traceback.format_exc()
            self.fail(f"soak aborted: {aborted}")
        finally:
            stop.set()
            for s in self.kv_servers:
                try:
                    s.close()
                except CommandFailed as e:
                    self.fail(f"closing a lite-kv server: {e}")
        if not aborted:
            self.guarded("state at the end", self.wait_all_gone)
            self.guarded("modes and class rules at the end", self.final_settings)
            self.guarded("pings between all nodes", self.pings)
            self.kmemleak_asked = kmemleak
            if kmemleak:
                self.guarded("kmemleak", self.kmemleak)
        return self.report(minutes)

    def final_settings(self):
        for n in self.nodes:
            out = self.c.exec(n, "lite-admin mode; lite-admin class list --json").out.split()
            check(out[:2] == ["mode", "sw-pri"] and out[2] == "[]", f"node {n} mode and rules at the end: {out}")

    def pings(self):
        for src in self.nodes:
            for dst in self.nodes:
                if src != dst:
                    res = self.c.exec(src, f"lite-admin ping {dst} --count 3 --size 1000 --timeout-ms 10000",
                                      check=False)
                    check(res.rc == 0, f"ping {src}->{dst}: {res.out.strip()}")

    def kmemleak(self):
        scan = ("test -e /sys/kernel/debug/kmemleak || exit 0; echo scan > /sys/kernel/debug/kmemleak; sleep 1; "
                "echo scan > /sys/kernel/debug/kmemleak; cat /sys/kernel/debug/kmemleak; echo scanned")
        jobs = [(n, self.c.exec_async(n, scan, timeout=900)) for n in self.nodes]
        for n, job in jobs:
            out = job.wait().out
            self.kmemleak_scanned = getattr(self, "kmemleak_scanned", 0) + ("scanned" in out)
            check("lite" not in out, f"node {n}: kmemleak reports leaks from lite:\n{out[:3000]}")

    def fault_total(self):
        return sum(v for k, v in self.faults.items() if k != "lossy_seconds")

    def report(self, minutes):
        splats = self.c.splats()
        corrupt = sum(self.corrupt.values())
        return {
            "minutes": minutes,
            "seed": self.seed,
            "seconds": round(self.elapsed()),
            "rounds": self.rounds_done,
            "operations": sum(self.ops.values()),
            "operations_by_kind": dict(sorted(self.ops.items())),
            "checked": dict(sorted(self.volume.items())),
            "faults": self.fault_total(),
            "faults_by_kind": dict(sorted(self.faults.items())),
            "corrupt_or_lost": corrupt,
            "corrupt_or_lost_by_kind": dict(sorted(self.corrupt.items())),
            "failures": self.failures,
            "skipped": self.skipped,
            # None: the caller scans (vmtest's kmemleak test); 0: no kmemleak in this kernel.
            "kmemleak_nodes_scanned": getattr(self, "kmemleak_scanned", 0) if getattr(self, "kmemleak_asked", True)
            else None,
            "splats": len(splats),
            "splat_lines": [f"node{n}: {line}" for n, line in splats[:40]],
            "passed": not self.failures and corrupt == 0 and not splats,
        }


def soak(cluster, minutes, seed, say=print, kmemleak=True):
    """Runs the soak for `minutes` on `cluster` (nodes 0, 1 and 2 joined; node 2 behind
    a wire without a rate for the loss phases, else they are skipped) and returns the
    report (see the module's doc); `report["passed"]` says whether all went right."""
    return Soak(cluster, seed, say).run(minutes, kmemleak=kmemleak)


def human(report):
    lines = [f"soak: {report['minutes']:g} minutes (seed {report['seed']}), {report['rounds']} rounds in "
             f"{report['seconds']} s",
             f"  operations: {report['operations']}: " +
             ", ".join(f"{k} {v}" for k, v in report["operations_by_kind"].items()),
             "  checked besides: " + ", ".join(f"{k} {v}" for k, v in report["checked"].items()),
             f"  faults injected: {report['faults']}: " +
             ", ".join(f"{k} {v}" for k, v in report["faults_by_kind"].items()),
             f"  corrupt or lost items: {report['corrupt_or_lost']}" +
             ("".join(f", {k} {v}" for k, v in report["corrupt_or_lost_by_kind"].items())),
             "  kmemleak: left to the caller" if report["kmemleak_nodes_scanned"] is None
             else f"  kmemleak: {report['kmemleak_nodes_scanned']} node(s) scanned" if report["kmemleak_nodes_scanned"]
             else "  kmemleak: not in this kernel",
             f"  splats: {report['splats']}"]
    lines += [f"    {line}" for line in report["splat_lines"]]
    lines += [f"  skipped: {s}" for s in report["skipped"]]
    lines += [f"  FAILURE {f}" for f in report["failures"]]
    lines.append("PASS" if report["passed"] else "FAIL")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="debug", choices=["release", "debug"])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--run-dir", default=str(REPO / "build" / "soak"))
    args = ap.parse_args()
    # The setup steps of the integration tests (imported here only: vmtest may import this module).
    import vmtest

    cluster = Cluster(args.run_dir)

    def stop(signum, _frame):
        cluster.down(quiet=True)
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    report = None
    started = time.time()
    try:
        cluster.up(nodes=2, variant=args.kernel, mem=1024, wires={2: (0, vwire.DEFAULT_QUEUE)})
        vmtest.two_nodes_join_with_k_rc_qps_each(cluster)
        vmtest.late_third_node_boots_and_joins_everyone(cluster)
        say(f"soak: cluster of 3 up and joined in {time.time() - started:.0f} s", flush=True)
        report = soak(cluster, args.minutes, args.seed, say=say)
    except (CommandFailed, vmtest.TestFailed, SystemExit) as e:
        say(f"soak: the cluster failed: {e}", flush=True)
        vmtest.print_console_tails(cluster)
    finally:
        cluster.down(quiet=True)
    if report is None:
        sys.exit(1)
    if not report["passed"]:
        vmtest.print_console_tails(cluster)
    report["logs"] = str(cluster.run)
    print(json.dumps(report, indent=1) if args.json else human(report), flush=True)
    sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
