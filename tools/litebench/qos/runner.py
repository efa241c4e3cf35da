"""The priority-class benchmark's passes on the cluster (tools/qos_bench.py): `Runner`
starts a pass's flows (or the hostile tenant's) and reads their JSON; `prepare` starts
the RPC flow's server and sets Target99."""

import threading
import time
from pathlib import Path

from litebench.bench.output import last_json
from litebench.cluster import wire_queue
from litebench.cluster.cluster import CommandFailed
from litebench.qos.flows import BULK_FLOWS, HOLDER, LATENCY_OPS, RPC_ID, SENDER, bulk_flow, latency_flow, rpc_server
from litebench.qos.hostile import (HOSTILE_ATTACKS, HOSTILE_LMRS, HOSTILE_SETUP_S, hostile_ready_script,
                                   hostile_report, hostile_script)

# The kernel's statistics of a phase leave out this much of its start and its end.
STATS_MARGIN_S = 0.5
# The host's cores emulate every guest and NIC: busier than this over a phase, they
# and not the wire may have been what the latency class waited for.
HOST_SATURATED = 0.85


def measured_seconds(seconds, late=0.0):
    """How much of a phase of `seconds` its statistics cover: all but its margins,
    and but the `late` seconds its flows took to start."""
    return max(0.1, seconds - 2 * STATS_MARGIN_S - late)


# What a guest reads twice around a phase (`node_cpu`): its uptime, to time the
# phase, from /proc/stat its CPU time, context switches and softirqs by kind, and its
# local timer interrupts (hrtimers expire in them: the HRTIMER softirq counts only
# the soft ones).
PROC_SAMPLE = "cat /proc/uptime; grep -E '^(cpu|ctxt|softirq) ' /proc/stat; grep 'LOC:' /proc/interrupts"
# The softirqs of /proc/stat's `softirq` line, after its total, in order.
SOFTIRQS = ("hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched", "hrtimer", "rcu")
# /proc/stat counts CPU time in these ticks a second (USER_HZ).
USER_HZ = 100


def _two(text, prefix, fields):
    """The first two lines of `text` that start with `prefix`, as lists of ints (the
    fields from `fields` on), or None."""
    lines = [line.split()[fields:] for line in text.splitlines() if line.startswith(prefix)]
    try:
        return [[int(x) for x in line] for line in lines[:2]] if len(lines) >= 2 else None
    except ValueError:
        return None


def cpu_busy(text):
    """The share of time a node's CPUs were busy between the first two `cpu` lines of
    /proc/stat in `text`: {"busy", "softirq", "irq", "system", "user"}, or None. Where
    `text` also has two uptimes and the `ctxt` and `softirq` lines (PROC_SAMPLE):
    "seconds" between them, "cpus", "ctxt_per_s", "softirqs_per_s" by kind and
    "local_timer_per_s"."""
    cpu = _two(text, "cpu ", 1)
    if cpu is None:
        return None
    d = [y - x for x, y in zip(cpu[0][:8], cpu[1][:8])]
    total = sum(d)
    if len(d) < 8 or total <= 0:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = d
    out = {"busy": 1 - (idle + iowait) / total, "softirq": softirq / total, "irq": irq / total,
           "system": system / total, "user": (user + nice) / total}
    uptimes = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.replace(".", "", 1).isdigit() for p in parts):
            uptimes.append(float(parts[0]))
    seconds = uptimes[1] - uptimes[0] if len(uptimes) >= 2 else 0
    if seconds <= 0:
        return out
    out["seconds"] = seconds
    out["cpus"] = round(total / (seconds * USER_HZ))
    ctxt = _two(text, "ctxt ", 1)
    if ctxt:
        out["ctxt_per_s"] = (ctxt[1][0] - ctxt[0][0]) / seconds
    irqs = _two(text, "softirq ", 2)
    if irqs:
        out["softirqs_per_s"] = {k: (b - a) / seconds for k, a, b in zip(SOFTIRQS, irqs[0], irqs[1])}
    loc = [line.split()[1:] for line in text.splitlines() if line.split()[:1] == ["LOC:"]]
    if len(loc) >= 2:
        counts = [sum(int(x) for x in fields if x.isdigit()) for fields in loc[:2]]
        out["local_timer_per_s"] = (counts[1] - counts[0]) / seconds
    return out


def target99_us(alone_flows, stats):
    """1.5 x the latency class's p99 alone as SW-Pri sees it (`lite-admin stats`),
    else as the slowest flow saw it."""
    classes = {c["class"]: c for c in (stats or {}).get("classes", [])}
    p99 = classes.get("latency", {}).get("p99_ns") or max(f["latency"]["p99_ns"] for f in alone_flows.values())
    return max(1, int(p99 * 1.5 / 1000))


class Runner:
    def __init__(self, c, timeout, think_us=0):
        """`think_us`: the latency flows' pause after each operation (0: back to back)."""
        self.c, self.timeout, self.think_us = c, timeout, think_us

    def flow(self, job, what):
        res = job.wait()
        data = last_json(res.out)
        if res.rc != 0 or data is None:
            raise CommandFailed(f"{what} exited {res.rc}: {res.out.strip()[-1500:]}")
        if not data.get("ops"):
            raise CommandFailed(f"{what} completed no operation in its {data.get('seconds')} s")
        return data

    def flows(self, jobs):
        """Waits for every job of {key: (job, what)}, then raises the first failure, so
        that no flow of a failed pass still runs into the next one."""
        out, failed = {}, None
        for key, (job, what) in jobs.items():
            try:
                out[key] = self.flow(job, what)
            except CommandFailed as e:
                failed = failed or e
        if failed:
            raise failed
        return out

    def phase_stats(self, seconds, late=0.0):
        """`lite-admin stats --json` over a phase of `seconds` that started `late`
        seconds ago, less its margins (a job): SW-Pri's state at its end, and the means
        of the kernel's phases of the latency class's one-sided operations within it."""
        interval_ms = int(measured_seconds(seconds, late) * 1000)
        return self.c.exec_async(SENDER, f"sleep {STATS_MARGIN_S}; lite-admin stats --json --interval-ms {interval_ms}",
                                 timeout=self.timeout)

    def node_cpu(self, node, seconds, late=0.0):
        """Node `node`'s /proc/stat around a phase of `seconds` that started `late`
        seconds ago, less its margins (a job; `cpu_busy` reads it)."""
        script = f"sleep {STATS_MARGIN_S}; {PROC_SAMPLE}; sleep {measured_seconds(seconds, late)}; {PROC_SAMPLE}"
        return self.c.exec_async(node, script, timeout=self.timeout)

    @staticmethod
    def host_cpu(seconds, late=0.0):
        """This host's /proc/stat around a phase of `seconds` that started `late`
        seconds ago, less its margins (a job; `cpu_busy` reads it)."""
        return HostStat(measured_seconds(seconds, late))

    def latency_flows(self, ops, seconds, phase="alone"):
        """Starts the latency flows of `ops` at once: {op: (job, what)}."""
        return {op: (self.c.exec_async(SENDER, latency_flow(seconds, op, think_us=self.think_us), timeout=self.timeout),
                     f"latency flow {op} {phase}") for op in ops}

    def latency_started(self, launched, seconds):
        """Waits until SENDER's kernel sees latency traffic (at most half of a phase of
        `seconds` launched at `launched`, host time) and returns how late that is.
        Until then the bulk flows beside are not paced, and their window fills the
        wire's queue: a queue sampled from the launch on, when the flows took a second
        to start on a busy sender, counted that (p99 50 ms at any SafeUtil)."""
        while time.time() - launched < seconds / 2:
            stats = last_json(self.c.exec(SENDER, "lite-admin stats --json").out) or {}
            if stats.get("latency_active"):
                break
            time.sleep(0.05)
        return time.time() - launched

    def serve_rpc(self):
        """The RPC flow's server on HOLDER (until the cluster goes down)."""
        self.c.exec(HOLDER, rpc_server(), timeout=60)

    def find_link(self, seconds):
        """The bulk writers alone for `seconds` (at least two of SW-Pri's 2 s
        delivery intervals, 5 s at least): SENDER's SW-Pri finds its link's rate.
        Returns the seconds they ran."""
        seconds = max(seconds, 5)
        self.flows({i: (self.c.exec_async(SENDER, bulk_flow(seconds, "write"), timeout=self.timeout),
                        "bulk flow write, finding the link") for i in range(BULK_FLOWS)})
        return seconds

    def mode(self, mode, seconds, bulk_op="write", latency_ops=tuple(LATENCY_OPS)):
        """One pass: the latency flows alone, then bulk flows of `bulk_op` for 3 phases
        with the latency flows in the middle one. Returns ({op: flow} alone, {op: flow}
        beside bulk, [bulk flow], {"alone": stats, "beside": stats, "wire_queue": queue,
        "holder_cpu": busy, "sender_cpu": busy, "host_cpu": busy, "sender_cpu_alone":
        busy}: the kernel's statistics over each latency phase, SW-Pri's state at its
        end, and beside bulk the holder's wire queue (cluster/wire_queue.py; {} on the plain
        segment) and how busy its CPU, the sender's and this host's were (`cpu_busy`),
        and how busy the sender was with the latency flows alone.)"""
        self.c.exec(SENDER, f"lite-admin mode {mode}")
        alone_jobs = self.latency_flows(latency_ops, seconds)
        alone_stats = self.phase_stats(seconds)
        sender_alone = self.node_cpu(SENDER, seconds)
        alone = self.flows(alone_jobs)
        bulks = {i: (self.c.exec_async(SENDER, bulk_flow(3 * seconds, bulk_op), timeout=self.timeout),
                     f"bulk flow {bulk_op}") for i in range(BULK_FLOWS)}
        time.sleep(seconds)
        launched = time.time()
        both_jobs = self.latency_flows(latency_ops, seconds, "beside bulk")
        late = self.latency_started(launched, seconds)
        both_stats = self.phase_stats(seconds, late)
        queue = wire_queue.start(self.c, HOLDER, measured_seconds(seconds, late), delay=STATS_MARGIN_S)
        holder_cpu = self.node_cpu(HOLDER, seconds, late)
        sender_cpu = self.node_cpu(SENDER, seconds, late)
        host_cpu = self.host_cpu(seconds, late)
        flows = self.flows({**{("latency", op): job for op, job in both_jobs.items()},
                            **{("bulk", i): job for i, job in bulks.items()}})
        both = {op: flows[("latency", op)] for op in latency_ops}
        bulk = [flows[("bulk", i)] for i in range(BULK_FLOWS)]
        stats = {"alone": last_json(alone_stats.wait().out), "beside": last_json(both_stats.wait().out),
                 "wire_queue": wire_queue.finish(queue), "holder_cpu": cpu_busy(holder_cpu.wait().out),
                 "sender_cpu": cpu_busy(sender_cpu.wait().out),
                 "sender_cpu_alone": cpu_busy(sender_alone.wait().out),
                 "host_cpu": cpu_busy(host_cpu.wait())}
        return alone, both, bulk, stats

    def hostile(self, mode, attack, seconds, latency_ops=tuple(LATENCY_OPS), lmrs=HOSTILE_LMRS, tag="qos-hostile"):
        """One pass against a hostile tenant: the latency flows alone, then the tenant
        of `attack` for 3 phases from when it is ready, with the latency flows in the
        middle one. Returns ({op: flow} alone, {op: flow} beside the tenant, what the
        tenant reported and its exit status (`rc`: a tenant that fails after the latency
        flows ran still makes a pass, to be flagged), SW-Pri's state halfway, and the
        holder's wire queue while the latency flows ran (cluster/wire_queue.py; {} on the
        plain segment))."""
        self.c.exec(SENDER, f"lite-admin mode {mode}")
        alone = self.flows(self.latency_flows(latency_ops, seconds))
        log = f"/tmp/{tag}.log"
        # A previous pass's status would say this tenant had ended.
        self.c.exec(SENDER, f"rm -f {log} {log}.rc")
        tenant = self.c.exec_async(SENDER, hostile_script(attack, 3 * seconds, log, lmrs),
                                   timeout=self.timeout + HOSTILE_SETUP_S)
        failed, beside, pacing, queue = None, {}, None, {}
        try:
            marker = HOSTILE_ATTACKS[attack].get("ready")
            if marker:
                self.c.exec(SENDER, hostile_ready_script(log, marker), timeout=HOSTILE_SETUP_S)
            time.sleep(seconds)
            jobs = self.latency_flows(latency_ops, seconds, "beside the hostile tenant")
            queue = wire_queue.start(self.c, HOLDER, seconds)
            time.sleep(seconds / 2)
            pacing = last_json(self.c.exec(SENDER, "lite-admin stats --json").out)
            beside = self.flows(jobs)
        except CommandFailed as e:
            failed = e
        res = tenant.wait()
        queue = wire_queue.finish(queue)
        if failed:
            raise failed
        return alone, beside, {**hostile_report(res.out), "rc": res.rc}, pacing, queue


def prepare(c, runner, args, latency_ops, results):
    """The RPC flow's server, Target99 and the link rate override on the joined
    cluster; returns the absolute Target99 in us. With `--target-ratio` (the
    default) Target99 is relative: the kernel's p99 of the latency class alone times
    the ratio, and the absolute one (measured in none mode unless given) applies only
    until the kernel knows that p99."""
    if "rpc" in latency_ops:
        print(f"RPC server: lite-bench serve --id {RPC_ID} on node {HOLDER}", flush=True)
        runner.serve_rpc()
    ratio = args.target_ratio if args.target_us is None else 0
    c.exec(SENDER, f"lite-admin target --ratio {ratio:g}")
    target_us = args.target_us
    if target_us is None:
        # Twice: the first phase after boot is slower (one run: p99 49 ms against
        # 16-30 ms later), and SW-Pri's window holds the last 1024 samples, the second's.
        print("[0] latency flows alone, twice, to set Target99 from the second ...", flush=True)
        c.exec(SENDER, "lite-admin mode none")
        for _ in range(2):
            probe = runner.flows(runner.latency_flows(latency_ops, args.seconds))
        target_us = target99_us(probe, last_json(c.exec(SENDER, "lite-admin stats --json").out))
    c.exec(SENDER, f"lite-admin target --us {target_us}")
    if args.link_mbps:
        c.exec(SENDER, f"lite-admin weights --link-mbps {args.link_mbps}")
        results["config"]["link_mbps"] = args.link_mbps
    if args.chunk_kib:
        c.exec(SENDER, f"lite-admin weights --chunk-kib {args.chunk_kib}")
        results["config"]["chunk_kib"] = args.chunk_kib
    results["config"]["target99_us"] = target_us
    results["config"]["target99_ratio"] = ratio or None
    print(f"Target99 {f'{ratio:g} x the p99 alone the kernel measures, ' if ratio else ''}"
          f"{target_us / 1000:.2f} ms{' until it is known' if ratio else ''}", flush=True)
    return target_us


class HostStat:
    """The first line of this host's /proc/stat after STATS_MARGIN_S and again
    `seconds` later, read in a thread; `wait` returns both."""

    def __init__(self, seconds, path=Path("/proc/stat")):
        self.lines = []
        self.thread = threading.Thread(target=self._read, args=(seconds, path), daemon=True)
        self.thread.start()

    def _read(self, seconds, path):
        for pause in (STATS_MARGIN_S, seconds):
            time.sleep(pause)
            self.lines.append(path.read_text().split("\n", 1)[0])

    def wait(self):
        self.thread.join()
        return "\n".join(self.lines)
