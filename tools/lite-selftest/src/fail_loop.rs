//! `fail-loop`: a tenant that loops on calls that fail, for a while (the hostile
//! tenant of the priority-class benchmark, `qos_bench.py --hostile`): handles that
//! are unknown or belong to another open of /dev/lite, writes through a read-only
//! handle, a map for writing that the LMR's permissions refuse, ranges past an
//! LMR's end, and an allocation larger than its holder may hold (which asks every
//! node about the name and then the holder). All calls are raw ioctls, so that the
//! kernel, not liblite, refuses them. Each must fail with its errno every time;
//! prints a JSON summary, and exits 1 if one did not.

use crate::lmr_hostile::Raw;
use lite::uapi::*;
use lite::Lite;
use nix::errno::Errno;
use serde_json::json;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// More than any node may hold (LITE_LMR_MAX_SIZE allows it; the holder refuses).
const HUGE: u64 = 64 << 30;
/// Unexpected outcomes reported one by one in the JSON; the rest are only counted.
const MAX_REPORTED: usize = 10;

/// The failing calls, in the order each thread goes round them, with their errno.
pub(crate) const KINDS: [(&str, Errno); 7] = [
    ("unknown handle", Errno::EBADF),
    ("foreign handle", Errno::EBADF),
    ("write through a read-only handle", Errno::EACCES),
    ("map for writing without permission", Errno::EACCES),
    ("write past the end", Errno::ERANGE),
    ("read of 2^64 - 1 bytes", Errno::ERANGE),
    ("malloc of 64 GiB at the holder", Errno::ENOMEM),
];

/// The kind a thread's `call`-th call makes: threads start at different kinds, so
/// that they do not all wait for the slow one at once.
pub(crate) fn kind_of(thread: u32, call: u64) -> usize {
    ((u64::from(thread) + call) % KINDS.len() as u64) as usize
}

/// Whether `got` is the failure `want`; otherwise what went wrong.
pub(crate) fn judge(kind: usize, got: Result<i32, Errno>) -> Option<String> {
    let (what, want) = KINDS[kind];
    match got {
        Err(e) if e == want => None,
        Err(e) => Some(format!("{what}: {e:?}, want {want:?}")),
        Ok(_) => Some(format!("{what}: succeeded, want {want:?}")),
    }
}

pub struct Args {
    pub holder: u32,
    pub seconds: f64,
    pub threads: u32,
}

pub fn run(lite: &Lite, args: &Args) -> ExitCode {
    if args.threads == 0 || !(args.seconds > 0.0 && args.seconds.is_finite()) {
        eprintln!("lite-selftest: --threads must be at least 1 and --seconds positive");
        return ExitCode::from(2);
    }
    let me = lite.node_id().unwrap_or(u32::MAX);
    if args.holder >= LITE_MAX_NODES {
        eprintln!("lite-selftest: --holder must be a node id below {LITE_MAX_NODES}");
        return ExitCode::from(2);
    }
    let raw = Raw(lite);
    let pid = std::process::id();
    // An LMR others may only read, at the holder, and a read-only handle of it.
    let name = format!("fail-{pid}-ro").into_bytes();
    let (got, master) = raw.malloc(MIB, 1 << args.holder, LITE_PERM_READ, &name);
    if let Err(e) = got {
        eprintln!("fail-loop: malloc 1 MiB at node {}: {e:?}", args.holder);
        return ExitCode::FAILURE;
    }
    let (got, ro) = raw.map(&name, LITE_PERM_READ);
    let other = Lite::open();
    let (ro, other) = match (got, other) {
        (Ok(_), Ok(other)) => (ro, other),
        (Err(e), _) => {
            eprintln!("fail-loop: map the LMR for reading: {e:?}");
            return ExitCode::FAILURE;
        }
        (_, Err(e)) => {
            eprintln!("fail-loop: open /dev/lite a second time: {e}");
            return ExitCode::FAILURE;
        }
    };
    let foreign = Raw(&other);
    let huge_name = format!("fail-{pid}-huge").into_bytes();
    let counts: Vec<AtomicU64> = KINDS.iter().map(|_| AtomicU64::new(0)).collect();
    let unexpected = AtomicU64::new(0);
    let reported = Mutex::new(Vec::new());
    let limit = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..args.threads {
            let (raw, foreign, counts, unexpected, reported) = (&raw, &foreign, &counts, &unexpected, &reported);
            let (name, huge_name) = (&name, &huge_name);
            scope.spawn(move || {
                let mut buf = [0u8; 16];
                let b = buf.as_mut_ptr() as u64;
                let mut call = 0u64;
                while start.elapsed() < limit {
                    let kind = kind_of(t, call);
                    let got = match kind {
                        0 => raw.write(0xdead_beef_0000_0001, 0, b, 16),
                        1 => foreign.write(master, 0, b, 16),
                        2 => raw.write(ro, 0, b, 16),
                        3 => raw.map(name, LITE_PERM_WRITE).0,
                        4 => raw.write(master, MIB - 8, b, 16),
                        5 => raw.read(master, 1, b, u64::MAX),
                        _ => raw.malloc(HUGE, 1 << args.holder, LITE_PERM_READ | LITE_PERM_WRITE, huge_name).0,
                    };
                    counts[kind].fetch_add(1, Ordering::Relaxed);
                    if let Some(why) = judge(kind, got) {
                        unexpected.fetch_add(1, Ordering::Relaxed);
                        let mut reported = reported.lock().unwrap();
                        if reported.len() < MAX_REPORTED {
                            reported.push(why);
                        }
                    }
                    call += 1;
                }
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let _ = raw.free(master);
    let calls: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    let unexpected = unexpected.load(Ordering::Relaxed);
    let kinds: serde_json::Map<String, serde_json::Value> = KINDS
        .iter()
        .zip(&counts)
        .map(|(&(what, errno), n)| {
            (what.to_string(), json!({"calls": n.load(Ordering::Relaxed), "errno": format!("{errno:?}")}))
        })
        .collect();
    println!(
        "{}",
        json!({
            "bench": "fail-loop",
            "node": me,
            "holder": args.holder,
            "threads": args.threads,
            "seconds": seconds,
            "calls": calls,
            "calls_per_s": calls as f64 / seconds.max(1e-9),
            "kinds": kinds,
            "unexpected": unexpected,
            "first_unexpected": reported.into_inner().unwrap(),
        })
    );
    if unexpected == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_goes_round_every_kind() {
        for t in 0..3 {
            let mut seen: Vec<usize> = (0..KINDS.len() as u64).map(|c| kind_of(t, c)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..KINDS.len()).collect::<Vec<_>>());
        }
        assert_ne!(kind_of(0, 0), kind_of(1, 0), "threads start at different kinds");
    }

    #[test]
    fn only_the_right_errno_passes() {
        assert_eq!(judge(0, Err(Errno::EBADF)), None);
        assert!(judge(0, Err(Errno::EINVAL)).unwrap().contains("EINVAL, want EBADF"));
        assert!(judge(6, Ok(0)).unwrap().contains("succeeded"));
    }
}
