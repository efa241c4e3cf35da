"""Integration tests on Soft-iWARP (siw), the kernel's other software RDMA provider:
no write-with-immediate, no atomics, and QPs that reach RTS only through the RDMA
CM. Near the end of the full suite every node swaps rxe0 for siw0 and rejoins (one
boot serves both providers); the connections then go through the RDMA CM, messages
and RPC as WRITE + SEND, atomics, locks and barriers through the holder's kernel,
and the services' own tests run unchanged. A node that leaves ends its CM
connections and comes back over new ones.

Left out here, for time: the big suite (1 GiB round trips), the link suite's
partition, retry-budget and faulty-link rounds, the fuzz slice and the LMR permission test
(the master's checks travel as the RPC tests' messages do); `make test-siw` runs
the link suite on siw. On the debug kernel only: Debian's stock kernel has no siw."""

import pytest

from litebench.vmtests import link, lmr, membership, rpc
from litebench.vmtests.harness import check, integrity, ping_every_pair

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
    # The master's permission checks travel as these messages do: not repeated here.
    # A reply written into the caller's buffer (WRITE, then the fencing READ), a
    # request too large to ride in its record, the largest inline reply.
    rpc.test_rpc_calls_from_many_processes_and_threads_are_checked(c, sizes=((16, 8192), (5000, 0), (16, 4096)))
    rpc.test_rpc_one_way_messages_all_arrive(c)
    lmr.test_atomics_from_every_node_add_up_exactly(c)
    lmr.test_locks_and_barriers_from_every_node(c)


# The test kernels' siw fails the CRC of one Read Response on demand, once, when at
# least this many Reads wait behind it (tools/kernel/patches/siw-fail-read-response.patch).
READS_BEHIND = 4
FAIL_READ_RESPONSE = "/sys/module/siw/parameters/fail_read_response"


@pytest.mark.fails_nodes
@pytest.mark.sanitizer_run
def test_a_failed_read_response_flushes_the_reads_behind_it(c):
    # Node 0 reads back 256 KiB that node 2 holds, 4 KiB per Read (siw's max_sge_rd
    # is 1) with up to 15 in flight, and one Read Response fails MPA's CRC while
    # Reads wait behind it: siw ends the connection and completes that Read with an
    # error. The Reads behind it must be flushed, or the reader waits for them
    # forever (docs/reliability.md, "On iWARP"); the read ends with EHOSTDOWN and
    # every pair connects again.
    c.exec(0, f"dmesg -c >/dev/null; echo {READS_BEHIND} > {FAIL_READ_RESPONSE}")
    try:
        res, took, bound = link.bounded_integrity(c, 256 << 10, 53)
    finally:
        left = c.exec(0, f"cat {FAIL_READ_RESPONSE}; echo 0 > {FAIL_READ_RESPONSE}").out.strip()
    log = c.exec(0, "dmesg").out
    check(left == "0" and "injected crc error in a Read Response" in log,
          f"no Read Response failed with {READS_BEHIND} Reads behind it (armed: {left}): {res.out[-1500:]}")
    check(res.rc != 0 and "EHOSTDOWN" in res.out, f"the read, rc {res.rc}: {res.out[-1500:]}")
    check("differ" not in res.out, f"wrong bytes: {res.out[-1500:]}")
    check(took <= bound, f"the read took {took:.0f} s, bound {bound:.0f} s")
    check("not flushed" not in log, f"node 0's kernel log:\n{log[-3000:]}")
    injected = next(line for line in log.splitlines() if "injected crc error" in line)
    print(f"    {injected.split('siw: ', 1)[-1]}; EHOSTDOWN in {took:.1f} s (bound {bound:.0f} s)", flush=True)
    c.wait_connected(list(NODES), timeout=120)
    ping_every_pair(c, NODES, "siw after the failed Read Response")
    integrity(c, 0, 1 << 20, "2", 54, 600)


@pytest.mark.sanitizer_run
def test_a_node_leaves_and_rejoins_over_new_cm_connections_on_siw(c):
    # Leaving ends every CM connection before the peer goes (where KASAN once found
    # a use-after-free); the node comes back over new ones. `make test-siw` runs the
    # partition past the dead-after (6.6 min here on a slow host's debug kernel).
    membership.test_leaving_node_is_torn_down_and_can_rejoin(c)
