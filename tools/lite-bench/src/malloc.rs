//! `malloc`: time of LT_malloc over the holders plus an LT_map of it by name.

use crate::harness::{nanos, open, opts, Progress};
use crate::{err, Res};
use lite::Perm;
use lite_stats::Summary;
use serde_json::{json, Value};
use std::time::Instant;

pub(crate) fn malloc(progress: &Progress, namespace: u32, size: u64, holders: &[u32], repeat: u32) -> Res<Value> {
    if repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    let (lite, me) = open(progress, None)?;
    let mut samples = Vec::new();
    for i in 0..repeat {
        let name = format!("bench-{}-malloc-{i}", std::process::id());
        progress.say(&format!(
            "LT_malloc {size} B on {} + LT_map ({}/{repeat})",
            if holders.is_empty() { "this node".to_string() } else { format!("node(s) {holders:?}") },
            i + 1
        ));
        let t0 = Instant::now();
        let lmr = lite.malloc(size, &name, &opts(holders.to_vec(), namespace)).map_err(err("LT_malloc"))?;
        let t1 = Instant::now();
        let mapped = lite.map(&name, Perm::READ | Perm::WRITE, namespace).map_err(err("LT_map"))?;
        let t2 = Instant::now();
        let chunks = lmr.stat().ok().map(|s| s.nr_chunks);
        drop(mapped);
        let t3 = Instant::now();
        lmr.free().map_err(err("LT_free"))?;
        let free_ns = nanos(t3.elapsed());
        let (malloc_ns, map_ns) = (nanos(t1 - t0), nanos(t2 - t1));
        progress.say(&format!(
            "  malloc {:.1} ms, map {:.1} ms (free {:.1} ms, not counted)",
            malloc_ns as f64 / 1e6,
            map_ns as f64 / 1e6,
            free_ns as f64 / 1e6
        ));
        samples.push(json!({"malloc_ns": malloc_ns, "map_ns": map_ns, "total_ns": malloc_ns + map_ns,
                            "free_ns": free_ns, "chunks": chunks}));
    }
    let median = |key: &str| {
        let mut v: Vec<u64> = samples.iter().map(|s| s[key].as_u64().unwrap_or(0)).collect();
        Summary::of(&mut v).map(|s| s.median_ns).unwrap_or(0)
    };
    Ok(json!({
        "bench": "malloc",
        "node": me,
        "size": size,
        "holders": if holders.is_empty() { vec![me] } else { holders.to_vec() },
        "repeat": repeat,
        "malloc_ns": median("malloc_ns"),
        "map_ns": median("map_ns"),
        "total_ns": median("total_ns"),
        "free_ns": median("free_ns"),
        "samples": samples,
    }))
}
