#!/usr/bin/env python3
"""LITE-RS priority-class benchmark (`make bench-qos`; part of `make bench`): LITE's
Fig. 16 and Justitia's Fig. 9 on the virtual cluster.

Boots 3 nodes; node 0 sends to LMRs held by node 1. In each mode (none, hw-sep,
sw-pri), after a latency flow alone (one latency-class process, 16 B LT_writes back
to back), two bulk-class processes write 1 MiB LT_writes for 3 phases; the latency
flow runs again during the middle one:

    bulk alone | bulk + latency | bulk alone

Reported per mode: the latency class's p50/p99 alone and beside bulk, the bulk
bandwidth alone and beside latency, and the aggregate bandwidth beside latency
against the `none` mode's. Targets (issue 6): with sw-pri, p99 beside bulk <= 1.5 x
p99 alone, and aggregate bandwidth >= 0.90 x none's.

Then the frontier (`--frontier`, `--frontier-chunks`): the same protocol in sw-pri
with SafeUtil held at fixed rates (the link rate set to each, AIMD kept from halving
by the largest Target99) and paced chunks of each size, which shows what any
SafeUtil and chunk size could trade between the two targets on this cluster,
whatever AIMD would choose.

Target99 (what sw-pri steers the latency class's p99 to) defaults to 1.5 x the p99 the
latency flow reaches alone in `none` mode, measured first: emulated guests have
millisecond latencies, so a fixed microsecond target would mean nothing.

Two regimes (`--regime`): `link` (the default) puts the holder's port behind a
wire that drains at `--link-rate` bytes/s through a deep (lossless) queue
(vwire.py), so the latency class waits in a queue at a link as it would behind a
real RNIC's port; `cpu` is the plain segment, where the contended resource is the
host cores that emulate the NICs. `--runs N` repeats the modes N times on one
cluster, the order rotated each run, and reports each figure's median.

Writes build/bench/qos-REGIME.json and qos-REGIME.svg (a time plot per mode: the
latency class's p99 and each class's bandwidth per interval).
"""

import argparse
import json
import shlex
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vwire  # noqa: E402
from vcluster import Cluster, CommandFailed, REPO  # noqa: E402

NODES = 3
SENDER, HOLDER = 0, 1
OUT_DIR = REPO / "build" / "bench"
MODES = ["none", "hw-sep", "sw-pri"]
BULK_FLOWS = 2
LATENCY_SIZE = 16
BULK_SIZE = 1 << 20
INTERVAL_MS = 250
TARGETS = {"p99_ratio": ("<=", 1.5), "aggregate_ratio": (">=", 0.90)}
FRONTIER_MB_S = [1, 4, 16]
FRONTIER_CHUNK_KIB = [5, 16]
DEFAULT_CHUNK_KIB = 5
REGIMES = ["link", "cpu"]
# The wire of the link regime: slow enough that the wire, not the emulation (the
# release guests move ~10 MB/s of 1 MiB writes on the plain segment), is what bulk
# traffic waits for.
DEFAULT_LINK_RATE = "4M"
# The largest Target99 the module takes (10 s): AIMD never halves below it.
UNREACHABLE_TARGET_US = 10_000_000


def latency_flow(seconds, interval_ms=INTERVAL_MS):
    """A latency-class flow: a shell that the operator puts in class latency (a process
    rule covers its children), which then runs the flow."""
    flow = (f"lite-bench --quiet flow --holder {HOLDER} --size {LATENCY_SIZE} --seconds {seconds} "
            f"--interval-ms {interval_ms}")
    return f"sh -c {shlex.quote('lite-admin class set --pid $$ latency >/dev/null && exec ' + flow)}"


def bulk_flow(seconds, interval_ms=INTERVAL_MS):
    return (f"lite-bench --quiet flow --holder {HOLDER} --size {BULK_SIZE} --seconds {seconds} --class bulk "
            f"--interval-ms {interval_ms}")


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def in_window(flow, lo_ms, hi_ms):
    """The timeline buckets of `flow` that lie within [lo_ms, hi_ms) of wall-clock time."""
    start = flow["started_unix_ms"]
    return [b for b in flow["timeline"] if lo_ms <= start + b["t"] * 1000 < hi_ms]


def bandwidth(flows, lo_ms, hi_ms):
    """MB/s of `flows` together: the bytes of the operations that completed within
    [lo_ms, hi_ms) over its length (buckets without completions have no entry)."""
    if hi_ms <= lo_ms:
        return 0.0
    done = sum(b["ops"] * f["size"] for f in flows for b in in_window(f, lo_ms, hi_ms))
    return done / ((hi_ms - lo_ms) / 1000) / 1e6


def summarize_mode(alone, both, bulks):
    """One mode's figures from its flows' JSON: the latency flow alone, the latency
    flow beside bulk, and the bulk flows (which ran before, during and after it)."""
    lat_lo = both["started_unix_ms"]
    lat_hi = lat_lo + both["seconds"] * 1000
    first = min(f["started_unix_ms"] for f in bulks)
    last = max(f["started_unix_ms"] + f["seconds"] * 1000 for f in bulks)
    bulk_alone = (bandwidth(bulks, first, lat_lo) + bandwidth(bulks, lat_hi, last)) / 2
    bulk_beside = bandwidth(bulks, lat_lo, lat_hi)
    return {
        "latency_alone": {"p50_ns": alone["latency"]["median_ns"], "p99_ns": alone["latency"]["p99_ns"],
                          "ops": alone["ops"]},
        "latency_beside_bulk": {"p50_ns": both["latency"]["median_ns"], "p99_ns": both["latency"]["p99_ns"],
                                "ops": both["ops"]},
        "p99_ratio": both["latency"]["p99_ns"] / max(1, alone["latency"]["p99_ns"]),
        "bulk_alone_mb_s": bulk_alone,
        "bulk_beside_latency_mb_s": bulk_beside,
        "aggregate_beside_latency_mb_s": bulk_beside + both["mb_s"],
    }


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def median_summary(runs):
    """Each figure of one mode's summaries (one per run), as its median."""
    if len(runs) == 1:
        return dict(runs[0])
    out = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: median([r[key][k] for r in runs]) for k in value}
        else:
            out[key] = median([r[key] for r in runs])
    out["runs"] = len(runs)
    out["p99_ratio_runs"] = [r["p99_ratio"] for r in runs]
    return out


def add_ratios(summary, modes=None):
    """Aggregate bandwidth of each entry of `summary` against the `none` mode's (in
    `modes`, by default `summary` itself), and target checks."""
    none = (summary if modes is None else modes).get("none", {})
    base = none.get("aggregate_beside_latency_mb_s")
    for mode, s in summary.items():
        s["aggregate_ratio"] = s["aggregate_beside_latency_mb_s"] / base if base else None
        s["work_conserving_ratio"] = (s["bulk_alone_mb_s"] / none["bulk_alone_mb_s"]
                                      if base and none["bulk_alone_mb_s"] else None)
        s["met"] = {k: (None if s.get(k) is None else (s[k] <= t if op == "<=" else s[k] >= t))
                    for k, (op, t) in TARGETS.items()}
    return summary


def table(summary, first="mode"):
    head = [first, "lat p50 alone", "lat p99 alone", "lat p50 +bulk", "lat p99 +bulk", "p99 ratio",
            "bulk MB/s alone", "bulk MB/s +lat", "aggregate vs none"]
    rows = [head]
    for mode, s in summary.items():
        rows.append([mode, f"{s['latency_alone']['p50_ns'] / 1e6:.2f} ms", f"{s['latency_alone']['p99_ns'] / 1e6:.2f} ms",
                     f"{s['latency_beside_bulk']['p50_ns'] / 1e6:.2f} ms",
                     f"{s['latency_beside_bulk']['p99_ns'] / 1e6:.2f} ms", f"{s['p99_ratio']:.2f}",
                     f"{s['bulk_alone_mb_s']:.2f}", f"{s['bulk_beside_latency_mb_s']:.2f}",
                     "-" if s["aggregate_ratio"] is None else f"{s['aggregate_ratio']:.2f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def pacing_note(stats):
    """SW-Pri's state from `lite-admin stats --json`, when it was limiting bulk."""
    if not stats or stats.get("mode") != "sw-pri" or stats.get("safe_util") is None:
        return ""
    return (f"; SafeUtil {stats['safe_util'] / 1e6:.2f} of {stats['link_rate'] / 1e6:.2f} MB/s, "
            f"AIMD {stats['decreases']} decreases / {stats['increases']} increases since load")


def _esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_timeline(title, modes):
    """Per mode, two stacked panels over time: the latency class's p99 per interval
    (ms), and each class's bandwidth (MB/s). `modes`: [(name, {"latency": [flow...],
    "bulk": [flow...]})]; flows carry started_unix_ms and timeline buckets."""
    pw, ph, ml, mt = 380, 170, 56, 26
    w, h = pw * len(modes), 2 * ph + 60
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'font-family="sans-serif" font-size="11">', f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{_esc(title)}</text>']
    for i, (name, flows) in enumerate(modes):
        everything = flows["latency"] + flows["bulk"]
        if not everything:
            continue
        t0 = min(f["started_unix_ms"] for f in everything)
        t1 = max(f["started_unix_ms"] + f["seconds"] * 1000 for f in everything)
        span = max(1.0, (t1 - t0) / 1000)

        def series(flow, key, scale=1.0):
            return [((flow["started_unix_ms"] - t0) / 1000 + b["t"], b[key] * scale) for b in flow["timeline"]]

        panels = [("latency class p99 (ms)", [(series(f, "p99_ns", 1e-6), "#d62728") for f in flows["latency"]]),
                  ("MB/s: bulk (blue), latency (red)",
                   [(series(f, "mb_s"), "#1f77b4") for f in flows["bulk"]]
                   + [(series(f, "mb_s"), "#d62728") for f in flows["latency"]])]
        for j, (label, lines) in enumerate(panels):
            x0, y0 = i * pw + ml, 30 + j * (ph + 10) + mt
            iw, ih = pw - ml - 14, ph - mt - 20
            ymax = max([y for pts, _ in lines for _, y in pts] + [1e-9]) * 1.1
            parts.append(f'<text x="{i * pw + pw / 2}" y="{y0 - 8}" text-anchor="middle" font-weight="bold">'
                         f'{_esc(name)}: {_esc(label)}</text>')
            parts.append(f'<rect x="{x0}" y="{y0}" width="{iw}" height="{ih}" fill="none" stroke="#444"/>')
            for k in range(5):
                v = ymax * k / 4
                y = y0 + ih - ih * k / 4
                parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + iw}" y2="{y:.1f}" stroke="#eee"/>')
                parts.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end">{v:.3g}</text>')
            for k in range(int(span) + 1):
                if span > 12 and k % 2:
                    continue
                x = x0 + iw * k / span
                parts.append(f'<text x="{x:.1f}" y="{y0 + ih + 14}" text-anchor="middle">{k}</text>')
            for pts, color in lines:
                if pts:
                    coords = " ".join(f"{x0 + iw * x / span:.1f},{y0 + ih - ih * y / ymax:.1f}" for x, y in pts)
                    parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        parts.append(f'<text x="{i * pw + pw / 2}" y="{h - 6}" text-anchor="middle">seconds</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def svg_frontier(title, modes, frontier):
    """The latency class's p99 ratio against the aggregate bandwidth (vs none): one
    point per mode and per fixed SafeUtil of the frontier, and the target region."""
    w, h, ml, mr, mt, mb = 680, 420, 60, 20, 40, 50
    iw, ih = w - ml - mr, h - mt - mb
    points = [(name, s, "#1f77b4") for name, s in modes.items()] + \
             [(name, s, "#ff7f0e") for name, s in frontier.items()]
    points = [(n, s["aggregate_ratio"], s["p99_ratio"], c) for n, s, c in points if s.get("aggregate_ratio") is not None]
    xmax = max([1.1] + [x * 1.1 for _, x, _, _ in points])
    ymax = max([2 * TARGETS["p99_ratio"][1]] + [y * 1.1 for _, _, y, _ in points])

    def at(x, y):
        return ml + iw * x / xmax, mt + ih - ih * y / ymax

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'font-family="sans-serif" font-size="11">', f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="13" font-weight="bold">{_esc(title)}</text>']
    # The target region: aggregate >= 0.90 of none, p99 ratio <= 1.5.
    (x0, y0), (x1, y1) = at(TARGETS["aggregate_ratio"][1], TARGETS["p99_ratio"][1]), at(xmax, 0)
    parts.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" fill="#dff0d8"/>')
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y1 - 6:.1f}" text-anchor="middle" fill="#3c763d">targets</text>')
    parts.append(f'<rect x="{ml}" y="{mt}" width="{iw}" height="{ih}" fill="none" stroke="#444"/>')
    for k in range(6):
        gx, gy = at(xmax * k / 5, ymax * k / 5)
        parts.append(f'<text x="{gx:.1f}" y="{mt + ih + 14}" text-anchor="middle">{xmax * k / 5:.2f}</text>')
        parts.append(f'<text x="{ml - 4}" y="{gy + 4:.1f}" text-anchor="end">{ymax * k / 5:.2f}</text>')
    parts.append(f'<text x="{ml + iw / 2}" y="{h - 12}" text-anchor="middle">aggregate bandwidth beside latency '
                 f'(vs none)</text>')
    parts.append(f'<text x="14" y="{mt + ih / 2}" text-anchor="middle" transform="rotate(-90 14 {mt + ih / 2})">'
                 f'latency p99 beside bulk / alone</text>')
    placed = []  # label boxes (x0, y0, x1, y1), so that close points' labels do not overlap
    for name, x, y, color in points:
        px, py = at(x, y)
        width = 6.2 * len(name)
        for dy in (-6, 14, -18, 26, -30, 38):
            box = (px + 6, py + dy - 10, px + 6 + width, py + dy + 2)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append(box)
        if dy != -6:
            # A label moved away from its point keeps a line to it.
            parts.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{px + 6:.1f}" y2="{py + dy - 4:.1f}" '
                         f'stroke="{color}" stroke-width="0.8"/>')
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{color}"/>')
        parts.append(f'<text x="{px + 6:.1f}" y="{py + dy:.1f}" fill="{color}">{_esc(name)}</text>')
    parts.append(f'<text x="{ml + 6}" y="{mt + 14}"><tspan fill="#1f77b4">modes</tspan>, '
                 f'<tspan fill="#ff7f0e">sw-pri with SafeUtil held at a rate, chunks of a size</tspan></text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


class Runner:
    def __init__(self, c, timeout):
        self.c, self.timeout = c, timeout

    def flow(self, job, what):
        res = job.wait()
        data = last_json(res.out)
        if res.rc != 0 or data is None:
            raise CommandFailed(f"{what} exited {res.rc}: {res.out.strip()[-1500:]}")
        return data

    def mode(self, mode, seconds):
        """Latency alone, then bulk for 3 phases with latency in the middle one."""
        self.c.exec(SENDER, f"lite-admin mode {mode}")
        alone = self.flow(self.c.exec_async(SENDER, latency_flow(seconds), timeout=self.timeout), "latency flow")
        bulks = [self.c.exec_async(SENDER, bulk_flow(3 * seconds), timeout=self.timeout) for _ in range(BULK_FLOWS)]
        time.sleep(seconds)
        both_job = self.c.exec_async(SENDER, latency_flow(seconds), timeout=self.timeout)
        # Halfway through, SW-Pri's state: SafeUtil, AIMD steps, pacing.
        time.sleep(seconds / 2)
        pacing = last_json(self.c.exec(SENDER, "lite-admin stats --json").out)
        both = self.flow(both_job, "latency flow beside bulk")
        bulk = [self.flow(job, "bulk flow") for job in bulks]
        return alone, both, bulk, pacing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="release", choices=["release", "debug"])
    ap.add_argument("--regime", default="link", choices=REGIMES,
                    help="link: the holder behind a rate-limited wire (default); cpu: the plain segment")
    ap.add_argument("--link-rate", default=DEFAULT_LINK_RATE, metavar="RATE",
                    help=f"the link regime's wire, bytes/s (K, M: powers of 1024; default {DEFAULT_LINK_RATE})")
    ap.add_argument("--runs", type=int, default=1, help="runs of every mode, order rotated (default 1)")
    ap.add_argument("--seconds", type=float, default=8, help="length of each phase (default 8)")
    ap.add_argument("--target-us", type=int, help="Target99 (default: 1.5 x the latency flow's p99 alone)")
    ap.add_argument("--out", default=str(OUT_DIR), help="where qos.json, qos.svg and qos-frontier.svg go (default build/bench)")
    ap.add_argument("--link-mbps", type=int, help="link rate SW-Pri assumes (default: measured)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated modes to run (default {','.join(MODES)}; ratios need none)")
    ap.add_argument("--frontier", default=None,
                    help="comma-separated MB/s to hold sw-pri's SafeUtil at after the modes "
                         f"(default in the cpu regime {','.join(map(str, FRONTIER_MB_S))}; in the link regime none)")
    ap.add_argument("--frontier-chunks", default=",".join(map(str, FRONTIER_CHUNK_KIB)),
                    help="comma-separated KiB of paced chunks, each with every --frontier rate "
                         f"(default {','.join(map(str, FRONTIER_CHUNK_KIB))}; 1 to 32)")
    ap.add_argument("--json", action="store_true", help="also print qos.json to stdout")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: choose from {', '.join(MODES)}")
    if args.link_mbps is None and args.regime == "link":
        # SW-Pri does not find the bottleneck's rate by itself yet (issue 20): told.
        args.link_mbps = max(1, round(vwire.parse_bytes(args.link_rate) / 1e6))
    if args.frontier is None:
        args.frontier = ",".join(map(str, FRONTIER_MB_S)) if args.regime == "cpu" else ""
    if args.runs < 1:
        ap.error("--runs: at least 1")
    try:
        wire_rate = vwire.parse_bytes(args.link_rate)
    except ValueError as e:
        ap.error(f"--link-rate: {e}")
    try:
        rates = [int(r) for r in args.frontier.split(",") if r]
        chunks = [int(k) for k in args.frontier_chunks.split(",") if k]
    except ValueError:
        ap.error("--frontier and --frontier-chunks take whole numbers, such as 1,4,16")
    if any(r < 1 for r in rates):
        ap.error("--frontier: rates of at least 1 MB/s")
    if any(not 1 <= k <= 32 for k in chunks) or (rates and not chunks):
        ap.error("--frontier-chunks: sizes of 1 to 32 KiB")
    frontier = [(kib, mb_s) for kib in chunks for mb_s in rates]
    if args.seconds <= 0:
        ap.error("--seconds must be positive")
    guest_bin = REPO / "build" / args.kernel / "guest" / "bin"
    if not (guest_bin / "lite-bench").exists():
        print(f"qos-bench: lite-bench missing in {guest_bin}: run `make guest KERNEL={args.kernel}`", file=sys.stderr)
        return 2
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    c = Cluster(out_dir / f"qos-{args.regime}-cluster")
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    started = time.time()
    wires = {HOLDER: (wire_rate, vwire.DEFAULT_QUEUE)} if args.regime == "link" else {}
    results = {"config": {"kernel": args.kernel, "regime": args.regime, "runs": args.runs,
                          "wire": {"node": HOLDER, "rate_bytes_s": wire_rate, "queue_bytes": vwire.DEFAULT_QUEUE}
                          if wires else None,
                          "seconds": args.seconds, "sender": SENDER, "holder": HOLDER,
                          "latency_size": LATENCY_SIZE, "bulk_size": BULK_SIZE, "bulk_flows": BULK_FLOWS,
                          "interval_ms": INTERVAL_MS},
               "modes": {}, "flows": {}, "frontier": {}, "errors": []}
    try:
        c.up(nodes=NODES, variant=args.kernel, mem=1536, wires=wires)
        c.join(range(NODES))
        results["config"]["accel"] = c.meta.get("accel")
        runner = Runner(c, timeout=int(10 * args.seconds) + 300)
        target_us = args.target_us
        if target_us is None:
            print("[0] latency flow alone, to set Target99 ...", flush=True)
            c.exec(SENDER, "lite-admin mode none")
            probe = runner.flow(c.exec_async(SENDER, latency_flow(args.seconds), timeout=runner.timeout),
                                "latency flow")
            target_us = max(1, int(probe["latency"]["p99_ns"] * 1.5 / 1000))
        c.exec(SENDER, f"lite-admin target --us {target_us}")
        if args.link_mbps:
            c.exec(SENDER, f"lite-admin weights --link-mbps {args.link_mbps}")
            results["config"]["link_mbps"] = args.link_mbps
        results["config"]["target99_us"] = target_us
        print(f"Target99 {target_us / 1000:.2f} ms", flush=True)
        per_run = {mode: [] for mode in modes}
        order = [(run, modes[(i + run) % len(modes)]) for run in range(args.runs) for i in range(len(modes))]
        for i, (run, mode) in enumerate(order, 1):
            print(f"[{i}/{len(order)}] run {run + 1}, mode {mode}: latency alone {args.seconds:g} s, then 2 bulk "
                  f"flows for {3 * args.seconds:g} s with latency in the middle ...", flush=True)
            try:
                alone, both, bulk, pacing = runner.mode(mode, args.seconds)
            except CommandFailed as e:
                print(f"      FAILED: {str(e)[-1500:]}", flush=True)
                results["errors"].append({"step": f"run {run + 1} {mode}", "error": str(e)[-4000:]})
                continue
            results["flows"][mode] = {"latency_alone": alone, "latency": [both], "bulk": bulk, "pacing": pacing}
            s = summarize_mode(alone, both, bulk)
            per_run[mode].append(s)
            print(f"      latency p99 alone {s['latency_alone']['p99_ns'] / 1e6:.2f} ms, beside bulk "
                  f"{s['latency_beside_bulk']['p99_ns'] / 1e6:.2f} ms; bulk {s['bulk_alone_mb_s']:.2f} MB/s alone, "
                  f"{s['bulk_beside_latency_mb_s']:.2f} MB/s beside latency{pacing_note(pacing)}", flush=True)
        results["modes"] = {mode: median_summary(runs) for mode, runs in per_run.items() if runs}
        if frontier:
            c.exec(SENDER, f"lite-admin target --us {UNREACHABLE_TARGET_US}")
        for i, (kib, mb_s) in enumerate(frontier, 1):
            point = f"{mb_s} MB/s, {kib} KiB"
            print(f"[frontier {i}/{len(frontier)}] sw-pri with SafeUtil held at {mb_s} MB/s, {kib} KiB chunks ...",
                  flush=True)
            c.exec(SENDER, f"lite-admin weights --link-mbps {mb_s} --chunk-kib {kib}")
            try:
                alone, both, bulk, pacing = runner.mode("sw-pri", args.seconds)
            except CommandFailed as e:
                print(f"      FAILED: {str(e)[-1500:]}", flush=True)
                results["errors"].append({"step": f"frontier {point}", "error": str(e)[-4000:]})
                continue
            results["flows"][f"sw-pri at {point}"] = {"latency_alone": alone, "latency": [both], "bulk": bulk,
                                                     "pacing": pacing}
            s = results["frontier"][point] = summarize_mode(alone, both, bulk)
            print(f"      latency p99 ratio {s['p99_ratio']:.2f}; bulk {s['bulk_beside_latency_mb_s']:.2f} MB/s "
                  f"beside latency{pacing_note(pacing)}", flush=True)
        c.exec(SENDER, f"lite-admin weights --link-mbps {args.link_mbps or 0} --chunk-kib {DEFAULT_CHUNK_KIB}")
        c.exec(SENDER, f"lite-admin target --us {target_us}")
        c.exec(SENDER, "lite-admin mode sw-pri")
    except CommandFailed as e:
        print(f"\nqos-bench: {e}", flush=True)
        results["errors"].append({"step": "cluster", "error": str(e)})
    finally:
        results["kernel_bug_reports"] = [f"node{n}: {line}" for n, line in c.splats()]
        c.down(quiet=True)
    results["duration_s"] = round(time.time() - started, 1)
    add_ratios(results["modes"])
    add_ratios(results["frontier"], results["modes"])
    json_path, svg_path = out_dir / f"qos-{args.regime}.json", out_dir / f"qos-{args.regime}.svg"
    frontier_path = out_dir / f"qos-{args.regime}-frontier.svg"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    regime = (f"holder behind a {wire_rate / 2**20:g} MiB/s wire" if wires else "plain segment (CPU-bound)")
    when = f"{regime}, {args.kernel} kernel, {time.strftime('%Y-%m-%d %H:%M')}"
    svg_path.write_text(svg_timeline(
        f"Latency class beside 2 bulk flows, by mode ({when})",
        [(m, {"latency": f["latency"], "bulk": f["bulk"]}) for m, f in results["flows"].items() if m in MODES]))
    frontier_path.write_text(svg_frontier(f"Latency p99 ratio against aggregate bandwidth ({when})",
                                          results["modes"], results["frontier"]))
    rc = 0
    if results["modes"]:
        runs = f", median of {args.runs} runs" if args.runs > 1 else ""
        print(f"\n== {args.regime} regime ({regime}{runs}): latency class (16 B LT_write) beside 2 bulk flows "
              "(1 MiB LT_write) ==")
        print(table(results["modes"]))
        sw = results["modes"].get("sw-pri", {}).get("met", {})
        print("sw-pri targets: " + ", ".join(f"{k} {TARGETS[k][0]} {TARGETS[k][1]}: "
                                             f"{'met' if v else 'missed' if v is not None else 'no data'}"
                                             for k, v in sw.items()))
    if results["frontier"]:
        print("\n== frontier: sw-pri with SafeUtil held at a rate and chunks of a size (no AIMD) ==")
        print(table(results["frontier"], first="SafeUtil, chunk"))
        met = [p for p, s in results["frontier"].items() if all(s["met"].values())]
        print(f"settings meeting both targets: {'; '.join(met) if met else 'none'}")
    if results["errors"] or len(results["modes"]) < len(modes) or len(results["frontier"]) < len(frontier):
        rc = 1
    if results["kernel_bug_reports"]:
        print(f"guest kernels: {len(results['kernel_bug_reports'])} bug report lines!")
        rc = 1
    if args.json:
        print(json.dumps(results))
    print(f"results: {json_path}\nplots:   {svg_path}, {frontier_path}\n({results['duration_s']:.0f} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
