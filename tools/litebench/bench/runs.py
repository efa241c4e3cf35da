"""Several runs of the benchmark as one result (tools/bench.py --runs N): every
number is the median of the runs' numbers, and each row of the ratio table keeps
its ratio from every run, so that the table shows how far the runs spread.

Under TCG one run's ratios have moved by 2x from the next, so the targets are
judged on the median of the runs (issue 53 asks for three)."""

import statistics

from litebench.bench.report import meets


def median_of(values):
    """The runs' values of one place in results.json, as one: numbers by their
    median (missing ones left out), lists joined (the rounds of every run), dicts
    place by place, anything else as the first run had it."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: median_of([v.get(k) for v in present]) for k in keys}
    if all(isinstance(v, list) for v in present):
        return [item for v in present for item in v]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        m = statistics.median(present)
        return int(m) if all(isinstance(v, int) for v in present) and m == int(m) else m
    return present[0]


def spread(rows_per_run, rows):
    """Gives each row of `rows` (the table of the median numbers) `ratios`, its
    ratio in each run (None where that run has no such row), and makes its ratio,
    and whether it meets its target, the median of those."""
    for row in rows:
        key = (row["metric"], row["size"])
        row["ratios"] = [next((r["ratio"] for r in run if (r["metric"], r["size"]) == key), None)
                         for run in rows_per_run]
        known = [r for r in row["ratios"] if r is not None]
        if len(known) < 2:
            continue
        row["ratio"] = statistics.median(known)
        row["met"] = meets(row["kind"], row["ratio"])
    return rows
