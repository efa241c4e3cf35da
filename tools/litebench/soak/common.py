"""What the soak's parts share (tools/soak.py): the exceptions that tell a failed
check from corrupt or lost items, and reading a command's JSON summary."""

import json

# How long one workload command may take on the emulated debug kernel.
OP_TIMEOUT = 600


class Failed(Exception):
    """An operation errored, or state was left behind."""


class Lost(Exception):
    """Items found corrupt or missing (`count` of them)."""

    def __init__(self, kind, count, msg):
        super().__init__(msg)
        self.kind, self.count = kind, count


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def summary(n, res, what):
    """The last JSON line of a command's output; Failed unless it exited 0 with one."""
    lines = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    if res.rc != 0 or not lines:
        raise Failed(f"node {n} {what}: rc {res.rc}: {res.out.strip()[-1500:]}")
    return json.loads(lines[-1])


def last_json(res):
    lines = [ln for ln in res.out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None
