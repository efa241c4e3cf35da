"""The queue at a bottleneck wire, sampled while a benchmark phase runs: what a
latency-class packet finds in front of it there (a packet arriving at random sees
the queue's time average).

A wired node's frames from the segment wait for the wire in its wirefilter's
receive socket (vwire.py). The segment's vde_switch sends them there from a
datagram socket of the wire's port, so that socket's send-buffer use
(`sock_diag`'s wqueue for unix sockets) is the bytes queued for the wire: the
kernel's memory for them, which this converts to bytes on the wire. The socket
lives in the switch's private network namespace, so the sampler runs there
(`nsenter`, as root).

Run as a program it is that sampler: `wire_queue.py --peer INODE --seconds S`
prints one JSON object (see `summarize`)."""

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_PEER, UDIAG_SHOW_RQLEN = 0x4, 0x10
UNIX_DIAG_PEER, UNIX_DIAG_RQLEN = 2, 4
# A full RoCE frame on the segment (1 KiB payload and its headers) and the kernel
# memory its skb takes in a unix datagram queue (seen here: every full frame 2304).
FRAME_BYTES = 1082
FRAME_TRUESIZE = 2304
SAMPLE_INTERVAL_S = 0.001


def diag_request(seq):
    """A netlink dump request for every unix socket's peer and queues."""
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN,
                      0xFFFFFFFF, 0xFFFFFFFF)
    return struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + req


def parse_dump(data):
    """{inode: (peer inode or None, send queue bytes)} from one netlink buffer, and
    whether it ended the dump. OSError on a netlink error."""
    sockets, done, off = {}, False, 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if kind == NLMSG_DONE:
            done = True
            break
        if kind == NLMSG_ERROR:
            raise OSError(-struct.unpack_from("=i", data, off + 16)[0], "sock_diag dump failed")
        body = data[off + 16:off + length]
        inode = struct.unpack_from("=I", body, 4)[0]
        peer, wqueue, attr = None, 0, 16
        while attr + 4 <= len(body):
            alen, atype = struct.unpack_from("=HH", body, attr)
            if alen < 4:
                break
            if atype == UNIX_DIAG_PEER:
                peer = struct.unpack_from("=I", body, attr + 4)[0]
            elif atype == UNIX_DIAG_RQLEN:
                wqueue = struct.unpack_from("=II", body, attr + 4)[1]
            attr += (alen + 3) & ~3
        sockets[inode] = (peer, wqueue)
        off += (length + 3) & ~3
    return sockets, done


def dump(sock, seq):
    sock.send(diag_request(seq))
    sockets = {}
    while True:
        part, done = parse_dump(sock.recv(1 << 16))
        sockets.update(part)
        if done:
            return sockets


def summarize(truesizes, rate):
    """The queue's samples (kernel bytes) as bytes and milliseconds on a wire of `rate`
    bytes/s: mean, p50, p90, p99 and max."""
    if not truesizes:
        return None
    wire = sorted(t * FRAME_BYTES / FRAME_TRUESIZE for t in truesizes)

    def pct(p):
        return wire[min(len(wire) - 1, int(p / 100 * len(wire)))]

    stats = {"mean": sum(wire) / len(wire), "p50": pct(50), "p90": pct(90), "p99": pct(99), "max": wire[-1]}
    return {"samples": len(wire), "bytes": {k: round(v) for k, v in stats.items()},
            "ms": {k: round(v / rate * 1000, 3) for k, v in stats.items()}}


def sample(peers, seconds, rate, interval=SAMPLE_INTERVAL_S):
    """Samples, for `seconds`, the send queue of the socket (in this network namespace)
    connected to one of `peers` (inodes); its summary."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    samples, seq = [], 1
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = [wq for peer, wq in dump(sock, seq).values() if peer in peers]
        seq += 1
        if found:
            samples.append(found[0])
        time.sleep(interval)
    return summarize(samples, rate)


def group_member(group, comm):
    """The pid of the process named `comm` in process group `group`, or None."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            pgid = int(fields[1].split()[2])
        except (OSError, IndexError, ValueError):
            continue
        if pgid == group and name == comm:
            return int(stat.parent.name)
    return None


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


# The two ends of a wire: the switch whose socket queues frames for it.
DIRECTIONS = {"to_node": "switch", "from_node": "port{node}"}


def start(cluster, node, seconds, delay=0.0):
    """Starts sampling both directions of node `node`'s wire queue for `seconds`
    from `delay` seconds on ({direction: Popen} for `finish`), or returns {} where
    it cannot: no rate-limited wire, no root (nsenter), or the processes gone."""
    wire = cluster.meta.get("wires", {}).get(str(node))
    groups = cluster.meta.get("groups", {})
    if not wire or not wire.get("rate") or os.geteuid() != 0 or not shutil.which("nsenter"):
        return {}
    wirefilter = group_member(groups.get(f"wire{node}", -1), "wirefilter")
    try:
        peers = socket_inodes(wirefilter) if wirefilter else set()
    except OSError:
        return {}
    if not peers:
        return {}
    options = ["--seconds", str(seconds), "--delay", str(delay), "--rate", str(wire["rate"])]
    options += [a for p in sorted(peers) for a in ("--peer", str(p))]
    samplers = {}
    for direction, group in DIRECTIONS.items():
        switch = group_member(groups.get(group.format(node=node), -1), "vde_switch")
        if switch is not None:
            argv = ["nsenter", f"--net=/proc/{switch}/ns/net", sys.executable, __file__] + options
            samplers[direction] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                   text=True)
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
    ap.add_argument("--peer", type=int, action="append", required=True,
                    help="inode of a socket of the wirefilter (repeatable)")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--rate", type=int, required=True, help="the wire's rate, bytes/s")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds to wait before sampling")
    args = ap.parse_args()
    time.sleep(args.delay)
    print(json.dumps(sample(set(args.peer), args.seconds, args.rate)))


if __name__ == "__main__":
    main()
