"""Integration tests of the stand-in paths (tools/vmtest.py): on Soft-RoCE, which has
write-with-immediate and atomics, lite.ko is loaded with `messages=send atomics=holder`
so that messages and RPC go as an RDMA WRITE then a SEND, and atomics, locks and
barriers are served by the holder's kernel, as they must be on iWARP (siw), whose
own tests (siw.py) run the services' tests over them. A node whose atomics differ
from the cluster's is refused at join with the reason; a second RDMA device is left
unused with the reason.

On the debug kernel only: the stand-ins are the module's own code, the same on every
kernel, and there KASAN, lockdep and kmemleak watch them (a minute and a half of
the stock suite saved)."""

import pytest

from litebench.cluster.cluster import MANAGER_PORT, guest_address
from litebench.vmtests import lmr
from litebench.vmtests.harness import check, ping, ping_every_pair

STAND_INS = "messages=send atomics=holder"
NODES = (0, 1, 2)


def uses(c, n):
    caps = c.status(n)["device_caps"]
    return caps["messages"], caps["atomics_by"]


@pytest.mark.sanitizer_run
def test_stand_in_paths_carry_messages_rpc_atomics_and_locks(c):
    c.reload_module(NODES, STAND_INS, NODES)
    for n in NODES:
        check(uses(c, n) == ("write+send", "holder"), f"node {n} with {STAND_INS}: {c.status(n)['device_caps']}")
    out = c.exec(0, "lite-admin status").out
    check("device uses: write+send for messages and RPC, atomics by the holder's kernel" in out, out)
    ping_every_pair(c, NODES, "WRITE + SEND")
    # Holder-served atomics on a NIC that has its own; siw.py runs the services'
    # tests, messages and RPC among them, over the same paths.
    lmr.test_atomics_from_every_node_add_up_exactly(c)


@pytest.mark.sanitizer_run
def test_a_node_whose_atomics_differ_is_refused_at_join(c):
    # Nodes 0 and 1 keep atomics=holder from the test before; node 2 asks its NIC.
    c.exec(2, "lite-admin leave; for i in $(seq 300); do ! grep -q '^lite ' /proc/modules && break; "
              "rmmod lite 2>/dev/null; sleep 0.2; done; insmod /lite/lite.ko atomics=nic", timeout=120)
    res = c.exec(2, f"timeout 60 lite-admin join {guest_address(0)}:{MANAGER_PORT} --id 2", check=False, timeout=90)
    check(res.rc not in (0, 124), f"join with other atomics must fail at once, not time out: rc {res.rc}\n{res.out}")
    check("the manager refused this node" in res.out
          and "atomics are executed by the holder's NIC and node 0's by the holder's kernel" in res.out,
          f"join with other atomics: {res.out.strip()}")
    c.reload_module(NODES, "", NODES)
    for n in NODES:
        check(uses(c, n) == ("write-with-immediate", "nic"), f"node {n} back to the defaults")


@pytest.mark.sanitizer_run
def test_a_second_device_is_left_unused_with_the_reason(c):
    if c.exec(0, "modprobe siw", check=False).rc != 0:
        print("    no siw module in this kernel (Debian's stock kernel has none): skipped", flush=True)
        return
    c.exec(0, "dmesg -c >/dev/null; rdma link add siw0 type siw netdev eth0")
    try:
        log = c.exec(0, "dmesg").out
        check("siw0: not used; peers are reached on the first RDMA device" in log,
              f"dmesg after adding siw0:\n{log[-2000:]}")
        check(c.status(0)["device"] == "rxe0", "rxe0 stays the device in use")
        ping(c, 0, 1, count=5)
    finally:
        c.exec(0, "rdma link delete siw0")
