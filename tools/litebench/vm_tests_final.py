"""The integration tests' last (tools/vmtest.py): a three-minute soak, then kmemleak
scanning for what any test allocated and did not free."""

import soak

from litebench.vm_harness import fails_nodes, check, kmemleak, test


@fails_nodes
@test
def soak_of_three_minutes_loses_and_corrupts_nothing(c):
    # The four applications, lite-bench flows, checked RPCs, integrity runs and
    # atomics with churn (killed processes, LMRs, class and mode changes, node 2
    # leaving and rejoining, 1 % loss on its wire); `make soak` runs it for longer.
    # kmemleak is the next test's.
    report = soak.soak(c, 3, 25, say=lambda *a, **k: print("   ", *a, **k), kmemleak=False)
    print("\n".join(f"    {line}" for line in soak.human(report).splitlines()), flush=True)
    check(report["passed"] and report["corrupt_or_lost"] == 0 and not report["skipped"],
          f"soak: {report['failures']} skipped {report['skipped']}")


@test
def kmemleak_reports_nothing_of_lite(c):
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
