//! The key set and its workloads: `key_name` names the keys, `load` puts them,
//! `verify` checks every key's value, and `bench` runs a YCSB-like mix of GETs and PUTs.

use crate::cli::Dist;
use crate::client::Store;
use crate::slots::{value_for, version_of};
use lite_apps::{Progress, Zipf};
use lite_stats::{percentile, Rng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) fn key_name(prefix: &str, i: u64) -> Vec<u8> {
    format!("{prefix}{i}").into_bytes()
}

pub(crate) fn load(
    store: &Store<'_>,
    keys: u64,
    prefix: &str,
    version: u64,
    threads: u32,
    json: bool,
) -> Result<(), String> {
    let started = Instant::now();
    let (next, done) = (AtomicU64::new(0), AtomicU64::new(0));
    let first_error = Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= keys {
                    break;
                }
                let key = key_name(prefix, i);
                if let Err(e) = store.put(&key, &value_for(&key, version)) {
                    first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                    next.store(keys, Ordering::Relaxed);
                    break;
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        let mut progress = Progress::new("lite-kv", "loaded", keys);
        while done.load(Ordering::Relaxed) < keys && next.load(Ordering::Relaxed) < keys {
            progress.update(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let seconds = started.elapsed().as_secs_f64();
    if json {
        println!("{}", serde_json::json!({ "loaded": keys, "seconds": seconds, "puts_per_s": keys as f64 / seconds }));
    } else {
        println!("loaded {keys} keys in {seconds:.2} s ({:.0} PUTs/s)", keys as f64 / seconds);
    }
    Ok(())
}

pub(crate) fn verify(store: &Store<'_>, keys: u64, prefix: &str, exact: Option<u64>, json: bool) -> Result<(), String> {
    let (mut missing, mut wrong) = (0u64, 0u64);
    let mut progress = Progress::new("lite-kv", "verified", keys);
    for i in 0..keys {
        let key = key_name(prefix, i);
        match store.get(&key)? {
            None => missing += 1,
            Some(v) => match (version_of(&key, &v), exact) {
                (None, _) => wrong += 1,
                (Some(got), Some(want)) if got != want => wrong += 1,
                _ => {}
            },
        }
        progress.update(i + 1);
    }
    let torn = store.torn_reads.load(Ordering::Relaxed);
    if json {
        println!("{}", serde_json::json!({ "keys": keys, "missing": missing, "wrong": wrong, "torn_reads": torn }));
    } else {
        println!("{keys} keys read one-sided: {missing} missing, {wrong} wrong ({torn} torn reads retried)");
    }
    if missing + wrong > 0 {
        return Err(format!("{missing} keys missing, {wrong} with a wrong value"));
    }
    Ok(())
}

pub(crate) struct BenchArgs {
    pub(crate) keys: u64,
    pub(crate) prefix: String,
    pub(crate) ops: u64,
    pub(crate) read_pct: u32,
    pub(crate) dist: Dist,
    pub(crate) threads: u32,
    pub(crate) seed: u64,
    pub(crate) json: bool,
}

#[derive(Default)]
struct Samples {
    get_ns: Vec<u64>,
    put_ns: Vec<u64>,
    wrong: u64,
}

pub(crate) fn bench(store: &Store<'_>, a: &BenchArgs) -> Result<(), String> {
    if a.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    let zipf = (a.dist == Dist::Zipfian).then(|| Zipf::new(a.keys, 0.99));
    let all = Mutex::new(Samples::default());
    let first_error = Mutex::new(None::<String>);
    let done = AtomicU64::new(0);
    let total = a.ops * u64::from(a.threads);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..a.threads.max(1) {
            let (all, first_error, done, zipf) = (&all, &first_error, &done, &zipf);
            s.spawn(move || {
                let mut rng = Rng::new(a.seed.wrapping_mul(1000).wrapping_add(u64::from(t)));
                let mut mine = Samples::default();
                for _ in 0..a.ops {
                    let rank = match zipf {
                        Some(z) => z.sample(&mut rng),
                        None => rng.below(a.keys),
                    };
                    // Scatter popular ranks over the key space (and so over shards).
                    let key = key_name(&a.prefix, rank.wrapping_mul(0x9E37_79B9) % a.keys);
                    let began = Instant::now();
                    let result = if rng.below(100) < u64::from(a.read_pct) {
                        store.get(&key).map(|v| {
                            if v.as_deref().and_then(|v| version_of(&key, v)).is_none() {
                                mine.wrong += 1;
                            }
                            mine.get_ns.push(began.elapsed().as_nanos() as u64);
                        })
                    } else {
                        store.put(&key, &value_for(&key, rng.below(1 << 20))).map(|()| {
                            mine.put_ns.push(began.elapsed().as_nanos() as u64);
                        })
                    };
                    if let Err(e) = result {
                        first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        break;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
                all.get_ns.extend(mine.get_ns);
                all.put_ns.extend(mine.put_ns);
                all.wrong += mine.wrong;
            });
        }
        let mut progress = Progress::new("lite-kv", "operations", total);
        while done.load(Ordering::Relaxed) < total && first_error.lock().is_ok_and(|e| e.is_none()) {
            progress.update(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut all = all.into_inner().unwrap_or_else(|e| e.into_inner());
    all.get_ns.sort_unstable();
    all.put_ns.sort_unstable();
    let ops = (all.get_ns.len() + all.put_ns.len()) as u64;
    let dist = match a.dist {
        Dist::Uniform => "uniform",
        Dist::Zipfian => "zipfian",
    };
    let summary = serde_json::json!({
        "ops": ops,
        "read_pct": a.read_pct,
        "dist": dist,
        "threads": a.threads,
        "seconds": seconds,
        "ops_per_s": ops as f64 / seconds,
        "gets": all.get_ns.len(),
        "get_p50_ns": percentile(&all.get_ns, 50.0),
        "get_p99_ns": percentile(&all.get_ns, 99.0),
        "puts": all.put_ns.len(),
        "put_p50_ns": percentile(&all.put_ns, 50.0),
        "put_p99_ns": percentile(&all.put_ns, 99.0),
        "wrong_values": all.wrong,
        "torn_reads": store.torn_reads.load(Ordering::Relaxed),
    });
    if a.json {
        println!("{summary}");
    } else {
        println!(
            "{ops} ops ({}% GET, {dist}, {} thread(s)) in {seconds:.2} s: {:.0} ops/s; GET median {:.0} us p99 {:.0} us; \
             PUT median {:.0} us p99 {:.0} us; {} wrong values",
            a.read_pct,
            a.threads,
            ops as f64 / seconds,
            percentile(&all.get_ns, 50.0) as f64 / 1e3,
            percentile(&all.get_ns, 99.0) as f64 / 1e3,
            percentile(&all.put_ns, 50.0) as f64 / 1e3,
            percentile(&all.put_ns, 99.0) as f64 / 1e3,
            all.wrong
        );
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    if all.wrong > 0 {
        return Err(format!("{} GETs returned a missing or foreign value", all.wrong));
    }
    Ok(())
}
