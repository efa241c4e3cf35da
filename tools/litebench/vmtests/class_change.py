"""Integration test (tools/vmtest.py, big suite): a class change takes effect while a
process runs. A module of its own because it runs after the link suite's tests
(suites.MODULES)."""

import time

import pytest

from litebench.vmtests.harness import check, class_ops, flow_json


@pytest.mark.big
def test_class_changes_take_effect_while_a_process_runs(c):
    # A bulk-class writer whose rule the operator changes to latency mid-run: its
    # later operations count to the latency class.
    job = c.exec_async(0, "sh -c 'echo $$ > /tmp/mover; lite-admin class set --pid $$ bulk >/dev/null && "
                          "exec lite-bench --quiet flow --holder 1 --size 64K --seconds 6'", timeout=300)
    time.sleep(2)
    before = class_ops(c, 0)
    c.exec(0, "lite-admin class set --pid $(cat /tmp/mover) latency")
    flow_json(0, job.wait(), "moved flow")
    after = class_ops(c, 0)
    c.exec(0, "lite-admin class unset --pid $(cat /tmp/mover)")
    moved = after["latency"]["bytes"] - before["latency"]["bytes"]
    check(moved >= 10 * 65536, f"only {moved} bytes counted to latency after the change: {before} -> {after}")
