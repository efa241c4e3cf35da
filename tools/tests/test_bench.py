"""Host tests of tools/bench.py's pure parts: perftest parsers, the ratio table and
the latency chart (run by `make test-host`)."""

import json
import re
import tempfile
import unittest
import xml.etree.ElementTree as ET
from pathlib import Path

from litebench import plots
from litebench.bench.cli import sections_arg, sizes_arg
from litebench.bench.output import last_json, parse_perftest_bw, parse_perftest_lat
from litebench.bench.report import (call_phases, chart_panels, compare, comparisons, fmt_ns, fmt_size,
                                    format_call_phases, format_read_medians, format_read_phases, format_table,
                                    read_medians, read_phases)
from litebench.bench.runner import Bench
from litebench.bench.steps import PATHS_ROUNDS, RPC_CALLER_ROUNDS, run_steps
from litebench.cluster.cluster import Result

SVG = "{http://www.w3.org/2000/svg}"

# perftest 4.5 (Debian 12) output, written from its format strings:
#   " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
WRITE_LAT = """\
 Conflicting CPU frequency values detected: 2394.454000 != 2394.460000. CPU Frequency is not max.
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF\t\tDevice         : rxe0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0011 PSN 0x3c6f2a RKey 0x0001d4 VAddr 0x0055d0b9a7e000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:01
 remote address: LID 0000 QPN 0x0012 PSN 0x8f1b07 RKey 0x0001f0 VAddr 0x0055f2c1b60000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 4096    200          1021.35        30211.87     1893.40 \t       2544.31     \t2711.52\t\t14322.08 \t\t30211.87
---------------------------------------------------------------------------------------
"""

READ_LAT = """\
---------------------------------------------------------------------------------------
                    RDMA_Read Latency Test
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       50           2.01           9.87         2.50    \t       2.61        \t0.44   \t\t5.12    \t\t9.87
---------------------------------------------------------------------------------------
"""

# Duration mode (-D) prints another table, without t_typical.
DURATION_LAT = """\
 #bytes        #iterations       t_avg[usec]    tps average
 8             1000              3.21           311526.48
"""

WRITE_BW = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 TX depth        : 128
---------------------------------------------------------------------------------------
 WARNING: BW peak won't be measured in this run.
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      1024           0.00               51.87\t\t   0.000830
---------------------------------------------------------------------------------------
"""

WRITE_BW_GBITS = """\
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 4194304    16             0.50               0.42\t\t   0.000013
"""

NO_SERVER = """\
Couldn't connect to 10.77.0.2:18515
Unable to open file descriptor for socket connection Unable to init the socket connection
"""


class PerftestParsers(unittest.TestCase):
    def test_write_lat_row(self):
        r = parse_perftest_lat(WRITE_LAT, 4096)
        self.assertEqual(r["bytes"], 4096)
        self.assertEqual(r["iters"], 200)
        self.assertEqual(r["t_min_us"], 1021.35)
        self.assertEqual(r["t_max_us"], 30211.87)
        self.assertEqual(r["t_typical_us"], 1893.40)
        self.assertEqual(r["t_avg_us"], 2544.31)
        self.assertEqual(r["t_stdev_us"], 2711.52)
        self.assertEqual(r["p99_us"], 14322.08)
        self.assertEqual(r["p999_us"], 30211.87)

    def test_read_lat_without_size_filter(self):
        r = parse_perftest_lat(READ_LAT)
        self.assertEqual((r["bytes"], r["iters"], r["t_typical_us"], r["p99_us"]), (8, 50, 2.50, 5.12))

    def test_lat_wrong_size_or_no_table(self):
        self.assertIsNone(parse_perftest_lat(WRITE_LAT, 8))
        self.assertIsNone(parse_perftest_lat(NO_SERVER, 8))
        self.assertIsNone(parse_perftest_lat(""))
        self.assertIsNone(parse_perftest_lat(DURATION_LAT, 8))
        # A row before any header (e.g. a stray number) is not a result.
        self.assertIsNone(parse_perftest_lat(" 8 200 1.0 2.0 3.0 4.0 5.0 6.0 7.0\n"))

    def test_bw_mb_per_sec_is_mib(self):
        r = parse_perftest_bw(WRITE_BW, 65536)
        self.assertEqual((r["bytes"], r["iters"]), (65536, 1024))
        self.assertEqual(r["avg_mib_s"], 51.87)
        self.assertEqual(r["peak_mib_s"], 0.0)
        self.assertEqual(r["msg_rate_mpps"], 0.000830)
        self.assertEqual(r["unit_reported"], "MB/sec")

    def test_bw_gbits_are_converted(self):
        r = parse_perftest_bw(WRITE_BW_GBITS, 4194304)
        self.assertAlmostEqual(r["avg_mib_s"], 0.42 * 1e9 / 8 / 2**20)
        self.assertAlmostEqual(r["avg_mib_s"], 50.07, places=2)

    def test_bw_missing(self):
        self.assertIsNone(parse_perftest_bw(WRITE_BW, 4096))
        self.assertIsNone(parse_perftest_bw(NO_SERVER))
        self.assertIsNone(parse_perftest_bw(WRITE_LAT))

    def test_last_json_skips_progress(self):
        out = 'lite-bench [ 0.1 s] LT_write 8 B\n{"a": 1}\nnot json\n{"b": 2}\n{broken\n'
        self.assertEqual(last_json(out), {"b": 2})
        self.assertIsNone(last_json("nothing here\n"))


def sample_results():
    lat = lambda med, p99: {"median_ns": med, "p99_ns": p99, "min_ns": med // 2, "iters": 200}  # noqa: E731
    return {
        "config": {"lat_sizes": [8, 4096], "bw_sizes": [65536, 4194304], "bw_threads": 1},
        "native": {
            "ib_write_lat": {"8": {"t_typical_us": 1000.0, "p99_us": 5000.0}, "4096": None},
            "ib_read_lat": {"8": {"t_typical_us": 2000.0, "p99_us": 9000.0},
                            "4096": {"t_typical_us": 3000.0, "p99_us": 9000.0}},
            "ib_read_lat -e": {"8": {"t_typical_us": 2000.0, "p99_us": 9500.0}},
            "ib_write_bw": {"65536": {"avg_mib_s": 50.0}, "4194304": {"avg_mib_s": 100.0}},
            "regmr": {"reg_ns": 30e9, "dereg_ns": 1e9, "size": 1 << 30},
        },
        "lite": {
            "lat_write": {"8": lat(2_000_000, 10_500_000), "4096": lat(3_000_000, 12_000_000)},
            "lat_read": {"8": lat(2_200_000, 9_000_000)},
            "bw": {"65536": {"mib_s": 48.0}, "4194304": {"mib_s": 90.0}},
            "malloc": {"1": {"size": 1 << 30, "total_ns": 1e9}, "0,1,2": {"size": 1 << 30, "total_ns": 2e9}},
            "lmrs": {"1": {"median_ns": 1000, "size": 4096, "write_size": 8, "alone": {"median_ns": 1000}},
                     "100000": {"median_ns": 1200, "size": 4096, "write_size": 8, "alone": {"median_ns": 1000}},
                     "1000": {"median_ns": 1050, "size": 4096, "write_size": 8, "alone": {"median_ns": 1000}}},
        },
    }


class RatioTable(unittest.TestCase):
    def test_compare_directions(self):
        r = compare("m", 8, 105.0, 100.0, "ns", "lat_median")
        self.assertAlmostEqual(r["ratio"], 1.05)
        self.assertTrue(r["met"])
        self.assertFalse(compare("m", 8, 106.0, 100.0, "ns", "lat_median")["met"])
        self.assertTrue(compare("m", 8, 96.0, 100.0, "MiB/s", "bw")["met"])
        self.assertFalse(compare("m", 8, 94.0, 100.0, "MiB/s", "bw")["met"])
        self.assertIsNone(compare("m", 8, None, 100.0, "ns", "lat_p99")["met"])
        self.assertIsNone(compare("m", 8, 1.0, None, "ns", "lat_p99")["ratio"])
        self.assertEqual(compare("m", 8, 1, 1, "ns", "malloc_speedup")["target"], ">= 20")

    def test_rows_from_results(self):
        rows = comparisons(sample_results())
        by = {(r["metric"], r["size"]): r for r in rows}
        w8 = by[("LT_write median vs ib_write_lat x 2", 8)]
        self.assertEqual(w8["native"], 2_000_000)  # 1000 us x 2
        self.assertAlmostEqual(w8["ratio"], 1.0)
        self.assertTrue(w8["met"])
        p8 = by[("LT_write p99 vs ib_write_lat x 2", 8)]
        self.assertAlmostEqual(p8["ratio"], 1.05)
        self.assertTrue(p8["met"])
        self.assertIsNone(by[("LT_write median vs ib_write_lat x 2", 4096)]["met"])  # native failed
        r8 = by[("LT_read median vs ib_read_lat", 8)]
        self.assertEqual(r8["native"], 2_000_000)  # x 1
        self.assertAlmostEqual(r8["ratio"], 1.1)
        self.assertFalse(r8["met"])
        self.assertIsNone(by[("LT_read median vs ib_read_lat", 4096)]["lite"])
        bw = by[("LT_write bw (1 thread) vs ib_write_bw", 65536)]
        self.assertAlmostEqual(bw["ratio"], 0.96)
        self.assertTrue(bw["met"])
        self.assertFalse(by[("LT_write bw (1 thread) vs ib_write_bw", 4194304)]["met"])
        m1 = by[("LT_malloc+map (holders 1) vs ibv_reg_mr: speedup", 1 << 30)]
        self.assertAlmostEqual(m1["ratio"], 30.0)
        self.assertTrue(m1["met"])
        m3 = by[("LT_malloc+map (holders 0,1,2) vs ibv_reg_mr: speedup", 1 << 30)]
        self.assertFalse(m3["met"])  # 15x
        lmr_rows = [r for r in rows if "LMRs" in r["metric"]]
        self.assertEqual([r["metric"] for r in lmr_rows],
                         ["LT_write median, 1,000 LMRs of 4 KiB vs 1 LMR",
                          "LT_write median, 100,000 LMRs of 4 KiB vs 1 LMR"])
        self.assertTrue(lmr_rows[0]["met"])
        self.assertFalse(lmr_rows[1]["met"])  # 1.2
        control = by[("LT_write median, the same 1 LMR later vs before (control)", 8)]
        self.assertAlmostEqual(control["ratio"], 1.0)

    def test_table_is_aligned(self):
        text = format_table(comparisons(sample_results()))
        lines = text.splitlines()
        self.assertTrue(lines[0].startswith("metric"))
        self.assertTrue(set(lines[1]) <= {"-", " "})
        for word in ("yes", "NO", "n/a", "8 B", "4 KiB", "1 GiB", "MiB/s"):
            self.assertIn(word, text)
        context = [line for line in lines if "ib_read_lat -e" in line]
        self.assertEqual(len(context), 1)
        self.assertTrue(context[0].rstrip().endswith("1.100  -"), "no target, no verdict")
        # The ratio column ends at the same place on every row.
        ends = {m.end() for line in lines[2:] for m in [re.search(r"\d+\.\d{3}(?=\s+[<>]=)", line)] if m}
        self.assertEqual(len(ends), 1)

    def test_formatting(self):
        self.assertEqual(fmt_size(8), "8 B")
        self.assertEqual(fmt_size(65536), "64 KiB")
        self.assertEqual(fmt_size(4 << 20), "4 MiB")
        self.assertEqual(fmt_size(1 << 30), "1 GiB")
        self.assertEqual(fmt_size(1000), "1000 B")
        self.assertEqual(fmt_ns(1500), "1.5 us")
        self.assertEqual(fmt_ns(2_000_000), "2 ms")
        self.assertEqual(fmt_ns(123_400_000), "123 ms")
        self.assertEqual(fmt_ns(None), "-")
        self.assertEqual(sizes_arg("8,4K,1M"), [8, 4096, 1 << 20])


def drawn(panels):
    """Per series with data: (label, dashed, [(size, value)])."""
    return [(s["label"], bool(s.get("dash")), [(x, y) for x, y in s["points"] if y is not None])
            for p in panels for s in p["series"] if any(y is not None for _, y in s["points"])]


def write_chart(test, panels):
    """The chart of `panels` as files: checks both and returns the SVG's text."""
    with tempfile.TemporaryDirectory() as tmp:
        svg, png = plots.size_chart(Path(tmp) / "latency.svg", "t", panels, fmt_size)
        test.assertEqual((svg.name, png.name), ("latency.svg", "latency.png"))
        test.assertEqual(ET.parse(svg).getroot().tag, f"{SVG}svg")
        test.assertTrue(png.read_bytes().startswith(b"\x89PNG"))
        test.assertGreater(png.stat().st_size, 5000)
        return svg.read_text()


class CallPhaseTable(unittest.TestCase):
    def test_each_phase_is_the_median_of_the_rounds(self):
        def rnd(pin, round_trip):
            return {"p50_ns": 1, "phases": {"pin_ns": pin, "register_ns": 0, "stage_ns": 0, "round_trip_ns": round_trip,
                                            "publish_ns": 0, "wakeup_ns": 0, "outside_ns": 0, "mean_ns": round_trip,
                                            "release_ns": 0}}
        lite = {"rpc_user": {"rounds": [rnd(10, 100), rnd(30, 300), rnd(20, 900)]},
                "rpc_kernel": {"rounds": [rnd(1, 200), {"p50_ns": 1, "phases": None}]}}
        phases = call_phases(lite)
        self.assertEqual((phases["user"]["pin_ns"], phases["user"]["round_trip_ns"], phases["user"]["rounds"]),
                         (20, 300, 3))
        self.assertEqual(phases["kernel"]["rounds"], 1, "a round without phases is left out")
        table = format_call_phases(phases)
        self.assertIn("pin the output", table)
        self.assertRegex(table, r"post to reply handled\s+300 ns\s+200 ns\s+100 ns")
        self.assertEqual(call_phases({}), {})


class ReadPhaseTable(unittest.TestCase):
    def test_each_phase_is_the_median_of_the_rounds_beside_the_native_mean(self):
        def rnd(wire, slept):
            return {"median_ns": 1, "phases": {"pin_ns": 5_000, "prepare_ns": 2_000, "post_ns": 15_000,
                                               "wire_ns": wire, "notice_ns": 3_000, "finish_ns": 1_000,
                                               "outside_ns": 4_000, "mean_ns": wire + 30_000, "slept_share": slept}}
        lite = {"lat_read": {"8": {"rounds": [rnd(500_000, 0.0), rnd(700_000, 0.5), rnd(600_000, 1.0)]},
                             "4096": {"rounds": [{"median_ns": 1, "phases": None}]}}}
        native = {"ib_read_lat": {"8": {"rounds": [{"t_avg_us": 450.0}, {"t_avg_us": 550.0}]}}}
        self.assertNotIn("native: the provider's post", format_read_phases(read_phases(lite, native)),
                         "without lite-read-phases rounds, no native phase rows")

        def own(post, wire):
            return {"post_mean": post, "post_median": post, "wire_mean": wire, "wire_median": wire,
                    "whole_mean": post + wire, "whole_median": post + wire}
        native["read_phases"] = {"8": {"rounds": [own(20_000, 400_000), own(40_000, 420_000), own(30_000, 380_000)]}}
        phases = read_phases(lite, native)
        self.assertEqual(list(phases), ["8"], "a size without phases is left out")
        self.assertEqual((phases["8"]["wire_ns"], phases["8"]["slept_share"], phases["8"]["rounds"]),
                         (600_000, 0.5, 3))
        self.assertEqual(phases["8"]["ib_read_lat_ns"], 500_000)
        table = format_read_phases(phases)
        self.assertRegex(table, r"posted to completion handled\s+600 us")
        self.assertRegex(table, r"ib_read_lat, as timed\s+500 us")
        self.assertRegex(table, r"reads that slept\s+50 %")
        self.assertRegex(table, r"native: the provider's post\s+30 us")
        self.assertRegex(table, r"native: posted to completion polled\s+400 us")
        self.assertRegex(table, r"native READ, as timed\s+420 us")
        self.assertEqual(read_phases({}, {}), {})


class LatencyChart(unittest.TestCase):
    def test_panels_from_results(self):
        lines = drawn(chart_panels(sample_results()))
        # write: LITE 2 points, native 1 (4096 failed); read: LITE 1, native 2, native -e 1;
        # bw: 2 + 2.
        self.assertEqual(sorted(len(points) for _, _, points in lines), [1, 1, 1, 2, 2, 2, 2])
        self.assertEqual(sum(1 for _, dashed, _ in lines if dashed), 4, "the native series")
        labels = {label for label, _, _ in lines}
        self.assertIn("ib_write_lat x 2", labels)
        self.assertIn("ib_read_lat -e (sleeps)", labels)

    def test_the_chart_is_written_as_svg_and_png(self):
        write_chart(self, chart_panels(sample_results()))

    def test_panels_without_data_are_drawn(self):
        panel = {"title": "a < b & c", "xlabel": "x", "ylabel": "y", "ylog": True,
                 "series": [{"label": "none", "color": "#000", "points": [(8, None)]}]}
        write_chart(self, [panel, dict(panel, ylog=False)])


def lat_table(size, typical_us, p99_us):
    return (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
            "   99% percentile[usec]   99.9% percentile[usec] \n"
            f" {size:<7d} 50           1.00           99.00        {typical_us:<7.2f} \t       3.00     \t1.00"
            f"\t\t{p99_us:<7.2f} \t\t99.00\n")


class FakeCluster:
    """Stands in for cluster.Cluster: answers perftest and lite-bench command lines with
    canned output, and writes lite-bench's stderr where the guest would (the run dir)."""

    def __init__(self, run):
        self.run = Path(run)
        self.jobs = {}
        self.commands = []

    def alive(self, n):
        return True

    def reload_module(self, nodes, args, connected):
        self.commands.append((tuple(nodes), f"reload lite.ko {args}"))

    def exec(self, n, script, timeout=120, check=True):
        self.commands.append((n, script))
        m = re.search(r"(?:-s|--size) (\d+)", script)
        size = int(m.group(1)) if m else 0
        if "10.77.0.2" in script and script.startswith(("ib_write_lat", "ib_read_lat", "ib_atomic_lat")):
            typical = 100.0 if "write" in script else 150.0 if "read" in script else 120.0
            if " -e " in script:
                typical += 50.0  # sleeping on completion events is slower than polling
            return Result(0, "some banner\n" + lat_table(size, typical, 400.0))
        if "10.77.0.2" in script and script.startswith("ib_write_bw"):
            return Result(0, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
                             f" {size:<7d}    16           0.00               100.00\t\t   0.000100\n")
        if "10.77.0.2" in script and script.startswith("lite-read-phases"):
            phase = {"mean_ns": 30_000, "median_ns": 20_000, "p99_ns": 90_000}
            return Result(0, json.dumps({"size": size, "iters": 50, "device": "rxe0", "post": phase,
                                         "posted_to_completion": phase, "whole": phase}) + "\n")
        if "/proc/$p/stat" in script:
            return Result(0, "10 5\n10 6\n")  # one tick of CPU while idle
        return Result(0, "")

    def submit(self, n, script, timeout):
        self.commands.append((n, script))
        cmd, _, log = script.partition(" 2>/run/lite/")
        args = cmd.split()
        out = {}
        if args[0] == "lite-selftest" and args[1] == "rpc-call":
            threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 1
            out = {"calls": 50, "failed": 0, "p50_ns": 300_000 if "--kernel-caller" in args else 330_000,
                   "p99_ns": 900_000}
            if "--kernel-caller" not in args:
                out.update(calls_per_s=100.0 * min(threads, 4), crossings_per_call=2.0)
        elif args[0] == "lite-selftest" and args[1] == "atomic-count":
            out = {"increments": 50, "failed_threads": 0, "cas_retries": 0, "p50_ns": 132_000, "p99_ns": 500_000}
        elif args[0] == "lite-selftest" and args[1] == "lock-count":
            threads = int(args[args.index("--threads") + 1])
            out = {"increments": 50, "first_error": None, "lock_p50_ns": 126_000, "unlock_p50_ns": 150_000,
                   "increments_per_s": 1000.0 / threads}
        elif args[0] == "lite-regmr":
            out = {"size": 1 << 30, "device": "rxe0", "touched": False, "reg_ns": 40_000_000_000, "dereg_ns": 10}
        elif args[1] == "lat":
            size = int(args[args.index("--sizes") + 1])
            out = {"bench": "lat", "results": [{"size": size, "iters": 50, "min_ns": 1, "median_ns": 205_000,
                                                "p99_ns": 810_000, "mean_ns": 1.0}]}
            if "--per-read" in args:
                out["results"][0]["phase_medians"] = {
                    "pin_ns": 10_000, "prepare_ns": 20_000, "post_ns": 30_000, "wire_ns": 100_000,
                    "provider_ns": 130_000, "notice_ns": 5_000, "finish_ns": 5_000, "outside_ns": 15_000,
                    "timed_ns": 190_000, "slept_share": 0.25, "reads": 25}
        elif args[1] == "bw":
            size = int(args[args.index("--sizes") + 1])
            out = {"bench": "bw", "threads": 1, "results": [{"size": size, "mib_s": 97.0, "writes": 16,
                                                              "seconds": 1.0}]}
        elif args[0] == "lite-admin" and args[1] == "reserve":
            out = {"reserve_bytes": int(args[2]), "reserve_target": int(args[2]), "reserve_used": 0,
                   "held_bytes": 0, "held_limit": 1 << 40, "waited_s": 1.5}
        elif args[1] == "malloc":
            out = {"bench": "malloc", "size": 1 << 30, "malloc_ns": 900_000_000, "map_ns": 100_000_000,
                   "total_ns": 1_000_000_000}
        elif args[1] == "lmrs":
            count = int(args[args.index("--count") + 1])
            out = {"bench": "lmrs", "count": count, "size": 4096, "write_size": 8, "setup_s": 1.0, "free_s": 1.0,
                   "median_ns": 1000 + count // 1000, "p99_ns": 2000, "alone": {"median_ns": 1000}}
        (self.run / log).write_text("lite-bench [   0.0 s] working\nlite-bench [   0.1 s] done\n")
        cid = f"job{len(self.jobs)}"
        self.jobs[cid] = Result(0, json.dumps(out) + "\n")
        return cid

    def collect(self, n, cid, timeout):
        return self.jobs[cid]


class Orchestration(unittest.TestCase):
    def test_steps_fill_results_with_a_fake_cluster(self):
        import argparse
        import contextlib
        import io
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            c = FakeCluster(tmp)
            args = argparse.Namespace(lat_sizes=[8, 4096], lat_iters=50, lat_rounds=2, warmup=5, bw_sizes=[65536, 4194304],
                                      bw_mib=16, bw_seconds=60, bw_threads=1, malloc_size=1 << 30, malloc_rounds=2,
                                      lmr_counts=[1, 1000, 100000], lmr_iters=50, step_timeout=900, only=None,
                                      provider="rxe")
            results = {"config": {"lat_sizes": args.lat_sizes, "bw_sizes": args.bw_sizes, "bw_threads": 1},
                       "native": {}, "lite": {}}
            b = Bench(c, args)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                run_steps(b, results, args)
            text = printed.getvalue()
            args.only = sections_arg("bw,atomics")
            some = Bench(FakeCluster(tmp), args)
            with contextlib.redirect_stdout(io.StringIO()) as part:
                run_steps(some, {"config": results["config"], "native": {}, "lite": {}}, args)
        self.assertEqual(some.total, 2 * 2 + 4 + 4, "--only bw,atomics: the bandwidth pairs, the atomic and lock steps")
        self.assertIn(f"[1/{some.total}] ib_write_bw 64 KiB", part.getvalue())
        with self.assertRaises(argparse.ArgumentTypeError):
            sections_arg("bw,nonsense")
        # On siw perftest connects through the RDMA CM, and what it cannot run is left out.
        siw_args = argparse.Namespace(**{**vars(args), "only": sections_arg("lat,atomics,paths"), "provider": "siw"})
        with tempfile.TemporaryDirectory() as tmp:
            on_siw = FakeCluster(tmp)
            with contextlib.redirect_stdout(io.StringIO()):
                run_steps(Bench(on_siw, siw_args), {"config": results["config"], "native": {}, "lite": {}}, siw_args)
        perftests = [s for n, s in on_siw.commands if s.startswith("ib_") and n == 0]
        self.assertTrue(perftests and all("-d siw0 -R -s " in s for s in perftests), perftests[:2])
        self.assertFalse(any(s.startswith(("ib_atomic_lat", "reload lite.ko", "lite-read-phases")) or " -e " in s
                             for _, s in on_siw.commands), "siw runs neither atomics nor a QP connected by GID")
        self.assertEqual(b.errors, [])
        self.assertEqual(b.total, 1 + 2 * 7 * 2 + 2 * 2 + 1 + 2 * (1 + 2 * 2) + 3 + 1 + 2 + 2 * RPC_CALLER_ROUNDS + 5 + 1 + 4 + 4
                         + 2 * PATHS_ROUNDS + 1)
        self.assertIn(f"[1/{b.total}] warm-up: ib_read_lat and LT_read 8 B (untimed) ...", text)
        self.assertIn(f"[2/{b.total}] ib_write_lat 8 B (round 1/2) ...", text)
        self.assertIn("lite-selftest lock-count, 8 thread(s) ...", text)
        self.assertIn(f"[{b.total}/{b.total}] lite.ko reloaded with its defaults ...", text)
        reloads = [script for _, script in c.commands if script.startswith("reload lite.ko")]
        self.assertEqual(reloads, ["reload lite.ko ", "reload lite.ko messages=send atomics=holder"] * PATHS_ROUNDS
                         + ["reload lite.ko "], "the two paths alternate, the defaults come back last")
        paths = results["lite"]["paths"]
        self.assertEqual(len(paths["stand-in"]["rounds"]), PATHS_ROUNDS)
        rows = {r["metric"]: r for r in comparisons({**results, "config": {**results["config"], "malloc_size": 1}})}
        row = rows["LT_fetch_add, by the holder's kernel vs the NIC's opcodes (median of rounds)"]
        self.assertEqual((row["kind"], row["met"]), ("context", None), "what the stand-ins cost has no target")
        self.assertIn("      lite-bench [   0.1 s] done", text)  # the guest's stderr, shown live
        # perftest: server first (background), then the client against node 1's address.
        server = [i for i, (n, s) in enumerate(c.commands) if n == 1 and s.startswith("ib_write_lat")]
        client = [i for i, (n, s) in enumerate(c.commands) if n == 0 and s.startswith("ib_write_lat")]
        self.assertTrue(server and client and server[0] < client[0])
        self.assertIn("-d rxe0 -x 1 -s 8 -n 25 -F", c.commands[client[0]][1])  # 50 calls over 2 rounds
        self.assertEqual(len(results["lite"]["lat_write"]["8"]["rounds"]), 2)
        # The native READ's own phases: its server on node 1, the client against it, per round.
        phase_runs = [s for n, s in c.commands if n == 0 and s.startswith("lite-read-phases")]
        self.assertIn("--size 8 --iters 25 10.77.0.2", phase_runs[0])
        self.assertEqual(results["native"]["read_phases"]["4096"]["post_mean"], 30_000)
        # Each phase's median from single reads, in its own round beside the timed one.
        self.assertEqual(len(results["lite"]["lat_read_per_read"]["8"]["rounds"]), 2)
        medians = read_medians(results["lite"], results["native"])
        self.assertEqual((medians["8"]["provider_ns"], medians["8"]["native_post_median"]), (130_000, 20_000))
        self.assertEqual(medians["8"]["ib_read_lat_ns"], 150_000)
        table = format_read_medians(medians)
        self.assertRegex(table, r"the provider's share \(post to handled\)\s+130 us\s+130 us")
        self.assertRegex(table, r"ib_read_lat, as timed \(median\)\s+150 us")
        bw = [s for n, s in c.commands if s.startswith("ib_write_bw") and n == 0]
        self.assertIn("-s 65536 -n 256 ", bw[0])  # 16 MiB / 64 KiB
        self.assertIn("-s 4194304 -n 5 ", bw[1])  # at least 5
        self.assertIn("--iters 256", [s for n, s in c.commands if "lite-bench bw" in s][0])
        rows = {(r["metric"], r["size"]): r for r in comparisons(results)}
        w = rows[("LT_write median vs ib_write_lat x 2", 8)]
        self.assertEqual(w["native"], 200_000)
        self.assertAlmostEqual(w["ratio"], 1.025)
        self.assertTrue(w["met"])
        self.assertAlmostEqual(rows[("LT_write p99 vs ib_write_lat x 2", 8)]["ratio"], 810 / 800)
        self.assertFalse(rows[("LT_read median vs ib_read_lat", 8)]["met"])  # 205 vs 150
        # The event-mode baseline: its own runs (-e), a row without a target.
        events = rows[("LT_read median vs ib_read_lat -e (sleeps on events)", 8)]
        self.assertEqual(events["native"], 200_000)
        self.assertAlmostEqual(events["ratio"], 1.025)
        self.assertIsNone(events["met"])
        self.assertEqual(len(results["native"]["ib_read_lat -e"]["8"]["rounds"]), 2)
        self.assertTrue(any(n == 0 and s.startswith("ib_read_lat -d rxe0 -x 1 -s 8 -n 25 -F -e -p ")
                            for n, s in c.commands))
        self.assertAlmostEqual(rows[("LT_fetch_add median vs ib_atomic_lat -e (sleeps on events)", 8)]["ratio"],
                               132 / 170)
        self.assertAlmostEqual(rows[("LT_write bw (1 thread) vs ib_write_bw", 65536)]["ratio"], 0.97)
        self.assertAlmostEqual(rows[("LT_malloc+map (holders 0,1,2) vs ibv_reg_mr: speedup", 1 << 30)]["ratio"], 40)
        reserved = rows[("LT_malloc+map from the zeroed reserve (holders 0,1,2) vs ibv_reg_mr: speedup", 1 << 30)]
        self.assertAlmostEqual(reserved["ratio"], 40)
        # Every holder's share is reserved before the timed call and released after it.
        reserves = [(n, s.split(" 2>")[0]) for n, s in c.commands if s.startswith("lite-admin reserve")]
        share = -(-(1 << 30) // 3)
        self.assertEqual(reserves, 2 * ([(1, f"lite-admin reserve {1 << 30} --wait --json"), (1, "lite-admin reserve 0")]
                                        + [(n, f"lite-admin reserve {share} --wait --json") for n in (0, 1, 2)]
                                        + [(n, "lite-admin reserve 0") for n in (0, 1, 2)]))
        self.assertEqual(len(results["lite"]["malloc_reserved"]["0,1,2"]["rounds"]), 2)
        self.assertEqual(len(results["native"]["regmr"]["rounds"]), 2)
        self.assertAlmostEqual(rows[("LT_write median, 100,000 LMRs of 4 KiB vs 1 LMR", 8)]["ratio"], 1.1)
        # RPC: 16 B request + reply vs ib_write_lat 8 B + ib_write_lat reply size (100 us each).
        rpc = rows[("LT_RPC median, 16 B request, vs ib_write_lat 8 B + reply", 4096)]
        self.assertEqual(rpc["native"], 200_000)
        self.assertAlmostEqual(rpc["ratio"], 1.65)
        self.assertFalse(rpc["met"])
        atomic = rows[("LT_fetch_add median vs ib_atomic_lat", 8)]
        self.assertEqual(atomic["native"], 120_000)
        self.assertAlmostEqual(atomic["ratio"], 1.1)
        self.assertTrue(atomic["met"])
        lock, unlock = (rows[(f"LT_{op} median, uncontended, vs ib_atomic_lat", 8)] for op in ("lock", "unlock"))
        self.assertAlmostEqual(lock["ratio"], 1.05)
        self.assertTrue(lock["met"])
        self.assertAlmostEqual(unlock["ratio"], 1.25)
        self.assertFalse(unlock["met"])
        self.assertAlmostEqual(rows[("locked increments/s, 2 contending threads vs 1", None)]["ratio"], 0.5)
        self.assertFalse(rows[("locked increments/s, 8 contending threads vs 1", None)]["met"])
        self.assertIn("lite-selftest lock-count bench-atomic --offset 64 --threads 4 --count 12",
                      [s for n, s in c.commands if n == 0 and "--threads 4" in s and "lock-count" in s][0])
        uk = rows[("LT_RPC 8 B median, user caller vs kernel caller", 8)]
        self.assertAlmostEqual(uk["ratio"], 1.1)
        self.assertTrue(uk["met"])
        self.assertAlmostEqual(rows[("LT_RPC calls/s, 4 threads vs 1 thread", 64)]["ratio"], 4.0)
        self.assertTrue(rows[("LT_RPC calls/s, 16 threads vs 1 thread", 64)]["met"])
        idle = rows[("idle RPC server: CPU share over 5 s", None)]
        self.assertAlmostEqual(idle["ratio"], 0.002)
        self.assertTrue(idle["met"])
        server = [s for n, s in c.commands if n == 1 and "rpc-serve 31" in s]
        self.assertTrue(server, "the RPC server starts on node 1")
        kernel_rounds = [s for n, s in c.commands if n == 0 and "--kernel-caller" in s]
        self.assertEqual(len(kernel_rounds), RPC_CALLER_ROUNDS, "user and kernel caller alternate in rounds")
        self.assertIn("lite-selftest rpc-call 1 31 --count 50 --size 8 --reply 4096 --kernel-caller", kernel_rounds[0])
        write_chart(self, chart_panels(results))
