"""Host tests of tools/bench.py --runs: the runs' numbers as one result, and each
row's ratio the median of the runs' (run by `make test-host`)."""

import copy
import unittest

from litebench.bench.report import comparisons, fmt_spread, format_table
from litebench.bench.runs import median_of, spread
from test_bench import sample_results


class MedianOfRuns(unittest.TestCase):
    def test_numbers_lists_and_text(self):
        runs = [{"a": {"n": 3, "f": 1.5, "rounds": [1], "tool": "x"}},
                {"a": {"n": 1, "f": 0.5, "rounds": [2], "tool": "y"}},
                {"a": {"n": 2, "f": 2.5, "rounds": [3], "tool": "z"}, "b": 7}]
        self.assertEqual(median_of(runs), {"a": {"n": 2, "f": 1.5, "rounds": [1, 2, 3], "tool": "x"}, "b": 7})

    def test_a_run_without_a_number_is_left_out(self):
        self.assertEqual(median_of([{"n": 10}, {"n": None}, {"n": 20}]), {"n": 15})
        self.assertIsNone(median_of([None, None]))
        # An even count of whole numbers whose median is not whole stays exact.
        self.assertEqual(median_of([1, 2]), 1.5)


class Spread(unittest.TestCase):
    def test_the_ratio_and_the_verdict_are_the_runs_median(self):
        base = sample_results()
        runs = []
        for factor in (1.0, 1.2, 0.9):
            run = copy.deepcopy(base)
            for r in run["lite"]["lat_read"].values():
                if r.get("median_ns"):
                    r["median_ns"] = int(r["median_ns"] * factor)
            runs.append(run)
        merged = dict(base, lite=median_of([r["lite"] for r in runs]), native=median_of([r["native"] for r in runs]))
        rows = spread([comparisons(r) for r in runs], comparisons(merged))
        r8 = next(r for r in rows if r["metric"] == "LT_read median vs ib_read_lat" and r["size"] == 8)
        self.assertEqual([round(x, 2) for x in r8["ratios"]], [1.1, 1.32, 0.99])
        self.assertAlmostEqual(r8["ratio"], 1.1)
        self.assertFalse(r8["met"])
        self.assertEqual(fmt_spread(r8["ratios"]), "0.99-1.32")
        table = format_table(rows)
        self.assertIn("runs", table.splitlines()[0])
        self.assertIn("0.99-1.32", table)

    def test_one_run_shows_no_spread(self):
        rows = comparisons(sample_results())
        spread([rows], rows)
        self.assertEqual(fmt_spread(rows[0]["ratios"]), "")
        self.assertNotIn("runs", format_table(rows).splitlines()[0])


if __name__ == "__main__":
    unittest.main()
