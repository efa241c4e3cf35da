"""The priority-class benchmark's hostile tenant (tools/qos_bench.py --hostile): its
attacks as guest commands and scripts, what it reports about itself, the latency
flows' summary beside it, the table of a row per attack and mode, and the medians of
several runs."""

import shlex

from litebench.bench.output import last_json
from litebench.qos.flows import BULK_SIZE, HOLDER, INTERVAL_MS, in_class
from litebench.qos.summary import (TARGETS, WIRE_DIRECTIONS, aligned, holder_note, latency_beside, latency_label,
                                     median_summary)

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
# on the plain segment, see docs/measurements/priority-classes.md).
HOSTILE_SETUP_S = 1800


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


def queue_note(queue, intervals=8):
    """The holder's wire queue while the latency flows ran beside the tenant, as the
    link regime's passes show it, and each direction's mean over its first
    `intervals` intervals."""
    timed = [(d, q) for d, q in queue.items() if d in WIRE_DIRECTIONS and q.get("timeline_ms")]
    firsts = [f"{WIRE_DIRECTIONS[d]} " + " ".join("-" if v is None else f"{v:g}" for v in q["timeline_ms"][:intervals])
              for d, q in timed]
    timeline = f" (ms per {timed[0][1]['interval_ms']} ms from the start: {', '.join(firsts)})" if timed else ""
    return holder_note(queue, None) + timeline


def summarize_hostile(alone, beside, target=TARGETS["p99_ratio"][1]):
    """The latency flows alone and beside the hostile tenant ({op: flow}, or one
    flow): each flow's p50/p99 and p99 ratio, the worst ratio and whether it meets
    `target`."""
    latency = latency_beside(alone, beside, "beside_hostile", "the hostile tenant")
    worst = max(latency, key=lambda op: latency[op]["p99_ratio"])
    return {"latency": latency, "p99_ratio": latency[worst]["p99_ratio"], "worst_flow": worst,
            "target": target, "met": latency[worst]["p99_ratio"] <= target}


def hostile_medians(rows):
    """A row per attack and mode from the `rows` of several runs (hostile_table's):
    each latency flow's figures the median of its runs (median_summary), the worst
    flow by those and whether it meets the target; the note says each run's worst
    ratio."""
    runs = {}
    for r in rows:
        runs.setdefault((r["attack"], r["mode"]), []).append(r)
    out = []
    for (attack, mode), of in runs.items():
        # median_summary's p99_ratio is already the worst of the flows' medians.
        s = median_summary([r["summary"] for r in of])
        s.update(worst_flow=max(s["latency"], key=lambda op: s["latency"][op]["p99_ratio"]),
                 met=s["p99_ratio"] <= s["target"])
        out.append({"attack": attack, "label": of[0]["label"], "mode": mode, "summary": s, "runs": len(of),
                    "tenant": ", ".join(f"{r['summary']['p99_ratio']:.2f}" for r in of)})
    return out


def hostile_table(rows, note="tenant"):
    """A row per attack and mode: each latency flow's p99 ratio and, in brackets, its
    p99 alone and beside the tenant; the worst ratio, the target and a note (headed
    `note`). `rows`: dicts with attack, label, mode, summary and tenant (the note:
    what the tenant did, or hostile_medians' worst ratio per run)."""
    ops = []
    for r in rows:
        ops += [op for op in r["summary"]["latency"] if op not in ops]
    target = rows[0]["summary"]["target"] if rows else TARGETS["p99_ratio"][1]
    head = ["attack", "mode"] + [latency_label(op) for op in ops] + ["worst", f"<= {target:g}", note]
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
    return aligned(out)
