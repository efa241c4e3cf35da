"""The priority-class benchmark's flows (tools/qos_bench.py): the nodes' roles, the
latency and bulk flows and the RPC flow's server as guest commands, and what the
flows' JSON says (their operations within a window of time, their bandwidth)."""

import shlex

# The sender and the holder only: a third guest, idle, still took 13-15 % of a host
# core (its emulated timers and agent), which the other two's NICs lack on a
# two-core host.
NODES = 2
SENDER, HOLDER = 0, 1
MODES = ["none", "hw-sep", "sw-pri"]
BULK_FLOWS = 2
# The latency class's flows (lite-bench flow --op OP), in the order they are reported.
LATENCY_OPS = {
    "write": {"size": 16, "label": "16 B LT_write"},
    "rpc": {"size": 16, "reply_size": 64, "label": "LT_RPC 16 B in, 64 B out"},
    "read": {"size": 64, "label": "64 B LT_read"},
}
BULK_OPS = {"write": "1 MiB LT_write", "read": "1 MiB LT_read"}
BULK_SIZE = 1 << 20
# The RPC flow's server on HOLDER (lite-bench's default id is the same).
RPC_ID = 32
RPC_SERVER_LOG = "/tmp/qos-rpc-server.log"
RPC_SERVER_PID = "/tmp/qos-rpc-server.pid"
INTERVAL_MS = 250


def in_latency_class(command):
    """`command` run by a shell that the operator puts in class latency (a process
    rule covers its children), which takes its rule away afterwards: a node keeps
    at most 64 rules, and a pass starts six latency flows."""
    return in_class("latency", command)


def in_class(klass, command):
    """`command` run by a shell that the operator puts in class `klass` (see
    in_latency_class)."""
    script = (f"lite-admin class set --pid $$ {klass} >/dev/null && {{ {command}; rc=$?; "
              f"lite-admin class unset --pid $$ >/dev/null; exit $rc; }}")
    return f"sh -c {shlex.quote(script)}"


def latency_flow(seconds, op="write", interval_ms=INTERVAL_MS, think_us=0):
    """A latency-class flow of LATENCY_OPS[op]: a pause of `think_us` after each
    operation, or back to back (0)."""
    spec = LATENCY_OPS[op]
    rpc = f" --reply-size {spec['reply_size']} --rpc-id {RPC_ID}" if op == "rpc" else ""
    return in_latency_class(f"lite-bench --quiet flow --holder {HOLDER} --op {op} --size {spec['size']}{rpc} "
                            f"--seconds {seconds} --interval-ms {interval_ms} --think-us {think_us}")


def bulk_flow(seconds, op="write", interval_ms=INTERVAL_MS):
    return (f"lite-bench --quiet flow --holder {HOLDER} --op {op} --size {BULK_SIZE} --seconds {seconds} "
            f"--class bulk --interval-ms {interval_ms}")


def rpc_server():
    """Starts the RPC flow's server on HOLDER in the background (in class latency: it
    answers the latency class) and waits until it has registered; it runs until
    the cluster goes down."""
    serve = in_latency_class(f"lite-bench serve --id {RPC_ID}")
    return (f"{serve} > {RPC_SERVER_LOG} 2>&1 < /dev/null & echo $! > {RPC_SERVER_PID}; i=0; "
            f"while [ $i -lt 300 ]; do grep -q 'serving RPC' {RPC_SERVER_LOG} && exit 0; "
            f"kill -0 $(cat {RPC_SERVER_PID}) 2>/dev/null || break; sleep 0.1; i=$((i + 1)); done; "
            f"cat {RPC_SERVER_LOG}; exit 1")


def parse_ops(text, known, what):
    """A comma-separated choice of `known`'s keys, in the order given; ValueError
    naming the flag otherwise."""
    ops = [o.strip() for o in text.split(",") if o.strip()]
    if not ops or any(o not in known for o in ops) or len(set(ops)) != len(ops):
        raise ValueError(f"{what}: a comma-separated choice of {','.join(known)}, each at most once")
    return ops


def bandwidth(flows, lo_ms, hi_ms):
    """MB/s of `flows` together over [lo_ms, hi_ms): each operation's bytes spread
    over the time it took (its interval's median latency, ending mid-interval), so
    that a 1 MiB operation that straddles an edge counts for its part within.
    Counted whole by when they completed, two 1 MiB writers that complete together
    read 3.60 to 4.09 MB/s over 6 s of a wire that passes 3.86."""
    if hi_ms <= lo_ms:
        return 0.0
    done = 0.0
    for f in flows:
        half_ms = f.get("interval_ms", INTERVAL_MS) / 2
        for b in f["timeline"]:
            end = f["started_unix_ms"] + b["t"] * 1000 + half_ms
            took = b["p50_ns"] / 1e6
            if took <= 0:
                share = 1.0 if lo_ms <= end < hi_ms else 0.0
            else:
                share = max(0.0, min(end, hi_ms) - max(end - took, lo_ms)) / took
            done += b["ops"] * op_bytes(f) * share
    return done / ((hi_ms - lo_ms) / 1000) / 1e6


def op_bytes(flow):
    """Bytes one operation of `flow` moves (an RPC's both ways, as lite-bench counts)."""
    return flow["size"] + flow.get("reply_size", 0)


def by_op(flows):
    """Latency flows as {op: flow}; a single flow's JSON is taken as the one flow."""
    if "timeline" in flows:
        return {flows.get("op", "write"): flows}
    return flows
