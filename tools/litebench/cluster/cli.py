"""The virtual cluster's command line, tools/vcluster.py: its --help is the
cluster's description (cluster.py) and USAGE."""

import argparse
import json
import os
import sys

from litebench.cluster import cluster, wire
from litebench.cluster.cluster import DEFAULT_RUN, Cluster
from litebench.cluster.guest import KERNELS, PROVIDERS
from litebench.cluster.process import log

USAGE = """\
  vcluster.py up [--nodes 3] [--join]     boot a cluster and keep it
       [--bottleneck NODE:RATE[:QUEUE]]   NODE's port behind a RATE bytes/s queue (wire.py)
       [--wired LIST]                     those nodes' ports behind wires without limits
       [--segment bridge]                 tap ports on a bridge, tc links, MTU 9000 (no faults)
  vcluster.py fault N KEY=VALUE...        loss=1% burst=4 dup=0.5% delay=5ms[+JITTER] noise=8 (wires without a rate)
  vcluster.py partition N SECONDS         every frame to and from N lost, then healed
  vcluster.py status                      nodes and their wires
  vcluster.py exec N 'command'            run a command on node N
  vcluster.py shell N                     interactive shell on node N
  vcluster.py down                        end the cluster
"""


def main():
    ap = argparse.ArgumentParser(description=f"{cluster.__doc__}\n{USAGE}", formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", default=str(DEFAULT_RUN), help="cluster run directory (default build/cluster)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="boot a cluster and leave it running")
    up.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", 3)))
    up.add_argument("--kernel", default=os.environ.get("KERNEL", "release"), choices=KERNELS)
    up.add_argument("--mem", type=int, default=1536, help="MiB per guest")
    up.add_argument("--smp", type=int, default=int(os.environ.get("SMP", 2)), help="vCPUs per guest (default 2)")
    up.add_argument("--lifetime", type=int, default=4 * 3600, help="seconds before the guests are killed")
    up.add_argument("--join", action="store_true", help="load lite.ko, start the manager on node 0 and join all")
    up.add_argument("--bottleneck", action="append", default=[], metavar="NODE:RATE[:QUEUE]",
                    help="NODE's port behind a queue draining at RATE bytes/s (K, M, G: powers of 1024), "
                         f"QUEUE bytes deep (default {wire.DEFAULT_QUEUE >> 20}M: lossless); repeatable")
    up.add_argument("--segment", default="vde", choices=["vde", "bridge"],
                    help="vde (default: wirefilter links, faults, MTU 1500) or bridge (tc links, MTU 9000 for "
                         "RoCE MTU 4096; bottlenecks only)")
    up.add_argument("--provider", default=os.environ.get("PROVIDER", "rxe"), choices=list(PROVIDERS),
                    help="the guests' soft RDMA device: rxe (Soft-RoCE, default) or siw (Soft-iWARP; our kernels "
                         "only, Debian's has no siw)")
    up.add_argument("--wired", default="", metavar="LIST",
                    help="comma-separated nodes whose ports sit behind a wire without limits (for `fault`)")
    fa = sub.add_parser("fault", help="change node N's wire while it runs (see `fault -h`)",
                        description=wire.fault_commands.__doc__)
    fa.add_argument("node", type=int)
    fa.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    pa = sub.add_parser("partition", help="lose every frame to and from node N for SECONDS, then heal")
    pa.add_argument("node", type=int)
    pa.add_argument("seconds", type=float)
    st = sub.add_parser("status", help="the nodes and their wires")
    st.add_argument("--json", action="store_true")
    ex = sub.add_parser("exec", help="run a shell command on node N and print its output")
    ex.add_argument("node", type=int)
    ex.add_argument("command", nargs="+")
    ex.add_argument("--timeout", type=int, default=300)
    sh = sub.add_parser("shell", help="interactive shell on node N (leave with Ctrl-])")
    sh.add_argument("node", type=int)
    sub.add_parser("down", help="end the cluster")
    sub.add_parser("splats", help="print kernel bug reports found in the console logs")
    args = ap.parse_args()

    c = Cluster(args.run_dir)
    if args.cmd == "up":
        # A developer's cluster sees programs and modules rebuilt while it runs.
        wires = {n: (0, wire.DEFAULT_QUEUE) for n in (int(x) for x in args.wired.split(",") if x.strip())}
        try:
            wires.update({n: (rate, queue) for n, rate, queue in map(wire.parse_bottleneck, args.bottleneck)})
        except ValueError as e:
            ap.error(str(e))
        if args.smp < 1:
            ap.error("--smp: at least 1")
        c.up(args.nodes, args.kernel, mem=args.mem, smp=args.smp, lifetime=args.lifetime, cache_guest=False,
             wires=wires, segment=args.segment, provider=args.provider)
        if args.join:
            c.join(range(args.nodes), timeout=60)
            log("all nodes joined")
        log("run a command: tools/vcluster.py exec N 'lite-admin status'   shell: tools/vcluster.py shell N")
    elif args.cmd == "exec":
        res = c.exec(args.node, " ".join(args.command), timeout=args.timeout, check=False)
        sys.stdout.write(res.out)
        sys.exit(res.rc)
    elif args.cmd == "shell":
        sock = c.run / f"node{args.node}.shell"
        log("connected; Ctrl-] leaves")
        os.execvp("socat", ["socat", "-,raw,echo=0,escape=0x1d", f"UNIX-CONNECT:{sock}"])
    elif args.cmd == "fault":
        try:
            commands = wire.fault_commands(args.settings)
        except ValueError as e:
            ap.error(str(e))
        wire.apply(c.wire_mgmt(args.node), commands)
        log(f"node {args.node}'s wire: {', '.join(commands)}")
    elif args.cmd == "partition":
        wire.partition(c.wire_mgmt(args.node), args.seconds, log=lambda m: log(f"node {args.node}: {m}"))
    elif args.cmd == "status":
        wires = c.meta.get("wires", {})

        def wire_of(n):
            """A wire's settings: asked of a wire without a rate, as started for a
            rate-limited one (whose management socket takes no connection)."""
            w = wires.get(str(n))
            if w is None:
                return None
            if w["rate"]:
                return {"rate": w["rate"], "queue": w["queue"]}
            return {**wire.settings(c.wire_mgmt(n)), "queue": w["queue"]}

        nodes = {n: {"alive": c.alive(n), "wire": wire_of(n)} for n in c.meta.get("nodes", [])}
        if args.json:
            print(json.dumps({"run": str(c.run), "variant": c.meta.get("variant"), "smp": c.meta.get("smp"),
                              "segment": c.meta.get("segment", "vde"), "mtu": c.mtu(),
                              "nodes": nodes}, indent=1))
        else:
            print(f"{c.meta.get('variant')} kernel, {c.meta.get('smp')} vCPU(s) per guest, "
                  f"{c.meta.get('segment', 'vde')} segment, MTU {c.mtu()}")
            for n, st in nodes.items():
                w = st["wire"]
                shown = ("  ".join(f"{k} {v}" for k, v in w.items()) if w else "direct on the segment")
                print(f"node {n}: {'up' if st['alive'] else 'down'}  {shown}")
    elif args.cmd == "down":
        c.down()
    elif args.cmd == "splats":
        for n, line in c.splats():
            print(f"node{n}: {line}")

