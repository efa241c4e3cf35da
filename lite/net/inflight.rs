// SPDX-License-Identifier: GPL-2.0
//! How many of a transfer's posted work requests must complete before the next one
//! may go: the bytes in flight stay within a budget whatever the requests' sizes.
//!
//! rxe has no congestion control: a burst beyond what the receiver's queues absorb
//! costs a retransmit timeout per lost frame, so a transfer keeps at most
//! `budget` bytes in flight. Counting requests instead would starve transfers made
//! of small pieces (an RPC reply into a caller's scattered pages is one request per
//! page). Completions of one transfer arrive in posting order (one QP), so the
//! requests still in flight are always the last ones posted.

/// Work requests one transfer may have in flight at most (its send queue credits).
pub(crate) const MAX_INFLIGHT: usize = 16;

pub(crate) struct InFlight {
    /// Bytes of the last `MAX_INFLIGHT` requests posted, oldest first (a ring).
    sizes: [usize; MAX_INFLIGHT],
    posted: usize,
    budget: usize,
}

impl InFlight {
    pub(crate) fn new(budget: usize) -> Self {
        InFlight {
            sizes: [0; MAX_INFLIGHT],
            posted: 0,
            budget,
        }
    }

    /// Before posting a request of `bytes`: at most how many of the earlier ones may
    /// still be in flight. A request larger than the budget waits for all of them.
    pub(crate) fn may_remain(&self, bytes: usize) -> u32 {
        let mut remain = 0;
        let mut total = bytes;
        while remain < MAX_INFLIGHT - 1 && remain < self.posted {
            let newest = self.sizes[(self.posted - 1 - remain) % MAX_INFLIGHT];
            if total + newest > self.budget {
                break;
            }
            total += newest;
            remain += 1;
        }
        remain as u32
    }

    /// Changes the budget for the requests posted from now on.
    pub(crate) fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
    }

    /// Records a posted request of `bytes`.
    pub(crate) fn posted(&mut self, bytes: usize) {
        self.sizes[self.posted % MAX_INFLIGHT] = bytes;
        self.posted += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_flight_stay_within_the_budget() {
        let mut f = InFlight::new(64 << 10);
        assert_eq!(f.may_remain(4096), 0, "nothing posted yet");
        for posted in 0..15 {
            assert_eq!(
                f.may_remain(4096),
                posted,
                "4 KiB pages: all earlier ones may stay"
            );
            f.posted(4096);
        }
        // 15 pages of 4 KiB in flight: a 16th fits the budget exactly, but a 17th
        // would exceed the request limit.
        f.posted(4096);
        assert_eq!(f.may_remain(4096), 15);
        assert_eq!(
            f.may_remain(32 << 10),
            8,
            "32 KiB + 8 pages = the 64 KiB budget"
        );
        let mut big = InFlight::new(64 << 10);
        big.posted(32 << 10);
        big.posted(32 << 10);
        assert_eq!(
            big.may_remain(32 << 10),
            1,
            "two of 32 KiB at most, like before"
        );
        assert_eq!(
            big.may_remain(1 << 20),
            0,
            "larger than the budget: waits for all"
        );
    }

    #[test]
    fn the_ring_wraps_over_many_requests() {
        let mut f = InFlight::new(10_000);
        for i in 0..1000 {
            let bytes = 1000 + (i * 37) % 3000;
            let remain = f.may_remain(bytes) as usize;
            let newest: usize = (0..remain)
                .map(|k| f.sizes[(f.posted - 1 - k) % MAX_INFLIGHT])
                .sum();
            assert!(newest + bytes <= 10_000);
            f.posted(bytes);
        }
    }
}
