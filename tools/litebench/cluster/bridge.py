"""The bridge segment: the guests' ports as tap devices on a Linux bridge inside a
private network namespace, and a bottleneck node's link a veth pair shaped by
`tc tbf` both ways. It carries jumbo frames, which vde2 drops (it passes at most
1500 bytes): with MTU 9000 rxe runs RoCE MTU 4096, as RoCE fabrics do, and each
byte costs the emulated NICs a quarter of the packets. On the 2-core host of
2026-11-27 that halved the sender's CPU for bulk at a 1 MiB/s link (docs/measurements/priority-classes.md: *The
host decides whether the wire is the bottleneck*).

Nothing here reaches the host's network: the namespace has no device but the
loopback, the bridges, the taps and the veths between them.

The segment holds no faults: those stay on the vde wires (`--wired`), whose
wirefilter changes loss and delay while it runs.
"""

# A tap, bridge and veth each take the segment's MTU.
JUMBO_MTU = 9000
# tbf's bucket: two frames, so a frame never waits for tokens it cannot hold.
FRAME_OVERHEAD = 200


def tbf(dev, rate, queue, mtu):
    """`tc` shaping `dev`'s egress to `rate` bytes/s behind a `queue`-byte FIFO."""
    return (f"tc qdisc add dev {dev} root tbf rate {rate * 8}bit burst {2 * (mtu + FRAME_OVERHEAD)} "
            f"limit {queue}")


def setup_script(mtu=JUMBO_MTU):
    """Shell commands that build the segment, bridge `seg`, in the current network
    namespace (the nodes' ports come with `port_script`)."""
    return f"set -e\nip link set lo up\nip link add seg type bridge\nip link set seg mtu {mtu} up\n"


def port_script(n, wire=None, mtu=JUMBO_MTU):
    """Shell commands that give node n its port `tap{n}` on the segment, unless it has
    one (a node that boots again keeps it). With `wire` (rate bytes/s, queue bytes)
    the port sits behind its own bridge `br{n}`, joined to `seg` by veth `wseg{n}`
    (its egress: toward the node) / `wnode{n}` (from the node)."""
    rate, queue = wire or (0, 0)
    lines = ["set -e", f"ip link show tap{n} >/dev/null 2>&1 && exit 0", f"ip tuntap add tap{n} mode tap"]
    if rate:
        lines += [f"ip link add br{n} type bridge",
                  f"ip link add wseg{n} type veth peer name wnode{n}",
                  f"ip link set wseg{n} mtu {mtu} master seg up",
                  f"ip link set wnode{n} mtu {mtu} master br{n} up",
                  f"ip link set tap{n} mtu {mtu} master br{n} up",
                  f"ip link set br{n} mtu {mtu} up",
                  tbf(f"wseg{n}", rate, queue, mtu),
                  tbf(f"wnode{n}", rate, queue, mtu)]
    else:
        lines.append(f"ip link set tap{n} mtu {mtu} master seg up")
    return "\n".join(lines) + "\n"
