#!/usr/bin/env python3
"""tools/bench_docs.py (litebench/bench_docs.py): which benchmark wrote a JSON file,
the tables it renders, the latest files it picks, the block it rewrites between the
markers, --check, --snapshot, and that the committed docs/benchmarks.md is fresh."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path

from litebench import bench_docs as bd

DOC = f"""# Benchmarks

Text before.

{bd.BEGIN}
old results
{bd.END}

Text after.
"""


def bench_json(date="2026-11-24", lite_ns=943_000, met=True):
    return {"config": {"kernel": "release", "nodes": 3, "quick": False, "started": f"{date}T10:00:00+0000"},
            "duration_s": 782, "targets_met": 1 if met else 0, "targets_evaluated": 1,
            "comparisons": [
                {"metric": "LT_write median vs ib_write_lat x 2", "size": 8, "lite": lite_ns, "native": 11_000_000,
                 "unit": "ns", "ratio": lite_ns / 11_000_000, "target": "<= 1.05", "kind": "lat_median", "met": met,
                 "note": ""},
                {"metric": "LT_write bw (1 thread) vs ib_write_bw", "size": 1 << 20, "lite": 12.4, "native": 9.0,
                 "unit": "MiB/s", "ratio": 1.38, "target": ">= 0.95", "kind": "bw", "met": True, "note": ""},
                {"metric": "LT_read median vs ib_read_lat -e (sleeps on events)", "size": 65536, "lite": 3_800_000,
                 "native": 3_240_000, "unit": "ns", "ratio": 1.17, "target": "-", "kind": "context", "met": None,
                 "note": ""}]}


def qos_json(label, ratio):
    summary = {"latency": {"read": {"p99_ratio": 1.03}, "write": {"p99_ratio": ratio}},
               "p99_ratio": max(ratio, 1.03), "bulk_alone_mb_s": 1.03, "bulk_beside_latency_mb_s": 0.96,
               "aggregate_ratio": 0.947, "met": {"p99_ratio": True, "aggregate_ratio": True}}
    return {"snapshot": {"date": "2026-11-29", "label": label, "command": "tools/qos_bench.py --runs 3"},
            "config": {"regime": "link", "runs": 3, "wire": {"node": 1, "rate_bytes_s": 1 << 20}},
            "modes": {"sw-pri": {"write": summary}}, "frontier": {}, "duration_s": 432}


HOSTILE = {"config": {"regime": "link"}, "target": {"p99_ratio": ["<=", 1.5]},
           "medians": [{"attack": "e", "label": "32 forked processes", "mode": "none", "runs": 3,
                        "summary": {"latency": {"write": {"p99_ratio": 1031.4}}, "p99_ratio": 1031.4, "met": False}},
                       {"attack": "e", "label": "32 forked processes", "mode": "sw-pri", "runs": 3,
                        "tenant": "1.01, 1.14, 1.26",
                        "summary": {"latency": {"write": {"p99_ratio": 0.99}}, "p99_ratio": 0.99, "met": True}}]}

ACCESS = {"bench": "access", "kernel": "release", "rounds": 2, "quick": False, "seconds": 1306,
          "rows": [{"metric": "free 1 GiB", "global": {"median": 92_000_000, "min": 90_000_000, "max": 94_000_000},
                    "chunks": {"median": 95_000_000}, "ratio": 1.04},
                   {"metric": "LT_write 1 MiB MiB/s", "global": {"median": 15.5}, "chunks": {"median": 15.0},
                    "ratio": 0.97},
                   {"metric": "100,000 LMRs: allocation s", "global": {"median": 197}, "chunks": {"median": 219},
                    "ratio": 1.11}]}


class BenchDocsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.doc = self.dir / "benchmarks.md"
        self.doc.write_text(DOC)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, data):
        path = self.dir / name
        path.write_text(json.dumps(data))
        return path

    def run_tool(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = bd.run([str(a) for a in args])
        return rc, out.getvalue(), err.getvalue()

    def test_each_benchmarks_json_is_recognized(self):
        self.assertEqual(bd.kind_of(bench_json()), "bench")
        self.assertEqual(bd.kind_of(qos_json("set 1", 1.0)), "qos")
        self.assertEqual(bd.kind_of(HOSTILE), "qos-hostile")
        self.assertEqual(bd.kind_of(ACCESS), "access")
        with self.assertRaises(bd.Error):
            bd.kind_of({"something": "else"})

    def test_tables_show_the_figures_as_the_benchmarks_name_them(self):
        paths = [self.write("results.json", bench_json(met=False)), self.write("qos.json", qos_json("set 9", 0.95)),
                 self.write("hostile.json", HOSTILE), self.write("access.json", ACCESS)]
        block = bd.render(paths, self.doc)
        self.assertIn("| LT_write median vs ib_write_lat x 2 | 8 B | 943 us | 11.0 ms | 0.09 | <= 1.05 | **no** |",
                      block)
        self.assertIn("| 1 MiB | 12.4 MiB/s | 9.0 MiB/s | 1.38 | >= 0.95 | yes |", block)
        self.assertIn("| 64 KiB | 3.80 ms | 3.24 ms | 1.17 | - |  |", block, "context rows have no target")
        self.assertIn("0 of 1 targets met", block)
        self.assertIn("| sw-pri | 1 MiB write | 0.95 | 1.03 | 1.03 | 1.03, 0.96 | 0.947 | p99 met, aggregate met |",
                      block, "write before read; three decimals for the aggregate")
        self.assertIn("| e: 32 forked processes | none | 1031 | 1031 | - | **missed** |", block)
        self.assertIn("| e: 32 forked processes | sw-pri | 0.99 | 0.99 | 1.01, 1.14, 1.26 | met |", block)
        self.assertIn("| free 1 GiB | 92.0 ms (90.0 ms - 94.0 ms) | 95.0 ms | 1.04 |", block)
        self.assertIn("| LT_write 1 MiB MiB/s | 15.5 | 15.0 | 0.97 |", block)
        self.assertIn("| 100,000 LMRs: allocation s | 197 s | 219 s | 1.11 |", block)
        self.assertIn("`results.json`", block, "each table names its file (a link inside the repository)")
        order = [block.index(t) for t in ("### `make bench`", "### Priority classes beside", "### Priority classes "
                                          "against", "### Per-range keys")]
        self.assertEqual(order, sorted(order), "sections in a fixed order")

    def test_the_read_phase_account_is_a_table_per_size(self):
        data = bench_json()
        data["read_phases"] = {"8": {"pin_ns": 29_500, "wire_ns": 1_400_000, "ib_read_lat_ns": 1_480_000,
                                     "slept_share": 0.19}}
        block = bd.render([self.write("results.json", data)], self.doc)
        self.assertIn("| phase | 8 B |", block)
        self.assertIn("| entry to buffer ready | 29.5 us |", block)
        self.assertIn("| posted to completion handled | 1.40 ms |", block)
        self.assertIn("| ib_read_lat, as timed | 1.48 ms |", block)
        self.assertIn("| reads that slept | 19 % |", block)

    def test_only_each_benchmarks_latest_files_are_shown(self):
        old = self.write("old.json", bench_json(date="2026-11-20", lite_ns=500_000))
        new = self.write("new.json", bench_json(date="2026-11-24"))
        set10, set9 = self.write("set10.json", qos_json("set 10", 1.01)), self.write("set9.json", qos_json("set 9", 0.95))
        block = bd.render([old, new, set10, set9], self.doc)
        self.assertNotIn("500 us", block)
        self.assertIn("943 us", block)
        self.assertLess(block.index("set 9"), block.index("set 10"), "both sets of the latest date, in order")

    def test_a_run_of_some_sections_hides_no_whole_run(self):
        whole = self.write("whole.json", bench_json(date="2026-11-24"))
        partial = bench_json(date="2026-12-03", lite_ns=500_000)
        partial["config"]["only"] = ["paths"]
        older_partial = bench_json(date="2026-11-30", lite_ns=600_000)
        older_partial["config"]["only"] = ["paths"]
        block = bd.render([whole, self.write("paths.json", partial), self.write("old-paths.json", older_partial)],
                          self.doc)
        self.assertIn("943 us", block, "the whole run stays")
        self.assertIn("500 us", block)
        self.assertIn("--only paths", block)
        self.assertNotIn("600 us", block, "of the runs of the same sections, the latest")

    def test_a_quick_run_hides_no_full_run(self):
        full = self.write("full.json", bench_json(date="2026-12-04"))
        quick = bench_json(date="2026-12-05", lite_ns=500_000)
        quick["config"]["quick"] = True
        block = bd.render([self.write("quick.json", quick), full], self.doc)
        self.assertIn("943 us", block, "the full run stays")
        self.assertIn("500 us", block)
        self.assertLess(block.index("943 us"), block.index("500 us"), "the full run first")

    def test_a_run_with_other_vcpus_hides_no_run(self):
        two = self.write("two.json", bench_json(date="2026-12-04"))
        one = bench_json(date="2026-12-05", lite_ns=500_000)
        one["config"]["smp"] = 1
        block = bd.render([self.write("one.json", one), two], self.doc)
        self.assertIn("943 us", block, "the run with two vCPUs (none recorded) stays")
        self.assertIn("500 us", block)
        self.assertIn("1 vCPU per guest", block)
        self.assertIn("2 vCPUs per guest", block)

    def test_the_block_is_rewritten_and_checked(self):
        path = self.write("results.json", bench_json())
        self.assertEqual(self.run_tool("--check", "--doc", self.doc, path)[0], 1, "the fixture's block is stale")
        rc, out, _ = self.run_tool("--doc", self.doc, path)
        self.assertEqual(rc, 0)
        self.assertIn("rewrote", out)
        text = self.doc.read_text()
        self.assertTrue(text.startswith("# Benchmarks\n\nText before.\n"))
        self.assertTrue(text.endswith(f"{bd.END}\n\nText after.\n"))
        self.assertNotIn("old results", text)
        self.assertIn("943 us", text)
        self.assertEqual(self.run_tool("--check", "--doc", self.doc, path)[0], 0)
        self.assertEqual(self.run_tool("--doc", self.doc, path)[1], "", "a second run changes nothing")
        path.write_text(json.dumps(bench_json(lite_ns=950_000)))
        rc, _, err = self.run_tool("--check", "--doc", self.doc, path)
        self.assertEqual(rc, 1)
        self.assertIn("stale", err)
        self.assertEqual(self.doc.read_text(), text, "--check writes nothing")
        rc, out, _ = self.run_tool("--stdout", "--doc", self.doc, path)
        self.assertEqual((rc, self.doc.read_text()), (0, text), "--stdout writes nothing either")
        self.assertIn("950 us", out)

    def test_missing_markers_and_bad_input_fail_cleanly(self):
        path = self.write("results.json", bench_json())
        self.doc.write_text("# no markers\n")
        rc, _, err = self.run_tool("--doc", self.doc, path)
        self.assertEqual(rc, 1)
        self.assertIn("markers", err)
        rc, _, err = self.run_tool("--doc", self.doc, self.write("x.json", {"nothing": 1}))
        self.assertEqual(rc, 1)
        self.assertIn("not the JSON of", err)
        self.assertEqual(self.run_tool("--doc", self.doc, self.dir / "absent.json")[0], 1)

    def test_a_snapshot_records_its_date_and_command(self):
        path = self.write("results.json", bench_json())
        into = self.dir / "measurements"
        into.mkdir()
        rc, out, _ = self.run_tool("--snapshot", into, "--command", "make bench", path)
        self.assertEqual(rc, 0, out)
        saved = json.loads((into / "2026-11-24-bench.json").read_text())
        self.assertEqual(saved["snapshot"]["date"], "2026-11-24")
        self.assertEqual(saved["snapshot"]["command"], "make bench")
        self.assertEqual(saved["comparisons"], bench_json()["comparisons"])
        self.assertEqual(self.run_tool("--snapshot", into, path)[0], 1, "never overwrites a snapshot")
        on_siw = bench_json()
        on_siw["config"] = {**on_siw.get("config", {}), "provider": "siw"}
        rc, out, _ = self.run_tool("--snapshot", into, self.write("siw.json", on_siw))
        self.assertEqual(rc, 0, out)
        self.assertTrue((into / "2026-11-24-bench-siw.json").exists(), "a provider's run beside rxe's")

    def test_the_committed_block_is_fresh(self):
        snapshots = sorted((bd.REPO / "docs" / "measurements").glob("*.json"))
        self.assertTrue(snapshots)
        rc, _, err = self.run_tool("--check", *snapshots)
        self.assertEqual(rc, 0, err)


if __name__ == "__main__":
    unittest.main()
