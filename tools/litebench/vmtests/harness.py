"""What the integration tests (tools/vmtest.py) share: TestFailed and check, the
guests' console tails, and the helpers tests of several areas use (pings, integrity
runs, checks that no LMR or RPC state is left, waiting for peers, restarting the
manager)."""

import json
import time

from litebench.cluster.cluster import Background


def print_console_tails(cluster, lines=15):
    """The last kernel messages of every guest: a failed run's logs may not outlive it (CI)."""
    for n in cluster.meta.get("nodes", []):
        tail = cluster.console(n).splitlines()[-lines:]
        print(f"  node{n} console, last {len(tail)} lines:\n" + "\n".join(f"    {line}" for line in tail), flush=True)


class TestFailed(Exception):
    __test__ = False  # an exception, not a class of tests for pytest to collect


def check(cond, msg):
    if not cond:
        raise TestFailed(msg)


def answer(bg, command, timeout=120):
    """Sends `command` to a holding lite-selftest (a cluster.Background) and returns
    its one-line answer."""
    before = len(bg.output().splitlines())
    bg.send(command)
    deadline = time.time() + timeout
    while True:
        lines = bg.output().splitlines()
        if len(lines) > before:
            return lines[before].strip()
        check(time.time() < deadline, f"node {bg.n} {bg.tag}: no answer to {command}")
        time.sleep(0.3)


def peers_by_id(c, n):
    return {p["id"]: p for p in c.status(n)["peers"]}


def ping(c, src, dst, count=20, check_ok=True):
    res = c.exec(src, f"lite-admin ping {dst} --count {count} --timeout-ms 10000 --json", check=False)
    if check_ok and res.rc != 0:
        raise TestFailed(f"ping {src}->{dst} failed: {res.out.strip()}")
    return res


def ping_every_pair(c, nodes, what):
    """Every pair of `nodes` pings both ways, and node 0 pings node 1 with a full
    mailbox slot (4080 B); `what` names the path in a failure."""
    for src in nodes:
        for dst in nodes:
            if src != dst:
                ping(c, src, dst, count=5)
    res = c.exec(0, "lite-admin ping 1 --count 10 --size 4080 --timeout-ms 10000 --json", check=False)
    check(res.rc == 0 and '"size":4080' in res.out, f"4080 B ping over {what}: {res.out.strip()}")


def kmemleak(c, n):
    return c.exec(n, "test -e /sys/kernel/debug/kmemleak && echo yes || echo no").out.strip() == "yes"


def wait_peers(c, n, connected=(), down=(), timeout=90):
    args = ""
    if connected:
        args += " --connected " + ",".join(map(str, connected))
    if down:
        args += " --down " + ",".join(map(str, down))
    res = c.exec(n, f"lite-admin wait --timeout-s {timeout}{args}", timeout=timeout + 30, check=False)
    check(res.rc == 0, f"node {n}: {res.out.strip()}")


def lmr_counts(c, n):
    return c.status(n)["memory"]


def qos_stats(c, n):
    return json.loads(c.exec(n, "lite-admin stats --json --interval-ms 10").out)


def by_class(stats):
    return {k["class"]: k for k in stats["classes"]}


def class_ops(c, n):
    return by_class(qos_stats(c, n))


def check_no_lmr_state(c, nodes=(0, 1, 2)):
    """Every LMR, mapping, byte of held memory and lock or barrier queue is gone on `nodes` (waits a little:
    a killed process's file is released asynchronously)."""
    deadline = time.time() + 60
    while True:
        counts = {n: lmr_counts(c, n) for n in nodes}
        if all(m["mastered"] == m["mappings"] == m["held_bytes"] == m["lock_queued"] == m["barrier_queued"] == 0
               for m in counts.values()):
            return
        check(time.time() < deadline, f"LMR state left behind: {counts}")
        time.sleep(1)


def integrity(c, node, size, holders, seed, timeout, others_live=False):
    """lmr-integrity on `node`; afterwards no LMR state is left, unless `others_live`
    (LMRs the caller keeps are live)."""
    out = c.exec(node, f"lite-selftest lmr-integrity --size {size} --holders {holders} --seed {seed} 2>/dev/null",
                 timeout=timeout).out
    check(": ok," in out, out[-2000:])
    print("   ", out.strip().splitlines()[-1], flush=True)
    if not others_live:
        check_no_lmr_state(c)


def json_summary(n, res, what):
    lines = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    check(res.rc == 0 and lines, f"node {n} {what}: {res.out[-2000:]}")
    return json.loads(lines[-1])


def flow_json(n, res, what):
    """The JSON summary of a `lite-bench flow` on node `n`."""
    data = json_summary(n, res, what)
    check(data.get("bench") == "flow", f"{what}: {data}")
    return data


def check_no_rpc_state(c, nodes=(0, 1, 2)):
    """No server, ring, call or queued request is left on `nodes` (a killed process's
    file is released asynchronously, and a client forgets a dead binding at its next
    bind, so only rings, servers, calls and requests are checked)."""
    deadline = time.time() + 60
    while True:
        counts = {n: c.status(n)["rpc"] for n in nodes}
        if all(r["servers"] == 0 and r["rings"] == 0 and r["calls"] == 0 and r["requests"] == 0
               for r in counts.values()):
            return
        check(time.time() < deadline, f"RPC state left behind: {counts}")
        time.sleep(1)


def rpc_calls(c, node, args, timeout=600):
    """Runs `lite-selftest rpc-call` on `node`; returns its JSON summary."""
    res = c.exec(node, f"lite-selftest rpc-call {args}", timeout=timeout, check=False)
    lines = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    check(res.rc == 0 and lines, f"node {node} rpc-call {args}: {res.out.strip()[-2000:]}")
    return json.loads(lines[-1])


def call_left_waiting(c, caller, server, rpc_id, tag):
    """A call from node `caller` waiting at a server on node `server` that never
    answers, expected to fail with EHOSTDOWN: (the server, the caller's job). Its
    timeout is the longest a call may have, so that only the server's node going
    down can end it, however long the test takes to get there."""
    serve = Background(c, server, tag, f"lite-selftest rpc-serve {rpc_id} --delay-ms 600000")
    serve.wait_for("ready")
    job = c.exec_async(caller, f"lite-selftest rpc-call {server} {rpc_id} --count 1 --expect-error EHOSTDOWN "
                               "--timeout-ms 600000")
    deadline = time.time() + 120
    while c.status(caller)["rpc"]["calls"] < 1:
        check(time.time() < deadline, f"the call never left node {caller}")
        time.sleep(0.5)
    return serve, job


def restart_manager(c, nodes, dead_after_ms=None):
    """Restarts the manager on node 0 and waits until it adopted `nodes` again."""
    c.exec(0, "pid=$(cat /run/lite-manager.pid) && kill $pid && while kill -0 $pid 2>/dev/null; do sleep 0.1; done")
    c.start_manager(0, dead_after_ms)
    manager_log = c.run / "manager.log"
    deadline = time.time() + 60
    while not all(f"node {n} (epoch" in manager_log.read_text(errors="replace") for n in nodes):
        check(time.time() < deadline, f"manager did not readopt nodes {nodes}:\n{manager_log.read_text()}")
        time.sleep(0.5)
