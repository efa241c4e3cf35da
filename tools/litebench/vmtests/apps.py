"""Integration tests of the applications on liblite (tools/vmtest.py, big suite):
lite-log, lite-kv, lite-mr and lite-graph on three nodes, each checked, then the
demo's showcase in short."""

import time

import pytest

from litebench import demo
from litebench.cluster.cluster import Background
from litebench.vmtests.harness import check, check_no_lmr_state, check_no_rpc_state, json_summary


@pytest.mark.big
def test_app_lite_log_appends_from_every_node_in_order(c):
    # A 4 KiB ring held by node 2 takes 6 writers' 330 entries (about 17 KiB) only
    # because the cleaner (node 0) consumes and reclaims them; entries of 100 B
    # straddle the ring's end. The cleaner checks each writer's sequence.
    log = Background(c, 1, "applog", "lite-log create applog --capacity 4K --holder 2")
    log.wait_for("ready")
    cleaner = c.exec_async(0, "lite-log clean applog --expect 330 --json", timeout=600)
    runs = [(0, "--count 60 --threads 2 --writer 0"), (1, "--count 60 --threads 2 --writer 10"),
            (2, "--count 45 --threads 2 --writer 20 --size 100")]
    jobs = [(n, c.exec_async(n, f"lite-log append applog --json {args}", timeout=600)) for n, args in runs]
    commits = sum(json_summary(n, job.wait(), "lite-log append")["commits"] for n, job in jobs)
    cleaned = json_summary(0, cleaner.wait(), "lite-log clean")
    check(commits == 330 and cleaned["entries"] == 330 and cleaned["writers"] == 6 and cleaned["out_of_order"] == 0,
          f"{commits} commits, cleaner saw {cleaned}")
    c.exec(1, "lite-log append applog --count 5 --writer 30")
    replay = json_summary(2, c.exec(2, "lite-log replay applog --json"), "lite-log replay")
    check(replay["entries"] == 5 and replay["out_of_order"] == 0 and replay["uncommitted_bytes"] == 0,
          f"replay after 5 more appends: {replay}")
    print(f"    330 entries from 6 writers through a 4 KiB ring, cleaned in {cleaned['seconds']:.1f} s, "
          f"5 replayed", flush=True)
    log.close()
    check_no_lmr_state(c)


@pytest.mark.big
def test_app_lite_kv_one_sided_gets_and_rpc_puts(c):
    servers = [Background(c, n, f"kv{n}", "lite-kv serve --buckets 256") for n in (1, 2)]
    for s in servers:
        s.wait_for("ready")
    kv = "--servers 1,2"
    c.exec(0, f"lite-kv load {kv} --keys 400 --version 1", timeout=600)
    out = c.exec(1, f"lite-kv verify {kv} --keys 400 --exact 1 --json", timeout=600)
    check(json_summary(1, out, "lite-kv verify")["missing"] == 0, out.out)
    # Readers and writers at once, from every node: every GET must be a whole value of its key.
    runs = [(0, "--read-pct 50 --dist zipfian"), (1, "--read-pct 95 --dist uniform"), (2, "--read-pct 50")]
    jobs = [(n, c.exec_async(n, f"lite-kv bench {kv} --keys 400 --ops 150 --threads 2 --json {args}", timeout=600))
            for n, args in runs]
    for n, job in jobs:
        summary = json_summary(n, job.wait(), "lite-kv bench")
        check(summary["ops"] == 300 and summary["wrong_values"] == 0, f"node {n}: {summary}")
    c.exec(2, f"lite-kv verify {kv} --keys 400", timeout=600)
    c.exec(2, f"lite-kv put {kv} greeting hello-lite")
    check(c.exec(0, f"lite-kv get {kv} greeting").out.strip() == "hello-lite", "GET after PUT")
    c.exec(1, f"lite-kv delete {kv} greeting")
    res = c.exec(0, f"lite-kv get {kv} greeting", check=False)
    check(res.rc != 0 and "no such key" in res.out, f"GET after DELETE: {res.out}")
    res = c.exec(0, f"lite-kv put {kv} {'k' * 25} v", check=False)
    check(res.rc != 0 and "keys are 1 to 24 bytes" in res.out, f"oversized key: {res.out}")
    for s in servers:
        s.close()
    check_no_lmr_state(c)
    check_no_rpc_state(c)


@pytest.mark.big
def test_app_lite_mr_word_count_matches_the_reference(c):
    workers = [Background(c, n, f"mr{n}", "lite-mr worker") for n in (0, 1, 2)]
    for w in workers:
        w.wait_for("ready")
    c.exec(0, "lite-mr gen /tmp/corpus.txt --size 3M --seed 5", timeout=300)
    out = c.exec(0, "lite-mr run /tmp/corpus.txt /tmp/wc.out --nodes 0,1,2 --maps 7 --reduces 3 --check --json",
                 timeout=900)
    summary = json_summary(0, out, "lite-mr run")
    check(summary["identical"] and summary["words"] > 300_000, f"word count: {summary}")
    print(f"    {summary['words']} words ({summary['distinct_words']} distinct) in {summary['seconds']:.1f} s "
          f"on 3 nodes, reference {summary['reference_s']:.1f} s", flush=True)
    for w in workers:
        w.close()
    check_no_lmr_state(c)
    check_no_rpc_state(c)


@pytest.mark.big
def test_app_lite_graph_pagerank_matches_the_reference(c):
    # One worker per node, rank arrays spread over all three; 20 000 vertices and
    # 200 000 edges, 8 iterations, each ending in LT_barrier after an LT_lock'ed sum.
    graph = "--vertices 20000 --edges 200000 --seed 2 --iterations 8 --workers 3 --json"
    jobs = [(n, c.exec_async(n, f"lite-graph run {graph} --rank {n}" + (" --holders 0,1,2" if n == 0 else ""),
                             timeout=900)) for n in (0, 1, 2)]
    summaries = {n: json_summary(n, job.wait(), "lite-graph run") for n, job in jobs}
    first = summaries[0]
    check(first["iterations"] == 8 and first["max_diff"] <= 1e-6 and abs(first["rank_sum"] - 1) < 1e-6,
          f"pagerank: {first}")
    print(f"    8 iterations on 3 nodes in {first['seconds']:.1f} s, largest difference from the reference "
          f"{first['max_diff']:.1e}", flush=True)
    check_no_lmr_state(c)


@pytest.mark.big
def test_make_demo_runs_to_its_summary_in_short(c):
    # `make demo`'s own code after its join (tools/demo.py: views, pings beside
    # ib_write_lat, an LMR round trip, the four applications and the summary table),
    # at --short sizes, so that a broken showcase fails CI.
    args = demo.parse_args(["--short"])
    status = demo.showcase(c, [0, 1, 2], args, time.time())
    check(status == 0, f"the demo's showcase ended with status {status}")
    check_no_lmr_state(c)
    check_no_rpc_state(c)
