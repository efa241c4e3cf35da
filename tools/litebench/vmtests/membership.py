"""Integration tests of membership (tools/vmtest.py): rmmod refused while in use, a
node leaving and rejoining, a node killed mid-operations, a multicast with one node
down, the manager restarted, the killed node rebooting and rejoining."""

import time

import pytest

from litebench.cluster.cluster import Background
from litebench.vmtests.harness import (
    answer, call_left_waiting, check, check_no_lmr_state, check_no_rpc_state, integrity, json_summary, lmr_counts,
    peers_by_id, ping, restart_manager, wait_peers)


def test_rmmod_refused_while_dev_lite_is_open(c):
    res = c.exec(1, "rmmod lite", check=False)
    check(res.rc != 0, f"rmmod succeeded while the agent holds /dev/lite: {res}")
    check("lite " in c.exec(1, "cat /proc/modules").out, "module gone after a refused rmmod")
    ping(c, 1, 2, count=5)


def test_leaving_node_is_torn_down_and_can_rejoin(c):
    epoch = c.status(2)["epoch"]
    c.exec(2, "lite-admin leave")
    check(c.status(2)["node_id"] is None, "node 2 still joined after leave")
    for n in (0, 1):
        wait_peers(c, n, down=[2])
        check(not peers_by_id(c, n)[2]["qps"], f"node {n} kept QPs to node 2")
    res = ping(c, 0, 2, check_ok=False)
    check(res.rc != 0 and "down" in res.out, f"ping to a node that left: {res.out}")
    ping(c, 0, 1)
    c.start_agent(2)
    c.wait_connected([0, 1, 2], timeout=90)
    check(c.status(2)["epoch"] > epoch, "a rejoined node must be a new incarnation")
    ping(c, 2, 1, count=5)


@pytest.mark.sanitizer_run
def test_a_holder_that_rejoins_is_reached_by_no_old_mapping(c):
    # Node 1 masters an LMR whose memory node 2 holds; node 0 maps it. Node 2 leaves
    # and comes back as a new incarnation, which may reuse that memory for anything
    # (issue 47: an atomic landed in a freed maple node). Every old handle must fail,
    # the master's own included, and the LMR is gone: nothing reaches node 2's memory.
    serve = Background(c, 1, "staleserve", "lite-selftest lmr-serve stale --size 64K --holders 2")
    serve.wait_for("ready")
    client = Background(c, 0, "staleclient", "lite-selftest lmr-client stale --perm rw --hold")
    client.wait_for("mapped")
    # And an LMR node 2 masters, whose process exits while node 2 is out of the
    # cluster: its LMRs went with the incarnation, none stays behind in the status.
    leftover = Background(c, 2, "leftover", "lite-selftest lmr-serve leftover --size 64K --holders 0")
    leftover.wait_for("ready")
    for bg in (serve, client):
        for command in ("atomic", "write"):
            got = answer(bg, command)
            check(got == "ok", f"node {bg.n}: {command} before the holder left: {got}")
    c.exec(2, "lite-admin leave")
    for n in (0, 1):
        wait_peers(c, n, down=[2])
    leftover.close()
    c.start_agent(2)
    c.wait_connected([0, 1, 2], timeout=90)
    for bg in (serve, client):
        for command in ("atomic", "write", "read"):
            got = answer(bg, command)
            check(got in ("EHOSTDOWN", "EIDRM"), f"node {bg.n}: {command} through an old handle after its "
                                                 f"holder rejoined: {got}, want EHOSTDOWN or EIDRM")
    res = c.exec(0, "lite-selftest lmr-client stale --perm r --expect-error ENOENT", check=False)
    check(res.rc == 0, f"the LMR whose holder left can still be mapped: {res.out}")
    serve.close()
    client.close()
    check_no_lmr_state(c)
    print("    atomics, writes and reads through 2 old handles: EHOSTDOWN/EIDRM; the LMR is freed", flush=True)


# What a node killed mid-operation may cost its peers: the manager's dead-after (8 s,
# 20 s on the debug kernel) for it to be declared down, plus one round of the
# caller's own wait.
CRASH_BOUND_S = 60


def crash_mid_operations(c, caller, waiter, barriers, writer):
    """Kills node 1 once `writer` and `barriers` are under way; checks that each
    operation the others had in flight with it ends cleanly within CRASH_BOUND_S."""
    deadline = time.time() + 120
    while lmr_counts(c, 0)["mastered"] < 1 or lmr_counts(c, 2)["barrier_queued"] < 1:
        check(time.time() < deadline, f"the write and the barriers never started: {c.status(0)}")
        time.sleep(0.5)
    time.sleep(2)
    c.kill_node(1)
    killed = time.time()
    for n in (0, 2):
        wait_peers(c, n, down=[1])
    print(f"    node 1 declared down {time.time() - killed:.1f} s after the kill", flush=True)
    out = caller.wait(timeout=120).out
    check('"failed":0' in out, f"a call to a node that died: {out}")
    res = writer.wait(timeout=CRASH_BOUND_S)
    check(res.rc != 0 and any(e in res.out for e in ("EHOSTDOWN", "ENETDOWN", "ETIMEDOUT", "EIO")),
          f"a 64 MiB write into a dead node's memory: rc {res.rc}: {res.out[-1500:]}")
    check("differ" not in res.out, f"wrong bytes seen while a holder died: {res.out[-1500:]}")
    took = {"write": time.time() - killed}
    locked = json_summary(0, waiter.wait(timeout=CRASH_BOUND_S), "lock-count")
    check(locked["increments"] == 1 and locked["taken_from_dead_holders"] == 1,
          f"a lock held by a dead node must pass on with EOWNERDEAD: {locked}")
    took["lock"] = time.time() - killed
    for n in (0, 2):
        res = barriers[n].wait(timeout=CRASH_BOUND_S)
        check(res.rc != 0 and "ETIMEDOUT" in res.out, f"node {n}'s barrier with a dead participant: {res.out[-800:]}")
    took["barrier"] = time.time() - killed
    for what, seconds in took.items():
        check(seconds <= CRASH_BOUND_S, f"the {what} took {seconds:.0f} s to fail after the kill")
    print("    after the kill: " + ", ".join(f"{what} failed cleanly in {s:.1f} s" for what, s in took.items()),
          flush=True)


@pytest.mark.sanitizer_run
@pytest.mark.fails_nodes
def test_killed_node_is_marked_down_and_others_keep_working(c):
    # Node 1 dies (qemu SIGKILL) while: a call from node 0 waits at its slow server;
    # node 0 writes 64 MiB into an LMR node 1 holds; a process of node 1 holds a lock
    # whose word node 2 holds, which node 0 waits for; and node 1 is inside barrier
    # rounds with nodes 0 and 2. Each of the others must get a clean error (or, for
    # the lock, the lock with EOWNERDEAD) within the bound; nobody hangs.
    serve, caller = call_left_waiting(c, 0, 1, 12, "doomed")
    words = Background(c, 2, "crashwords", "lite-selftest lmr-serve crashwords --size 4K --holders 2 --perm rw "
                                           "--zeroed")
    words.wait_for("ready")
    holder = Background(c, 1, "crashlock", "lite-selftest lock-hold crashwords --offset 0")
    holder.wait_for("locked")
    waiter = c.exec_async(0, "lite-selftest lock-count crashwords --offset 0 --count 1", timeout=600)
    rounds = "lite-selftest barrier-rounds crashwords --offset 64 --participants 3 --rounds 1000000 --timeout-ms 20000"
    barriers = {n: c.exec_async(n, rounds, timeout=600) for n in (0, 1, 2)}
    writer = c.exec_async(0, "lite-selftest lmr-integrity --size 64M --holders 1 --seed 19", timeout=600)
    try:
        crash_mid_operations(c, caller, waiter, barriers, writer)
    finally:
        words.close()
        for n in (0, 2):
            barriers[n].wait(timeout=CRASH_BOUND_S)
        if c.alive(1):
            holder.kill()
    res = ping(c, 2, 1, check_ok=False)
    check(res.rc != 0 and "down" in res.out, f"ping to a dead node: {res.out}")
    ping(c, 0, 2)
    ping(c, 2, 0)
    check_no_lmr_state(c, nodes=(0, 2))


@pytest.mark.sanitizer_run
@pytest.mark.fails_nodes
def test_rpc_multicast_reports_each_node_with_one_down(c):
    servers = [Background(c, n, f"mc{n}", "lite-selftest rpc-serve 11") for n in (0, 2)]
    for s in servers:
        s.wait_for("ready")
    out = c.exec(2, "lite-selftest rpc-multicast 0,1,2 11", timeout=300).out
    check("0: ok" in out and "1: EHOSTDOWN" in out and "2: ok" in out, f"multicast with node 1 down: {out}")
    for s in servers:
        s.close()
    check_no_rpc_state(c, nodes=(0, 2))


@pytest.mark.sanitizer_run
@pytest.mark.fails_nodes
def test_restarted_manager_rebuilds_from_the_nodes(c):
    restart_manager(c, (0, 2))
    for n in (0, 2):
        st = c.status(n)
        check(st["node_id"] == n, f"node {n} lost its id after a manager restart")
    ping(c, 0, 2)


@pytest.mark.sanitizer_run
@pytest.mark.fails_nodes
def test_killed_node_reboots_and_rejoins(c):
    # The node killed above boots again with the same id: the manager makes it a new
    # incarnation, every pair gets fresh QPs, and data moves through it again.
    c.boot_node(1, 300)
    c.load_module(1)
    c.start_agent(1)
    c.wait_connected([0, 1, 2], timeout=120)
    epochs = {n: c.status(n)["epoch"] for n in (0, 1, 2)}
    check(epochs[1] > max(epochs[0], epochs[2]), f"the rebooted node must be the newest incarnation: {epochs}")
    for src, dst in ((1, 0), (1, 2), (0, 1), (2, 1)):
        ping(c, src, dst, count=5)
    integrity(c, 1, 1 << 20, "0,1,2", 23, 600)
