"""Integration tests of LITE memory regions (tools/vmtest.py): data round trips,
permissions, registered buffers, killed processes, the zeroed reserve, atomics,
locks and barriers, hostile arguments."""

import json
import time

import pytest

from litebench.cluster.cluster import Background
from litebench.vmtests.harness import check, check_no_lmr_state, integrity, json_summary, lmr_counts


@pytest.mark.big
def test_lmr_one_gib_round_trips_across_chunks_and_nodes(c):
    integrity(c, 0, 1 << 30, "0,1,2", 7, 1800)


def test_small_reads_are_timed_phase_by_phase(c):
    # The kernel counts each user-space LT_read of at most 4 KiB from another node
    # in its phases (LiteMemStat::read_phases), and only those; lite-bench lat puts
    # them beside the reads as it timed them.
    iters = 20
    res = c.exec(0, f"lite-bench lat --op read --holder 1 --sizes 8,4096,8192 --iters {iters} --warmup 2",
                 timeout=300)
    by_size = {r["size"]: r for r in json_summary(0, res, "lite-bench lat")["results"]}
    for size in (8, 4096):
        phases = by_size[size]["phases"]
        check(phases and phases["reads"] == iters, f"{size} B: {iters} reads counted: {phases}")
        inside = sum(phases[k] for k in ("pin_ns", "prepare_ns", "post_ns", "wire_ns", "notice_ns", "finish_ns"))
        check(min(phases[k] for k in ("pin_ns", "post_ns", "wire_ns")) > 0, f"{size} B: a phase is empty: {phases}")
        check(inside <= phases["mean_ns"], f"{size} B: the phases ({inside:.0f} ns) exceed the read as timed: {phases}")
        check(0 <= phases["slept_share"] <= 1, f"{size} B: {phases}")
        print(f"    {size} B: " + ", ".join(f"{k[:-3]} {phases[k] / 1e3:.1f} us" for k in
                                           ("pin_ns", "prepare_ns", "post_ns", "wire_ns", "notice_ns", "finish_ns",
                                            "outside_ns", "mean_ns")) + f", slept {phases['slept_share']:.0%}",
              flush=True)
    check(by_size[8192]["phases"] is None, f"8 KiB reads are not counted: {by_size[8192]}")


def test_small_reads_from_many_threads_are_right(c):
    # Small reads from other nodes land in a few staging pages per peer (verbs/staging.rs);
    # 12 threads outnumber a peer's 8 pages, so some reads pin their buffer instead.
    res = c.exec(0, "lite-selftest lmr-small-reads --holders 1,2 --threads 12 --reads 150 --seed 5", timeout=600)
    check("small-reads: ok" in res.out, res.out[-2000:])
    print("   ", res.out.strip().splitlines()[-1], flush=True)
    check_no_lmr_state(c)


@pytest.mark.big
def test_lmr_data_round_trips_across_chunks_and_nodes(c):
    integrity(c, 1, 64 << 20, "1", 3, 600)
    integrity(c, 0, (3 << 20) + 12345, "0,1,2", 5, 900)


def test_lmr_permissions_are_checked_by_the_master(c):
    serve = Background(c, 0, "perm", "lite-selftest lmr-serve perm-matrix --size 300000 --holders 1,2 "
                                     "--perm r --grant 2:rw")
    serve.wait_for("ready")
    c.exec(1, "lite-selftest lmr-client perm-matrix --perm r --check-pattern", timeout=300)
    c.exec(1, "lite-selftest lmr-client perm-matrix --perm w --expect-error EACCES")
    c.exec(1, "lite-selftest lmr-client perm-matrix --perm rw --expect-error EACCES")
    c.exec(2, "lite-selftest lmr-client perm-matrix --perm rw --write-pattern --check-pattern", timeout=300)
    c.exec(2, "lite-selftest lmr-client no-such-lmr --perm r --expect-error ENOENT")
    res = c.exec(1, "lite-selftest lmr-serve perm-matrix --size 4096 </dev/null", check=False)
    check(res.rc != 0 and ("EEXIST" in res.out.upper() or "taken" in res.out.lower()), f"duplicate name: {res.out}")
    mapped = Background(c, 1, "mapped", "lite-selftest lmr-client perm-matrix --perm r --hold")
    mapped.wait_for("mapped")
    mapped.send("read")
    mapped.wait_for("ok")
    serve.send("free")
    serve.wait_for("freed")
    mapped.send("read")
    mapped.wait_for("EIDRM")
    mapped.close()
    serve.close()
    c.exec(1, "lite-selftest lmr-client perm-matrix --perm r --expect-error ENOENT")
    check_no_lmr_state(c)


def test_lmr_registered_user_buffer_is_shared(c):
    # LT_register: other nodes read and write the registering process's own buffer.
    serve = Background(c, 0, "reg", "lite-selftest lmr-serve registered --size 300001 --register --perm rw")
    serve.wait_for("ready")
    c.exec(1, "lite-selftest lmr-client registered --perm r --check-pattern", timeout=300)
    serve.send("zero")
    serve.wait_for("zeroed")
    c.exec(2, "lite-selftest lmr-client registered --perm rw --write-pattern", timeout=300)
    serve.send("check")
    out = serve.wait_for("pattern ")
    check("pattern ok" in out, f"remote writes did not land in the registered buffer:\n{out}")
    serve.send("free")
    serve.wait_for("freed")
    serve.close()
    check_no_lmr_state(c)


@pytest.mark.big
def test_lmr_register_limit_is_64_mib(c):
    # Pinning 64 MiB is data-heavy on an emulated guest (a minute with KASAN): on the
    # kernels of the big suite.
    res = c.exec(1, "lite-selftest lmr-serve too-big --size 64M --register </dev/null; "
                    "lite-selftest lmr-serve too-big --size 65M --register </dev/null", check=False)
    check(res.rc != 0 and res.out.count("ready") == 1, f"register limit: {res.out}")
    check_no_lmr_state(c)


@pytest.mark.sanitizer_run
def test_lmr_killed_processes_release_everything(c):
    master = Background(c, 1, "victim", "lite-selftest lmr-serve victim --size 300000 --holders 0,1,2 --perm rw")
    master.wait_for("ready")
    mapper = Background(c, 2, "mapper", "lite-selftest lmr-client victim --perm rw --hold")
    mapper.wait_for("mapped")
    # Exits without freeing: its LMRs held here are released locally, those held by
    # node 2 in one list message.
    c.exec(0, "lite-selftest lmr-many 64 --size 4096", timeout=600)
    c.exec(0, "lite-selftest lmr-many 40 --size 4096 --holders 2", timeout=600)
    master.kill()
    mapper.send("read")
    mapper.wait_for("EIDRM")
    mapper.kill()
    check_no_lmr_state(c)


def reserve(c, node, args=""):
    return json.loads(c.exec(node, f"lite-admin reserve {args} --json", timeout=600).out.strip().splitlines()[-1])


def test_lmr_zeroed_reserve_feeds_allocations(c):
    # Node 1 zeroes 12 MiB ahead; an 8 MiB LMR held there takes two whole chunks from it.
    filled = reserve(c, 1, "12M --wait --timeout-s 500")
    check(filled["reserve_bytes"] == filled["reserve_target"] == 12 << 20, f"reserve not filled: {filled}")
    c.exec(0, "lite-selftest lmr-many 1 --size 8M --holders 1", timeout=600)
    used = reserve(c, 1, "--wait --timeout-s 500")
    check(used["reserve_used"] - filled["reserve_used"] == 8 << 20, f"not taken from the reserve: {filled} -> {used}")
    check(used["reserve_bytes"] == 12 << 20, f"reserve not refilled: {used}")
    res = c.exec(1, "lite-admin reserve 1T", check=False)
    check(res.rc != 0 and "beyond this node's LMR memory limit" in res.out, f"oversized reserve: {res.out}")
    released = reserve(c, 1, "0")
    check(released["reserve_bytes"] == released["reserve_target"] == 0, f"reserve not released: {released}")
    # Without a reserve, node 1's two CPUs zero the two chunks at once.
    c.exec(0, "lite-selftest lmr-many 1 --size 8M --holders 1", timeout=600)
    check_no_lmr_state(c)


@pytest.mark.big
def test_lmr_from_the_reserve_reads_zero_after_other_data(c):
    # The first run leaves its random data in freed pages that the reserve refills from;
    # the second LMR takes three whole chunks from the reserve and must read zero.
    integrity(c, 1, 16 << 20, "1", 11, 600)
    before = reserve(c, 1, "16M --wait --timeout-s 500")
    integrity(c, 1, (12 << 20) + 100, "1", 13, 600)
    after = reserve(c, 1, "0")
    check(after["reserve_used"] - before["reserve_used"] == 12 << 20, f"not taken from the reserve: {before} -> {after}")


def wait_lock_queued(c, count, timeout=120):
    """Waits until `count` callers wait for locks: queued at an owner, or on their
    node for its turn (locks/turns.rs)."""
    deadline = time.time() + timeout
    while (queued := sum(lmr_counts(c, n)["lock_queued"] for n in (0, 1, 2))) != count:
        check(time.time() < deadline, f"{queued} lock caller(s) wait, want {count}")
        time.sleep(0.5)


def lock_order(c, holder_node, offset, arrivals):
    """While `holder_node` holds the lock at `offset`, waiters (node, id) arrive one
    by one, each once the one before waits; each appends its id under the lock.
    Returns the ids in the order they got the lock."""
    holder = Background(c, holder_node, "holder", f"lite-selftest lock-hold locks --offset {offset}")
    holder.wait_for("locked")
    waiters = []
    for n, ident in arrivals:
        waiters.append((n, c.exec_async(n, f"lite-selftest lock-append locks --offset {offset} --id {ident}",
                                        timeout=600)))
        wait_lock_queued(c, len(waiters))
    holder.close()
    for n, job in waiters:
        json_summary(n, job.wait(), "lock-append")
    listed = [int(c.exec(0, f"lite-selftest atomic-read locks --offset {offset + 8 + 8 * i}").out.split()[-1])
              for i in range(len(arrivals) + 1)]
    check(listed[0] == len(arrivals), f"{listed[0]} appends, want {len(arrivals)}")
    return listed[1:]


def test_atomics_from_every_node_add_up_exactly(c):
    # The word lives at node 2: nodes 0 and 1 reach it over RDMA, node 2 through its
    # loopback QP, fetch-and-add and compare-and-swap loops at once. Only if every
    # increment was atomic against every other does the word end at before + total.
    master = Background(c, 1, "atomics", "lite-selftest lmr-serve atomics --size 64K --holders 2 --perm rw")
    master.wait_for("ready")
    word = "atomics --offset 4104"
    before = int(c.exec(0, f"lite-selftest atomic-read {word}").out.split()[-1])
    runs = [(0, "--threads 3 --count 30"), (1, "--threads 3 --count 20 --cas"),
            (2, "--threads 2 --count 30"), (2, "--threads 2 --count 15 --cas")]
    jobs = [(n, c.exec_async(n, f"lite-selftest atomic-count {word} {args}", timeout=900)) for n, args in runs]
    total = retries = 0
    for n, job in jobs:
        summary = json_summary(n, job.wait(), "atomic-count")
        total += summary["increments"]
        retries += summary["cas_retries"]
    after = int(c.exec(0, f"lite-selftest atomic-read {word}").out.split()[-1])
    check(total == 3 * 30 + 3 * 20 + 2 * 30 + 2 * 15, f"{total} increments reported")
    check(after == (before + total) % 2**64, f"word went from {before} to {after} after {total} increments")
    print(f"    {total} increments from 3 nodes (loopback at the holder), {retries} compare-and-swap retries",
          flush=True)
    master.close()
    check_no_lmr_state(c)


@pytest.mark.sanitizer_run
def test_locks_and_barriers_from_every_node(c):
    # Lock word at offset 0 and a plain counter at 8, held by node 2 (its callers go
    # through loopback): every node's threads increment the counter with LT_read and
    # LT_write under LT_lock, so it ends exact only with mutual exclusion. Then a
    # holder is killed while others wait, and back-to-back barriers with skewed arrivals.
    # Four threads per node keep completions arriving while other waiters poll: a
    # handler that touched an op after its waiter could see it done was a
    # use-after-free that KASAN reports here.
    master = Background(c, 1, "locks", "lite-selftest lmr-serve locks --size 4K --holders 2 --perm rw --zeroed")
    master.wait_for("ready")
    # Twelve threads contend throughout; ten increments each (120 in all) keep the
    # emulated debug guests' time in bounds.
    jobs = [(n, c.exec_async(n, "lite-selftest lock-count locks --threads 4 --count 10", timeout=900))
            for n in (0, 1, 2)]
    total = sum(json_summary(n, job.wait(), "lock-count")["increments"] for n, job in jobs)
    counter = int(c.exec(0, "lite-selftest atomic-read locks --offset 8").out.split()[-1])
    check(total == 120 and counter == 120, f"{total} increments reported, counter at {counter}, want 120")
    check(c.exec(0, "lite-selftest atomic-read locks").out.split()[-1] == "0", "lock word not free at the end")

    holder = Background(c, 0, "holder", "lite-selftest lock-hold locks --offset 16")
    holder.wait_for("locked")
    waiter = c.exec_async(1, "lite-selftest lock-count locks --offset 16 --count 3", timeout=600)
    time.sleep(3)
    holder.kill()
    summary = json_summary(1, waiter.wait(), "lock-count after the holder was killed")
    check(summary["increments"] == 3, f"waiter after a killed holder: {summary}")

    # FIFO: while node 0 holds the lock at 64, waiters arrive one by one from every
    # node; each appends its id under the lock, so the list is the order they got it.
    # The first caller of each node queues at the owner (node 2), the others wait for
    # their node's turn and queue when it comes (locks/turns.rs): 1 and 2 asked the
    # owner first, and each node's callers get the lock in the order they came.
    arrivals = [(1, 1), (2, 2), (0, 3), (1, 4), (2, 5)]
    order = lock_order(c, 0, 64, arrivals)
    check(sorted(order) == [1, 2, 3, 4, 5] and order[:2] == [1, 2], f"lock handed over out of order: {order}")
    for node in (1, 2):
        mine = [ident for n, ident in arrivals if n == node]
        check([i for i in order if i in mine] == mine, f"node {node}'s callers out of their order: {order}")
    # A node's second caller waits for its node's turn, not at the owner: node 2,
    # which asked the owner meanwhile, gets the lock before it.
    order = lock_order(c, 0, 192, [(1, 1), (1, 2), (2, 3)])
    check(order == [1, 3, 2], f"nodes' turns at the owner, then node 1's second caller: {order}")

    rounds = "lite-selftest barrier-rounds locks --offset 32 --participants 4 --rounds 4 --skew-ms 400"
    jobs = [(n, c.exec_async(n, rounds, timeout=900)) for n in (0, 1, 2, 2)]
    for n, job in jobs:
        summary = json_summary(n, job.wait(), "barrier-rounds")
        check(summary["rounds"] == 4 and summary["left_early"] == 0, f"node {n} barriers: {summary}")
    res = c.exec(1, "lite-selftest barrier-rounds locks --offset 48 --participants 2 --rounds 1 --timeout-ms 2000",
                 check=False)
    check(res.rc != 0 and "ETIMEDOUT" in res.out, f"a barrier nobody else reaches must time out: {res.out}")
    print(f"    {total} locked increments from 3 nodes, a killed holder's lock passed on, "
          f"{len(arrivals)} waiters served in their nodes' order, 4 barrier rounds",
          flush=True)
    master.close()
    check_no_lmr_state(c)


def test_lmr_hostile_arguments_get_clear_errnos(c):
    out = c.exec(0, "lite-selftest lmr-hostile 1", timeout=600).out
    check(" 0 failed" in out, out)
    check_no_lmr_state(c)
