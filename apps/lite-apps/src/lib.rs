//! What the LITE-RS applications share: argument parsing, checksums and progress
//! lines (percentiles and the random generator are lite-stats'). Nothing here talks
//! to LITE.

use lite_stats::Rng;
use std::io::Write;
use std::time::{Duration, Instant};

/// FNV-1a, 64 bit: cheap, and enough to tell a torn or stale record from a whole one.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// Zipfian ranks over `0..n` with exponent `theta` (YCSB's generator, Gray et al.):
/// rank 0 is the most popular.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Self {
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let (zetan, zeta2) = (zeta(n), zeta(2.min(n)));
        let nf = n as f64;
        let eta = (1.0 - (2.0 / nf).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf { n: nf, theta, alpha: 1.0 / (1.0 - theta), zetan, eta }
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let rank = self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        (rank as u64).min(self.n as u64 - 1)
    }
}

/// Progress of a long phase on stderr, at most one line a second.
pub struct Progress {
    app: &'static str,
    what: String,
    total: u64,
    started: Instant,
    last: Instant,
}

impl Progress {
    pub fn new(app: &'static str, what: impl Into<String>, total: u64) -> Self {
        let now = Instant::now();
        Progress { app, what: what.into(), total, started: now, last: now }
    }

    pub fn update(&mut self, done: u64) {
        if self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            self.line(done);
        }
    }

    pub fn finish(&mut self, done: u64) {
        self.line(done);
    }

    fn line(&self, done: u64) {
        let pct = if self.total > 0 { done as f64 * 100.0 / self.total as f64 } else { 100.0 };
        let _ = writeln!(
            std::io::stderr(),
            "{} [{:6.1} s] {}: {done}/{} ({pct:.0}%)",
            self.app,
            self.started.elapsed().as_secs_f64(),
            self.what,
            self.total
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_sees_every_byte_and_the_split() {
        assert_ne!(fnv1a(&[b"ab"]), fnv1a(&[b"ba"]));
        assert_eq!(fnv1a(&[b"a", b"b"]), fnv1a(&[b"ab"]));
    }

    #[test]
    fn zipf_favours_low_ranks_and_stays_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(7);
        let mut hits = [0u32; 1000];
        for _ in 0..100_000 {
            hits[z.sample(&mut rng) as usize] += 1;
        }
        assert!(hits[0] > 10 * hits[500].max(1), "rank 0 {} vs rank 500 {}", hits[0], hits[500]);
        let top10: u32 = hits[..10].iter().sum();
        assert!(top10 > 25_000, "top 10 ranks got {top10} of 100000");
    }

    #[test]
    fn uniform_below_covers_the_range() {
        let mut rng = Rng::new(1);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[rng.below(10) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
