//! The statistics every LITE-RS tool and application reports with: one percentile
//! definition, one latency summary and one reproducible random generator, so that a
//! p99 means the same in lite-admin, lite-bench, lite-selftest and the apps.

/// Nearest-rank percentile `p` (0 < p <= 100) of ascending `sorted`: the smallest
/// sample with at least `p` % of the samples at or below it, element
/// `ceil(p / 100 * n) - 1`. 0 when there are no samples.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    let n = sorted.len();
    if n == 0 {
        return 0;
    }
    // Rounded before the ceiling so that e.g. 0.99 * 100 (= 98.99999...) is rank 99.
    let exact = p / 100.0 * n as f64;
    let rank = ((exact * 1e9).round() / 1e9).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Summary of a set of latency samples (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min_ns: u64,
    /// `sorted[n / 2]`: the same element perftest reports as `t_typical`, so that
    /// LITE's medians compare with perftest's.
    pub median_ns: u64,
    /// `percentile(sorted, 99.0)`.
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
            p99_ns: percentile(samples, 99.0),
            max_ns: samples[samples.len() - 1],
            mean_ns: sum as f64 / samples.len() as f64,
        })
    }
}

/// xorshift64*: reproducible pseudo-random numbers from a seed, without a dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Spread from `seed` (any value: xorshift's fixed point 0 is never reached).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
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
    fn order_of_samples_does_not_matter() {
        let a = Summary::of(&mut [5, 1, 9, 3]).unwrap();
        let b = Summary::of(&mut [1, 3, 5, 9]).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn nearest_rank_percentiles() {
        // 200 samples: rank ceil(0.99 * 200) = 198, i.e. the third largest.
        let mut v: Vec<u64> = (0..200).collect();
        v[199] = 1_000_000;
        v[198] = 900_000;
        assert_eq!(Summary::of(&mut v).unwrap().p99_ns, 197);
        assert_eq!(percentile(&v, 100.0), 1_000_000);
        assert_eq!(percentile(&v, 50.0), 99);
        assert_eq!(percentile(&v, 0.001), 0);
        // 1000 samples: rank 990, element 989.
        let w: Vec<u64> = (0..1000).collect();
        assert_eq!(percentile(&w, 99.0), 989);
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!((percentile(&hundred, 50.0), percentile(&hundred, 99.0)), (50, 99));
        assert_eq!(percentile(&[], 99.0), 0);
    }

    #[test]
    fn rng_stays_in_range_and_spreads() {
        let mut r = Rng::new(0);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200), "{seen:?}");
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        assert_eq!(Rng::new(5).below(1), 0);
        assert_eq!(Rng::new(5).below(0), 0);
        let u = Rng::new(9).unit();
        assert!((0.0..1.0).contains(&u));
        assert!(!Rng::new(3).chance(0) && Rng::new(3).chance(100));
    }
}
