"""The benchmark's steps (tools/bench.py), per section: latency, bandwidth, malloc,
LMR counts, RPC, atomics and the stand-in paths, each a list of (label, step) that
fills in the results; `run_steps` runs those of the sections asked for."""

import statistics

from litebench.bench.output import parse_perftest_bw, parse_perftest_lat
from litebench.bench.report import EVENTS, fmt_ns, fmt_size
from litebench.bench.runner import CLIENT, NODES, SERVER

MALLOC_HOLDERS = ["1", "0,1,2"]
# The RPC server (`lite-selftest rpc-serve`) on SERVER; its requests are 16 B (reply
# size and seed) and it answers with the size asked for.
RPC_ID = 31
# Server threads: enough that calls from several client threads are served in parallel.
RPC_SERVER_THREADS = 4
RPC_THREADS = [1, 2, 4, 8, 16]
RPC_CALLER_ROUNDS = 4
# Step groups, in the order they run (--only).
# `paths` reloads lite.ko on every node, ending what the sections before it set up: last.
SECTIONS = ["lat", "bw", "malloc", "lmrs", "rpc", "atomics", "paths"]
# What siw (iWARP) cannot run: perftest's atomics (it has none), and the stand-ins
# against the NIC's opcodes (its only paths are the stand-ins).
NOT_ON_SIW = ("atomics", "paths")
RPC_IDLE_S = 5
LOCK_THREADS = [1, 2, 4, 8]
# The lock word (followed by the counter it guards) in the atomics' LMR.
LOCK_OFFSET = 64
USER_HZ = 100
# The paths section: lite.ko with the NIC's own opcodes, then with their stand-ins
# (what iWARP devices need), alternating for this many rounds of each.
PATHS = {"native": "", "stand-in": "messages=send atomics=holder"}
PATHS_ROUNDS = 3
PATHS_RPC_ID = 32


def add_round(into, r, keys):
    """Adds one round's result `r` to a point measured in rounds, and sets each of
    `keys` to the median over the rounds so far."""
    point = into.setdefault("rounds", [])
    point.append(r)
    for k in keys:
        into[k] = statistics.median(x[k] for x in point if x.get(k) is not None)


def lat_native(b, native, iters, tool, size, flags=""):
    """A step: one perftest latency round of `size` bytes, added to native[TOOL FLAGS]."""
    def go():
        r = parse_perftest_lat(b.perftest(tool, size, iters, flags), size)
        if r is None:
            raise ValueError(f"no {tool} result row for {size} B in the output")
        key = f"{tool} {flags}" if flags else tool
        add_round(native.setdefault(key, {}).setdefault(str(size), {}), r, ("t_typical_us", "p99_us"))
        mult = 2 if tool == "ib_write_lat" else 1
        return (f"median {fmt_ns(r['t_typical_us'] * 1000 * mult)}, p99 {fmt_ns(r.get('p99_us', 0) * 1000 * mult)}"
                + (" (x 2: round trip)" if mult == 2 else ""))
    return go


# LT_reads of at most this many bytes have the kernel's phase account (lite/lmr/read_phases.rs).
READ_PHASES_MAX = 4096


def native_phases_step(b, native, iters, size):
    """A step: one round of `lite-read-phases`, the native READ's own phases, added to
    native["read_phases"][size] as each phase's mean and median per read."""
    def go():
        d = b.native_read_phases(size, iters)
        r = {f"{phase}_{stat}": d[key][f"{stat}_ns"]
             for phase, key in (("post", "post"), ("wire", "posted_to_completion"), ("whole", "whole"))
             for stat in ("mean", "median")}
        add_round(native.setdefault("read_phases", {}).setdefault(str(size), {}), r, list(r))
        return (f"post {fmt_ns(r['post_mean'])}, posted to completion {fmt_ns(r['wire_mean'])}, "
                f"whole {fmt_ns(r['whole_mean'])} (means)")
    return go


def lat_round_iters(a):
    # Each latency point is measured in rounds, native and LITE alternating, and
    # reported as the median of the rounds' medians (and p99s): the emulated cluster
    # drifts by tens of percent within a minute, which one long series per side
    # would attribute to whichever ran in the slower moment.
    return max(20, a.lat_iters // a.lat_rounds)


def lat_steps(b, a, lite, native):
    per_round = lat_round_iters(a)

    def lat_lite(op, size):
        def go():
            d = b.tool_json(CLIENT, f"lite-bench lat --op {op} --holder {SERVER} --sizes {size} --iters {per_round} "
                                    f"--warmup {a.warmup}", a.step_timeout)
            r = d["results"][0]
            add_round(lite.setdefault(f"lat_{op}", {}).setdefault(str(size), {}), r, ("median_ns", "p99_ns"))
            return f"median {fmt_ns(r['median_ns'])}, p99 {fmt_ns(r['p99_ns'])}"
        return go

    def lat_per_read(size):
        def go():
            d = b.tool_json(CLIENT, f"lite-bench lat --op read --holder {SERVER} --sizes {size} --iters {per_round} "
                                    f"--warmup {a.warmup} --per-read", a.step_timeout)
            m = d["results"][0].get("phase_medians")
            if not m:
                raise ValueError("lite-bench lat --per-read gave no phase medians")
            add_round(lite.setdefault("lat_read_per_read", {}).setdefault(str(size), {}), m,
                      [k for k, v in m.items() if isinstance(v, (int, float))])
            return f"median read {fmt_ns(m['timed_ns'])}: provider {fmt_ns(m['provider_ns'])} (medians)"
        return go

    def settle():
        # The first seconds after the join are slower for both sides (the guests finish
        # booting, TCG translates the code paths for the first time): untimed traffic.
        b.perftest("ib_read_lat", 8, 200)
        b.tool_json(CLIENT, f"lite-bench lat --op read --holder {SERVER} --sizes 8 --iters 200", a.step_timeout)
        return "done"

    # Native and LITE alternate per size, so both see the same cluster conditions.
    steps = [("warm-up: ib_read_lat and LT_read 8 B (untimed)", settle)]
    for size in a.lat_sizes:
        for r in range(1, a.lat_rounds + 1):
            of = f" (round {r}/{a.lat_rounds})" if a.lat_rounds > 1 else ""
            steps.append((f"ib_write_lat {fmt_size(size)}{of}", lat_native(b, native, per_round, "ib_write_lat", size)))
            steps.append((f"lite-bench lat write {fmt_size(size)}{of}", lat_lite("write", size)))
            steps.append((f"ib_read_lat {fmt_size(size)}{of}", lat_native(b, native, per_round, "ib_read_lat", size)))
            steps.append((f"lite-bench lat read {fmt_size(size)}{of}", lat_lite("read", size)))
            if size <= READ_PHASES_MAX:
                # Each phase's median, from single reads (not back to back: untimed
                # statistics calls between them), and the native READ's own phases
                # (RoCE only: it connects by GID).
                steps.append((f"lite-bench lat read {fmt_size(size)}, phases per read{of}", lat_per_read(size)))
                if a.provider == "rxe":
                    steps.append((f"lite-read-phases {fmt_size(size)}{of}",
                                  native_phases_step(b, native, per_round, size)))
            # perftest's event mode hangs on siw (`ib_read_lat -e -R` of 4 KiB stopped
            # at its first round, twice; 8 B passed): a context row, left out there.
            if a.provider != "siw":
                steps.append((f"ib_read_lat {EVENTS} {fmt_size(size)}{of}",
                              lat_native(b, native, per_round, "ib_read_lat", size, EVENTS)))
    return steps


def bw_steps(b, a, lite, native):
    def bw_iters(size):
        return max(5, a.bw_mib * (1 << 20) // size)

    def bw_native(size):
        def go():
            r = parse_perftest_bw(b.perftest("ib_write_bw", size, bw_iters(size)), size)
            if r is None:
                raise ValueError(f"no ib_write_bw result row for {size} B in the output")
            native.setdefault("ib_write_bw", {})[str(size)] = r
            return f"{r['avg_mib_s']:.1f} MiB/s"
        return go

    def bw_lite(size):
        def go():
            d = b.tool_json(CLIENT, f"lite-bench bw --holder {SERVER} --sizes {size} --iters {bw_iters(size)} "
                                    f"--seconds {a.bw_seconds} --threads {a.bw_threads}", a.step_timeout)
            r = d["results"][0]
            r["threads"] = d["threads"]
            lite.setdefault("bw", {})[str(size)] = r
            return f"{r['mib_s']:.1f} MiB/s ({r['writes']} writes in {r['seconds']:.1f} s)"
        return go

    steps = []
    for size in a.bw_sizes:
        steps.append((f"ib_write_bw {fmt_size(size)}, {bw_iters(size)} writes", bw_native(size)))
        steps.append((f"lite-bench bw {fmt_size(size)}, {bw_iters(size)} writes", bw_lite(size)))
    return steps


def malloc_steps(b, a, lite, native):
    def touch_guest_memory():
        # QEMU backs guest RAM on its first touch (a host page fault per page), which
        # costs the first 1 GiB allocation of a fresh guest several times what later
        # ones cost: touch it once, untimed, with both ibv_reg_mr and LT_malloc.
        b.tool_json(CLIENT, f"lite-regmr --size {a.malloc_size}", a.step_timeout)
        for holders in MALLOC_HOLDERS:
            b.tool_json(CLIENT, f"lite-bench malloc --size {a.malloc_size} --holders {holders}", a.step_timeout)
        return "done"

    def add_malloc_round(into, d, keys):
        into["size"] = d.get("size")
        add_round(into, d, keys)

    def regmr():
        d = b.tool_json(CLIENT, f"lite-regmr --size {a.malloc_size}", a.step_timeout)
        add_malloc_round(native.setdefault("regmr", {}), d, ("reg_ns", "dereg_ns"))
        return f"ibv_reg_mr {fmt_ns(d['reg_ns'])}, ibv_dereg_mr {fmt_ns(d['dereg_ns'])}"

    def malloc(holders, reserved):
        def go():
            nodes = [int(n) for n in holders.split(",")]
            filled = ""
            if reserved:
                # Each holder's share, zeroed ahead (the module refills it in the background).
                share = -(-a.malloc_size // len(nodes))
                waits = [b.tool_json(n, f"lite-admin reserve {share} --wait --json", a.step_timeout)["waited_s"]
                         for n in nodes]
                filled = f" (reserve filled in {max(waits):.1f} s)"
            try:
                d = b.tool_json(CLIENT, f"lite-bench malloc --size {a.malloc_size} --holders {holders}", a.step_timeout)
            finally:
                if reserved:
                    for n in nodes:
                        b.c.exec(n, "lite-admin reserve 0", check=False)
            add_malloc_round(lite.setdefault("malloc_reserved" if reserved else "malloc", {}).setdefault(holders, {}),
                             d, ("malloc_ns", "map_ns", "total_ns"))
            return f"malloc {fmt_ns(d['malloc_ns'])} + map {fmt_ns(d['map_ns'])} = {fmt_ns(d['total_ns'])}{filled}"
        return go

    steps = [("first touch of the guests' memory (untimed)", touch_guest_memory)]
    # Single calls of 0.1-1 s vary by tens of percent under TCG: rounds, medians.
    for r in range(1, a.malloc_rounds + 1):
        of = f" (round {r}/{a.malloc_rounds})" if a.malloc_rounds > 1 else ""
        steps.append((f"lite-regmr (ibv_reg_mr) {fmt_size(a.malloc_size)}{of}", regmr))
        for holders in MALLOC_HOLDERS:
            steps.append((f"lite-bench malloc {fmt_size(a.malloc_size)} on node(s) {holders}{of}",
                          malloc(holders, False)))
            steps.append((f"lite-bench malloc {fmt_size(a.malloc_size)} on node(s) {holders} from the zeroed reserve{of}",
                          malloc(holders, True)))
    return steps


def lmr_steps(b, a, lite, native):
    def lmrs(count):
        def go():
            # Every named LT_malloc asks each node about the name and the holder for memory,
            # and every LT_free asks the holder again: round trips of milliseconds under TCG,
            # overlapped by lite-bench's threads; 100 000 of each take minutes.
            timeout = max(a.step_timeout, int(600 + count * 0.03))
            d = b.tool_json(CLIENT, f"lite-bench lmrs --count {count} --holder {SERVER} --iters {a.lmr_iters} "
                                    f"--warmup {a.warmup}", timeout)
            lite.setdefault("lmrs", {})[str(count)] = d
            return (f"1 LMR: median {fmt_ns(d['alone']['median_ns'])}; random of {count:,}: "
                    f"median {fmt_ns(d['median_ns'])}, p99 {fmt_ns(d['p99_ns'])}; "
                    f"allocated in {d['setup_s']:.0f} s, freed in {d['free_s']:.0f} s")
        return go

    return [(f"lite-bench lmrs {count:,} LMR{'s' if count != 1 else ''}", lmrs(count)) for count in a.lmr_counts]


def rpc_steps(b, a, lite, native):
    def rpc_server():
        c = b.c
        c.exec(SERVER, f"rm -f /tmp/bench-rpc.in; mkfifo /tmp/bench-rpc.in; sleep 100000 > /tmp/bench-rpc.in & "
                       f"echo $! > /tmp/bench-rpc.keep; lite-selftest rpc-serve {RPC_ID} --threads {RPC_SERVER_THREADS} "
                       f"< /tmp/bench-rpc.in "
                       f"> /run/lite/bench-rpc-server.log 2>&1 & echo $! > /tmp/bench-rpc.pid; sleep 1; "
                       f"grep -q ready /run/lite/bench-rpc-server.log")
        return f"lite-selftest rpc-serve {RPC_ID} --threads {RPC_SERVER_THREADS} on node {SERVER}"

    def rpc_call(key, args_text):
        def go():
            d = b.tool_json(CLIENT, f"lite-selftest rpc-call {SERVER} {RPC_ID} {args_text}", a.step_timeout)
            if d.get("failed"):
                raise ValueError(f"{d['failed']} of {d['calls']} calls failed: {d.get('first_error')}")
            key(d)
            extra = f", {d['crossings_per_call']:.2f} crossings/call" if "crossings_per_call" in d else ""
            return f"median {fmt_ns(d['p50_ns'])}, p99 {fmt_ns(d['p99_ns'])}{extra}"
        return go

    def rpc_idle():
        out = b.c.exec(SERVER, f"p=$(cat /tmp/bench-rpc.pid); cut -d' ' -f14,15 /proc/$p/stat; sleep {RPC_IDLE_S}; "
                               f"cut -d' ' -f14,15 /proc/$p/stat", timeout=RPC_IDLE_S + 60).out.split()
        ticks = sum(int(x) for x in out[2:4]) - sum(int(x) for x in out[0:2])
        lite["rpc_idle"] = {"seconds": RPC_IDLE_S, "cpu_s": ticks / USER_HZ}
        return f"{ticks / USER_HZ:.2f} s of CPU in {RPC_IDLE_S} s idle"

    # User and kernel caller alternate in rounds, so that both see the same moments of
    # a noisy emulated cluster; each is summarized by the median of its round medians.
    def add_caller_round(key):
        def store(d):
            caller = lite.setdefault(key, {"rounds": []})
            caller["rounds"].append(d)
            caller["p50_ns"] = statistics.median(r["p50_ns"] for r in caller["rounds"])
            caller["p99_ns"] = statistics.median(r["p99_ns"] for r in caller["rounds"])
        return store

    steps = [("RPC server", rpc_server)]
    for size in a.lat_sizes:
        steps.append((f"lite-selftest rpc-call 16 B -> {fmt_size(size)}",
                      rpc_call(lambda d, size=size: lite.setdefault("rpc_lat", {}).__setitem__(str(size), d),
                               f"--count {a.lat_iters} --size 16 --reply {size}")))
    per_round = max(50, a.lat_iters // RPC_CALLER_ROUNDS)
    for r in range(1, RPC_CALLER_ROUNDS + 1):
        steps.append((f"lite-selftest rpc-call 8 B, user caller (round {r}/{RPC_CALLER_ROUNDS})",
                      rpc_call(add_caller_round("rpc_user"), f"--count {per_round} --size 8 --reply 4096")))
        steps.append((f"lite-selftest rpc-call 8 B, kernel caller (round {r}/{RPC_CALLER_ROUNDS})",
                      rpc_call(add_caller_round("rpc_kernel"),
                               f"--count {per_round} --size 8 --reply 4096 --kernel-caller")))
    for threads in RPC_THREADS:
        steps.append((f"lite-selftest rpc-call, {threads} thread(s)",
                      rpc_call(lambda d, t=threads: lite.setdefault("rpc_threads", {}).__setitem__(str(t), d),
                               f"--count {max(4, a.lat_iters // threads)} --threads {threads} --size 16 --reply 64")))
    steps.append((f"idle RPC server CPU over {RPC_IDLE_S} s", rpc_idle))
    return steps


def atomic_steps(b, a, lite, native):
    def atomic_lmr():
        # Allocated from CLIENT, held by SERVER; kept until the cluster goes down, so
        # a later run (--runs) takes the one its first run allocated.
        b.c.exec(CLIENT, "kill -0 $(cat /tmp/bench-atomic.pid 2>/dev/null) 2>/dev/null && exit 0; "
                         f"rm -f /tmp/bench-atomic.in; mkfifo /tmp/bench-atomic.in; sleep 100000 > /tmp/bench-atomic.in & "
                         f"lite-selftest lmr-serve bench-atomic --size 4K --holders {SERVER} --perm rw --zeroed "
                         f"< /tmp/bench-atomic.in > /run/lite/bench-atomic.log 2>&1 & echo $! > /tmp/bench-atomic.pid; sleep 1; "
                         f"for i in $(seq 60); do grep -q ready /run/lite/bench-atomic.log && exit 0; sleep 1; done; exit 1",
                 timeout=120)
        return f"LMR bench-atomic held by node {SERVER}"

    def atomic_lite():
        d = b.tool_json(CLIENT, f"lite-selftest atomic-count bench-atomic --count {a.lat_iters}", a.step_timeout)
        lite["atomic"] = d
        return f"median {fmt_ns(d['p50_ns'])}, p99 {fmt_ns(d['p99_ns'])}"

    def lock_lite(threads):
        def go():
            count = max(4, a.lat_iters // threads)
            d = b.tool_json(CLIENT, f"lite-selftest lock-count bench-atomic --offset {LOCK_OFFSET} "
                                    f"--threads {threads} --count {count}", a.step_timeout)
            if d.get("first_error"):
                raise ValueError(d["first_error"])
            lite.setdefault("lock", {})[str(threads)] = d
            return (f"lock median {fmt_ns(d['lock_p50_ns'])}, unlock median {fmt_ns(d['unlock_p50_ns'])}, "
                    f"{d['increments_per_s']:.0f} increments/s")
        return go

    per_round = lat_round_iters(a)
    steps = [("ib_atomic_lat 8 B", lat_native(b, native, per_round, "ib_atomic_lat", 8)),
             (f"ib_atomic_lat {EVENTS} 8 B", lat_native(b, native, per_round, "ib_atomic_lat", 8, EVENTS)),
             ("LMR for the atomics", atomic_lmr),
             ("lite-selftest atomic-count (fetch-and-add)", atomic_lite)]
    for threads in LOCK_THREADS:
        steps.append((f"lite-selftest lock-count, {threads} thread(s)", lock_lite(threads)))
    return steps


def paths_steps(b, a, lite, native):
    """LT_RPC, LT_fetch_add and an uncontended LT_lock/LT_unlock with lite.ko loaded
    as is (write-with-immediate, the RNIC's atomics) and with the stand-ins
    (`messages=send atomics=holder`: WRITE + SEND, the holder's kernel), in
    alternating rounds; each round reloads lite.ko on every node."""
    count = max(20, a.lat_iters // 2)
    nodes = list(range(NODES))

    def measure(path, module_args):
        def go():
            c = b.c
            for n in nodes:
                c.exec(n, "killall lite-selftest 2>/dev/null; true")
            c.reload_module(nodes, module_args, nodes)
            # The servers run until their input ends: a sleep keeps it open (killall ends them).
            c.exec(SERVER, f"sleep 100000 | lite-selftest rpc-serve {PATHS_RPC_ID} --threads 1 "
                           f">/run/lite/bench-paths-rpc.log 2>&1 & "
                           f"sleep 100000 | lite-selftest lmr-serve bench-paths --size 4K --holders {SERVER} "
                           f"--perm rw --zeroed >/run/lite/bench-paths-lmr.log 2>&1 & "
                           f"for i in $(seq 60); do grep -q ready /run/lite/bench-paths-rpc.log && "
                           f"grep -q ready /run/lite/bench-paths-lmr.log && exit 0; sleep 1; done; exit 1",
                   timeout=120)
            rpc = b.tool_json(CLIENT, f"lite-selftest rpc-call {SERVER} {PATHS_RPC_ID} --count {count} --size 16 "
                                      f"--reply 8", a.step_timeout)
            atomic = b.tool_json(CLIENT, f"lite-selftest atomic-count bench-paths --count {count}", a.step_timeout)
            lock = b.tool_json(CLIENT, f"lite-selftest lock-count bench-paths --offset {LOCK_OFFSET} --threads 1 --count {count}",
                               a.step_timeout)
            for d in (rpc, atomic, lock):
                if d.get("failed") or d.get("first_error"):
                    raise ValueError(f"{path}: {d}")
            r = {"rpc_p50_ns": rpc["p50_ns"], "fetch_add_p50_ns": atomic["p50_ns"],
                 "lock_p50_ns": lock["lock_p50_ns"], "unlock_p50_ns": lock["unlock_p50_ns"]}
            rounds = lite.setdefault("paths", {}).setdefault(path, {"rounds": []})["rounds"]
            rounds.append(r)
            for key in r:
                lite["paths"][path][key] = statistics.median(x[key] for x in rounds)
            return (f"RPC {fmt_ns(r['rpc_p50_ns'])}, fetch-and-add {fmt_ns(r['fetch_add_p50_ns'])}, "
                    f"lock {fmt_ns(r['lock_p50_ns'])}, unlock {fmt_ns(r['unlock_p50_ns'])}")
        return go

    def restore():
        for n in nodes:
            b.c.exec(n, "killall lite-selftest 2>/dev/null; true")
        b.c.reload_module(nodes, "", nodes)
        return "lite.ko as loaded by default again"

    steps = []
    for r in range(1, PATHS_ROUNDS + 1):
        for path, module_args in PATHS.items():
            label = f"{path} paths{f' ({module_args})' if module_args else ''}, round {r}/{PATHS_ROUNDS}"
            steps.append((label, measure(path, module_args)))
    steps.append(("lite.ko reloaded with its defaults", restore))
    return steps


# The steps of each section of SECTIONS, in the order they run: (b, args, results'
# `lite`, results' `native`) -> [(label, step)], where a step fills in the results
# and returns a line for the progress output.
SECTION_STEPS = {"lat": lat_steps, "bw": bw_steps, "malloc": malloc_steps, "lmrs": lmr_steps, "rpc": rpc_steps,
                 "atomics": atomic_steps, "paths": paths_steps}


def run_steps(b, results, args):
    """Runs the steps of every section (of args.only's, if given) on `b`'s cluster."""
    chosen = [name for name in SECTIONS if not args.only or name in args.only]
    if args.provider == "siw":
        chosen = [name for name in chosen if name not in NOT_ON_SIW]
    steps = [step for name in chosen
             for step in SECTION_STEPS[name](b, args, results["lite"], results["native"])]
    b.total = len(steps)
    for label, fn in steps:
        b.guarded(label, fn)
