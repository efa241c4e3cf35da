"""The soak's workloads (tools/soak.py): the applications, lite-bench flows,
lmr-integrity runs, checked RPCs and atomics, each a generator that starts its
processes, yields, then checks what they did."""

from litebench.cluster.cluster import Background
from litebench.soak.common import OP_TIMEOUT, Lost, check, last_json, summary
from litebench.soak.kv import KV_BENCH_KEYS, KV_GROUPS, KV_SINGLES

# How long the log's writers and cleaner wait without progress before they fail.
# Each waits on a chain of the others' operations, and on a 1 % lossy wire one
# operation alone may take up to its deadline (30 s and more, see docs/reliability.md
# Reliability): lite-log's 30 s default failed once in a 30-minute soak (a 4 KiB
# ring held behind the lossy wire committed nothing for 28 s, with no error).
LOG_STALL_S = 120


class Workloads:
    """Workloads, a part of `Soak`: generators that start their processes, yield, then check."""

    def w_log(self, nodes):
        """A 4 KiB ring held by one node takes the writers' entries (several times its
        size) only because the cleaner consumes them; the cleaner checks every writer's
        sequence. Then a few more appends and a replay in order."""
        name, holder = self.tag("log"), self.pick(1, nodes)[0]
        owner = Background(self.c, self.pick(1, nodes)[0], name, f"lite-log create {name} --capacity 4K "
                                                                   f"--holder {holder}")
        try:
            owner.wait_for("ready")
            writers = self.pick(self.rng.randint(1, len(nodes)), nodes)
            runs = [(n, self.rng.randint(10, 30), self.rng.choice([16, 40, 100, 200]), 10 * i)
                    for i, n in enumerate(writers)]
            total = sum(count * 2 for _, count, _, _ in runs)
            cleaner_node = self.pick(1, nodes)[0]
            cleaner = self.c.exec_async(cleaner_node, f"lite-log clean {name} --expect {total} "
                                                      f"--stall-s {LOG_STALL_S} --json",
                                        timeout=OP_TIMEOUT)
            jobs = [(n, self.c.exec_async(n, f"lite-log append {name} --count {count} --size {size} --threads 2 "
                                             f"--writer {w} --stall-s {LOG_STALL_S} --json", timeout=OP_TIMEOUT))
                    for n, count, size, w in runs]
            yield
            commits = 0
            for n, job in jobs:
                commits += summary(n, job.wait(), "lite-log append")["commits"]
            res = cleaner.wait()
            cleaned = last_json(res) or {}
            if cleaned.get("out_of_order") or (cleaned and cleaned.get("entries") != total):
                raise Lost("log", cleaned.get("out_of_order", 0) + abs(total - cleaned.get("entries", 0)),
                           f"{commits} commits of {total}, cleaner saw {cleaned}")
            cleaned = summary(cleaner_node, res, "lite-log clean")
            check(commits == total and cleaned["writers"] == 2 * len(runs),
                  f"{commits} commits of {total}, cleaner saw {cleaned}")
            more = self.rng.randint(2, 6)
            n = self.pick(1, nodes)[0]
            self.c.exec(n, f"lite-log append {name} --count {more} --writer 99", timeout=OP_TIMEOUT)
            replay = summary(n, self.c.exec(n, f"lite-log replay {name} --json", timeout=OP_TIMEOUT, check=False),
                             "lite-log replay")
            if replay["entries"] != more or replay["out_of_order"] or replay["uncommitted_bytes"]:
                raise Lost("log", max(1, abs(more - replay["entries"]) + replay["out_of_order"]),
                           f"replay after {more} appends: {replay}")
            self.ops["log_entry"] += total + more
        finally:
            owner.close()

    def w_kv(self, nodes):
        """A group of keys loaded at its next version and read back exactly, a single key
        put and read, and a mixed bench over the bench keys whose every GET is checked."""
        group = self.rng.randrange(KV_GROUPS)
        loader, reader, bencher, single = (self.pick(1, nodes)[0] for _ in range(4))
        bench = self.c.exec_async(bencher, self.kv(f"bench --keys {KV_BENCH_KEYS} --prefix b- --ops "
                                                   f"{self.rng.randint(20, 60)} --threads 2 --read-pct "
                                                   f"{self.rng.choice([50, 80, 95])} --dist "
                                                   f"{self.rng.choice(['uniform', 'zipfian'])} --seed "
                                                   f"{self.rng.randrange(1 << 30)} --json"), timeout=OP_TIMEOUT)
        yield
        self.kv_load(loader, group, self.kv_versions[group] + 1)
        self.kv_verify(reader, group)
        key, value = f"s{self.rng.randrange(KV_SINGLES)}", f"r{self.round}-{self.rng.randrange(1 << 30):x}"
        self.kv_singles[key] = value
        self.c.exec(single, self.kv(f"put {key} {value}"), timeout=OP_TIMEOUT)
        got = self.c.exec(single, self.kv(f"get {key}"), timeout=OP_TIMEOUT, check=False)
        if got.out.strip() != value:
            raise Lost("kv", 1, f"GET {key} after PUT {value}: {got}")
        self.ops["kv_put"] += 1
        self.ops["kv_get"] += 1
        res = bench.wait()
        s = last_json(res)
        if s and s["wrong_values"]:
            raise Lost("kv", s["wrong_values"], f"node {bencher} lite-kv bench: {s}")
        s = summary(bencher, res, "lite-kv bench")
        self.ops["kv_get"] += s["gets"]
        self.ops["kv_put"] += s["puts"]

    def w_mr(self, nodes):
        """WordCount of a small corpus on the workers of 2-3 nodes, compared with the
        single-process count."""
        workers = sorted(self.pick(self.rng.randint(2, len(nodes)), nodes)) if len(nodes) > 1 else nodes
        bgs = [Background(self.c, n, self.tag(f"mr{n}"), "lite-mr worker --threads 2") for n in workers]
        try:
            for b in bgs:
                b.wait_for("ready")
            master = self.pick(1, workers)[0]
            corpus, out = f"/tmp/{self.tag('corpus')}", f"/tmp/{self.tag('wc')}"
            size = self.rng.choice(["24K", "48K", "96K"])
            self.c.exec(master, f"lite-mr gen {corpus} --size {size} --seed {self.rng.randrange(1000)}",
                        timeout=OP_TIMEOUT)
            job = self.c.exec_async(master, f"lite-mr run {corpus} {out} --nodes {','.join(map(str, workers))} "
                                            f"--maps {self.rng.randint(2, 5)} --reduces {self.rng.randint(1, 3)} "
                                            f"--check --json; rc=$?; rm -f {corpus} {out} {out}.reference; "
                                            "exit $rc", timeout=OP_TIMEOUT)
            yield
            res = job.wait()
            s = last_json(res)
            if s and not s.get("identical", False):
                raise Lost("mr", 1, f"word count differs from the reference: {s}")
            s = summary(master, res, "lite-mr run")
            check(s.get("identical") and s["words"] > 0, f"word count: {s}")
            self.ops["mr_job"] += 1
            self.volume["mr_words"] += s["words"]
        finally:
            for b in bgs:
                b.close()

    def w_graph(self, nodes):
        """PageRank of a small power-law graph by one worker per node, ranks in LMRs,
        checked against the single-process run."""
        workers = self.pick(self.rng.randint(2, len(nodes)), nodes) if len(nodes) > 1 else nodes
        holders = ",".join(map(str, sorted(self.pick(self.rng.randint(1, len(nodes)), nodes))))
        iterations = self.rng.randint(3, 6)
        graph = (f"--vertices {self.rng.choice([1000, 2000, 4000])} --edges {self.rng.choice([5000, 10000, 20000])} "
                 f"--seed {self.rng.randrange(1000)} --iterations {iterations} --workers {len(workers)} "
                 f"--name {self.tag('pr')} --json")
        jobs = [(n, self.c.exec_async(n, f"lite-graph run {graph} --rank {rank}" +
                                      (f" --holders {holders}" if rank == 0 else ""), timeout=OP_TIMEOUT))
                for rank, n in enumerate(workers)]
        yield
        results = [(n, job.wait()) for n, job in jobs]
        n0, res0 = results[0]
        s = last_json(res0)
        if s and s.get("max_diff", 0) > 1e-6:
            raise Lost("graph", 1, f"ranks differ from the reference: {s}")
        for n, res in results:
            summary(n, res, "lite-graph run")
        s = summary(n0, res0, "lite-graph run")
        check(s["iterations"] == iterations and s["max_diff"] <= 1e-6 and abs(s["rank_sum"] - 1) < 1e-6,
              f"pagerank: {s}")
        self.ops["graph_run"] += 1
        self.volume["graph_iterations"] += iterations

    def w_bench(self, nodes):
        """lite-bench flows: LT_write or LT_read of KiB to an LMR on a random node."""
        jobs = []
        for _ in range(self.rng.randint(1, 2)):
            n, holder = self.pick(1, nodes)[0], self.pick(1, nodes)[0]
            cls = self.rng.choice(["", " --class bulk"])
            jobs.append((n, self.c.exec_async(n, f"lite-bench --quiet flow --holder {holder} --size "
                                                 f"{self.rng.choice(['64', '1K', '4K', '16K'])} --op "
                                                 f"{self.rng.choice(['write', 'read'])} --seconds "
                                                 f"{self.rng.randint(3, 8)}{cls}", timeout=OP_TIMEOUT)))
        yield
        for n, job in jobs:
            s = summary(n, job.wait(), "lite-bench flow")
            check(s.get("bench") == "flow" and s["ops"] > 0, f"flow: {s}")
            self.ops["bench_op"] += s["ops"]

    def w_integrity(self, nodes):
        """An LMR spread over random holders written, read back and compared piece by
        piece, across chunk boundaries, memset and memcpy (checksummed)."""
        n = self.pick(1, nodes)[0]
        holders = ",".join(map(str, sorted(self.pick(self.rng.randint(1, len(nodes)), nodes))))
        size = self.rng.randint(32 << 10, 256 << 10)
        job = self.c.exec_async(n, f"lite-selftest lmr-integrity --size {size} --holders {holders} --seed "
                                   f"{self.rng.randrange(1 << 30)} --piece {self.rng.choice(['4099', '16K', '64K'])} "
                                   "--json 2>/dev/null", timeout=OP_TIMEOUT)
        yield
        res = job.wait()
        s = last_json(res)
        if s and not s["ok"] and any("MISMATCH" in p or "differ" in p.lower() for p in s["problems"]):
            raise Lost("integrity", len(s["problems"]), f"node {n}, holders {holders}: {s}")
        s = summary(n, res, "lmr-integrity")
        check(s["ok"], f"node {n}, holders {holders}: {s}")
        self.volume["integrity_bytes"] += size
        self.ops["integrity_run"] += 1

    def w_rpc(self, nodes):
        """A server checks every request and answers a pattern; callers from 1-3 nodes
        check every reply; one-way messages are all counted in."""
        server, rid = self.pick(1, nodes)[0], 100 + self.round % 100
        callers = [(n, self.rng.randint(3, 10), self.rng.choice([False, False, True]))
                   for n in self.pick(self.rng.randint(1, len(nodes)), nodes)]
        calls = sum(count * 2 for _, count, oneway in callers if not oneway)
        messages = sum(count * 2 for _, count, oneway in callers if oneway)
        serve = Background(self.c, server, self.tag("rpc"), f"lite-selftest rpc-serve {rid} --threads 2 "
                                                            f"--limit {calls + messages}")
        try:
            serve.wait_for("ready")
            jobs = [(n, self.c.exec_async(n, f"lite-selftest rpc-call {server} {rid} --count {count} --threads 2 "
                                             f"--size {self.rng.choice(['16', '1000', '5000'])} --reply "
                                             f"{self.rng.choice(['0', '64', '3000'])}"
                                             + (" --oneway" if oneway else ""), timeout=OP_TIMEOUT))
                    for n, count, oneway in callers]
            yield
            for n, job in jobs:
                res = job.wait()
                s = last_json(res)
                if s and s["failed"] and "corrupt" in (s.get("first_error") or ""):
                    raise Lost("rpc", s["failed"], f"node {n} rpc-call: {s}")
                s = summary(n, res, "rpc-call")
                check(s["failed"] == 0, f"node {n} rpc-call: {s}")
            out = serve.wait_for("served", timeout=OP_TIMEOUT)
            line = next(ln for ln in out.splitlines() if ln.startswith("served"))
            got_calls, got_messages, corrupt = (int(w) for w in line.split()[1:6:2])
            if corrupt or got_calls != calls or got_messages != messages:
                raise Lost("rpc", corrupt + abs(calls - got_calls) + abs(messages - got_messages),
                           f"server on node {server}: {line}, want {calls} calls, {messages} messages")
            self.ops["rpc_call"] += calls
            self.ops["rpc_message"] += messages
        finally:
            serve.close()

    def w_atomics(self, nodes):
        """Fetch-and-add and compare-and-swap loops from several nodes on one word, and
        increments under LT_lock on another: both must add up exactly."""
        name, holder = self.tag("atom"), self.pick(1, nodes)[0]
        master = Background(self.c, self.pick(1, nodes)[0], name, f"lite-selftest lmr-serve {name} --size 4K "
                                                                    f"--holders {holder} --perm rw --zeroed")
        try:
            master.wait_for("ready")
            adders = [(n, f"--threads 2 --count {self.rng.randint(5, 20)}" + self.rng.choice(["", " --cas"]))
                      for n in self.pick(self.rng.randint(1, len(nodes)), nodes)]
            lockers = [(n, f"--offset 64 --threads 2 --count {self.rng.randint(3, 8)}")
                       for n in self.pick(self.rng.randint(1, len(nodes)), nodes)]
            jobs = ([("add", n, self.c.exec_async(n, f"lite-selftest atomic-count {name} --offset 8 {a}",
                                                  timeout=OP_TIMEOUT)) for n, a in adders] +
                    [("lock", n, self.c.exec_async(n, f"lite-selftest lock-count {name} {a}", timeout=OP_TIMEOUT))
                     for n, a in lockers])
            yield
            added = locked = 0
            for what, n, job in jobs:
                s = summary(n, job.wait(), f"{what}-count")
                if what == "add":
                    added += s["increments"]
                else:
                    locked += s["increments"]
            want_added = sum(2 * int(a.split()[3]) for _, a in adders)
            want_locked = sum(2 * int(a.split()[5]) for _, a in lockers)
            check(added == want_added and locked == want_locked,
                  f"{added} of {want_added} adds, {locked} of {want_locked} locked increments reported")
            n = self.pick(1, nodes)[0]
            out = self.c.exec(n, f"for o in 8 64 72; do lite-selftest atomic-read {name} --offset $o; done").out
            word, lock, counter = (int(line.split()[-1]) for line in out.strip().splitlines()[-3:])
            if word != added or counter != locked or lock != 0:
                raise Lost("atomics", abs(word - added) + abs(counter - locked) + (lock != 0),
                           f"word {word} after {added} adds, counter {counter} after {locked} locked increments, "
                           f"lock word {lock}")
            self.ops["atomic_add"] += added
            self.ops["locked_increment"] += locked
        finally:
            master.close()
