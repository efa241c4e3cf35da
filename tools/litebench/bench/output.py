"""What the benchmark (tools/bench.py) reads from the tools it runs: perftest's
latency and bandwidth tables, and the JSON line lite-bench, lite-regmr and
lite-selftest end with (which the QoS benchmark reads too)."""

import json
import re


# ---- perftest output ----

def _num(s):
    try:
        return float(s)
    except ValueError:
        return None


def _is_int(s):
    return s.isdigit()


def parse_perftest_lat(out, size=None):
    """The result row of an ib_*_lat table, keyed by header column, in usec.

    The header is `#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
    t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]`; t_typical is the median.
    Returns {"bytes", "iters", "t_min_us", "t_max_us", "t_typical_us", "t_avg_us",
    "t_stdev_us", "p99_us", "p999_us"} (missing columns absent) or None."""
    names = None
    for line in out.splitlines():
        if "#bytes" in line and "t_" in line:
            header = re.sub(r"(\d+(?:\.\d+)?)%\s+percentile", r"p\1", line.replace("#", ""))
            names = []
            for token in header.split():
                base = token.split("[")[0]
                names.append({"bytes": "bytes", "iterations": "iters", "p99": "p99_us",
                              "p99.9": "p999_us"}.get(base, f"{base}_us"))
            continue
        if names is None:
            continue
        fields = line.split()
        if len(fields) < 3 or not (_is_int(fields[0]) and _is_int(fields[1])):
            continue
        if size is not None and int(fields[0]) != size:
            continue
        row = {"bytes": int(fields[0]), "iters": int(fields[1])}
        for name, value in zip(names[2:], fields[2:]):
            v = _num(value)
            if v is not None:
                row[name] = v
        if "t_typical_us" in row:
            return row
    return None


def parse_perftest_bw(out, size=None):
    """The result row of an ib_*_bw table with bandwidths in MiB/s.

    Header `#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]`:
    perftest's MB/sec is MiB/s (2^20 bytes/s); Gb/sec (10^9 bit/s, --report_gbits)
    is converted. Returns {"bytes", "iters", "peak_mib_s", "avg_mib_s", "msg_rate_mpps",
    "unit_reported"} or None."""
    unit = None
    for line in out.splitlines():
        m = re.search(r"BW average\[([^\]]+)\]", line)
        if m and "#bytes" in line:
            unit = m.group(1)
            continue
        if unit is None:
            continue
        fields = line.split()
        if len(fields) < 4 or not (_is_int(fields[0]) and _is_int(fields[1])):
            continue
        if size is not None and int(fields[0]) != size:
            continue
        peak, avg = _num(fields[2]), _num(fields[3])
        if avg is None:
            continue
        if unit.lower().startswith("gb"):
            factor = 1e9 / 8 / (1 << 20)
        elif unit in ("MB/sec", "MiB/sec"):
            factor = 1.0
        else:
            raise ValueError(f"unknown perftest bandwidth unit {unit!r}")
        return {"bytes": int(fields[0]), "iters": int(fields[1]),
                "peak_mib_s": None if peak is None else peak * factor, "avg_mib_s": avg * factor,
                "msg_rate_mpps": _num(fields[4]) if len(fields) > 4 else None, "unit_reported": unit}
    return None


def last_json(text):
    """The last line of `text` that is a JSON object."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None
