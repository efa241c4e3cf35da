"""LITE-RS integration tests on a virtual cluster (run by `make test`).

Boots two guests with the chosen kernel (a third boots later and joins late), runs every test in order
(later tests build on the cluster state earlier ones leave), and fails the run when
any test fails or any guest console shows a kernel bug report (WARNING, BUG, Oops,
KASAN, lockdep, ...). The last line is `N passed, N failed`.

The tests run under pytest: the suites are markers and the order is that of their
modules (suites.py), the cluster is a fixture (conftest.py), and report.py prints
the run.
"""

import argparse
import signal
import sys
from pathlib import Path

import pytest

from litebench.cluster.guest import KERNELS, PROVIDERS
from litebench.vmtests.report import Report
from litebench.vmtests.suites import FUZZ_CALLS, FUZZ_PROCESSES, MODULES, RUN_DIR, SUITES, marker_expression

HERE = Path(__file__).resolve().parent


def pytest_args(args):
    """pytest's command line for vmtest.py's: the test modules in the order they run,
    the suite's markers, the options conftest.py takes; no output of pytest's own
    (the report prints) and none captured (the tests print as they go), each test's
    time in the run directory's junit.xml."""
    argv = [str(HERE / f"{module}.py") for module in MODULES]
    argv += ["-p", "no:terminal", "--capture=no", "-m", marker_expression(args.suite, args.kernel),
             "--junitxml", str(Path(args.run_dir) / "junit.xml"),
             "--kernel", args.kernel, "--suite", args.suite, "--run-dir", args.run_dir, "--provider", args.provider,
             "--calls", str(args.calls), "--processes", str(args.processes)]
    if args.only:
        argv += ["--only", args.only]
    if args.list:
        argv.append("--collect-only")
    return argv


def stop(signum, _frame):
    """SIGINT, SIGTERM: the test running fails as the cluster's failure; the run ends
    and takes the cluster down."""
    sys.exit(128 + signum)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="debug", choices=KERNELS,
                    help="debian: Debian's stock kernel, unmodified (make guest KERNEL=debian)")
    ap.add_argument("--run-dir", default=str(RUN_DIR))
    ap.add_argument("--provider", default="rxe", choices=list(PROVIDERS),
                    help="the guests' soft RDMA device: rxe (Soft-RoCE) or siw (Soft-iWARP; our kernels only)")
    ap.add_argument("--suite", default="full", choices=list(SUITES),
                    help="full: every test but the big, link, bridge and fuzz ones; big: the data-heavy ones "
                         "(a kernel without sanitizers); stock: full and big on one cluster (make test's on "
                         "Debian's stock kernel); link: node 1 behind a rate-limited wire, faults on node "
                         "2's; bridge: node 1 behind a tc-shaped link on the bridge segment (jumbo frames); fuzz: "
                         "--calls unprivileged random ioctls (debug kernel)")
    ap.add_argument("--calls", type=int, default=FUZZ_CALLS,
                    help="fuzz suite: calls in all (default %(default)s)")
    ap.add_argument("--processes", type=int, default=FUZZ_PROCESSES,
                    help="fuzz suite: fuzzing processes on each of the two nodes (default %(default)s)")
    ap.add_argument("-k", dest="only", help="run only tests whose name contains one of these (comma-separated)")
    ap.add_argument("--list", action="store_true", help="print the names of the tests the run would run, in order, "
                                                        "and boot nothing")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    report = Report(args.run_dir, listing=args.list)
    status = pytest.main(pytest_args(args), plugins=[report])
    if status in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        sys.exit(status)
    sys.exit(1 if report.failed else 0)
