//! `atomic-count`: threads racing increments of one word of a mapped LMR, with
//! fetch-and-add or with compare-and-swap retry loops; `atomic-read`: the word's
//! value. The test adds up what every process on every node incremented and
//! compares it with the final word: equal only if no increment was lost or doubled.

use lite::{Lite, Perm};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub struct Count {
    pub name: String,
    pub offset: u64,
    pub threads: u32,
    pub count: u64,
    pub cas: bool,
}

/// Maps `name` for reading and writing; prints the error and fails otherwise.
pub fn map<'a>(lite: &'a Lite, name: &str) -> Result<lite::Lmr<'a>, ExitCode> {
    lite.map(name, Perm::from_bits(Perm::READ.bits() | Perm::WRITE.bits()).unwrap_or(Perm::NONE), 0).map_err(|e| {
        eprintln!("lite-selftest: map {name}: {e}");
        ExitCode::FAILURE
    })
}

pub fn count(lite: &Lite, a: &Count) -> ExitCode {
    let lmr = match map(lite, &a.name) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let (retries, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let first_error = std::sync::Mutex::new(None::<String>);
    let latencies = std::sync::Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..a.threads {
            let (lmr, retries, failed, first_error, latencies) = (&lmr, &retries, &failed, &first_error, &latencies);
            s.spawn(move || {
                let mut mine = Vec::with_capacity(a.count as usize);
                // Compare-and-swap needs a guess of the current value; a miss returns the right one.
                let mut guess = 0u64;
                for _ in 0..a.count {
                    let began = Instant::now();
                    let result = if a.cas {
                        loop {
                            match lmr.compare_swap(a.offset, guess, guess.wrapping_add(1)) {
                                Ok(old) if old == guess => break Ok(()),
                                Ok(old) => {
                                    retries.fetch_add(1, Ordering::Relaxed);
                                    guess = old;
                                }
                                Err(e) => break Err(e),
                            }
                        }
                    } else {
                        lmr.fetch_add(a.offset, 1).map(|_| ())
                    };
                    mine.push(began.elapsed().as_nanos() as u64);
                    if let Err(e) = result {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(format!("{e} ({})", e.errno()));
                        return;
                    }
                    guess = guess.wrapping_add(1);
                }
                latencies.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
            });
        }
    });
    let mut lat = latencies.into_inner().unwrap_or_else(|e| e.into_inner());
    lat.sort_unstable();
    let pct = |p: f64| lite_stats::percentile(&lat, p);
    let failed = failed.load(Ordering::Relaxed);
    let summary = serde_json::json!({
        "increments": lat.len(),
        "failed_threads": failed,
        "cas_retries": retries.load(Ordering::Relaxed),
        "seconds": start.elapsed().as_secs_f64(),
        "p50_ns": pct(50.0),
        "p99_ns": pct(99.0),
        "first_error": first_error.into_inner().unwrap_or_else(|e| e.into_inner()),
    });
    println!("{summary}");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Prints the word at `offset` (a fetch-and-add of 0, so it is read like the atomics see it).
pub fn read(lite: &Lite, name: &str, offset: u64) -> ExitCode {
    let lmr = match map(lite, name) {
        Ok(l) => l,
        Err(code) => return code,
    };
    match lmr.fetch_add(offset, 0) {
        Ok(value) => {
            println!("{value}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lite-selftest: read the word at {offset} of {name}: {e}");
            ExitCode::FAILURE
        }
    }
}
