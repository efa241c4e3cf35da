"""Tests of qos_bench.py's hostile tenants and their rows (run by `make test`)."""

import json
import shlex
import unittest

from litebench.qos.flows import HOLDER, in_class, in_latency_class
from litebench.qos.hostile import (
    HOSTILE_ATTACKS, HOSTILE_ORDER, hostile_command, hostile_label, hostile_medians, hostile_ready_script,
    hostile_report, hostile_script, hostile_table, queue_note, summarize_hostile, tenant_note)
from qos_fakes import FAIL_LOOP, LMR_MANY, MB, flow, latency_flows


class HostileTest(unittest.TestCase):
    def test_each_flow_is_compared_with_itself_alone(self):
        alone = latency_flows(0, {"write": 2 * MB, "rpc": 4 * MB, "read": 3 * MB})
        beside = latency_flows(9000, {"write": 3 * MB, "rpc": 4 * MB, "read": 6 * MB})
        s = summarize_hostile(alone, beside)
        self.assertEqual({op: f["p99_ratio"] for op, f in s["latency"].items()},
                         {"write": 1.5, "rpc": 1.0, "read": 2.0})
        self.assertEqual((s["p99_ratio"], s["worst_flow"], s["target"], s["met"]), (2.0, "read", 1.5, False))
        self.assertEqual(s["latency"]["rpc"]["reply_size"], 64)
        self.assertEqual(s["latency"]["write"]["beside_hostile"]["p99_ns"], 3 * MB)
        self.assertNotIn("reply_size", s["latency"]["write"])
        met = summarize_hostile(alone, latency_flows(9000, {"write": 3 * MB, "rpc": 4 * MB, "read": 3 * MB}))
        self.assertTrue(met["met"], "a ratio of exactly 1.5 meets the target")
        self.assertTrue(summarize_hostile(alone["write"], beside["write"], target=2)["met"], "one flow, own target")
        with self.assertRaises(ValueError):
            summarize_hostile({"write": alone["write"]}, {"read": beside["read"]})

    def test_the_queue_note_shows_each_direction_and_its_first_intervals(self):
        queue = {"to_node": {"ms": {"mean": 1.5, "p99": 8.25}, "interval_ms": 250,
                             "timeline_ms": [7.5, 2.0, None] + [0.0] * 9},
                 "from_node": {"ms": {"mean": 0.0, "p99": 0.0}, "interval_ms": 250, "timeline_ms": [0.0]}}
        self.assertEqual(queue_note(queue),
                         "; wire queue to the holder 1.50 ms mean, 8.25 p99, from the holder 0.00 ms mean, 0.00 p99 "
                         "(ms per 250 ms from the start: to the holder 7.5 2 - 0 0 0 0 0, from the holder 0)")
        self.assertEqual(queue_note({}), "", "no wire, no note")

    def test_the_table_has_a_row_per_attack_and_mode(self):
        alone = latency_flows(0, {"write": 2 * MB, "rpc": 4 * MB, "read": 2 * MB})
        rows = [{"attack": "a", "label": "8 B LT_write flood, 16 threads", "mode": "sw-pri",
                 "summary": summarize_hostile(alone, latency_flows(0, {"write": 2 * MB, "rpc": 5 * MB,
                                                                         "read": 2 * MB})),
                 "tenant": "100 ops, 0.01 MB/s"},
                {"attack": "a", "label": "8 B LT_write flood, 16 threads", "mode": "none",
                 "summary": summarize_hostile({"write": alone["write"]},
                                                latency_flows(0, {"write": 7 * MB}))}]
        lines = hostile_table(rows).splitlines()
        self.assertEqual(len(lines), 3)
        head = [h.strip() for h in lines[0].split("  ") if h.strip()]
        self.assertEqual(head, ["attack", "mode", "write 16 B", "rpc 16/64 B", "read 64 B", "worst", "<= 1.5",
                                "tenant"])
        self.assertIn("<= 1.5", lines[0])
        self.assertRegex(lines[1], r"^a: 8 B LT_write flood, 16 threads +sw-pri +1\.00 \(2\.00/2\.00 ms\) +"
                                   r"1\.25 \(4\.00/5\.00 ms\) +1\.00 \(2\.00/2\.00 ms\) +1\.25 +met +100 ops")
        self.assertRegex(lines[2], r" none +3\.50 \(2\.00/7\.00 ms\) +- +- +3\.50 +missed$",
                         "flows that did not run are dashes")
        self.assertEqual(lines[0].index("mode"), lines[1].index("sw-pri"), "columns line up")

    def test_the_medians_take_each_flow_over_its_runs(self):
        alone = latency_flows(0, {"write": 2 * MB, "rpc": 2 * MB})
        label = hostile_label("a")
        runs = [(2.2, 3.0), (2.6, 2.8), (4.0, 2.4)]
        rows = [{"attack": "a", "label": label, "mode": "sw-pri", "run": i + 1,
                 "summary": summarize_hostile(alone, latency_flows(0, {"write": int(w * MB), "rpc": int(r * MB)})),
                 "tenant": "100 ops"} for i, (w, r) in enumerate(runs)]
        rows.append({"attack": "a", "label": label, "mode": "none", "run": 1,
                     "summary": summarize_hostile(alone, latency_flows(0, {"write": 8 * MB, "rpc": 6 * MB}))})
        sw, none = hostile_medians(rows)
        self.assertEqual((sw["mode"], sw["runs"], none["runs"]), ("sw-pri", 3, 1))
        self.assertEqual({op: f["p99_ratio"] for op, f in sw["summary"]["latency"].items()},
                         {"write": 1.3, "rpc": 1.4})
        self.assertEqual((sw["summary"]["p99_ratio"], sw["summary"]["worst_flow"], sw["summary"]["met"]),
                         (1.4, "rpc", True), "the worst of the flows' medians")
        self.assertEqual(sw["tenant"], "1.50, 1.40, 2.00", "each run's worst")
        self.assertEqual((none["summary"]["p99_ratio"], none["summary"]["met"]), (4.0, False))
        lines = hostile_table([sw, none], note="worst per run").splitlines()
        self.assertTrue(lines[0].rstrip().endswith("worst per run"), lines[0])
        self.assertRegex(lines[1], r" sw-pri +1\.30 .* 1\.40 +met +1\.50, 1\.40, 2\.00$")

    def test_the_tenant_says_what_it_did(self):
        f = flow(0, 3.0, 8, [10] * 12, op="write")
        report = hostile_report("progress\n" + json.dumps(f) + "\n")
        self.assertNotIn("timeline", report)
        self.assertEqual(tenant_note(report), f"120 ops, {f['mb_s']:.2f} MB/s")
        self.assertEqual(tenant_note(hostile_report(json.dumps(FAIL_LOOP))), "1000 failed calls/s")
        bad = dict(FAIL_LOOP, unexpected=3)
        self.assertEqual(tenant_note(bad), "1000 failed calls/s, 3 unexpected")
        many = hostile_report(LMR_MANY)
        self.assertEqual(many, {"output": LMR_MANY.strip().splitlines()})
        self.assertEqual(tenant_note(many), "allocated in 3.615 s")
        self.assertEqual(tenant_note({"output": []}), "")

    def test_the_tenant_runs_in_class_bulk_aimed_at_the_holder(self):
        for attack in HOSTILE_ATTACKS:
            script = hostile_script(attack, 15, "/tmp/t.log", lmrs=1000)
            inner = shlex.split(script)[2]
            self.assertTrue(inner.startswith("lite-admin class set --pid $$ bulk >/dev/null && "), attack)
            self.assertIn("class unset --pid $$", inner, "the rule is taken away")
            self.assertIn(f"--holder {HOLDER}" if attack != "d" else f"--holders {HOLDER}", inner)
            self.assertIn("15", hostile_command(attack, 15, 1000))
            self.assertIn("> /tmp/t.log 2>&1; rc=$?; echo $rc > /tmp/t.log.rc; cat /tmp/t.log; exit $rc", script)
        self.assertIn("--threads 16 --seconds 15", hostile_command("a", 15))
        self.assertIn("--size 8 ", hostile_command("a", 15))
        self.assertIn("--op read --size 1048576", hostile_command("b", 15))
        self.assertIn("fail-loop", hostile_command("c", 15))
        self.assertEqual(hostile_command("d", 15), "lite-selftest lmr-many 100000 --size 4096 --holders 1 "
                                                     "--threads 16 --hold-seconds 15")
        self.assertIn("--procs 32", hostile_command("e", 7.5))
        self.assertIn("--seconds 7.5 ", hostile_command("e", 7.5))
        self.assertEqual(hostile_label("d"), "100 000 LMRs held")
        self.assertEqual(HOSTILE_ORDER[-1], "d", "minutes of allocation last")
        self.assertEqual(sorted(HOSTILE_ORDER), sorted(HOSTILE_ATTACKS))
        ready = hostile_ready_script("/tmp/t.log", "holding ")
        self.assertIn("grep -q 'holding ' /tmp/t.log", ready)
        self.assertIn("[ -s /tmp/t.log.rc ] && { cat /tmp/t.log; exit 1; }", ready, "a tenant that died fails")

    def test_in_latency_class_is_in_class_latency(self):
        self.assertEqual(in_latency_class("x"), in_class("latency", "x"))
        self.assertIn("--pid $$ latency >/dev/null", in_latency_class("x"))
