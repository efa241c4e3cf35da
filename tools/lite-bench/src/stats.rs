//! Pure helpers of lite-bench: latency summaries, size parsing, a small PRNG and
//! throughput arithmetic. Everything here is host-testable (no /dev/lite).

use lite::parse_size;
use serde_json::{json, Value};

/// Summary of a set of latency samples (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min_ns: u64,
    /// `sorted[n / 2]`: the same element perftest reports as `t_typical`.
    pub median_ns: u64,
    /// Nearest rank: the smallest sample with at least 99 % of the samples at or below it.
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

impl Summary {
    /// Summarizes `samples` (sorted in place). `None` when there are none.
    pub fn of(samples: &mut [u64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Some(Summary {
            count: samples.len(),
            min_ns: samples[0],
            median_ns: samples[samples.len() / 2],
            p99_ns: percentile_sorted(samples, 99.0),
            max_ns: samples[samples.len() - 1],
            mean_ns: sum as f64 / samples.len() as f64,
        })
    }

    /// The JSON fields every latency result carries.
    pub fn to_json(self) -> Value {
        json!({
            "iters": self.count,
            "min_ns": self.min_ns,
            "median_ns": self.median_ns,
            "p99_ns": self.p99_ns,
            "max_ns": self.max_ns,
            "mean_ns": (self.mean_ns * 10.0).round() / 10.0,
        })
    }
}

/// Nearest-rank percentile `p` (0 < p <= 100) of ascending `sorted` (not empty):
/// element `ceil(p / 100 * n) - 1`.
pub fn percentile_sorted(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    let n = sorted.len();
    // Rounded before the ceiling so that e.g. 0.99 * 100 (= 98.99999...) is rank 99.
    let exact = p / 100.0 * n as f64;
    let rank = ((exact * 1e9).round() / 1e9).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// A comma-separated list of sizes (`8,64,4K`), each at least 1 byte.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    let sizes = s.split(',').filter(|p| !p.trim().is_empty()).map(parse_size).collect::<Result<Vec<_>, _>>()?;
    if sizes.is_empty() {
        return Err("no sizes given".into());
    }
    if let Some(zero) = sizes.iter().position(|&n| n == 0) {
        return Err(format!("size #{} is 0: every size must be at least 1 byte", zero + 1));
    }
    Ok(sizes)
}

/// A comma-separated list of node ids (`0,1,2`).
pub fn parse_nodes(s: &str) -> Result<Vec<u32>, String> {
    let nodes = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u32>().map_err(|_| format!("{p:?} is not a node id")))
        .collect::<Result<Vec<_>, _>>()?;
    if nodes.is_empty() {
        return Err("no nodes given".into());
    }
    Ok(nodes)
}

/// Throughput of `bytes` in `nanos`: (MiB/s = 2^20 bytes/s, as perftest's
/// `BW average[MB/sec]`; MB/s = 10^6 bytes/s).
pub fn throughput(bytes: u64, nanos: u64) -> (f64, f64) {
    if nanos == 0 {
        return (0.0, 0.0);
    }
    let per_s = bytes as f64 * 1e9 / nanos as f64;
    (per_s / (1u64 << 20) as f64, per_s / 1e6)
}

/// xorshift64*: picks the LMRs of the random sample (no dependency, reproducible).
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        // A zero state would stay zero.
        XorShift((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n` (n > 0) for picking sample indices.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_one_to_hundred() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&mut v).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!((s.min_ns, s.max_ns), (1, 100));
        assert_eq!(s.median_ns, 51); // sorted[50], as perftest's t_typical
        assert_eq!(s.p99_ns, 99);
        assert!((s.mean_ns - 50.5).abs() < 1e-9);
        assert_eq!(v[0], 1, "sorted in place");
    }

    #[test]
    fn summary_of_few_samples() {
        assert_eq!(Summary::of(&mut []), None);
        let s = Summary::of(&mut [7]).unwrap();
        assert_eq!((s.min_ns, s.median_ns, s.p99_ns, s.max_ns), (7, 7, 7, 7));
        let s = Summary::of(&mut [5, 1]).unwrap();
        assert_eq!((s.median_ns, s.p99_ns), (5, 5));
        let s = Summary::of(&mut [3, 1, 2]).unwrap();
        assert_eq!((s.median_ns, s.p99_ns), (2, 3));
    }

    #[test]
    fn p99_picks_the_tail() {
        // 200 samples: rank ceil(0.99 * 200) = 198, i.e. the third largest.
        let mut v: Vec<u64> = (0..200).collect();
        v[199] = 1_000_000;
        v[198] = 900_000;
        let s = Summary::of(&mut v).unwrap();
        assert_eq!(s.p99_ns, 197);
        assert_eq!(percentile_sorted(&v, 100.0), 1_000_000);
        assert_eq!(percentile_sorted(&v, 50.0), 99);
        assert_eq!(percentile_sorted(&v, 0.001), 0);
        // 1000 samples: rank 990, element 989.
        let w: Vec<u64> = (0..1000).collect();
        assert_eq!(percentile_sorted(&w, 99.0), 989);
    }

    #[test]
    fn summary_json_has_the_documented_fields() {
        let j = Summary::of(&mut [10, 20, 30]).unwrap().to_json();
        for key in ["iters", "min_ns", "median_ns", "p99_ns", "max_ns", "mean_ns"] {
            assert!(j.get(key).is_some(), "{key}");
        }
        assert_eq!(j["median_ns"], 20);
        assert_eq!(j["mean_ns"], 20.0);
    }

    #[test]
    fn size_and_node_lists_parse() {
        assert_eq!(parse_sizes("8,64,512,4096,65536").unwrap(), vec![8, 64, 512, 4096, 65536]);
        assert_eq!(parse_sizes("4K, 1M").unwrap(), vec![4096, 1 << 20]);
        assert!(parse_sizes("8,0").unwrap_err().contains("#2"));
        assert!(parse_sizes("").is_err());
        assert_eq!(parse_nodes("0,1,2").unwrap(), vec![0, 1, 2]);
        assert!(parse_nodes("1,a").is_err());
    }

    #[test]
    fn throughput_units() {
        let (mib, mb) = throughput(1 << 20, 1_000_000_000);
        assert!((mib - 1.0).abs() < 1e-12);
        assert!((mb - 1.048576).abs() < 1e-12);
        assert_eq!(throughput(100, 0), (0.0, 0.0));
    }

    #[test]
    fn xorshift_stays_in_range_and_spreads() {
        let mut r = XorShift::new(0);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200), "{seen:?}");
        let (mut a, mut b) = (XorShift::new(42), XorShift::new(42));
        assert_eq!(a.next_u64(), b.next_u64());
        assert_eq!(XorShift::new(5).below(1), 0);
    }
}
