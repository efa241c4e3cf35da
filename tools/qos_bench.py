#!/usr/bin/env python3
"""LITE-RS priority-class benchmark (`make bench-qos`; part of `make bench`): LITE's
Fig. 16 and Justitia's Fig. 9 on the virtual cluster.

Boots 3 nodes; node 0 sends to node 1. The latency class is three flows, each a
latency-class process doing one operation back to back (`--latency-ops`):

    write  16 B LT_write to an LMR on node 1
    rpc    LT_RPC to `lite-bench serve` on node 1, 16 B in, 64 B out
    read   64 B LT_read from an LMR on node 1

The bulk class is two bulk-class processes doing 1 MiB LT_writes, or in a second row
1 MiB LT_reads (remote READs, paced at the reader, node 0) (`--bulk-ops`). In each
mode (none, hw-sep, sw-pri) and for each bulk operation, one pass: the latency
flows alone, then the bulk flows for 3 phases with the latency flows again in the
middle one:

    latency alone || bulk alone | bulk + latency | bulk alone

The three latency flows run at once (three processes), alone and in the middle
phase alike, not one after another: each flow's p99 then comes from a whole phase
(a third of one would leave a third of the samples, and the tail of a few thousand
emulated round trips of milliseconds is noise already); all three see the same
bulk traffic and the same stretch of SW-Pri's AIMD, which moves SafeUtil while the
phase runs (flows in turn would each see another part of it, the first one its
reaction to latency traffic starting); and alone and beside bulk differ by the
bulk flows only, so what the latency flows cost each other (three operations in
flight instead of one) is in both p99s and cancels in their ratio. How one latency
flow fares by itself is what `--latency-ops write` (say) measures.

The RPC flow's server (`lite-bench serve`, in the latency class) runs on node 1
from the start to the end of the benchmark.

Reported per mode and bulk operation: each latency flow's p50/p99 alone and beside
bulk and its p99 ratio, the bulk bandwidth alone and beside latency, and the
aggregate bandwidth beside latency (bulk and latency flows) against the `none`
mode's with the same bulk operation. Targets (issue 6): with sw-pri, p99 beside
bulk <= 1.5 x p99 alone for every latency flow (the summary's `p99_ratio` is the
largest of them), and aggregate bandwidth >= 0.90 x none's.

Then the frontier (`--frontier`, `--frontier-chunks`): the same passes (one per bulk
operation) in sw-pri with SafeUtil held at fixed rates (the link rate set to each,
AIMD kept from halving by the largest Target99) and paced chunks of each size,
which shows what any SafeUtil and chunk size could trade between the two targets
on this cluster, whatever AIMD would choose.

Target99 (what sw-pri steers the latency class's p99 to) defaults to 1.5 x the
p99 the latency flows reach alone in `none` mode, measured first: emulated guests
have millisecond latencies, so a fixed microsecond target would mean nothing. It is
the p99 SW-Pri itself watches: that of the class's one-sided operations (RPCs are
accounted without a latency), as `lite-admin stats` reports it, or the largest
flow's if the module has none.

Two regimes (`--regime`): `link` (the default) puts the holder's port behind a
wire that drains at `--link-rate` bytes/s through a deep (lossless) queue
(vwire.py), so the latency class waits in a queue at a link as it would behind a
real RNIC's port; `cpu` is the plain segment, where the contended resource is the
host cores that emulate the NICs. `--runs N` repeats the modes N times on one
cluster, the order rotated each run, and reports each figure's median.

Writes build/bench/qos-REGIME.json, qos-REGIME.svg (bulk write) and
qos-REGIME-bulk-read.svg (a time plot per mode: each latency flow's p99 per
interval and each flow's bandwidth over a trailing 2 s window, which holds
several 1 MiB operations), and the frontier plots qos-REGIME-frontier.svg and
qos-REGIME-frontier-bulk-read.svg, each plot also as .png. The JSON: `modes[MODE][BULK_OP]` and
`frontier[POINT][BULK_OP]` are summaries (`latency[LATENCY_OP]` with `alone`,
`beside_bulk` and `p99_ratio`; `p99_ratio`, the largest; the bandwidths and
ratios); `flows[MODE][BULK_OP]` the last run's flows as lite-bench printed them.

`--hostile` runs, instead of the passes above, a hostile tenant (Husky, NSDI'23: the
attacks that apply to a kernel-mediated design): one bulk-class process on node 0,
aimed at node 1, that

    a  floods 8 B LT_writes from 16 threads
    b  reads 1 MiB LMRs (two reads at a time)
    c  loops on calls that fail: unknown and foreign handles, permission errors,
       ranges past an LMR's end, a 64 GiB LT_malloc at node 1 (lite-selftest fail-loop)
    d  holds 100 000 LMRs of 4 KiB at node 1 (`--hostile-lmrs`; lite-selftest
       lmr-many, 16 threads allocating them, which takes minutes)
    e  forks 32 processes, each doing 1 MiB LT_writes (lite-bench flow --procs 32)

For each attack (`--attacks`; d last) and mode (`--modes`, with --hostile sw-pri,none
by default), one pass: the latency flows alone, then the tenant for 3 phases (once
it is ready: d's LMRs all allocated) with the latency flows again in the middle one.
The target (issue 20, point 6): in sw-pri, every latency flow's p99 beside the tenant
<= 1.5 x its p99 alone. A row per attack and mode; the rows, the flows and what the
tenant reported in qos-hostile.json (qos-hostile-cpu.json in the cpu regime),
written again after every pass; no plots.
"""

import argparse
import copy
import json
import math
import shlex
import signal
import sys
import time
from pathlib import Path

import vwire
from vcluster import Cluster, CommandFailed, REPO

NODES = 3
SENDER, HOLDER = 0, 1
OUT_DIR = REPO / "build" / "bench"
MODES = ["none", "hw-sep", "sw-pri"]
BULK_FLOWS = 2
# The latency class's flows (lite-bench flow --op OP), in the order they are reported.
LATENCY_OPS = {
    "write": {"size": 16, "label": "16 B LT_write"},
    "rpc": {"size": 16, "reply_size": 64, "label": "LT_RPC 16 B in, 64 B out"},
    "read": {"size": 64, "label": "64 B LT_read"},
}
BULK_OPS = {"write": "1 MiB LT_write", "read": "1 MiB LT_read"}
BULK_SIZE = 1 << 20
# The RPC flow's server on HOLDER (lite-bench's default id is the same).
RPC_ID = 32
RPC_SERVER_LOG = "/tmp/qos-rpc-server.log"
RPC_SERVER_PID = "/tmp/qos-rpc-server.pid"
# Colors of the flows in the time plots, and of the frontier plot's points.
LATENCY_COLORS = {"write": "#d62728", "rpc": "#9467bd", "read": "#ff7f0e"}
BULK_COLOR = "#1f77b4"
MODE_COLOR, FRONTIER_COLOR = "#1f77b4", "#ff7f0e"
INTERVAL_MS = 250
# The time plots' bandwidths are over this trailing window: several 1 MiB operations.
BANDWIDTH_WINDOW_S = 2.0
# The kernel's statistics of a phase leave out this much of its start and its end.
STATS_MARGIN_S = 0.5
TARGETS = {"p99_ratio": ("<=", 1.5), "aggregate_ratio": (">=", 0.90)}
FRONTIER_MB_S = [1, 4, 16]
FRONTIER_CHUNK_KIB = [5, 16]
# Chunks sized to the link (the module's default).
DEFAULT_CHUNK_KIB = 0
REGIMES = ["link", "cpu"]
# The wire of the link regime: slow enough that the wire, not the emulation (the
# release guests move ~10 MB/s of 1 MiB writes on the plain segment), is what bulk
# traffic waits for.
DEFAULT_LINK_RATE = "4M"
# The largest Target99 the module takes (10 s): AIMD never halves below it.
UNREACHABLE_TARGET_US = 10_000_000
# --hostile: the attacks of the hostile tenant, each a command started on SENDER in
# class bulk, aimed at HOLDER, that runs SECONDS from when it is ready: at once, or
# once it has printed its `ready` text. Run in HOSTILE_ORDER, each in every mode: d's
# minutes of allocation last.
HOSTILE_ATTACKS = {
    "a": {"label": "8 B LT_write flood, 16 threads",
          "command": f"lite-bench --quiet flow --holder {HOLDER} --op write --size 8 --threads 16 "
                     f"--seconds {{seconds}} --interval-ms {INTERVAL_MS}"},
    "b": {"label": "1 MiB LT_reads, 2 threads",
          "command": f"lite-bench --quiet flow --holder {HOLDER} --op read --size {BULK_SIZE} --threads 2 "
                     f"--seconds {{seconds}} --interval-ms {INTERVAL_MS}"},
    "c": {"label": "failing calls in a loop",
          "command": f"lite-selftest fail-loop --holder {HOLDER} --seconds {{seconds}}"},
    "d": {"label": "{lmrs} LMRs held", "ready": "holding ",
          "command": f"lite-selftest lmr-many {{lmrs}} --size 4096 --holders {HOLDER} --threads 16 "
                     f"--hold-seconds {{seconds}}"},
    "e": {"label": "32 forked processes, 1 MiB LT_writes",
          "command": f"lite-bench --quiet flow --holder {HOLDER} --op write --size {BULK_SIZE} --procs 32 "
                     f"--seconds {{seconds}} --interval-ms {INTERVAL_MS}"},
}
HOSTILE_ORDER = ["a", "b", "c", "e", "d"]
HOSTILE_MODES = ["sw-pri", "none"]
HOSTILE_LMRS = 100_000
# How long the tenant may take to get ready (100 000 LMRs: 6 minutes from 8 threads
# on the plain segment, see the README).
HOSTILE_SETUP_S = 1800


def target99_us(alone_flows, stats):
    """1.5 x the latency class's p99 alone as SW-Pri sees it (`lite-admin stats`),
    else as the slowest flow saw it."""
    classes = {c["class"]: c for c in (stats or {}).get("classes", [])}
    p99 = classes.get("latency", {}).get("p99_ns") or max(f["latency"]["p99_ns"] for f in alone_flows.values())
    return max(1, int(p99 * 1.5 / 1000))


def in_latency_class(command):
    """`command` run by a shell that the operator puts in class latency (a process
    rule covers its children), which takes its rule away afterwards: a node keeps
    at most 64 rules, and a pass starts six latency flows."""
    return in_class("latency", command)


def in_class(klass, command):
    """`command` run by a shell that the operator puts in class `klass` (see
    in_latency_class)."""
    script = (f"lite-admin class set --pid $$ {klass} >/dev/null && {{ {command}; rc=$?; "
              f"lite-admin class unset --pid $$ >/dev/null; exit $rc; }}")
    return f"sh -c {shlex.quote(script)}"


def latency_flow(seconds, op="write", interval_ms=INTERVAL_MS):
    """A latency-class flow of LATENCY_OPS[op]."""
    spec = LATENCY_OPS[op]
    rpc = f" --reply-size {spec['reply_size']} --rpc-id {RPC_ID}" if op == "rpc" else ""
    return in_latency_class(f"lite-bench --quiet flow --holder {HOLDER} --op {op} --size {spec['size']}{rpc} "
                            f"--seconds {seconds} --interval-ms {interval_ms}")


def bulk_flow(seconds, op="write", interval_ms=INTERVAL_MS):
    return (f"lite-bench --quiet flow --holder {HOLDER} --op {op} --size {BULK_SIZE} --seconds {seconds} "
            f"--class bulk --interval-ms {interval_ms}")


def rpc_server():
    """Starts the RPC flow's server on HOLDER in the background (in class latency: it
    answers the latency class) and waits until it has registered; it runs until
    the cluster goes down."""
    serve = in_latency_class(f"lite-bench serve --id {RPC_ID}")
    return (f"{serve} > {RPC_SERVER_LOG} 2>&1 < /dev/null & echo $! > {RPC_SERVER_PID}; i=0; "
            f"while [ $i -lt 300 ]; do grep -q 'serving RPC' {RPC_SERVER_LOG} && exit 0; "
            f"kill -0 $(cat {RPC_SERVER_PID}) 2>/dev/null || break; sleep 0.1; i=$((i + 1)); done; "
            f"cat {RPC_SERVER_LOG}; exit 1")


def parse_ops(text, known, what):
    """A comma-separated choice of `known`'s keys, in the order given; ValueError
    naming the flag otherwise."""
    ops = [o.strip() for o in text.split(",") if o.strip()]
    if not ops or any(o not in known for o in ops) or len(set(ops)) != len(ops):
        raise ValueError(f"{what}: a comma-separated choice of {','.join(known)}, each at most once")
    return ops


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
    done = sum(b["ops"] * op_bytes(f) for f in flows for b in in_window(f, lo_ms, hi_ms))
    return done / ((hi_ms - lo_ms) / 1000) / 1e6


def op_bytes(flow):
    """Bytes one operation of `flow` moves (an RPC's both ways, as lite-bench counts)."""
    return flow["size"] + flow.get("reply_size", 0)


def by_op(flows):
    """Latency flows as {op: flow}; a single flow's JSON is taken as the one flow."""
    if "timeline" in flows:
        return {flows.get("op", "write"): flows}
    return flows


def latency_beside(alone, beside, key, what):
    """Each latency flow that ran both alone and beside `what` ({op: flow}, or one
    flow): {op: {size, reply_size (RPC), alone, `key`, p99_ratio}}, with p50, p99 and
    the operations of each run."""
    alone, beside = by_op(alone), by_op(beside)
    ops = [op for op in beside if op in alone]
    if not ops:
        raise ValueError(f"no latency flow ran both alone and beside {what}")

    def figures(flow):
        return {"p50_ns": flow["latency"]["median_ns"], "p99_ns": flow["latency"]["p99_ns"], "ops": flow["ops"]}

    return {op: {
        "size": beside[op]["size"],
        **({"reply_size": beside[op]["reply_size"]} if "reply_size" in beside[op] else {}),
        "alone": figures(alone[op]),
        key: figures(beside[op]),
        "p99_ratio": beside[op]["latency"]["p99_ns"] / max(1, alone[op]["latency"]["p99_ns"]),
    } for op in ops}


PHASES = ("before_post_ns", "in_network_ns", "wakeup_ns")


def phases_of(op, flow, stats):
    """Where a latency flow's operations spent their time, in means (ns): in the
    user's view (`user_ns`), in each of the kernel's phases of that operation
    (`lite-admin stats` over the same phase), and the rest (`outside_ns`: the
    system call, handles, pinning the buffer, the process). None without kernel
    phases for its operation (LT_RPC has none)."""
    kernel = {p["op"]: p for p in (stats or {}).get("latency_phases", [])}.get(op)
    if not kernel or not kernel["ops"]:
        return None
    user = flow["latency"]["mean_ns"]
    out = {"ops": kernel["ops"], "user_ns": user, **{k: kernel[k] for k in PHASES}}
    out["outside_ns"] = max(0, user - sum(kernel[k] for k in PHASES))
    return out


def summarize_mode(alone, both, bulks, stats=None):
    """One pass's figures from its flows' JSON: the latency flows alone and beside
    bulk ({op: flow}, or one flow), and the bulk flows (which ran before, during
    and after the latency flows). Bulk counts as beside latency from the first
    latency flow's start to the last one's end. With the kernel's statistics of the
    two latency phases (`stats`: {"alone": ..., "beside": ...}), `phases` says where
    each one-sided latency flow's time went in each."""
    latency = latency_beside(alone, both, "beside_bulk", "bulk")
    both = by_op(both)
    lat_lo = min(both[op]["started_unix_ms"] for op in latency)
    lat_hi = max(both[op]["started_unix_ms"] + both[op]["seconds"] * 1000 for op in latency)
    first = min(f["started_unix_ms"] for f in bulks)
    last = max(f["started_unix_ms"] + f["seconds"] * 1000 for f in bulks)
    bulk_alone = (bandwidth(bulks, first, lat_lo) + bandwidth(bulks, lat_hi, last)) / 2
    bulk_beside = bandwidth(bulks, lat_lo, lat_hi)
    latency_mb_s = sum(both[op]["mb_s"] for op in latency)
    alone = by_op(alone)
    phases = {op: {"alone": phases_of(op, alone[op], (stats or {}).get("alone")),
                   "beside_bulk": phases_of(op, both[op], (stats or {}).get("beside"))} for op in latency}
    return {
        "phases": {op: p for op, p in phases.items() if None not in p.values()},
        "latency": latency,
        "p99_ratio": max(f["p99_ratio"] for f in latency.values()),
        "bulk_alone_mb_s": bulk_alone,
        "bulk_beside_latency_mb_s": bulk_beside,
        "latency_mb_s": latency_mb_s,
        "aggregate_beside_latency_mb_s": bulk_beside + latency_mb_s,
    }


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    if len(values) % 2 or values[mid - 1] == values[mid]:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2


def _median_tree(values):
    """The median of each number in like-shaped dicts (keys all of them have)."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _median_tree([v[k] for v in values]) for k in first if all(k in v for v in values)}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return median(values)
    return first


def median_summary(runs):
    """Each figure of one pass's summaries (one per run), as its median. Each latency
    flow's p99 ratio is the median of its ratios; `p99_ratio`, the largest of those."""
    if len(runs) == 1:
        return copy.deepcopy(runs[0])
    out = _median_tree(runs)
    for op, f in out.get("latency", {}).items():
        f["p99_ratio_runs"] = [r["latency"][op]["p99_ratio"] for r in runs]
    if out.get("latency"):
        out["p99_ratio"] = max(f["p99_ratio"] for f in out["latency"].values())
    out["runs"] = len(runs)
    out["p99_ratio_runs"] = [r["p99_ratio"] for r in runs]
    return out


def per_bulk(summaries, bulk_op):
    """{name: summary} of one bulk operation from {name: {bulk_op: summary}} (the same
    summary objects, so add_ratios on it fills them in)."""
    return {name: s[bulk_op] for name, s in summaries.items() if bulk_op in s}


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


def latency_label(op, f=None):
    """A latency flow's name in tables: its operation and sizes."""
    f = f or LATENCY_OPS.get(op, {})
    if "size" not in f:
        return op
    sizes = f"{f['size']}/{f['reply_size']} B" if "reply_size" in f else f"{f['size']} B"
    return f"{op} {sizes}"


def table(summary, first="mode"):
    """Rows per name (mode or frontier point), bulk operation and latency flow:
    `summary` is {name: {bulk_op: summary}}. The bulk columns are the pass's, on
    its first row."""
    head = [first, "bulk", "latency flow", "p50 alone", "p99 alone", "p50 +bulk", "p99 +bulk", "p99 ratio",
            "bulk MB/s alone", "bulk MB/s +lat", "aggregate vs none"]
    rows = [head]

    def ms(ns):
        return f"{ns / 1e6:.2f} ms"

    for name, passes in summary.items():
        for j, (bulk_op, s) in enumerate(passes.items()):
            for i, (op, f) in enumerate(s["latency"].items()):
                ratio = s.get("aggregate_ratio")
                lead = [f"{s['bulk_alone_mb_s']:.2f}", f"{s['bulk_beside_latency_mb_s']:.2f}",
                        "-" if ratio is None else f"{ratio:.2f}"] if i == 0 else ["", "", ""]
                rows.append([name if i == j == 0 else "", f"1 MiB {bulk_op}" if i == 0 else "",
                             latency_label(op, f), ms(f["alone"]["p50_ns"]), ms(f["alone"]["p99_ns"]),
                             ms(f["beside_bulk"]["p50_ns"]), ms(f["beside_bulk"]["p99_ns"]),
                             f"{f['p99_ratio']:.2f}"] + lead)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def phase_table(summary):
    """Where the one-sided latency flows' time went, alone -> beside bulk (means, ms):
    rows per mode, bulk operation and flow; `summary` is {mode: {bulk_op: summary}}."""
    head = ["mode", "bulk", "latency flow", "mean", "before post", "in the network", "wakeup", "outside the transfer"]
    rows = [head]
    for name, passes in summary.items():
        for bulk_op, s in passes.items():
            for op, p in s.get("phases", {}).items():
                a, b = p["alone"], p["beside_bulk"]
                rows.append([name, f"1 MiB {bulk_op}", latency_label(op)] + [
                    f"{a[k] / 1e6:.2f} -> {b[k] / 1e6:.2f}"
                    for k in ("user_ns",) + PHASES + ("outside_ns",)])
    if len(rows) == 1:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def pass_line(s):
    """One pass's figures in a line of progress."""
    lat = ", ".join(f"{op} {f['alone']['p99_ns'] / 1e6:.2f} / {f['beside_bulk']['p99_ns'] / 1e6:.2f} ms"
                    for op, f in s["latency"].items())
    return (f"latency p99 alone / beside bulk: {lat}; bulk {s['bulk_alone_mb_s']:.2f} MB/s alone, "
            f"{s['bulk_beside_latency_mb_s']:.2f} MB/s beside latency")


def pacing_note(stats):
    """SW-Pri's state from `lite-admin stats --json`, when it was limiting bulk."""
    if not stats or stats.get("mode") != "sw-pri" or stats.get("safe_util") is None:
        return ""
    found = stats.get("found_rate")
    return (f"; SafeUtil {stats['safe_util'] / 1e6:.2f} of {stats['link_rate'] / 1e6:.2f} MB/s "
            f"(found {found / 1e6 if found else 0:.2f}), {stats.get('chunk_bytes', 0) / 1024:g} KiB chunks, "
            f"AIMD {stats['decreases']} decreases / {stats['increases']} increases since load")


def windowed_mb_s(flow, t0_ms, window_s=BANDWIDTH_WINDOW_S):
    """`flow`'s bandwidth over a trailing window, at the end of each of its intervals
    from the first full window on: [(seconds since t0_ms, MB/s)]. An interval of a
    bulk flow holds one 1 MiB operation or none, so its own MB/s would only say
    which."""
    step = flow.get("interval_ms", INTERVAL_MS) / 1000
    done = {round(b["t"] / step): b["ops"] * op_bytes(flow) for b in flow["timeline"]}
    width = max(1, round(window_s / step))
    start = (flow["started_unix_ms"] - t0_ms) / 1000
    return [(start + end * step, sum(done.get(i, 0) for i in range(end - width, end)) / (width * step) / 1e6)
            for end in range(width, math.ceil(flow["seconds"] / step) + 1)]


def latency_color(flow):
    return LATENCY_COLORS.get(flow.get("op", "write"), LATENCY_COLORS["write"])


def timeline_columns(modes):
    """plots.timeline's columns: per mode, each latency flow's p99 per interval and
    each flow's bandwidth over a trailing window. `modes`: [(name, {"latency":
    [flow...], "bulk": [flow...]})]; flows carry started_unix_ms, timeline buckets
    and (latency flows) their op, which picks their color."""
    columns = []
    for name, flows in modes:
        everything = flows["latency"] + flows["bulk"]
        if not everything:
            continue
        t0 = min(f["started_unix_ms"] for f in everything)

        def line(points, color):
            return {"x": [x for x, _ in points], "y": [y for _, y in points], "color": color}

        p99 = [line([((f["started_unix_ms"] - t0) / 1000 + b["t"], b["p99_ns"] / 1e6) for b in f["timeline"]],
                    latency_color(f)) for f in flows["latency"]]
        bandwidth = ([line(windowed_mb_s(f, t0), BULK_COLOR) for f in flows["bulk"]]
                     + [line(windowed_mb_s(f, t0), latency_color(f)) for f in flows["latency"]])
        columns.append((name, [{"ylabel": "latency class p99 per interval (ms)", "lines": p99},
                               {"ylabel": f"MB/s over a trailing {BANDWIDTH_WINDOW_S:g} s window",
                                "lines": bandwidth}]))
    return columns


def timeline_legend(modes):
    """The latency flows that ran, in LATENCY_OPS' order, then the bulk flows."""
    ops = [op for op in LATENCY_OPS if any(f.get("op", "write") == op for _, fl in modes for f in fl["latency"])]
    return [(f"latency: {LATENCY_OPS[op]['label']}", LATENCY_COLORS[op]) for op in ops] + [("bulk flows", BULK_COLOR)]


def frontier_points(modes, frontier):
    """plots.tradeoff's points: each mode and each fixed SafeUtil of the frontier with
    data, at (aggregate bandwidth vs none, latency p99 ratio)."""
    named = [(name, s, MODE_COLOR) for name, s in modes.items()] + \
            [(name, s, FRONTIER_COLOR) for name, s in frontier.items()]
    return [(n, s["aggregate_ratio"], s["p99_ratio"], c) for n, s, c in named if s.get("aggregate_ratio") is not None]


def write_plots(out_dir, regime, results, bulk_ops, when):
    """Per bulk operation, the time plot per mode and the frontier plot, each as SVG
    and PNG: their paths."""
    # Imported here, not at the top: vmtest.py imports this module and draws nothing.
    from litebench import plots
    paths = []
    for bulk_op in bulk_ops:
        suffix = "" if bulk_op == "write" else f"-bulk-{bulk_op}"
        modes = [(m, {"latency": list(f[bulk_op]["latency"].values()), "bulk": f[bulk_op]["bulk"]})
                 for m, f in results["flows"].items() if m in MODES and bulk_op in f]
        paths += plots.timeline(out_dir / f"qos-{regime}{suffix}.svg",
                                f"Latency class beside {BULK_FLOWS} bulk flows of {BULK_OPS[bulk_op]}, by mode ({when})",
                                timeline_columns(modes), timeline_legend(modes))
        paths += plots.tradeoff(out_dir / f"qos-{regime}-frontier{suffix}.svg",
                                f"Latency p99 ratio against aggregate bandwidth, bulk {BULK_OPS[bulk_op]} ({when})",
                                frontier_points(per_bulk(results["modes"], bulk_op), per_bulk(results["frontier"], bulk_op)),
                                (TARGETS["aggregate_ratio"][1], TARGETS["p99_ratio"][1]),
                                "aggregate bandwidth beside latency (vs none)", "latency p99 beside bulk / alone",
                                [("modes", MODE_COLOR), ("sw-pri with SafeUtil held at a rate, chunks of a size",
                                                         FRONTIER_COLOR)])
    return paths


def hostile_command(attack, seconds, lmrs=HOSTILE_LMRS):
    """The hostile tenant's command of `attack` (a key of HOSTILE_ATTACKS), running
    `seconds` once ready."""
    return HOSTILE_ATTACKS[attack]["command"].format(seconds=f"{seconds:g}", lmrs=lmrs)


def hostile_label(attack, lmrs=HOSTILE_LMRS):
    return HOSTILE_ATTACKS[attack]["label"].format(lmrs=f"{lmrs:,}".replace(",", " "))


def hostile_script(attack, seconds, log, lmrs=HOSTILE_LMRS):
    """The tenant in class bulk, its output in `log` (which hostile_ready_script
    watches), then on stdout; `log`.rc gets its status when it ends."""
    tenant = in_class("bulk", hostile_command(attack, seconds, lmrs))
    return f"{tenant} > {log} 2>&1; rc=$?; echo $rc > {log}.rc; cat {log}; exit $rc"


def hostile_ready_script(log, marker):
    """Waits until the tenant writing `log` has printed `marker`; fails (with its
    output) if it ends first."""
    return (f"while :; do grep -q {shlex.quote(marker)} {log} 2>/dev/null && exit 0; "
            f"[ -s {log}.rc ] && {{ cat {log}; exit 1; }}; sleep 0.5; done")


def hostile_report(output):
    """What the tenant said about itself: its JSON (lite-bench flow, fail-loop) without
    the timeline, else its last lines (lmr-many)."""
    data = last_json(output)
    if data is not None:
        return {k: v for k, v in data.items() if k != "timeline"}
    return {"output": output.strip().splitlines()[-3:]}


def tenant_note(report):
    """The tenant's own figures in a table cell."""
    if report.get("rc"):
        return f"exited {report['rc']}"
    if "calls" in report:
        bad = f", {report['unexpected']} unexpected" if report.get("unexpected") else ""
        return f"{report['calls_per_s']:.0f} failed calls/s{bad}"
    if "ops" in report:
        return f"{report['ops']} ops, {report.get('mb_s', 0):.2f} MB/s"
    for line in report.get("output", []):
        if line.startswith("many:") and " malloc " in line:
            return f"allocated in {line.split(' malloc ', 1)[1].split(' s', 1)[0]} s"
    return ""


def summarize_hostile(alone, beside, target=TARGETS["p99_ratio"][1]):
    """The latency flows alone and beside the hostile tenant ({op: flow}, or one
    flow): each flow's p50/p99 and p99 ratio, the worst ratio and whether it meets
    `target`."""
    latency = latency_beside(alone, beside, "beside_hostile", "the hostile tenant")
    worst = max(latency, key=lambda op: latency[op]["p99_ratio"])
    return {"latency": latency, "p99_ratio": latency[worst]["p99_ratio"], "worst_flow": worst,
            "target": target, "met": latency[worst]["p99_ratio"] <= target}


def hostile_table(rows):
    """A row per attack and mode: each latency flow's p99 ratio and, in brackets, its
    p99 alone and beside the tenant; the worst ratio, the target and what the tenant
    did. `rows`: dicts with attack, label, mode, summary and tenant (a note)."""
    ops = []
    for r in rows:
        ops += [op for op in r["summary"]["latency"] if op not in ops]
    target = rows[0]["summary"]["target"] if rows else TARGETS["p99_ratio"][1]
    head = ["attack", "mode"] + [latency_label(op) for op in ops] + ["worst", f"<= {target:g}", "tenant"]
    out = [head]
    for r in rows:
        s = r["summary"]
        cells = []
        for op in ops:
            f = s["latency"].get(op)
            cells.append("-" if f is None else f"{f['p99_ratio']:.2f} ({f['alone']['p99_ns'] / 1e6:.2f}/"
                                               f"{f['beside_hostile']['p99_ns'] / 1e6:.2f} ms)")
        out.append([f"{r['attack']}: {r['label']}", r["mode"]] + cells
                   + [f"{s['p99_ratio']:.2f}", "met" if s["met"] else "missed", r.get("tenant", "")])
    widths = [max(len(r[i]) for r in out) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in out)


class Runner:
    def __init__(self, c, timeout):
        self.c, self.timeout = c, timeout

    def flow(self, job, what):
        res = job.wait()
        data = last_json(res.out)
        if res.rc != 0 or data is None:
            raise CommandFailed(f"{what} exited {res.rc}: {res.out.strip()[-1500:]}")
        if not data.get("ops"):
            raise CommandFailed(f"{what} completed no operation in its {data.get('seconds')} s")
        return data

    def flows(self, jobs):
        """Waits for every job of {key: (job, what)}, then raises the first failure, so
        that no flow of a failed pass still runs into the next one."""
        out, failed = {}, None
        for key, (job, what) in jobs.items():
            try:
                out[key] = self.flow(job, what)
            except CommandFailed as e:
                failed = failed or e
        if failed:
            raise failed
        return out

    def phase_stats(self, seconds):
        """`lite-admin stats --json` over a phase of `seconds` that starts now, less its
        margins (a job): SW-Pri's state at its end, and the means of the kernel's
        phases of the latency class's one-sided operations within it."""
        interval_ms = max(100, int((seconds - 2 * STATS_MARGIN_S) * 1000))
        return self.c.exec_async(SENDER, f"sleep {STATS_MARGIN_S}; lite-admin stats --json --interval-ms {interval_ms}",
                                 timeout=self.timeout)

    def latency_flows(self, ops, seconds, phase="alone"):
        """Starts the latency flows of `ops` at once: {op: (job, what)}."""
        return {op: (self.c.exec_async(SENDER, latency_flow(seconds, op), timeout=self.timeout),
                     f"latency flow {op} {phase}") for op in ops}

    def serve_rpc(self):
        """The RPC flow's server on HOLDER (until the cluster goes down)."""
        self.c.exec(HOLDER, rpc_server(), timeout=60)

    def mode(self, mode, seconds, bulk_op="write", latency_ops=tuple(LATENCY_OPS)):
        """One pass: the latency flows alone, then bulk flows of `bulk_op` for 3 phases
        with the latency flows in the middle one. Returns ({op: flow} alone, {op: flow}
        beside bulk, [bulk flow], {"alone": stats, "beside": stats}: the kernel's
        statistics over each latency phase, SW-Pri's state at its end.)"""
        self.c.exec(SENDER, f"lite-admin mode {mode}")
        alone_jobs = self.latency_flows(latency_ops, seconds)
        alone_stats = self.phase_stats(seconds)
        alone = self.flows(alone_jobs)
        bulks = {i: (self.c.exec_async(SENDER, bulk_flow(3 * seconds, bulk_op), timeout=self.timeout),
                     f"bulk flow {bulk_op}") for i in range(BULK_FLOWS)}
        time.sleep(seconds)
        both_jobs = self.latency_flows(latency_ops, seconds, "beside bulk")
        both_stats = self.phase_stats(seconds)
        flows = self.flows({**{("latency", op): job for op, job in both_jobs.items()},
                            **{("bulk", i): job for i, job in bulks.items()}})
        both = {op: flows[("latency", op)] for op in latency_ops}
        bulk = [flows[("bulk", i)] for i in range(BULK_FLOWS)]
        stats = {"alone": last_json(alone_stats.wait().out), "beside": last_json(both_stats.wait().out)}
        return alone, both, bulk, stats

    def hostile(self, mode, attack, seconds, latency_ops=tuple(LATENCY_OPS), lmrs=HOSTILE_LMRS, tag="qos-hostile"):
        """One pass against a hostile tenant: the latency flows alone, then the tenant
        of `attack` for 3 phases from when it is ready, with the latency flows in the
        middle one. Returns ({op: flow} alone, {op: flow} beside the tenant, what the
        tenant reported and its exit status (`rc`: a tenant that fails after the latency
        flows ran still makes a pass, to be flagged), SW-Pri's state halfway)."""
        self.c.exec(SENDER, f"lite-admin mode {mode}")
        alone = self.flows(self.latency_flows(latency_ops, seconds))
        log = f"/tmp/{tag}.log"
        # A previous pass's status would say this tenant had ended.
        self.c.exec(SENDER, f"rm -f {log} {log}.rc")
        tenant = self.c.exec_async(SENDER, hostile_script(attack, 3 * seconds, log, lmrs),
                                   timeout=self.timeout + HOSTILE_SETUP_S)
        failed, beside, pacing = None, {}, None
        try:
            marker = HOSTILE_ATTACKS[attack].get("ready")
            if marker:
                self.c.exec(SENDER, hostile_ready_script(log, marker), timeout=HOSTILE_SETUP_S)
            time.sleep(seconds)
            jobs = self.latency_flows(latency_ops, seconds, "beside the hostile tenant")
            time.sleep(seconds / 2)
            pacing = last_json(self.c.exec(SENDER, "lite-admin stats --json").out)
            beside = self.flows(jobs)
        except CommandFailed as e:
            failed = e
        res = tenant.wait()
        if failed:
            raise failed
        return alone, beside, {**hostile_report(res.out), "rc": res.rc}, pacing


def prepare(c, runner, args, latency_ops, results):
    """The RPC flow's server, Target99 (measured in none mode unless given) and the
    link rate override on the joined cluster; returns Target99 in us."""
    if "rpc" in latency_ops:
        print(f"RPC server: lite-bench serve --id {RPC_ID} on node {HOLDER}", flush=True)
        runner.serve_rpc()
    target_us = args.target_us
    if target_us is None:
        # Twice: the first phase after boot is slower (one run: p99 49 ms against
        # 16-30 ms later), and SW-Pri's window holds the last 1024 samples, the second's.
        print("[0] latency flows alone, twice, to set Target99 from the second ...", flush=True)
        c.exec(SENDER, "lite-admin mode none")
        for _ in range(2):
            probe = runner.flows(runner.latency_flows(latency_ops, args.seconds))
        target_us = target99_us(probe, last_json(c.exec(SENDER, "lite-admin stats --json").out))
    c.exec(SENDER, f"lite-admin target --us {target_us}")
    if args.link_mbps:
        c.exec(SENDER, f"lite-admin weights --link-mbps {args.link_mbps}")
        results["config"]["link_mbps"] = args.link_mbps
    results["config"]["target99_us"] = target_us
    print(f"Target99 {target_us / 1000:.2f} ms", flush=True)
    return target_us


def run_hostile(args, modes, latency_ops, attacks, wire_rate, out_dir):
    """--hostile: a pass per attack and mode (attack by attack, each in every mode in
    turn, so that the modes compare passes close in time), the JSON written after
    each; a stop (SIGTERM) ends the passes, and what ran is reported."""
    name = "qos-hostile" if args.regime == "link" else f"qos-hostile-{args.regime}"
    c = Cluster(out_dir / f"{name}-cluster")

    def stop(signum, _):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    started = time.time()
    wires = {HOLDER: (wire_rate, vwire.DEFAULT_QUEUE)} if args.regime == "link" else {}
    target = TARGETS["p99_ratio"][1]
    results = {"config": {"kernel": args.kernel, "regime": args.regime,
                          "wire": {"node": HOLDER, "rate_bytes_s": wire_rate, "queue_bytes": vwire.DEFAULT_QUEUE}
                          if wires else None,
                          "seconds": args.seconds, "sender": SENDER, "holder": HOLDER, "modes": modes,
                          "latency_ops": latency_ops,
                          "latency_flows": {op: {k: v for k, v in LATENCY_OPS[op].items() if k != "label"}
                                            for op in latency_ops},
                          "rpc_server": {"node": HOLDER, "id": RPC_ID, "command": f"lite-bench serve --id {RPC_ID}"}
                          if "rpc" in latency_ops else None,
                          "tenant": {a: {"label": hostile_label(a, args.hostile_lmrs),
                                         "command": hostile_command(a, 3 * args.seconds, args.hostile_lmrs),
                                         "class": "bulk", "node": SENDER} for a in attacks},
                          "interval_ms": INTERVAL_MS},
               "target": {"p99_ratio": ["<=", target]},
               "rows": [], "flows": {}, "errors": []}
    json_path = out_dir / f"{name}.json"

    def save():
        results["duration_s"] = round(time.time() - started, 1)
        json_path.write_text(json.dumps(results, indent=1) + "\n")

    order = [(mode, a) for a in HOSTILE_ORDER if a in attacks for mode in modes]
    try:
        c.up(nodes=NODES, variant=args.kernel, mem=1536, wires=wires)
        c.join(range(NODES))
        results["config"]["accel"] = c.meta.get("accel")
        runner = Runner(c, timeout=int(10 * args.seconds) + 300)
        prepare(c, runner, args, latency_ops, results)
        for i, (mode, attack) in enumerate(order, 1):
            label = hostile_label(attack, args.hostile_lmrs)
            print(f"[{i}/{len(order)}] mode {mode}, attack {attack} ({label}): {len(latency_ops)} latency flow(s) "
                  f"alone {args.seconds:g} s, then the tenant for {3 * args.seconds:g} s with the latency flows in "
                  f"the middle ...", flush=True)
            try:
                alone, beside, report, pacing = runner.hostile(mode, attack, args.seconds, latency_ops,
                                                               args.hostile_lmrs)
            except CommandFailed as e:
                print(f"      FAILED: {str(e)[-1500:]}", flush=True)
                results["errors"].append({"step": f"{mode}, attack {attack}", "error": str(e)[-4000:]})
                save()
                continue
            s = summarize_hostile(alone, beside, target)
            if report.get("rc"):
                print(f"      the tenant exited {report['rc']}: {json.dumps(report)[-1500:]}", flush=True)
                results["errors"].append({"step": f"{mode}, attack {attack}",
                                          "error": f"the tenant exited {report['rc']}: {json.dumps(report)[-4000:]}"})
            results["flows"].setdefault(attack, {})[mode] = {"latency_alone": alone, "latency": beside,
                                                              "tenant": report, "pacing": pacing}
            results["rows"].append({"attack": attack, "label": label, "mode": mode, "summary": s,
                                    "tenant": tenant_note(report)})
            lat = ", ".join(f"{op} {f['alone']['p99_ns'] / 1e6:.2f} / {f['beside_hostile']['p99_ns'] / 1e6:.2f} ms"
                            for op, f in s["latency"].items())
            print(f"      latency p99 alone / beside the tenant: {lat}; worst ratio {s['p99_ratio']:.2f}; "
                  f"tenant: {tenant_note(report)}{pacing_note(pacing)}", flush=True)
            save()
    except CommandFailed as e:
        print(f"\nqos-bench: {e}", flush=True)
        results["errors"].append({"step": "cluster", "error": str(e)})
    except KeyboardInterrupt as e:
        print(f"\nqos-bench: stopped ({e}); reporting what ran", flush=True)
        results["errors"].append({"step": "stopped", "error": f"stopped: {e}"})
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        results["kernel_bug_reports"] = [f"node{n}: {line}" for n, line in c.splats()]
        c.down(quiet=True)
    # Rows in the attacks' order, each attack's modes in the order given.
    results["rows"].sort(key=lambda r: (attacks.index(r["attack"]), modes.index(r["mode"])))
    save()
    regime = (f"holder behind a {wire_rate / 2**20:g} MiB/s wire" if wires else "plain segment (CPU-bound)")
    print(f"\n== hostile bulk-class tenant, {args.regime} regime ({regime}): latency class "
          f"({', '.join(LATENCY_OPS[op]['label'] for op in latency_ops)}, at once): p99 beside the tenant / "
          f"alone (p99 alone/beside) ==")
    print(hostile_table(results["rows"]))
    sw = [r for r in results["rows"] if r["mode"] == "sw-pri"]
    if sw:
        missed = [r["attack"] for r in sw if not r["summary"]["met"]]
        print(f"sw-pri: p99 ratio <= {target:g} against {len(sw) - len(missed)} of {len(sw)} attacks"
              + (f"; missed: {', '.join(missed)}" if missed else ""))
    rc = 0
    if results["errors"] or len(results["rows"]) < len(order):
        rc = 1
    return finish(results, args, rc, json_path)


def finish(results, args, rc, json_path, plots=()):
    """The end of a run: kernel bug reports fail it; the JSON (--json), where the
    results and plots are, how long it took; returns the exit code."""
    if results["kernel_bug_reports"]:
        print(f"guest kernels: {len(results['kernel_bug_reports'])} bug report lines!")
        rc = 1
    if args.json:
        print(json.dumps(results))
    print(f"results: {json_path}" + (f"\nplots:   {', '.join(map(str, plots))}" if plots else "")
          + f"\n({results['duration_s']:.0f} s)")
    return rc

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="release", choices=["release", "debug"])
    ap.add_argument("--regime", default="link", choices=REGIMES,
                    help="link: the holder behind a rate-limited wire (default); cpu: the plain segment")
    ap.add_argument("--link-rate", default=DEFAULT_LINK_RATE, metavar="RATE",
                    help=f"the link regime's wire, bytes/s (K, M: powers of 1024; default {DEFAULT_LINK_RATE})")
    ap.add_argument("--runs", type=int, default=1, help="runs of every mode, order rotated (default 1)")
    ap.add_argument("--seconds", type=float, default=8, help="length of each phase (default 8)")
    ap.add_argument("--target-us", type=int, help="Target99 (default: 1.5 x the largest p99 of the latency flows alone)")
    ap.add_argument("--out", default=str(OUT_DIR),
                    help="where qos-REGIME.json and the plots go (default build/bench)")
    ap.add_argument("--link-mbps", type=int, help="link rate SW-Pri assumes (default: the one it finds)")
    ap.add_argument("--modes", default=None,
                    help=f"comma-separated modes to run (default {','.join(MODES)}; ratios need none; "
                         f"with --hostile {','.join(HOSTILE_MODES)})")
    ap.add_argument("--latency-ops", default=",".join(LATENCY_OPS),
                    help="comma-separated latency flows, run at once: write (16 B LT_write), rpc (LT_RPC 16 B in, "
                         f"64 B out), read (64 B LT_read) (default {','.join(LATENCY_OPS)})")
    ap.add_argument("--bulk-ops", default=",".join(BULK_OPS),
                    help="comma-separated bulk operations, a pass of every mode each: write (1 MiB LT_write), "
                         f"read (1 MiB LT_read) (default {','.join(BULK_OPS)})")
    ap.add_argument("--frontier", default=None,
                    help="comma-separated MB/s to hold sw-pri's SafeUtil at after the modes "
                         f"(default in the cpu regime {','.join(map(str, FRONTIER_MB_S))}; in the link regime none)")
    ap.add_argument("--frontier-chunks", default=",".join(map(str, FRONTIER_CHUNK_KIB)),
                    help="comma-separated KiB of paced chunks, each with every --frontier rate "
                         f"(default {','.join(map(str, FRONTIER_CHUNK_KIB))}; 1 to 32)")
    ap.add_argument("--json", action="store_true", help="also print qos.json to stdout")
    ap.add_argument("--hostile", action="store_true",
                    help="instead of the bulk passes and the frontier: the latency flows alone and beside a hostile "
                         "bulk-class tenant, per attack and mode (qos-hostile.json)")
    ap.add_argument("--attacks", default=",".join(HOSTILE_ATTACKS),
                    help="with --hostile, comma-separated attacks: a (8 B LT_write flood, 16 threads), b (1 MiB "
                         "LT_reads), c (failing calls), d (LMRs held), e (32 forked processes) "
                         f"(default {','.join(HOSTILE_ATTACKS)})")
    ap.add_argument("--hostile-lmrs", type=int, default=HOSTILE_LMRS,
                    help=f"LMRs the tenant of attack d holds (default {HOSTILE_LMRS})")
    args = ap.parse_args()
    if args.modes is None:
        args.modes = ",".join(HOSTILE_MODES if args.hostile else MODES)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: choose from {', '.join(MODES)}")
    try:
        latency_ops = parse_ops(args.latency_ops, LATENCY_OPS, "--latency-ops")
        bulk_ops = parse_ops(args.bulk_ops, BULK_OPS, "--bulk-ops")
    except ValueError as e:
        ap.error(str(e))
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
    try:
        attacks = parse_ops(args.attacks, HOSTILE_ATTACKS, "--attacks")
    except ValueError as e:
        ap.error(str(e))
    if args.hostile_lmrs < 1:
        ap.error("--hostile-lmrs: at least 1")
    guest_bin = REPO / "build" / args.kernel / "guest" / "bin"
    if not (guest_bin / "lite-bench").exists():
        print(f"qos-bench: lite-bench missing in {guest_bin}: run `make guest KERNEL={args.kernel}`", file=sys.stderr)
        return 2
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.hostile:
        return run_hostile(args, modes, latency_ops, attacks, wire_rate, out_dir)
    c = Cluster(out_dir / f"qos-{args.regime}-cluster")
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    started = time.time()
    wires = {HOLDER: (wire_rate, vwire.DEFAULT_QUEUE)} if args.regime == "link" else {}
    results = {"config": {"kernel": args.kernel, "regime": args.regime, "runs": args.runs,
                          "wire": {"node": HOLDER, "rate_bytes_s": wire_rate, "queue_bytes": vwire.DEFAULT_QUEUE}
                          if wires else None,
                          "seconds": args.seconds, "sender": SENDER, "holder": HOLDER,
                          "latency_ops": latency_ops,
                          "latency_flows": {op: {k: v for k, v in LATENCY_OPS[op].items() if k != "label"}
                                            for op in latency_ops},
                          "rpc_server": {"node": HOLDER, "id": RPC_ID, "command": f"lite-bench serve --id {RPC_ID}"}
                          if "rpc" in latency_ops else None,
                          "bulk_ops": bulk_ops, "bulk_size": BULK_SIZE, "bulk_flows": BULK_FLOWS,
                          "interval_ms": INTERVAL_MS},
               "modes": {}, "flows": {}, "frontier": {}, "errors": []}
    try:
        c.up(nodes=NODES, variant=args.kernel, mem=1536, wires=wires)
        c.join(range(NODES))
        results["config"]["accel"] = c.meta.get("accel")
        runner = Runner(c, timeout=int(10 * args.seconds) + 300)
        target_us = prepare(c, runner, args, latency_ops, results)

        def run_pass(name, mode, bulk_op):
            """One pass of the protocol; its summary, or None when it failed."""
            try:
                alone, both, bulk, stats = runner.mode(mode, args.seconds, bulk_op, latency_ops)
            except CommandFailed as e:
                print(f"      FAILED: {str(e)[-1500:]}", flush=True)
                results["errors"].append({"step": f"{name}, bulk {bulk_op}", "error": str(e)[-4000:]})
                return None
            results["flows"].setdefault(name, {})[bulk_op] = {"latency_alone": alone, "latency": both,
                                                              "bulk": bulk, "pacing": stats["beside"],
                                                              "kernel_alone": stats["alone"]}
            s = summarize_mode(alone, both, bulk, stats)
            print(f"      {pass_line(s)}{pacing_note(stats['beside'])}", flush=True)
            return s

        per_run = {mode: {b: [] for b in bulk_ops} for mode in modes}
        # Modes rotate each run, and so do the bulk operations within a mode.
        order = [(run, modes[(i + run) % len(modes)], bulk_ops[(j + run) % len(bulk_ops)])
                 for run in range(args.runs) for i in range(len(modes)) for j in range(len(bulk_ops))]
        for i, (run, mode, bulk_op) in enumerate(order, 1):
            print(f"[{i}/{len(order)}] run {run + 1}, mode {mode}, bulk {BULK_OPS[bulk_op]}: "
                  f"{len(latency_ops)} latency flow(s) alone {args.seconds:g} s, then {BULK_FLOWS} bulk flows for "
                  f"{3 * args.seconds:g} s with the latency flows in the middle ...", flush=True)
            s = run_pass(mode, mode, bulk_op)
            if s is not None:
                per_run[mode][bulk_op].append(s)
        results["modes"] = {mode: {b: median_summary(runs[b]) for b in bulk_ops if runs[b]}
                            for mode, runs in per_run.items() if any(runs.values())}
        if frontier:
            c.exec(SENDER, f"lite-admin target --us {UNREACHABLE_TARGET_US}")
        for i, (kib, mb_s) in enumerate(frontier, 1):
            point = f"{mb_s} MB/s, {kib} KiB"
            c.exec(SENDER, f"lite-admin weights --link-mbps {mb_s} --chunk-kib {kib}")
            for bulk_op in bulk_ops:
                print(f"[frontier {i}/{len(frontier)}] sw-pri with SafeUtil held at {mb_s} MB/s, {kib} KiB chunks, "
                      f"bulk {BULK_OPS[bulk_op]} ...", flush=True)
                s = run_pass(f"sw-pri at {point}", "sw-pri", bulk_op)
                if s is not None:
                    results["frontier"].setdefault(point, {})[bulk_op] = s
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
    for bulk_op in bulk_ops:
        add_ratios(per_bulk(results["modes"], bulk_op))
        add_ratios(per_bulk(results["frontier"], bulk_op), per_bulk(results["modes"], bulk_op))
    json_path = out_dir / f"qos-{args.regime}.json"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    regime = (f"holder behind a {wire_rate / 2**20:g} MiB/s wire" if wires else "plain segment (CPU-bound)")
    when = f"{regime}, {args.kernel} kernel, {time.strftime('%Y-%m-%d %H:%M')}"
    plots = write_plots(out_dir, args.regime, results, bulk_ops, when)
    rc = 0
    flows_text = ", ".join(LATENCY_OPS[op]["label"] for op in latency_ops)
    if results["modes"]:
        runs = f", median of {args.runs} runs" if args.runs > 1 else ""
        print(f"\n== {args.regime} regime ({regime}{runs}): latency class ({flows_text}, at once) beside "
              f"{BULK_FLOWS} bulk flows ({' | '.join(BULK_OPS[b] for b in bulk_ops)}) ==")
        print(table(results["modes"]))
        phases = phase_table(results["modes"])
        if phases:
            print("\nwhere the latency class's time went, alone -> beside bulk (means, ms; `before post`, "
                  "`in the network` and `wakeup` measured in the sender's kernel):")
            print(phases)
        for bulk_op, sw in results["modes"].get("sw-pri", {}).items():
            print(f"sw-pri targets, bulk {bulk_op}: " + ", ".join(
                f"{k} {TARGETS[k][0]} {TARGETS[k][1]}: {'met' if v else 'missed' if v is not None else 'no data'}"
                for k, v in sw["met"].items()) + " (p99_ratio: the largest of the latency flows')")
    if results["frontier"]:
        print("\n== frontier: sw-pri with SafeUtil held at a rate and chunks of a size (no AIMD) ==")
        print(table(results["frontier"], first="SafeUtil, chunk"))
        met = [f"{p} (bulk {b})" for p, passes in results["frontier"].items() for b, s in passes.items()
               if all(s["met"].values())]
        print(f"settings meeting both targets: {'; '.join(met) if met else 'none'}")
    passes = sum(len(v) for v in results["modes"].values())
    frontier_passes = sum(len(v) for v in results["frontier"].values())
    if (results["errors"] or passes < len(modes) * len(bulk_ops)
            or frontier_passes < len(frontier) * len(bulk_ops)):
        rc = 1
    return finish(results, args, rc, json_path, plots)


if __name__ == "__main__":
    sys.exit(main())
