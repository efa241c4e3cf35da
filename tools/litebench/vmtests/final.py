"""The integration tests' last (tools/vmtest.py): kmemleak scanning for what any test
allocated and did not free. The soak runs apart (`make soak`, tools/soak.py)."""

from litebench.vmtests.harness import check, kmemleak


def test_kmemleak_reports_nothing_of_lite(c):
    # Last in the suite: everything every test allocated and freed, scanned once per
    # node (each scan takes half a minute on the debug kernel; all nodes at once).
    nodes = [n for n in c.meta.get("nodes", []) if c.alive(n) and kmemleak(c, n)]
    scan = ("echo scan > /sys/kernel/debug/kmemleak; sleep 1; echo scan > /sys/kernel/debug/kmemleak; "
            "cat /sys/kernel/debug/kmemleak")
    jobs = [(n, c.exec_async(n, scan, timeout=900)) for n in nodes]
    for n, job in jobs:
        out = job.wait().out
        check("lite" not in out, f"node {n}: kmemleak reports leaks from lite:\n{out[:3000]}")
    print(f"    kmemleak scanned on node(s) {nodes}" if nodes else "    no kmemleak in this kernel", flush=True)
