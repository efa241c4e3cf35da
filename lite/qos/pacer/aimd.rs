// SPDX-License-Identifier: GPL-2.0
//! SafeUtil: its bounds (`headroom`, `bulk_floor`), the latency class's window
//! of samples, and the AIMD step on their p99.

use super::MAX_RATE;

/// The most SafeUtil may be on a link of `rate`: 15/16 of it. Bulk bytes arrive
/// at the bottleneck in bursts (chunks, late timers); a queue fed at its drain
/// rate keeps every burst it ever got, one fed a little slower drains them.
pub(crate) fn headroom(rate: u64) -> u64 {
    rate - rate / 16
}

/// The last `WINDOW` latency samples of the latency class (reference flow and real
/// completions), and their p99.
pub(crate) struct LatencyWindow {
    samples: [u32; WINDOW],
    next: usize,
    len: usize,
}

pub(crate) const WINDOW: usize = 1024;

impl LatencyWindow {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        LatencyWindow {
            samples: [0; WINDOW],
            next: 0,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn add(&mut self, ns: u64) {
        self.samples[self.next] = ns.min(u64::from(u32::MAX)) as u32;
        self.next = (self.next + 1) % WINDOW;
        self.len = (self.len + 1).min(WINDOW);
    }

    /// The `per_mille`/1000 quantile of the window; `scratch` is working space.
    pub(crate) fn quantile(&self, per_mille: u32, scratch: &mut [u32; WINDOW]) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let s = &mut scratch[..self.len];
        s.copy_from_slice(&self.samples[..self.len]);
        let rank = (self.len - 1) * per_mille.min(1000) as usize / 1000;
        let (_, v, _) = s.select_nth_unstable(rank);
        Some(u64::from(*v))
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
    }
}

/// SafeUtil: the rate bulk classes may use, by AIMD on the latency class's p99.
pub(crate) struct Aimd {
    /// The link's rate (bytes/s): SafeUtil's ceiling and additive step's base.
    max_rate: u64,
    /// Never below this (the bulk classes' weighted share of `max_rate`).
    floor: u64,
    target_ns: u64,
    safe: u64,
}

/// Additive increase per update: this fraction of the link rate (from the floor to
/// the ceiling in a few seconds of steps).
const INCREASE_DIVISOR: u64 = 8;

impl Aimd {
    pub(crate) fn new(max_rate: u64, floor: u64, target_ns: u64) -> Self {
        Aimd {
            max_rate,
            floor: floor.min(max_rate),
            target_ns,
            safe: max_rate,
        }
    }

    pub(crate) fn safe_util(&self) -> u64 {
        self.safe
    }

    /// New bounds and target; SafeUtil stays where it was, within the bounds.
    pub(crate) fn reconfigure(&mut self, max_rate: u64, floor: u64, target_ns: u64) {
        self.max_rate = max_rate;
        self.floor = floor.min(max_rate);
        self.target_ns = target_ns;
        self.safe = self.safe.clamp(self.floor, self.max_rate);
    }

    /// Latency traffic begins: SafeUtil starts one additive step below its ceiling.
    /// The ceiling is what the wire has left only when the rate found is exact and
    /// nothing else shares it; the latency class's own headers do. Started at the
    /// ceiling, bulk kept a standing queue of two chunks until AIMD's first cut.
    pub(crate) fn begin(&mut self) {
        self.safe = (self.max_rate - self.max_rate / INCREASE_DIVISOR).max(self.floor);
    }

    /// A new Target99 (ns), from the next step on.
    pub(crate) fn set_target(&mut self, target_ns: u64) {
        self.target_ns = target_ns;
    }

    /// One control step with the latency class's current p99, or None when no
    /// latency traffic exists (then bulk traffic is unlimited: `max_rate`).
    pub(crate) fn update(&mut self, p99_ns: Option<u64>) -> u64 {
        self.safe = match p99_ns {
            None => self.max_rate,
            Some(p99) if p99 > self.target_ns => {
                (self.safe - decrease(self.safe, p99, self.target_ns)).max(self.floor)
            }
            Some(_) => (self.safe + (self.max_rate / INCREASE_DIVISOR).max(1)).min(self.max_rate),
        };
        self.safe
    }
}

/// What one step above the target takes off SafeUtil `safe`: the fraction by which
/// the p99 exceeds the target, as Swift cuts its window by the delay's excess, and
/// at most a quarter (not Justitia's half). At millisecond latencies the p99 of a
/// step's samples is noisy: a fixed cut made every small false alarm cost bulk a
/// quarter of its rate, and SafeUtil spent its time climbing back.
fn decrease(safe: u64, p99_ns: u64, target_ns: u64) -> u64 {
    // The excess in 1/1024ths of the p99 (at most 1024), so that nothing overflows.
    let excess = (p99_ns - target_ns).saturating_mul(1024) / p99_ns.max(1);
    let by_excess = safe / 1024 * excess + safe % 1024 * excess / 1024;
    by_excess.min(safe / 4)
}

/// The bulk classes' floor: their weight's share of the link.
pub(crate) fn bulk_floor(max_rate: u64, bulk_weight: u32, latency_weight: u32) -> u64 {
    let total = u64::from(bulk_weight) + u64::from(latency_weight);
    if total == 0 {
        return 0;
    }
    max_rate.min(MAX_RATE) / total * u64::from(bulk_weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aimd_keeps_its_rate_across_new_settings_within_the_new_bounds() {
        let mut a = Aimd::new(1000, 100, 50);
        a.update(Some(100));
        assert_eq!(a.safe_util(), 750);
        a.reconfigure(2000, 100, 50);
        assert_eq!(a.safe_util(), 750);
        a.reconfigure(400, 100, 50);
        assert_eq!(a.safe_util(), 400);
        a.reconfigure(400, 450, 50);
        assert_eq!(a.safe_util(), 400, "the floor never exceeds the ceiling");
    }

    #[test]
    fn aimd_drops_above_target_grows_below_and_respects_the_floor() {
        let max = 1_000_000_000;
        let mut a = Aimd::new(max, bulk_floor(max, 1, 3), 100_000);
        assert_eq!(a.safe_util(), max);
        // A latency spike: a quarter off each step until the floor (a quarter of the link).
        let trace = [150_000u64; 6];
        let seen: Vec<u64> = trace.iter().map(|&p| a.update(Some(p))).collect();
        assert_eq!(
            seen,
            [
                750_000_000,
                562_500_000,
                421_875_000,
                316_406_250,
                250_000_000,
                250_000_000
            ]
        );
        // Calm: additive increase, one step per update, up to the link.
        let up = a.update(Some(50_000));
        assert_eq!(up, 250_000_000 + max / INCREASE_DIVISOR);
        for _ in 0..100 {
            a.update(Some(50_000));
        }
        assert_eq!(a.safe_util(), max);
        // No latency traffic at all: unlimited at once.
        a.update(Some(1_000_000));
        assert_eq!(a.update(None), max);
    }

    #[test]
    fn latency_traffic_starts_one_step_below_the_ceiling_and_climbs_back() {
        let mut a = Aimd::new(1000, 100, 100);
        a.begin();
        assert_eq!(a.safe_util(), 875);
        assert_eq!(
            a.update(Some(50)),
            1000,
            "below the target: back to the ceiling"
        );
        // After idle (no latency traffic: unlimited), the next start steps down again.
        a.update(None);
        a.begin();
        assert_eq!(a.safe_util(), 875);
        // Never below the floor.
        let mut a = Aimd::new(1000, 950, 100);
        a.begin();
        assert_eq!(a.safe_util(), 950);
    }

    #[test]
    fn a_small_excess_takes_a_small_step_down() {
        let mut a = Aimd::new(1000, 100, 100);
        // 10 % over the target: a tenth of the p99 is excess, so SafeUtil loses 1/11.
        assert_eq!(a.update(Some(110)), 910);
        // Twice the target: capped at a quarter.
        assert_eq!(a.update(Some(200)), 683);
        assert_eq!(a.update(Some(100)), 808, "at the target: up again");
    }

    #[test]
    fn aimd_settles_where_the_latency_meets_the_target() {
        // Synthetic plant: p99 grows with the bulk rate (40 us idle, +100 us at full
        // rate); target 80 us is met at 40% of the link. AIMD must hover around it.
        let max = 1_000_000_000u64;
        let mut a = Aimd::new(max, bulk_floor(max, 1, 9), 80_000);
        let mut rates = Vec::new();
        for _ in 0..2000 {
            let p99 = 40_000 + 100_000 * a.safe_util() / max;
            rates.push(a.update(Some(p99)));
        }
        let tail = &rates[1000..];
        let mean = tail.iter().sum::<u64>() as f64 / tail.len() as f64 / max as f64;
        assert!(
            tail.iter()
                .all(|&r| r <= max * 45 / 100 + max / INCREASE_DIVISOR),
            "overshoot: {:?}",
            &tail[..20]
        );
        assert!(
            (0.2..0.45).contains(&mean),
            "mean SafeUtil {mean:.3} of the link"
        );
    }

    #[test]
    fn no_class_starves_under_any_latency_trace() {
        // However bad the latency, bulk keeps its floor.
        let max = 10_000_000_000u64;
        let floor = bulk_floor(max, 1, 4);
        let mut a = Aimd::new(max, floor, 10_000);
        for i in 0..1000u64 {
            let r = a.update(Some(if i % 7 == 0 { 5_000 } else { 10_000_000 }));
            assert!(r >= floor);
        }
    }

    #[test]
    fn the_window_reports_its_p99() {
        let mut w = LatencyWindow::new();
        let mut scratch = [0u32; WINDOW];
        assert_eq!(w.quantile(990, &mut scratch), None);
        for i in 1..=1000u64 {
            w.add(i * 1000);
        }
        assert_eq!(w.quantile(990, &mut scratch), Some(990_000));
        assert_eq!(w.quantile(500, &mut scratch), Some(500_000));
        // The window slides: old samples leave.
        for _ in 0..WINDOW {
            w.add(7);
        }
        assert_eq!(w.quantile(990, &mut scratch), Some(7));
    }
}
