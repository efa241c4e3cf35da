"""The benchmark's report (tools/bench.py): the targets, the ratio table of LITE
against native verbs from results.json, its formatting, and the panels of the
latency chart."""

import statistics

# kind -> (comparison, target): ratio = LITE / native, except malloc (native / LITE: a speedup)
# and LMR counts (N LMRs / 1 LMR).
TARGETS = {
    "lat_median": ("<=", 1.05),
    "lat_p99": ("<=", 1.10),
    "bw": (">=", 0.95),
    "malloc_speedup": (">=", 20.0),
    "lmrs": ("<=", 1.10),
    "rpc_median": ("<=", 1.15),
    "rpc_user_kernel": ("<=", 1.10),
    "rpc_scaling": (">=", 1.0),
    "idle_cpu": ("<=", 0.01),
    # Issue 5's target for an uncontended LT_lock; LT_fetch_add and LT_unlock are the
    # same single atomic round trip.
    "atomic_median": ("<=", 1.2),
    # A contended lock serializes its holders, so throughput cannot grow with
    # contenders; each handover adds a queue request and a wake message, so it should
    # not fall below half of the uncontended rate.
    "lock_contended": (">=", 0.5),
    # Against a baseline that sleeps on completion events as LITE does: context for
    # the targets above, which are against busy-polling perftest.
    "context": None,
}
# perftest's flag for sleeping on completion events instead of busy-polling the CQ.
EVENTS = "-e"


# ---- formatting ----

def fmt_size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def fmt_ns(ns):
    if ns is None:
        return "-"
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            return f"{ns / div:.3g} {unit}" if ns / div < 100 else f"{ns / div:.0f} {unit}"
    return f"{ns:.0f} ns"


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "ns":
        return fmt_ns(v)
    if unit == "MiB/s":
        return f"{v:.1f} MiB/s"
    return f"{v:.3g} {unit}"


def meets(kind, ratio):
    """Whether `ratio` meets the target of `kind`; None without a target or a ratio."""
    if TARGETS[kind] is None or ratio is None:
        return None
    op, target = TARGETS[kind]
    return ratio <= target if op == "<=" else ratio >= target


def compare(metric, size, lite, native, unit, kind, ratio=None, note=""):
    """A row of the ratio table (also stored in results.json)."""
    if ratio is None and lite is not None and native:
        ratio = lite / native
    if TARGETS[kind] is None:
        shown = "-"
    else:
        op, target = TARGETS[kind]
        shown = f"{op} {target:.2f}" if target < 10 else f"{op} {target:g}"
    met = meets(kind, ratio)
    return {"metric": metric, "size": size, "lite": lite, "native": native, "unit": unit,
            "ratio": ratio, "target": shown, "kind": kind, "met": met, "note": note}


def fmt_spread(ratios):
    """'0.91-1.20', the lowest and the highest run's ratio, or '' for a single run."""
    known = [r for r in ratios or [] if r is not None]
    if len(known) < 2:
        return ""
    return f"{min(known):.2f}-{max(known):.2f}"


def format_table(rows):
    """The ratio table; with several runs, the ratio is their median and `runs` their range."""
    several = any(fmt_spread(r.get("ratios")) for r in rows)
    head = ["metric", "size", "LITE", "native", "ratio"] + (["runs"] if several else []) + ["target", "met?"]
    body = []
    for r in rows:
        body.append([r["metric"], fmt_size(r["size"]) if r["size"] is not None else "",
                     fmt_value(r["lite"], r["unit"]), fmt_value(r["native"], r["unit"]),
                     "-" if r["ratio"] is None else f"{r['ratio']:.3f}"]
                    + ([fmt_spread(r.get("ratios"))] if several else [])
                    + [r["target"], "" if r["kind"] == "context" else {True: "yes", False: "NO", None: "n/a"}[r["met"]]])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    right = {2, 3, 4, 5} if several else {2, 3, 4}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(cells) for cells in body]
    return "\n".join(x.rstrip() for x in out)


# The kernel's phase account of the two RPC callers (lite-selftest rpc-call's "phases").
CALL_PHASES = [("pin_ns", "pin the output"), ("register_ns", "register its key"),
               ("stage_ns", "stage, slot, ring room"), ("round_trip_ns", "post to reply handled"),
               ("publish_ns", "publish the result"), ("wakeup_ns", "wake the caller"),
               ("outside_ns", "outside the kernel's stamps"), ("mean_ns", "the call, as timed"),
               ("release_ns", "handler after publishing: wake, revoke, unpin")]


def call_phases(lite):
    """Per phase, each caller's median over its rounds of the round's mean per call (ns):
    {"user": {phase: ns}, "kernel": {...}}, from the rounds of `rpc_user` and `rpc_kernel`."""
    out = {}
    for key, who in (("rpc_user", "user"), ("rpc_kernel", "kernel")):
        rounds = [r["phases"] for r in lite.get(key, {}).get("rounds", []) if r.get("phases")]
        if rounds:
            out[who] = {k: statistics.median(r.get(k, 0) for r in rounds) for k, _ in CALL_PHASES}
            out[who]["rounds"] = len(rounds)
    return out


def format_call_phases(phases):
    """The phase account as a table: phase, user, kernel, user - kernel."""
    user, kern = phases.get("user", {}), phases.get("kernel", {})
    rows = [["phase", "user caller", "kernel caller", "difference"]]
    for k, label in CALL_PHASES:
        u, n = user.get(k), kern.get(k)
        rows.append([label, fmt_value(u, "ns"), fmt_value(n, "ns"),
                     "-" if u is None or n is None else fmt_ns(u - n) if u >= n else "-" + fmt_ns(n - u)])
    return phase_table(rows)


def phase_table(rows):
    """Rows of a phase account (the first the header) as aligned text: the phase left,
    the figures right, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(x.rstrip() for x in lines)


# The kernel's phase account of small LT_reads (lite-bench lat's "phases", per round).
READ_PHASES = [("pin_ns", "entry to buffer ready"), ("prepare_ns", "QoS ticket, send credits"),
               ("post_ns", "the provider's post"), ("wire_ns", "posted to completion handled"),
               ("notice_ns", "the reader runs again"), ("finish_ns", "copy-out or unpin, return"),
               ("outside_ns", "outside the stamps (crossing)"), ("mean_ns", "LT_read, as timed")]
# The native READ's own phases beside them (lite-read-phases, stamped in user space).
NATIVE_READ_PHASES = [("post_mean", "native: the provider's post"),
                      ("wire_mean", "native: posted to completion polled"),
                      ("whole_mean", "native READ, as timed")]


def native_read_phases(native, size, spec):
    """The native READ's phases of `spec` at `size`, each the median over its rounds
    (None without lite-read-phases rounds), keyed native_KEY."""
    own = native.get("read_phases", {}).get(size, {}).get("rounds", [])
    return {f"native_{k}": statistics.median(r[k] for r in own) if own else None for k, _ in spec}


def read_phases(lite, native):
    """Per size, LT_read's median over its rounds of each round's mean per read (ns),
    with `ib_read_lat`'s median over its rounds of each round's mean beside it:
    and the native READ's own phases (lite-read-phases) in the same way:
    {size: {phase: ns, "slept_share", "rounds", "ib_read_lat_ns", "native_post_mean", ...}}."""
    out = {}
    for size, point in lite.get("lat_read", {}).items():
        rounds = [r["phases"] for r in point.get("rounds", []) if r.get("phases")]
        if not rounds:
            continue
        d = {k: statistics.median(r.get(k, 0) for r in rounds) for k, _ in READ_PHASES}
        d["slept_share"] = statistics.median(r.get("slept_share", 0) for r in rounds)
        d["rounds"] = len(rounds)
        native_means = [r["t_avg_us"] * 1000 for r in native.get("ib_read_lat", {}).get(size, {}).get("rounds", [])
                        if r.get("t_avg_us") is not None]
        d["ib_read_lat_ns"] = statistics.median(native_means) if native_means else None
        d.update(native_read_phases(native, size, NATIVE_READ_PHASES))
        out[size] = d
    return out


def read_phase_rows(phases, fmt):
    """The read phase account's header and rows: a row per phase, a column per size,
    each time shown by `fmt` (ns, or None where it is missing)."""
    sizes = sorted(phases, key=int)
    rows = [[label] + [fmt(phases[s].get(k)) for s in sizes] for k, label in READ_PHASES]
    rows.append(["ib_read_lat, as timed"] + [fmt(phases[s].get("ib_read_lat_ns")) for s in sizes])
    if any(phases[s].get("native_whole_mean") is not None for s in sizes):
        rows += [[label] + [fmt(phases[s].get(f"native_{k}")) for s in sizes] for k, label in NATIVE_READ_PHASES]
    rows.append(["reads that slept"] + [f"{phases[s].get('slept_share', 0) * 100:.0f} %" for s in sizes])
    return ["phase"] + [fmt_size(int(s)) for s in sizes], rows


# Each phase's median over single reads (lite-bench lat --per-read), per round.
READ_MEDIANS = [("pin_ns", "entry to buffer ready"), ("prepare_ns", "QoS ticket, send credits"),
                ("post_ns", "the provider's post"), ("wire_ns", "posted to completion handled"),
                ("provider_ns", "the provider's share (post to handled)"),
                ("notice_ns", "the reader runs again"), ("finish_ns", "copy-out or unpin, return"),
                ("outside_ns", "outside the stamps (crossing)"), ("timed_ns", "LT_read, as timed")]
NATIVE_READ_MEDIANS = [("post_median", "native: the provider's post"),
                       ("wire_median", "native: posted to completion polled"),
                       ("whole_median", "native READ, as timed")]


def read_medians(lite, native):
    """Per size, the median over rounds of each round's median of every phase of
    single LT_reads, beside the native READ's own medians and `ib_read_lat`'s
    (t_typical): {size: {phase: ns, "slept_share", "rounds", "native_post_median", ...,
    "ib_read_lat_ns"}}."""
    out = {}
    for size, point in lite.get("lat_read_per_read", {}).items():
        rounds = point.get("rounds", [])
        if not rounds:
            continue
        d = {k: statistics.median(r[k] for r in rounds) for k, _ in READ_MEDIANS}
        d["slept_share"] = statistics.median(r.get("slept_share", 0) for r in rounds)
        d["rounds"] = len(rounds)
        d.update(native_read_phases(native, size, NATIVE_READ_MEDIANS))
        typical = native.get("ib_read_lat", {}).get(size, {}).get("t_typical_us")
        d["ib_read_lat_ns"] = typical * 1000 if typical is not None else None
        out[size] = d
    return out


def read_median_rows(medians, fmt):
    """The per-read medians' header and rows, as read_phase_rows."""
    sizes = sorted(medians, key=int)
    rows = [[label] + [fmt(medians[s].get(k)) for s in sizes] for k, label in READ_MEDIANS]
    if any(medians[s].get("native_whole_median") is not None for s in sizes):
        rows += [[label] + [fmt(medians[s].get(f"native_{k}")) for s in sizes] for k, label in NATIVE_READ_MEDIANS]
    rows.append(["ib_read_lat, as timed (median)"] + [fmt(medians[s].get("ib_read_lat_ns")) for s in sizes])
    rows.append(["reads that slept"] + [f"{medians[s].get('slept_share', 0) * 100:.0f} %" for s in sizes])
    return ["phase"] + [fmt_size(int(s)) for s in sizes], rows


def format_read_medians(medians):
    """The per-read medians as a table: a row per phase, a column per size."""
    head, rows = read_median_rows(medians, lambda ns: fmt_value(ns, "ns"))
    return phase_table([head] + rows)


def format_read_phases(phases):
    """The read phase account as a table: a row per phase, a column per size."""
    head, rows = read_phase_rows(phases, lambda ns: fmt_value(ns, "ns"))
    return phase_table([head] + rows)


# ---- the latency chart ----

def chart_panels(results):
    """The panels of latency.svg (plots.size_chart) from results.json's `lite` and `native`."""
    lite, native = results["lite"], results["native"]

    def lat_points(op, stat):
        return [(int(s), r.get(stat)) for s, r in lite.get(f"lat_{op}", {}).items()]

    def native_points(tool, mult):
        return [(int(s), r["t_typical_us"] * 1000 * mult if r and "t_typical_us" in r else None)
                for s, r in native.get(tool, {}).items()]

    us = lambda pts: [(x, None if y is None else y / 1000) for x, y in pts]  # noqa: E731
    return [
        {"title": "LT_write vs ib_write_lat x 2 (median)", "xlabel": "bytes", "ylabel": "round trip (us)", "ylog": True,
         "series": [{"label": "LITE LT_write", "color": "#1f77b4", "points": us(lat_points("write", "median_ns"))},
                    {"label": "ib_write_lat x 2", "color": "#1f77b4", "dash": True,
                     "points": us(native_points("ib_write_lat", 2))}]},
        {"title": "LT_read vs ib_read_lat (median)", "xlabel": "bytes", "ylabel": "round trip (us)", "ylog": True,
         "series": [{"label": "LITE LT_read", "color": "#ff7f0e", "points": us(lat_points("read", "median_ns"))},
                    {"label": "ib_read_lat", "color": "#ff7f0e", "dash": True,
                     "points": us(native_points("ib_read_lat", 1))},
                    {"label": f"ib_read_lat {EVENTS} (sleeps)", "color": "#7f7f7f", "dash": True,
                     "points": us(native_points(f"ib_read_lat {EVENTS}", 1))}]},
        {"title": "LT_RPC (16 B request) vs ib_write_lat 8 B + reply size (median)", "xlabel": "reply bytes",
         "ylabel": "round trip (us)", "ylog": True,
         "series": [{"label": "LITE LT_RPC", "color": "#9467bd",
                     "points": us([(int(sz), r.get("p50_ns")) for sz, r in lite.get("rpc_lat", {}).items()])},
                    {"label": "2 native writes", "color": "#9467bd", "dash": True,
                     "points": us([(int(sz), two_writes_ns(native, int(sz))) for sz in lite.get("rpc_lat", {})])}]},
        {"title": "write bandwidth", "xlabel": "bytes per write", "ylabel": "MiB/s", "ylog": False,
         "series": [{"label": "LITE LT_write", "color": "#2ca02c",
                     "points": [(int(s), r.get("mib_s")) for s, r in lite.get("bw", {}).items()]},
                    {"label": "ib_write_bw", "color": "#2ca02c", "dash": True,
                     "points": [(int(s), r["avg_mib_s"] if r else None)
                                for s, r in native.get("ib_write_bw", {}).items()]}]},
    ]


def two_writes_ns(native, size):
    """The native baseline of an RPC: one ib_write_lat of the (16 B) request, taken as
    the 8 B row, and one of the reply size (each a half round trip, t_typical)."""
    rows = native.get("ib_write_lat", {})
    req, rep = rows.get("8"), rows.get(str(size))
    if not req or not rep or "t_typical_us" not in req or "t_typical_us" not in rep:
        return None
    return (req["t_typical_us"] + rep["t_typical_us"]) * 1000


# ---- the ratio table ----

def comparisons(results):
    lite, native = results["lite"], results["native"]
    rows = []
    for op, tool, mult in (("write", "ib_write_lat", 2), ("read", "ib_read_lat", 1)):
        label = f"{tool} x {mult}" if mult != 1 else tool
        for s in results["config"]["lat_sizes"]:
            lr, nr = lite.get(f"lat_{op}", {}).get(str(s)), native.get(tool, {}).get(str(s))
            n_med = nr["t_typical_us"] * 1000 * mult if nr and "t_typical_us" in nr else None
            n_p99 = nr["p99_us"] * 1000 * mult if nr and "p99_us" in nr else None
            rows.append(compare(f"LT_{op} median vs {label}", s, lr and lr.get("median_ns"), n_med, "ns", "lat_median"))
            rows.append(compare(f"LT_{op} p99 vs {label}", s, lr and lr.get("p99_ns"), n_p99, "ns", "lat_p99"))
            events = native.get(f"{tool} {EVENTS}", {}).get(str(s))
            if op == "read" and events:
                rows.append(compare(f"LT_read median vs ib_read_lat {EVENTS} (sleeps on events)", s,
                                    lr and lr.get("median_ns"), events["t_typical_us"] * 1000, "ns", "context"))
    threads = results["config"]["bw_threads"]
    for s in results["config"]["bw_sizes"]:
        lr, nr = lite.get("bw", {}).get(str(s)), native.get("ib_write_bw", {}).get(str(s))
        rows.append(compare(f"LT_write bw ({threads} thread{'s' if threads > 1 else ''}) vs ib_write_bw", s,
                            lr and lr.get("mib_s"), nr and nr.get("avg_mib_s"), "MiB/s", "bw"))
    reg = native.get("regmr")
    for key, how in (("malloc", ""), ("malloc_reserved", " from the zeroed reserve")):
        for holders, r in lite.get(key, {}).items():
            lt = r and r.get("total_ns")
            rn = reg and reg.get("reg_ns")
            ratio = rn / lt if lt and rn else None
            rows.append(compare(f"LT_malloc+map{how} (holders {holders}) vs ibv_reg_mr: speedup", r and r.get("size"),
                                lt, rn, "ns", "malloc_speedup", ratio=ratio))
    for count, r in sorted(lite.get("lmrs", {}).items(), key=lambda kv: int(kv[0])):
        # Against the first LMR alone, timed by the same process before it made the others.
        # With one LMR, the same LMR timed again later: what the procedure itself varies.
        alone = r.get("alone", {}).get("median_ns")
        metric = ("LT_write median, the same 1 LMR later vs before (control)" if count == "1" else
                  f"LT_write median, {int(count):,} LMRs of {fmt_size(r.get('size', 4096))} vs 1 LMR")
        rows.append(compare(metric, r.get("write_size"), r.get("median_ns"), alone, "ns", "lmrs"))
    for size, r in sorted(lite.get("rpc_lat", {}).items(), key=lambda kv: int(kv[0])):
        rows.append(compare("LT_RPC median, 16 B request, vs ib_write_lat 8 B + reply", int(size),
                            r.get("p50_ns"), two_writes_ns(native, int(size)), "ns", "rpc_median"))
    user, kern = lite.get("rpc_user"), lite.get("rpc_kernel")
    if user or kern:
        rows.append(compare("LT_RPC 8 B median, user caller vs kernel caller", 8, user and user.get("p50_ns"),
                            kern and kern.get("p50_ns"), "ns", "rpc_user_kernel"))
    tput = lite.get("rpc_threads", {})
    one = tput.get("1")
    for threads, r in sorted(tput.items(), key=lambda kv: int(kv[0])):
        if threads != "1":
            rows.append(compare(f"LT_RPC calls/s, {threads} threads vs 1 thread", 64, r.get("calls_per_s"),
                                one and one.get("calls_per_s"), "calls/s", "rpc_scaling"))
    atomic, native_atomic = lite.get("atomic"), native.get("ib_atomic_lat", {}).get("8")
    if atomic or native_atomic:
        rows.append(compare("LT_fetch_add median vs ib_atomic_lat", 8, atomic and atomic.get("p50_ns"),
                            native_atomic and native_atomic.get("t_typical_us", 0) * 1000 or None, "ns",
                            "atomic_median"))
    atomic_events = native.get(f"ib_atomic_lat {EVENTS}", {}).get("8")
    if atomic and atomic_events:
        rows.append(compare(f"LT_fetch_add median vs ib_atomic_lat {EVENTS} (sleeps on events)", 8,
                            atomic.get("p50_ns"), atomic_events["t_typical_us"] * 1000, "ns", "context"))
    locks = lite.get("lock", {})
    one = locks.get("1")
    native_ns = native_atomic and native_atomic.get("t_typical_us", 0) * 1000 or None
    if one:
        for op in ("lock", "unlock"):
            rows.append(compare(f"LT_{op} median, uncontended, vs ib_atomic_lat", 8, one.get(f"{op}_p50_ns"),
                                native_ns, "ns", "atomic_median"))
    for threads, r in sorted(locks.items(), key=lambda kv: int(kv[0])):
        if threads != "1":
            rows.append(compare(f"locked increments/s, {threads} contending threads vs 1", None,
                                r.get("increments_per_s"), one and one.get("increments_per_s"), "ops/s",
                                "lock_contended"))
    paths = lite.get("paths", {})
    native_paths, stand_in = paths.get("native"), paths.get("stand-in")
    if native_paths or stand_in:
        for key, metric, size in (("rpc_p50_ns", "LT_RPC 16 B -> 8 B, WRITE + SEND", 16),
                                  ("fetch_add_p50_ns", "LT_fetch_add, by the holder's kernel", 8),
                                  ("lock_p50_ns", "LT_lock uncontended, by the holder's kernel", 8),
                                  ("unlock_p50_ns", "LT_unlock, by the holder's kernel", 8)):
            rows.append(compare(f"{metric} vs the NIC's opcodes (median of rounds)", size,
                                stand_in and stand_in.get(key), native_paths and native_paths.get(key), "ns",
                                "context"))
    idle = lite.get("rpc_idle")
    if idle:
        rows.append(compare(f"idle RPC server: CPU share over {idle['seconds']} s", None, idle["cpu_s"],
                            idle["seconds"], "s", "idle_cpu"))
    return rows
