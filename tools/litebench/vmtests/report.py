"""What tools/vmtest.py prints of its pytest run, a pytest plugin: a line per test
(`PASS name (seconds)`, or `FAIL name (seconds): why` and the guests' console
tails), then the checks of the whole run (no kernel bug report in any guest
console, no process of the cluster left behind), the slowest tests, where the logs are, the
first kernel bug report of each node that has one, and last `N passed, N failed`.
A test that fails after a guest's kernel oopsed ends the run. With `listing`, only
the names of the tests it would run."""

import time
import traceback

import pytest

from litebench.cluster.cluster import FATAL, Cluster, CommandFailed
from litebench.vmtests.conftest import CLUSTER, name
from litebench.vmtests.harness import TestFailed, print_console_tails


class Report:
    def __init__(self, run_dir, listing=False):
        self.run_dir, self.listing = run_dir, listing
        self.passed = self.failed = 0
        self.started = time.time()
        self.session = None
        # The cluster failed (it did not boot, or something ended the run): no test
        # runs after that, and its consoles are not judged.
        self.cluster_failed = False
        # nodeid: the test, how long its call took, and the first phase that failed.
        self.items, self.took, self.failures = {}, {}, {}

    def cluster(self):
        return self.session.config.stash.get(CLUSTER, None)

    def pytest_sessionstart(self, session):
        self.session = session

    def pytest_collectreport(self, report):
        if report.failed:
            self.failed += 1
            print(f"FAIL collecting {report.nodeid}:\n{report.longreprtext}", flush=True)

    def pytest_collection_finish(self, session):
        if self.listing:
            for item in session.items:
                print(name(item), flush=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        """Notes each phase of a test (then pytest makes its report)."""
        self.items[item.nodeid] = item
        if call.when == "call":
            self.took[item.nodeid] = call.duration
        if call.excinfo is not None:
            self.failures.setdefault(item.nodeid, (call.when, call.excinfo))

    def pytest_runtest_logreport(self, report):
        """Once a test's teardown is over (the fence check runs there), its line."""
        if report.when != "teardown":
            return
        item, took = self.items[report.nodeid], self.took.get(report.nodeid, 0.0)
        when, excinfo = self.failures.get(report.nodeid, (None, None))
        if excinfo is None:
            self.passed += 1
            print(f"PASS {name(item)} ({took:.1f} s)", flush=True)
            return
        self.failed += 1
        if when == "setup" or excinfo.errisinstance(SystemExit):
            # The cluster's own failure (or a signal, which ends the run as SystemExit).
            self.cluster_failed = True
            self.session.shouldstop = "the cluster failed"
            print(f"FAIL cluster: {excinfo.value}", flush=True)
            return
        if excinfo.errisinstance((TestFailed, CommandFailed)):
            print(f"FAIL {name(item)} ({took:.1f} s): {excinfo.value}", flush=True)
        else:
            print(f"FAIL {name(item)}: {in_the_test(excinfo, item)}", flush=True)
        cluster = self.cluster()
        print_console_tails(cluster)
        crashed = sorted({n for n, line in cluster.splats() if FATAL.search(line)}) if cluster else []
        if crashed:
            # A guest that oopsed stays broken: every later test would wait out its
            # timeout against it (a whole CI run's time), so the run ends here.
            self.session.shouldstop = f"node(s) {crashed} crashed"
            print(f"FAIL the run stops: the kernel of node(s) {crashed} crashed", flush=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        """After the cluster went down (the session fixture's end): the run's checks."""
        if self.listing:
            return
        cluster = self.cluster() or Cluster(self.run_dir)
        reports = []
        if not self.cluster_failed:
            reports = self.no_kernel_bug_reports(cluster if self.cluster() else None)
        leftovers = cluster.leftovers()
        if leftovers:
            self.failed += 1
            print("FAIL processes left behind after the cluster went down:\n  " + "\n  ".join(leftovers))
        else:
            self.passed += 1
            print("PASS no qemu or switch process left behind", flush=True)
        slowest = sorted(self.took.items(), key=lambda kv: kv[1], reverse=True)[:5]
        if slowest:
            print("slowest: " + ", ".join(f"{name(self.items[nodeid])} {took:.0f} s" for nodeid, took in slowest))
        print(f"logs: {cluster.run} ({time.time() - self.started:.0f} s)")
        # Last but the count: a CI log's tail is what survives when it is cut short.
        for n, report in reports:
            print(f"node{n}'s first kernel bug report:\n" + "\n".join(f"    {line}" for line in report))
        print(f"{self.passed} passed, {self.failed} failed")

    def no_kernel_bug_reports(self, cluster):
        """No guest console of the run (none if no cluster booted) shows a kernel bug
        report; returns (node, its first report) for each node that shows one."""
        splats = cluster.splats() if cluster else []
        if not splats:
            self.passed += 1
            print("PASS no kernel bug reports in any guest console", flush=True)
            return []
        self.failed += 1
        print("FAIL guest kernels report bugs:", flush=True)
        for n, line in splats[:40]:
            print(f"  node{n}: {line}")
        return [(n, cluster.first_bug_report(n)) for n in sorted({n for n, _ in splats})]


def in_the_test(excinfo, item):
    """The exception's traceback from the test's own frame on (not pytest's)."""
    tb = excinfo.tb
    while tb is not None and tb.tb_frame.f_code.co_filename != str(item.path):
        tb = tb.tb_next
    return "".join(traceback.format_exception(excinfo.type, excinfo.value, tb or excinfo.tb))
