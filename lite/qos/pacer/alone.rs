// SPDX-License-Identifier: GPL-2.0
//! The latency class's p99 alone, which a relative Target99 multiplies.
//!
//! What an operator wants of SW-Pri is the latency class's tail beside bulk
//! traffic at most a small multiple of what it is without it. An absolute Target99
//! needs that tail known in advance, and one measured at another time holds the
//! class's p99 at a ratio set by that measurement's noise: on the emulated
//! cluster the p99 alone moved between 7.2 and 9.5 ms from one benchmark to the
//! next, and with it the p99 ratio that AIMD held (1.37 to 1.70). So the node keeps
//! the p99 of the latency class's recent operations that ran while none of its
//! other classes' transfers was in progress.

use super::aimd::{LatencyWindow, WINDOW};

/// The p99 is taken again after this many new samples ...
const REFRESH_SAMPLES: usize = 128;
/// ... from this many at the least: the p99 of fewer is nearly their maximum.
const MIN_SAMPLES: usize = 256;

/// The latency class's recent samples alone and their p99.
pub(crate) struct AloneP99 {
    window: LatencyWindow,
    fresh: usize,
    p99_ns: u64,
    samples: u64,
}

impl AloneP99 {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        AloneP99 {
            window: LatencyWindow::new(),
            fresh: 0,
            p99_ns: 0,
            samples: 0,
        }
    }

    /// A latency-class operation took `ns` while no other class's transfer was in
    /// progress; `scratch` is room to take the p99 in.
    pub(crate) fn add(&mut self, ns: u64, scratch: &mut [u32; WINDOW]) {
        self.window.add(ns);
        self.fresh += 1;
        self.samples += 1;
        if self.fresh >= REFRESH_SAMPLES && self.window.len() >= MIN_SAMPLES {
            self.fresh = 0;
            self.p99_ns = self.window.quantile(990, scratch).unwrap_or(0);
        }
    }

    /// The p99 alone (ns), once known.
    pub(crate) fn p99_ns(&self) -> Option<u64> {
        (self.p99_ns > 0).then_some(self.p99_ns)
    }

    /// Operations counted alone so far.
    pub(crate) fn samples(&self) -> u64 {
        self.samples
    }

    /// Target99: `ratio_pct` percent of the p99 alone once that is known and the
    /// ratio is set (not 0); `absolute_ns` otherwise.
    pub(crate) fn target_ns(&self, ratio_pct: u32, absolute_ns: u64) -> u64 {
        match self.p99_ns() {
            Some(p99) if ratio_pct > 0 => p99.saturating_mul(u64::from(ratio_pct)) / 100,
            _ => absolute_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_absolute_target_holds_until_enough_samples_alone() {
        let mut a = AloneP99::new();
        let mut scratch = [0; WINDOW];
        assert_eq!(a.target_ns(150, 2 * MS), 2 * MS);
        for _ in 0..MIN_SAMPLES - 1 {
            a.add(MS, &mut scratch);
        }
        assert_eq!(a.p99_ns(), None);
        assert_eq!(a.target_ns(150, 2 * MS), 2 * MS);
        a.add(MS, &mut scratch);
        assert_eq!(a.p99_ns(), Some(MS));
        assert_eq!(a.samples(), MIN_SAMPLES as u64);
        assert_eq!(a.target_ns(150, 2 * MS), 3 * MS / 2);
        // Off: the absolute target, whatever is known.
        assert_eq!(a.target_ns(0, 2 * MS), 2 * MS);
    }

    #[test]
    fn the_p99_follows_recent_samples_in_steps() {
        let mut a = AloneP99::new();
        let mut scratch = [0; WINDOW];
        // 1.6 % of the samples at 8 ms, the rest at 1.5 ms: the p99 is the tail's.
        for i in 0..WINDOW {
            a.add(if i % 64 == 0 { 8 * MS } else { 3 * MS / 2 }, &mut scratch);
        }
        assert_eq!(a.p99_ns(), Some(8 * MS));
        assert_eq!(a.target_ns(140, 0), 112 * MS / 10);
        // A quieter emulation: once the window holds no more than 1 % of slow
        // samples, the p99 is the fast ones'; it moves only every REFRESH_SAMPLES.
        for _ in 0..REFRESH_SAMPLES - 1 {
            a.add(2 * MS, &mut scratch);
        }
        assert_eq!(a.p99_ns(), Some(8 * MS));
        for _ in 0..WINDOW {
            a.add(2 * MS, &mut scratch);
        }
        assert_eq!(a.p99_ns(), Some(2 * MS));
    }

    #[test]
    fn huge_samples_and_ratios_do_not_overflow() {
        let mut a = AloneP99::new();
        let mut scratch = [0; WINDOW];
        for _ in 0..MIN_SAMPLES {
            a.add(u64::MAX, &mut scratch);
        }
        assert_eq!(a.p99_ns(), Some(u64::from(u32::MAX)));
        assert!(a.target_ns(u32::MAX, 0) > 0);
    }
}
