"""The priority-class benchmark's figures (tools/qos_bench.py): a pass's summary from
its flows, the medians of several runs, the ratios against `none` and the targets,
where the latency class's time went, and the tables and progress lines."""

import copy
import statistics

from litebench.qos.flows import LATENCY_OPS, bandwidth, by_op

TARGETS = {"p99_ratio": ("<=", 1.5), "aggregate_ratio": (">=", 0.90)}


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
    each one-sided latency flow's time went in each; `wire_queue`, `holder_cpu`,
    `sender_cpu` and `host_cpu` are the holder's wire queue (cluster/wire_queue.py), its CPU,
    the sender's and this host's (runner.cpu_busy) beside bulk, where measured,
    and `sender_cpu_alone` the sender's with the latency flows alone.)"""
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
    pacing = ((stats or {}).get("beside") or {}).get("pacing")
    queue = (stats or {}).get("wire_queue")
    holder_cpu = (stats or {}).get("holder_cpu")
    sender_cpu = (stats or {}).get("sender_cpu")
    sender_alone = (stats or {}).get("sender_cpu_alone")
    host_cpu = (stats or {}).get("host_cpu")
    return {
        **({"pacing": pacing} if pacing and pacing.get("delivered_ratio") is not None else {}),
        **({"wire_queue": queue} if queue else {}),
        **({"holder_cpu": holder_cpu} if holder_cpu else {}),
        **({"sender_cpu": sender_cpu} if sender_cpu else {}),
        **({"sender_cpu_alone": sender_alone} if sender_alone else {}),
        **({"host_cpu": host_cpu} if host_cpu else {}),
        "phases": {op: p for op, p in phases.items() if None not in p.values()},
        "latency": latency,
        "p99_ratio": max(f["p99_ratio"] for f in latency.values()),
        "bulk_alone_mb_s": bulk_alone,
        "bulk_beside_latency_mb_s": bulk_beside,
        "latency_mb_s": latency_mb_s,
        "aggregate_beside_latency_mb_s": bulk_beside + latency_mb_s,
    }


def _median_tree(values):
    """The median of each number in like-shaped dicts (keys all of them have)."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _median_tree([v[k] for v in values]) for k in first if all(k in v for v in values)}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return statistics.median(values)
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


def aligned(rows):
    """`rows` (the first the head) as text in left-aligned columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


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
    return aligned(rows)


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
    return aligned(rows)


# The wire's directions as the tables name them.
WIRE_DIRECTIONS = {"to_node": "to the holder", "from_node": "from the holder"}


def holder_table(summary):
    """The holder beside bulk: its wire's queue as a packet arriving at random finds
    it (ms of the wire) and how busy its CPU was (and the sender's, and this host's);
    rows per mode and bulk operation; "" without either."""
    head = (["mode", "bulk"] + [f"queue {label}: {k}" for label in WIRE_DIRECTIONS.values() for k in ("mean", "p99")]
            + ["holder CPU busy", "of it softirq", "sender CPU busy", "sender CPU, latency alone", "host CPU busy"])
    rows = [head]
    for name, passes in summary.items():
        for bulk_op, s in passes.items():
            q, cpu, host = s.get("wire_queue") or {}, s.get("holder_cpu"), s.get("host_cpu")
            sender, sender_alone = s.get("sender_cpu"), s.get("sender_cpu_alone")
            if q or cpu:
                rows.append([name, f"1 MiB {bulk_op}"] + [
                    f"{q[d]['ms'][k]:.2f}" if d in q else "-" for d in WIRE_DIRECTIONS for k in ("mean", "p99")]
                    + ([f"{cpu['busy']:.0%}", f"{cpu['softirq']:.0%}"] if cpu else ["-", "-"])
                    + [f"{sender['busy']:.0%}" if sender else "-"]
                    + [f"{sender_alone['busy']:.0%}" if sender_alone else "-"]
                    + [f"{host['busy']:.0%}" if host else "-"])
    if len(rows) == 1:
        return ""
    return aligned(rows)


SENDER_RATES = (("ctxt_per_s", "context switches/s"), ("local_timer_per_s", "local timer irqs/s"),
                ("timer", "timer softirqs/s"), ("net_rx", "NET_RX softirqs/s"))


def _rate(cpu, key):
    """A rate of runner.cpu_busy's: its own key, or a softirq's by kind."""
    return cpu[key] if key in cpu else cpu.get("softirqs_per_s", {}).get(key, 0.0)


def sender_table(summary):
    """The sender with its latency flows alone and beside bulk, per mode and bulk
    operation: how busy its CPUs were and with what, its context switches, timer
    interrupts and softirqs a second, and SW-Pri's paced work requests and reference
    probes a second; "" without the counts (runner.PROC_SAMPLE)."""
    head = (["mode", "bulk", "phase", "CPUs busy", "user", "system", "softirq"] + [t for _, t in SENDER_RATES]
            + ["paced WRs/s", "probes/s"])
    rows = [head]
    for name, passes in summary.items():
        for bulk_op, s in passes.items():
            for phase, key in (("latency alone", "sender_cpu_alone"), ("beside bulk", "sender_cpu")):
                cpu = s.get(key) or {}
                if "ctxt_per_s" not in cpu:
                    continue
                pacing = (s.get("pacing") or {}) if key == "sender_cpu" else {}
                rows.append([name, f"1 MiB {bulk_op}", phase, f"{cpu['busy']:.0%} of {cpu['cpus']:g}"]
                            + [f"{cpu[k]:.0%}" for k in ("user", "system", "softirq")]
                            + [f"{_rate(cpu, k):.0f}" for k, _ in SENDER_RATES]
                            + [f"{pacing[k]:.0f}" if k in pacing else "-" for k in ("paced_wrs_per_s", "probes_per_s")])
    return aligned(rows) if len(rows) > 1 else ""


def sender_cost(summary):
    """What pacing adds on the sender, per paced work request, for each bulk operation
    both modes measured: sw-pri beside bulk, less its latency flows alone (which beside
    bulk, paced, run about as fast as alone) and less none beside bulk (the bulk flows
    unpaced; its latency flows, stuck behind the wire's queue, do almost nothing). The
    guest's idle work is in both subtrahends, so this slightly undercounts.
    {bulk_op: {"paced_wrs_per_s", "cpu_us" (CPU time, all the sender's CPUs), and the
    keys of SENDER_RATES per work request}}."""
    out = {}
    for bulk_op, sw in (summary.get("sw-pri") or {}).items():
        none = (summary.get("none") or {}).get(bulk_op) or {}
        beside, alone, unpaced = sw.get("sender_cpu") or {}, sw.get("sender_cpu_alone") or {}, none.get("sender_cpu") or {}
        wrs = (sw.get("pacing") or {}).get("paced_wrs_per_s")
        if not wrs or not all("ctxt_per_s" in c for c in (beside, alone, unpaced)):
            continue
        busy = [c["busy"] * c["cpus"] for c in (beside, alone, unpaced)]
        out[bulk_op] = {"paced_wrs_per_s": wrs, "cpu_us": (busy[0] - busy[1] - busy[2]) * 1e6 / wrs,
                        **{k: (_rate(beside, k) - _rate(alone, k) - _rate(unpaced, k)) / wrs for k, _ in SENDER_RATES}}
    return out


def holder_note(queue, cpu, host=None, sender=None, sender_alone=None):
    """The holder's wire queue and CPU (and the sender's CPU, and this host's) beside
    bulk, and the sender's CPU with the latency flows alone, in a line of progress
    ("" without)."""
    parts = [f"{WIRE_DIRECTIONS[d]} {q['ms']['mean']:.2f} ms mean, {q['ms']['p99']:.2f} p99"
             for d, q in (queue or {}).items() if d in WIRE_DIRECTIONS]
    note = f"; wire queue {', '.join(parts)}" if parts else ""
    if cpu:
        note += f"; holder CPU {cpu['busy']:.0%} busy ({cpu['softirq']:.0%} softirq)"
    if sender:
        note += f"; sender CPU {sender['busy']:.0%} busy ({sender['softirq']:.0%} softirq)"
    if sender_alone:
        note += f" ({sender_alone['busy']:.0%} with the latency flows alone)"
    if host:
        note += f"; host {host['busy']:.0%} busy"
    return note


def pass_line(s):
    """One pass's figures in a line of progress."""
    lat = ", ".join(f"{op} {f['alone']['p99_ns'] / 1e6:.2f} / {f['beside_bulk']['p99_ns'] / 1e6:.2f} ms"
                    for op, f in s["latency"].items())
    cpu = holder_note(s.get("wire_queue"), s.get("holder_cpu"), s.get("host_cpu"), s.get("sender_cpu"),
                      s.get("sender_cpu_alone"))
    return (f"latency p99 alone / beside bulk: {lat}; bulk {s['bulk_alone_mb_s']:.2f} MB/s alone, "
            f"{s['bulk_beside_latency_mb_s']:.2f} MB/s beside latency{cpu}")


def pacing_note(stats):
    """SW-Pri's state from `lite-admin stats --json`, when it was limiting bulk."""
    if not stats or stats.get("mode") != "sw-pri" or stats.get("safe_util") is None:
        return ""
    found = stats.get("found_rate")
    p = stats.get("pacing") or {}
    paced = (f"; paced {p['paced_bytes_per_s'] / 1e6:.2f} of {p['offered_bytes_per_s'] / 1e6:.2f} MB/s offered "
             f"({p['delivered_ratio']:.0%}), per chunk: tokens {p['token_wait_ns'] / 1e6:.1f} ms, "
             f"place {p['place_wait_ns'] / 1e6:.1f} ms, held {p['place_hold_ns'] / 1e6:.1f} ms, "
             f"{p['places_in_use']:.1f} places in use") if p.get("delivered_ratio") is not None else ""
    return (f"; SafeUtil {stats['safe_util'] / 1e6:.2f} of {stats['link_rate'] / 1e6:.2f} MB/s "
            f"(found {found / 1e6 if found else 0:.2f}), {stats.get('chunk_bytes', 0) / 1024:g} KiB chunks, "
            f"AIMD {stats['decreases']} decreases / {stats['increases']} increases since load"
            f"{target_note(stats)}{paced}")


def target_note(stats):
    """The Target99 AIMD steered to, and the p99 alone a relative one comes from."""
    if stats.get("target99_ns") is None:
        return ""
    alone = stats.get("alone_p99_ns")
    return (f", Target99 {stats['target99_ns'] / 1e6:.2f} ms"
            f"{f' (p99 alone {alone / 1e6:.2f} ms)' if alone else ''}")
