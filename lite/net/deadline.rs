// SPDX-License-Identifier: GPL-2.0
//! How long a one-sided operation may take before its link counts as failed.
//!
//! RC's retry budget (verbs.c) fails a link that acknowledges nothing for about
//! 15 s, but every acknowledgement restarts it: a link that drops most frames yet
//! passes a few (bit errors the ICRC catches) would keep an operation going for
//! ever. One that has not completed by its deadline fails with ETIMEDOUT instead,
//! and its peer is marked failed (its QPs flushed), as after the retry budget.
//!
//! The deadline grows with the bytes posted, and time the operation spent waiting
//! for its turn on this node (SW-Pri's pacing, send credits) does not count: a
//! transfer paced to a small share is slow by choice, not for a broken link.

/// Every operation's allowance, whatever its size: twice RC's retry budget.
pub(crate) const BASE_NS: u64 = 30_000_000_000;
/// The slowest rate an operation's bytes may move at, out of its turn's waits: far
/// below a fair share of any link the cluster runs on (64 transfers sharing a
/// 1 MiB/s wire get 16 KiB/s each), so that only a broken link misses it.
pub(crate) const FLOOR_BYTES_PER_S: u64 = 4 << 10;

/// How long an operation's work requests may go without one being posted or
/// completing, where the transport bounds its retries by nothing of its own:
/// iWARP's QPs ride on TCP, to which the verbs API passes no retry count and which
/// retransmits for many minutes (`tcp_retries2`). As long as RC's retry budget.
pub(crate) const STALL_NS: u64 = 15_000_000_000;

/// How long an operation whose work requests were last posted or completed
/// `idle_ns` ago may still wait before it counts as stalled (0: it does).
pub(crate) const fn stall_left_ns(idle_ns: u64) -> u64 {
    STALL_NS.saturating_sub(idle_ns)
}

/// How long an operation that moves `bytes` may take (ns).
pub(crate) const fn allowance_ns(bytes: u64) -> u64 {
    BASE_NS.saturating_add(bytes.saturating_mul(1_000_000_000 / FLOOR_BYTES_PER_S))
}

/// One operation's deadline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    start_ns: u64,
    /// Bytes posted so far.
    bytes: u64,
    /// Time spent waiting for its turn (ns).
    excused_ns: u64,
}

impl Deadline {
    /// An operation that starts at `now`.
    pub(crate) const fn starting(now: u64) -> Self {
        Deadline {
            start_ns: now,
            bytes: 0,
            excused_ns: 0,
        }
    }

    /// `bytes` more are being posted.
    pub(crate) fn posting(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// The operation waited `ns` for its turn on this node.
    pub(crate) fn excuse(&mut self, ns: u64) {
        self.excused_ns = self.excused_ns.saturating_add(ns);
    }

    /// What is left of it at `now` (ns): 0 once it passed.
    pub(crate) fn left_ns(&self, now: u64) -> u64 {
        self.start_ns
            .saturating_add(self.excused_ns)
            .saturating_add(allowance_ns(self.bytes))
            .saturating_sub(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn small_operations_get_the_base_and_large_ones_the_floor_rate() {
        assert_eq!(allowance_ns(0), 30 * S);
        assert_eq!(allowance_ns(8), 30 * S + 8 * 244_140);
        // 1 MiB at 4 KiB/s: 256 s on top of the base.
        let mib = allowance_ns(1 << 20);
        assert!((285 * S..286 * S).contains(&mib), "{mib}");
    }

    #[test]
    fn a_stall_is_counted_from_the_last_progress() {
        assert_eq!(stall_left_ns(0), 15 * S);
        assert_eq!(stall_left_ns(10 * S), 5 * S);
        assert_eq!(stall_left_ns(u64::MAX), 0, "stalled, not wrapped");
    }

    #[test]
    fn huge_operations_saturate_rather_than_wrap() {
        assert_eq!(allowance_ns(u64::MAX), u64::MAX);
        let mut d = Deadline::starting(u64::MAX - 5);
        d.posting(u64::MAX);
        d.excuse(u64::MAX);
        assert_eq!(
            d.left_ns(u64::MAX),
            0,
            "saturated at the end of time, not wrapped"
        );
        assert_eq!(Deadline::starting(0).left_ns(u64::MAX), 0);
    }

    #[test]
    fn the_deadline_grows_with_bytes_posted_and_time_excused() {
        let mut d = Deadline::starting(100 * S);
        assert_eq!(d.left_ns(100 * S), 30 * S);
        assert_eq!(d.left_ns(125 * S), 5 * S);
        assert_eq!(d.left_ns(131 * S), 0, "passed");
        d.posting(4 << 10);
        // 4 KiB buy about a second more.
        assert_eq!(d.left_ns(125 * S), 5 * S + 4096 * 244_140);
        d.excuse(10 * S);
        assert_eq!(d.left_ns(140 * S), d.left_ns(130 * S) - 10 * S);
    }
}
