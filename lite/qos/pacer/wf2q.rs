// SPDX-License-Identifier: GPL-2.0
//! WF²Q+ among the backlogged bulk flows: whose chunk goes next.

/// Which of the schedule's two heaps a flow is in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Heap {
    /// Idle: in neither.
    #[default]
    None,
    /// Backlogged and eligible (its virtual start is reached), ordered by finish.
    Eligible,
    /// Backlogged, its virtual start still ahead, ordered by start.
    Waiting,
}

/// A bulk flow's place in the WF²Q+ schedule.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Flow {
    /// Share relative to the other flows (> 0).
    pub(crate) weight: u32,
    /// Bytes of the chunk at the head of the flow; 0 when the flow is idle.
    pub(crate) head: u64,
    start: u64,
    finish: u64,
    /// The heap this flow is in, and its place there.
    heap: Heap,
    place: u32,
    /// Storage the schedule borrows from every slot of the flow table, whichever
    /// flow it holds: entry `k` of the eligible heap and of the waiting heap are
    /// kept in `flows[k]` (each heap holds at most as many flows as the table), so
    /// the schedule allocates nothing.
    eligible_at: u32,
    waiting_at: u32,
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

    /// The slot starts over as a new idle flow of `weight`, keeping the heap
    /// entries the schedule keeps in it. An idle flow only: a backlogged one must
    /// `leave` first, and is left as it is.
    pub(crate) fn renew(&mut self, weight: u32) {
        if self.heap == Heap::None {
            *self = Flow {
                eligible_at: self.eligible_at,
                waiting_at: self.waiting_at,
                ..Flow::new(weight)
            };
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
/// eligible flow that finishes first sends next, the lower index on a tie. While
/// none is eligible, the flow that starts first is the one to send.
///
/// The backlogged flows are kept in two binary heaps, the eligible ones by finish
/// and the others by start, so that an arrival, a served chunk and a leave each
/// cost O(log n) among `n` backlogged flows (Tassel, §4), and the pick is the top
/// of a heap. A served chunk moves virtual time, and with it the waiting flows
/// whose start it reached into the eligible heap: each flow once per chunk.
#[derive(Default)]
pub(crate) struct Wf2q {
    vtime: u64,
    /// Sum of the backlogged flows' weights.
    weights: u64,
    /// Flows in the eligible heap and in the waiting heap.
    eligible: u32,
    waiting: u32,
    /// The backlogged flow to send next (`None`: none is backlogged).
    next: Option<usize>,
}

impl Wf2q {
    /// Flow `i` of `flows` gets a chunk of `bytes` at its head (it was idle).
    ///
    /// `flows` is the same table on every call, and only ever grows: the heaps'
    /// entries are kept in it.
    pub(crate) fn arrive(&mut self, flows: &mut [Flow], i: usize, bytes: u64) {
        let Some(flow) = flows.get_mut(i) else {
            return;
        };
        if bytes == 0 || flow.is_backlogged() {
            return;
        }
        self.weights += u64::from(flow.weight.max(1));
        flow.start = later(flow.finish, self.vtime);
        flow.finish = flow.start.wrapping_add(flow.cost(bytes));
        flow.head = bytes;
        self.insert(flows, i);
        self.next = self.first_of(flows);
    }

    /// The flow to send next, if any is backlogged.
    pub(crate) fn pick(&self) -> Option<usize> {
        self.next
    }

    /// Flow `i` leaves while backlogged (its transfer ended or is not paced any
    /// more): its chunk is withdrawn without advancing virtual time.
    pub(crate) fn leave(&mut self, flows: &mut [Flow], i: usize) {
        let Some(flow) = flows.get_mut(i).filter(|f| f.is_backlogged()) else {
            return;
        };
        flow.head = 0;
        self.weights -= u64::from(flow.weight.max(1));
        self.remove(flows, i);
        self.next = self.first_of(flows);
    }

    /// Flow `i` sent its head chunk; `next` is the size of its following chunk (0:
    /// it is idle now). Virtual time advances by the chunk over the backlogged
    /// weight, and at least to the least virtual start of a backlogged flow.
    pub(crate) fn served(&mut self, flows: &mut [Flow], i: usize, next: u64) {
        let Some(sent) = flows.get(i).map(|f| f.head).filter(|&h| h > 0) else {
            return;
        };
        self.vtime = self
            .vtime
            .wrapping_add(sent.saturating_mul(VSCALE) / self.weights.max(1));
        self.remove(flows, i);
        let flow = &mut flows[i];
        if next > 0 {
            flow.start = flow.finish;
            flow.finish = flow.start.wrapping_add(flow.cost(next));
            flow.head = next;
            self.insert(flows, i);
        } else {
            flow.head = 0;
            self.weights -= u64::from(flow.weight.max(1));
        }
        self.reach_starts(flows);
        if self.eligible == 0 {
            if let Some(first) = self.top(flows, Heap::Waiting) {
                // None is eligible: virtual time moves to the least start.
                self.vtime = flows[first].start;
                self.reach_starts(flows);
            }
        }
        self.next = self.first_of(flows);
    }

    /// The eligible flow that finishes first, else the waiting one that starts first.
    fn first_of(&self, flows: &[Flow]) -> Option<usize> {
        self.top(flows, Heap::Eligible)
            .or_else(|| self.top(flows, Heap::Waiting))
    }

    /// The waiting flows whose start virtual time has reached become eligible.
    fn reach_starts(&mut self, flows: &mut [Flow]) {
        while let Some(i) = self.top(flows, Heap::Waiting) {
            if before(self.vtime, flows[i].start) {
                break;
            }
            self.remove(flows, i);
            self.insert(flows, i);
        }
    }

    fn len(&self, heap: Heap) -> usize {
        match heap {
            Heap::Eligible => self.eligible as usize,
            Heap::Waiting => self.waiting as usize,
            Heap::None => 0,
        }
    }

    fn set_len(&mut self, heap: Heap, len: usize) {
        match heap {
            Heap::Eligible => self.eligible = len as u32,
            Heap::Waiting => self.waiting = len as u32,
            Heap::None => {}
        }
    }

    fn top(&self, flows: &[Flow], heap: Heap) -> Option<usize> {
        (self.len(heap) > 0).then(|| Self::at(flows, heap, 0))
    }

    /// Backlogged flow `i` joins the heap its start puts it in at the current
    /// virtual time.
    fn insert(&mut self, flows: &mut [Flow], i: usize) {
        let heap = if before(self.vtime, flows[i].start) {
            Heap::Waiting
        } else {
            Heap::Eligible
        };
        let k = self.len(heap);
        self.set_len(heap, k + 1);
        Self::put(flows, heap, k, i);
        Self::sift_up(flows, heap, k);
    }

    /// Flow `i` leaves its heap, if it is in one.
    fn remove(&mut self, flows: &mut [Flow], i: usize) {
        let heap = flows[i].heap;
        let Some(last) = self.len(heap).checked_sub(1) else {
            return;
        };
        let k = flows[i].place as usize;
        self.set_len(heap, last);
        flows[i].heap = Heap::None;
        if k != last {
            let moved = Self::at(flows, heap, last);
            Self::put(flows, heap, k, moved);
            Self::sift_down(flows, heap, last, k);
            Self::sift_up(flows, heap, flows[moved].place as usize);
        }
    }

    /// The flow at place `k` of `heap` (`k` below the heap's length, which is at
    /// most the table's).
    fn at(flows: &[Flow], heap: Heap, k: usize) -> usize {
        let slot = &flows[k];
        (if heap == Heap::Eligible {
            slot.eligible_at
        } else {
            slot.waiting_at
        }) as usize
    }

    /// Flow `i` takes place `k` of `heap`.
    fn put(flows: &mut [Flow], heap: Heap, k: usize, i: usize) {
        if heap == Heap::Eligible {
            flows[k].eligible_at = i as u32;
        } else {
            flows[k].waiting_at = i as u32;
        }
        flows[i].heap = heap;
        flows[i].place = k as u32;
    }

    /// Flow `a` comes before flow `b` in `heap`: the earlier finish among the
    /// eligible, the earlier start among the waiting, the lower index on a tie.
    fn precedes(flows: &[Flow], heap: Heap, a: usize, b: usize) -> bool {
        let key = |i: usize| {
            if heap == Heap::Eligible {
                flows[i].finish
            } else {
                flows[i].start
            }
        };
        let (ka, kb) = (key(a), key(b));
        before(ka, kb) || (ka == kb && a < b)
    }

    fn sift_up(flows: &mut [Flow], heap: Heap, mut k: usize) {
        let i = Self::at(flows, heap, k);
        while k > 0 {
            let parent = (k - 1) / 2;
            let above = Self::at(flows, heap, parent);
            if !Self::precedes(flows, heap, i, above) {
                break;
            }
            Self::put(flows, heap, k, above);
            k = parent;
        }
        Self::put(flows, heap, k, i);
    }

    fn sift_down(flows: &mut [Flow], heap: Heap, len: usize, mut k: usize) {
        let i = Self::at(flows, heap, k);
        loop {
            let left = 2 * k + 1;
            if left >= len {
                break;
            }
            let (mut child, mut below) = (left, Self::at(flows, heap, left));
            if left + 1 < len {
                let right = Self::at(flows, heap, left + 1);
                if Self::precedes(flows, heap, right, below) {
                    (child, below) = (left + 1, right);
                }
            }
            if !Self::precedes(flows, heap, below, i) {
                break;
            }
            Self::put(flows, heap, k, below);
            k = child;
        }
        Self::put(flows, heap, k, i);
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
        sched.arrive(&mut flows, 0, 1000);
        for _ in 0..100 {
            let i = sched.pick().unwrap_or(9);
            assert_eq!(i, 0);
            sched.served(&mut flows, i, 1000);
        }
        // Flow 1 arrives: it alternates with flow 0 instead of catching up 100 chunks.
        sched.arrive(&mut flows, 1, 1000);
        let mut picks = [0; 2];
        for _ in 0..20 {
            let i = sched.pick().unwrap_or(9);
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
            ..Default::default()
        };
        sched.arrive(&mut flows, 0, 1024);
        sched.arrive(&mut flows, 1, 1024);
        let mut picks = [0; 2];
        for _ in 0..400 {
            let i = sched.pick().unwrap_or(9);
            picks[i] += 1;
            sched.served(&mut flows, i, 1024);
        }
        assert_eq!(picks, [100, 300]);
    }

    #[test]
    fn idle_flows_are_not_picked_and_nothing_is_picked_when_all_idle() {
        let mut flows = vec![Flow::new(1), Flow::new(5)];
        let mut sched = Wf2q::default();
        assert_eq!(sched.pick(), None);
        sched.arrive(&mut flows, 1, 10);
        assert_eq!(sched.pick(), Some(1));
        sched.served(&mut flows, 1, 0);
        assert_eq!(sched.pick(), None);
    }

    #[test]
    fn a_flow_that_leaves_while_backlogged_gives_its_share_back() {
        let mut flows = vec![Flow::new(1), Flow::new(1)];
        let mut sched = Wf2q::default();
        sched.arrive(&mut flows, 0, 100);
        sched.arrive(&mut flows, 1, 100);
        sched.leave(&mut flows, 1);
        assert_eq!(sched.pick(), Some(0));
        sched.served(&mut flows, 0, 0);
        assert_eq!(sched.weights, 0, "no weight left behind");
        assert_eq!(sched.pick(), None);
    }

    /// A backlogged flow's place in WF²Q+'s order at some virtual time, by the
    /// definition: an eligible flow before one that is not; among eligible ones the
    /// earlier finish, among the others the earlier start; the lower index on a tie.
    #[derive(Clone, Copy)]
    struct Rank {
        eligible: bool,
        /// The finish time when eligible, else the start time.
        key: u64,
        index: usize,
    }

    impl Rank {
        fn of(vtime: u64, index: usize, flow: &Flow) -> Rank {
            let eligible = !before(vtime, flow.start);
            let key = if eligible { flow.finish } else { flow.start };
            Rank {
                eligible,
                key,
                index,
            }
        }

        fn precedes(&self, other: &Rank) -> bool {
            (self.eligible && !other.eligible)
                || (self.eligible == other.eligible
                    && (before(self.key, other.key)
                        || (self.key == other.key && self.index < other.index)))
        }
    }

    /// The earliest virtual start of a backlogged flow.
    fn least_start(flows: &[Flow]) -> Option<u64> {
        let mut least: Option<u64> = None;
        for f in flows.iter().filter(|f| f.is_backlogged()) {
            least = Some(least.map_or(f.start, |m| if before(f.start, m) { f.start } else { m }));
        }
        least
    }

    /// WF²Q+'s choice by its definition, comparing every pair of ranks.
    fn reference_pick(vtime: u64, flows: &[Flow]) -> Option<usize> {
        let ranks: Vec<Rank> = flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_backlogged())
            .map(|(i, f)| Rank::of(vtime, i, f))
            .collect();
        ranks
            .iter()
            .find(|a| ranks.iter().all(|b| a.index == b.index || a.precedes(b)))
            .map(|a| a.index)
    }

    #[test]
    fn the_kept_pick_is_the_one_a_definition_finds_after_any_change() {
        let mut flows: Vec<Flow> = (0..64).map(|i| Flow::new(1 + (i % 5) * 3)).collect();
        let mut sched = Wf2q {
            vtime: u64::MAX - (1 << 30),
            ..Default::default()
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for step in 0..50_000 {
            let i = random(flows.len() as u64) as usize;
            let bytes = 1 + random(64 * 1024);
            match random(9) {
                0 => sched.leave(&mut flows, i),
                8 => flows[i].renew(1 + random(9) as u32),
                1..=3 => sched.arrive(&mut flows, i, bytes),
                _ => {
                    if let Some(p) = sched.pick() {
                        let vtime = sched.vtime;
                        let next = if random(4) == 0 { 0 } else { bytes };
                        sched.served(&mut flows, p, next);
                        let advanced = sched.vtime;
                        if let Some(least) = least_start(&flows) {
                            assert!(
                                !before(advanced, least),
                                "step {step}: virtual time behind a start"
                            );
                        }
                        assert!(
                            !before(advanced, vtime),
                            "step {step}: virtual time went back"
                        );
                    }
                }
            }
            assert_eq!(
                sched.pick(),
                reference_pick(sched.vtime, &flows),
                "step {step}"
            );
            let weights: u64 = flows
                .iter()
                .filter(|f| f.is_backlogged())
                .map(|f| u64::from(f.weight))
                .sum();
            assert_eq!(sched.weights, weights, "step {step}");
        }
    }
}
