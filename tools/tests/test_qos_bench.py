"""Tests of qos_bench.py's arithmetic on made-up flows (run by `make test`)."""

import contextlib
import io
import json
import re
import shlex
import signal
import sys
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from litebench.cluster.cluster import CommandFailed, Result
from litebench.qos import cli
from litebench.qos.flows import (
    BULK_FLOWS, BULK_OPS, HOLDER, LATENCY_OPS, MODES, RPC_ID, SENDER, bandwidth, bulk_flow, latency_flow, op_bytes,
    parse_ops, rpc_server)
from litebench.qos.hostile import tenant_note
from litebench.qos.plots import (
    BANDWIDTH_WINDOW_S, BULK_COLOR, LATENCY_COLORS, MODE_COLOR, frontier_points, timeline_columns, timeline_legend,
    windowed_mb_s, write_plots)
from litebench.qos.runner import HostStat, Runner, measured_seconds
from litebench.qos.summary import (
    add_ratios, median_summary, pacing_note, pass_line, per_bulk, phase_table, summarize_mode, table)
from qos_fakes import FAIL_LOOP, HOLDER_CPU, MB, PROC_STAT, STATS, FakeCluster, HostileFakeCluster, flow, latency_flows


def summary(p99_ratios, bulk_alone=10.0, aggregate=10.0):
    """A pass summary as summarize_mode makes it, with the given per-op ratios."""
    return {"latency": {op: {"size": 16, "alone": {"p50_ns": MB, "p99_ns": 2 * MB, "ops": 100},
                             "beside_bulk": {"p50_ns": MB, "p99_ns": int(2 * MB * r), "ops": 90}, "p99_ratio": r}
                        for op, r in p99_ratios.items()},
            "p99_ratio": max(p99_ratios.values()), "bulk_alone_mb_s": bulk_alone,
            "bulk_beside_latency_mb_s": aggregate - 0.1, "latency_mb_s": 0.1,
            "aggregate_beside_latency_mb_s": aggregate}


class QosBenchTest(unittest.TestCase):
    def test_bandwidth_counts_completed_bytes_over_the_window(self):
        # 4 ops of 1 MB per 250 ms for 2 s: 16 MB/s, empty buckets included.
        f = flow(10_000, 2.0, 1_000_000, [4, 0, 4, 4, 4, 0, 8, 8])
        self.assertAlmostEqual(bandwidth([f], 10_000, 12_000), 16.0)
        self.assertAlmostEqual(bandwidth([f], 10_000, 10_500), 8.0, msg="the first half second")
        self.assertAlmostEqual(bandwidth([f, f], 11_500, 12_000), 64.0, msg="two flows add up")
        self.assertEqual(bandwidth([f], 12_000, 12_000), 0.0)

    def test_an_operation_across_an_edge_counts_for_its_part_within(self):
        # One 1 MB operation per 250 ms bucket, each taking 500 ms and ending
        # mid-bucket (at 125, 375, ... ms): two overlap at any time, 4 MB/s.
        f = flow(0, 3.0, MB, [1] * 12, p50=500_000_000)
        self.assertAlmostEqual(bandwidth([f], 1000, 2000), 4.0)
        # The edge at 1.2 s cuts the operation of 0.875-1.375 s in half, whole-counted
        # it would be in or out.
        self.assertAlmostEqual(bandwidth([f], 1200, 2200), 4.0)
        # The first 125 ms hold a quarter of each of the first two operations.
        self.assertAlmostEqual(bandwidth([f], 0, 125), 2 * 0.25 * MB / 0.125 / 1e6)

    def test_a_mode_splits_bulk_around_the_latency_flow(self):
        mb = 1_000_000
        bulk = [flow(0, 3.0, mb, [2] * 4 + [1] * 4 + [2] * 4)]
        alone = flow(-5_000, 1.0, 16, [100] * 4, p50=1_000_000, p99=4_000_000)
        both = flow(1_000, 1.0, 16, [50] * 4, p50=3_000_000, p99=6_000_000)
        s = summarize_mode(alone, both, bulk)
        self.assertAlmostEqual(s["bulk_alone_mb_s"], 8.0)
        self.assertAlmostEqual(s["bulk_beside_latency_mb_s"], 4.0)
        self.assertAlmostEqual(s["p99_ratio"], 1.5)
        self.assertAlmostEqual(s["aggregate_beside_latency_mb_s"], 4.0 + both["mb_s"])

    def test_three_latency_flows_are_summarized_each_and_judged_by_the_worst(self):
        bulk = [flow(0, 3.0, MB, [2] * 4 + [1] * 4 + [2] * 4, op="write"),
                flow(0, 3.0, MB, [2] * 4 + [1] * 4 + [2] * 4, op="write")]
        alone = latency_flows(-5_000, {"write": 2 * MB, "rpc": 4 * MB, "read": 3 * MB})
        # Started one after another, as exec_async starts them: 1.00, 1.05, 1.10 s.
        both = {op: f for op, f in zip(["write", "rpc", "read"], [
            latency_flows(1_000, {"write": 3 * MB})["write"],
            latency_flows(1_050, {"rpc": 8 * MB})["rpc"],
            latency_flows(1_100, {"read": 3 * MB})["read"]])}
        s = summarize_mode(alone, both, bulk)
        self.assertEqual(list(s["latency"]), ["write", "rpc", "read"])
        self.assertAlmostEqual(s["latency"]["write"]["p99_ratio"], 1.5)
        self.assertAlmostEqual(s["latency"]["rpc"]["p99_ratio"], 2.0)
        self.assertAlmostEqual(s["latency"]["read"]["p99_ratio"], 1.0)
        self.assertAlmostEqual(s["p99_ratio"], 2.0, msg="the target holds for every flow: the worst one")
        self.assertEqual(s["latency"]["rpc"]["reply_size"], 64)
        self.assertNotIn("reply_size", s["latency"]["write"])
        self.assertEqual(s["latency"]["read"]["alone"], {"p50_ns": 1_500_000, "p99_ns": 3 * MB, "ops": 100})
        self.assertEqual(s["latency"]["rpc"]["beside_bulk"]["p99_ns"], 8 * MB)
        # Bulk is beside latency from the first latency start (1.0 s) to the last end
        # (2.1 s): in each of the 2 flows, the operations of buckets 4-7 (1 op each,
        # ending mid-bucket); alone before (4 buckets of 2 ops: 16 MB in 1 s) and after
        # (buckets 8-11, 2 ops each, the first ending at 2.125 s: 16 MB in 0.9 s).
        self.assertAlmostEqual(s["bulk_beside_latency_mb_s"], 2 * 4 * MB / 1.1 / 1e6)
        self.assertAlmostEqual(s["bulk_alone_mb_s"], (16 / 1.0 + 16 / 0.9) / 2)
        lat = sum(f["mb_s"] for f in both.values())
        self.assertAlmostEqual(s["latency_mb_s"], lat)
        self.assertAlmostEqual(s["aggregate_beside_latency_mb_s"], s["bulk_beside_latency_mb_s"] + lat)

    def test_an_rpc_flow_moves_its_request_and_its_reply(self):
        f = flow(0, 1.0, 16, [100] * 4, op="rpc", reply_size=64)
        self.assertEqual(op_bytes(f), 80)
        self.assertAlmostEqual(bandwidth([f], 0, 1000), 400 * 80 / 1e6)
        self.assertEqual(op_bytes(flow(0, 1.0, MB, [1])), MB)

    def test_a_single_flow_is_the_write_flow(self):
        alone, both = flow(-5_000, 1.0, 16, [100] * 4, p99=4 * MB), flow(1_000, 1.0, 16, [50] * 4, p99=6 * MB)
        s = summarize_mode(alone, both, [flow(0, 3.0, MB, [2] * 12)])
        self.assertEqual(list(s["latency"]), ["write"])
        self.assertAlmostEqual(s["latency"]["write"]["p99_ratio"], 1.5)
        with self.assertRaises(ValueError):
            summarize_mode({"write": alone}, {"rpc": both}, [flow(0, 3.0, MB, [2] * 12)])

    def test_medians_over_runs_are_per_flow_and_the_worst_flow_is_judged(self):
        runs = [summary({"write": 1.2, "rpc": 3.0, "read": 1.0}, bulk_alone=9.0),
                summary({"write": 1.4, "rpc": 1.1, "read": 1.3}, bulk_alone=10.0),
                summary({"write": 1.3, "rpc": 1.2, "read": 2.0}, bulk_alone=12.0)]
        m = median_summary(runs)
        self.assertEqual(m["runs"], 3)
        self.assertAlmostEqual(m["latency"]["write"]["p99_ratio"], 1.3)
        self.assertAlmostEqual(m["latency"]["rpc"]["p99_ratio"], 1.2)
        self.assertAlmostEqual(m["latency"]["read"]["p99_ratio"], 1.3)
        self.assertEqual(m["latency"]["rpc"]["p99_ratio_runs"], [3.0, 1.1, 1.2])
        # The largest of the flows' medians (1.3), not the median of each run's largest (2.0).
        self.assertAlmostEqual(m["p99_ratio"], 1.3)
        self.assertEqual(m["p99_ratio_runs"], [3.0, 1.4, 2.0])
        self.assertAlmostEqual(m["bulk_alone_mb_s"], 10.0)
        self.assertEqual(m["latency"]["write"]["beside_bulk"]["p99_ns"], int(2 * MB * 1.3))
        one = median_summary(runs[:1])
        one["latency"]["write"]["p99_ratio"] = 99
        self.assertEqual(runs[0]["latency"]["write"]["p99_ratio"], 1.2, "a single run is copied, not shared")

    def test_aggregate_is_against_none_with_the_same_bulk_operation(self):
        modes = {"none": {"write": summary({"write": 4.0}, 10.0, 10.0), "read": summary({"write": 3.0}, 5.0, 5.0)},
                 "sw-pri": {"write": summary({"write": 1.4}, 9.0, 9.5), "read": summary({"write": 1.4}, 5.0, 4.0)}}
        frontier = {"4 MB/s, 16 KiB": {"read": summary({"write": 1.1}, 5.0, 4.75)}}
        for bulk_op in ("write", "read"):
            add_ratios(per_bulk(modes, bulk_op))
            add_ratios(per_bulk(frontier, bulk_op), per_bulk(modes, bulk_op))
        self.assertAlmostEqual(modes["sw-pri"]["write"]["aggregate_ratio"], 0.95)
        self.assertAlmostEqual(modes["sw-pri"]["read"]["aggregate_ratio"], 0.8)
        self.assertEqual(modes["sw-pri"]["read"]["met"], {"p99_ratio": True, "aggregate_ratio": False})
        self.assertAlmostEqual(frontier["4 MB/s, 16 KiB"]["read"]["aggregate_ratio"], 0.95)
        self.assertEqual(frontier["4 MB/s, 16 KiB"]["read"]["met"], {"p99_ratio": True, "aggregate_ratio": True})
        self.assertNotIn("write", frontier["4 MB/s, 16 KiB"])

    def test_the_table_has_a_row_per_mode_bulk_and_latency_flow(self):
        modes = {"none": {"write": summary({"write": 4.0, "rpc": 3.0, "read": 2.5}),
                          "read": summary({"write": 3.0, "rpc": 2.0, "read": 2.0}, 5.0, 5.0)},
                 "sw-pri": {"write": summary({"write": 1.4, "rpc": 1.2, "read": 1.1}, 9.0, 9.5)}}
        for bulk_op in ("write", "read"):
            add_ratios(per_bulk(modes, bulk_op))
        modes["none"]["write"]["latency"]["rpc"]["reply_size"] = 64
        lines = table(modes).splitlines()
        self.assertEqual(len(lines), 1 + 3 * 3, "a header and a row per latency flow of each pass")
        cells = [re.split(r"\s{2,}", line) for line in lines]
        self.assertEqual(cells[0][:3], ["mode", "bulk", "latency flow"])
        self.assertEqual(cells[1][:4], ["none", "1 MiB write", "write 16 B", "1.00 ms"])
        self.assertTrue(lines[2].lstrip().startswith("rpc 16/64 B"), "later rows leave mode and bulk empty")
        self.assertIn("4.00", lines[1])
        self.assertTrue(lines[1].rstrip().endswith("1.00"), "aggregate vs none on the pass's first row")
        self.assertFalse(lines[2].rstrip().endswith("1.00"))
        self.assertTrue(lines[4].lstrip().startswith("1 MiB read"), "the second bulk row of the same mode")
        self.assertTrue(lines[7].startswith("sw-pri"))
        self.assertTrue(lines[7].rstrip().endswith("0.95"))
        no_none = {"sw-pri": {"write": summary({"write": 1.4})}}
        add_ratios(per_bulk(no_none, "write"))
        self.assertTrue(table(no_none, first="SafeUtil, chunk").splitlines()[1].rstrip().endswith("-"))
        self.assertIn("rpc 2.00 / 4.00 ms", pass_line(modes["none"]["read"]))

    def test_the_flows_run_what_they_are_named(self):
        write, rpc, read = (shlex.split(latency_flow(5, op))[2] for op in ("write", "rpc", "read"))
        self.assertIn("--op write --size 16 ", write)
        self.assertIn(f"--op rpc --size 16 --reply-size 64 --rpc-id {RPC_ID} ", rpc)
        self.assertIn("--op read --size 64 ", read)
        for cmd in (write, rpc, read):
            self.assertTrue(cmd.startswith("lite-admin class set --pid $$ latency >/dev/null && { lite-bench"))
            self.assertIn("lite-admin class unset --pid $$", cmd, "the rule outlives the flow")
            self.assertIn(f"--holder {HOLDER} ", cmd)
        self.assertIn(f"--op read --size {1 << 20} --seconds 9 --class bulk", bulk_flow(9, "read"))
        self.assertIn("--op write", bulk_flow(9))

    def test_the_rpc_server_serves_the_latency_class_and_is_waited_for(self):
        cmd = rpc_server()
        self.assertIn(f"{{ lite-bench serve --id {RPC_ID}", cmd)
        self.assertIn("class set --pid $$ latency", cmd)
        self.assertIn("grep -q 'serving RPC'", cmd)
        self.assertTrue(cmd.rstrip().endswith("exit 1"), "no server in time fails the step, with its log")

    def test_the_operations_to_run_are_chosen_by_flags(self):
        self.assertEqual(parse_ops("write,rpc,read", LATENCY_OPS, "--latency-ops"), ["write", "rpc", "read"])
        self.assertEqual(parse_ops(" read ", BULK_OPS, "--bulk-ops"), ["read"])
        for bad in ("", "write,write", "rpc", "write,send"):
            with self.assertRaises(ValueError, msg=bad) as e:
                parse_ops(bad, BULK_OPS, "--bulk-ops")
            self.assertIn("--bulk-ops", str(e.exception))

    def test_ratios_are_against_the_none_mode_and_checked_against_the_targets(self):
        base = {"aggregate_beside_latency_mb_s": 10.0, "bulk_alone_mb_s": 10.0, "p99_ratio": 8.0}
        sw = {"aggregate_beside_latency_mb_s": 9.5, "bulk_alone_mb_s": 9.0, "p99_ratio": 1.4}
        modes = add_ratios({"none": dict(base), "sw-pri": dict(sw)})
        self.assertAlmostEqual(modes["sw-pri"]["aggregate_ratio"], 0.95)
        self.assertAlmostEqual(modes["sw-pri"]["work_conserving_ratio"], 0.9)
        self.assertEqual(modes["sw-pri"]["met"], {"p99_ratio": True, "aggregate_ratio": True})
        self.assertEqual(modes["none"]["met"], {"p99_ratio": False, "aggregate_ratio": True})

    def test_without_the_none_mode_only_the_latency_target_is_judged(self):
        sw = {"aggregate_beside_latency_mb_s": 9.5, "bulk_alone_mb_s": 9.0, "p99_ratio": 1.4}
        modes = add_ratios({"sw-pri": dict(sw)})
        self.assertIsNone(modes["sw-pri"]["aggregate_ratio"])
        self.assertEqual(modes["sw-pri"]["met"], {"p99_ratio": True, "aggregate_ratio": None})

    def test_frontier_points_are_judged_against_the_none_mode(self):
        modes = add_ratios({"none": {"aggregate_beside_latency_mb_s": 10.0, "bulk_alone_mb_s": 10.0,
                                       "p99_ratio": 3.0}})
        frontier = add_ratios({"1": {"aggregate_beside_latency_mb_s": 1.5, "bulk_alone_mb_s": 10.0, "p99_ratio": 1.4},
                                 "8": {"aggregate_beside_latency_mb_s": 9.2, "bulk_alone_mb_s": 9.5, "p99_ratio": 2.9}},
                                modes)
        self.assertAlmostEqual(frontier["1"]["aggregate_ratio"], 0.15)
        self.assertEqual(frontier["1"]["met"], {"p99_ratio": True, "aggregate_ratio": False})
        self.assertEqual(frontier["8"]["met"], {"p99_ratio": False, "aggregate_ratio": True})
        self.assertAlmostEqual(frontier["8"]["work_conserving_ratio"], 0.95)

    def test_the_frontier_plot_has_a_point_per_mode_and_setting_with_data(self):
        def point(agg, p99):
            return {"aggregate_ratio": agg, "p99_ratio": p99}
        points = frontier_points({"none": point(1.0, 3.4), "sw-pri": point(0.4, 1.8)},
                                   {"1 MB/s, 5 KiB": point(0.1, 1.6), "8 MB/s, 16 KiB": point(0.9, 3.0),
                                    "lost": point(None, 2.0)})
        self.assertEqual([(n, x, y) for n, x, y, _ in points],
                         [("none", 1.0, 3.4), ("sw-pri", 0.4, 1.8), ("1 MB/s, 5 KiB", 0.1, 1.6),
                          ("8 MB/s, 16 KiB", 0.9, 3.0)])
        self.assertEqual({c for n, _, _, c in points if n in ("none", "sw-pri")}, {MODE_COLOR})

    def test_the_latency_flow_runs_in_the_latency_class(self):
        cmd = latency_flow(3)
        self.assertIn("lite-admin class set --pid $$ latency", cmd)
        self.assertIn("&& { lite-bench --quiet flow", cmd)
        self.assertIn("--class bulk", bulk_flow(9))

    def test_the_plot_has_a_panel_pair_per_mode(self):
        f = flow(0, 1.0, 16, [4, 4, 4, 4])
        columns = timeline_columns([("none", {"latency": [f], "bulk": [f]}),
                                      ("sw-pri", {"latency": [f], "bulk": []}), ("hw-sep", {"latency": [], "bulk": []})])
        self.assertEqual([name for name, _ in columns], ["none", "sw-pri"], "a mode without flows has no column")
        for _, panels in columns:
            self.assertEqual([p["ylabel"] for p in panels],
                             ["latency class p99 per interval (ms)", "MB/s over a trailing 2 s window"])

    def test_the_plot_colors_each_latency_flow(self):
        flows = latency_flows(0, {"write": MB, "rpc": MB, "read": MB})
        modes = [("none", {"latency": list(flows.values()), "bulk": [flow(0, 1.0, MB, [1] * 4)]})]
        (_, (p99, bandwidth)), = timeline_columns(modes)
        self.assertEqual([line["color"] for line in p99["lines"]], [LATENCY_COLORS[op] for op in ("write", "rpc", "read")])
        self.assertEqual([line["color"] for line in bandwidth["lines"]],
                         [BULK_COLOR] + [LATENCY_COLORS[op] for op in ("write", "rpc", "read")])
        self.assertEqual(timeline_legend(modes), [(f"latency: {LATENCY_OPS[op]['label']}", LATENCY_COLORS[op])
                                                    for op in ("write", "rpc", "read")] + [("bulk flows", BULK_COLOR)])
        only_write = timeline_legend([("none", {"latency": [flows["write"]], "bulk": []})])
        self.assertEqual([label for label, _ in only_write], ["latency: 16 B LT_write", "bulk flows"],
                         "the legend names the flows that ran")

    def test_bulk_bandwidth_is_over_a_window_of_several_operations(self):
        # One 1 MiB operation every other 250 ms interval: 2 MiB/s, though an interval
        # alone says 4.19 MB/s or nothing.
        bulk = flow(1000, 6.0, 1 << 20, [1, 0] * 12)
        points = windowed_mb_s(bulk, 0)
        self.assertEqual(points[0][0], 1.0 + BANDWIDTH_WINDOW_S, "from the first full window on")
        self.assertEqual(points[-1][0], 7.0, "to the flow's end")
        for _, mb_s in points:
            self.assertAlmostEqual(mb_s, 2 * (1 << 20) / 1e6)

    def test_a_window_shorter_than_an_operation_shows_its_rate_not_nothing(self):
        # Back to back 1 MiB operations of 2.25 s each, one completing every 9th
        # interval: every 2 s window holds 8/9 of one's bytes, split across its edges.
        bulk = flow(0, 6.75, 1 << 20, ([1] + [0] * 8) * 4, p50=2_250_000_000)
        points = windowed_mb_s(bulk, 0)
        self.assertEqual(len(points), 20)
        for _, mb_s in points:
            self.assertAlmostEqual(mb_s, (1 << 20) / 2.25 / 1e6)

    def test_the_plots_are_written_as_svg_and_png(self):
        f = flow(0, 3.0, MB, [1] * 12)
        results = {"flows": {"none": {"write": {"latency": latency_flows(0, {"write": MB, "read": MB}), "bulk": [f]}}},
                   "modes": {"none": {"write": {"aggregate_ratio": 1.0, "p99_ratio": 2.0}}},
                   "frontier": {"1 MB/s, 5 KiB": {"write": {"aggregate_ratio": 0.3, "p99_ratio": 1.2}}}}
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_plots(Path(tmp), "cpu", results, ["write"], "test")
            self.assertEqual([p.name for p in paths],
                             ["qos-cpu.svg", "qos-cpu.png", "qos-cpu-frontier.svg", "qos-cpu-frontier.png"])
            for p in paths:
                head = p.read_bytes()[:300]
                self.assertIn(b"<svg" if p.suffix == ".svg" else b"\x89PNG", head, p.name)
                self.assertGreater(p.stat().st_size, 5000, p.name)


class RunnerTest(unittest.TestCase):
    def setUp(self):
        for patcher in (mock.patch.object(time, "sleep"),
                        mock.patch.object(Runner, "host_cpu", return_value=mock.Mock(
                            wait=mock.Mock(return_value=PROC_STAT)))):
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_a_pass_runs_the_latency_flows_at_once_alone_and_beside_bulk(self):
        c = FakeCluster()
        alone, both, bulk, stats = Runner(c, 100).mode("sw-pri", 2, "read")
        self.assertEqual(list(alone), ["write", "rpc", "read"])
        self.assertEqual(list(both), ["write", "rpc", "read"])
        self.assertEqual([f["op"] for f in bulk], ["read"] * BULK_FLOWS)
        self.assertEqual(stats, {"alone": STATS, "beside": STATS, "wire_queue": {}, "holder_cpu": HOLDER_CPU,
                                 "sender_cpu": HOLDER_CPU, "host_cpu": HOLDER_CPU, "sender_cpu_alone": HOLDER_CPU},
                         "no wire: no queue samples")
        kinds = ["mode" if "lite-admin mode" in s else "stats" if "stats --json" in s else
                 "cpu" if "/proc/stat" in s else "bulk" if "--class bulk" in s else "latency" for n, s in c.commands]
        self.assertEqual(kinds, ["mode"] + ["latency"] * 3 + ["stats", "cpu"] + ["bulk"] * BULK_FLOWS
                         + ["latency"] * 3 + ["stats", "stats", "cpu", "cpu"], "the phase's statistics wait for "
                         "the kernel to see latency traffic")
        self.assertEqual([n for (n, _), kind in zip(c.commands, kinds) if kind == "cpu"],
                         [SENDER, HOLDER, SENDER], "the sender alone, then both beside bulk")
        self.assertTrue(all(n == SENDER for (n, _), kind in zip(c.commands, kinds) if kind != "cpu"))
        self.assertIn("--seconds 6 ", [s for _, s in c.commands if "--class bulk" in s][0], "3 phases of bulk")
        self.assertIn("--interval-ms 1000", [s for _, s in c.commands if "stats" in s][0], "the phase less margins")
        s = summarize_mode(alone, both, bulk, stats)
        self.assertEqual(set(s["latency"]), {"write", "rpc", "read"})
        self.assertEqual(list(s["phases"]), ["write"], "the kernel timed LT_writes only")
        beside = s["phases"]["write"]["beside_bulk"]
        mean = both["write"]["latency"]["mean_ns"]
        self.assertEqual((beside["ops"], beside["user_ns"], beside["in_network_ns"]), (40, mean, 2 * MB))
        self.assertEqual(beside["outside_ns"], max(0, mean - 2 * MB - 101_000))
        self.assertIn("write 16 B", phase_table({"sw-pri": {"read": s}}))
        self.assertNotIn("pacing", s, "nothing was offered: no pacing figures")

    def test_the_phase_beside_bulk_is_measured_once_the_kernel_sees_latency_traffic(self):
        c = FakeCluster()
        answers = iter([False, False, True])
        c.exec = lambda n, script, timeout=120, check=True: Result(
            0, json.dumps({"latency_active": next(answers)}))
        clock = iter([100.0, 100.2, 100.4, 100.6, 100.6])
        with mock.patch.object(time, "time", side_effect=lambda: next(clock)):
            late = Runner(c, 100).latency_started(100.0, 6)
        self.assertAlmostEqual(late, 0.6)
        self.assertAlmostEqual(measured_seconds(6, late), 4.4, msg="what is left of the phase, less margins")
        never = FakeCluster()
        never.exec = lambda n, script, timeout=120, check=True: Result(0, json.dumps({"latency_active": False}))
        clock = iter([100.0, 101.0, 102.0, 103.0, 103.0])
        with mock.patch.object(time, "time", side_effect=lambda: next(clock)):
            self.assertEqual(Runner(never, 100).latency_started(100.0, 6), 3.0, "half a phase at most")

    def test_the_host_s_cpu_is_read_twice_a_phase_apart(self):
        with tempfile.TemporaryDirectory() as tmp:
            stat = Path(tmp) / "stat"
            stat.write_text(PROC_STAT.split("\n", 1)[0] + "\nintr 1\n")
            self.assertEqual(HostStat(2, stat).wait(), "\n".join([PROC_STAT.split("\n", 1)[0]] * 2))

    def test_a_pass_keeps_how_much_of_safe_util_pacing_delivered(self):
        c = FakeCluster()
        alone, both, bulk, stats = Runner(c, 100).mode("sw-pri", 2, "write")
        pacing = {"offered_bytes_per_s": 3.0e6, "paced_bytes_per_s": 2.4e6, "delivered_ratio": 0.8,
                  "paced_wrs": 100, "token_wait_ns": 2 * MB, "place_wait_ns": 3 * MB, "place_hold_ns": 9 * MB,
                  "places_in_use": 1.9}
        beside = {**stats["beside"], "safe_util": 3_000_000, "link_rate": 3_600_000, "found_rate": 3_600_000,
                  "chunk_bytes": 16384, "decreases": 1, "increases": 2, "pacing": pacing}
        s = summarize_mode(alone, both, bulk, {"alone": stats["alone"], "beside": beside})
        self.assertEqual(s["pacing"], pacing)
        note = pacing_note(beside)
        self.assertIn("paced 2.40 of 3.00 MB/s offered (80%)", note)
        self.assertIn("place 3.0 ms, held 9.0 ms, 1.9 places in use", note)

    def test_a_pass_runs_the_chosen_latency_flows_only(self):
        c = FakeCluster()
        alone, both, _, _ = Runner(c, 100).mode("none", 1, "write", ["rpc"])
        self.assertEqual((list(alone), list(both)), (["rpc"], ["rpc"]))
        self.assertTrue(all("--op rpc" in s for _, s in c.commands if "latency" in s and "flow" in s))

    def test_a_failed_flow_fails_the_pass_after_every_flow_ended(self):
        c = FakeCluster(fail_op="rpc")
        with self.assertRaises(CommandFailed) as e:
            Runner(c, 100).mode("none", 1)
        self.assertIn("latency flow rpc alone exited 1", str(e.exception))

    def test_a_hostile_pass_runs_the_latency_flows_alone_then_beside_the_tenant(self):
        c = HostileFakeCluster()
        alone, beside, report, pacing, queue = Runner(c, 100).hostile("sw-pri", "a", 2)
        self.assertEqual((list(alone), list(beside)), (["write", "rpc", "read"], ["write", "rpc", "read"]))
        self.assertEqual((report["op"], report["rc"]), ("write", 0))
        self.assertNotIn("timeline", report)
        self.assertEqual(pacing, {"mode": "sw-pri", "latency_active": True})
        self.assertEqual(queue, {}, "no rate-limited wire, no queue")
        kinds = ["mode" if "lite-admin mode" in s else "stats" if "stats --json" in s else
                 "tenant" if "bulk >/dev/null" in s else "rm" if s.startswith("rm -f") else "latency"
                 for n, s in c.commands]
        self.assertEqual(kinds, ["mode"] + ["latency"] * 3 + ["rm", "tenant"] + ["latency"] * 3 + ["stats"])
        self.assertEqual(c.commands[0], (SENDER, "lite-admin mode sw-pri"))
        self.assertEqual(c.commands[4][1], "rm -f /tmp/qos-hostile.log /tmp/qos-hostile.log.rc",
                         "the last pass's status goes before the tenant starts")
        self.assertTrue(all(n == SENDER for n, _ in c.commands))
        self.assertIn("--seconds 6 ", c.commands[5][1], "3 phases of the tenant")

    def test_a_tenant_that_needs_setting_up_is_waited_for(self):
        c = HostileFakeCluster()
        _, _, report, _, _ = Runner(c, 100).hostile("none", "d", 1, ["write"], lmrs=1000)
        self.assertEqual(tenant_note(report), "allocated in 3.615 s")
        scripts = [s for _, s in c.commands]
        tenant = next(i for i, s in enumerate(scripts) if "lmr-many 1000 " in s)
        self.assertIn("grep -q 'holding '", scripts[tenant + 1], "ready before the latency flows")
        self.assertIn("--hold-seconds 3", scripts[tenant])
        self.assertIn("flow", scripts[tenant + 2])

    def test_a_failed_tenant_is_reported_and_failed_latency_flows_fail_the_pass(self):
        class Failing(HostileFakeCluster):
            def exec_async(self, n, script, timeout=900):
                job = super().exec_async(n, script, timeout)
                if "fail-loop" in script:
                    job.wait.return_value = Result(1, json.dumps(dict(FAIL_LOOP, unexpected=1)))
                return job

        _, beside, report, _, _ = Runner(Failing(), 100).hostile("sw-pri", "c", 1, ["read"])
        self.assertEqual((report["rc"], report["unexpected"], list(beside)), (1, 1, ["read"]))
        self.assertEqual(tenant_note(report), "exited 1")
        c = Failing(fail_op="read")
        with self.assertRaises(CommandFailed) as e:
            Runner(c, 100).hostile("sw-pri", "c", 1, ["read"])
        self.assertIn("latency flow read alone exited 1", str(e.exception))

    def test_the_rpc_server_starts_on_the_holder(self):
        c = FakeCluster()
        Runner(c, 100).serve_rpc()
        self.assertEqual(c.commands, [(HOLDER, rpc_server())])


class MainTest(unittest.TestCase):
    """main() on a FakeCluster: the passes it runs, the JSON, plots and table."""

    def run_main(self, *argv, base=None):
        base = base or FakeCluster
        tmpdir = tempfile.TemporaryDirectory()
        self.addCleanup(tmpdir.cleanup)
        tmp = Path(tmpdir.name)
        (tmp / "build/release/guest/bin").mkdir(parents=True)
        (tmp / "build/release/guest/bin/lite-bench").touch()
        clusters = []

        class Fake(base):
            meta = {"accel": "tcg"}

            def __init__(self, run_dir):
                super().__init__()
                clusters.append(self)

            def up(self, **kw):
                pass

            def join(self, nodes):
                pass

            def splats(self):
                return []

            def down(self, quiet=False):
                pass

        out = io.StringIO()
        busy_host = mock.Mock(wait=mock.Mock(return_value="cpu  0 0 0 0 0 0 0 0\ncpu  90 0 0 10 0 0 0 0\n"))
        with mock.patch.object(cli, "Cluster", Fake), mock.patch.object(cli, "REPO", tmp), \
                mock.patch.object(time, "sleep"), mock.patch.object(signal, "signal"), \
                mock.patch.object(Runner, "host_cpu", return_value=busy_host), \
                mock.patch.object(sys, "argv", ["qos_bench.py", "--out", str(tmp / "out"), *argv]), \
                contextlib.redirect_stdout(out):
            rc = cli.main()
        return rc, out.getvalue(), tmp / "out", clusters[0]

    def test_every_mode_runs_a_pass_per_bulk_operation(self):
        rc, out, d, c = self.run_main("--seconds", "1", "--regime", "cpu", "--frontier", "4",
                                      "--frontier-chunks", "16")
        self.assertEqual(rc, 0, out)
        res = json.loads((d / "qos-cpu.json").read_text())
        self.assertEqual(res["config"]["latency_ops"], ["write", "rpc", "read"])
        self.assertEqual(res["config"]["bulk_ops"], ["write", "read"])
        self.assertEqual(res["config"]["latency_flows"]["rpc"], {"size": 16, "reply_size": 64})
        self.assertEqual(res["config"]["rpc_server"]["node"], HOLDER)
        for mode in MODES:
            for bulk_op in ("write", "read"):
                s = res["modes"][mode][bulk_op]
                self.assertEqual(list(s["latency"]), ["write", "rpc", "read"])
                self.assertAlmostEqual(s["aggregate_ratio"], 1.0, msg="identical made-up flows")
                flows = res["flows"][mode][bulk_op]
                self.assertEqual([f["op"] for f in flows["bulk"]], [bulk_op] * BULK_FLOWS)
                self.assertEqual(list(flows["latency"]), ["write", "rpc", "read"])
        self.assertEqual(set(res["frontier"]["4 MB/s, 16 KiB"]), {"write", "read"})
        for name in ("qos-cpu", "qos-cpu-bulk-read", "qos-cpu-frontier", "qos-cpu-frontier-bulk-read"):
            self.assertIn("<svg", (d / f"{name}.svg").read_text(), name)
            self.assertTrue((d / f"{name}.png").read_bytes().startswith(b"\x89PNG"), name)
        servers = [i for i, (n, s) in enumerate(c.commands) if n == HOLDER and "lite-bench serve" in s]
        first_flow = min(i for i, (_, s) in enumerate(c.commands) if "lite-bench --quiet flow" in s)
        self.assertEqual(len(servers), 1, "one server for the whole benchmark")
        self.assertLess(servers[0], first_flow, "started before any flow")
        self.assertIn("rpc 16/64 B", out)
        self.assertIn("sw-pri targets, bulk read", out)
        self.assertEqual(res["flows"]["sw-pri"]["write"]["host_cpu"]["busy"], 0.9)
        self.assertIn("the host's cores were 90% busy beside bulk write in sw-pri (median)", out)
        self.assertIn("; host 90% busy", out)

    def test_one_latency_and_one_bulk_operation_make_a_quick_run(self):
        rc, out, d, c = self.run_main("--seconds", "1", "--latency-ops", "write", "--bulk-ops", "read",
                                      "--modes", "none,sw-pri")
        self.assertEqual(rc, 0, out)
        res = json.loads((d / "qos-link.json").read_text())
        self.assertEqual(set(res["modes"]), {"none", "sw-pri"})
        self.assertEqual(list(res["modes"]["sw-pri"]), ["read"])
        self.assertEqual(list(res["modes"]["sw-pri"]["read"]["latency"]), ["write"])
        self.assertIsNone(res["config"]["rpc_server"])
        self.assertFalse(any("serve" in s for _, s in c.commands), "no RPC server without the rpc flow")
        self.assertFalse(any("--op rpc" in s for _, s in c.commands))
        self.assertTrue((d / "qos-link-bulk-read.svg").exists() and (d / "qos-link-bulk-read.png").exists())
        self.assertFalse((d / "qos-link.svg").exists())

    def test_hostile_runs_every_attack_in_sw_pri_and_none(self):
        rc, out, d, c = self.run_main("--seconds", "1", "--hostile", "--hostile-lmrs", "1000",
                                      base=HostileFakeCluster)
        self.assertEqual(rc, 0, out)
        res = json.loads((d / "qos-hostile.json").read_text())
        self.assertEqual([(r["attack"], r["mode"]) for r in res["rows"]],
                         [(a, m) for a in "abcde" for m in ("sw-pri", "none")], "attack by attack")
        self.assertEqual(res["config"]["modes"], ["sw-pri", "none"])
        self.assertEqual(res["config"]["tenant"]["d"]["label"], "1 000 LMRs held")
        self.assertEqual(res["target"], {"p99_ratio": ["<=", 1.5]})
        self.assertEqual(set(res["flows"]), set("abcde"))
        self.assertEqual(res["flows"]["c"]["none"]["tenant"]["calls"], FAIL_LOOP["calls"])
        for r in res["rows"]:
            self.assertAlmostEqual(r["summary"]["p99_ratio"], 1.0, msg="identical made-up flows")
            self.assertTrue(r["summary"]["met"])
        modes = [s.split()[-1] for _, s in c.commands if s.startswith("lite-admin mode")]
        self.assertEqual(modes, ["none"] + ["sw-pri", "none"] * 5, "Target99 probe, then each attack in each mode")
        tenants = [s for _, s in c.commands if "bulk >/dev/null" in s]
        self.assertEqual(["lmr-many" in t for t in tenants], [False] * 8 + [True] * 2, "d last")
        bulk = [i for i, (_, s) in enumerate(c.commands) if "--class bulk" in s]
        first_tenant = min(i for i, (_, s) in enumerate(c.commands) if "bulk >/dev/null" in s)
        self.assertEqual(len(bulk), BULK_FLOWS, "no bulk passes: only the bulk writers that find the link")
        self.assertLess(max(bulk), first_tenant, "the node finds its link before the first attack")
        self.assertTrue(res["config"]["fresh_node"] is False)
        self.assertIn("a: 8 B LT_write flood, 16 threads", out)
        self.assertIn("sw-pri: p99 ratio <= 1.5 against 5 of 5 attacks", out)
        self.assertFalse((d / "qos-link.json").exists())

    def test_a_fresh_node_meets_the_first_attack_without_finding_its_link(self):
        rc, out, d, c = self.run_main("--seconds", "1", "--hostile", "--attacks", "a", "--fresh-node",
                                      base=HostileFakeCluster)
        self.assertEqual(rc, 0, out)
        self.assertFalse(any("--class bulk" in s for _, s in c.commands), "no bulk writers")
        self.assertTrue(json.loads((d / "qos-hostile.json").read_text())["config"]["fresh_node"])

    def test_without_hostile_nothing_hostile_runs(self):
        rc, out, d, c = self.run_main("--seconds", "1", "--latency-ops", "write", "--bulk-ops", "write")
        self.assertEqual(rc, 0, out)
        self.assertEqual([s.split()[-1] for _, s in c.commands if s.startswith("lite-admin mode")][1:4],
                         ["none", "hw-sep", "sw-pri"], "every mode by default")
        self.assertFalse(any("bulk >/dev/null" in s for _, s in c.commands))
        self.assertFalse((d / "qos-hostile.json").exists())

    def test_a_stopped_hostile_run_reports_what_ran(self):
        class Stopping(HostileFakeCluster):
            def exec_async(self, n, script, timeout=900):
                if "fail-loop" in script:
                    raise KeyboardInterrupt("signal 15")
                return super().exec_async(n, script, timeout)

        rc, out, d, _ = self.run_main("--seconds", "1", "--hostile", "--modes", "sw-pri", base=Stopping)
        self.assertEqual(rc, 1)
        res = json.loads((d / "qos-hostile.json").read_text())
        self.assertEqual([r["attack"] for r in res["rows"]], ["a", "b"])
        self.assertEqual(res["errors"][-1]["step"], "stopped")
        self.assertIn("stopped (signal 15)", out)
        self.assertIn("against 2 of 2 attacks", out)
