// SPDX-License-Identifier: GPL-2.0
//! WF²Q+ among the backlogged bulk flows: whose chunk goes next.

/// A bulk flow's place in the WF²Q+ schedule.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Flow {
    /// Share relative to the other flows (> 0).
    pub(crate) weight: u32,
    /// Bytes of the chunk at the head of the flow; 0 when the flow is idle.
    pub(crate) head: u64,
    start: u64,
    finish: u64,
}

/// Virtual times are bytes scaled by this over the weight. They wrap around: they
/// are compared by their difference, like TCP sequence numbers.
const VSCALE: u64 = 1 << 16;
/// Weights are at most this (which keeps the scaled costs precise).
pub(crate) const MAX_WEIGHT: u32 = 1000;

/// Virtual time `a` is before `b`.
fn before(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) < 0
}

fn later(a: u64, b: u64) -> u64 {
    if before(a, b) {
        b
    } else {
        a
    }
}

impl Flow {
    pub(crate) fn new(weight: u32) -> Self {
        Flow {
            weight: weight.clamp(1, MAX_WEIGHT),
            ..Default::default()
        }
    }

    pub(crate) fn is_backlogged(&self) -> bool {
        self.head > 0
    }

    fn cost(&self, bytes: u64) -> u64 {
        bytes.saturating_mul(VSCALE) / u64::from(self.weight.max(1))
    }
}

/// WF²Q+ among flows: a flow is eligible once its virtual start time is reached; the
/// eligible flow that finishes first sends next.
#[derive(Default)]
pub(crate) struct Wf2q {
    vtime: u64,
    /// Sum of the backlogged flows' weights.
    weights: u64,
}

impl Wf2q {
    /// Flow `flow` gets a chunk of `bytes` at its head (it was idle).
    pub(crate) fn arrive(&mut self, flow: &mut Flow, bytes: u64) {
        if bytes == 0 || flow.is_backlogged() {
            return;
        }
        self.weights += u64::from(flow.weight.max(1));
        flow.start = later(flow.finish, self.vtime);
        flow.finish = flow.start.wrapping_add(flow.cost(bytes));
        flow.head = bytes;
    }

    /// The flow to send next, if any is backlogged.
    pub(crate) fn pick(&self, flows: &[Flow]) -> Option<usize> {
        // Virtual time never lags the earliest start (`served` sees to it), so some
        // flow is always eligible; the first one found stands in until then.
        let mut best: Option<usize> = None;
        for (i, f) in flows.iter().enumerate().filter(|(_, f)| f.is_backlogged()) {
            let eligible = !before(self.vtime, f.start);
            best = match best {
                None => Some(i),
                Some(b) => {
                    let cur = &flows[b];
                    let cur_eligible = !before(self.vtime, cur.start);
                    let better = match (eligible, cur_eligible) {
                        (true, false) => true,
                        (false, true) => false,
                        (true, true) => before(f.finish, cur.finish),
                        (false, false) => before(f.start, cur.start),
                    };
                    Some(if better { i } else { b })
                }
            };
        }
        best
    }

    /// Flow `flow` leaves while backlogged (its transfer ended or is not paced any
    /// more): its chunk is withdrawn without advancing virtual time.
    pub(crate) fn leave(&mut self, flow: &mut Flow) {
        if flow.is_backlogged() {
            flow.head = 0;
            self.weights -= u64::from(flow.weight.max(1));
        }
    }

    /// Flow `i` sent its head chunk; `next` is the size of its following chunk (0:
    /// it is idle now). Virtual time advances by the chunk over the backlogged weight.
    pub(crate) fn served(&mut self, flows: &mut [Flow], i: usize, next: u64) {
        let Some(sent) = flows.get(i).map(|f| f.head).filter(|&h| h > 0) else {
            return;
        };
        self.vtime = self
            .vtime
            .wrapping_add(sent.saturating_mul(VSCALE) / self.weights.max(1));
        let flow = &mut flows[i];
        if next > 0 {
            flow.start = flow.finish;
            flow.finish = flow.start.wrapping_add(flow.cost(next));
            flow.head = next;
        } else {
            flow.head = 0;
            self.weights -= u64::from(flow.weight.max(1));
        }
        let mut min_start: Option<u64> = None;
        for f in flows.iter().filter(|f| f.is_backlogged()) {
            min_start =
                Some(min_start.map_or(f.start, |m| if before(f.start, m) { f.start } else { m }));
        }
        if let Some(m) = min_start {
            self.vtime = later(self.vtime, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::simulate;
    use super::*;

    #[test]
    fn equal_flows_share_exactly() {
        let n = 1000;
        let (sent, _) = simulate(&vec![1; n], 4096, 1 << 30, n * 20);
        let (lo, hi) = (
            sent.iter().min().copied().unwrap_or(0),
            sent.iter().max().copied().unwrap_or(0),
        );
        assert!(hi - lo <= 4096, "shares from {lo} to {hi} bytes");
    }

    #[test]
    fn weighted_shares_follow_the_weights() {
        let weights = [1u32, 2, 4, 8, 1, 1];
        let (sent, _) = simulate(&weights, 5 * 1024, 1 << 30, 17 * 400);
        let total: u64 = sent.iter().sum();
        let wsum: u32 = weights.iter().sum();
        for (i, (&w, &s)) in weights.iter().zip(&sent).enumerate() {
            let want = f64::from(w) / f64::from(wsum);
            let got = s as f64 / total as f64;
            assert!(
                (got / want - 1.0).abs() < 0.02,
                "flow {i} (weight {w}): {got:.4} of the bytes, want {want:.4}"
            );
        }
    }

    #[test]
    fn a_flow_that_arrives_late_gets_its_share_at_once_and_no_credit() {
        let mut flows = vec![Flow::new(1), Flow::new(1)];
        let mut sched = Wf2q::default();
        sched.arrive(&mut flows[0], 1000);
        for _ in 0..100 {
            let i = sched.pick(&flows).unwrap_or(9);
            assert_eq!(i, 0);
            sched.served(&mut flows, i, 1000);
        }
        // Flow 1 arrives: it alternates with flow 0 instead of catching up 100 chunks.
        sched.arrive(&mut flows[1], 1000);
        let mut picks = [0; 2];
        for _ in 0..20 {
            let i = sched.pick(&flows).unwrap_or(9);
            picks[i] += 1;
            sched.served(&mut flows, i, 1000);
        }
        assert_eq!(picks, [10, 10]);
    }

    #[test]
    fn virtual_time_wraps_without_upsetting_the_order() {
        let mut flows = vec![Flow::new(1), Flow::new(3)];
        let mut sched = Wf2q {
            vtime: u64::MAX - 5 * 1024 * VSCALE,
            weights: 0,
        };
        sched.arrive(&mut flows[0], 1024);
        sched.arrive(&mut flows[1], 1024);
        let mut picks = [0; 2];
        for _ in 0..400 {
            let i = sched.pick(&flows).unwrap_or(9);
            picks[i] += 1;
            sched.served(&mut flows, i, 1024);
        }
        assert_eq!(picks, [100, 300]);
    }

    #[test]
    fn idle_flows_are_not_picked_and_nothing_is_picked_when_all_idle() {
        let mut flows = vec![Flow::new(1), Flow::new(5)];
        let mut sched = Wf2q::default();
        assert_eq!(sched.pick(&flows), None);
        sched.arrive(&mut flows[1], 10);
        assert_eq!(sched.pick(&flows), Some(1));
        sched.served(&mut flows, 1, 0);
        assert_eq!(sched.pick(&flows), None);
    }

    #[test]
    fn a_flow_that_leaves_while_backlogged_gives_its_share_back() {
        let mut flows = vec![Flow::new(1), Flow::new(1)];
        let mut sched = Wf2q::default();
        sched.arrive(&mut flows[0], 100);
        sched.arrive(&mut flows[1], 100);
        sched.leave(&mut flows[1]);
        assert_eq!(sched.pick(&flows), Some(0));
        sched.served(&mut flows, 0, 0);
        assert_eq!(sched.weights, 0, "no weight left behind");
        assert_eq!(sched.pick(&flows), None);
    }
}
