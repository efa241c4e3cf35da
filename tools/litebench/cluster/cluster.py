"""LITE-RS virtual cluster: N qemu guests running our 6.12 kernel, Soft-RoCE and
lite.ko on one private L2 segment.

The segment is a vde_switch on a unix socket in the run directory: it carries the
guests' frames between qemu processes and has no path to any host interface (with
`--segment bridge`, a Linux bridge in a private network namespace: bridge.py). Each
guest gets 10.77.0.(N+1). The run directory is shared with every guest over 9p
(/run/lite) and holds per-node console logs and command results; the build outputs
(lite.ko, lite-admin, ...) are shared read-only at /lite.

Every child runs in its own process group under a hard time limit, and `down`
(also run on exit, error, timeout and Ctrl-C by the harness) kills those groups.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from litebench.cluster import bridge, wire
from litebench.cluster.guest import REPO, build_initramfs, choose_accel, kernel_dir_for
from litebench.cluster.process import (
    UNIX_DGRAM_QLEN, group_member, log, private_netns, real_time, roomy_send_buffers)

DEFAULT_RUN = REPO / "build" / "cluster"
# LITE_VMTEST_TRACE=1: print how long every synchronous command took.
TRACE = os.environ.get("LITE_VMTEST_TRACE") == "1"
MANAGER_PORT = 18500

# Kernel messages that mean a bug: any of them in a console log fails a test run.
SPLAT = re.compile(
    r"WARNING:|BUG:|Oops|KASAN:|UBSAN:|general protection fault|Kernel panic|"
    r"DEBUG_LOCKS_WARN_ON|possible circular locking|inconsistent lock state|"
    r"INFO: task .* blocked|rcu_sched detected stall|rcu: INFO:|unreferenced object|Call Trace:")

# Of those, the ones after which the guest's kernel is broken for good (an oops
# kills the task or kworker it hit, and whatever that held stays held).
FATAL = re.compile(r"Oops|Kernel panic")

# What lite prints when it fences a peer off (no teardown confirmed, a refused request).
FENCE = "its QPs are fenced off"

# How long the manager waits for an agent's heartbeat before it declares the node
# down, unless told otherwise. The debug kernel runs the guests 10-30 times slower:
# there a test's own load (40 callers on two vCPUs) starved an agent past 8 s on a
# slow host, and the node was declared down under the test.
# A guest whose console has been silent this long while its kernel's last message is
# from its first EARLY_BOOT_S seconds has hung (the TCG early-boot hang, wait_booted).
# Normal boots print within 5 s of guest time there (the longest gap seen in 32
# consoles was 4.4 s), so a minute is a wide margin even on a host twice as slow.
STALL_S = 60
EARLY_BOOT_S = 2.0
KERNEL_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]", re.MULTILINE)
DEAD_AFTER_MS = 8000
DEAD_AFTER_MS_DEBUG = 20000


def guest_address(n):
    return f"10.77.0.{n + 1}"


def running(pid):
    """True while process `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


class CommandFailed(Exception):
    pass


class Result:
    def __init__(self, rc, out):
        self.rc, self.out = rc, out

    def __repr__(self):
        return f"Result(rc={self.rc}, out={self.out!r})"


# Guests have no entropy source but interrupt timing, so their CRNG became ready
# minutes into a run, and that flips a static key: the kernel rewrites
# get_random_u32's code under int3 while rxe's workers call it on the other vCPU,
# and on TCG that once oopsed a guest ("Oops: int3" in get_random_u32 from
# rxe_prepare, right after "random: crng init done" at 134 s). RDRAND (which TCG
# emulates from the host's getrandom) seeds the CRNG while the guest boots.
GUEST_CPU = "qemu64,+rdrand"
# What a cluster runs on the host (the last four wrap the others): what `down`
# may kill by the run directory in its command line.
CLUSTER_PROGRAMS = {"qemu-system-x86_64", "vde_switch", "wirefilter", "timeout", "unshare", "chrt", "nsenter"}


class Background:
    """A guest process fed lines through a FIFO (EOF when closed), output in a file."""

    def __init__(self, c, n, tag, command):
        self.c, self.n, self.tag = c, n, tag
        f = f"/tmp/{tag}"
        c.exec(n, f"rm -f {f}.ctl {f}.out; mkfifo {f}.ctl; "
                  f"sleep 100000 > {f}.ctl & echo $! > {f}.keep; "
                  f"{command} < {f}.ctl > {f}.out 2>&1 & echo $! > {f}.pid")

    def wait_for(self, text, timeout=120):
        deadline = time.time() + timeout
        while True:
            out = self.output()
            if text in out:
                return out
            if time.time() > deadline:
                raise CommandFailed(f"node {self.n} {self.tag}: no {text!r} in:\n{out}")
            time.sleep(0.5)

    def output(self):
        return self.c.exec(self.n, f"cat /tmp/{self.tag}.out").out

    def send(self, line):
        self.c.exec(self.n, f"echo {line} > /tmp/{self.tag}.ctl")

    def close(self):
        """EOF on stdin; waits for the process to exit."""
        self.c.exec(self.n, f"kill $(cat /tmp/{self.tag}.keep); p=$(cat /tmp/{self.tag}.pid); "
                            "while kill -0 $p 2>/dev/null; do sleep 0.2; done", timeout=120)

    def kill(self):
        self.c.exec(self.n, f"kill -9 $(cat /tmp/{self.tag}.pid); kill $(cat /tmp/{self.tag}.keep); "
                            f"p=$(cat /tmp/{self.tag}.pid); while kill -0 $p 2>/dev/null; do sleep 0.2; done")


class Job:
    """A command running on a guest (see `Cluster.exec_async`)."""

    def __init__(self, cluster, n, cid, timeout):
        self.cluster, self.n, self.cid, self.timeout = cluster, n, cid, timeout

    def wait(self, timeout=None):
        return self.cluster.collect(self.n, self.cid, timeout or self.timeout)


def hung_early(console, silent_s, stall_s=STALL_S):
    """Whether a booting guest whose console reads `console` and has been silent for
    `silent_s` seconds hung in its kernel's first EARLY_BOOT_S seconds."""
    stamps = KERNEL_STAMP.findall(console)
    return silent_s >= stall_s and bool(stamps) and float(stamps[-1]) < EARLY_BOOT_S


class Cluster:
    """A running (or to be started) virtual cluster rooted at `run_dir`."""

    def __init__(self, run_dir=DEFAULT_RUN):
        self.run = Path(run_dir).resolve()
        self.meta_path = self.run / "cluster.json"
        self.meta = json.loads(self.meta_path.read_text()) if self.meta_path.exists() else {}
        self.seq = 0

    # ---- lifecycle ----

    def _save(self):
        self.meta_path.write_text(json.dumps(self.meta, indent=1))

    def _spawn(self, argv, name, lifetime, dgram_qlen=UNIX_DGRAM_QLEN, netns=None):
        """Starts `argv` in its own process group, killed after `lifetime` seconds at the
        latest, in a network namespace of its own or in that of process `netns`."""
        logf = open(self.run / f"{name}.stderr", "wb")
        wrapped = ["nsenter", "-t", str(netns), "-n"] + argv if netns else private_netns(argv, dgram_qlen)
        proc = subprocess.Popen(["timeout", "-s", "KILL", str(lifetime)] + wrapped,
                                stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.meta.setdefault("groups", {})[name] = proc.pid
        self._save()
        return proc

    def up(self, nodes=3, variant="release", mem=1536, smp=2, lifetime=4 * 3600, boot_timeout=180, cache_guest=True,
           wires=None, segment="vde", provider="rxe"):
        """Boots `nodes` guests. `cache_guest`: the guests keep the programs and lite.ko
        they read from build/VARIANT/guest in their page cache (9p cache=loose): an
        exec costs milliseconds instead of seconds on the debug kernel, but files
        rebuilt while the cluster runs are not seen (`make cluster` turns it off).
        `wires`: {node: (rate bytes/s or 0 for none, queue bytes)}: those nodes'
        ports sit behind a wirefilter (wire.py), or on segment "bridge" behind a
        veth shaped by tc, with jumbo frames (bridge.py; rates only). `provider`: the
        soft RDMA device each guest makes at boot, rxe0 or siw0 (PROVIDERS)."""
        if segment == "bridge" and any(not rate for rate, _ in (wires or {}).values()):
            raise SystemExit("vcluster: the bridge segment takes bottlenecks only; faults need vde wires (--wired)")
        if self.meta_path.exists():
            Cluster(self.run).down(quiet=True)
        shutil.rmtree(self.run, ignore_errors=True)
        (self.run / "cmd").mkdir(parents=True)
        guest = REPO / "build" / variant / "guest"
        if not (guest / "lite.ko").exists():
            raise SystemExit(f"vcluster: {guest}/lite.ko missing: run `make guest KERNEL={variant}`")
        kdir = kernel_dir_for(variant)
        initramfs = self.run / "initramfs.gz"
        build_initramfs(kdir, guest, initramfs)
        accel = choose_accel(kdir, initramfs, self.run)
        self.meta = {"variant": variant, "kernel": str(kdir), "guest": str(guest), "accel": accel,
                     "mem": mem, "smp": smp, "lifetime": lifetime, "started": time.time(), "nodes": [],
                     "cache_guest": cache_guest, "segment": segment, "provider": provider,
                     "wires": {str(n): {"rate": rate, "queue": queue} for n, (rate, queue) in (wires or {}).items()}}
        self._save()
        if segment == "bridge":
            self._start_bridge()
        else:
            self._start_switch()
        log(f"booting {nodes} node(s) ({variant} kernel, {accel}) in {self.run}")
        for n in range(nodes):
            self.start_node(n)
        try:
            for n in range(nodes):
                self.wait_booted(n, boot_timeout)
        except BaseException:
            self.down()
            raise
        log(f"{nodes} node(s) ready")

    def _start_switch(self):
        """The vde segment: its switch, and the wired nodes' wirefilters."""
        # vde_switch exits when its stdin closes: feed it from a pipe that lives as long as the cluster.
        switch = self.run / "switch"
        with roomy_send_buffers():
            self._spawn(["sh", "-c", f"tail -f /dev/null | exec vde_switch -s {switch} -m 700"], "switch",
                        self.meta["lifetime"])
            self._wait_for(switch / "ctl", "vde_switch")
            for n in sorted(int(n) for n in self.meta["wires"]):
                self._start_wire(n)

    def _start_bridge(self):
        """The bridge segment (bridge.py): a namespace kept by a sleeping process, its
        devices built in it; the guests' qemus join it."""
        self._spawn(["sleep", str(self.meta["lifetime"])], "segment", self.meta["lifetime"])
        deadline = time.time() + 10
        while (holder := group_member(self.meta["groups"]["segment"], "sleep")) is None:
            if time.time() > deadline:
                self.down()
                raise SystemExit("vcluster: the bridge segment's namespace did not start")
            time.sleep(0.05)
        self.meta["netns"] = holder
        self._save()
        self._in_bridge(bridge.setup_script(), "the bridge segment")
        for n, w in sorted(self.meta["wires"].items()):
            log(f"node {n}'s port is behind a link of {w['rate'] / 2**20:g} MiB/s, queue {w['queue'] / 2**20:g} "
                f"MiB (tc tbf, MTU {bridge.JUMBO_MTU})")

    def _in_bridge(self, script, what):
        """Runs shell `script` in the bridge segment's namespace; down and SystemExit if it fails."""
        built = subprocess.run(["nsenter", "-t", str(self.meta["netns"]), "-n", "sh", "-c", script],
                               capture_output=True, text=True)
        if built.returncode:
            self.down()
            raise SystemExit(f"vcluster: could not build {what}: {built.stderr.strip()}")

    def _start_wire(self, n):
        """Node n's port switch, joined to the segment's switch by a wirefilter."""
        w = self.meta["wires"][str(n)]
        port, mgmt = self.run / f"port{n}", self.run / f"wire{n}.mgmt"
        limit = f"-s {w['rate']} " if w["rate"] else ""
        self._spawn(["sh", "-c", f"tail -f /dev/null | exec vde_switch -s {port} -m 700"], f"port{n}",
                    self.meta["lifetime"])
        self._wait_for(port / "ctl", f"node {n}'s port switch")
        # Left is the segment, right the node: LR is what the node receives. Frames
        # wait for the wire in its sockets' datagram queues (wire.py).
        wirefilter = " ".join(real_time(["wirefilter", "-v", f"{self.run / 'switch'}:{port}", "-M", str(mgmt)]))
        self._spawn(["sh", "-c", f"tail -f /dev/null | exec {wirefilter} {limit}"], f"wire{n}", self.meta["lifetime"],
                    dgram_qlen=wire.queue_frames(w["queue"]))
        self._wait_for(mgmt, f"node {n}'s wirefilter")
        rate = (f"{w['rate'] / 2**20:g} MiB/s, queue {w['queue'] / 2**20:g} MiB "
                f"({wire.queue_frames(w['queue'])} frames)" if w["rate"] else "no limit")
        log(f"node {n}'s port is behind a wire ({rate})")

    def _wait_for(self, path, what):
        deadline = time.time() + 10
        while not path.exists():
            if time.time() > deadline:
                self.down()
                raise SystemExit(f"vcluster: {what} did not start (see the .stderr files in {self.run})")
            time.sleep(0.05)

    def wire_mgmt(self, n):
        """Node n's wirefilter management socket; SystemExit when n has no wire, or a
        rate-limited one: wirefilter's management socket stops accepting (accept:
        EINVAL) once its interface speed paces traffic, so a bottleneck's settings
        are fixed at `up` and faults go on wires without a rate (`--wired`)."""
        w = self.meta.get("wires", {}).get(str(n))
        if w is None:
            raise SystemExit(f"vcluster: node {n} has no wire (up --wired {n} or --bottleneck {n}:RATE)")
        if w["rate"]:
            raise SystemExit(f"vcluster: node {n}'s wire is rate-limited, and wirefilter takes no management "
                             f"command while it paces traffic: put faults on a wire without a rate (--wired)")
        return self.run / f"wire{n}.mgmt"

    def start_node(self, n, root=None):
        """Starts node n's guest. `root`: a directory it boots as its root instead of
        the initramfs's, with that root's /sbin/init (node_root.py); kept for reboots."""
        m = self.meta
        if root is not None:
            m.setdefault("roots", {})[str(n)] = str(root)
        root = m.get("roots", {}).get(str(n))
        run = self.run
        sock = run / (f"port{n}" if str(n) in m.get("wires", {}) else "switch")
        (run / "cmd" / f"node{n}").mkdir(parents=True, exist_ok=True)
        (run / f"node{n}.ready").unlink(missing_ok=True)
        self._keep_console(n, f"boot{len(list(run.glob(f'node{n}.console.boot*'))) + 1}")
        append = (f"console=ttyS0 panic=-1 loglevel=6 rcupdate.rcu_cpu_stall_timeout=120 acpi=noirq "
                  f"lite_node={n} lite_cache={int(m.get('cache_guest', False))} lite_rdma={m.get('provider', 'rxe')}"
                  + (f" lite_mtu={bridge.JUMBO_MTU}" if m.get("segment") == "bridge" else "")
                  + (" lite_root=9p net.ifnames=0" if root else ""))
        argv = ["qemu-system-x86_64", "-name", f"lite-node{n}", "-accel", m["accel"], "-cpu", GUEST_CPU,
                "-m", str(m["mem"]), "-smp", str(m["smp"]), "-nodefaults", "-no-reboot", "-display", "none",
                "-kernel", str(Path(m["kernel"]) / "bzImage"), "-initrd", str(run / "initramfs.gz"),
                "-append", append,
                "-serial", f"file:{run}/node{n}.console",
                "-netdev", (f"tap,id=net0,ifname=tap{n},script=no,downscript=no" if m.get("netns")
                            else f"vde,id=net0,sock={sock}"),
                "-device", f"virtio-net-pci,netdev=net0,mac=52:54:00:4c:00:{n:02x}",
                "-device", "virtio-serial-pci",
                "-chardev", f"socket,id=ctl,path={run}/node{n}.ctl,server=on,wait=off",
                "-device", "virtserialport,chardev=ctl,name=lite.ctl",
                "-chardev", f"socket,id=shell,path={run}/node{n}.shell,server=on,wait=off",
                "-device", "virtconsole,chardev=shell",
                "-fsdev", f"local,id=run,path={run},security_model=none",
                "-device", "virtio-9p-pci,fsdev=run,mount_tag=run",
                "-fsdev", f"local,id=guest,path={m['guest']},security_model=none,readonly=on",
                "-device", "virtio-9p-pci,fsdev=guest,mount_tag=guest"]
        if root:
            argv += ["-fsdev", f"local,id=root,path={root},security_model=passthrough,multidevs=remap",
                     "-device", "virtio-9p-pci,fsdev=root,mount_tag=root"]
        if m.get("netns"):
            w = m.get("wires", {}).get(str(n))
            self._in_bridge(bridge.port_script(n, w and (w["rate"], w["queue"])), f"node {n}'s port")
        remaining = int(m["lifetime"] - (time.time() - m["started"]))
        with roomy_send_buffers():
            self._spawn(argv, f"node{n}", max(remaining, 60), netns=m.get("netns"))
            # qemu connects to the switch before the guest runs: once the guest
            # prints, its socket exists.
            console = run / f"node{n}.console"
            deadline = time.time() + 30
            while time.time() < deadline and self.alive(n) and not (console.exists() and console.stat().st_size):
                time.sleep(0.05)
        if n not in m["nodes"]:
            m["nodes"].append(n)
        self._save()

    def mtu(self):
        """The guests' MTU: jumbo frames on the bridge segment, Ethernet's on vde."""
        return bridge.JUMBO_MTU if self.meta.get("segment") == "bridge" else 1500

    def alive(self, n):
        pid = self.meta.get("groups", {}).get(f"node{n}")
        return pid is not None and running(pid)

    def wait_ready(self, n, timeout, stall_s=None):
        """Waits until node n's guest is ready; with `stall_s`, gives up as soon as it
        has hung early in boot (`hung_early`) for that long."""
        start = time.time()
        deadline = start + timeout
        console = self.run / f"node{n}.console"
        size, grew = -1, start
        while not (self.run / f"node{n}.ready").exists():
            now = time.time()
            hung = False
            if stall_s is not None:
                current = console.stat().st_size if console.exists() else 0
                if current != size:
                    size, grew = current, now
                # Read the console only once it has been silent long enough.
                hung = now - grew >= stall_s and hung_early(self.console(n), now - grew, stall_s)
            if now > deadline or hung or not self.alive(n):
                tail = self.console(n)[-3000:]
                why = f"hung early in boot (console silent for {now - grew:.0f} s)" if hung else \
                    f"did not boot within {timeout} s"
                raise CommandFailed(f"node {n} {why}; console tail:\n{tail}")
            time.sleep(0.1)

    def boot_node(self, n, timeout, root=None):
        """Starts node n (see `start_node`) and waits until its guest is ready (see `wait_booted`)."""
        self.start_node(n, root)
        self.wait_booted(n, timeout)

    def wait_booted(self, n, timeout):
        """Waits for node n's guest, just started; a guest that does not come up is
        restarted once. An emulated guest can hang early in boot, long before anything
        of ours runs (seen in a CI run: a TCG vCPU whose timer never fired again, RCU
        stall reports and no progress for minutes); a second boot is the cure, logged."""
        try:
            self.wait_ready(n, timeout, stall_s=STALL_S)
        except CommandFailed as first:
            log(f"{str(first).split(';', 1)[0]} (console tail below); restarting it once\n"
                + str(first).split("console tail:\n", 1)[-1][-1500:])
            self.kill_node(n)
            self._keep_console(n, "hung")
            self.start_node(n)
            self.wait_ready(n, timeout)

    def _keep_console(self, n, suffix):
        """Moves node n's console log aside before it boots again (qemu truncates it),
        so a bug report from before a reboot still fails the run."""
        path = self.run / f"node{n}.console"
        if path.exists() and path.stat().st_size:
            path.rename(path.with_name(f"{path.name}.{suffix}"))

    def kill_node(self, n):
        """Pulls the plug on node n (SIGKILL to its qemu)."""
        pid = self.meta.get("groups", {}).pop(f"node{n}", None)
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(pid)
        self._save()

    @staticmethod
    def _reap(pid, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def down(self, quiet=False):
        groups = self.meta.get("groups", {})
        for name, pid in list(groups.items()):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in groups.values():
            self._reap(pid)
        # A node started but not on record (seen once after a guest panicked in the
        # middle of a test) would run on for hours and slow every later run on the
        # host: anything that still names this cluster's directory goes too, loudly.
        strays = [(pid, cmdline) for pid, cmdline in self._processes()
                  if Path(cmdline.split()[0]).name in CLUSTER_PROGRAMS]
        for pid, _ in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid, _ in strays:
            self._reap(pid)
        if strays:
            log("killed processes of this cluster that were not on record:\n  "
                + "\n  ".join(f"{pid}: {cmdline[:120]}" for pid, cmdline in strays))
        leftovers = [name for name, pid in groups.items() if running(pid)]
        self.meta["groups"] = {}
        if self.meta_path.parent.exists():
            self._save()
        if leftovers:
            raise SystemExit(f"vcluster: could not end {leftovers}")
        if not quiet and groups:
            log(f"cluster in {self.run} is down")

    def _processes(self):
        """(pid, command line) of each live process that names this cluster's directory."""
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(self.run) in cmdline and running(int(proc.name)):
                yield int(proc.name), cmdline

    def leftovers(self):
        """Processes still running that belong to this cluster (there should be none after down)."""
        return [f"{pid}: {cmdline[:120]}" for pid, cmdline in self._processes()]

    # ---- commands ----

    def submit(self, n, script, timeout):
        """Starts `script` (sh) on node n; returns its id. It runs under `timeout` seconds."""
        self.seq += 1
        cid = f"{os.getpid()}-{self.seq}-{time.monotonic_ns() % 10**9}"
        d = self.run / "cmd" / f"node{n}"
        (d / f"{cid}.body").write_text(script)
        deadline = time.time() + 60
        while True:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(60)
                    s.connect(str(self.run / f"node{n}.ctl"))
                    # The guest runs it under `timeout`: no command outlives its time.
                    s.sendall(f"{cid} {int(timeout)}\n".encode())
                    while not (d / f"{cid}.ack").exists():
                        if time.time() > deadline or not self.alive(n):
                            raise CommandFailed(f"node {n} did not take command {cid}")
                        time.sleep(0.01)
                    return cid
            except (ConnectionRefusedError, FileNotFoundError, socket.timeout) as e:
                if time.time() > deadline or not self.alive(n):
                    raise CommandFailed(f"node {n} is not reachable: {e}")
                time.sleep(0.1)

    def collect(self, n, cid, timeout):
        d = self.run / "cmd" / f"node{n}"
        deadline = time.time() + timeout + 15
        while not (d / f"{cid}.rc").exists():
            if time.time() > deadline:
                raise CommandFailed(f"node {n}: command {cid} did not finish in {timeout} s")
            if not self.alive(n):
                raise CommandFailed(f"node {n} died while running command {cid}")
            time.sleep(0.02)
        # The guest creates the file, then writes the status into it.
        while not (status := (d / f"{cid}.rc").read_text().strip()):
            if time.time() > deadline:
                raise CommandFailed(f"node {n}: command {cid} left no exit status")
            time.sleep(0.02)
        return Result(int(status), (d / f"{cid}.out").read_text(errors="replace"))

    def exec_async(self, n, script, timeout=900):
        """Starts a command on node `n` and returns at once; `.wait()` collects it."""
        return Job(self, n, self.submit(n, script, timeout), timeout)

    def exec(self, n, script, timeout=120, check=True):
        start = time.time()
        res = self.collect(n, self.submit(n, script, timeout), timeout)
        if TRACE:
            print(f"    [{time.time() - start:6.1f} s] node {n}: {' '.join(script.split())[:100]}", flush=True)
        if check and res.rc != 0:
            raise CommandFailed(f"node {n}: `{script.strip()}` exited {res.rc}:\n{res.out}")
        return res

    def console(self, n):
        path = self.run / f"node{n}.console"
        return path.read_text(errors="replace") if path.exists() else ""

    def _console_logs(self, n):
        """Lines of node n's console logs in the order they were written: earlier boots
        (`_keep_console`), then this one; not a boot that hung before anything of ours
        ran (see `wait_booted`)."""
        boots = sorted(self.run.glob(f"node{n}.console.boot*"), key=lambda path: int(path.suffix[len(".boot"):]))
        texts = [path.read_text(errors="replace") for path in boots] + [self.console(n)]
        return [line for text in texts for line in text.splitlines()]

    def splats(self):
        """(node, line) for every kernel bug report in the console logs."""
        return [(n, line.strip()) for n in self.meta.get("nodes", [])
                for line in self._console_logs(n) if SPLAT.search(line)]

    def fences(self):
        """(node, line) for every time a node fenced a peer off (lite's console line)."""
        return [(n, line.strip()) for n in self.meta.get("nodes", [])
                for line in self._console_logs(n) if FENCE in line]

    def first_bug_report(self, n, lines=40):
        """The first kernel bug report in node n's console logs, whole (up to `lines`
        lines), or [] if none: the lines that match say what, the rest where."""
        log_lines = self._console_logs(n)
        first = next((i for i, line in enumerate(log_lines) if SPLAT.search(line)), None)
        return [] if first is None else log_lines[max(first - 2, 0):first + lines]

    # ---- LITE-RS conveniences ----

    def load_module(self, n, args=""):
        self.exec(n, f"insmod /lite/lite.ko {args}")

    def reload_module(self, nodes, args, connected, timeout=180):
        """Takes `nodes` out of the cluster (if in it), loads lite.ko again with `args`
        there, restarts their agents and waits until `connected` see each other."""
        for n in nodes:
            # The agent exits once its node left, closing /dev/lite; rmmod waits for that.
            self.exec(n, "lite-admin leave 2>/dev/null; for i in $(seq 300); do "
                         "! grep -q '^lite ' /proc/modules && break; rmmod lite 2>/dev/null; sleep 0.2; done; "
                         f"insmod /lite/lite.ko {args}", timeout=120)
        for n in nodes:
            self.start_agent(n)
        self.wait_connected(list(connected), timeout=timeout)

    def dead_after_ms(self):
        """The manager's dead-after for this cluster's kernel, unless a test sets one."""
        return DEAD_AFTER_MS_DEBUG if self.meta.get("variant") == "debug" else DEAD_AFTER_MS

    def start_manager(self, n=0, dead_after_ms=None):
        dead_after_ms = dead_after_ms or self.dead_after_ms()
        self.exec(n, f"lite-admin manager --heartbeat-ms 500 --dead-after-ms {dead_after_ms} "
                     f">/run/lite/manager.log 2>&1 &")

    def start_agent(self, n, manager_node=0, node_id=None):
        want = f"--id {n if node_id is None else node_id}"
        self.exec(n, f"lite-admin join {guest_address(manager_node)}:{MANAGER_PORT} {want} "
                     f">>/run/lite/agent{n}.log 2>&1 &")

    def join(self, nodes, timeout=120):
        """Loads lite.ko on `nodes`, runs the manager on node 0 and an agent on each,
        and waits until every node sees every other one connected."""
        for n in nodes:
            self.load_module(n)
        self.start_manager(0)
        for n in nodes:
            self.start_agent(n)
        self.wait_connected(list(nodes), timeout=timeout)

    def status(self, n):
        return json.loads(self.exec(n, "lite-admin status --json").out)

    def wait_connected(self, nodes, timeout=60):
        """Waits until every node in `nodes` shows every other one connected."""
        jobs = [(n, self.submit(n, "lite-admin wait --timeout-s {} --connected {}".format(
            timeout, ",".join(str(m) for m in nodes if m != n)), timeout + 30)) for n in nodes]
        for n, job in jobs:
            res = self.collect(n, job, timeout + 30)
            if res.rc != 0:
                raise CommandFailed(f"node {n}: {res.out.strip()}")
