"""The soak itself (tools/soak.py): `Soak` runs rounds of workloads and churn until
the time is up, then the final checks, and returns the report."""

import random
import threading
import time
import traceback
from collections import Counter

from litebench.cluster import wire
from litebench.cluster.cluster import CommandFailed
from litebench.soak.checks import Checks
from litebench.soak.churn import Churn
from litebench.soak.common import Failed, Lost
from litebench.soak.kv import KV_GROUPS, KvStore
from litebench.soak.report import Report
from litebench.soak.workloads import Workloads

WORKLOADS = ["log", "kv", "mr", "graph", "bench", "integrity", "rpc", "atomics"]
# Workloads started together in one round (a deck: every one runs within two rounds).
PER_ROUND = 4
# Node 2's membership and link faults: in each three rounds, both in random order,
# then a round without (so a 3-minute run, two rounds on the debug kernel, has both).
BIG_FAULTS = ["loss", "leave"]
PROGRESS_S = 30


class Soak(KvStore, Workloads, Churn, Checks, Report):
    """One soak: the rounds and the bookkeeping here, the rest from the parts it is made of."""

    def __init__(self, c, seed, say=print):
        self.c, self.seed, self.say = c, seed, say
        self.rng = random.Random(seed)
        self.ops, self.volume, self.faults, self.corrupt = Counter(), Counter(), Counter(), Counter()
        self.failures, self.skipped = [], []
        self.round = self.rounds_done = 0
        self.rpc_victims = 0
        self.nodes = [0, 1, 2]
        self.kv_versions = {g: 0 for g in range(KV_GROUPS)}
        self.kv_singles = {}
        self.kv_servers = []
        self.baseline = {}
        self.deck, self.fault_deck = [], []
        self.started = time.time()
        self.wired = self._node2_wired()

    # ---- bookkeeping ----

    def _node2_wired(self):
        try:
            self.c.wire_mgmt(2)
            return True
        except SystemExit as e:
            self.skipped.append(f"1 % loss phases: {e}")
            return False

    def fail(self, msg):
        self.failures.append(f"round {self.round}: {msg}")
        self.say(f"  FAIL round {self.round}: {msg[:3000]}", flush=True)

    def lost(self, kind, count, msg):
        self.corrupt[kind] += count
        self.fail(f"{count} {kind} item(s) corrupt or lost: {msg}")

    def guarded(self, what, fn, *args):
        """Runs `fn`; a failed check is recorded (the soak goes on), a dead node is not caught."""
        try:
            return fn(*args)
        except Lost as e:
            self.lost(e.kind, e.count, f"{what}: {e}")
        except (Failed, CommandFailed) as e:
            self.dead_node_check()
            self.fail(f"{what}: {e}")
        return None

    def dead_node_check(self):
        dead = [n for n in self.c.meta.get("nodes", []) if not self.c.alive(n)]
        if dead:
            raise CommandFailed(f"node(s) {dead} died (see their consoles)")

    def pick(self, k=1, among=None):
        return self.rng.sample(among or self.nodes, k)

    def tag(self, what):
        return f"soak{self.round}{what}"

    def elapsed(self):
        return time.time() - self.started

    # ---- rounds ----

    def next_workloads(self):
        out = []
        while len(out) < PER_ROUND:
            if not self.deck:
                self.deck = self.rng.sample(WORKLOADS, len(WORKLOADS))
            w = self.deck.pop()
            if w not in out:
                out.append(w)
        return out

    def next_big_fault(self):
        if not self.fault_deck:
            self.fault_deck = [None] + self.rng.sample(BIG_FAULTS, len(BIG_FAULTS))
        fault = self.fault_deck.pop()
        return None if fault == "loss" and not self.wired else fault

    def run_round(self):
        self.round += 1
        big = self.next_big_fault()
        nodes = [0, 1] if big == "leave" else [0, 1, 2]
        kinds = self.next_workloads()
        churn = ["victim"] * self.rng.randint(1, 2) + self.rng.sample(["class", "mode", "lmr"], self.rng.randint(1, 3))
        self.say(f"soak round {self.round} ({self.elapsed():.0f} s): {', '.join(kinds)}; churn "
                 f"{', '.join(churn)}{'; node 2 ' + ('leaves and rejoins' if big == 'leave' else 'behind 1 % loss') if big else ''}",
                 flush=True)
        gens = []
        loss_at = None
        try:
            if big == "loss":
                wire.apply(self.c.wire_mgmt(2), wire.fault_commands(["loss=1%"]))
                loss_at = time.time()
                settings = wire.settings(self.c.wire_mgmt(2))
                if not all(wire.base(v) == 1 for v in settings.get("loss", "0/0").split("/")):
                    self.fail(f"node 2's wire did not take the loss: {settings}")
                self.faults["loss_phase"] += 1
            # Nodes are picked at random: most workloads cross node 2's wire somewhere.
            makers = {"log": self.w_log, "kv": self.w_kv, "mr": self.w_mr, "graph": self.w_graph,
                      "bench": self.w_bench, "integrity": self.w_integrity, "rpc": self.w_rpc,
                      "atomics": self.w_atomics, "victim": self.victim, "class": self.class_churn,
                      "mode": self.mode_churn, "lmr": self.lmr_churn}
            for what in kinds + churn:
                gen = makers[what](nodes)
                if self.guarded(f"starting {what}", self.step, gen, what):
                    gens.append((what, gen))
            time.sleep(self.rng.uniform(1, 4))
            if big == "leave":
                self.guarded("node 2 leaving and rejoining", self.leave_and_rejoin)
            # Churn first (kills mid-run), then every workload is finished and checked.
            order = [g for g in gens if g[0] not in WORKLOADS] + [g for g in gens if g[0] in WORKLOADS]
            for what, gen in order:
                self.guarded(f"{what}", self.step, gen, what)
            for what, gen in gens:
                if what == "victim":
                    self.guarded(f"{what}", self.step, gen, what)
        finally:
            for what, gen in gens:
                # Only after an abort: a workload still started is stopped.
                try:
                    gen.close()
                except (Failed, Lost, CommandFailed, RuntimeError) as e:
                    self.fail(f"stopping {what}: {e}")
            if loss_at is not None:
                wire.apply(self.c.wire_mgmt(2), ["loss 0"])
                self.faults["lossy_seconds"] += round(time.time() - loss_at)
        self.guarded("state after the round", self.wait_baseline)
        self.rounds_done += 1

    def step(self, gen, what):
        """Advances a workload or churn generator; False once it has finished."""
        try:
            next(gen)
            return True
        except StopIteration:
            return False

    def run(self, minutes, kmemleak=True):
        stop = threading.Event()

        def progress():
            while not stop.wait(PROGRESS_S):
                self.say(f"soak [{self.elapsed():5.0f} s of {minutes * 60:.0f}] round {self.round}: "
                         f"{sum(self.ops.values())} operations, {self.fault_total()} faults, "
                         f"{sum(self.corrupt.values())} corrupt or lost, {len(self.failures)} failures", flush=True)

        ticker = threading.Thread(target=progress, daemon=True)
        ticker.start()
        aborted = None
        try:
            self.start_kv()
            self.baseline = {n: self.state(n) for n in self.nodes}
            while self.elapsed() < minutes * 60:
                self.run_round()
            self.round += 1
            self.say(f"soak: {self.rounds_done} rounds in {self.elapsed():.0f} s; checking everything", flush=True)
            self.kv_final()
        except CommandFailed as e:
            aborted = str(e)
            self.fail(f"soak aborted: {e}")
        except Exception:
            aborted = traceback.format_exc()
            self.fail(f"soak aborted: {aborted}")
        finally:
            stop.set()
            for s in self.kv_servers:
                try:
                    s.close()
                except CommandFailed as e:
                    self.fail(f"closing a lite-kv server: {e}")
        if not aborted:
            self.guarded("state at the end", self.wait_all_gone)
            self.guarded("modes and class rules at the end", self.final_settings)
            self.guarded("pings between all nodes", self.pings)
            self.kmemleak_asked = kmemleak
            if kmemleak:
                self.guarded("kmemleak", self.kmemleak)
        return self.report(minutes)


def soak(cluster, minutes, seed, say=print, kmemleak=True):
    """Runs the soak for `minutes` on `cluster` (nodes 0, 1 and 2 joined; node 2 behind
    a wire without a rate for the loss phases, else they are skipped) and returns the
    report (see tools/soak.py); `report["passed"]` says whether all went right."""
    return Soak(cluster, seed, say).run(minutes, kmemleak=kmemleak)
