"""tools/host_bench.py (litebench/bench/hostcost.py): the chunk SW-Pri uses at a rate, read
from the module's own constants; ns per operation into the share of a core; criterion's
estimates read back; the table and the JSON."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from litebench.bench import hostcost as hc

CONSTS = hc.chunk_constants(hc.CHUNK_RS.read_text())


def write_estimates(root, bench_id, median, low, high):
    new = Path(root, bench_id.replace("/", "_"), "new")
    new.mkdir(parents=True)
    (new / "benchmark.json").write_text(json.dumps({"full_id": bench_id}))
    estimate = {"point_estimate": median, "confidence_interval": {"lower_bound": low, "upper_bound": high}}
    (new / "estimates.json").write_text(json.dumps({"median": estimate, "mean": estimate}))


class Conversion(unittest.TestCase):
    def test_the_chunk_is_the_modules_at_every_rate(self):
        # pacer/chunk.rs's own test: 4 packets on slow links, 25 us of a 1 GB/s link,
        # one work request (32 KiB) from there on.
        self.assertEqual(CONSTS["CHUNK_MAX"], 32 << 10)
        self.assertEqual(hc.link_chunk(4 << 20, CONSTS), 4096)
        self.assertEqual(hc.link_chunk(1_000_000_000, CONSTS), 24 * 1024)
        self.assertEqual(hc.link_chunk(hc.gbit_bytes(25), CONSTS), 32 << 10)
        self.assertEqual(hc.link_chunk(hc.gbit_bytes(100), CONSTS), 32 << 10)

    def test_constants_are_read_with_shifts_and_underscores(self):
        source = "pub(crate) const PACKET_BYTES: u64 = 1024;\nconst BUDGET_PACKETS: u64 = 4;\n" \
                 "pub(crate) const MIN_CHUNK_NS: u64 = 25_000;\npub(crate) const CHUNK_MAX: u64 = 32 << 10;\n"
        self.assertEqual(hc.chunk_constants(source),
                         {"PACKET_BYTES": 1024, "BUDGET_PACKETS": 4, "MIN_CHUNK_NS": 25_000, "CHUNK_MAX": 32768})
        with self.assertRaises(hc.Error):
            hc.chunk_constants("const PACKET_BYTES: u64 = 1024;")

    def test_ns_per_op_becomes_a_share_of_a_core(self):
        self.assertEqual(hc.core_share(100, 10_000_000), 1.0)
        self.assertAlmostEqual(hc.core_share(50, 10_000_000), 0.5)
        # 100 Gbit/s of 32 KiB chunks: 381 470 chunks/s; 262 ns each is a tenth of a core.
        per_s = hc.gbit_bytes(100) / (32 << 10)
        self.assertAlmostEqual(per_s, 381_469.7, places=1)
        self.assertAlmostEqual(hc.core_share(262.144, per_s), 0.1)

    def test_the_share_rows_use_the_links_chunks_and_the_latency_path(self):
        medians = {bench_id: 10.0 for bench_id, _ in hc.BENCHES}
        medians["pacer_admit/flows/1000"] = 2621.44
        medians["aimd_step/samples/128"] = 1280.0
        rows = hc.shares(medians, CONSTS)
        fast = next(row for row in rows if row.get("gbit") == 100)
        self.assertEqual(fast["chunk_bytes"], 32 << 10)
        self.assertAlmostEqual(fast["share"]["1000"], 1.0)
        self.assertAlmostEqual(fast["share"]["1"], 10 / 2621.44)
        latency = rows[-1]
        # lookup, layout, class, sample (10 ns each) and a 128th of the AIMD step.
        self.assertAlmostEqual(latency["path_ns"], 50.0)
        self.assertAlmostEqual(latency["share"]["path"], 0.5)


class Results(unittest.TestCase):
    def test_estimates_are_read_by_id_and_a_missing_bench_fails(self):
        with tempfile.TemporaryDirectory() as root:
            for i, (bench_id, _) in enumerate(hc.BENCHES):
                write_estimates(root, bench_id, 10.0 + i, 9.0 + i, 11.0 + i)
            found = hc.read_estimates(Path(root))
            self.assertEqual(found["handle_lookup/lmrs/1"], (10.0, 9.0, 11.0))
            self.assertEqual(list(found), [bench_id for bench_id, _ in hc.BENCHES])
            with self.assertRaisesRegex(hc.Error, "by this run"):
                hc.read_estimates(Path(root), since=4e9)
        with tempfile.TemporaryDirectory() as root:
            write_estimates(root, "latency_sample", 1, 1, 1)
            with self.assertRaisesRegex(hc.Error, "handle_lookup/lmrs/1,"):
                hc.read_estimates(Path(root))

    def test_no_run_prints_the_table_or_json(self):
        with tempfile.TemporaryDirectory() as root:
            for bench_id, _ in hc.BENCHES:
                write_estimates(root, bench_id, 20.0, 19.0, 21.0)
            with mock.patch.object(hc, "criterion_dir", return_value=Path(root)):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.assertEqual(hc.main(["--no-run"]), 0)
                self.assertIn("100 Gbit/s of paced bulk, 32 KiB chunks", out.getvalue())
                self.assertIn("Justitia", out.getvalue())
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.assertEqual(hc.main(["--no-run", "--json"]), 0)
                results = json.loads(out.getvalue())
                self.assertEqual(len(results["benches"]), len(hc.BENCHES))
                self.assertEqual(results["shares"][0]["chunk_bytes"], 32 << 10)
