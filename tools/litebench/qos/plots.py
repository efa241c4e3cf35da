"""The priority-class benchmark's plots (tools/qos_bench.py): per mode, a time plot of
each latency flow's p99 and each flow's bandwidth over a trailing window, and the
frontier plot; litebench.plots draws them."""

import math

from litebench import plots
from litebench.qos.flows import BULK_FLOWS, BULK_OPS, INTERVAL_MS, LATENCY_OPS, MODES, bandwidth
from litebench.qos.summary import TARGETS, per_bulk

# Colors of the flows in the time plots, and of the frontier plot's points.
LATENCY_COLORS = {"write": "#d62728", "rpc": "#9467bd", "read": "#ff7f0e"}
BULK_COLOR = "#1f77b4"
MODE_COLOR, FRONTIER_COLOR = "#1f77b4", "#ff7f0e"
# The time plots' bandwidths are over this trailing window: several 1 MiB operations.
BANDWIDTH_WINDOW_S = 2.0


def windowed_mb_s(flow, t0_ms, window_s=BANDWIDTH_WINDOW_S):
    """`flow`'s bandwidth over a trailing window, at the end of each of its intervals
    from the first full window on: [(seconds since t0_ms, MB/s)], each operation's
    bytes spread over the time it took (`bandwidth`). Counted whole by when they
    completed, a flow that takes the window's length for each 1 MiB operation read
    its rate or nothing, at random."""
    step_ms = flow.get("interval_ms", INTERVAL_MS)
    width = max(1, round(window_s * 1000 / step_ms))
    start = flow["started_unix_ms"]
    return [((start + end * step_ms - t0_ms) / 1000,
             bandwidth([flow], start + (end - width) * step_ms, start + end * step_ms))
            for end in range(width, math.ceil(flow["seconds"] * 1000 / step_ms) + 1)]


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
