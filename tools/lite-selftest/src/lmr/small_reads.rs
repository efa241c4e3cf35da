//! `lmr-small-reads`: threads read small pieces of one LMR at once, each at its own
//! random offsets, lengths and buffer alignments, and compare every byte with the
//! position-dependent pattern. Small reads from another node land in the kernel's
//! shared staging pages before they are copied out: a page handed to two readers at
//! once, or copied out before its read completed, shows here as wrong bytes.

use super::pattern::{fill_pattern, write_pattern};
use super::{describe_mismatch, why};
use lite::{Lite, MallocOptions};
use lite_stats::Rng;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// LMR size: large enough that the readers' pieces rarely coincide.
const SIZE: u64 = 1 << 20;
/// The longest read: one staging page.
const MAX_READ: usize = 4096;
/// Room before a read's buffer, so that it starts at any offset in its page.
const MAX_SKEW: usize = 4096;

/// What `lmr-small-reads` was asked to do.
pub struct SmallReads {
    pub holders: Vec<u32>,
    pub threads: u32,
    pub reads: u32,
    pub seed: u64,
}

pub fn small_reads(lite: &Lite, args: &SmallReads) -> ExitCode {
    let name = format!("small-reads-{}", std::process::id());
    let opts = MallocOptions { holders: args.holders.clone(), ..Default::default() };
    let lmr = match lite.malloc(SIZE, &name, &opts) {
        Ok(lmr) => lmr,
        Err(e) => {
            eprintln!("small-reads: malloc {SIZE} bytes as {name}: {}", why(&e));
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = write_pattern(&lmr, &name) {
        eprintln!("small-reads: fill {name}: {}", why(&e));
        return ExitCode::FAILURE;
    }
    let (bytes, wrong) = (AtomicU64::new(0), AtomicU64::new(0));
    let first_problem = Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for thread in 0..args.threads {
            let (lmr, name, bytes, wrong, first_problem) = (&lmr, &name, &bytes, &wrong, &first_problem);
            let mut rng = Rng::new(args.seed ^ u64::from(thread).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            s.spawn(move || {
                let mut buf = vec![0u8; MAX_SKEW + MAX_READ];
                let mut want = vec![0u8; MAX_READ];
                for _ in 0..args.reads {
                    let len = 1 + rng.below(MAX_READ as u64) as usize;
                    let offset = rng.below(SIZE - len as u64 + 1);
                    let skew = rng.below(MAX_SKEW as u64) as usize;
                    let got = &mut buf[skew..skew + len];
                    // A stale byte must not pass for a right one.
                    got.fill(!0);
                    let problem = match lmr.read(offset, got) {
                        Ok(()) => {
                            fill_pattern(name, offset, &mut want[..len]);
                            bytes.fetch_add(len as u64, Ordering::Relaxed);
                            describe_mismatch(offset, got, &want[..len]).map(|m| format!("read {len} B: {m}"))
                        }
                        Err(e) => Some(format!("read {len} B at {offset}: {}", why(&e))),
                    };
                    if let Some(problem) = problem {
                        wrong.fetch_add(1, Ordering::Relaxed);
                        first_problem.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(problem);
                    }
                }
            });
        }
    });
    let (bytes, wrong) = (bytes.into_inner(), wrong.into_inner());
    let reads = u64::from(args.threads) * u64::from(args.reads);
    if let Some(problem) = first_problem.into_inner().unwrap_or_else(|e| e.into_inner()) {
        eprintln!("small-reads: {wrong} of {reads} reads wrong or failed; the first: {problem}");
        return ExitCode::FAILURE;
    }
    println!("small-reads: ok, {reads} reads from {} threads, {bytes} bytes, all right", args.threads);
    ExitCode::SUCCESS
}
