"""Integration tests (tools/vmtest.py), first: the module loads and unloads, a device
goes and comes back, two nodes join and a third one late, every pair pings, payloads
echo through the mailboxes, concurrent callers share the slots, a C program links
liblite."""

import pytest

from litebench.vmtests.harness import check, kmemleak, ping
from litebench.vmtests.join import join_third_node, join_two_nodes


def test_module_loads_and_unloads_10_times(c):
    # Leaks are looked for once, at the end of the suite (kmemleak_reports_nothing_of_lite).
    if kmemleak(c, 0):
        c.exec(0, "echo scan > /sys/kernel/debug/kmemleak; echo clear > /sys/kernel/debug/kmemleak")
    c.exec(0, "for i in $(seq 10); do insmod /lite/lite.ko qps_per_peer=$(( i % 8 + 1 )) && rmmod lite || exit 1; done",
           timeout=300)
    check("lite" not in c.exec(0, "cat /proc/modules").out, "module still loaded after the cycles")


@pytest.mark.fails_nodes
def test_device_removed_and_readded_while_loaded(c):
    c.load_module(0)
    # A zeroed reserve goes with its device (and with the module, on rmmod).
    c.exec(0, "lite-admin reserve 8M --wait", timeout=300)
    c.exec(0, "rdma link delete rxe0")
    out = c.exec(0, "lite-admin status").out
    check("no RDMA device" in out and "reserve 0 of 0 MiB" in out, f"status after rdma link delete:\n{out}")
    check(c.status(0)["device_caps"] is None, "device capabilities without a device")
    c.exec(0, "rdma link add rxe0 type rxe netdev eth0")
    out = c.exec(0, "lite-admin status").out
    check("device rxe0" in out and "device can: roce, write with immediate, atomics" in out,
          f"status after rdma link add:\n{out}")
    # Read at attach, by capability: Soft-RoCE has write with immediate and atomics.
    caps = c.status(0)["device_caps"]
    check(caps["transport"] == "roce" and caps["write_imm"] and not caps["cm_connect"]
          and caps["max_sge_rd"] >= 1 and caps["max_send_sge"] >= 1, f"rxe's capabilities: {caps}")
    c.exec(0, "lite-admin reserve 8M --wait", timeout=300)
    c.exec(0, "rmmod lite")


@pytest.mark.setup
def test_two_nodes_join_with_k_rc_qps_each(c):
    join_two_nodes(c)


@pytest.mark.setup
def test_late_third_node_boots_and_joins_everyone(c):
    join_third_node(c)


def test_ping_between_all_pairs(c):
    for src in range(3):
        for dst in range(3):
            if src != dst:
                ping(c, src, dst)


def test_payloads_echo_intact_through_the_mailboxes(c):
    for size in (1, 64, 1000, 4080):
        res = c.exec(0, f"lite-admin ping 1 --count 10 --size {size} --timeout-ms 10000 --json", check=False)
        check(res.rc == 0 and f'"size":{size}' in res.out, f"ping with {size} B: {res.out.strip()}")
    res = c.exec(0, "lite-admin ping 1 --count 1 --size 4081", check=False)
    check(res.rc != 0 and "at most 4080" in res.out, f"oversized ping payload: {res.out.strip()}")


def test_concurrent_callers_share_the_request_slots(c):
    # 40 callers > 32 request slots per peer: some must wait for a free slot. The
    # timeout bounds slot wait + round trip. It is generous: rxe recovers a dropped
    # frame only at the 268 ms retransmit timeout and stalls its QP meanwhile, and a
    # debug kernel on a busy host drops many frames of a 40-caller burst (one CI run
    # saw calls pass 30 s).
    script = ("for i in $(seq 40); do lite-admin ping 2 --count 5 --size 2000 --timeout-ms 60000 >/tmp/p$i 2>&1 & "
              "done; wait; "
              "cat /tmp/p*; ! grep -l lite-admin: /tmp/p*")
    out = c.exec(1, script, timeout=600).out
    check(out.count("round trips of 2000 B") == 40, out[-2000:])


def test_c_program_links_liblite(c):
    out = c.exec(1, "lite-hello").out
    check("node 1: 2 peer(s)" in out and out.count("ping node") == 2 and "lmr: ok" in out and "rpc: ok" in out, out)
