//! `lmrs`: LT_write latency to the first and to random ones of COUNT LMRs,
//! allocated and freed from THREADS threads.

use crate::harness::{buffer, in_threads, nanos, open, opts, Progress};
use crate::stats::summary_json;
use crate::{err, Res};
use lite::{Lite, Lmr};
use lite_stats::{Rng, Summary};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// LMRs allocated through one open file (the module allows 65 536 per file).
const LMRS_PER_FILE: u32 = 60_000;

#[allow(clippy::too_many_arguments)]
pub(crate) fn lmrs(
    progress: &Progress,
    namespace: u32,
    count: u32,
    holder: u32,
    size: u64,
    iters: u32,
    warmup: u32,
    seed: Option<u64>,
    write_size: u64,
    threads: u32,
) -> Res<Value> {
    if count == 0 || iters == 0 {
        return Err("--count and --iters must be at least 1".into());
    }
    if write_size > size {
        return Err(format!("--write-size {write_size} exceeds the LMR size {size}"));
    }
    let (lite, me) = open(progress, Some(holder))?;
    let pid = std::process::id();
    let options = opts(vec![holder], namespace);
    let name = |i: u32| format!("bench-{pid}-lmr-{i}");
    let buf = buffer(write_size)?;
    let first = lite.malloc(size, &name(0), &options).map_err(err("LT_malloc of the first LMR"))?;
    let time_write = |lmr: &Lmr<'_>| -> Res<u64> {
        let t = Instant::now();
        lmr.write(0, &buf).map_err(err("LT_write"))?;
        Ok(nanos(t.elapsed()))
    };
    // The first LMR alone, before the others exist: the same process and cluster,
    // so that the comparison with many LMRs does not span runs.
    progress.say(&format!("{iters} LT_writes of {write_size} B to the first LMR, alone"));
    for _ in 0..warmup {
        time_write(&first)?;
    }
    let mut alone = (0..iters).map(|_| time_write(&first)).collect::<Res<Vec<_>>>()?;
    let alone = Summary::of(&mut alone).expect("iters >= 1");
    progress.say(&format!("allocating {} more LMRs of {size} B on node {holder} from {threads} threads", count - 1));
    // One open file holds at most 65 536 LMRs: more come from more opens.
    let extra = (1..count.div_ceil(LMRS_PER_FILE))
        .map(|_| Lite::open().map_err(err("open /dev/lite")))
        .collect::<Res<Vec<Lite>>>()?;
    let file = |i: u32| match (i / LMRS_PER_FILE).checked_sub(1) {
        Some(k) => &extra[k as usize],
        None => &lite,
    };
    let setup = Instant::now();
    let next = AtomicU32::new(1);
    let made = Mutex::new(Vec::with_capacity(count as usize));
    let allocate = || -> Res<()> {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                return Ok(());
            }
            let lmr = file(i)
                .malloc(size, &name(i), &options)
                .map_err(|e| format!("LT_malloc of LMR {} of {count}: {e}", i + 1))?;
            let mut made = made.lock().map_err(|_| "an allocating thread panicked")?;
            made.push(lmr);
            let done = made.len() as u32 + 1;
            if done.is_multiple_of(1000) || done == count {
                let s = setup.elapsed().as_secs_f64();
                progress.say(&format!("  {done}/{count} LMRs ({s:.0} s, {:.0}/s)", f64::from(done) / s.max(1e-9)));
            }
        }
    };
    let allocated = in_threads(threads, &allocate);
    let mut all = made.into_inner().map_err(|_| "an allocating thread panicked")?;
    allocated?;
    all.push(first);
    let setup_s = setup.elapsed().as_secs_f64();
    let seed = seed.unwrap_or((u64::from(pid) << 32) ^ nanos(progress.started.elapsed()));
    let mut rng = Rng::new(seed);
    // Alternating, so that both series see the same moments of a noisy cluster.
    progress.say(&format!(
        "{iters} LT_writes of {write_size} B to the first LMR, alternating with as many to random ones of the {count}"
    ));
    for _ in 0..warmup {
        time_write(&all[rng.below(all.len() as u64) as usize])?;
    }
    let (mut to_first, mut to_random) = (Vec::with_capacity(iters as usize), Vec::with_capacity(iters as usize));
    for _ in 0..iters {
        to_first.push(time_write(&all[count as usize - 1])?);
        to_random.push(time_write(&all[rng.below(all.len() as u64) as usize])?);
    }
    let first = Summary::of(&mut to_first).expect("iters >= 1");
    let random = Summary::of(&mut to_random).expect("iters >= 1");
    progress.say(&format!(
        "  alone: median {:.1} us p99 {:.1} us; with {count}: first median {:.1} us p99 {:.1} us, random median {:.1} us p99 {:.1} us",
        alone.median_ns as f64 / 1e3,
        alone.p99_ns as f64 / 1e3,
        first.median_ns as f64 / 1e3,
        first.p99_ns as f64 / 1e3,
        random.median_ns as f64 / 1e3,
        random.p99_ns as f64 / 1e3
    ));
    let mut value = json!({
        "bench": "lmrs",
        "node": me,
        "holder": holder,
        "count": count,
        "size": size,
        "write_size": write_size,
        "iters": iters,
        "seed": seed,
        "threads": threads,
        "setup_s": setup_s,
        "median_ns": random.median_ns,
        "p99_ns": random.p99_ns,
        "alone": summary_json(alone),
        "first": summary_json(first),
        "random": summary_json(random),
    });
    progress.say(&format!("freeing the {count} LMRs from {threads} threads"));
    let freeing = Instant::now();
    let left = Mutex::new(all);
    let free = || -> Res<()> {
        loop {
            let Some(lmr) = left.lock().map_err(|_| "a freeing thread panicked")?.pop() else { return Ok(()) };
            lmr.free().map_err(err("LT_free"))?;
        }
    };
    in_threads(threads, &free)?;
    let free_s = freeing.elapsed().as_secs_f64();
    progress.say(&format!("  freed in {free_s:.1} s"));
    value["free_s"] = json!(free_s);
    Ok(value)
}
