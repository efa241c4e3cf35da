"""Integration tests on Soft-iWARP (siw), the kernel's other software RDMA provider:
no write-with-immediate, no atomics, and QPs that reach RTS only through the RDMA
CM. Near the end of the full suite every node swaps rxe0 for siw0 and rejoins (one
boot serves both providers); the connections then go through the RDMA CM, messages
and RPC as WRITE + SEND, atomics, locks and barriers through the holder's kernel,
and the services' own tests run unchanged. A partitioned node is declared down and
comes back through new CM connections, as on rxe.

Left out here, for time: the big suite (1 GiB round trips), the link suite's
retry-budget and faulty-link rounds and the fuzz slice; `make test-siw` runs the
link suite on siw. On the debug kernel only: Debian's stock kernel has no siw."""

import pytest

from litebench.vmtests import link, lmr, rpc
from litebench.vmtests.harness import check, ping_every_pair

NODES = (0, 1, 2)


def switch_provider(c, nodes, old, new):
    """Takes `nodes` out of the cluster, replaces their RDMA device `old` by `new`
    (`rdma link`), loads lite.ko again and waits until they see each other."""
    for n in nodes:
        c.exec(n, "lite-admin leave 2>/dev/null; for i in $(seq 300); do "
                  "! grep -q '^lite ' /proc/modules && break; rmmod lite 2>/dev/null; sleep 0.2; done", timeout=120)
    for n in nodes:
        c.exec(n, f"rdma link delete {old}0 && modprobe {new} && rdma link add {new}0 type {new} netdev eth0 "
                  "&& insmod /lite/lite.ko")
    for n in nodes:
        c.start_agent(n)
    c.wait_connected(list(nodes), timeout=180)


@pytest.mark.sanitizer_run
def test_every_node_rejoins_on_siw_through_the_rdma_cm(c):
    switch_provider(c, NODES, "rxe", "siw")
    for n in NODES:
        st = c.status(n)
        caps = st["device_caps"]
        check(st["device"] == "siw0" and caps["transport"] == "iwarp" and caps["cm_connect"]
              and not caps["write_imm"] and caps["max_sge_rd"] == 1, f"node {n}'s device: {st}")
        check((caps["messages"], caps["atomics_by"]) == ("write+send", "holder"), f"node {n}'s paths: {caps}")
        for p in st["peers"]:
            states = [q["state"] for q in p["qps"]]
            check(len(states) == st["qps_per_peer"] and set(states) == {"RTS"}, f"node {n} peer {p['id']}: {states}")
    out = c.exec(0, "dmesg").out
    check("siw0: its QPs connect through the RDMA CM" in out, f"node 0's kernel log:\n{out[-2000:]}")
    ping_every_pair(c, NODES, "siw")


@pytest.mark.sanitizer_run
def test_services_run_unchanged_on_siw(c):
    rpc.test_rpc_calls_from_many_processes_and_threads_are_checked(c)
    rpc.test_rpc_one_way_messages_all_arrive(c)
    lmr.test_lmr_permissions_are_checked_by_the_master(c)
    lmr.test_atomics_from_every_node_add_up_exactly(c)
    lmr.test_locks_and_barriers_from_every_node(c)


@pytest.mark.sanitizer_run
@pytest.mark.fails_nodes
def test_partitioned_node_reconnects_through_the_rdma_cm(c):
    link.test_partitioned_node_is_declared_down_and_rejoins_after_the_heal(c)
