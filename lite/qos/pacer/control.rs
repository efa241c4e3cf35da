// SPDX-License-Identifier: GPL-2.0
//! SafeUtil's control loop: when pacing starts, when AIMD steps and on which of the
//! latency class's samples, and the rate it leaves the token bucket at. The
//! module's `QosState::control` (qos/state.rs) runs it at each admission and
//! completion, and the simulator's node (host/sw_pri.rs) runs the same code.

use super::{Aimd, LatencyWindow, TokenBucket, MIN_STEP_SAMPLES, STEP_SAMPLES, UPDATE_NS, WINDOW};

/// The node as the loop sees it at one call.
#[derive(Clone, Copy)]
pub(crate) struct ControlInput {
    pub(crate) now: u64,
    /// The node is in SW-Pri mode: nothing is paced in any other.
    pub(crate) sw_pri: bool,
    /// Latency traffic is active (`QosState::latency_active`).
    pub(crate) latency_active: bool,
    /// Target99 (ns) as of now, for a step taken now.
    pub(crate) target_ns: u64,
}

/// The latency class's samples since the last step, and room to take their p99.
pub(crate) struct StepSamples<'a> {
    pub(crate) window: &'a mut LatencyWindow,
    pub(crate) scratch: &'a mut [u32; WINDOW],
}

/// SafeUtil (`Aimd`), when it steps next, and how often it moved each way.
pub(crate) struct AimdControl {
    pub(crate) aimd: Aimd,
    next_update_ns: u64,
    pub(crate) decreases: u64,
    pub(crate) increases: u64,
}

impl AimdControl {
    pub(crate) fn new(aimd: Aimd) -> Self {
        AimdControl {
            aimd,
            next_update_ns: 0,
            decreases: 0,
            increases: 0,
        }
    }

    /// New settings: SafeUtil between `floor` and `ceiling`, steering to
    /// `at.target_ns`, where it was within those; the bucket at SafeUtil while
    /// pacing, unlimited otherwise.
    pub(crate) fn reconfigure(
        &mut self,
        at: ControlInput,
        ceiling: u64,
        floor: u64,
        bucket: &mut TokenBucket,
    ) {
        self.aimd.reconfigure(ceiling, floor, at.target_ns);
        let pacing = at.sw_pri && at.latency_active;
        bucket.set_rate(if pacing { self.aimd.safe_util() } else { 0 }, at.now);
    }

    /// Pacing's start, and one AIMD step when due: on the p99 of the latency
    /// samples since the last step, once `STEP_SAMPLES` arrived (or `UPDATE_NS`
    /// passed with a few); with no latency traffic active, no limit.
    pub(crate) fn run(
        &mut self,
        at: ControlInput,
        samples: StepSamples<'_>,
        bucket: &mut TokenBucket,
    ) {
        let ControlInput {
            now,
            sw_pri,
            latency_active,
            target_ns,
        } = at;
        if sw_pri && latency_active && bucket.rate() == 0 {
            // Latency traffic just began: bulk is paced from now, not from the first step.
            // The samples so far were taken before pacing began: they judge nothing
            // of SafeUtil, and stepped on at once, they undid the step down.
            samples.window.clear();
            self.aimd.begin();
            bucket.set_rate(self.aimd.safe_util(), now);
        }
        let taken = samples.window.len();
        let due = now >= self.next_update_ns;
        if !due && (!latency_active || taken < STEP_SAMPLES) {
            return;
        }
        self.next_update_ns = now + UPDATE_NS;
        if !sw_pri {
            // Nothing is paced: no AIMD steps, and the next mode starts from fresh samples.
            samples.window.clear();
            return;
        }
        let p99 = if latency_active {
            if taken < MIN_STEP_SAMPLES {
                // Too few samples to judge: keep SafeUtil.
                return;
            }
            let p99 = samples.window.quantile(990, samples.scratch);
            samples.window.clear();
            p99
        } else {
            None
        };
        // A relative Target99 follows the p99 alone as it is taken again.
        self.aimd.set_target(target_ns);
        let before = self.aimd.safe_util();
        let after = self.aimd.update(p99);
        if after < before {
            self.decreases += 1;
        } else if after > before {
            self.increases += 1;
        }
        bucket.set_rate(if p99.is_some() { after } else { 0 }, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const RATE: u64 = 100 << 20;

    fn input(now: u64, latency_active: bool) -> ControlInput {
        ControlInput {
            now,
            sw_pri: true,
            latency_active,
            target_ns: 2 * MS,
        }
    }

    fn run(c: &mut AimdControl, w: &mut LatencyWindow, b: &mut TokenBucket, at: ControlInput) {
        let mut scratch = [0; WINDOW];
        let samples = StepSamples {
            window: w,
            scratch: &mut scratch,
        };
        c.run(at, samples, b);
    }

    #[test]
    fn pacing_starts_one_step_below_the_ceiling_and_drops_earlier_samples() {
        let mut c = AimdControl::new(Aimd::new(RATE, 0, 2 * MS));
        let (mut w, mut b) = (LatencyWindow::new(), TokenBucket::new(0, 0));
        w.add(50 * MS);
        run(&mut c, &mut w, &mut b, input(1, true));
        assert_eq!(b.rate(), RATE - RATE / 8);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn a_step_above_the_target_cuts_and_one_below_grows() {
        let mut c = AimdControl::new(Aimd::new(RATE, 0, 2 * MS));
        let (mut w, mut b) = (LatencyWindow::new(), TokenBucket::new(0, 0));
        run(&mut c, &mut w, &mut b, input(1, true));
        let begun = b.rate();
        for _ in 0..STEP_SAMPLES {
            w.add(4 * MS);
        }
        run(&mut c, &mut w, &mut b, input(2, true));
        assert!(
            b.rate() < begun && c.decreases == 1,
            "{} {}",
            b.rate(),
            begun
        );
        let cut = b.rate();
        for _ in 0..STEP_SAMPLES {
            w.add(MS);
        }
        run(&mut c, &mut w, &mut b, input(3, true));
        assert!(b.rate() > cut && c.increases == 1);
    }

    #[test]
    fn too_few_samples_keep_safe_util_until_the_interval_and_then_some() {
        let mut c = AimdControl::new(Aimd::new(RATE, 0, 2 * MS));
        let (mut w, mut b) = (LatencyWindow::new(), TokenBucket::new(0, 0));
        run(&mut c, &mut w, &mut b, input(1, true));
        let begun = b.rate();
        for _ in 0..MIN_STEP_SAMPLES - 1 {
            w.add(40 * MS);
        }
        run(&mut c, &mut w, &mut b, input(2 + UPDATE_NS, true));
        assert_eq!((b.rate(), c.decreases), (begun, 0));
        w.add(40 * MS);
        run(&mut c, &mut w, &mut b, input(3 + 2 * UPDATE_NS, true));
        assert_eq!(c.decreases, 1);
    }

    #[test]
    fn latency_traffic_gone_unlimits_bulk_and_other_modes_never_step() {
        let mut c = AimdControl::new(Aimd::new(RATE, 0, 2 * MS));
        let (mut w, mut b) = (LatencyWindow::new(), TokenBucket::new(0, 0));
        run(&mut c, &mut w, &mut b, input(1, true));
        run(&mut c, &mut w, &mut b, input(2 + UPDATE_NS, false));
        assert_eq!(b.rate(), 0);
        let mut none = input(3 + 2 * UPDATE_NS, true);
        none.sw_pri = false;
        w.add(40 * MS);
        run(&mut c, &mut w, &mut b, none);
        assert_eq!((b.rate(), w.len(), c.decreases), (0, 0, 0));
    }

    #[test]
    fn reconfiguring_keeps_safe_util_within_the_new_bounds_and_paces_only_while_active() {
        let mut c = AimdControl::new(Aimd::new(RATE, 0, 2 * MS));
        let (mut w, mut b) = (LatencyWindow::new(), TokenBucket::new(0, 0));
        run(&mut c, &mut w, &mut b, input(1, true));
        c.reconfigure(input(2, true), RATE / 2, RATE / 4, &mut b);
        assert_eq!(b.rate(), RATE / 2);
        c.reconfigure(input(3, false), RATE, RATE / 4, &mut b);
        assert_eq!((b.rate(), c.aimd.safe_util()), (0, RATE / 2));
    }
}
