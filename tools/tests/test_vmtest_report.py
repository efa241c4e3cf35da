"""What tools/vmtest.py prints and exits with (run by `make test`), on a cluster that
boots nothing: a line per test, the failed test's console tails, a fence outside a
`fails_nodes` test failing it, a cluster that does not boot, a kernel bug report
in a console, and the last line `N passed, N failed`."""

import subprocess
import sys
import unittest
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1]

# Runs vmtest.py's main with Cluster replaced by FakeCluster; argv[1] is what goes
# wrong (nothing, "boot", "fence", "splat", "oops", "raise"), the rest vmtest.py's
# options. "oops": node 1 oopses under the first test, which then fails.
DRIVER = '''
import sys
from pathlib import Path
from unittest import mock

from litebench.cluster.cluster import Result
from litebench.vmtests import cli

trouble = sys.argv.pop(1)


class FakeCluster:
    def __init__(self, run_dir):
        self.run, self.meta, self.fenced = Path(run_dir).resolve(), {"nodes": [0, 1]}, []

    def up(self, **setup):
        print(f"up {sorted(setup)}", file=sys.stderr, flush=True)
        if trouble == "boot":
            raise SystemExit("vcluster: lite.ko missing")

    def down(self, quiet=False):
        print("down", file=sys.stderr, flush=True)

    def exec(self, n, script, timeout=120, check=True):
        if trouble == "raise" and "/proc/modules" in script:
            raise KeyError("no such node")
        if trouble == "oops" and "/proc/modules" in script:
            self.oopsed = True
            return Result(0, "lite 1 0 - Live")
        # What lite-admin status says in the tests run here (bringup.py's first two).
        return Result(0, "no RDMA device, reserve 0 of 0 MiB; device rxe0; "
                         "device can: roce, write with immediate, atomics (hca)")

    def status(self, n):
        """lite-admin status --json: without a device, then with rxe's, as
        device_removed_and_readded_while_loaded asks."""
        self.status_calls = getattr(self, "status_calls", 0) + 1
        caps = {"transport": "roce", "write_imm": True, "cm_connect": False, "max_sge_rd": 32, "max_send_sge": 32}
        return {"device_caps": None if self.status_calls == 1 else caps}

    def load_module(self, n):
        pass

    def fences(self):
        if trouble == "fence":
            self.fenced.append((1, "lite: peer 2: its QPs are fenced off"))
        return list(self.fenced)

    def splats(self):
        if trouble == "splat":
            return [(1, "BUG: KASAN: use-after-free")]
        return [(1, "Oops: general protection fault")] if getattr(self, "oopsed", False) else []

    def first_bug_report(self, n):
        if trouble == "oops":
            return ["Oops: general protection fault", "RIP: 0010:complete+0x40/0x80"]
        return ["BUG: KASAN: use-after-free", "Call Trace:"]

    def console(self, n):
        return f"node {n}: the last line"

    def leftovers(self):
        return []


with mock.patch("litebench.vmtests.conftest.Cluster", FakeCluster), \\
        mock.patch("litebench.vmtests.report.Cluster", FakeCluster):
    cli.main()
'''


def vmtest(trouble, *args):
    """vmtest.py's exit code, the lines it printed and what the cluster did (up, down)."""
    res = subprocess.run([sys.executable, "-c", DRIVER, trouble, *args, "--run-dir", "/nonexistent/vmtest"],
                         cwd=TOOLS, capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout.splitlines(), res.stderr.splitlines()


class ReportTest(unittest.TestCase):
    def test_passing_tests_and_the_run_s_checks_are_counted(self):
        rc, lines, cluster = vmtest("none", "-k", "module_loads,ping_between")
        self.assertEqual(rc, 0, lines)
        self.assertEqual(cluster, ["up ['mem', 'nodes', 'provider', 'segment', 'variant', 'wires']", "down"], "booted once")
        self.assertRegex(lines[0], r"^PASS module_loads_and_unloads_10_times \(\d+\.\d s\)$")
        self.assertRegex(lines[1], r"^PASS ping_between_all_pairs \(\d+\.\d s\)$")
        self.assertEqual(lines[-5:-3], ["PASS no kernel bug reports in any guest console",
                                        "PASS no qemu or switch process left behind"])
        self.assertRegex(lines[-3], r"^slowest: (module_loads_and_unloads_10_times|ping_between_all_pairs) \d+ s, "
                                    r"(module_loads_and_unloads_10_times|ping_between_all_pairs) \d+ s$")
        self.assertRegex(lines[-2], r"^logs: /nonexistent/vmtest \(\d+ s\)$")
        self.assertEqual(lines[-1], "4 passed, 0 failed")

    def test_a_fence_fails_a_test_unless_it_fails_nodes(self):
        rc, lines, _ = vmtest("fence", "-k", "module_loads,device_removed")
        self.assertEqual(rc, 1)
        self.assertRegex(lines[0], r"^FAIL module_loads_and_unloads_10_times \(\d+\.\d s\): a node fenced another off: "
                                   r"node1: lite: peer 2: its QPs are fenced off$")
        self.assertEqual(lines[1:5], ["  node0 console, last 1 lines:", "    node 0: the last line",
                                      "  node1 console, last 1 lines:", "    node 1: the last line"])
        self.assertRegex(lines[5], r"^PASS device_removed_and_readded_while_loaded ", "a fails_nodes test")
        self.assertEqual(lines[-1], "3 passed, 1 failed")

    def test_a_cluster_that_does_not_boot_ends_the_run(self):
        rc, lines, cluster = vmtest("boot")
        self.assertEqual(rc, 1)
        self.assertEqual(lines[0], "FAIL cluster: vcluster: lite.ko missing")
        self.assertEqual(cluster[-1], "down", "what did start goes down")
        self.assertFalse([line for line in lines if line.startswith("PASS ") and "(" in line], "no test ran")
        self.assertNotIn("PASS no kernel bug reports in any guest console", lines, "no consoles to judge")
        self.assertEqual(lines[-1], "1 passed, 1 failed")

    def test_a_kernel_bug_report_fails_the_run(self):
        rc, lines, _ = vmtest("splat", "-k", "module_loads")
        self.assertEqual(rc, 1)
        at = lines.index("FAIL guest kernels report bugs:")
        self.assertEqual(lines[at + 1], "  node1: BUG: KASAN: use-after-free")
        # The first report comes last but the count: a cut CI log keeps its tail.
        self.assertEqual(lines[-4:], ["node1's first kernel bug report:", "    BUG: KASAN: use-after-free",
                                      "    Call Trace:", "2 passed, 1 failed"])

    def test_an_oops_ends_the_run_after_the_test_it_failed(self):
        rc, lines, cluster = vmtest("oops", "-k", "module_loads,ping_between")
        self.assertEqual(rc, 1)
        self.assertRegex(lines[0], r"^FAIL module_loads_and_unloads_10_times ")
        self.assertIn("FAIL the run stops: the kernel of node(s) [1] crashed", lines)
        self.assertFalse([line for line in lines if "ping_between_all_pairs" in line], "no test after the oops")
        self.assertEqual(cluster[-1], "down")
        self.assertEqual(lines[-4:], ["node1's first kernel bug report:", "    Oops: general protection fault",
                                      "    RIP: 0010:complete+0x40/0x80", "1 passed, 2 failed"])

    def test_an_unexpected_exception_shows_where_in_the_test(self):
        rc, lines, _ = vmtest("raise", "-k", "module_loads")
        self.assertEqual(rc, 1)
        self.assertEqual(lines[0], "FAIL module_loads_and_unloads_10_times: Traceback (most recent call last):")
        self.assertIn("litebench/vmtests/bringup.py", lines[1])
        self.assertIn("KeyError: 'no such node'", lines)
        self.assertEqual(lines[-1], "2 passed, 1 failed")
