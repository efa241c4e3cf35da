// SPDX-License-Identifier: GPL-2.0
//! The unpaced drain: bulk bytes sent unpaced before latency traffic began, still
//! queued at the bottleneck. Nothing paced goes until they drain (the device holds
//! paced work requests back), and every latency-class operation that starts before
//! then waits behind them whatever SafeUtil is.

/// When unpaced bytes were last seen holding paced work requests back. The flow
/// picked rechecks every few milliseconds while they do, so this is the drain's end
/// to within that.
#[derive(Default)]
pub(crate) struct UnpacedDrain {
    last_seen_ns: u64,
}

impl UnpacedDrain {
    /// At `now` the device still holds paced work requests back.
    pub(crate) fn held(&mut self, now: u64) {
        self.last_seen_ns = self.last_seen_ns.max(now);
    }

    /// How long a paced transfer waiting since `from` has waited for tokens by
    /// `now`: the drain's time is not a wait for tokens.
    pub(crate) fn token_wait(&self, from: u64, now: u64) -> u64 {
        now.saturating_sub(from.max(self.last_seen_ns))
    }

    /// Whether an operation that started at `started` can judge SafeUtil: one that
    /// started while the drain went on waited behind bytes pacing never let
    /// through, and a cut for it would only cost bulk its rate. When latency
    /// traffic begins behind a 60 ms unpaced window, AIMD's first window holds a
    /// few such samples, enough to set its p99 and cut SafeUtil by a quarter.
    pub(crate) fn judges(&self, started: u64) -> bool {
        started > self.last_seen_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn operations_started_during_the_drain_do_not_judge_safe_util() {
        let mut d = UnpacedDrain::default();
        assert!(d.judges(1), "no drain seen: every sample judges");
        // Seen at 100 ms, rechecked at 102 ms.
        d.held(100 * MS);
        d.held(102 * MS);
        assert!(!d.judges(90 * MS));
        assert!(!d.judges(102 * MS));
        assert!(d.judges(103 * MS));
        // A late caller's older time never moves the end back.
        d.held(101 * MS);
        assert!(!d.judges(102 * MS));
    }

    #[test]
    fn token_waits_count_from_the_drain_end() {
        let mut d = UnpacedDrain::default();
        assert_eq!(d.token_wait(10 * MS, 15 * MS), 5 * MS);
        d.held(50 * MS);
        // Waiting since before the drain ended, and since after it.
        assert_eq!(d.token_wait(10 * MS, 55 * MS), 5 * MS);
        assert_eq!(d.token_wait(52 * MS, 55 * MS), 3 * MS);
    }
}
