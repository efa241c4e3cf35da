//! `lat`: LT_write or LT_read latency per size, each call timed on its own.

use crate::cli::Op;
use crate::harness::{buffer, nanos, open, opts, rw, Progress};
use crate::read_samples::{medians_json, phase_spans, ReadSample, PHASES};
use crate::stats::summary_json;
use crate::{err, Res};
use lite::ReadPhases;
use lite_stats::Summary;
use serde_json::{json, Value};
use std::time::Instant;

#[allow(clippy::too_many_arguments)]
pub(crate) fn lat(
    progress: &Progress,
    namespace: u32,
    op: Op,
    holder: u32,
    sizes: &[u64],
    iters: u32,
    warmup: u32,
    per_read: bool,
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
        let phases_before = lite.mem_stat().ok().map(|m| m.read_phases);
        let crossings = lite.crossings();
        let mut one_by_one = Vec::new();
        let mut last = phases_before.filter(|_| per_read && op == Op::Read);
        // Their statistics calls are not the reads' crossings.
        let stat_calls = if last.is_some() { u64::from(iters) } else { 0 };
        for _ in 0..iters {
            let t = Instant::now();
            rw(&lmr, op, chunk).map_err(err(if op == Op::Write { "LT_write" } else { "LT_read" }))?;
            let timed = nanos(t.elapsed());
            samples.push(timed);
            if let Some(before) = last {
                let after = lite.mem_stat().map_err(err("LITE_IOC_MEM_STAT"))?.read_phases;
                one_by_one.extend(ReadSample::between(&before, &after, timed));
                last = Some(after);
            }
        }
        let ioctls = lite.crossings().saturating_sub(crossings).saturating_sub(stat_calls);
        let phases = match (op, phases_before, lite.mem_stat()) {
            (Op::Read, Some(before), Ok(after)) => read_phases_json(&before, &after.read_phases, &samples),
            _ => Value::Null,
        };
        let s = Summary::of(&mut samples).expect("iters >= 1");
        let mut r = summary_json(s);
        r["phases"] = phases;
        if per_read && op == Op::Read {
            r["phase_medians"] = medians_json(&one_by_one);
        }
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

/// The kernel's account of the reads between two snapshots of the node's read
/// phases, each phase's mean per read (ns), beside the mean of `latencies` as the
/// reader timed them: `outside_ns` is what the kernel did not see (the crossing,
/// the argument copy). Null without a read counted.
fn read_phases_json(before: &ReadPhases, after: &ReadPhases, latencies: &[u64]) -> Value {
    let reads = after.reads.saturating_sub(before.reads);
    if reads == 0 || latencies.is_empty() {
        return Value::Null;
    }
    let inside = phase_spans(before, after).map(|ns| ns as f64 / reads as f64);
    let mean = latencies.iter().sum::<u64>() as f64 / latencies.len() as f64;
    let mut out = json!({ "reads": reads, "mean_ns": mean });
    for (name, ns) in PHASES.iter().zip(inside) {
        out[*name] = json!(ns);
    }
    out["slept_share"] = json!(after.slept.saturating_sub(before.slept) as f64 / reads as f64);
    out["outside_ns"] = json!(mean - inside.iter().sum::<f64>());
    out
}
