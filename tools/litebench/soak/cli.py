"""The LITE-RS soak (issue 22, item 6): the four applications and lite-bench
traffic on a joined three-node cluster for MINUTES, with churn, and every item
checked at the end.

Rounds run until the time is up. In each, a seeded RNG picks workloads (lite-log
appends through a small ring with a cleaner that checks every writer's sequence;
lite-kv loads, verified GETs and a mixed bench; a lite-mr word count checked against
its single-process reference; a lite-graph PageRank checked against its reference;
lite-bench flows; checksummed lmr-integrity runs; checked RPCs; fetch-and-adds and
locked increments that must add up exactly) and runs them at once on random nodes,
while it churns: processes killed mid-run (SIGKILL), LMRs allocated and freed (or
left to the kernel), priority class and QoS mode changes, and, every few rounds,
node 2 leaving and rejoining or a 1 % loss on node 2's wire. After each round every
node's LMR and RPC state must be back at its baseline (the kernel freed what the
killed processes held). At the end every lite-kv key must hold its last version
exactly, all state must be gone once the servers close, every node pings every
other, kmemleak (debug kernel) reports nothing of lite, and the consoles show no
kernel bug report.

Sizes are KiB, not MiB: Soft-RoCE moves ~0.2 MB/s on the emulated debug kernel.

  soak(cluster, minutes, seed) -> report        from a test, on a joined cluster
  tools/soak.py --kernel debug --minutes 3      boots its own cluster (run under
                                                `flock /tmp/lite-vm.lock`)

The report: minutes, rounds, operations per kind, faults injected per kind,
corrupt_or_lost (items found wrong or missing, per kind), failures (operations that
errored where they must not, state left behind), splats, and `passed`.
"""

import argparse
import json
import signal
import sys
import time

from litebench.cluster import wire
from litebench.cluster.cluster import CommandFailed, Cluster, REPO
from litebench.soak.report import human
from litebench.soak.rounds import soak
from litebench.vmtests.harness import TestFailed, print_console_tails
from litebench.vmtests.join import join_third_node, join_two_nodes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="debug", choices=["release", "debug"])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--run-dir", default=str(REPO / "build" / "soak"))
    args = ap.parse_args()

    cluster = Cluster(args.run_dir)

    def stop(signum, _frame):
        cluster.down(quiet=True)
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    report = None
    started = time.time()
    try:
        cluster.up(nodes=2, variant=args.kernel, mem=1024, wires={2: (0, wire.DEFAULT_QUEUE)})
        join_two_nodes(cluster)
        join_third_node(cluster)
        say(f"soak: cluster of 3 up and joined in {time.time() - started:.0f} s", flush=True)
        report = soak(cluster, args.minutes, args.seed, say=say)
    except (CommandFailed, TestFailed, SystemExit) as e:
        say(f"soak: the cluster failed: {e}", flush=True)
        print_console_tails(cluster)
    finally:
        cluster.down(quiet=True)
    if report is None:
        sys.exit(1)
    if not report["passed"]:
        print_console_tails(cluster)
    report["logs"] = str(cluster.run)
    print(json.dumps(report, indent=1) if args.json else human(report), flush=True)
    sys.exit(0 if report["passed"] else 1)
