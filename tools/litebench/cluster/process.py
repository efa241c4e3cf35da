"""How the virtual cluster's host processes run: the switch and the guests in
private network namespaces whose unix datagram queues are deep, with roomy send
buffers, and the rate-limited wires at real-time priority. Each falls back, with a
note, where the host does not allow it (not root). And how to find one of them by
its process group (`group_member`)."""

import contextlib
import subprocess
import sys
from pathlib import Path


def log(msg):
    """A note from the cluster's host side, on stderr."""
    print(f"vcluster: {msg}", file=sys.stderr, flush=True)


# Frames between the switch and qemu are unix datagrams, and Linux queues only
# net.unix.max_dgram_qlen (10 by default) of them per socket: a burst of RoCE packets
# overflows that and rxe stalls in retransmit timeouts (0.1 MB/s for 1 MB writes,
# perftest included). The switch and the guests therefore run in private network
# namespaces (which also keeps them off every host interface) with a deeper queue.
UNIX_DGRAM_QLEN = 1024
# A datagram queued to a guest also counts against its sender's send buffer (the
# switch sends everything through one socket): 208 KiB by default, about 90 packets
# for all guests together, which two bulk writers overflow (the same retransmit
# stalls). A socket takes its send buffer from net.core.wmem_default, which a
# private namespace cannot change, when it is created: see `roomy_send_buffers`.
SEND_BUFFER_BYTES = 8 << 20
WMEM_DEFAULT = Path("/proc/sys/net/core/wmem_default")
_netns_ok = None


def private_netns(argv, dgram_qlen=UNIX_DGRAM_QLEN):
    """`argv` wrapped to run in a new network namespace whose unix datagram sockets
    queue `dgram_qlen` frames; unchanged where namespaces are not allowed (not root)."""
    global _netns_ok
    setup = f"echo {dgram_qlen} > /proc/sys/net/unix/max_dgram_qlen"
    if _netns_ok is None:
        _netns_ok = subprocess.run(["unshare", "--net", "sh", "-c", setup], capture_output=True).returncode == 0
        if not _netns_ok:
            log("no private network namespace (needs root): RoCE bursts will be slow")
    if not _netns_ok:
        return argv
    return ["unshare", "--net", "sh", "-c", f'{setup} && exec "$@"', "sh"] + argv


# A rate-limited wirefilter sends a frame once the last one has had its time on the
# wire, waking from poll() for each; when it wakes late (the host's cores busy with
# the guests' vCPUs), the time lost is lost to the wire for good, so the wire drains
# slower, and its queue grows, as the host gets busier: a 1 MiB/s wire passed
# 0.85 MB/s of bulk writes, and 0.94 MB/s at real-time priority (its frames are 95 %
# of the wire's bytes). The wirefilter itself takes about 2 % of a core.
WIRE_RT_PRIORITY = 10
_rt_ok = None


def real_time(argv):
    """`argv` run at SCHED_FIFO priority `WIRE_RT_PRIORITY`; unchanged (with a note)
    where that is not allowed."""
    global _rt_ok
    chrt = ["chrt", "--fifo", str(WIRE_RT_PRIORITY)]
    if _rt_ok is None:
        _rt_ok = subprocess.run(chrt + ["true"], capture_output=True).returncode == 0
        if not _rt_ok:
            log("no real-time priority for the wires (needs CAP_SYS_NICE): their rate will sag with the host's load")
    return chrt + argv if _rt_ok else argv


@contextlib.contextmanager
def roomy_send_buffers():
    """Sockets created inside (the switch's and the guests' ends of the segment) get
    `SEND_BUFFER_BYTES` of send buffer. The host-wide default is raised only while
    they start and restored right after; nothing happens without the permission."""
    try:
        old = int(WMEM_DEFAULT.read_text())
        if old < SEND_BUFFER_BYTES:
            WMEM_DEFAULT.write_text(str(SEND_BUFFER_BYTES))
        else:
            old = None
    except (OSError, ValueError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            WMEM_DEFAULT.write_text(str(old))


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
