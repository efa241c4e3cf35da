#!/usr/bin/env python3
"""LITE-RS showcase (`make demo`): boot a virtual cluster, join every node through
the manager, show each node's view, ping every pair through the kernel, and round-trip
a memory region held by two other nodes."""

import argparse
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vcluster import Cluster, REPO  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--kernel", default="release", choices=["release", "debug"])
    ap.add_argument("--count", type=int, default=200, help="round trips per pair")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    c = Cluster(REPO / "build" / "demo")
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))  # runs the finally below
    started = time.time()
    try:
        c.up(nodes=args.nodes, variant=args.kernel)
        nodes = list(range(args.nodes))
        for n in nodes:
            c.load_module(n)
        c.start_manager(0)
        for n in nodes:
            c.start_agent(n)
        c.wait_connected(nodes, timeout=120)
        print(f"\n== {args.nodes} nodes joined ({time.time() - started:.0f} s after start) ==", flush=True)
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
        print("\n== a LITE memory region: 64 MiB held by nodes 1 and 2, written and read back by node 0 "
              "(zero-copy RDMA, checksummed) ==")
        lmr = c.exec(0, "lite-selftest lmr-integrity --size 64M --holders 1,2 --seed 1 2>/dev/null", timeout=600).out
        print("  " + lmr.strip().splitlines()[-1])
        print(c.exec(0, "lite-admin status | grep memory:").out, end="")
        splats = c.splats()
        if args.json:
            print(json.dumps({"nodes": args.nodes, "pings": results, "native_write_rtt": native,
                              "kernel_bug_reports": len(splats)}))
        print(f"\nguest kernels: {'no bug reports' if not splats else f'{len(splats)} bug report lines!'}; "
              f"logs in {c.run}; {time.time() - started:.0f} s")
        return 1 if splats else 0
    finally:
        c.down(quiet=True)


if __name__ == "__main__":
    sys.exit(main())
