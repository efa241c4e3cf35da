"""Integration tests of LITE's RPC (tools/vmtest.py): checked calls from many processes
and threads, one-way messages, a server killed mid-call, hostile arguments, payloads
that wrap the ring, a slow server that fills it."""

import json
import time

import pytest

from litebench.cluster.cluster import Background
from litebench.vmtests.harness import check, check_no_rpc_state, rpc_calls


# (request, reply) sizes: 4 KiB is the largest reply that rides in its completion
# record (REPLY_INLINE_MAX), 4 KiB + 1 the smallest written into the caller's buffer
# first; 8 KiB spans pages of the caller's buffer.
RPC_SIZES = ((16, 8192), (5000, 0), (16, 64), (16, 4096), (16, 4097))


def test_rpc_calls_from_many_processes_and_threads_are_checked(c, sizes=RPC_SIZES):
    serve = Background(c, 1, "rpcsrv", "lite-selftest rpc-serve 7")
    serve.wait_for("ready")
    # Two processes x three threads on every node (node 1's own calls are local), at once.
    script = ("for p in 1 2; do lite-selftest rpc-call 1 7 --count 4 --threads 3 --size {size} --reply {reply} "
              "> /tmp/rc$p 2>&1 & done; wait; cat /tmp/rc1 /tmp/rc2")
    for size, reply in sizes:
        outs = []
        for n in (0, 1, 2):
            outs.append(c.exec_async(n, script.format(size=size, reply=reply)))
        for n, job in zip((0, 1, 2), outs):
            out = job.wait(timeout=900).out
            summaries = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
            check(len(summaries) == 2 and all(s["failed"] == 0 and s["calls"] == 12 for s in summaries),
                  f"node {n}, {size} B requests, {reply} B replies: {out[-2000:]}")
            for s in summaries:
                check(s["crossings_per_call"] <= 2.0, f"more than 2 crossings per call: {s}")
    print(f"    {len(sizes)} x 72 calls checked from nodes 0, 1 (local) and 2", flush=True)
    serve.close()
    check_no_rpc_state(c)


@pytest.mark.test_hooks
def test_an_inline_reply_is_taken_before_its_slot_is_reused(c):
    # Node 0's kernel holds each reply it handles for 30 ms once the call's slot is
    # free again, so that another thread's next call takes that slot and is
    # answered into the same mailbox slot meanwhile. Each caller must still get
    # its own reply, every byte checked: until the reply was copied before the
    # slot was let go, one call in a few hundred got another's (make bench, 8
    # threads), here most runs.
    serve = Background(c, 1, "holdsrv", "lite-selftest rpc-serve 22 --threads 2")
    serve.wait_for("ready")

    def hold(ms):
        out = c.exec(0, f"echo 'hold-replies {ms}' | lite-selftest reach").out
        check("ok" in out.split("ready", 1)[-1], f"hold-replies {ms}: {out}")

    hold(30)
    try:
        calls = rpc_calls(c, 0, "1 22 --count 10 --threads 4 --size 16 --reply 64", timeout=300)
    finally:
        hold(0)
        serve.close()
    check(calls["failed"] == 0 and calls["calls"] == 40, f"calls with their replies held: {calls}")
    check_no_rpc_state(c)


def test_rpc_one_way_messages_all_arrive(c):
    serve = Background(c, 1, "msgsrv", "lite-selftest rpc-serve 8 --limit 24")
    serve.wait_for("ready")
    for n in (0, 2):
        rpc_calls(c, n, "1 8 --oneway --count 4 --threads 3 --size 2000")
    out = serve.wait_for("served", timeout=300)
    check("0 calls, 24 messages, 0 corrupt" in out, out)
    serve.close()
    check_no_rpc_state(c)


def test_rpc_server_killed_mid_call_fails_its_callers(c):
    serve = Background(c, 1, "slowsrv", "lite-selftest rpc-serve 9 --delay-ms 600000")
    serve.wait_for("ready")
    caller = c.exec_async(0, "lite-selftest rpc-call 1 9 --count 1 --threads 3 --expect-error ECONNRESET")
    # The three requests are queued or being served when the server dies.
    deadline = time.time() + 120
    while c.status(1)["rpc"]["requests"] + 1 < 3:
        check(time.time() < deadline, f"requests never reached the server: {c.status(1)['rpc']}")
        time.sleep(0.5)
    t0 = time.time()
    serve.kill()
    out = caller.wait(timeout=120).out
    check('"failed":0' in out, f"callers of a killed server: {out}")
    check(time.time() - t0 < 30, f"callers took {time.time() - t0:.0f} s to learn that the server died")
    rpc_calls(c, 2, "1 9 --count 1 --expect-error ECONNREFUSED")
    check_no_rpc_state(c)


def test_rpc_hostile_arguments_get_clear_errnos(c):
    serve = Background(c, 2, "hostsrv", "lite-selftest rpc-serve 10")
    serve.wait_for("ready")
    out = c.exec(0, "lite-selftest rpc-hostile 2 10", timeout=600).out
    check(" 0 failed" in out, out)
    serve.close()
    check_no_rpc_state(c)


@pytest.mark.big
def test_rpc_payloads_up_to_4_mib_wrap_the_ring(c):
    serve = Background(c, 1, "bigsrv", "lite-selftest rpc-serve 20")
    serve.wait_for("ready")
    # 4 MiB requests and replies: 6 x 4 MiB through an 8 MiB ring wraps it three times.
    s = rpc_calls(c, 0, "1 20 --count 3 --threads 2 --size 4M --reply 4M", timeout=1200)
    print(f"    4 MiB both ways: {s['calls']} calls, p50 {s['p50_ns'] / 1e6:.0f} ms", flush=True)
    # Many small calls from two nodes at once wrap it again, out of order over K QPs.
    jobs = [c.exec_async(n, "lite-selftest rpc-call 1 20 --count 400 --threads 4 --size 5000 --reply 5000")
            for n in (0, 2)]
    for n, job in zip((0, 2), jobs):
        out = job.wait(timeout=1200).out
        check('"failed":0' in out, f"node {n}: {out[-2000:]}")
    for size, reply in (("0", "4M"), ("4M", "0"), ("1", "1"), ("4095", "4097")):
        rpc_calls(c, 2, f"1 20 --count 2 --size {size} --reply {reply}", timeout=600)
    serve.close()
    check_no_rpc_state(c)


@pytest.mark.big
def test_rpc_slow_server_fills_the_ring_and_nothing_is_lost(c):
    # 12 one-way messages of 1 MiB from each of two nodes against each node's 8 MiB
    # ring and a server that takes 400 ms per message: at most 8 fit, so a sender
    # finishes only after the server consumed at least 4 of its messages (1.6 s),
    # however fast the link; without flow control it would take about 0.6 s.
    serve = Background(c, 1, "slowring", "lite-selftest rpc-serve 21 --delay-ms 400 --limit 30")
    try:
        serve.wait_for("ready")
        jobs = [c.exec_async(n, "lite-selftest rpc-call 1 21 --oneway --count 6 --threads 2 --size 1M")
                for n in (0, 2)]
        slowest = 0
        for n, job in zip((0, 2), jobs):
            out = job.wait(timeout=900).out
            check('"failed":0' in out, f"node {n}: {out[-2000:]}")
            slowest = max(slowest, json.loads(out.strip().splitlines()[-1])["seconds"])
        check(slowest >= 1.5, f"senders finished in {slowest:.1f} s: they never waited for ring room")
        print(f"    senders blocked on the full ring for up to {slowest:.1f} s", flush=True)
        # Then calls, which queue behind the messages.
        rpc_calls(c, 0, "1 21 --count 6 --size 100K --reply 100K", timeout=900)
        out = serve.wait_for("served", timeout=900)
        check("6 calls, 24 messages, 0 corrupt" in out, out)
    finally:
        serve.close()
    check_no_rpc_state(c)
