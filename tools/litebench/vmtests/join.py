"""The cluster's set-up steps: the first two nodes join with their full set of RC
QPs to each other, then node 2 boots late and joins everyone. Every suite's setup
tests (bringup.py) and the soak (tools/soak.py) run them on a cluster of two booted
nodes."""

from litebench.vmtests.harness import check, ping


def join_two_nodes(c):
    """Nodes 0 and 1 load lite.ko, node 0 runs the manager, both join: each sees the
    other with every QP ready to send, and they ping."""
    for n in (0, 1):
        c.load_module(n)
    c.start_manager(0)
    for n in (0, 1):
        c.start_agent(n)
    c.wait_connected([0, 1], timeout=90)
    for n in (0, 1):
        st = c.status(n)
        check(st["node_id"] == n, f"node {n} got id {st['node_id']}")
        for p in st["peers"]:
            states = [q["state"] for q in p["qps"]]
            check(len(states) == st["qps_per_peer"] and set(states) == {"RTS"},
                  f"node {n} peer {p['id']}: QPs {states}")
    ping(c, 0, 1)


def join_third_node(c):
    """Node 2 boots, loads lite.ko and joins: every node sees every other one."""
    c.boot_node(2, 300)
    c.load_module(2)
    c.start_agent(2)
    c.wait_connected([0, 1, 2], timeout=90)
