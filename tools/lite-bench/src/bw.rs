//! `bw`: LT_write throughput, back-to-back writes of each size from THREADS
//! threads with an LMR each.

use crate::harness::{buffer, nanos, open, opts, Buffer, Progress};
use crate::stats::{summary_json, throughput};
use crate::{err, Res};
use lite::{Lite, Lmr};
use lite_stats::Summary;
use serde_json::{json, Value};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// One thread's part of one size.
#[derive(Clone, Copy)]
struct Run {
    start: Instant,
    end: Instant,
    writes: u64,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn bw(
    progress: &Progress,
    namespace: u32,
    holder: u32,
    sizes: &[u64],
    seconds: Option<f64>,
    iters: Option<u64>,
    threads: u32,
    warmup: u32,
) -> Res<Value> {
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if iters == Some(0) {
        return Err("--iters must be at least 1".into());
    }
    let limit = match (seconds, iters) {
        (Some(s), _) if !(s > 0.0 && s.is_finite()) => return Err("--seconds must be positive".into()),
        (Some(s), _) => Some(Duration::from_secs_f64(s)),
        (None, None) => Some(Duration::from_secs(2)),
        (None, Some(_)) => None,
    };
    let (_, me) = open(progress, Some(holder))?;
    let lmr_size = sizes.iter().copied().max().unwrap_or(8).max(4096);
    let barrier = Barrier::new(threads as usize);
    // runs[size index][thread]
    let runs: Mutex<Vec<Vec<Run>>> = Mutex::new(vec![Vec::new(); sizes.len()]);
    let lats: Mutex<Vec<Vec<u64>>> = Mutex::new(vec![Vec::new(); sizes.len()]);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (barrier, runs, lats, failure) = (&barrier, &runs, &lats, &failure);
            scope.spawn(move || {
                // Every thread passes every barrier, failed or not, so none waits forever.
                let state: Res<(Lite, Buffer)> =
                    Lite::open().map_err(err("open /dev/lite")).and_then(|lite| Ok((lite, buffer(lmr_size)?)));
                let name = format!("bench-{}-bw-{t}", std::process::id());
                let lmr = match &state {
                    Ok((lite, _)) => {
                        lite.malloc(lmr_size, &name, &opts(vec![holder], namespace)).map_err(err("LT_malloc"))
                    }
                    Err(e) => Err(e.clone()),
                };
                for (i, &size) in sizes.iter().enumerate() {
                    if t == 0 {
                        progress.say(&format!(
                            "LT_write {size} B back to back to node {holder}, {threads} thread(s) ({}/{})",
                            i + 1,
                            sizes.len()
                        ));
                    }
                    barrier.wait();
                    let outcome = match (&lmr, &state) {
                        (Ok(lmr), Ok((_, buf))) => {
                            let chunk = &buf[..size as usize];
                            write_loop(lmr, chunk, warmup, barrier, limit, iters)
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            barrier.wait();
                            Err(e.clone())
                        }
                    };
                    match outcome {
                        Ok((run, mut samples)) => {
                            runs.lock().unwrap()[i].push(run);
                            lats.lock().unwrap()[i].append(&mut samples);
                        }
                        Err(e) => {
                            failure.lock().unwrap().get_or_insert(e);
                        }
                    }
                    barrier.wait();
                }
                if let Ok(lmr) = lmr {
                    let _ = lmr.free();
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    let runs = runs.into_inner().unwrap();
    let mut lats = lats.into_inner().unwrap();
    let mut results = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let per = &runs[i];
        let start = per.iter().map(|r| r.start).min().expect("threads >= 1");
        let end = per.iter().map(|r| r.end).max().expect("threads >= 1");
        let writes: u64 = per.iter().map(|r| r.writes).sum();
        let bytes = writes * size;
        let ns = nanos(end - start);
        let (mib_s, mb_s) = throughput(bytes, ns);
        let lat = Summary::of(&mut lats[i]).map(summary_json).unwrap_or(Value::Null);
        progress.say(&format!(
            "  {size} B x {threads} thread(s): {mib_s:.1} MiB/s ({writes} writes in {:.2} s)",
            ns as f64 / 1e9
        ));
        results.push(json!({
            "size": size,
            "writes": writes,
            "bytes": bytes,
            "seconds": ns as f64 / 1e9,
            "mib_s": mib_s,
            "mb_s": mb_s,
            "write_latency": lat,
        }));
    }
    Ok(json!({
        "bench": "bw",
        "op": "write",
        "node": me,
        "holder": holder,
        "threads": threads,
        "lmr_size": lmr_size,
        "unit": "mib_s = 2^20 bytes/s (perftest's MB/sec); mb_s = 10^6 bytes/s",
        "results": results,
    }))
}

/// Warm-up, a barrier (so all threads start together), then back-to-back writes
/// until `iters` are done or `limit` has passed. Returns the run and per-write times.
fn write_loop(
    lmr: &Lmr<'_>,
    chunk: &[u8],
    warmup: u32,
    barrier: &Barrier,
    limit: Option<Duration>,
    iters: Option<u64>,
) -> Res<(Run, Vec<u64>)> {
    let mut warm = Ok(());
    for _ in 0..warmup {
        warm = lmr.write(0, chunk).map_err(err("warm-up LT_write"));
        if warm.is_err() {
            break;
        }
    }
    barrier.wait();
    warm?;
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut last = start;
    let mut writes = 0u64;
    loop {
        if iters.is_some_and(|n| writes >= n) || limit.is_some_and(|l| last - start >= l) {
            break;
        }
        lmr.write(0, chunk).map_err(err("LT_write"))?;
        let now = Instant::now();
        samples.push(nanos(now - last));
        last = now;
        writes += 1;
    }
    Ok((Run { start, end: last, writes }, samples))
}
