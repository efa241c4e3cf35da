#!/usr/bin/env python3
"""Tests of qos_bench.py's arithmetic on made-up flows (run by `make test`)."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qos_bench as q  # noqa: E402


def flow(start_ms, seconds, size, buckets, p50=1_000_000, p99=2_000_000, interval_ms=250):
    """A flow JSON like lite-bench's: `buckets` are ops per interval from the start."""
    ops = sum(buckets)
    return {"started_unix_ms": start_ms, "seconds": seconds, "size": size, "ops": ops,
            "mb_s": ops * size / seconds / 1e6, "latency": {"median_ns": p50, "p99_ns": p99},
            "timeline": [{"t": i * interval_ms / 1000, "ops": n, "mb_s": n * size / (interval_ms / 1000) / 1e6,
                          "p50_ns": p50, "p99_ns": p99} for i, n in enumerate(buckets) if n]}


class QosBenchTest(unittest.TestCase):
    def test_bandwidth_counts_completed_bytes_over_the_window(self):
        # 4 ops of 1 MB per 250 ms for 2 s: 16 MB/s, empty buckets included.
        f = flow(10_000, 2.0, 1_000_000, [4, 0, 4, 4, 4, 0, 8, 8])
        self.assertAlmostEqual(q.bandwidth([f], 10_000, 12_000), 16.0)
        self.assertAlmostEqual(q.bandwidth([f], 10_000, 10_500), 8.0, msg="the first half second")
        self.assertAlmostEqual(q.bandwidth([f, f], 11_500, 12_000), 64.0, msg="two flows add up")
        self.assertEqual(q.bandwidth([f], 12_000, 12_000), 0.0)

    def test_a_mode_splits_bulk_around_the_latency_flow(self):
        mb = 1_000_000
        bulk = [flow(0, 3.0, mb, [2] * 4 + [1] * 4 + [2] * 4)]
        alone = flow(-5_000, 1.0, 16, [100] * 4, p50=1_000_000, p99=4_000_000)
        both = flow(1_000, 1.0, 16, [50] * 4, p50=3_000_000, p99=6_000_000)
        s = q.summarize_mode(alone, both, bulk)
        self.assertAlmostEqual(s["bulk_alone_mb_s"], 8.0)
        self.assertAlmostEqual(s["bulk_beside_latency_mb_s"], 4.0)
        self.assertAlmostEqual(s["p99_ratio"], 1.5)
        self.assertAlmostEqual(s["aggregate_beside_latency_mb_s"], 4.0 + both["mb_s"])

    def test_ratios_are_against_the_none_mode_and_checked_against_the_targets(self):
        base = {"aggregate_beside_latency_mb_s": 10.0, "bulk_alone_mb_s": 10.0, "p99_ratio": 8.0}
        sw = {"aggregate_beside_latency_mb_s": 9.5, "bulk_alone_mb_s": 9.0, "p99_ratio": 1.4}
        modes = q.add_ratios({"none": dict(base), "sw-pri": dict(sw)})
        self.assertAlmostEqual(modes["sw-pri"]["aggregate_ratio"], 0.95)
        self.assertAlmostEqual(modes["sw-pri"]["work_conserving_ratio"], 0.9)
        self.assertEqual(modes["sw-pri"]["met"], {"p99_ratio": True, "aggregate_ratio": True})
        self.assertEqual(modes["none"]["met"], {"p99_ratio": False, "aggregate_ratio": True})

    def test_without_the_none_mode_only_the_latency_target_is_judged(self):
        sw = {"aggregate_beside_latency_mb_s": 9.5, "bulk_alone_mb_s": 9.0, "p99_ratio": 1.4}
        modes = q.add_ratios({"sw-pri": dict(sw)})
        self.assertIsNone(modes["sw-pri"]["aggregate_ratio"])
        self.assertEqual(modes["sw-pri"]["met"], {"p99_ratio": True, "aggregate_ratio": None})

    def test_frontier_points_are_judged_against_the_none_mode(self):
        modes = q.add_ratios({"none": {"aggregate_beside_latency_mb_s": 10.0, "bulk_alone_mb_s": 10.0,
                                       "p99_ratio": 3.0}})
        frontier = q.add_ratios({"1": {"aggregate_beside_latency_mb_s": 1.5, "bulk_alone_mb_s": 10.0, "p99_ratio": 1.4},
                                 "8": {"aggregate_beside_latency_mb_s": 9.2, "bulk_alone_mb_s": 9.5, "p99_ratio": 2.9}},
                                modes)
        self.assertAlmostEqual(frontier["1"]["aggregate_ratio"], 0.15)
        self.assertEqual(frontier["1"]["met"], {"p99_ratio": True, "aggregate_ratio": False})
        self.assertEqual(frontier["8"]["met"], {"p99_ratio": False, "aggregate_ratio": True})
        self.assertAlmostEqual(frontier["8"]["work_conserving_ratio"], 0.95)

    def test_the_frontier_plot_marks_every_point_and_the_target_region(self):
        def point(agg, p99):
            return {"aggregate_ratio": agg, "p99_ratio": p99}
        svg = q.svg_frontier("t", {"none": point(1.0, 3.4), "sw-pri": point(0.4, 1.8)},
                             {"1 MB/s, 5 KiB": point(0.1, 1.6), "8 MB/s, 16 KiB": point(0.9, 3.0),
                              "lost": point(None, 2.0)})
        self.assertTrue(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"))
        self.assertEqual(svg.count("<circle"), 4, "a point per mode and setting with data")
        for label in (">none<", ">sw-pri<", ">1 MB/s, 5 KiB<", ">8 MB/s, 16 KiB<", ">targets<"):
            self.assertIn(label, svg)

    def test_the_latency_flow_runs_in_the_latency_class(self):
        cmd = q.latency_flow(3)
        self.assertIn("lite-admin class set --pid $$ latency", cmd)
        self.assertIn("exec lite-bench --quiet flow", cmd)
        self.assertIn("--class bulk", q.bulk_flow(9))

    def test_the_plot_has_a_panel_pair_per_mode(self):
        f = flow(0, 1.0, 16, [4, 4, 4, 4])
        svg = q.svg_timeline("t", [("none", {"latency": [f], "bulk": [f]}), ("sw-pri", {"latency": [f], "bulk": []})])
        self.assertTrue(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"))
        self.assertEqual(svg.count("latency class p99"), 2)


if __name__ == "__main__":
    unittest.main()
