// SPDX-License-Identifier: GPL-2.0
//! The link's rate as this node finds it: the rate its bytes are acknowledged at.

use super::per_second;

/// The link's rate as this node finds it: bytes its transfers had acknowledged over
/// intervals of `RATE_INTERVAL_NS`, the best interval so far. Paced intervals never
/// raise it (they run below it); an unpaced, backlogged interval, at the bottleneck's
/// rate, is what sets it. Intervals are long because transfers learn of their
/// completions a work request late: the lag (a few 32 KiB requests per transfer)
/// must be small against an interval's bytes.
pub(crate) struct DeliveryRate {
    from_ns: u64,
    bytes: u64,
    best: u64,
}

pub(crate) const RATE_INTERVAL_NS: u64 = 2_000_000_000;

impl DeliveryRate {
    pub(crate) fn new(now_ns: u64) -> Self {
        DeliveryRate {
            from_ns: now_ns,
            bytes: 0,
            best: 0,
        }
    }

    /// Bytes/s found so far; 0 before the first interval.
    pub(crate) fn found(&self) -> u64 {
        self.best
    }

    /// `bytes` were acknowledged by `now_ns`; true when the found rate rose.
    pub(crate) fn delivered(&mut self, bytes: u64, now_ns: u64) -> bool {
        self.bytes = self.bytes.saturating_add(bytes);
        let elapsed = now_ns.saturating_sub(self.from_ns);
        if elapsed < RATE_INTERVAL_NS {
            return false;
        }
        let rate = per_second(self.bytes, elapsed);
        self.from_ns = now_ns;
        self.bytes = 0;
        if rate > self.best {
            self.best = rate;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_rate_finds_the_bottleneck_and_paced_intervals_keep_it() {
        let mut d = DeliveryRate::new(0);
        assert_eq!(d.found(), 0);
        // 4 MB/s delivered in 32 KiB lumps: found after the first interval.
        let (mut now, lump) = (0u64, 32u64 << 10);
        let mut rose = 0;
        while now < 3 * RATE_INTERVAL_NS {
            now += lump * 1_000_000_000 / 4_000_000;
            rose += d.delivered(lump, now) as u32;
        }
        let found = d.found() as f64;
        assert!((found / 4e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
        assert!(rose >= 1);
        // Paced at 2 MB/s: the link's rate stays what it was.
        while now < 6 * RATE_INTERVAL_NS {
            now += lump * 1_000_000_000 / 2_000_000;
            d.delivered(lump, now);
        }
        assert_eq!(d.found() as f64, found);
    }
}
