"""The queue at a bottleneck wire, sampled while a benchmark phase runs: what a
latency-class packet finds in front of it there (a packet arriving at random sees
the queue's time average).

On the vde segment a wired node's frames from the segment wait for the wire in
its wirefilter's receive socket (wire.py). The segment's vde_switch sends them
there from a datagram socket of the wire's port, so that socket's send-buffer use
(`sock_diag`'s wqueue for unix sockets) is the bytes queued for the wire: the
kernel's memory for them, which this converts to bytes on the wire.

On the bridge segment (bridge.py) they wait in the `tc tbf` qdisc on the egress
of the link's veth: its backlog (rtnetlink's queue statistics) is bytes on the wire.

Either lives in a private network namespace, so the sampler runs there (`nsenter`,
as root). Run as a program it is that sampler: `python3 -m
litebench.cluster.wire_queue --peer INODE --seconds S` (vde) or `--dev NAME`
(bridge) prints one JSON object (see `summarize`)."""

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

from litebench.cluster.process import group_member

NETLINK_ROUTE, NETLINK_SOCK_DIAG = 0, 4
SOCK_DIAG_BY_FAMILY = 20
RTM_GETQDISC = 38
TC_H_ROOT = 0xFFFFFFFF
TCA_STATS2, TCA_STATS_QUEUE = 7, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_PEER, UDIAG_SHOW_RQLEN = 0x4, 0x10
UNIX_DIAG_PEER, UNIX_DIAG_RQLEN = 2, 4
# A full RoCE frame on the segment (1 KiB payload and its headers) and the kernel
# memory its skb takes in a unix datagram queue (seen here: every full frame 2304).
FRAME_BYTES = 1082
FRAME_TRUESIZE = 2304
SAMPLE_INTERVAL_S = 0.001
# The summary's timeline: the latency flows' interval (qos/flows.py: INTERVAL_MS).
TIMELINE_INTERVAL_S = 0.25
# The directory `spawn` runs the sampler from, as `python3 -m` finds this package there.
TOOLS = Path(__file__).resolve().parents[2]


def diag_request(seq):
    """A netlink dump request for every unix socket's peer and queues."""
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN,
                      0xFFFFFFFF, 0xFFFFFFFF)
    return struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + req


def messages(data, what):
    """The bodies of the netlink messages in one buffer, and whether it ended the
    dump. OSError on a netlink error."""
    bodies, off = [], 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if kind == NLMSG_DONE:
            return bodies, True
        if kind == NLMSG_ERROR:
            raise OSError(-struct.unpack_from("=i", data, off + 16)[0], f"{what} dump failed")
        bodies.append(data[off + 16:off + length])
        off += (length + 3) & ~3
    return bodies, False


def attributes(data, off):
    """(type, payload) of each netlink attribute in data[off:]."""
    while off + 4 <= len(data):
        alen, atype = struct.unpack_from("=HH", data, off)
        if alen < 4:
            return
        yield atype & 0x3FFF, data[off + 4:off + alen]
        off += (alen + 3) & ~3


def parse_dump(data):
    """{inode: (peer inode or None, send queue bytes)} from one netlink buffer, and
    whether it ended the dump. OSError on a netlink error."""
    bodies, done = messages(data, "sock_diag")
    sockets = {}
    for body in bodies:
        peer, wqueue = None, 0
        for atype, payload in attributes(body, 16):
            if atype == UNIX_DIAG_PEER:
                peer = struct.unpack_from("=I", payload)[0]
            elif atype == UNIX_DIAG_RQLEN:
                wqueue = struct.unpack_from("=II", payload)[1]
        sockets[struct.unpack_from("=I", body, 4)[0]] = (peer, wqueue)
    return sockets, done


def qdisc_request(seq):
    """A netlink dump request for every qdisc (with its statistics)."""
    tcmsg = struct.pack("=BBHiIII", socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0)
    return struct.pack("=IHHII", 16 + len(tcmsg), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + tcmsg


def parse_qdisc_dump(data):
    """{ifindex: backlog bytes} of the root qdiscs in one netlink buffer, and whether
    it ended the dump. OSError on a netlink error."""
    bodies, done = messages(data, "qdisc")
    backlogs = {}
    for body in bodies:
        _, _, _, ifindex, _, parent, _ = struct.unpack_from("=BBHiIII", body)
        if parent != TC_H_ROOT:
            continue
        for atype, payload in attributes(body, 20):
            if atype != TCA_STATS2:
                continue
            for stype, stats in attributes(payload, 0):
                if stype == TCA_STATS_QUEUE:
                    # struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits.
                    backlogs[ifindex] = struct.unpack_from("=II", stats)[1]
    return backlogs, done


def dump(sock, request, parse):
    sock.send(request)
    found = {}
    while True:
        part, done = parse(sock.recv(1 << 16))
        found.update(part)
        if done:
            return found


def summarize(samples, rate, interval_s=TIMELINE_INTERVAL_S):
    """The queue's samples ([(seconds since sampling began, bytes on the wire)]) in
    bytes and milliseconds on a wire of `rate` bytes/s: mean, p50, p90, p99 and max,
    and the mean per `interval_s` (ms) from the first sample's interval on."""
    if not samples:
        return None
    wire = sorted(q for _, q in samples)

    def pct(p):
        return wire[min(len(wire) - 1, int(p / 100 * len(wire)))]

    stats = {"mean": statistics.fmean(wire), "p50": pct(50), "p90": pct(90), "p99": pct(99), "max": wire[-1]}
    intervals = {}
    for t, q in samples:
        intervals.setdefault(int(t / interval_s), []).append(q)
    timeline = [round(statistics.fmean(qs) / rate * 1000, 2) if (qs := intervals.get(i)) else None
                for i in range(max(intervals) + 1)]
    return {"samples": len(wire), "bytes": {k: round(v) for k, v in stats.items()},
            "ms": {k: round(v / rate * 1000, 3) for k, v in stats.items()},
            "interval_ms": round(interval_s * 1000), "timeline_ms": timeline}


def socket_queue(peers):
    """A reader of the bytes on the wire queued in the unix socket (in this network
    namespace) connected to one of `peers` (inodes): None while there is none."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    seq = iter(range(1, 1 << 31))

    def read():
        found = [wq for peer, wq in dump(sock, diag_request(next(seq)), parse_dump).values() if peer in peers]
        return found[0] * FRAME_BYTES / FRAME_TRUESIZE if found else None
    return read


def qdisc_queue(dev):
    """A reader of the backlog of device `dev`'s root qdisc (in this network namespace)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    ifindex = socket.if_nametoindex(dev)
    seq = iter(range(1, 1 << 31))

    def read():
        return dump(sock, qdisc_request(next(seq)), parse_qdisc_dump).get(ifindex)
    return read


def sample(read, seconds, rate, interval=SAMPLE_INTERVAL_S):
    """Samples `read` (bytes queued, or None) every `interval` for `seconds`; its summary."""
    samples = []
    begin = time.monotonic()
    while (now := time.monotonic()) < begin + seconds:
        queued = read()
        if queued is not None:
            samples.append((now - begin, queued))
        time.sleep(interval)
    return summarize(samples, rate)


def socket_inodes(pid):
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


# The two ends of a wire: the switch whose socket queues frames for it (vde), the
# veth whose qdisc does (bridge: bridge.py).
DIRECTIONS = {"to_node": "switch", "from_node": "port{node}"}
BRIDGE_DEVICES = {"to_node": "wseg{node}", "from_node": "wnode{node}"}


def spawn(netns_pid, options):
    """The sampler (this module as a program) in process `netns_pid`'s network namespace."""
    argv = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", sys.executable, "-m", __name__] + options
    return subprocess.Popen(argv, cwd=TOOLS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def start(cluster, node, seconds, delay=0.0):
    """Starts sampling both directions of node `node`'s wire queue for `seconds`
    from `delay` seconds on ({direction: Popen} for `finish`), or returns {} where
    it cannot: no rate-limited wire, no root (nsenter), or the processes gone."""
    wire = cluster.meta.get("wires", {}).get(str(node))
    groups = cluster.meta.get("groups", {})
    if not wire or not wire.get("rate") or os.geteuid() != 0 or not shutil.which("nsenter"):
        return {}
    options = ["--seconds", str(seconds), "--delay", str(delay), "--rate", str(wire["rate"])]
    if cluster.meta.get("segment") == "bridge":
        netns = cluster.meta.get("netns")
        return {direction: spawn(netns, options + ["--dev", dev.format(node=node)])
                for direction, dev in BRIDGE_DEVICES.items()} if netns else {}
    wirefilter = group_member(groups.get(f"wire{node}", -1), "wirefilter")
    try:
        peers = socket_inodes(wirefilter) if wirefilter else set()
    except OSError:
        return {}
    if not peers:
        return {}
    options += [a for p in sorted(peers) for a in ("--peer", str(p))]
    samplers = {}
    for direction, group in DIRECTIONS.items():
        switch = group_member(groups.get(group.format(node=node), -1), "vde_switch")
        if switch is not None:
            samplers[direction] = spawn(switch, options)
    return samplers


def finish(samplers):
    """{direction: summary} of the samplers from `start` (a direction whose sampler
    failed is left out)."""
    out = {}
    for direction, proc in samplers.items():
        text, _ = proc.communicate()
        try:
            summary = json.loads(text.strip().splitlines()[-1]) if proc.returncode == 0 else None
        except (ValueError, IndexError):
            summary = None
        if summary:
            out[direction] = summary
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    queue = ap.add_mutually_exclusive_group(required=True)
    queue.add_argument("--peer", type=int, action="append",
                       help="vde: inode of a socket of the wirefilter (repeatable)")
    queue.add_argument("--dev", help="bridge: the device whose root qdisc queues for the wire")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--rate", type=int, required=True, help="the wire's rate, bytes/s")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds to wait before sampling")
    args = ap.parse_args()
    read = qdisc_queue(args.dev) if args.dev else socket_queue(set(args.peer))
    time.sleep(args.delay)
    print(json.dumps(sample(read, args.seconds, args.rate)))


if __name__ == "__main__":
    main()
