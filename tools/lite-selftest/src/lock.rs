//! `lock-count`: threads incrementing a plain (non-atomic) counter with LT_read and
//! LT_write inside LT_lock; only mutual exclusion keeps every increment.
//! `lock-hold`: takes a lock and keeps it until stdin closes (or the process is
//! killed). `lock-append`: appends an id to a list under a lock, so the list shows
//! the order in which waiters got it. `barrier-rounds`: back-to-back barriers with skewed arrivals, checking
//! that no caller leaves a round before everyone arrived.

use crate::atomic::map;
use lite::{Lite, Lmr};
use lite_stats::Rng;
use std::io::BufRead;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Count {
    pub name: String,
    pub offset: u64,
    pub threads: u32,
    pub count: u64,
}

/// Nanoseconds one locked increment spent in LT_lock and in LT_unlock.
struct Timing {
    lock_ns: u64,
    unlock_ns: u64,
}

fn increment(lmr: &Lmr<'_>, lock: u64, held_over: &Mutex<u64>) -> lite::Result<Timing> {
    let began = Instant::now();
    let guard = lmr.lock(lock)?;
    let lock_ns = began.elapsed().as_nanos() as u64;
    if guard.holder_died() {
        *held_over.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
    let mut word = [0u8; 8];
    lmr.read(lock + 8, &mut word)?;
    let value = u64::from_le_bytes(word) + 1;
    lmr.write(lock + 8, &value.to_le_bytes())?;
    let unlocking = Instant::now();
    guard.unlock()?;
    Ok(Timing { lock_ns, unlock_ns: unlocking.elapsed().as_nanos() as u64 })
}

pub fn count(lite: &Lite, a: &Count) -> ExitCode {
    let lmr = match map(lite, &a.name) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let first_error = Mutex::new(None::<String>);
    let timings = Mutex::new(Vec::new());
    let held_over = Mutex::new(0u64);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..a.threads {
            let (lmr, first_error, timings, held_over) = (&lmr, &first_error, &timings, &held_over);
            s.spawn(move || {
                let mut mine = Vec::with_capacity(a.count as usize);
                for _ in 0..a.count {
                    match increment(lmr, a.offset, held_over) {
                        Ok(t) => mine.push(t),
                        Err(e) => {
                            let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
                            first.get_or_insert(format!("{e} ({})", e.errno()));
                            break;
                        }
                    }
                }
                timings.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let timings = timings.into_inner().unwrap_or_else(|e| e.into_inner());
    let sorted = |pick: fn(&Timing) -> u64| {
        let mut v: Vec<u64> = timings.iter().map(pick).collect();
        v.sort_unstable();
        v
    };
    let (lock, unlock) = (sorted(|t| t.lock_ns), sorted(|t| t.unlock_ns));
    let first_error = first_error.into_inner().unwrap_or_else(|e| e.into_inner());
    let summary = serde_json::json!({
        "increments": timings.len(),
        "seconds": seconds,
        "increments_per_s": timings.len() as f64 / seconds,
        "lock_p50_ns": lite_stats::percentile(&lock, 50.0),
        "lock_p99_ns": lite_stats::percentile(&lock, 99.0),
        "unlock_p50_ns": lite_stats::percentile(&unlock, 50.0),
        "unlock_p99_ns": lite_stats::percentile(&unlock, 99.0),
        "taken_from_dead_holders": held_over.into_inner().unwrap_or_else(|e| e.into_inner()),
        "first_error": first_error,
    });
    println!("{summary}");
    if first_error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Takes the lock at `offset`, prints `locked` and holds it until stdin closes.
pub fn hold(lite: &Lite, name: &str, offset: u64) -> ExitCode {
    let lmr = match map(lite, name) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let guard = match lmr.lock(offset) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("lite-selftest: lock {name} at {offset}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("locked");
    for _ in std::io::stdin().lock().lines() {}
    match guard.unlock() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lite-selftest: unlock {name} at {offset}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Takes the lock at `offset` and, under it, appends `id` to the list whose length is
/// the word at `offset + 8` and whose entries follow it.
pub fn append(lite: &Lite, name: &str, offset: u64, id: u64) -> ExitCode {
    let lmr = match map(lite, name) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let appended = lmr.lock(offset).and_then(|guard| {
        let mut word = [0u8; 8];
        lmr.read(offset + 8, &mut word)?;
        let len = u64::from_le_bytes(word);
        let entry = len.checked_mul(8).and_then(|b| b.checked_add(offset + 16)).ok_or(lite::Error::OutOfRange {
            offset,
            len: len.saturating_mul(8),
            size: None,
        })?;
        lmr.write(entry, &id.to_le_bytes())?;
        lmr.write(offset + 8, &(len + 1).to_le_bytes())?;
        guard.unlock().map(|()| len)
    });
    match appended {
        Ok(position) => {
            println!("{}", serde_json::json!({ "id": id, "position": position }));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lite-selftest: append {id} under the lock {name} at {offset}: {e}");
            ExitCode::FAILURE
        }
    }
}

pub struct Rounds {
    pub name: String,
    pub offset: u64,
    pub participants: u32,
    pub rounds: u64,
    pub skew_ms: u64,
    pub timeout_ms: u64,
}

/// Each round: count this arrival in the word after the barrier counter, sleep a
/// pseudo-random skew, pass the barrier, then the arrivals word must show every
/// participant of this round.
pub fn rounds(lite: &Lite, a: &Rounds) -> ExitCode {
    let lmr = match map(lite, &a.name) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let arrivals = a.offset + 8;
    let mut rng = Rng::new(u64::from(std::process::id()));
    let mut early = 0u64;
    let mut waits = Vec::new();
    let mut error = None;
    for round in 0..a.rounds {
        if a.skew_ms > 0 {
            std::thread::sleep(Duration::from_millis(rng.below(a.skew_ms)));
        }
        let result = lmr.fetch_add(arrivals, 1).and_then(|_| {
            let began = Instant::now();
            lmr.barrier(a.offset, a.participants, Duration::from_millis(a.timeout_ms))?;
            waits.push(began.elapsed().as_secs_f64());
            lmr.fetch_add(arrivals, 0)
        });
        match result {
            Ok(seen) if seen < u64::from(a.participants) * (round + 1) => early += 1,
            Ok(_) => {}
            Err(e) => {
                error = Some(format!("round {round}: {e} ({})", e.errno()));
                break;
            }
        }
    }
    let summary = serde_json::json!({
        "rounds": waits.len(),
        "left_early": early,
        "max_wait_s": waits.iter().copied().fold(0.0, f64::max),
        "error": error,
    });
    println!("{summary}");
    if early == 0 && error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
