"""The scale suite (make test-scale): eight nodes on one cluster. All join with K RC
QPs to each of the seven others and every pair pings; an LMR striped over all eight
makes a checksummed round trip; a multicast RPC reaches the seven others; eight
processes on eight nodes pass barriers; a killed node reboots and rejoins."""

import pytest

from litebench.cluster.cluster import Background
from litebench.vmtests.harness import check, check_no_lmr_state, integrity, json_summary, ping

NODES = list(range(8))


def others(n):
    return [m for m in NODES if m != n]


@pytest.mark.scale
def test_eight_nodes_join_with_k_qps_to_each_other(c):
    c.join(NODES, timeout=300)
    for n in NODES:
        st = c.status(n)
        qps = [q["state"] for p in st["peers"] for q in p["qps"]]
        check(sorted(p["id"] for p in st["peers"]) == others(n), f"node {n}'s peers: {st['peers']}")
        check(len(qps) == st["qps_per_peer"] * (len(NODES) - 1) and set(qps) == {"RTS"},
              f"node {n}: {len(qps)} QPs, want K x (N-1) = {st['qps_per_peer']} x {len(NODES) - 1}, all RTS")
    for src in NODES:
        for dst in others(src):
            ping(c, src, dst, count=2)


@pytest.mark.scale
def test_lmr_striped_over_eight_holders_round_trips(c):
    integrity(c, 3, 32 << 20, ",".join(map(str, NODES)), 31, 900)


@pytest.mark.scale
def test_multicast_rpc_reaches_seven_nodes(c):
    servers = [Background(c, n, f"mc{n}", "lite-selftest rpc-serve 13") for n in others(0)]
    for s in servers:
        s.wait_for("ready")
    try:
        out = c.exec(0, f"lite-selftest rpc-multicast {','.join(map(str, others(0)))} 13", timeout=300).out
        check(all(f"{n}: ok" in out for n in others(0)), f"multicast to 7 nodes: {out}")
    finally:
        for s in servers:
            s.close()


@pytest.mark.scale
def test_barrier_of_eight_processes_on_eight_nodes(c):
    words = Background(c, 5, "scalewords", "lite-selftest lmr-serve scalewords --size 4K --holders 5 --perm rw --zeroed")
    words.wait_for("ready")
    try:
        rounds = "lite-selftest barrier-rounds scalewords --offset 32 --participants 8 --rounds 3 --skew-ms 200"
        jobs = [(n, c.exec_async(n, rounds, timeout=600)) for n in NODES]
        for n, job in jobs:
            summary = json_summary(n, job.wait(), "barrier-rounds")
            check(summary["rounds"] == 3 and summary["left_early"] == 0, f"node {n} barriers: {summary}")
    finally:
        words.close()
    check_no_lmr_state(c, nodes=NODES)


@pytest.mark.scale
@pytest.mark.fails_nodes
def test_killed_node_reboots_and_rejoins_the_seven(c):
    c.kill_node(6)
    for n in others(6):
        check(c.exec(n, "lite-admin wait --timeout-s 120 --down 6", timeout=150, check=False).rc == 0,
              f"node {n} did not see node 6 down")
    c.boot_node(6, 300)
    c.load_module(6)
    c.start_agent(6)
    c.wait_connected(NODES, timeout=300)
    for dst in others(6):
        ping(c, 6, dst, count=2)
    integrity(c, 6, 8 << 20, ",".join(map(str, NODES)), 37, 900)
