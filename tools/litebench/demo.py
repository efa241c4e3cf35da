"""LITE-RS showcase (`make demo`): boot a virtual cluster, join every node through
the manager, show each node's view, ping every pair through the kernel, round-trip
a memory region held by two other nodes, then run the four applications built on
liblite (apps/lite-apps) on all nodes and print a summary table:

  lite-log    distributed atomic log: commits/s of 16 B entries from 1, 2 and 3 nodes
  lite-kv     key-value store: GETs one-sided, PUTs by RPC; YCSB-like 95/5 and 50/50
              mixes, uniform and zipfian keys
  lite-mr     MapReduce WordCount on a generated corpus, checked against (and timed
              beside) a single-process count
  lite-graph  PageRank on a generated power-law graph, checked against a
              single-process run

`--apps kv` runs only the named applications (after the join), `--apps none` none.
"""

import argparse
import json
import re
import signal
import sys
import time

from litebench.cluster.cluster import Background, Cluster, REPO
from litebench.cluster.guest import KERNELS

APPS = ["log", "kv", "mr", "graph"]
# liblite calls, for counting the lines of LITE API code in each application.
API_CALL = re.compile(r"Lite::open|lite\.map\(|\.lock\([^)]|\.(malloc|read|write|memset|memcpy_from|memmove|"
                      r"fetch_add|compare_swap|unlock|barrier|rpc|register_rpc|unregister_rpc|recv_rpc|reply_rpc|"
                      r"reply_and_recv|send|node_id|free|grant)\(")


def native_write_rtt(c, server, client, count):
    """perftest's ib_write_lat between two guests, as a round trip (it reports half of one)."""
    c.exec(server, f"ib_write_lat -d rxe0 -x 1 -s 8 -n {count} -F >/run/lite/native-server.log 2>&1 &")
    time.sleep(1)
    res = c.exec(client, f"ib_write_lat -d rxe0 -x 1 -s 8 -n {count} -F 10.77.0.{server + 1}",
                 timeout=600, check=False)
    for line in res.out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0] == "8":
            # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% ...
            return {"min_ns": float(fields[2]) * 2000, "median_ns": float(fields[4]) * 2000,
                    "p99_ns": float(fields[7]) * 2000}
    print(f"  (native baseline unavailable: {res.out.strip()[-200:]})")
    return None


def last_json(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise ValueError(f"no JSON summary in:\n{out[-2000:]}")
    return json.loads(lines[-1])


def app_sources(app):
    """The Rust files of application `app`: `lite-APP.rs`, or every file of its folder."""
    bins = REPO / "apps" / "lite-apps" / "src" / "bin"
    single = bins / f"lite-{app}.rs"
    files = [single] if single.is_file() else sorted((bins / f"lite-{app}").rglob("*.rs"))
    if not files:
        raise FileNotFoundError(f"no sources for lite-{app} under {bins}")
    return files


def api_lines(app):
    """(lines calling liblite, all lines) of an application, tests left out."""
    code = [ln for path in app_sources(app) for ln in path.read_text().split("#[cfg(test)]")[0].splitlines()]
    return sum(1 for ln in code if API_CALL.search(ln)), len(code)


def ms(ns):
    return f"{ns / 1e6:.2f} ms"


def demo_log(c, nodes, args):
    """Commits/s of 16 B entries with writers on 1, 2, then 3 nodes (2 threads each)."""
    log = Background(c, 1, "demo-log", f"lite-log create demo-log --capacity 1M --holder {nodes[-1]}")
    log.wait_for("ready")
    results = []
    try:
        for k in range(1, len(nodes) + 1):
            writers = nodes[:k]
            cleaner = c.exec_async(0, f"lite-log clean demo-log --expect {2 * args.log_count * k} --json", timeout=900)
            jobs = [c.exec_async(n, f"lite-log append demo-log --count {args.log_count} --threads 2 "
                                    f"--writer {100 * n + 10 * k} --json", timeout=900) for n in writers]
            runs = [last_json(j.wait().out) for j in jobs]
            cleaned = last_json(cleaner.wait().out)
            commits = sum(r["commits"] for r in runs)
            rate = commits / max(r["seconds"] for r in runs)
            ok = cleaned["entries"] == commits and cleaned["out_of_order"] == 0
            results.append({"nodes": k, "commits": commits, "commits_per_s": rate,
                            "p50_ns": max(r["p50_ns"] for r in runs), "in_order": ok})
            print(f"  writers on {k} node(s): {commits} commits, {rate:8.0f} commits/s, median append "
                  f"{ms(results[-1]['p50_ns'])}; cleaner: {'every writer in order' if ok else 'OUT OF ORDER'}",
                  flush=True)
    finally:
        log.close()
    best = max(results, key=lambda r: r["commits_per_s"])
    summary = ", ".join(f"{r['nodes']} node{'s' if r['nodes'] > 1 else ''} {r['commits_per_s']:.0f}/s" for r in results)
    return {"app": "lite-log", "ok": all(r["in_order"] for r in results), "results": results,
            "summary": f"16 B commits: {summary}", "best": best}


def demo_kv(c, nodes, args):
    servers = nodes[1:] or nodes
    kv = f"--servers {','.join(map(str, servers))}"
    procs = [Background(c, n, f"demo-kv{n}", "lite-kv serve --buckets 16384") for n in servers]
    results = []
    try:
        for p in procs:
            p.wait_for("ready")
        load = last_json(c.exec(0, f"lite-kv load {kv} --keys {args.kv_keys} --threads 4 --json", timeout=1800).out)
        print(f"  loaded {args.kv_keys} keys on nodes {servers}: {load['puts_per_s']:.0f} PUTs/s", flush=True)
        for read_pct in (95, 50):
            for dist in ("uniform", "zipfian"):
                r = last_json(c.exec(0, f"lite-kv bench {kv} --keys {args.kv_keys} --ops {args.kv_ops} --threads 4 "
                                        f"--read-pct {read_pct} --dist {dist} --json", timeout=1800).out)
                results.append(r)
                print(f"  {read_pct}/{100 - read_pct} {dist:8}: {r['ops_per_s']:7.0f} ops/s, GET median "
                      f"{ms(r['get_p50_ns'])}, PUT median {ms(r['put_p50_ns'])}, {r['wrong_values']} wrong",
                      flush=True)
    finally:
        for p in procs:
            p.close()
    summary = ", ".join(f"{r['read_pct']}/{100 - r['read_pct']} {r['dist'][0]} {r['ops_per_s']:.0f} ops/s"
                        for r in results)
    return {"app": "lite-kv", "ok": all(r["wrong_values"] == 0 for r in results), "results": results,
            "summary": summary}


def demo_mr(c, nodes, args):
    workers = [Background(c, n, f"demo-mr{n}", "lite-mr worker") for n in nodes]
    try:
        for w in workers:
            w.wait_for("ready")
        c.exec(0, f"lite-mr gen /tmp/demo-corpus.txt --size {args.mr_size}", timeout=1800)
        r = last_json(c.exec(0, f"lite-mr run /tmp/demo-corpus.txt /tmp/demo-wc.out --nodes "
                                f"{','.join(map(str, nodes))} --check --json", timeout=3600).out)
    finally:
        for w in workers:
            w.close()
        c.exec(0, "rm -f /tmp/demo-corpus.txt /tmp/demo-wc.out*")
    print(f"  {r['input_bytes'] / 2**20:.0f} MiB, {r['words']} words ({r['distinct_words']} distinct): "
          f"{r['seconds']:.1f} s on {len(nodes)} nodes (load {r['load_s']:.1f} s, map {r['map_s']:.1f} s, "
          f"reduce {r['reduce_s']:.1f} s); single process {r['reference_s']:.1f} s; "
          f"output {'identical' if r['identical'] else 'DIFFERENT'}", flush=True)
    return {"app": "lite-mr", "ok": r["identical"], "results": r,
            "summary": f"{r['input_bytes'] / 2**20:.0f} MiB in {r['seconds']:.1f} s "
                       f"(1 process: {r['reference_s']:.1f} s), output identical"
                       if r["identical"] else "output differs from the reference"}


def demo_graph(c, nodes, args):
    graph = (f"--vertices {args.graph_vertices} --edges {args.graph_edges} --iterations {args.graph_iterations} "
             f"--workers {len(nodes)} --json")
    jobs = [c.exec_async(n, f"lite-graph run {graph} --rank {i}" +
                         (f" --holders {','.join(map(str, nodes))}" if i == 0 else ""), timeout=3600)
            for i, n in enumerate(nodes)]
    runs = [last_json(j.wait().out) for j in jobs]
    r = runs[0]
    ok = r["max_diff"] <= 1e-6
    print(f"  {r['vertices']} vertices, {r['edges']} edges, {r['iterations']} iterations on {len(nodes)} nodes: "
          f"{r['seconds']:.1f} s ({r['s_per_iteration']:.2f} s/iteration); single process {r['reference_s']:.1f} s; "
          f"largest rank difference {r['max_diff']:.1e}", flush=True)
    return {"app": "lite-graph", "ok": ok, "results": runs,
            "summary": f"{r['edges'] / 1e6:g} M edges: {r['s_per_iteration']:.2f} s/iteration "
                       f"(1 process: {r['reference_s'] / r['iterations']:.2f}), ranks within {r['max_diff']:.0e}"}


def print_apps_table(rows):
    head = ["application", "result", "LITE API lines / all lines", "ok"]
    body = [[r["app"], r["summary"], f"{r['api_lines']} / {r['lines']}", "yes" if r["ok"] else "NO"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    for cells in [head, ["-" * w for w in widths]] + body:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())


# `--short`: the whole showcase at sizes that take a minute or two (make test runs it).
SHORT = {"count": 20, "lmr_size": "4M", "log_count": 40, "kv_keys": 500, "kv_ops": 40, "mr_size": "1M",
         "graph_vertices": 2000, "graph_edges": 20000, "graph_iterations": 3}


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--kernel", default="release", choices=KERNELS)
    ap.add_argument("--count", type=int, default=200, help="round trips per pair")
    ap.add_argument("--lmr-size", default="64M", help="the LMR round-tripped by node 0 (K, M, G suffixes)")
    ap.add_argument("--apps", help=f"only these applications, comma-separated ({','.join(APPS)}), or none")
    ap.add_argument("--log-count", type=int, default=500, help="lite-log entries per writer thread")
    ap.add_argument("--kv-keys", type=int, default=20000, help="lite-kv keys loaded")
    ap.add_argument("--kv-ops", type=int, default=500, help="lite-kv operations per client thread and mix")
    ap.add_argument("--mr-size", default="32M", help="lite-mr corpus size (K, M, G suffixes)")
    ap.add_argument("--graph-vertices", type=int, default=100_000)
    ap.add_argument("--graph-edges", type=int, default=1_000_000)
    ap.add_argument("--graph-iterations", type=int, default=10)
    ap.add_argument("--short", action="store_true",
                    help="every step at small sizes (" + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in SHORT.items())
                         + "): what make test runs")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    return ap


def parse_args(argv=None):
    ap = parser()
    args = ap.parse_args(argv)
    if args.short:
        for key, value in SHORT.items():
            setattr(args, key, value)
    args.app_list = APPS if args.apps is None else [a for a in args.apps.split(",") if a and a != "none"]
    unknown = [a for a in args.app_list if a not in APPS]
    if unknown:
        ap.error(f"unknown application(s) {', '.join(unknown)}: choose from {', '.join(APPS)}")
    return args


def showcase(c, nodes, args, started):
    """Everything after the join, on the running cluster `c`: returns the exit status."""
    results, native = [], None
    if args.apps is None:
        results, native = basics(c, nodes, args)
    app_rows = []
    for app in args.app_list:
        print(f"\n== lite-{app} on nodes {nodes} ==", flush=True)
        row = {"lite-log": demo_log, "lite-kv": demo_kv, "lite-mr": demo_mr,
               "lite-graph": demo_graph}[f"lite-{app}"](c, nodes, args)
        row["api_lines"], row["lines"] = api_lines(app)
        app_rows.append(row)
    if app_rows:
        print("\n== applications on liblite ==")
        print_apps_table(app_rows)
    splats = c.splats()
    if args.json:
        print(json.dumps({"nodes": len(nodes), "pings": results, "native_write_rtt": native,
                          "apps": app_rows, "kernel_bug_reports": len(splats)}))
    print(f"\nguest kernels: {'no bug reports' if not splats else f'{len(splats)} bug report lines!'}; "
          f"logs in {c.run}; {time.time() - started:.0f} s")
    return 1 if splats or not all(r["ok"] for r in app_rows) else 0


def main():
    args = parse_args()
    c = Cluster(REPO / "build" / "demo")
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))  # runs the finally below
    started = time.time()
    try:
        c.up(nodes=args.nodes, variant=args.kernel)
        nodes = list(range(args.nodes))
        c.join(nodes)
        print(f"\n== {args.nodes} nodes joined ({time.time() - started:.0f} s after start) ==", flush=True)
        return showcase(c, nodes, args, started)
    finally:
        c.down(quiet=True)


def basics(c, nodes, args):
    """Each node's view, pings between every pair beside ib_write_lat, an LMR round trip."""
    for n in nodes:
        print(f"\n-- node {n}: lite-admin status --")
        print(c.exec(n, "lite-admin status").out, end="")
    print(f"\n== kernel-to-kernel echo round trips, write-with-immediate each way ({args.count} per pair) ==")
    results = []
    for src in nodes:
        for dst in nodes:
            if src == dst:
                continue
            out = c.exec(src, f"lite-admin ping {dst} --count {args.count} --json", timeout=600).out
            r = json.loads(out)
            r["from"] = src
            results.append(r)
            print(f"  node {src} -> node {dst}: median {r['median_ns'] / 1000:8.0f} us   "
                  f"p99 {r['p99_ns'] / 1000:8.0f} us   min {r['min_ns'] / 1000:6.0f} us", flush=True)
    native = native_write_rtt(c, 1, 0, args.count)
    if native:
        print(f"  native ib_write_lat 0 -> 1 (8 B, as round trip): median {native['median_ns'] / 1000:8.0f} us   "
              f"p99 {native['p99_ns'] / 1000:8.0f} us   min {native['min_ns'] / 1000:6.0f} us")
    print(f"\n== a LITE memory region: {args.lmr_size}iB held by nodes 1 and 2, written and read back by node 0 "
          "(zero-copy RDMA, checksummed) ==")
    lmr = c.exec(0, f"lite-selftest lmr-integrity --size {args.lmr_size} --holders 1,2 --seed 1 2>/dev/null",
                 timeout=600).out
    print("  " + lmr.strip().splitlines()[-1])
    print(c.exec(0, "lite-admin status | grep memory:").out, end="")
    return results, native
