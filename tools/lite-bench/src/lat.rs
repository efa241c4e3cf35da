//! `lat`: LT_write or LT_read latency per size, each call timed on its own.

use crate::cli::Op;
use crate::harness::{buffer, nanos, open, opts, rw, Progress};
use crate::stats::summary_json;
use crate::{err, Res};
use lite_stats::Summary;
use serde_json::{json, Value};
use std::time::Instant;

pub(crate) fn lat(
    progress: &Progress,
    namespace: u32,
    op: Op,
    holder: u32,
    sizes: &[u64],
    iters: u32,
    warmup: u32,
) -> Res<Value> {
    if iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    let (lite, me) = open(progress, Some(holder))?;
    let lmr_size = sizes.iter().copied().max().unwrap_or(8).max(4096);
    let name = format!("bench-{}-lat", std::process::id());
    let lmr = lite.malloc(lmr_size, &name, &opts(vec![holder], namespace)).map_err(err("LT_malloc"))?;
    let mut buf = buffer(lmr_size)?;
    let mut results = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        progress.say(&format!("LT_{} {size} B to node {holder}: {iters} calls ({}/{})", op.name(), i + 1, sizes.len()));
        let chunk = &mut buf[..size as usize];
        for _ in 0..warmup {
            rw(&lmr, op, chunk).map_err(err("warm-up"))?;
        }
        let mut samples = Vec::with_capacity(iters as usize);
        let crossings = lite.crossings();
        for _ in 0..iters {
            let t = Instant::now();
            rw(&lmr, op, chunk).map_err(err(if op == Op::Write { "LT_write" } else { "LT_read" }))?;
            samples.push(nanos(t.elapsed()));
        }
        let ioctls = lite.crossings().saturating_sub(crossings);
        let s = Summary::of(&mut samples).expect("iters >= 1");
        let mut r = summary_json(s);
        r["size"] = json!(size);
        r["ioctls_per_op"] = json!(ioctls as f64 / f64::from(iters));
        progress.say(&format!(
            "  {size} B: median {:.1} us, p99 {:.1} us",
            s.median_ns as f64 / 1e3,
            s.p99_ns as f64 / 1e3
        ));
        results.push(r);
    }
    lmr.free().map_err(err("LT_free"))?;
    Ok(json!({
        "bench": "lat",
        "op": op.name(),
        "node": me,
        "holder": holder,
        "lmr_size": lmr_size,
        "warmup": warmup,
        "compare_with": if op == Op::Write { "ib_write_lat x 2 (a full round trip)" } else { "ib_read_lat x 1" },
        "results": results,
    }))
}
