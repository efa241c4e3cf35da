"""What LITE's own code costs per operation on this host (`make bench-host`), and the
share of one core that makes at line rate.

Runs the criterion benches of the module's pure paths (`cargo bench -p
lite-kernel-logic --bench per_op`: lite/host/benches/per_op.rs, which drives the
module's own files through lite/host/per_op.rs), reads each one's median and 95 %
confidence interval (ns per operation) from criterion's estimates
(target/criterion/.../new/estimates.json), and turns them into the share of one
core that the pacer needs:

  at 25 and 100 Gbit/s   one paced chunk admitted per chunk of the link, with the
                         chunk SW-Pri uses at that rate (link_chunk in
                         lite/qos/pacer/chunk.rs, whose constants are read here)
  at 10 M small ops/s    every operation a paced chunk of its own (a bulk-class
                         flood of small writes), and, for latency-class operations
                         (never paced), the pure path each one crosses: handle
                         lookup, layout, classification, latency sample, and its
                         share of an AIMD step

beside Justitia's (NSDI'22) two dedicated cores per machine. The kernel's own
costs around these paths (the system call, locks, wakeups, hrtimers, pinning, the
NIC) are not in them: docs/measurements/host-cost.md says what that leaves out.

Prints a table; --json prints the figures as JSON instead. Criterion's own output
goes to stderr.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CHUNK_RS = REPO / "lite" / "qos" / "pacer" / "chunk.rs"
PACKAGE = "lite-kernel-logic"
BENCH = "per_op"

# (criterion id, what one operation is), in the order shown.
BENCHES = [
    ("handle_lookup/lmrs/1", "handle lookup, 1 LMR mapped"),
    ("handle_lookup/lmrs/1000", "handle lookup, 1 000 LMRs"),
    ("handle_lookup/lmrs/100000", "handle lookup, 100 000 LMRs"),
    ("layout/8B_of_4KiB", "layout: 8 B of a 4 KiB LMR (1 extent)"),
    ("layout/4KiB_of_1GiB", "layout: 4 KiB of a 1 GiB LMR (256 extents)"),
    ("layout/1MiB_of_1GiB", "layout: 1 MiB of a 1 GiB LMR"),
    ("layout/atomic_of_1GiB", "layout: an atomic's word in a 1 GiB LMR"),
    ("rpc_ring/claim", "RPC ring: claim room, header, immediate"),
    ("rpc_ring/release", "RPC ring: release (check, consume, head)"),
    ("rpc_ring/release_out_of_order", "RPC ring: release, 64 calls, last first"),
    ("pacer_admit/flows/1", "pacer: one chunk admitted, 1 flow"),
    ("pacer_admit/flows/100", "pacer: one chunk admitted, 100 flows"),
    ("pacer_admit/flows/1000", "pacer: one chunk admitted, 1 000 flows"),
    ("wf2q_select/flows/1", "WF2Q+ selection, 1 flow"),
    ("wf2q_select/flows/100", "WF2Q+ selection, 100 flows"),
    ("wf2q_select/flows/1000", "WF2Q+ selection, 1 000 flows"),
    ("token_bucket/take", "token bucket: take a chunk"),
    ("latency_sample", "latency sample (windows, p99 alone)"),
    ("aimd_step/samples/128", "AIMD step, p99 of 128 samples"),
    ("aimd_step/samples/1024", "AIMD step, p99 of 1 024 samples"),
    ("classify/no_rules", "class and QP, no rules"),
    ("classify/64_rules_16_ancestors", "class and QP, 64 rules, 16 ancestors"),
]
FLOWS = [1, 100, 1000]
LINKS_GBIT = [25, 100]
SMALL_OPS_PER_S = 10_000_000
# An AIMD step takes the p99 of this many latency samples (lite/qos/mod.rs STEP_SAMPLES).
STEP_SAMPLES = 128
# What a latency-class operation's pure path is made of (ids above, with weights).
LATENCY_OP_PATH = [("handle_lookup/lmrs/1000", 1), ("layout/8B_of_4KiB", 1), ("classify/no_rules", 1),
                   ("latency_sample", 1), ("aimd_step/samples/128", 1 / STEP_SAMPLES)]
# Justitia's CPU (NSDI'22 §6.3.2): two dedicated cores per machine, one busy-polling
# to generate and hand out tokens, one for the reference latency flow; its shapers
# spend up to half a core more per bandwidth-sensitive application (appendix D).
JUSTITIA_CORES = 2.0
JUSTITIA_SHAPER_CORES = 0.5
NS_PER_S = 1e9


class Error(Exception):
    """A problem with the run or its results, reported without a traceback."""


def chunk_constants(source):
    """PACKET_BYTES, BUDGET_PACKETS, MIN_CHUNK_NS and CHUNK_MAX as chunk.rs defines them
    (`const NAME: u64 = 32 << 10;`)."""
    found = {}
    for name, value in re.findall(r"const (\w+): u64 = ([\d_ ]+(?:<<[\d_ ]+)?);", source):
        base, _, shift = value.replace("_", "").partition("<<")
        found[name] = int(base) << int(shift or 0)
    wanted = ["PACKET_BYTES", "BUDGET_PACKETS", "MIN_CHUNK_NS", "CHUNK_MAX"]
    missing = [name for name in wanted if name not in found]
    if missing:
        raise Error(f"{CHUNK_RS}: no {', '.join(missing)}")
    return {name: found[name] for name in wanted}


def link_chunk(rate_bytes, consts):
    """The paced chunk on a link of `rate_bytes` bytes/s, as pacer/chunk.rs's link_chunk:
    the budget's packets, or what MIN_CHUNK_NS carries if more, at most CHUNK_MAX, in
    whole packets."""
    packet = consts["PACKET_BYTES"]
    by_time = rate_bytes * consts["MIN_CHUNK_NS"] // 1_000_000_000
    chunk = min(max(consts["BUDGET_PACKETS"] * packet, by_time), consts["CHUNK_MAX"])
    return chunk // packet * packet


def gbit_bytes(gbit):
    """Bytes/s of a link of `gbit` Gbit/s."""
    return gbit * 1_000_000_000 // 8


def core_share(ns_per_op, ops_per_s):
    """The share of one core (1.0: all of it) that `ops_per_s` operations of `ns_per_op`
    each keep busy."""
    return ns_per_op * ops_per_s / NS_PER_S


def path_ns(medians, parts):
    """The ns of a path made of `parts` ((id, weight), ...) from the medians by id."""
    return sum(medians[bench_id] * weight for bench_id, weight in parts)


def shares(medians, consts):
    """The rows of the core-share table: a load, its operations per second, and the share
    of a core per flow count (or for the latency-class path)."""
    rows = []
    for gbit in LINKS_GBIT:
        chunk = link_chunk(gbit_bytes(gbit), consts)
        per_s = gbit_bytes(gbit) / chunk
        rows.append({"load": f"{gbit} Gbit/s of paced bulk", "gbit": gbit, "chunk_bytes": chunk,
                     "ops_per_s": per_s, "budget_ns": NS_PER_S / per_s,
                     "share": {str(n): core_share(medians[f"pacer_admit/flows/{n}"], per_s) for n in FLOWS}})
    rows.append({"load": "10 M small paced ops/s", "ops_per_s": SMALL_OPS_PER_S,
                 "budget_ns": NS_PER_S / SMALL_OPS_PER_S,
                 "share": {str(n): core_share(medians[f"pacer_admit/flows/{n}"], SMALL_OPS_PER_S) for n in FLOWS}})
    latency_ns = path_ns(medians, LATENCY_OP_PATH)
    rows.append({"load": "10 M latency-class ops/s (pure path)", "ops_per_s": SMALL_OPS_PER_S,
                 "budget_ns": NS_PER_S / SMALL_OPS_PER_S, "path_ns": latency_ns,
                 "share": {"path": core_share(latency_ns, SMALL_OPS_PER_S)}})
    return rows


def criterion_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "criterion"


def read_estimates(root, since=None):
    """{id: (median, ci low, ci high)} in ns of every bench in BENCHES under criterion's
    output `root`; with `since` (a time.time()), only results written after it count."""
    found = {}
    for info in root.glob("**/new/benchmark.json"):
        bench_id = json.loads(info.read_text()).get("full_id")
        estimates = info.with_name("estimates.json")
        if bench_id is None or not estimates.exists():
            continue
        if since is not None and estimates.stat().st_mtime < since:
            continue
        median = json.loads(estimates.read_text())["median"]
        ci = median["confidence_interval"]
        found[bench_id] = (median["point_estimate"], ci["lower_bound"], ci["upper_bound"])
    missing = [bench_id for bench_id, _ in BENCHES if bench_id not in found]
    if missing:
        when = " by this run" if since is not None else ""
        raise Error(f"no criterion results{when} under {root} for: {', '.join(missing)}")
    return {bench_id: found[bench_id] for bench_id, _ in BENCHES}


def run_benches(warm_up_s, measurement_s):
    cmd = ["cargo", "bench", "-p", PACKAGE, "--bench", BENCH, "--",
           "--warm-up-time", f"{warm_up_s:g}", "--measurement-time", f"{measurement_s:g}"]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, cwd=REPO, stdout=sys.stderr).returncode != 0:
        raise Error("cargo bench failed")


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def percent(share):
    return f"{share * 100:.2g} %" if share < 0.1 else f"{share * 100:.0f} %"


def flows_label(n):
    return "1 flow" if n == 1 else f"{n:,} flows".replace(",", " ")


def table(results):
    lines = [f"LITE's own code per operation on this host ({results['cpu'] or 'unknown CPU'}):",
             "criterion medians and their 95 % confidence intervals", ""]
    width = max(len(label) for _, label in BENCHES)
    lines.append(f"{'path':<{width}}  {'ns/op':>8}  95 % CI")
    for bench in results["benches"]:
        lines.append(f"{bench['label']:<{width}}  {bench['median_ns']:>8.1f}  "
                     f"{bench['ci_low_ns']:.1f}-{bench['ci_high_ns']:.1f}")
    lines += ["", "Share of one core (pacer: one admission per chunk, or per paced small operation)", ""]
    lines.append(f"{'load':<38} {'per s':>11} {'ns each':>8}  " + "  ".join(f"{flows_label(n):>10}" for n in FLOWS))
    for row in results["shares"]:
        load = row["load"] + (f", {row['chunk_bytes'] // 1024} KiB chunks" if "chunk_bytes" in row else "")
        head = f"{load:<38} {row['ops_per_s']:>11,.0f} {row['budget_ns']:>8.0f}  "
        if "path" in row["share"]:
            lines.append(head + f"{row['path_ns']:.0f} ns per op: {percent(row['share']['path'])} of a core")
        else:
            lines.append(head + "  ".join(f"{percent(row['share'][str(n)]):>10}" for n in FLOWS))
    lines += ["", "(ns each: a whole core's time per operation at that rate.)",
              f"Justitia (NSDI'22): {JUSTITIA_CORES:g} dedicated busy-polling cores per machine, and up to "
              f"{JUSTITIA_SHAPER_CORES:g} core per bandwidth-sensitive application."]
    return "\n".join(lines)


def results_of(estimates, consts):
    medians = {bench_id: median for bench_id, (median, _, _) in estimates.items()}
    labels = dict(BENCHES)
    return {
        "cpu": cpu_model(),
        "benches": [{"id": bench_id, "label": labels[bench_id], "median_ns": median,
                     "ci_low_ns": low, "ci_high_ns": high}
                    for bench_id, (median, low, high) in estimates.items()],
        "chunk_constants": consts,
        "shares": shares(medians, consts),
        "justitia": {"dedicated_cores": JUSTITIA_CORES, "shaper_cores_per_app": JUSTITIA_SHAPER_CORES},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-run", action="store_true", help="only read the results of the last run")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    ap.add_argument("--warm-up-time", type=float, default=1, help="criterion's warm-up per bench, s (default 1)")
    ap.add_argument("--measurement-time", type=float, default=2,
                    help="criterion's measurement per bench, s (default 2)")
    args = ap.parse_args(argv)
    try:
        consts = chunk_constants(CHUNK_RS.read_text())
        since = None
        if not args.no_run:
            since = time.time()
            run_benches(args.warm_up_time, args.measurement_time)
        results = results_of(read_estimates(criterion_dir(), since), consts)
    except Error as e:
        print(f"host_bench: {e}", file=sys.stderr)
        return 1
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0
