"""A node's port on the virtual segment behind a vde2 wirefilter: a rate-limited,
lossy or partitioned link that the virtual cluster can change while it runs.

On real RNICs the latency class waits in a queue at a port or a switch, behind bulk
bytes (RoCE runs lossless with PFC, so that queue is deep), and real links lose,
duplicate, delay and corrupt frames, or go away for a while. The plain segment does
none of that: one vde_switch forwards as fast as the host's cores go. A *wired* node
gets a port switch of its own, joined to the segment's switch by a wirefilter
(`wirefilter -v SEGMENT:PORT -M MGMT -s RATE`): its frames, both ways, pass a
queue that drains at `rate` bytes/s and holds `queue` bytes, and the wirefilter's
management socket changes loss, duplication, delay, bit errors and the rate while
it runs.

The rate is wirefilter's interface speed (`-s`): it reads the next frame only when
the last one has had its time on the wire, so the frames wait, in order, in its
socket's datagram queue, whose depth (frames) the wire's namespace sets from
`queue`. Its bandwidth limit (`-b`) queues inside instead, but lost frames at
4 MiB/s whatever its buffer (0.25 % of them; each lost tail costs RC a 2 s
retransmit timeout), where a RoCE fabric with PFC loses none.
"""

import re
import socket
import time

# Deep enough to be lossless at the rates used here (half a second of a 4 MiB/s
# wire, several times what the nodes keep in flight): RoCE's queues are, with PFC.
DEFAULT_QUEUE = 2 << 20
# A full frame on the segment (1 KiB of RoCE payload and its headers): the queue
# holds `queue / FRAME_BYTES` frames.
FRAME_BYTES = 1100


def queue_frames(queue):
    """The datagram queue (frames) of a wire `queue` bytes deep."""
    return max(16, queue // FRAME_BYTES)
SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMG]?)(?:i?B)?(?:/s)?$", re.IGNORECASE)
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text):
    """'4M' / '4MB/s' / '512K' / '1000' -> bytes (K, M, G are powers of 1024, as wirefilter's)."""
    m = SIZE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (a number with an optional K, M or G)")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def parse_bottleneck(text):
    """'NODE:RATE[:QUEUE]' -> (node, rate bytes/s, queue bytes)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit():
        raise ValueError(f"--bottleneck wants NODE:RATE[:QUEUE], not {text!r}")
    queue = parse_bytes(parts[2]) if len(parts) == 3 else DEFAULT_QUEUE
    return int(parts[0]), parse_bytes(parts[1]), queue


def _percent(value):
    v = float(value.rstrip("%"))
    if not 0 <= v <= 100:
        raise ValueError(f"a percentage is 0..100, not {value!r}")
    return f"{v:g}"


def _ms(value):
    return f"{float(value.removesuffix('ms')):g}"


# wirefilter damages a frame of `size` bytes with one more bit for as long as
# drand48() * 8 MiB < size * 8 * noise: from about 700 bits per MiB on, a full
# 1500-byte frame never leaves that loop, and the wire hangs (its management socket
# too). Below this a full frame takes 1 / (1 - 1500 * noise / 2^20) - 1 flips on average.
MAX_NOISE = 600


def _noise(value):
    """'200', or 'RL200' / 'LR200' for one direction (L: the segment, R: the node)."""
    direction = value[:2].upper() if value[:2].upper() in ("LR", "RL") else ""
    bits = int(value[len(direction):])
    if not 0 <= bits <= MAX_NOISE:
        raise ValueError(f"noise is 0..{MAX_NOISE} bits per MiB (wirefilter hangs on full frames above), not {value!r}")
    return f"{direction}{bits}"


# fault KEY=VALUE -> the wirefilter management command.
FAULTS = {
    "loss": lambda v: f"loss {_percent(v)}",
    "burst": lambda v: f"lostburst {float(v):g}",
    "dup": lambda v: f"dup {_percent(v)}",
    "delay": lambda v: f"delay {_ms(v)}",
    "noise": lambda v: f"noise {_noise(v)}",
}


def fault_commands(settings):
    """['loss=1%', 'delay=5ms+2', ...] -> management commands. `delay` takes MS or
    MS+JITTER (uniform); `burst` is the mean length of loss bursts (Gilbert model);
    `noise` bits damaged per MiB (RoCE's ICRC must catch them), RL or LR before the
    number for one direction only. The rate is set when
    the wire starts (`--bottleneck`): once it paces traffic, wirefilter's management
    socket accepts no more connections."""
    commands = []
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or key not in FAULTS:
            raise ValueError(f"fault settings are KEY=VALUE with KEY one of {', '.join(FAULTS)}, not {item!r}")
        if key == "delay" and "+" in value:
            base, jitter = value.split("+", 1)
            commands.append(f"delay {_ms(base)}+{_ms(jitter)}U")
        else:
            commands.append(FAULTS[key](value))
    return commands


class Mgmt:
    """A session on a wirefilter's management socket."""

    def __init__(self, path, timeout=5):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._read_until(b"$ ")

    def _read_until(self, marker):
        data = b""
        while marker not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("wirefilter closed its management socket")
            data += chunk
        return data.decode(errors="replace")

    def command(self, line):
        """Runs one command; returns what it printed. Raises unless it succeeded."""
        self.sock.sendall(line.encode() + b"\n")
        out = self._read_until(b"$ ")
        codes = re.findall(r"^(\d{4}) ", out, re.MULTILINE)
        if not codes or codes[-1] != "1000":
            raise RuntimeError(f"wirefilter refused {line!r}: {out.strip()}")
        _, data, rest = out.partition("0000 DATA END WITH '.'")
        return rest.split("\n.\n", 1)[0].strip() if data else ""

    def close(self):
        self.sock.close()


NUMBER = re.compile(r"^[\d.]+(?:e[+-]?\d+)?")


def base(value):
    """The value without its random part: '4.1943e+06+0U' -> 4194300.0."""
    return float(NUMBER.match(value).group(0))


def settings(mgmt_path):
    """The wire's current settings, from `showinfo`: {'loss': '1+0U/1+0U', ...}
    (left to right, then right to left)."""
    m = Mgmt(mgmt_path)
    try:
        info = m.command("showinfo")
    finally:
        m.close()
    out = {}
    names = {"Loss": "loss", "Lburst": "burst", "Delay": "delay", "Dup": "dup", "Speed": "rate",
             "Noise": "noise"}
    for line in info.splitlines():
        parts = line.split()
        if parts and parts[0] in names and "L->R" in parts and "R->L" in parts:
            out[names[parts[0]]] = f"{parts[parts.index('L->R') + 1]}/{parts[parts.index('R->L') + 1]}"
    return out


def apply(mgmt_path, commands):
    m = Mgmt(mgmt_path)
    try:
        for line in commands:
            m.command(line)
    finally:
        m.close()


def partition(mgmt_path, seconds, log=print):
    """Every frame lost both ways for `seconds`, then the loss the wire had before."""
    before = f"{base(settings(mgmt_path).get('loss', '0/0').split('/')[0]):g}"
    apply(mgmt_path, ["loss 100"])
    log(f"partitioned for {seconds:g} s")
    try:
        time.sleep(seconds)
    finally:
        apply(mgmt_path, [f"loss {before}"])
    log(f"healed (loss back to {before} %)")
