"""The soak's checks of the nodes (tools/soak.py): LITE's state back at its
baseline after each round and all gone at the end, modes and class rules reset,
pings between all nodes, and kmemleak."""

import json
import time

from litebench.soak.common import Failed, check

STATE_KEYS = ("mastered", "mappings", "held_bytes", "lock_queued", "barrier_queued")


class Checks:
    """The checks of the nodes' state, a part of `Soak`."""

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
