//! Latency summaries.

use std::time::Duration;

/// min / median / p99 / max of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub count: usize,
    pub min_ns: u64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// Nearest-rank percentile (`p` in 0..=100) of sorted samples.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(samples: &[Duration]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut ns: Vec<u64> = samples.iter().map(|d| d.as_nanos() as u64).collect();
    ns.sort_unstable();
    Some(Summary {
        count: ns.len(),
        min_ns: ns[0],
        median_ns: percentile(&ns, 50.0),
        p99_ns: percentile(&ns, 99.0),
        max_ns: ns[ns.len() - 1],
    })
}

/// "412 us", "1.25 ms", "2.00 s".
pub fn human(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{} us", ns / 1_000),
        10_000_000..=9_999_999_999 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&u| Duration::from_micros(u)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples = us(&(1..=100).collect::<Vec<_>>());
        let s = summarize(&samples).unwrap();
        assert_eq!((s.min_ns, s.median_ns, s.p99_ns, s.max_ns), (1_000, 50_000, 99_000, 100_000));
        let one = summarize(&us(&[7])).unwrap();
        assert_eq!((one.median_ns, one.p99_ns), (7_000, 7_000));
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn order_of_samples_does_not_matter() {
        let a = summarize(&us(&[5, 1, 9, 3])).unwrap();
        let b = summarize(&us(&[1, 3, 5, 9])).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.median_ns, 3_000);
    }

    #[test]
    fn human_units() {
        assert_eq!(human(950), "950 ns");
        assert_eq!(human(412_345), "412 us");
        assert_eq!(human(1_250_000 * 10), "12.50 ms");
        assert_eq!(human(2_000_000_000 * 10), "20.00 s");
    }
}
