"""LITE-RS benchmark (`make bench`): LITE against native verbs on one virtual cluster.

Boots a 3-node cluster, joins the nodes, and in the same run, between node 0
(client/caller) and node 1 (server/holder), measures:

  latency    LT_write vs perftest ib_write_lat x 2, LT_read vs ib_read_lat x 1 (8 B - 64 KiB);
             LT_read also vs `ib_read_lat -e`, which sleeps on completion events as LT_read
             does instead of busy-polling (no target: it shows what polling is worth);
             beside LT_read's phases (8 B - 4 KiB, the kernel's stamps), the native READ's
             own (tools/readphases: its post, posted to completion polled; rxe only)
  bandwidth  LT_write (back-to-back, one thread by default) vs ib_write_bw (64 KiB - 4 MiB)
  malloc     LT_malloc + LT_map of 1 GiB (held by node 1, and by nodes 0,1,2) vs
             ibv_reg_mr of 1 GiB of fresh memory (tools/regmr, on node 0): cold (the
             holders zero the memory while the caller waits) and from the holders' zeroed
             reserve (`lite-admin reserve`, filled before the timed call); the guests'
             memory is touched once before (QEMU backs guest RAM lazily)
  LMRs       LT_write 8 B latency with 1, 1 000 and 100 000 LMRs (random ones of them)
  RPC        LT_RPC (16 B request, 8 B - 64 KiB replies) vs ib_write_lat 8 B + ib_write_lat
             of the reply size; user caller vs the kernel's own caller (8 B); calls/s with
             1-16 client threads; CPU of an idle server (lite-selftest rpc-serve on node 1)
  atomics    LT_fetch_add on a word held by node 1 vs ib_atomic_lat x 1 (uncontended),
             and vs `ib_atomic_lat -e` (no target)
  locks      LT_lock and LT_unlock (one compare-and-swap each, uncontended) on a word held
             by node 1 vs ib_atomic_lat x 1; locked increments/s with 2-8 contending threads
             vs 1 thread
  paths      LT_RPC 16 B -> 8 B, LT_fetch_add, LT_lock and LT_unlock with the stand-ins
             iWARP devices need (lite.ko messages=send atomics=holder: WRITE + SEND, the
             holder's kernel) vs the NIC's own opcodes, in alternating rounds (no target:
             what the stand-ins cost)

Why x 2 for writes: ib_write_lat reports half of its ping-pong round trip, while an
LT_write returns after the RDMA WRITE is acknowledged by the holder, a full round
trip; ib_read_lat reports the full round trip of an RDMA READ, like LT_read, and
ib_atomic_lat that of one atomic, like LT_fetch_add.
Bandwidths are in MiB/s (2^20 bytes/s): perftest's `BW average[MB/sec]` is MiB/s
(its --help: "MiB=2^20 byte"); a Gb/sec table (--report_gbits) is converted.

Every section runs --runs times (3) on the one cluster: each number is the median of
the runs', each ratio the median of their ratios (the targets are judged on it), and
the table's `runs` column shows the lowest and highest run's.

Prints a ratio table, writes build/bench/results.json (raw numbers and ratios) and
the latency plot build/bench/latency.svg (and .png). Guests are emulated: only
ratios measured in one run mean anything, and each step can take minutes.
"""

import argparse
import json
import re
import signal
import sys
import time
from pathlib import Path

from litebench import plots
from litebench.bench.report import (TARGETS, call_phases, chart_panels, comparisons, fmt_size, format_call_phases,
                                    format_read_medians, format_read_phases, format_table, read_medians,
                                    read_phases)
from litebench.bench.runner import CLIENT, NODES, SERVER, Bench
from litebench.bench.runs import median_of, spread
from litebench.bench.steps import MALLOC_HOLDERS, NOT_ON_SIW, SECTIONS, run_steps
from litebench.cluster.cluster import REPO, Cluster, CommandFailed
from litebench.cluster.guest import PROVIDERS

OUT_DIR = REPO / "build" / "bench"

LAT_SIZES = [8, 64, 512, 4096, 65536]
BW_SIZES = [65536, 262144, 1048576, 4194304]
MALLOC_SIZE = 1 << 30
LMR_COUNTS = [1, 1000, 100000]
QUICK_LMR_COUNTS = [1, 1000, 10000]


def sections_arg(s):
    names = [x.strip() for x in s.split(",") if x.strip()]
    unknown = [x for x in names if x not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{s!r}: expected sections among {','.join(SECTIONS)}")
    return names


def size_arg(s):
    """Bytes with an optional K, M or G suffix (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgKMG]?)(?:i?[bB])?\s*", s)
    if not m or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{s!r}: expected a positive byte count (K, M, G suffixes allowed)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def sizes_arg(s):
    out = [size_arg(x) for x in s.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"{s!r}: expected comma-separated positive numbers")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="release", choices=["release", "debug"], help="guest kernel (default release)")
    ap.add_argument("--quick", action="store_true",
                    help="fewer iterations and at most 10 000 LMRs (a run takes about 5 min instead of about 15)")
    ap.add_argument("--mem", type=int, default=3072, help="MiB per guest (default 3072: 1 GiB is pinned or held)")
    # One vCPU per guest: three guests of two on a 2-core host put six vCPUs on two
    # cores, and a busy-polling vCPU (perftest's, or LITE's) takes a host core from
    # the emulated NICs (docs/benchmarks.md#make-bench).
    ap.add_argument("--smp", type=int, default=1, help="vCPUs per guest (default 1)")
    ap.add_argument("--lat-sizes", type=sizes_arg, default=LAT_SIZES, help="latency sizes (default 8,...,65536)")
    ap.add_argument("--lat-iters", type=int,
                    help="timed calls per latency point, RPC size, atomics and lock series (default 600; --quick 50)")
    ap.add_argument("--lat-rounds", type=int, default=3,
                    help="rounds per latency point, native and LITE alternating, each with its share of "
                         "--lat-iters (default 3)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed LITE calls before each latency series")
    ap.add_argument("--bw-sizes", type=sizes_arg, default=BW_SIZES, help="bandwidth sizes (default 64K,...,4M)")
    ap.add_argument("--bw-mib", type=int, help="MiB written per bandwidth point, by both (default 64; --quick 16)")
    ap.add_argument("--bw-seconds", type=float, default=60, help="time limit of a LITE bandwidth point (default 60)")
    ap.add_argument("--bw-threads", type=int, default=1, help="LT_write threads for bandwidth (default 1)")
    ap.add_argument("--malloc-size", type=size_arg, default=MALLOC_SIZE,
                    help="bytes for malloc vs ibv_reg_mr (default 1 GiB)")
    ap.add_argument("--malloc-rounds", type=int, default=3,
                    help="rounds of ibv_reg_mr and each LT_malloc+map; medians are compared (default 3)")
    ap.add_argument("--lmr-counts", type=sizes_arg, help="LMR counts (default 1,1000,100000; --quick 1,1000,10000)")
    ap.add_argument("--lmr-iters", type=int, help="timed writes per LMR-count point (default 200; --quick 50)")
    ap.add_argument("--provider", default="rxe", choices=list(PROVIDERS),
                    help="the guests' soft RDMA device, LITE and perftest alike: rxe (default) or siw (Soft-iWARP: "
                         f"perftest connects through the RDMA CM, -R; no {' or '.join(NOT_ON_SIW)} sections)")
    ap.add_argument("--only", type=sections_arg,
                    help=f"run only these sections, comma-separated ({','.join(SECTIONS)})")
    ap.add_argument("--step-timeout", type=int, default=900,
                    help="seconds per step (default 900; an LMR-count step gets at least 600 + 0.03 per LMR)")
    ap.add_argument("--out", default=str(OUT_DIR),
                    help="directory of results.json, latency.svg/.png and the cluster's logs (default build/bench)")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of every section on the one cluster; each number is the median of the runs, each "
                         "ratio the median of theirs, and the table shows their spread (default 3)")
    ap.add_argument("--json", action="store_true", help="also print results.json to stdout")
    args = ap.parse_args()
    args.lat_iters = args.lat_iters or (50 if args.quick else 600)
    args.lmr_iters = args.lmr_iters or (50 if args.quick else 200)
    args.bw_mib = args.bw_mib or (16 if args.quick else 64)
    args.lmr_counts = args.lmr_counts or (QUICK_LMR_COUNTS if args.quick else LMR_COUNTS)
    if args.quick:
        args.warmup = min(args.warmup, 5)
    if min(args.lat_rounds, args.malloc_rounds, args.runs, args.smp) < 1:
        ap.error("--lat-rounds, --malloc-rounds, --runs and --smp must be at least 1")
    if 1 not in args.lmr_counts:
        args.lmr_counts = [1] + args.lmr_counts

    guest_bin = REPO / "build" / args.kernel / "guest" / "bin"
    missing = [p for p in ("lite-bench", "lite-regmr", "lite-read-phases", "lite-selftest") if not (guest_bin / p).exists()]
    if missing:
        print(f"bench: {', '.join(missing)} missing in {guest_bin}: run `make guest KERNEL={args.kernel}`",
              file=sys.stderr)
        return 2

    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    c = Cluster(out_dir / "cluster")
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))  # runs the finally below
    started = time.time()
    results = {
        "config": {"kernel": args.kernel, "provider": args.provider, "nodes": NODES, "client": CLIENT, "server": SERVER, "quick": args.quick,
                   "only": args.only, "mem_mib": args.mem, "smp": args.smp, "lat_sizes": args.lat_sizes, "lat_iters": args.lat_iters,
                   "lat_rounds": args.lat_rounds,
                   "warmup": args.warmup, "bw_sizes": args.bw_sizes, "bw_mib": args.bw_mib,
                   "bw_threads": args.bw_threads, "malloc_size": args.malloc_size, "malloc_rounds": args.malloc_rounds,
                   "malloc_holders": MALLOC_HOLDERS,
                   "lmr_counts": args.lmr_counts, "lmr_iters": args.lmr_iters, "runs": args.runs,
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started))},
        "notes": ["ib_write_lat reports half a ping-pong round trip: LT_write (a full round trip, RDMA write + ack) "
                  "is compared with ib_write_lat x 2; LT_read with ib_read_lat x 1 (both full round trips)",
                  "bandwidths in MiB/s (2^20 bytes/s); perftest's MB/sec is MiB/s",
                  "ib_write_bw keeps up to 128 writes in flight; LT_write is synchronous (one per thread)",
                  "ibv_reg_mr registers fresh, untouched memory: the time includes faulting in and pinning the pages",
                  "LMR-count rows compare LT_write latency to random LMRs out of N with that of 1 LMR",
                  "LT_RPC (a 16 B request, the reply size asked for) is compared with two native writes: "
                  "ib_write_lat 8 B + ib_write_lat of the reply size (each half a round trip)"],
        "native": {}, "lite": {}, "errors": [],
    }
    rc = 0
    runs = []
    try:
        try:
            c.up(nodes=NODES, variant=args.kernel, mem=args.mem, smp=args.smp, provider=args.provider)
            c.join(range(NODES))
            results["config"]["accel"] = c.meta.get("accel")
            print(f"\n== {NODES} nodes joined ({time.time() - started:.0f} s after start); client node {CLIENT}, "
                  f"server/holder node {SERVER} ==", flush=True)
            b = Bench(c, args)
            try:
                for i in range(args.runs):
                    if args.runs > 1:
                        print(f"\n== run {i + 1} of {args.runs} ({time.time() - started:.0f} s after start) ==",
                              flush=True)
                    # Kept before it runs: a node that dies mid-run leaves what it measured.
                    run = {"config": results["config"], "lite": {}, "native": {}}
                    runs.append(run)
                    b.step = 0
                    run_steps(b, run, args)
            finally:
                results["errors"] = b.errors
        except CommandFailed as e:
            print(f"\nbench: {e}", flush=True)
            results["errors"].append({"step": "cluster", "error": str(e)})
        splats = c.splats()
        results["kernel_bug_reports"] = [f"node{n}: {line}" for n, line in splats]
    finally:
        c.down(quiet=True)
    results["duration_s"] = round(time.time() - started, 1)
    results["lite"] = median_of([run["lite"] for run in runs]) or {}
    results["native"] = median_of([run["native"] for run in runs]) or {}
    rows = spread([comparisons(run) for run in runs], comparisons(results))
    if args.only:
        # Rows of the sections left out have no numbers on either side.
        rows = [r for r in rows if r["lite"] is not None or r["native"] is not None]
    results["comparisons"] = rows
    met = [r for r in rows if r["met"] is not None]
    results["targets_met"] = sum(1 for r in met if r["met"])
    results["targets_evaluated"] = len(met)
    results["rpc_call_phases"] = call_phases(results.get("lite", {}))
    results["read_phases"] = read_phases(results.get("lite", {}), results.get("native", {}))
    results["read_medians"] = read_medians(results.get("lite", {}), results.get("native", {}))

    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    plot_paths = plots.size_chart(out_dir / "latency.svg",
                                  f"LITE-RS vs native verbs ({args.kernel} kernel, {c.meta.get('accel', '?')}, "
                                  f"{time.strftime('%Y-%m-%d %H:%M')})", chart_panels(results), fmt_size)

    print("\n== LITE vs native (ratios; LT_write vs ib_write_lat x 2 since perftest reports half a round trip) ==")
    print(format_table(rows))
    # Context rows (no target) are not missing data.
    missing = sum(1 for r in rows if r["met"] is None and TARGETS[r["kind"]] is not None)
    if results["rpc_call_phases"]:
        print("\n== LT_RPC 8 B: where each caller's call goes, by the kernel's stamps "
              "(median over rounds of each round's mean per call) ==")
        print(format_call_phases(results["rpc_call_phases"]))
    if results["read_phases"]:
        print("\n== LT_read: where a read goes, by the kernel's stamps (median over rounds of each round's "
              "mean per read), beside ib_read_lat's mean ==")
        print(format_read_phases(results["read_phases"]))
    if results["read_medians"]:
        print("\n== LT_read: each phase's median over single reads (median over rounds), beside the native "
              "READ's own and ib_read_lat's ==")
        print(format_read_medians(results["read_medians"]))
    print(f"\n{results['targets_met']} of {results['targets_evaluated']} targets met"
          + (f"; {missing} without data" if missing else ""))
    if results["errors"]:
        print(f"{len(results['errors'])} step(s) failed: " + "; ".join(e["step"] for e in results["errors"]))
        rc = 1
    bugs = results.get("kernel_bug_reports", [])
    print(f"guest kernels: {'no bug reports' if not bugs else f'{len(bugs)} bug report lines!'}; logs in {c.run}")
    if bugs:
        rc = 1
    if args.json:
        print(json.dumps(results))
    print(f"results: {json_path}\nplots:   {', '.join(map(str, plot_paths))}\n({results['duration_s']:.0f} s)")
    return rc
