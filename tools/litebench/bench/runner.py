"""Running the benchmark's steps on the cluster (tools/bench.py): `Bench` runs a
command with its progress shown live, a tool for its JSON, a perftest pair, and
each step guarded, its failure recorded."""

import threading
import time

from litebench.bench.output import last_json
from litebench.cluster.cluster import CommandFailed, guest_address
from litebench.cluster.guest import PROVIDERS

NODES = 3
CLIENT, SERVER = 0, 1
PERFTEST_PORT = 18515
READ_PHASES_PORT = 18517


# ---- running things on the cluster ----

class Bench:
    def __init__(self, c, args):
        self.c, self.args = c, args
        self.errors = []
        self.step = 0
        self.total = 0
        self.seq = 0

    def progress(self, label):
        self.step += 1
        print(f"[{self.step}/{self.total}] {label} ...", flush=True)

    def fail(self, label, err):
        msg = str(err).strip()
        print(f"      FAILED: {msg[-1500:]}", flush=True)
        self.errors.append({"step": label, "error": msg[-4000:]})

    def run_live(self, node, command, timeout):
        """Runs `command` on `node` with its stderr (progress) shown as it arrives;
        returns (rc, stdout, stderr)."""
        self.seq += 1
        name = f"progress-{node}-{self.seq}.log"
        path = self.c.run / name
        path.unlink(missing_ok=True)
        cid = self.c.submit(node, f"{command} 2>/run/lite/{name}", timeout)
        box = {}

        def wait():
            try:
                box["res"] = self.c.collect(node, cid, timeout)
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                box["err"] = e

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        pos, partial = 0, ""
        while True:
            waiter.join(0.5)
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                pos += len(chunk)
                partial += chunk.decode(errors="replace")
                *lines, partial = partial.split("\n")
                for line in lines:
                    if line.strip():
                        print(f"      {line}", flush=True)
            if not waiter.is_alive():
                break
        if partial.strip():
            print(f"      {partial}", flush=True)
        if "err" in box:
            raise box["err"]
        stderr = path.read_text(errors="replace") if path.exists() else ""
        return box["res"].rc, box["res"].out, stderr

    def tool_json(self, node, command, timeout):
        rc, out, err = self.run_live(node, command, timeout)
        data = last_json(out)
        if rc != 0 or data is None:
            raise CommandFailed(f"`{command}` exited {rc}: {(err + out).strip()[-1500:]}")
        return data

    def served(self, name, server, client, port, retry_on):
        """Runs `server` on SERVER in the background until `client` on CLIENT is done;
        returns the client's output. `retry_on`: what the client prints when it came
        before the server listened."""
        c = self.c
        c.exec(SERVER, f"{server} >/run/lite/{name}-server.log 2>&1 & echo $! >/tmp/bench-server.pid")
        # Until the server listens (busybox netstat; a fixed pause without it).
        c.exec(SERVER, f"command -v netstat >/dev/null || {{ sleep 3; exit 0; }}; "
                       f"for i in $(seq 1 300); do netstat -ltn 2>/dev/null | grep -q ':{port} ' && exit 0; "
                       f"sleep 0.2; done; exit 1", timeout=120, check=False)
        try:
            for attempt in range(3):
                res = c.exec(CLIENT, f"{client} {guest_address(SERVER)}", timeout=self.args.step_timeout,
                             check=False)
                if res.rc == 0 or retry_on not in res.out or attempt == 2:
                    break
                time.sleep(3)
        finally:
            c.exec(SERVER, "kill $(cat /tmp/bench-server.pid) 2>/dev/null; true", check=False)
        if res.rc != 0:
            raise CommandFailed(f"{name} exited {res.rc}: {res.out.strip()[-1500:]}")
        return res.out

    def perftest(self, tool, size, iters, flags=""):
        """One perftest run: server on SERVER in the background, client on CLIENT."""
        # siw's QPs connect only through the RDMA CM (-R); rxe's GID 1 is its RoCE v2 IPv4 one.
        device = PROVIDERS[self.args.provider] + (" -R" if self.args.provider == "siw" else " -x 1")
        common = f"-d {device} -s {size} -n {iters} -F {flags + ' ' if flags else ''}-p {PERFTEST_PORT}"
        return self.served(f"{tool}-{size}", f"{tool} {common}", f"{tool} {common}", PERFTEST_PORT,
                           "Couldn't connect")

    def native_read_phases(self, size, iters):
        """The phases of `iters` native RDMA READs of `size` bytes (lite-read-phases,
        RoCE only): {"post", "posted_to_completion", "whole"}, each {"mean_ns", ...}."""
        common = f"--device {PROVIDERS[self.args.provider]} --port {READ_PHASES_PORT}"
        out = self.served(f"lite-read-phases-{size}", f"lite-read-phases --server {common}",
                          f"lite-read-phases {common} --size {size} --iters {iters}", READ_PHASES_PORT,
                          "Connection refused")
        data = last_json(out)
        if data is None:
            raise CommandFailed(f"lite-read-phases -s {size} printed no result: {out.strip()[-1500:]}")
        return data

    def guarded(self, label, fn):
        """Runs one step; a failure is recorded and the run goes on (unless a node died)."""
        self.progress(label)
        t0 = time.time()
        try:
            summary = fn()
            print(f"      {summary} ({time.time() - t0:.0f} s)", flush=True)
        except (CommandFailed, ValueError, KeyError, TypeError) as e:
            self.fail(label, e)
        for n in (CLIENT, SERVER):
            if not self.c.alive(n):
                raise CommandFailed(f"node {n} died during `{label}` (console: {self.c.run}/node{n}.console)")
