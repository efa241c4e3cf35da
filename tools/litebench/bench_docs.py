"""The latest benchmark results in docs/benchmarks.md, generated from the JSON the
benchmarks write (tools/bench_docs.py).

Reads the JSON of `make bench` (tools/bench.py: build/bench/results.json),
`make bench-qos` (tools/qos_bench.py: build/bench/qos-link.json, qos-cpu.json,
qos-hostile.json) and `make bench-access` (tools/access_bench.py:
build/bench-access/results.json), or the files named, and rewrites the block
between `<!-- bench-results:begin -->` and `<!-- bench-results:end -->` of
docs/benchmarks.md with a table per benchmark. Of several files of one benchmark
(and regime, set of `--only` sections, and --quick or not), those of the latest
date are shown: a file's date is its `snapshot.date`, else its `config.started`,
else the day it was written.

The committed block comes from the dated snapshots in docs/measurements/:

    tools/bench_docs.py docs/measurements/*.json          # rewrite the block
    tools/bench_docs.py --check docs/measurements/*.json  # fail if it is stale

After a benchmark run, keep its JSON as a snapshot, then regenerate:

    tools/bench_docs.py --snapshot docs/measurements --command 'make bench'
    tools/bench_docs.py docs/measurements/*.json

Standard library only; the output depends on nothing but the files read.
"""

import argparse
import datetime
import json
import math
import os
import re
import sys
from pathlib import Path

from litebench.bench.report import CALL_PHASES, fmt_spread, read_median_rows, read_phase_rows

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- bench-results:begin -->"
END = "<!-- bench-results:end -->"
# Where the benchmarks write their JSON, relative to the repository.
OUTPUTS = ["build/bench/results.json", "build/bench/qos-link.json", "build/bench/qos-cpu.json",
           "build/bench/qos-hostile.json", "build/bench/qos-hostile-cpu.json", "build/bench-access/results.json"]
# Sections in the order they are shown.
KINDS = ["bench", "qos", "qos-hostile", "access"]
TITLES = {
    "bench": "`make bench`: LITE against native verbs",
    "qos": "Priority classes beside bulk traffic (`make bench-qos`), {regime} regime",
    "qos-hostile": "Priority classes against a hostile tenant (`qos_bench.py --hostile`), {regime} regime",
    "access": "Per-range keys against LITE's global rkey (`make bench-access`)",
}
# The command that writes each kind, when a file does not say.
COMMANDS = {"bench": "tools/bench.py", "qos": "tools/qos_bench.py --regime {regime}",
            "qos-hostile": "tools/qos_bench.py --hostile --regime {regime}", "access": "tools/access_bench.py"}
# The order of the latency flows in tables (others follow in the order met).
FLOWS = ["write", "rpc", "read"]


class Error(Exception):
    """A problem with the inputs or the document, reported without a traceback."""


# ---- reading ----

def kind_of(data):
    """Which benchmark wrote `data` (a decoded JSON object)."""
    if not isinstance(data, dict):
        raise Error("not a JSON object")
    if data.get("bench") == "access":
        return "access"
    if "comparisons" in data:
        return "bench"
    if "medians" in data or "target" in data and "modes" not in data:
        return "qos-hostile"
    if "modes" in data:
        return "qos"
    raise Error("not the JSON of tools/bench.py, tools/qos_bench.py or tools/access_bench.py")


def date_of(data, path):
    snapshot = data.get("snapshot") or {}
    if snapshot.get("date"):
        return str(snapshot["date"])[:10]
    started = (data.get("config") or {}).get("started")
    if started:
        return str(started)[:10]
    return datetime.date.fromtimestamp(path.stat().st_mtime).isoformat()


def regime_of(data):
    return (data.get("config") or {}).get("regime") or "link"


def natural(text):
    """A sort key that puts `set9` before `set10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


class Input:
    def __init__(self, path):
        self.path = Path(path)
        try:
            self.data = json.loads(self.path.read_text())
        except OSError as e:
            raise Error(f"{path}: {e.strerror or e}") from None
        except ValueError as e:
            raise Error(f"{path}: not JSON ({e})") from None
        try:
            self.kind = kind_of(self.data)
        except Error as e:
            raise Error(f"{path}: {e}") from None
        self.regime = regime_of(self.data) if self.kind.startswith("qos") else None
        self.date = date_of(self.data, self.path)
        self.snapshot = self.data.get("snapshot") or {}

    @property
    def group(self):
        # A run of some sections only (`--only`), a quick one (`--quick`, fewer
        # calls per point), one on another RDMA device (`--provider`) or with other
        # vCPUs per guest (`--smp`; runs before it had two) neither hides nor is
        # hidden by a whole run on rxe: each has its own latest date.
        config = self.data.get("config") or {}
        only = tuple(config.get("only") or ())
        return (KINDS.index(self.kind), self.regime != "link", self.regime or "", config.get("provider") or "rxe",
                only, bool(config.get("quick")), vcpus(config) if self.kind == "bench" else 0)


def latest(inputs):
    """Of each benchmark's (and regime's) files, those of its latest date, in the
    order shown."""
    groups = {}
    for i in inputs:
        groups.setdefault(i.group, []).append(i)
    out = []
    for key in sorted(groups):
        newest = max(i.date for i in groups[key])
        out += sorted((i for i in groups[key] if i.date == newest), key=lambda i: natural(i.path.name))
    return out


# ---- formatting ----

def fmt_size(n):
    if n is None:
        return ""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def sig3(v):
    """`v` with three significant digits, never in exponent form."""
    if v == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(v))))
    return f"{v:.{decimals}f}"


def fmt_ns(ns):
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= div:
            return f"{sig3(ns / div)} {unit}"
    return f"{sig3(ns)} ns"


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "ns":
        return fmt_ns(v)
    if unit == "MiB/s":
        return f"{v:.1f} MiB/s"
    if isinstance(v, int):
        return f"{v} {unit}"
    return f"{sig3(v)} {unit}"


def fmt_ratio(v):
    if v is None:
        return "-"
    if v < 10:
        return f"{v:.2f}"
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def fmt_share(v):
    """An aggregate or work-conserving ratio: targets sit at 0.90 and 0.95."""
    return "-" if v is None else f"{v:.3f}"


def table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def link_to(path, doc):
    """A Markdown link to `path` from the document, or its name in code outside the repository."""
    path = path.resolve()
    try:
        path.relative_to(REPO)
    except ValueError:
        return f"`{path.name}`"
    return f"[{path.name}]({Path(os.path.relpath(path, doc.resolve().parent)).as_posix()})"


# ---- the tables ----

def vcpus(config):
    """A `make bench` run's vCPUs per guest: 2 before `--smp` was recorded."""
    return config.get("smp") or 2


def bench_lines(data):
    config = data.get("config") or {}
    facts = [f"{config['kernel']} kernel" if config.get("kernel") else None,
             f"on {config['provider']}" if config.get("provider") not in (None, "rxe") else None,
             f"{config['nodes']} nodes" if config.get("nodes") else None,
             f"{vcpus(config)} vCPU{'s' if vcpus(config) > 1 else ''} per guest",
             "--quick" if config.get("quick") else None,
             f"--only {','.join(config['only'])}" if config.get("only") else None]
    if (config.get("runs") or 1) > 1:
        facts.append(f"medians of {config['runs']} runs")
    if data.get("targets_evaluated") is not None:
        facts.append(f"{data.get('targets_met')} of {data['targets_evaluated']} targets met")
    comparisons = data.get("comparisons", [])
    several = any(fmt_spread(r.get("ratios")) for r in comparisons)
    rows = []
    for r in comparisons:
        met = "" if r.get("kind") == "context" else {True: "yes", False: "**no**", None: "-"}[r.get("met")]
        rows.append([r["metric"], fmt_size(r.get("size")), fmt_value(r.get("lite"), r.get("unit")),
                     fmt_value(r.get("native"), r.get("unit")), fmt_ratio(r.get("ratio"))]
                    + ([fmt_spread(r.get("ratios")) or "-"] if several else [])
                    + [r.get("target") or "-", met])
    head = ["metric", "size", "LITE", "native", "ratio"] + (["runs"] if several else []) + ["target", "met"]
    text = table(head, rows)
    phases = data.get("rpc_call_phases") or {}
    if phases:
        user, kern = phases.get("user", {}), phases.get("kernel", {})
        rows = [[label, fmt_ns(user.get(k)), fmt_ns(kern.get(k))] for k, label in CALL_PHASES]
        text += ("\n\nLT_RPC 8 B, where each caller's call goes by the kernel's stamps (each phase: the median "
                 "over rounds of the round's mean per call):\n\n" + table(["phase", "user caller", "kernel caller"], rows))
    reads = data.get("read_phases") or {}
    if reads:
        head, rows = read_phase_rows(reads, lambda ns: "-" if ns is None else fmt_ns(ns))
        text += ("\n\nLT_read, where a read goes by the kernel's stamps (each phase: the median over rounds of "
                 "the round's mean per read), beside `ib_read_lat`'s mean and the native READ's own phases "
                 "(`lite-read-phases`, stamped in user space):\n\n" + table(head, rows))
    medians = data.get("read_medians") or {}
    if medians:
        head, rows = read_median_rows(medians, lambda ns: "-" if ns is None else fmt_ns(ns))
        text += ("\n\nLT_read, each phase's median over single reads (`lite-bench lat --per-read`; the median over "
                 "rounds of each round's median), beside the native READ's own medians and `ib_read_lat`'s:\n\n"
                 + table(head, rows))
    return facts, text


def flows_in(summaries):
    ops = []
    for s in summaries:
        for op in s.get("latency", {}):
            if op not in ops:
                ops.append(op)
    return sorted(ops, key=lambda op: (FLOWS.index(op) if op in FLOWS else len(FLOWS), ops.index(op)))


def met_cell(met):
    if not met:
        return "-"
    return ", ".join(f"{k.replace('_ratio', '')} {'met' if v else '**missed**' if v is not None else '-'}"
                     for k, v in met.items())


def qos_facts(data):
    config = data.get("config") or {}
    wire = config.get("wire") or {}
    facts = [f"{wire['rate_bytes_s'] / 2**20:g} MiB/s link" if wire.get("rate_bytes_s") else None,
             f"{config['segment']} segment" if config.get("segment") else None,
             f"{config['kernel']} kernel" if config.get("kernel") else None]
    if config.get("target99_ratio"):
        facts.append(f"Target99 {config['target99_ratio']:g} x alone")
    return facts


def qos_lines(data):
    config = data.get("config") or {}
    facts = qos_facts(data)
    if config.get("runs", 1) > 1:
        facts.append(f"median of {config['runs']} runs")
    passes = [(mode, bulk, s) for mode, by_bulk in (data.get("modes") or {}).items() for bulk, s in by_bulk.items()]
    ops = flows_in(s for _, _, s in passes)
    rows = []
    for mode, bulk, s in passes:
        alone, beside = s.get("bulk_alone_mb_s"), s.get("bulk_beside_latency_mb_s")
        bulk_mb = "-" if alone is None or beside is None else f"{alone:.2f}, {beside:.2f}"
        rows.append([mode, f"1 MiB {bulk}"] + [fmt_ratio(s.get("latency", {}).get(op, {}).get("p99_ratio"))
                                                for op in ops]
                    + [fmt_ratio(s.get("p99_ratio")), bulk_mb, fmt_share(s.get("aggregate_ratio")),
                       met_cell(s.get("met"))])
    head = (["mode", "bulk"] + [f"{op}: p99 ratio" for op in ops]
            + ["worst", "bulk MB/s alone, beside latency", "aggregate vs none", "targets (<= 1.5, >= 0.90)"])
    return facts, table(head, rows)


def hostile_lines(data):
    facts = qos_facts(data)
    medians = data.get("medians")
    rows_in = medians if medians else data.get("rows", [])
    ops = flows_in(r["summary"] for r in rows_in)
    target = ((data.get("target") or {}).get("p99_ratio") or ["<=", 1.5])[1]
    rows = []
    for r in rows_in:
        s = r["summary"]
        mode = r["mode"] if medians else f"{r['mode']} (run {r.get('run', '?')})"
        rows.append([f"{r['attack']}: {r.get('label', '')}", mode]
                    + [fmt_ratio(s.get("latency", {}).get(op, {}).get("p99_ratio")) for op in ops]
                    + [fmt_ratio(s.get("p99_ratio")), r.get("tenant") or "-" if medians else "-",
                       "met" if s.get("met") else "**missed**"])
    if medians:
        facts.append(f"medians of {max(r.get('runs', 1) for r in medians)} runs")
    head = (["attack", "mode"] + [f"{op}: p99 ratio" for op in ops]
            + ["worst", "worst flow per run" if medians else "-", f"<= {target:g}"])
    return facts, table(head, rows)


def access_value(metric, v):
    if metric.endswith("MiB/s"):
        return f"{v:.1f}"
    if metric.endswith(" s"):
        return f"{v} s" if isinstance(v, int) else f"{sig3(v)} s"
    return fmt_ns(v)


def access_lines(data):
    facts = [f"{data['kernel']} kernel" if data.get("kernel") else None,
             f"{data['rounds']} round{'s' if data['rounds'] != 1 else ''}" if data.get("rounds") else None,
             "--quick" if data.get("quick") else None]
    rows = []
    for r in data.get("rows", []):
        cells = []
        for mode in ("global", "chunks"):
            m = r.get(mode) or {}
            cell = "-" if m.get("median") is None else access_value(r["metric"], m["median"])
            if m.get("min") is not None and m.get("max") is not None:
                cell += f" ({access_value(r['metric'], m['min'])} - {access_value(r['metric'], m['max'])})"
            cells.append(cell)
        rows.append([r["metric"]] + cells + [fmt_ratio(r.get("ratio"))])
    return facts, table(["", "global", "chunks", "chunks/global"], rows)


LINES = {"bench": bench_lines, "qos": qos_lines, "qos-hostile": hostile_lines, "access": access_lines}


def duration(data):
    seconds = data.get("duration_s", data.get("seconds"))
    return None if seconds is None else f"{seconds:g} s"


def render(inputs, doc=DOC):
    """The block's text (without the markers) for `inputs` (paths)."""
    shown = latest([Input(p) for p in inputs])
    out = ["*Generated by `tools/bench_docs.py` from the JSON files named below; regenerate it, do not edit it. "
           "Emulated guests: only ratios within one run mean anything.*"]
    section = None
    for i in shown:
        if (i.kind, i.regime) != section:
            section = (i.kind, i.regime)
            out += ["", f"### {TITLES[i.kind].format(regime=i.regime)}"]
        facts, text = LINES[i.kind](i.data)
        snap = i.snapshot
        facts = [f for f in facts + [duration(i.data)] if f]
        if snap.get("transcribed"):
            facts.append("transcribed from the dated record")
        title = f"**{i.date}**" + (f", {snap['label']}" if snap.get("label") else "")
        command = snap.get("command") or COMMANDS[i.kind].format(regime=i.regime)
        out += ["", f"{title}: `{command}`; {'; '.join(facts)}; {link_to(i.path, doc)}", "", text]
        notes = snap.get("notes") or []
        if notes:
            out += [""] + [f"- {note}" for note in notes]
    return "\n".join(out) + "\n"


# ---- the document ----

def replace_block(text, block):
    """`text` with the block between the markers replaced by `block`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0:
        raise Error(f"the markers {BEGIN} and {END} are not both there")
    if end < start or text.count(BEGIN) != 1 or text.count(END) != 1:
        raise Error(f"expected one {BEGIN} followed by one {END}")
    return text[:start + len(BEGIN)] + "\n" + block + text[end:]


def shown(path):
    """`path` relative to the working directory when it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def default_inputs():
    return [REPO / p for p in OUTPUTS if (REPO / p).is_file()]


def snapshot(inputs, into, command):
    """Copies each input that is not a snapshot yet into `into` as DATE-NAME.json,
    with a `snapshot` record (date, command, the file it came from); the paths
    written."""
    written = []
    for i in (Input(p) for p in inputs):
        if i.snapshot:
            continue
        name = {"bench": "bench", "access": "access", "qos": f"qos-{i.regime}",
                "qos-hostile": "qos-hostile" if i.regime == "link" else f"qos-hostile-{i.regime}"}[i.kind]
        provider = (i.data.get("config") or {}).get("provider")
        if provider not in (None, "rxe"):
            name += f"-{provider}"
        target = Path(into) / f"{i.date}-{name}.json"
        if target.exists():
            raise Error(f"{target} exists already: name the snapshot yourself (cp) or remove it")
        try:
            source = i.path.resolve().relative_to(REPO).as_posix()
        except ValueError:
            source = str(i.path)
        data = {"snapshot": {"date": i.date, "command": command, "from": source, "transcribed": False}, **i.data}
        target.write_text(json.dumps(data, indent=1) + "\n")
        written.append(target)
    return written


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench_docs.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="*", type=Path,
                    help="benchmark JSON files (default: those under build/ that the benchmarks wrote: "
                         + ", ".join(OUTPUTS) + ")")
    ap.add_argument("--doc", type=Path, default=DOC, help="the document to rewrite (default docs/benchmarks.md)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the document's block differs from what the files give")
    ap.add_argument("--stdout", action="store_true", help="print the block instead of writing the document")
    ap.add_argument("--snapshot", type=Path, metavar="DIR",
                    help="instead: copy each file into DIR as DATE-NAME.json with a `snapshot` record "
                         "(e.g. docs/measurements), for committing")
    ap.add_argument("--command", help="with --snapshot: the command that produced the files, recorded with them")
    return ap.parse_args(argv)


def run(argv=None):
    """The command line; returns the exit status."""
    args = parse_args(argv)
    try:
        inputs = args.json or default_inputs()
        if not inputs:
            raise Error("no benchmark JSON under build/ (run a benchmark) and none named; "
                        "the committed results: tools/bench_docs.py docs/measurements/*.json")
        if args.snapshot:
            if not args.snapshot.is_dir():
                raise Error(f"{args.snapshot}: not a directory")
            for path in snapshot(inputs, args.snapshot, args.command):
                print(f"wrote {shown(path)}")
            return 0
        block = render(inputs, args.doc)
        if args.stdout:
            sys.stdout.write(block)
            return 0
        try:
            text = args.doc.read_text()
        except OSError as e:
            raise Error(f"{args.doc}: {e.strerror or e}") from None
        new = replace_block(text, block)
        if args.check:
            if new != text:
                names = " ".join(shown(p) for p in inputs)
                print(f"{shown(args.doc)}: the results block is stale; run tools/bench_docs.py {names}",
                      file=sys.stderr)
                return 1
            return 0
        if new != text:
            args.doc.write_text(new)
            print(f"rewrote the results block of {shown(args.doc)}")
        return 0
    except Error as e:
        print(f"bench_docs: {e}", file=sys.stderr)
        return 1


def main(argv=None):
    sys.exit(run(argv))
