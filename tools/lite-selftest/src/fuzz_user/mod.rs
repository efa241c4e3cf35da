//! `fuzz-user`: a structured random-ioctl fuzzer run as an unprivileged user.
//!
//! The parent forks P workers; each drops to nobody (uid and gid 65534, no
//! supplementary groups), only then opens /dev/lite, and issues its share of the
//! calls from its own seed. Commands are every `LITE_IOC_*` of the ABI, picked by
//! weight, plus random command numbers with our magic. Arguments are structured:
//! fields come from interesting values, node ids from the cluster (and absent ones),
//! handles from those the worker got back (and stale or random ones), RPC ids and
//! LMR names from small pools shared by the workers so that calls meet servers and
//! maps meet LMRs, user pointers from a valid buffer (followed by an inaccessible
//! page), NULL, a kernel address, a read-only page or random. The argument pointer
//! itself is sometimes NULL, read-only, unaligned or running off its mapping.
//!
//! The membership, QoS-setting, rule and reserve commands need CAP_NET_ADMIN: as
//! nobody each must fail with EPERM, every time; anything else is an
//! EPERM-violation. A worker that crashes, is killed or makes no progress for
//! `STALL` fails the run. Nothing waits long: timeouts are 1..50 ms, and a 100 ms
//! interval timer (SIGALRM, no SA_RESTART) interrupts any wait left (a lock word
//! holding garbage, a lock another worker keeps), so blocked calls end with EINTR.
//!
//! Besides calls, a worker scribbles on its shared page, closes and reopens
//! /dev/lite (its handles go stale), and forks children that call through its open
//! file and are killed with SIGKILL within 20 ms, often in the middle of a call.
//!
//! `calls.rs` holds the commands and how each one's arguments are made, `chaos.rs`
//! what a worker does to its process; this file the workers and the parent that
//! watches them.

mod calls;
mod chaos;

use calls::{Fuzz, CMDS, PAGE, RW};
use lite::Lite;
use nix::errno::Errno;
use nix::sys::mman::{mmap_anonymous, MapFlags};
use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, pipe, ForkResult, Gid, Pid, Uid};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Command-line arguments of `fuzz-user`.
pub struct Args {
    pub seed: u64,
    pub count: u64,
    pub nodes: Vec<u32>,
    pub processes: u32,
}

pub(super) const NOBODY: u32 = 65534;
/// A worker whose call count does not move for this long is reported and killed.
const STALL: Duration = Duration::from_secs(30);
/// Period of the SIGALRM that interrupts waits.
const ALARM_US: libc::suseconds_t = 100_000;

extern "C" fn on_alarm(_: libc::c_int) {}

/// SIGALRM every `period` microseconds (0: stop), without SA_RESTART: blocked ioctls get EINTR.
pub(crate) fn alarm(period: libc::suseconds_t) -> Result<(), Errno> {
    let act = SigAction::new(SigHandler::Handler(on_alarm), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler does nothing, which is async-signal-safe.
    unsafe { sigaction(Signal::SIGALRM, &act) }?;
    let t = libc::timeval { tv_sec: 0, tv_usec: period };
    let timer = libc::itimerval { it_interval: t, it_value: t };
    // SAFETY: a valid itimerval; the old value is not wanted.
    Errno::result(unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) }).map(drop)
}

/// Closes every descriptor inherited from the parent (its /dev/lite, other workers'
/// pipes) but stdio and `keep`.
fn close_inherited(keep: i32) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    for fd in fds.into_iter().filter(|&fd| fd > 2 && fd != keep) {
        // SAFETY: the worker never uses these descriptors (or the objects owning them) again.
        unsafe { libc::close(fd) };
    }
}

/// A worker: becomes nobody, opens /dev/lite, makes `calls` calls, writes its counts
/// to `report` as JSON. Returns its exit status (2: it could not start).
fn worker(idx: usize, a: &Args, calls: u64, progress: &[AtomicU64], mut report: File) -> i32 {
    let _ = nix::unistd::setgroups(&[]);
    if let Err(e) = nix::unistd::setgid(Gid::from_raw(NOBODY)).and_then(|()| nix::unistd::setuid(Uid::from_raw(NOBODY)))
    {
        eprintln!("fuzz-user[{idx}]: cannot become nobody ({e}): run as root");
        return 2;
    }
    let (uid, euid) = (nix::unistd::getuid().as_raw(), nix::unistd::geteuid().as_raw());
    let (gid, egid) = (nix::unistd::getgid().as_raw(), nix::unistd::getegid().as_raw());
    if [uid, euid, gid, egid] != [NOBODY; 4] {
        eprintln!("fuzz-user[{idx}]: uid {uid} euid {euid} gid {gid} egid {egid} after dropping privileges");
        return 2;
    }
    // SAFETY: prctl with integer arguments: die with the parent rather than go on alone.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    close_inherited(report.as_raw_fd());
    let fuzz = Lite::open().map_err(|e| format!("as nobody: {e}"));
    let fuzz = fuzz.and_then(|l| Fuzz::new(l, a.seed.wrapping_add(idx as u64), a).map_err(|e| format!("buffers: {e}")));
    let mut f = match fuzz.and_then(|f| alarm(ALARM_US).map(|()| f).map_err(|e| format!("interval timer: {e}"))) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fuzz-user[{idx}]: {e}");
            return 2;
        }
    };
    let started = Instant::now();
    for n in 1..=calls {
        let i = f.pick_command();
        progress[2 * idx + 1].store(i as u64 + 1, Relaxed);
        f.one(i);
        progress[2 * idx].store(n, Relaxed);
        if n % 10_000 == 0 {
            eprintln!("fuzz-user[{idx}]: {n}/{calls} calls, {:.1} s", started.elapsed().as_secs_f64());
        }
    }
    let _ = alarm(0);
    match report.write_all(f.report().to_string().as_bytes()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("fuzz-user[{idx}]: writing the report: {e}");
            1
        }
    }
}

/// A worker as the parent sees it.
struct Kid {
    pid: Pid,
    /// Why it failed (`None`: running, or exited 0).
    failure: Option<String>,
    done: bool,
    last_calls: u64,
    last_change: Instant,
    killed_at: Option<Instant>,
}

impl Kid {
    /// Polls the worker: reaps it, or notices that it stopped making progress (its call
    /// count in `progress`) and kills it.
    fn poll(&mut self, idx: usize, progress: &[AtomicU64]) {
        let end = |k: &mut Kid, why: Option<String>| (k.done, k.failure) = (true, k.failure.take().or(why));
        match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, 0)) => end(self, None),
            Ok(WaitStatus::Exited(_, 2)) => end(self, Some("could not start (see its message)".into())),
            Ok(WaitStatus::Exited(_, code)) => end(self, Some(format!("exited with status {code}"))),
            Ok(WaitStatus::Signaled(_, sig, core)) => {
                end(self, Some(format!("killed by {sig:?}{}", if core { " (core dumped)" } else { "" })))
            }
            Ok(_) => {
                let calls = progress[2 * idx].load(Relaxed);
                if calls != self.last_calls {
                    (self.last_calls, self.last_change) = (calls, Instant::now());
                } else if let Some(at) = self.killed_at {
                    // Stuck in the kernel, where SIGKILL does not reach it: leave it.
                    if at.elapsed() > Duration::from_secs(10) {
                        end(self, None);
                    }
                } else if self.last_change.elapsed() > STALL {
                    let cmd = progress[2 * idx + 1].load(Relaxed) as usize;
                    let name = cmd.checked_sub(1).and_then(|i| CMDS.get(i)).map_or("no call", |c| c.0);
                    let msg =
                        format!("hung: no progress for {} s after {calls} calls, in {name}; killed", STALL.as_secs());
                    eprintln!("fuzz-user: worker {idx} (pid {}) {msg}", self.pid);
                    (self.failure, self.killed_at) = (Some(msg), Some(Instant::now()));
                    let _ = kill(self.pid, Signal::SIGKILL);
                }
            }
            Err(e) => end(self, Some(format!("waitpid: {e}"))),
        }
    }
}

/// `fuzz-user SEED COUNT [--nodes LIST] [--processes P]`: see the module documentation.
pub fn run(a: &Args) -> ExitCode {
    if !(1..=64).contains(&a.processes) {
        eprintln!("lite-selftest: fuzz-user: --processes must be 1..=64");
        return ExitCode::from(2);
    }
    let procs = a.processes as usize;
    let page = NonZeroUsize::new(PAGE).unwrap_or(NonZeroUsize::MIN);
    // SAFETY: a fresh shared anonymous page: two counters per worker, shared across fork.
    let shm = match unsafe { mmap_anonymous(None, page, RW, MapFlags::MAP_SHARED) } {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lite-selftest: fuzz-user: shared page: {e}");
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: the page is zeroed, aligned, never unmapped, and only used atomically.
    let progress: &[AtomicU64] = unsafe { std::slice::from_raw_parts(shm.as_ptr() as *const AtomicU64, 2 * procs) };
    let started = Instant::now();
    let (mut kids, mut pipes) = (Vec::new(), Vec::new());
    for idx in 0..procs {
        let calls = a.count / procs as u64 + u64::from((idx as u64) < a.count % procs as u64);
        // SAFETY (fork): single-threaded here (the readers start after the last fork);
        // the child only runs `worker` and exits.
        let forked = pipe().and_then(|(r, w)| unsafe { fork() }.map(|f| (f, r, w)));
        match forked {
            Ok((ForkResult::Child, r, w)) => {
                drop(r);
                std::process::exit(worker(idx, a, calls, progress, File::from(w)));
            }
            Ok((ForkResult::Parent { child }, r, _)) => {
                pipes.push(File::from(r));
                let now = Instant::now();
                kids.push(Kid {
                    pid: child,
                    failure: None,
                    done: false,
                    last_calls: 0,
                    last_change: now,
                    killed_at: None,
                });
            }
            Err(e) => {
                eprintln!("lite-selftest: fuzz-user: starting worker {idx}: {e}");
                kids.iter().for_each(|k| _ = kill(k.pid, Signal::SIGKILL));
                return ExitCode::FAILURE;
            }
        }
    }
    let read_all = |mut p: File| {
        let mut v = Vec::new();
        let _ = p.read_to_end(&mut v);
        v
    };
    let readers: Vec<_> = pipes.into_iter().map(|p| std::thread::spawn(move || read_all(p))).collect();
    while kids.iter().any(|k| !k.done) {
        std::thread::sleep(Duration::from_millis(100));
        kids.iter_mut().enumerate().filter(|(_, k)| !k.done).for_each(|(idx, k)| k.poll(idx, progress));
    }
    let seconds = started.elapsed().as_secs_f64();
    let (mut totals, mut violations) = (BTreeMap::<String, BTreeMap<String, u64>>::new(), 0);
    let mut time_ns = BTreeMap::<String, u64>::new();
    for (k, reader) in kids.iter_mut().zip(readers) {
        if k.failure.is_some() {
            continue; // its reader may block for good on a worker stuck in the kernel
        }
        let Some(report) = reader.join().ok().and_then(|v| serde_json::from_slice::<serde_json::Value>(&v).ok()) else {
            k.failure = Some("exited without a report".into());
            continue;
        };
        violations += report["eperm_violations"].as_u64().unwrap_or(0);
        for (cmd, ns) in report["time_ns"].as_object().into_iter().flatten() {
            *time_ns.entry(cmd.clone()).or_default() += ns.as_u64().unwrap_or(0);
        }
        for (cmd, outcomes) in report["calls"].as_object().into_iter().flatten() {
            for (outcome, n) in outcomes.as_object().into_iter().flatten() {
                *totals.entry(cmd.clone()).or_default().entry(outcome.clone()).or_default() += n.as_u64().unwrap_or(0);
            }
        }
    }
    let (mut calls, mut by_command) = (0, Vec::new());
    for (cmd, outcomes) in &totals {
        let n: u64 = outcomes.values().sum();
        calls += n;
        by_command.push(format!("{cmd}={n}"));
        let detail: Vec<String> = outcomes.iter().map(|(o, c)| format!("{o} {c}")).collect();
        println!("  {cmd:<15} {n:>9}: {}", detail.join(", "));
    }
    let mut slowest: Vec<(&String, &u64)> = time_ns.iter().collect();
    slowest.sort_by(|a, b| b.1.cmp(a.1));
    let slowest: Vec<String> =
        slowest.iter().take(8).map(|(cmd, ns)| format!("{cmd} {:.1}", **ns as f64 / 1e9)).collect();
    println!("  time in the kernel by command (s, all workers): {}", slowest.join(", "));
    println!(
        "fuzz-user: {calls} calls in {seconds:.1} s, by command: {}, EPERM-violations: {violations}",
        by_command.join(", ")
    );
    let failed: Vec<String> =
        kids.iter().filter_map(|k| Some(format!("worker pid {}: {}", k.pid, k.failure.as_ref()?))).collect();
    failed.iter().for_each(|f| eprintln!("fuzz-user: FAIL {f}"));
    if violations > 0 {
        eprintln!("fuzz-user: FAIL {violations} privileged calls as nobody did not fail with EPERM");
    }
    if failed.is_empty() && violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
