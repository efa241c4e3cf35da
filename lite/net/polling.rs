// SPDX-License-Identifier: GPL-2.0
//! When a waiter busy-polls the send CQ for its completion, and for how long.
//!
//! A sleeping waiter pays two wakeups per operation (the CQ's kworker, then the
//! waiter), which is most of what a small RDMA read costs beyond the wire. Small
//! operations that users call in the latency and default classes therefore poll
//! for about twice their usual round trip and sleep only if that passes; bulk
//! traffic and larger transfers always sleep, since their CPU time matters more
//! than microseconds, and so does the kernel's own work (serving peers' requests,
//! RPC records): a worker that spins delays whatever queues behind it, and on a
//! loopback QP it takes the CPU that Soft-RoCE needs to answer.
//! One waiter per peer polls at a time, the others sleep: the poller runs their
//! completions too, so they wake as soon as it sees them, and contending threads
//! never burn more than one CPU per peer.
//!
//! A poll lasts at most `POLL_MAX_NS`. While the usual round trip is longer than
//! that (a queue at a slow link, an emulated NIC), most polls would give up before
//! their completion came, and every one would burn that long of a CPU that the
//! node's other work needs (on a one-vCPU emulated sender, 2 ms per operation of
//! the CPU that Soft-RoCE sends with): operations then sleep at once, until the
//! round trips shorten again.
//!
//! The usual round trip is a running median per peer, estimated with multiplicative
//! steps (up when a sample is above it, down when below), which a few slow outliers
//! cannot drag the way they drag a mean. Every operation that may poll feeds it,
//! polled or not, with the time from its post to its completion's handler.

use crate::uapi::LITE_CLASS_BULK;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Transfers above this many bytes (a page) sleep: their wire time dwarfs a wakeup.
pub(crate) const POLL_MAX_BYTES: u64 = 4 << 10;
/// No operation polls longer than this (a stalled peer must not cost a CPU).
pub(crate) const POLL_MAX_NS: u64 = 2_000_000;
/// The median's first guess, before any sample.
const FIRST_GUESS_NS: u64 = 100_000;
/// The median stops rising here: far enough above `POLL_MAX_NS` to stop polling,
/// near enough to come back under it within a few dozen short round trips.
const MEDIAN_MAX_NS: u64 = 4 * POLL_MAX_NS;
/// The median moves by 1/STEP of itself per sample.
const STEP: u64 = 16;

/// How the caller of an operation waits for its completion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Wait {
    /// A user's call: busy-polls first when `polls` says so.
    PollFirst,
    /// The kernel's own work: sleeps.
    Sleep,
}

/// Whether an operation of `class` moving `bytes` polls for its completion.
pub(crate) fn polls(wait: Wait, class: u32, bytes: u64) -> bool {
    wait == Wait::PollFirst && class != LITE_CLASS_BULK && bytes <= POLL_MAX_BYTES
}

/// The running median round trip of polled operations to one peer, and whether
/// one of them is polling now.
pub(crate) struct PollBudget {
    median_ns: AtomicU64,
    polling: AtomicBool,
}

/// The one polling waiter's turn; ends when dropped.
pub(crate) struct PollTurn<'a>(&'a AtomicBool);

impl Drop for PollTurn<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl PollBudget {
    pub(crate) const fn new() -> Self {
        PollBudget {
            median_ns: AtomicU64::new(FIRST_GUESS_NS),
            polling: AtomicBool::new(false),
        }
    }

    /// The turn to poll, unless another waiter has it.
    pub(crate) fn try_poll(&self) -> Option<PollTurn<'_>> {
        self.polling
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| PollTurn(&self.polling))
    }

    /// How long the next operation polls before it sleeps: twice the usual round
    /// trip, at most `POLL_MAX_NS`, and 0 (sleep at once) while the usual round
    /// trip is longer than that.
    pub(crate) fn budget_ns(&self) -> u64 {
        let median = self.median_ns.load(Ordering::Relaxed);
        if median > POLL_MAX_NS {
            0
        } else {
            median.saturating_mul(2).min(POLL_MAX_NS)
        }
    }

    /// An operation completed `ns` after it was posted. Concurrent updates may
    /// overwrite each other, which costs the estimate one sample.
    pub(crate) fn record(&self, ns: u64) {
        let median = self.median_ns.load(Ordering::Relaxed);
        let next = if ns > median {
            (median + median / STEP + 1).min(MEDIAN_MAX_NS)
        } else {
            (median - median / STEP).max(1)
        };
        self.median_ns.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::{LITE_CLASS_DEFAULT, LITE_CLASS_LATENCY};

    #[test]
    fn small_user_operations_of_the_latency_and_default_classes_poll() {
        assert!(polls(Wait::PollFirst, LITE_CLASS_LATENCY, 8));
        assert!(polls(Wait::PollFirst, LITE_CLASS_DEFAULT, POLL_MAX_BYTES));
        assert_eq!(POLL_MAX_BYTES, 4096);
        assert!(!polls(
            Wait::PollFirst,
            LITE_CLASS_DEFAULT,
            POLL_MAX_BYTES + 1
        ));
        assert!(!polls(Wait::PollFirst, LITE_CLASS_BULK, 8));
        assert!(!polls(Wait::Sleep, LITE_CLASS_LATENCY, 8));
    }

    /// Round trips around `typical_ns` with every tenth one `outlier_ns`.
    fn feed(budget: &PollBudget, typical_ns: u64, outlier_ns: u64, count: u64) {
        for i in 0..count {
            let jitter = typical_ns / 10 * (i % 3) / 2;
            budget.record(if i % 10 == 9 {
                outlier_ns
            } else {
                typical_ns - typical_ns / 20 + jitter
            });
        }
    }

    #[test]
    fn the_budget_follows_the_median_not_the_outliers() {
        // A real RNIC: 3 us round trips, one in ten takes 1 ms.
        let nic = PollBudget::new();
        feed(&nic, 3_000, 1_000_000, 400);
        assert!(
            (5_000..=8_000).contains(&nic.budget_ns()),
            "{}",
            nic.budget_ns()
        );
        // The emulated cluster: 450 us round trips, one in ten takes 10 ms.
        let emulated = PollBudget::new();
        feed(&emulated, 450_000, 10_000_000, 400);
        assert!(
            (800_000..=1_100_000).contains(&emulated.budget_ns()),
            "{}",
            emulated.budget_ns()
        );
    }

    #[test]
    fn the_budget_is_capped() {
        let budget = PollBudget::new();
        feed(&budget, 1_500_000, 1_500_000, 1_000);
        assert_eq!(budget.budget_ns(), POLL_MAX_NS);
    }

    #[test]
    fn round_trips_longer_than_a_poll_sleep_at_once_until_they_shorten() {
        // A slow link's queue: 5 ms round trips, which no 2 ms poll would catch.
        let budget = PollBudget::new();
        feed(&budget, 5_000_000, 50_000_000, 1_000);
        assert_eq!(budget.budget_ns(), 0);
        // The queue drains: polling resumes within a few dozen operations.
        feed(&budget, 3_000, 3_000, 40);
        assert!(budget.budget_ns() > 0, "{}", budget.budget_ns());
        feed(&budget, 3_000, 3_000, 200);
        assert!(budget.budget_ns() <= 8_000, "{}", budget.budget_ns());
    }

    #[test]
    fn one_waiter_polls_at_a_time() {
        let budget = PollBudget::new();
        let turn = budget.try_poll();
        assert!(turn.is_some());
        assert!(budget.try_poll().is_none());
        drop(turn);
        assert!(budget.try_poll().is_some());
    }

    #[test]
    fn the_median_never_reaches_zero() {
        let budget = PollBudget::new();
        feed(&budget, 0, 0, 10_000);
        budget.record(0);
        assert!(budget.budget_ns() >= 2);
        budget.record(u64::MAX);
        assert!(budget.budget_ns() >= 4);
    }
}
