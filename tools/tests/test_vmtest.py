"""The integration tests' selection (run by `make test`): for every suite and
kernel, the tests `tools/vmtest.py --list` names (pytest's collection, booting
nothing) are those the suite's markers stand for (litebench/vmtests/suites.py), in
the order they must run: module by module as in MODULES, each module's tests as
defined, the setup tests before any that needs the nodes joined."""

import functools
import importlib
import subprocess
import sys
import unittest
from pathlib import Path

from litebench.cluster.guest import KERNELS
from litebench.cluster.cluster import STALL_S, hung_early
from litebench.vmtests.suites import MODULES, SUITES

VMTEST = Path(__file__).resolve().parents[1] / "vmtest.py"
SETUP = ["two_nodes_join_with_k_rc_qps_each", "late_third_node_boots_and_joins_everyone"]
# What runs on node 0 before any node joined: the module's own load and unload.
BEFORE_JOIN = ["module_loads_and_unloads_10_times", "device_removed_and_readded_while_loaded"]


@functools.cache
def listed(*args):
    """The tests `vmtest.py --list ARGS` names, in order (each selection asked once)."""
    res = subprocess.run([sys.executable, str(VMTEST), "--list", *args], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise AssertionError(f"vmtest.py --list {' '.join(args)}: {res.stderr[-2000:]}")
    return tuple(res.stdout.split())


def defined_tests():
    """(name, markers) of every test, module by module in MODULES' order, each
    module's tests in the order they are defined."""
    tests = []
    for module in MODULES:
        for fn_name, fn in vars(importlib.import_module(f"litebench.vmtests.{module}")).items():
            if fn_name.startswith("test_") and callable(fn):
                tests.append((fn_name.removeprefix("test_"), {m.name for m in getattr(fn, "pytestmark", [])}))
    return tests


def in_suite(marks, suite, kernel):
    """What the docs say a suite and kernel run, written out without pytest."""
    if suite in ("full", "stock"):
        # stock: the full suite and the big one on one cluster.
        chosen = not marks & ({"big", "link", "bridge", "fuzz", "scale"} - ({"big"} if suite == "stock" else set()))
    elif suite == "scale":
        # Eight nodes booted at once join in its own first test.
        chosen = "scale" in marks
    else:
        chosen = "setup" in marks or suite in marks
    if kernel != "debug" and "test_hooks" in marks:
        return False
    if kernel == "debian" and "sanitizer_run" in marks:
        return False
    if kernel != "debian" and "stock_kernel" in marks:
        return False
    return chosen


class SelectionTest(unittest.TestCase):
    def test_each_suite_and_kernel_runs_what_its_markers_say_in_order(self):
        tests = defined_tests()
        for suite in SUITES:
            for kernel in KERNELS:
                with self.subTest(suite=suite, kernel=kernel):
                    expected = [name for name, marks in tests if in_suite(marks, suite, kernel)]
                    self.assertEqual(listed("--suite", suite, "--kernel", kernel), tuple(expected))

    def test_the_setup_tests_come_first(self):
        for suite in SUITES:
            names = listed("--suite", suite, "--kernel", "debug")
            first = {"full": BEFORE_JOIN + SETUP, "stock": BEFORE_JOIN + SETUP, "scale": ["eight_nodes_join_with_k_qps_to_each_other"]}.get(suite, SETUP)
            self.assertEqual(list(names[:len(first)]), first, suite)
            self.assertGreater(len(names), len(first), f"{suite}: no test beyond the setup")
        self.assertEqual(listed("--suite", "full", "--kernel", "debug")[-1], "kmemleak_reports_nothing_of_lite",
                         "the leak scan is the full suite's last")

    def test_each_kernel_runs_what_its_build_allows(self):
        tests = dict(defined_tests())
        debug, release, debian = (listed("--suite", "full", "--kernel", kernel)
                                  for kernel in ("debug", "release", "debian"))
        self.assertEqual([n for n in debug if n not in release], [n for n in debug if "test_hooks" in tests[n]])
        self.assertEqual([n for n in release if n not in debian], [n for n in release if "sanitizer_run" in tests[n]])
        self.assertEqual([n for n in debian if n not in release], [n for n in debian if "stock_kernel" in tests[n]])
        self.assertTrue(any("stock_kernel" in marks for marks in tests.values()))
        self.assertTrue(any("test_hooks" in marks for marks in tests.values()))
        self.assertTrue(any("sanitizer_run" in marks for marks in tests.values()))

    def test_k_picks_the_tests_whose_name_contains_a_part(self):
        self.assertEqual(listed("-k", "lmr_perm,two_nodes"),
                         ("two_nodes_join_with_k_rc_qps_each", "lmr_permissions_are_checked_by_the_master"))
        self.assertEqual(listed("-k", "no such test"), ())


def test_a_boot_counts_as_hung_only_when_silent_early_in_the_kernel():
    hung = "[    0.000000] Linux version 7.2.13\n[    0.911489] acpi PNP0A03:00: fail to add MMCONFIG\n"
    assert hung_early(hung, STALL_S)
    assert not hung_early(hung, STALL_S - 1), "not silent long enough"
    later = hung + "[    5.930742] amd_pstate: the _CPC object is not present\n"
    assert not hung_early(later, 10 * STALL_S), "past early boot: only the whole timeout counts"
    assert not hung_early("", 10 * STALL_S), "nothing printed yet: qemu may not have started"
