//! `lmr-race`: regression test that no map, read, write, atomic or lock reaches an
//! LMR's memory once its LT_free returned. The kernel must answer EIDRM instead (or,
//! for a map that loses the race, ENOENT or EAGAIN).
//!
//! The master role allocates NAME, fills it, lets mappers at it for a random 0..5 ms
//! and frees it, round after round. Word 0 and every data word hold the round number
//! `r`; the last word is a lock word and stays 0 (only lock calls touch it). The fill
//! writes the data words first and word 0 last, in a second write, so that a mapper
//! reading a nonzero word 0 knows every data word holds it too (a fresh LMR reads as
//! zeros; 0 is never a round).
//!
//! Mapper threads (the master's own, and those of the mapper role on other nodes)
//! map NAME, read word 0 -> `k`, then read, write back, fetch-add 0 and lock/unlock
//! until their handle is revoked. Violations:
//! - a successful read or fetch-add that sees a value other than `k` (memory reused
//!   after the free);
//! - after one operation on a handle failed with EIDRM, another one that does not;
//! - in the master's process only, where the free's return is known exactly: an
//!   operation that began after the free of its handle's round had returned, and
//!   succeeded.

use lite::uapi::*;
use lite::Lite;
use lite_stats::Rng;
use nix::errno::Errno;
use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which side of the race this process plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Allocates, fills and frees NAME round after round (with its own mapper threads).
    Master,
    /// Maps NAME again and again and works on it until the handle is revoked.
    Mapper,
}

/// Command-line arguments of `lmr-race`.
pub struct Args {
    pub name: String,
    pub role: Role,
    pub seconds: u64,
    pub threads: u32,
    pub holders: Vec<u32>,
    pub size: u64,
    pub json: bool,
}

/// Violations and unexpected errors printed in full to stderr; later ones are only counted.
const MAX_REPORTED: u64 = 20;
/// Pause between map attempts while NAME is absent or being freed.
const RETRY: Duration = Duration::from_micros(100);
/// Longest wait of the master for one of its mapper threads to map a new round.
const MAPPED_WAIT: Duration = Duration::from_millis(20);
/// Rounds the master must complete (a round takes seconds on the emulated debug
/// kernel: the free waits for every mapper node to confirm the revocation).
const MIN_ROUNDS: u64 = 3;
/// Most words one read or write covers.
const MAX_RUN: u64 = 32;

/// State the master and its mapper threads share.
struct Shared {
    deadline: Instant,
    stop: AtomicBool,
    /// Only in the master's process: whether `freed` is meaningful.
    precise: bool,
    /// The last round whose LT_free had returned (stored right after the ioctl).
    freed: AtomicU64,
    /// Highest round one of the master's mapper threads read from word 0.
    mapped: AtomicU64,
    /// Messages printed so far (violations and unexpected errors).
    reported: AtomicU64,
}

impl Shared {
    fn running(&self) -> bool {
        !self.stop.load(SeqCst) && Instant::now() < self.deadline
    }

    /// Prints `msg` to stderr unless `MAX_REPORTED` messages were printed already.
    fn report(&self, msg: &str) {
        let n = self.reported.fetch_add(1, SeqCst);
        if n < MAX_REPORTED {
            eprintln!("lmr-race: {msg}");
        } else if n == MAX_REPORTED {
            eprintln!("lmr-race: (further violations and errors are only counted)");
        }
    }
}

/// What the threads counted; merged into one at the end.
#[derive(Default)]
struct Counts {
    maps: u64,
    ops: u64,
    revoked: u64,
    violations: u64,
    /// Maps that found word 0 still 0 (the master had not finished filling).
    not_ready: u64,
    /// "operation: ERRNO" -> occurrences.
    unexpected: BTreeMap<String, u64>,
    /// Rounds (word 0 values) this process got handles for.
    rounds: BTreeSet<u64>,
}

impl Counts {
    fn merge(&mut self, o: Counts) {
        self.maps += o.maps;
        self.ops += o.ops;
        self.revoked += o.revoked;
        self.violations += o.violations;
        self.not_ready += o.not_ready;
        for (k, v) in o.unexpected {
            *self.unexpected.entry(k).or_default() += v;
        }
        self.rounds.extend(o.rounds);
    }

    fn unexpected_total(&self) -> u64 {
        self.unexpected.values().sum()
    }
}

/// A generator seeded from the time, the process and `salt`: the race differs every run.
fn time_seeded(salt: u64) -> Rng {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    Rng::new(t ^ u64::from(std::process::id()) << 32 ^ salt)
}

/// One raw ioctl with a typed argument.
fn io<T>(lite: &Lite, cmd: u32, arg: &mut T) -> Result<(), Errno> {
    lite.raw_ioctl(cmd, arg as *mut T as usize).map(drop)
}

/// Reads (or writes) `words.len()` words at word index `first` through handle `lh`.
fn rw(lite: &Lite, write: bool, lh: u64, first: u64, words: &mut [u64]) -> Result<(), Errno> {
    let mut arg = LiteRw { lh, offset: first * 8, buf: words.as_mut_ptr() as u64, len: words.len() as u64 * 8 };
    io(lite, if write { LITE_IOC_WRITE } else { LITE_IOC_READ }, &mut arg)
}

/// Fetch-and-add 0 on word `word`: its value.
fn peek(lite: &Lite, lh: u64, word: u64) -> Result<u64, Errno> {
    let mut arg = LiteAtomic { lh, offset: word * 8, op: LITE_ATOMIC_FETCH_ADD, ..Default::default() };
    io(lite, LITE_IOC_ATOMIC, &mut arg).map(|()| arg.old)
}

fn lock(lite: &Lite, lh: u64, word: u64, op: u32) -> Result<(), Errno> {
    io(lite, LITE_IOC_LOCK, &mut LiteLock { lh, offset: word * 8, op, reserved: 0 })
}

fn unmap(lite: &Lite, lh: u64) -> Result<(), Errno> {
    io(lite, LITE_IOC_UNMAP, &mut LiteHandle { lh })
}

/// Why a handle's work loop stops.
enum Halt {
    /// This operation failed with EIDRM.
    Revoked(&'static str),
    /// An unexpected error (already counted).
    Error,
}

/// One mapper thread: its own open of /dev/lite and its counters.
struct Mapper<'a> {
    lite: Lite,
    shared: &'a Shared,
    name: [u8; 64],
    rng: Rng,
    buf: Vec<u64>,
    c: Counts,
}

impl Mapper<'_> {
    fn unexpected(&mut self, what: &str, e: Errno) {
        self.shared.report(&format!("unexpected: {what} failed with {e:?} ({})", e.desc()));
        *self.c.unexpected.entry(format!("{what}: {e:?}")).or_default() += 1;
    }

    fn violation(&mut self, msg: String) {
        self.shared.report(&format!("VIOLATION: {msg}"));
        self.c.violations += 1;
    }

    fn freed(&self) -> u64 {
        self.shared.freed.load(SeqCst)
    }

    /// Maps NAME until the time is up; works on each handle until it is revoked.
    fn run(&mut self) {
        while self.shared.running() {
            let mut arg = LiteMap { perm: LITE_PERM_READ | LITE_PERM_WRITE, name: self.name, ..Default::default() };
            match io(&self.lite, LITE_IOC_MAP, &mut arg) {
                Ok(()) => {
                    self.c.maps += 1;
                    if !self.handle(arg.lh, arg.size) {
                        return;
                    }
                }
                Err(Errno::ENOENT | Errno::EAGAIN | Errno::EIDRM) => std::thread::sleep(RETRY),
                Err(e) => {
                    self.unexpected("map", e);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    /// Accounts one operation that began when `freed_before` rounds were freed, on a
    /// handle of round `k`: Ok(true) it succeeded, Ok(false) it was refused with an
    /// errno out of `benign`.
    fn outcome(
        &mut self,
        what: &'static str,
        k: u64,
        freed_before: u64,
        r: Result<(), Errno>,
        benign: &[Errno],
    ) -> Result<bool, Halt> {
        match r {
            Ok(()) => {
                self.c.ops += 1;
                if self.shared.precise && freed_before >= k {
                    self.violation(format!(
                        "{what} through a handle of round {k} succeeded although the free of round {freed_before} had returned before it began"
                    ));
                }
                Ok(true)
            }
            Err(Errno::EIDRM) => Err(Halt::Revoked(what)),
            Err(e) if benign.contains(&e) => Ok(false),
            Err(e) => {
                self.unexpected(what, e);
                Err(Halt::Error)
            }
        }
    }

    /// Works on handle `lh` of an LMR of `size` bytes until it is revoked or the time is
    /// up, then unmaps it. False when this thread cannot go on (the LMR is unusable).
    fn handle(&mut self, lh: u64, size: u64) -> bool {
        let words = size / 8;
        if !size.is_multiple_of(8) || words < 2 {
            self.unexpected(
                &format!("map gave an LMR of {size} bytes, not a whole number (>= 2) of words"),
                Errno::EINVAL,
            );
            self.release(lh);
            return false;
        }
        let freed_before = self.freed();
        let r = rw(&self.lite, false, lh, 0, &mut self.buf[..1]);
        let k = match self.outcome("read word 0", u64::MAX, freed_before, r, &[]) {
            Ok(_) if self.buf[0] == 0 => {
                // The master has not finished filling it: a later map will see it done.
                self.c.not_ready += 1;
                self.release(lh);
                std::thread::sleep(RETRY);
                return true;
            }
            Ok(_) => self.buf[0],
            Err(Halt::Revoked(what)) => {
                self.revoked(lh, what, words - 1);
                return true;
            }
            Err(Halt::Error) => {
                self.release(lh);
                return true;
            }
        };
        if self.shared.precise && freed_before >= k {
            self.violation(format!(
                "read word 0 of round {k} succeeded after the free of round {freed_before} had returned"
            ));
        }
        self.c.rounds.insert(k);
        self.shared.mapped.fetch_max(k, SeqCst);
        while self.shared.running() {
            match self.step(lh, k, words - 1) {
                Ok(()) => {}
                Err(Halt::Revoked(what)) => {
                    self.revoked(lh, what, words - 1);
                    return true;
                }
                Err(Halt::Error) => break,
            }
        }
        self.release(lh);
        true
    }

    /// One read, write-back, fetch-add 0 at random data words, and a lock/unlock of
    /// `lock_word` (the LMR's last word, excluded from the data words).
    fn step(&mut self, lh: u64, k: u64, lock_word: u64) -> Result<(), Halt> {
        let first = self.rng.below(lock_word);
        let n = 1 + self.rng.below((lock_word - first).min(MAX_RUN)) as usize;

        let fb = self.freed();
        let r = rw(&self.lite, false, lh, first, &mut self.buf[..n]);
        if self.outcome("read", k, fb, r, &[])? {
            if let Some(i) = self.buf[..n].iter().position(|&v| v != k) {
                let v = self.buf[i];
                self.violation(format!(
                    "read word {} = {v:#x} through a handle of round {k} (memory reused after free?)",
                    first + i as u64
                ));
            }
        }

        self.buf[..n].fill(k);
        let fb = self.freed();
        let r = rw(&self.lite, true, lh, first, &mut self.buf[..n]);
        self.outcome("write", k, fb, r, &[])?;

        let word = first + self.rng.below(n as u64);
        let fb = self.freed();
        let (r, old) = match peek(&self.lite, lh, word) {
            Ok(old) => (Ok(()), old),
            Err(e) => (Err(e), 0),
        };
        if self.outcome("fetch-add 0", k, fb, r, &[])? && old != k {
            self.violation(format!("fetch-add 0 on word {word} returned {old:#x} through a handle of round {k} (memory reused after free?)"));
        }

        let fb = self.freed();
        let r = match lock(&self.lite, lh, lock_word, LITE_LOCK_ACQUIRE) {
            Err(Errno::EOWNERDEAD) => {
                // Held all the same: count it, then release it like any other.
                self.unexpected("lock", Errno::EOWNERDEAD);
                Ok(())
            }
            r => r,
        };
        // EAGAIN: too many waiters at the word, documented; try again next step.
        if self.outcome("lock", k, fb, r, &[Errno::EAGAIN])? {
            let fb = self.freed();
            let r = lock(&self.lite, lh, lock_word, LITE_LOCK_RELEASE);
            self.outcome("unlock", k, fb, r, &[])?;
        }
        Ok(())
    }

    /// The handle answered `first` with EIDRM: every operation must now do the same
    /// (the lock on `lock_word`, the only word that is ever 0 or a lock); then the
    /// unmap must succeed.
    fn revoked(&mut self, lh: u64, first: &str, lock_word: u64) {
        self.c.revoked += 1;
        let mut word = [0u64; 1];
        let checks: [(&str, Result<(), Errno>); 4] = [
            ("read", rw(&self.lite, false, lh, 0, &mut word)),
            ("write", rw(&self.lite, true, lh, 0, &mut word)),
            ("fetch-add 0", peek(&self.lite, lh, 0).map(drop)),
            ("lock", lock(&self.lite, lh, lock_word, LITE_LOCK_ACQUIRE)),
        ];
        for (what, r) in checks {
            match r {
                Err(Errno::EIDRM) => {}
                Ok(()) => {
                    self.violation(format!("{what} succeeded after {first} had failed with EIDRM on the same handle"))
                }
                Err(e) => {
                    self.violation(format!("{what} failed with {e:?}, not EIDRM, after {first} had failed with EIDRM"))
                }
            }
            if what == "lock" && r.is_ok() {
                let _ = lock(&self.lite, lh, lock_word, LITE_LOCK_RELEASE);
            }
        }
        if let Err(e) = unmap(&self.lite, lh) {
            self.unexpected("unmap of a revoked handle", e);
        }
    }

    /// Unmaps a handle that was not (yet) revoked; that must succeed too.
    fn release(&mut self, lh: u64) {
        if let Err(e) = unmap(&self.lite, lh) {
            self.unexpected("unmap", e);
        }
    }
}

/// What the master's rounds achieved.
struct Rounds {
    done: u64,
    /// Rounds in which one of the master's mapper threads held a handle before the free.
    mapped: u64,
    error: Option<String>,
}

/// Allocates, fills, exposes and frees NAME round after round until the deadline.
fn master_rounds(lite: &Lite, a: &Args, name: [u8; 64], nodes: u32, shared: &Shared) -> Rounds {
    let words = (a.size / 8) as usize;
    let mut fill = vec![0u64; words];
    let mut rng = time_seeded(u64::MAX);
    let mut out = Rounds { done: 0, mapped: 0, error: None };
    while Instant::now() < shared.deadline {
        let r = out.done + 1;
        let mut m =
            LiteMalloc { size: a.size, nodes, perm: LITE_PERM_READ | LITE_PERM_WRITE, name, ..Default::default() };
        if let Err(e) = io(lite, LITE_IOC_MALLOC, &mut m) {
            let hint = if e == Errno::EEXIST {
                " (the name is taken: another lmr-race master, or an LMR left behind)"
            } else {
                ""
            };
            out.error = Some(format!("round {r}: malloc {}: {e:?} ({}){hint}", a.name, e.desc()));
            break;
        }
        fill[1..words - 1].fill(r);
        fill[words - 1] = 0;
        fill[0] = r;
        let filled = rw(lite, true, m.lh, 1, &mut fill[1..]).and_then(|()| rw(lite, true, m.lh, 0, &mut fill[..1]));
        if let Err(e) = filled {
            out.error = Some(format!("round {r}: fill {}: {e:?} ({})", a.name, e.desc()));
            let _ = io(lite, LITE_IOC_FREE, &mut LiteHandle { lh: m.lh });
            break;
        }
        if a.threads > 0 {
            let waiting = Instant::now();
            while shared.mapped.load(SeqCst) < r && waiting.elapsed() < MAPPED_WAIT {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(5000)));
        if shared.mapped.load(SeqCst) >= r {
            out.mapped += 1;
        }
        if let Err(e) = io(lite, LITE_IOC_FREE, &mut LiteHandle { lh: m.lh }) {
            out.error = Some(format!("round {r}: free {}: {e:?} ({})", a.name, e.desc()));
            break;
        }
        shared.freed.store(r, SeqCst);
        out.done = r;
    }
    out
}

/// `lmr-race NAME --role master|mapper`: see the module documentation.
pub fn run(lite: &Lite, a: &Args) -> ExitCode {
    let bytes = a.name.as_bytes();
    if bytes.is_empty() || bytes.len() >= LITE_NAME_MAX as usize || bytes.contains(&0) {
        eprintln!("lite-selftest: lmr-race: NAME must be 1..={} bytes without NUL", LITE_NAME_MAX - 1);
        return ExitCode::from(2);
    }
    let mut name = [0u8; 64];
    name[..bytes.len()].copy_from_slice(bytes);
    if a.role == Role::Master && (!a.size.is_multiple_of(8) || a.size < 16) {
        eprintln!("lite-selftest: lmr-race: --size must be a multiple of 8 and at least 16, not {}", a.size);
        return ExitCode::from(2);
    }
    let Some(nodes) = a.holders.iter().try_fold(0u32, |m, &n| (n < LITE_MAX_NODES).then_some(m | 1 << n)) else {
        eprintln!("lite-selftest: lmr-race: holder node ids must be below {LITE_MAX_NODES}");
        return ExitCode::from(2);
    };
    let shared = Shared {
        deadline: Instant::now() + Duration::from_secs(a.seconds),
        stop: AtomicBool::new(false),
        precise: a.role == Role::Master,
        freed: AtomicU64::new(0),
        mapped: AtomicU64::new(0),
        reported: AtomicU64::new(0),
    };
    let started = Instant::now();
    let total = Mutex::new(Counts::default());
    let rounds = std::thread::scope(|s| {
        for t in 0..a.threads {
            let (shared, total) = (&shared, &total);
            s.spawn(move || {
                let mut c = Counts::default();
                match Lite::open() {
                    Ok(lite) => {
                        let buf = vec![0u64; MAX_RUN as usize];
                        let mut m =
                            Mapper { lite, shared, name, rng: time_seeded(u64::from(t)), buf, c: Counts::default() };
                        m.run();
                        c = m.c;
                    }
                    Err(e) => {
                        shared.report(&format!("thread {t}: open /dev/lite: {e}"));
                        c.unexpected.insert(format!("open /dev/lite: {e}"), 1);
                    }
                }
                total.lock().unwrap_or_else(|e| e.into_inner()).merge(c);
            });
        }
        // A mapper's threads run to the deadline; the master's stop with its rounds.
        (a.role == Role::Master).then(|| {
            let rounds = master_rounds(lite, a, name, nodes, &shared);
            shared.stop.store(true, SeqCst);
            rounds
        })
    });
    let mut c = total.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut problems = Vec::new();
    let (round_count, rounds_mapped) = match &rounds {
        Some(r) => {
            if let Some(e) = &r.error {
                *c.unexpected.entry(format!("master: {e}")).or_default() += 1;
            }
            if r.done < MIN_ROUNDS {
                problems.push(format!("only {} rounds (at least {MIN_ROUNDS} needed)", r.done));
            }
            // How many rounds they catch depends on the guests' speed; none means no race here.
            if a.threads > 0 && r.mapped == 0 {
                problems.push(format!("the master's mapper threads held a handle in none of {} rounds", r.done));
            }
            (r.done, Some(r.mapped))
        }
        None => (c.rounds.len() as u64, None),
    };
    if c.revoked == 0 {
        problems.push("no handle was ever revoked: the race was not exercised".into());
    }
    let unexpected = c.unexpected_total();
    let role = if a.role == Role::Master { "master" } else { "mapper" };
    let seconds = started.elapsed().as_secs_f64();
    let listed: Vec<String> = c.unexpected.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    let summary = format!(
        "lmr-race {role} {}: {round_count} rounds{}, {} maps ({} before the fill), {} ops, {} revoked, {} violations, {unexpected} unexpected{} in {seconds:.1} s",
        a.name,
        rounds_mapped.map_or(String::new(), |m| format!(" ({m} with handles here)")),
        c.maps,
        c.not_ready,
        c.ops,
        c.revoked,
        c.violations,
        if listed.is_empty() { String::new() } else { format!(" [{}]", listed.join("; ")) },
    );
    if a.json {
        let json = serde_json::json!({
            "role": role,
            "rounds": round_count,
            "maps": c.maps,
            "ops": c.ops,
            "revoked": c.revoked,
            "violations": c.violations,
            "unexpected": unexpected,
            "unexpected_errors": c.unexpected,
            "rounds_mapped": rounds_mapped,
            "not_ready": c.not_ready,
            "seconds": seconds,
            "problems": problems,
        });
        println!("{json}");
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    for p in &problems {
        eprintln!("lmr-race: FAIL {p}");
    }
    if c.violations > 0 || unexpected > 0 || !problems.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
