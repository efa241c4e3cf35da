"""Integration tests of what a peer's NIC lets it reach (tools/vmtest.py, debug build):
raw RDMA through LITE_IOC_REACH, past every check of the module. With
remote_access=chunks a freed LMR's key, an address outside every LMR or one past a
chunk, and a guessed key all fail at the NIC, nothing moves, and the node whose NIC
refused them counts them and fences the peer off; with global, the same key reaches
memory that was never given (docs/security.md)."""

import time

import pytest

from litebench.cluster.cluster import Background
from litebench.vmtests.harness import answer, check, peers_by_id, wait_peers

CANARY = "c5" * 64


def reach(c, n, tag):
    bg = Background(c, n, tag, "lite-selftest reach")
    bg.wait_for("ready")
    return bg


def extent(bg, lmr, k=0):
    """(node, addr, len, rkey) of extent k of LMR `lmr` of a reach process."""
    got = answer(bg, f"extent {lmr} {k}").split()
    check(got[0] == "extent", f"node {bg.n}: extent {lmr} {k}: {' '.join(got)}")
    return int(got[1]), int(got[2], 16), int(got[3]), int(got[4], 16)


def malloc(bg, size, holder):
    got = answer(bg, f"malloc {size} {holder}").split()
    check(got[0] == "lmr", f"node {bg.n}: malloc {size} on node {holder}: {' '.join(got)}")
    return int(got[1])


def refused(c, bg, command, victim):
    """`command` (a raw RDMA of bg's node to `victim`) must fail at the NIC with
    EACCES; the victim fences the attacker off, and both reconnect."""
    got = answer(bg, command)
    check(got == "EACCES", f"node {bg.n}: {command}: {got}, want EACCES (refused by node {victim}'s NIC)")
    wait_peers(c, victim, connected=[bg.n], timeout=120)
    wait_peers(c, bg.n, connected=[victim], timeout=120)


def remote_access(c, n):
    return c.status(n)["remote_access"]


@pytest.mark.fails_nodes
@pytest.mark.test_hooks
def test_peers_reach_only_what_they_were_given(c):
    # Node 0 attacks node 1 with raw RDMA. Each attempt must fail at node 1's NIC,
    # be counted there, and fence node 0 off until it reconnects.
    check(remote_access(c, 1) == "chunks", f"node 1 runs with remote_access={remote_access(c, 1)}")
    errors_before = peers_by_id(c, 1)[0]["access_errors"]
    epoch = c.status(1)["epoch"]
    victim, attacker = reach(c, 1, "reachv"), reach(c, 0, "reacha")
    try:
        canary = answer(victim, "canary").split()[1]
        # An LMR node 1 masters and holds: its key stays live whatever happens to node 0.
        own = malloc(victim, 65536, 1)
        _, own_addr, own_len, own_key = extent(victim, own)
        got = answer(attacker, f"read 1 {own_addr:#x} {own_key:#x} 8")
        check(got == "ok " + "00" * 8, f"a raw read of a live LMR under its key: {got}")

        # 1. A freed LMR's key, after the free returned; then the memory, reused or not,
        # holds nothing of the write.
        gone = malloc(attacker, 65536, 1)
        _, gone_addr, _, gone_key = extent(attacker, gone)
        check(answer(attacker, f"free {gone}") == "ok", "free")
        started = time.time()
        refused(c, attacker, f"write 1 {gone_addr:#x} {gone_key:#x} 64 0xab", victim=1)
        reconnected = time.time() - started
        again = malloc(victim, 65536, 1)
        _, again_addr, _, _ = extent(victim, again)
        check(answer(victim, f"check {again} 0") == "ok", "an LMR allocated after the refused write is not all zero")

        # 2. A page outside every LMR, under a live key.
        refused(c, attacker, f"read 1 {canary} {own_key:#x} 64", victim=1)
        # 3. An atomic on the first word past a chunk.
        refused(c, attacker, f"atomic 1 {own_addr + own_len:#x} {own_key:#x}", victim=1)
        # 4. A guessed key: the live one with another key byte.
        refused(c, attacker, f"write 1 {own_addr:#x} {own_key ^ 0x5a:#x} 8 0xee", victim=1)
        got = answer(victim, f"check {own} 0")
        check(got == "ok", f"node 1's LMR after a write under a guessed key: {got}")
        check(c.status(1)["epoch"] == epoch, "node 1, whose NIC refused the requests, was taken down for them")

        errors = peers_by_id(c, 1)[0]["access_errors"] - errors_before
        check(errors == 4, f"node 1 counted {errors} refused requests of node 0, want 4")
    finally:
        victim.close()
        attacker.close()
    print(f"    4 raw RDMAs refused by the NIC and counted, each fenced off and reconnected "
          f"(the first in {reconnected:.0f} s); memory reused after the free: "
          f"{'yes' if again_addr == gone_addr else 'no'}", flush=True)


@pytest.mark.fails_nodes
@pytest.mark.test_hooks
def test_a_global_rkey_reaches_what_was_never_given(c):
    # LITE's design, for comparison: one MR over all memory. The same key that
    # reaches an LMR reads a page no LMR contains, and past the end of a chunk.
    c.reload_module([0, 1], "remote_access=global", connected=[0, 1, 2])
    try:
        check(remote_access(c, 1) == "global", f"node 1 runs with remote_access={remote_access(c, 1)}")
        victim, attacker = reach(c, 1, "reachgv"), reach(c, 0, "reachga")
        try:
            canary = answer(victim, "canary").split()[1]
            live = malloc(attacker, 65536, 1)
            _, addr, length, key = extent(attacker, live)
            got = answer(attacker, f"read 1 {canary} {key:#x} 64")
            check(got == "ok " + CANARY, f"the global rkey did not read the canary page: {got}")
            got = answer(attacker, f"read 1 {addr + length:#x} {key:#x} 8")
            check(got.startswith("ok "), f"the global rkey did not read past the chunk: {got}")
            check(peers_by_id(c, 1)[0]["access_errors"] == 0, "node 1 counted refused requests with a global rkey")
        finally:
            victim.close()
            attacker.close()
        print("    a global rkey read a canary page outside every LMR and past a chunk's end", flush=True)
    finally:
        c.reload_module([0, 1], "", connected=[0, 1, 2])
