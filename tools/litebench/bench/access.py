"""What it costs that a peer reaches only what it was given (`make bench-access`):
remote_access=chunks against LITE's global rkey, side by side on one virtual cluster.

Boots 2 nodes and, in each round, loads lite.ko in one mode on both, joins them,
and measures from node 0 against memory node 1 holds; then the other mode. The
modes alternate (global first in odd rounds, chunks first in even ones), and every
figure is the median over the rounds, with the rounds' range as its noise:

  malloc   LT_malloc + LT_map, and LT_free, of 4 KiB, 4 MiB, 64 MiB and 1 GiB: with
           chunks each 4 MiB chunk is registered (one REG_MR on a QP of the holder's
           own), and LT_free returns once every holder deregistered it, so the time from
           free to unreachable is at most that of LT_free (with global, never: the key
           reaches the memory after the free too)
  lat      LT_read and LT_write latency at 8 B, 4 KiB and 64 KiB
  bw       LT_write throughput at 64 KiB and 1 MiB
  lmrs     LT_write 8 B latency to random ones of 1, 1 000 and 100 000 live LMRs of
           4 KiB (LITE's own argument against many MRs, its Figure 4's shape)
  rpc      LT_RPC of 16 B with 64 B, 4 KiB and 64 KiB reply buffers (lite-selftest
           rpc-call against rpc-serve on node 1): with chunks a buffer larger than
           what rides in the completion record gets an MR per call

Prints a table of chunks/global ratios, writes build/bench-access/results.json. Guests
are emulated: only ratios from one run mean anything.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from litebench.bench.report import fmt_ns, fmt_size
from litebench.bench.runner import CLIENT, SERVER, Bench
from litebench.cluster.cluster import Background, Cluster, CommandFailed, REPO

MODES = ("global", "chunks")
MALLOC_SIZES = [4 << 10, 4 << 20, 64 << 20, 1 << 30]
LAT_SIZES = [8, 4096, 65536]
BW_SIZES = [65536, 1 << 20]
LMR_COUNTS = [1, 1000, 100000]
RPC_REPLIES = [64, 4096, 65536]
RPC_ID = 4343
OUT_DIR = REPO / "build" / "bench-access"


def load(c, mode):
    """lite.ko with `mode` on both nodes, joined."""
    c.reload_module([CLIENT, SERVER], f"remote_access={mode}", connected=[CLIENT, SERVER])
    got = c.status(SERVER)["remote_access"]
    if got != mode:
        raise CommandFailed(f"node {SERVER} runs with remote_access={got}, not {mode}")


def guarded(b, label, step):
    """Runs `step`; a failure is recorded and the benchmark goes on."""
    try:
        step()
    except (CommandFailed, KeyError, ValueError) as e:
        b.fail(label, e)


def measure(b, a, mode, into):
    """One round of every figure in `mode`, added to `into[metric]`."""
    def add(metric, value):
        into.setdefault(metric, {}).setdefault(mode, []).append(value)

    def malloc(size):
        d = b.tool_json(CLIENT, f"lite-bench malloc --size {size} --holders {SERVER} --repeat {a.malloc_repeat}",
                        a.step_timeout)
        add(f"malloc+map {fmt_size(size)}", d["total_ns"])
        add(f"free {fmt_size(size)}", d["free_ns"])

    def lat(op):
        sizes = ",".join(str(s) for s in a.lat_sizes)
        d = b.tool_json(CLIENT, f"lite-bench lat --op {op} --holder {SERVER} --sizes {sizes} --iters {a.lat_iters}",
                        a.step_timeout)
        for r in d["results"]:
            add(f"LT_{op} {fmt_size(r['size'])} median", r["median_ns"])
            add(f"LT_{op} {fmt_size(r['size'])} p99", r["p99_ns"])

    def bw():
        sizes = ",".join(str(s) for s in a.bw_sizes)
        d = b.tool_json(CLIENT, f"lite-bench bw --holder {SERVER} --sizes {sizes} --seconds {a.bw_seconds}",
                        a.step_timeout)
        for r in d["results"]:
            add(f"LT_write {fmt_size(r['size'])} MiB/s", r["mib_s"])

    def rpc(reply):
        d = b.tool_json(CLIENT, f"lite-selftest rpc-call {SERVER} {RPC_ID} --count {a.lat_iters} --size 16 "
                                f"--reply {reply}", a.step_timeout)
        if d.get("failed"):
            raise CommandFailed(f"{d['failed']} of {d['calls']} calls failed: {d.get('first_error')}")
        add(f"LT_RPC {fmt_size(reply)} reply median", d["p50_ns"])

    def lmrs(count):
        d = b.tool_json(CLIENT, f"lite-bench lmrs --count {count} --holder {SERVER} --iters {a.lmr_iters}",
                        max(a.step_timeout, int(600 + count * 0.03)))
        add(f"{count:,} LMRs: LT_write 8 B median", d["median_ns"])
        if count > 1:
            add(f"{count:,} LMRs: allocation s", d["setup_s"])

    steps = [(f"LT_malloc + LT_map and LT_free of {fmt_size(size)} on node {SERVER}", lambda s=size: malloc(s))
             for size in a.malloc_sizes]
    steps += [(f"LT_{op} latency", lambda op=op: lat(op)) for op in ("read", "write")]
    steps += [("LT_write throughput", bw)]
    rpc_steps = [(f"LT_RPC 16 B with a {fmt_size(reply)} reply buffer", lambda r=reply: rpc(r))
                 for reply in RPC_REPLIES]
    lmr_steps = [(f"LT_write 8 B to random ones of {count:,} LMRs", lambda n=count: lmrs(n)) for count in a.lmr_counts]
    for label, step in steps:
        b.progress(f"{mode}: {label}")
        guarded(b, f"{mode}: {label}", step)
    server = Background(b.c, SERVER, "access-rpc", f"lite-selftest rpc-serve {RPC_ID} --threads 2")
    try:
        server.wait_for("ready")
        for label, step in rpc_steps:
            b.progress(f"{mode}: {label}")
            guarded(b, f"{mode}: {label}", step)
    finally:
        server.close()
    for label, step in lmr_steps:
        b.progress(f"{mode}: {label}")
        guarded(b, f"{mode}: {label}", step)


def summarize(results):
    """Per metric: each mode's median and range over the rounds, and chunks/global."""
    rows = []
    for metric, modes in results.items():
        if not all(m in modes for m in MODES):
            continue
        row = {"metric": metric}
        for m in MODES:
            row[m] = {"median": statistics.median(modes[m]), "min": min(modes[m]), "max": max(modes[m]),
                      "rounds": modes[m]}
        g, ch = row["global"]["median"], row["chunks"]["median"]
        row["ratio"] = ch / g if g else None
        rows.append(row)
    return rows


def fmt(metric, value):
    if metric.endswith("MiB/s"):
        return f"{value:.1f}"
    if metric.endswith(" s"):
        return f"{value:.0f} s"
    return fmt_ns(value)


def table(rows):
    body = [[r["metric"]] + [f"{fmt(r['metric'], r[m]['median'])} ({fmt(r['metric'], r[m]['min'])} - "
                              f"{fmt(r['metric'], r[m]['max'])})" for m in MODES]
            + [f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"] for r in rows]
    head = ["", "global", "chunks", "chunks/global"]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(line, widths)))
                     for line in [head] + body)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="release", choices=["release", "debug"], help="guest kernel (default release)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both modes, alternating (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="1 round, malloc up to 64 MiB, at most 1 000 LMRs, fewer calls (about 10 min)")
    ap.add_argument("--malloc-repeat", type=int, default=3, help="LT_malloc/LT_free per size and round (default 3)")
    ap.add_argument("--lat-iters", type=int, default=300, help="timed calls per latency size (default 300)")
    ap.add_argument("--bw-seconds", type=float, default=3, help="seconds per throughput size (default 3)")
    ap.add_argument("--lmr-iters", type=int, default=200, help="timed writes per LMR count (default 200)")
    ap.add_argument("--step-timeout", type=int, default=900, help="seconds per step (default 900)")
    ap.add_argument("--out", default=str(OUT_DIR), help="directory of results.json and the cluster's logs")
    ap.add_argument("--json", action="store_true", help="also print results.json to stdout")
    a = ap.parse_args()
    a.malloc_sizes, a.lat_sizes, a.bw_sizes, a.lmr_counts = MALLOC_SIZES, LAT_SIZES, BW_SIZES, LMR_COUNTS
    if a.quick:
        a.rounds, a.malloc_repeat, a.lat_iters, a.lmr_iters, a.bw_seconds = 1, 1, 100, 50, 2
        a.malloc_sizes, a.lmr_counts = MALLOC_SIZES[:3], LMR_COUNTS[:2]
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    guest_bin = REPO / "build" / a.kernel / "guest" / "bin"
    if not (guest_bin / "lite-bench").exists():
        print(f"access_bench: lite-bench missing in {guest_bin}: run `make guest KERNEL={a.kernel}`", file=sys.stderr)
        return 2

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    c = Cluster(out / "cluster")
    b = Bench(c, a)
    b.total = a.rounds * 2 * (len(a.malloc_sizes) + 3 + len(RPC_REPLIES) + len(a.lmr_counts))
    started = time.time()
    results = {}
    try:
        c.up(nodes=2, variant=a.kernel, mem=1536 + 512)
        c.start_manager(CLIENT)
        for r in range(1, a.rounds + 1):
            for mode in (MODES if r % 2 else MODES[::-1]):
                print(f"round {r}/{a.rounds}: remote_access={mode}", flush=True)
                load(c, mode)
                measure(b, a, mode, results)
    except CommandFailed as e:
        b.fail("cluster", e)
    finally:
        c.down(quiet=True)
    rows = summarize(results)
    report = {"bench": "access", "kernel": a.kernel, "rounds": a.rounds, "quick": a.quick,
              "seconds": round(time.time() - started), "rows": rows, "errors": b.errors}
    (out / "results.json").write_text(json.dumps(report, indent=1))
    print(table(rows))
    print(f"median (range) over {a.rounds} round(s); results: {out / 'results.json'} "
          f"({report['seconds']} s)")
    if a.json:
        print(json.dumps(report, indent=1))
    return 1 if b.errors else 0
