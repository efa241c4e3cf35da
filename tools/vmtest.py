#!/usr/bin/env python3
"""LITE-RS integration tests on a virtual cluster (run by `make test`).

Boots two guests with the chosen kernel (a third boots later and joins late), runs every test in order
(later tests build on the cluster state earlier ones leave), and fails the run when
any test fails or any guest console shows a kernel bug report (WARNING, BUG, Oops,
KASAN, lockdep, ...). The last line is `N passed, N failed`.
"""

import argparse
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vcluster import Cluster, CommandFailed, REPO  # noqa: E402
from vguest import KERNELS  # noqa: E402
import vwire  # noqa: E402
# TESTS, the suites and what soak.py uses as vmtest.NAME (the setup steps, TestFailed,
# print_console_tails).
from litebench.vm_harness import (  # noqa: E402,F401
    BIG, BRIDGE, BRIDGE_RATE, FAILS_NODES, FUZZ, LINK, LINK_RATE, SANITIZER_RUNS, SETUP, TEST_HOOKS, TESTS,
    TestFailed, print_console_tails)
# The tests register themselves in TESTS as their modules are imported, so this is the
# order they run in (later tests build on the state earlier ones leave): keep it.
from litebench import (  # noqa: E402,F401
    vm_tests_bringup, vm_tests_lmr, vm_tests_reach, vm_tests_rpc, vm_tests_apps, vm_tests_qos, vm_tests_link, vm_tests_class_change,
    vm_tests_hostile, vm_tests_membership, vm_tests_final)
from litebench.vm_tests_bringup import (  # noqa: E402,F401
    two_nodes_join_with_k_rc_qps_each, late_third_node_boots_and_joins_everyone)
from litebench.vm_tests_hostile import FUZZ_CAMPAIGN  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="debug", choices=KERNELS,
                    help="debian: Debian's stock kernel, unmodified (make guest KERNEL=debian)")
    ap.add_argument("--run-dir", default=str(REPO / "build" / "vmtest"))
    ap.add_argument("--suite", default="full", choices=["full", "big", "link", "bridge", "fuzz"],
                    help="full: every test but the big, link, bridge and fuzz ones; big: the data-heavy ones "
                         "(release kernel); link: node 1 behind a rate-limited wire, faults on node 2's (release "
                         "kernel); bridge: node 1 behind a tc-shaped link on the bridge segment (jumbo frames, "
                         "release kernel); fuzz: --calls unprivileged random ioctls (debug kernel)")
    ap.add_argument("--calls", type=int, default=FUZZ_CAMPAIGN["calls"], help="fuzz suite: calls in all (default %(default)s)")
    ap.add_argument("--processes", type=int, default=FUZZ_CAMPAIGN["processes"],
                    help="fuzz suite: fuzzing processes on each of the two nodes (default %(default)s)")
    ap.add_argument("-k", dest="only", help="run only tests whose name contains one of these (comma-separated)")
    args = ap.parse_args()
    FUZZ_CAMPAIGN["calls"], FUZZ_CAMPAIGN["processes"] = args.calls, args.processes

    cluster = Cluster(args.run_dir)

    def stop(signum, _frame):
        cluster.down(quiet=True)
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    passed = failed = 0
    start = time.time()
    try:
        # Node 2 boots later. The big suite holds a third of 1 GiB per node.
        # Node 2 is behind a wire without a rate (for faults) but in the big and bridge
        # suites; node 1 behind a link of LINK_RATE (link suite, a wirefilter) or
        # BRIDGE_RATE (bridge suite, tc on the bridge segment).
        queue = vwire.DEFAULT_QUEUE
        wires = {"big": {}, "link": {1: (LINK_RATE, queue), 2: (0, queue)},
                 "bridge": {1: (BRIDGE_RATE, queue)}}.get(args.suite, {2: (0, queue)})
        cluster.up(nodes=2, variant=args.kernel, mem=1536 if args.suite == "big" else 1024, wires=wires,
                   segment="bridge" if args.suite == "bridge" else "vde")
        for fn in TESTS:
            if args.only and not any(part in fn.__name__ for part in args.only.split(",")):
                continue
            wanted = {"big": BIG | SETUP, "link": LINK | SETUP, "bridge": BRIDGE | SETUP, "fuzz": FUZZ | SETUP}.get(
                args.suite, set(t.__name__ for t in TESTS) - BIG - LINK - BRIDGE - FUZZ)
            if args.kernel == "debian":
                wanted = wanted - SANITIZER_RUNS
            if args.kernel != "debug":
                wanted = wanted - TEST_HOOKS
            if fn.__name__ not in wanted:
                continue
            t0 = time.time()
            try:
                fences = len(cluster.fences())
                fn(cluster)
                # Only a node made to fail may be fenced off: anywhere else a fence is a
                # denial of service against every tenant of both nodes.
                fenced = cluster.fences()[fences:]
                if fenced and fn.__name__ not in FAILS_NODES:
                    raise TestFailed("a node fenced another off: " + "; ".join(f"node{n}: {line}" for n, line in fenced))
                passed += 1
                print(f"PASS {fn.__name__} ({time.time() - t0:.1f} s)", flush=True)
            except (TestFailed, CommandFailed) as e:
                failed += 1
                print(f"FAIL {fn.__name__} ({time.time() - t0:.1f} s): {e}", flush=True)
                print_console_tails(cluster)
            except Exception:
                failed += 1
                print(f"FAIL {fn.__name__}: {traceback.format_exc()}", flush=True)
                print_console_tails(cluster)
        splats = cluster.splats()
        if splats:
            failed += 1
            print("FAIL guest kernels report bugs:", flush=True)
            for n, line in splats[:40]:
                print(f"  node{n}: {line}")
            for n in sorted({n for n, _ in splats}):
                print(f"  node{n}'s first report:\n" + "\n".join(f"    {line}" for line in cluster.first_bug_report(n)))
        else:
            passed += 1
            print("PASS no kernel bug reports in any guest console", flush=True)
    except (CommandFailed, SystemExit) as e:
        failed += 1
        print(f"FAIL cluster: {e}", flush=True)
    finally:
        cluster.down(quiet=True)
    leftovers = cluster.leftovers()
    if leftovers:
        failed += 1
        print("FAIL processes left behind after the cluster went down:\n  " + "\n  ".join(leftovers))
    else:
        passed += 1
        print("PASS no qemu or switch process left behind", flush=True)
    print(f"logs: {cluster.run} ({time.time() - start:.0f} s)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
