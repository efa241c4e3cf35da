"""Made-up flows and a cluster that runs nothing, for the tests of the QoS benchmark
(test_qos_bench.py, test_qos_hostile.py, test_wire_queue.py)."""

import json
import shlex
from unittest import mock

from litebench.cluster.cluster import Result


def flow(start_ms, seconds, size, buckets, p50=1_000_000, p99=2_000_000, interval_ms=250, op=None,
         reply_size=None):
    """A flow JSON like lite-bench's: `buckets` are ops per interval from the start
    (an RPC flow's bytes count its reply too, as lite-bench's do)."""
    ops = sum(buckets)
    per_op = size + (reply_size or 0)
    f = {"started_unix_ms": start_ms, "seconds": seconds, "size": size, "ops": ops,
         "mb_s": ops * per_op / seconds / 1e6, "latency": {"median_ns": p50, "mean_ns": p50, "p99_ns": p99},
         "timeline": [{"t": i * interval_ms / 1000, "ops": n, "mb_s": n * per_op / (interval_ms / 1000) / 1e6,
                       "p50_ns": p50, "p99_ns": p99} for i, n in enumerate(buckets) if n]}
    if op:
        f["op"] = op
    if reply_size is not None:
        f["reply_size"] = reply_size
    return f


MB = 1_000_000


def latency_flows(start_ms, p99s, seconds=1.0, ops=100):
    """The three latency flows of one phase, {op: flow}, with the given p99 each."""
    sizes = {"write": (16, None), "rpc": (16, 64), "read": (64, None)}
    return {op: flow(start_ms, seconds, sizes[op][0], [ops // 4] * 4, p50=p99 // 2, p99=p99, op=op,
                     reply_size=sizes[op][1]) for op, p99 in p99s.items()}


class FakeCluster:
    """Runs nothing: answers lite-bench flow commands with made-up flow JSON, and
    records what ran where and in which order."""

    def __init__(self, fail_op=None):
        self.commands, self.fail_op, self.clock = [], fail_op, 1_000_000
        self.meta = {}

    def exec(self, n, script, timeout=120, check=True):
        self.commands.append((n, script))
        return Result(0, json.dumps({"mode": "sw-pri", "latency_active": True}) if "stats --json" in script else "")

    def exec_async(self, n, script, timeout=900):
        self.commands.append((n, script))
        if "stats --json" in script:
            job = mock.Mock()
            job.wait.return_value = Result(0, json.dumps(STATS) + "\n")
            return job
        if "/proc/stat" in script:
            job = mock.Mock()
            job.wait.return_value = Result(0, PROC_STAT)
            return job
        args = shlex.split(script)
        if args[0] == "sh":
            args = shlex.split(args[2].split("&& { ", 1)[1].split(";", 1)[0])
        opt = {k: v for k, v in zip(args, args[1:]) if k.startswith("--")}
        op, size, seconds = opt["--op"], int(opt["--size"]), float(opt["--seconds"])
        self.clock += 10
        f = flow(self.clock, seconds, size, [10] * int(seconds * 4), op=op,
                 reply_size=int(opt["--reply-size"]) if "--reply-size" in opt else None)
        job = mock.Mock()
        job.wait.return_value = Result(1, "lite-bench: error: no server") if op == self.fail_op and \
            "--class" not in opt else Result(0, "progress\n" + json.dumps(f) + "\n")
        return job


# The holder's /proc/stat around a phase: 1000 ticks, of which 600 idle, 200 softirq.
PROC_STAT = "cpu  100 0 200 1000 0 0 0 0 0 0\ncpu  200 0 300 1600 0 0 200 0 0 0\n"
HOLDER_CPU = {"busy": 0.4, "softirq": 0.2, "irq": 0.0, "system": 0.1, "user": 0.1}
# `lite-admin stats --json` over a phase: the kernel's phase means of LT_writes only.
STATS = {"mode": "sw-pri", "latency_phases": [
    {"op": "write", "ops": 40, "before_post_ns": 1_000, "in_network_ns": 2 * MB, "wakeup_ns": 100_000},
    {"op": "read", "ops": 0, "before_post_ns": 0, "in_network_ns": 0, "wakeup_ns": 0}]}
FAIL_LOOP = {"bench": "fail-loop", "calls": 5000, "calls_per_s": 1000.4, "unexpected": 0,
             "kinds": {"unknown handle": {"calls": 700, "errno": "EBADF"}}}
LMR_MANY = ("many: 1000 LMRs of 4096 bytes: malloc 3.615 s (3615.0 us each); first and last written\n"
            "holding 1000 LMRs for 3 s\n")


class HostileFakeCluster(FakeCluster):
    """Also answers the hostile tenant: lite-selftest's fail-loop and lmr-many as they
    print, lite-bench flows as FakeCluster does."""

    def exec_async(self, n, script, timeout=900):
        if "lite-selftest" not in script:
            return super().exec_async(n, script, timeout)
        self.commands.append((n, script))
        job = mock.Mock()
        job.wait.return_value = Result(0, json.dumps(FAIL_LOOP) + "\n" if "fail-loop" in script else LMR_MANY)
        return job
