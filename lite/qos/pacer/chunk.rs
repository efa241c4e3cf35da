// SPDX-License-Identifier: GPL-2.0
//! How big a paced chunk is: sized to the link, and scaled while small chunks
//! cannot carry SafeUtil (`ChunkScale`).

use super::{per_second, MAX_RATE, NS_PER_S};

/// A packet on the wire: RoCE's 1 KiB MTU, the smallest chunk.
pub(crate) const PACKET_BYTES: u64 = 1024;
/// The queueing budget: a paced chunk lasts this many packet times on the wire ...
pub(crate) const BUDGET_PACKETS: u64 = 4;
/// ... or, on links fast enough that this is longer, this long: each chunk costs
/// the pacer a wakeup and a work request, which must stay a small part of a core.
pub(crate) const MIN_CHUNK_NS: u64 = 25_000;
/// The largest paced chunk: one work request of a transfer.
pub(crate) const CHUNK_MAX: u64 = 32 << 10;
/// Chunk size when no latency traffic is active (Justitia: 1 MB).
pub(crate) const CHUNK_ALONE: u64 = 1 << 20;

/// The paced chunk for a link of `rate` bytes/s: the queueing budget's packets, or
/// what `MIN_CHUNK_NS` carries at that rate if more, in whole packets.
pub(crate) fn link_chunk(rate: u64) -> u64 {
    let by_time = rate.min(MAX_RATE) * MIN_CHUNK_NS / NS_PER_S;
    let chunk = (BUDGET_PACKETS * PACKET_BYTES).max(by_time).min(CHUNK_MAX);
    chunk / PACKET_BYTES * PACKET_BYTES
}

/// The length of the next chunk of a bulk message with `remaining` bytes, given
/// the chunk size while latency traffic is active (None: it is not).
pub(crate) fn chunk_len(remaining: u64, with_latency: Option<u64>) -> u64 {
    remaining.min(with_latency.unwrap_or(CHUNK_ALONE))
}

/// How many link chunks a paced chunk is, from how well the pacer delivers SafeUtil.
pub(crate) struct ChunkScale {
    scale: u64,
    /// Judgements in a row that delivered SafeUtil at the current scale.
    good: u32,
    from_ns: u64,
    /// Paced bytes let through since `from_ns`, and the time their flows waited.
    bytes: u64,
    waited_ns: u64,
    /// The lowest rate the bucket had when they went (`u64::MAX`: none went).
    lowest_rate: u64,
}

pub(crate) const MAX_CHUNK_SCALE: u64 = 8;
const SCALE_INTERVAL_NS: u64 = 500_000_000;
/// Judgements that must deliver SafeUtil before smaller chunks are tried again.
const GOOD_BEFORE_SHRINK: u32 = 8;

impl ChunkScale {
    pub(crate) fn new(now_ns: u64) -> Self {
        ChunkScale {
            scale: 1,
            good: 0,
            from_ns: now_ns,
            bytes: 0,
            waited_ns: 0,
            lowest_rate: u64::MAX,
        }
    }

    pub(crate) fn scale(&self) -> u64 {
        self.scale
    }

    /// The interval being judged starts again at `now_ns`: until then the flows
    /// could not hand chunks out (unpaced bytes held them), however fast they are.
    pub(crate) fn restart(&mut self, now_ns: u64) {
        (self.from_ns, self.bytes, self.waited_ns) = (now_ns, 0, 0);
        self.lowest_rate = u64::MAX;
    }

    /// A paced chunk of `bytes` went after waiting `waited_ns` for its turn and
    /// tokens, from a bucket filled at `rate`.
    pub(crate) fn admitted(&mut self, bytes: u64, waited_ns: u64, rate: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.waited_ns = self.waited_ns.saturating_add(waited_ns);
        self.lowest_rate = self.lowest_rate.min(rate);
    }

    /// Judges the last interval against the lowest rate the bucket had in it (AIMD
    /// may have raised `rate`, its rate now, since: the flows lag a rise, and that
    /// lag is no reason for larger chunks), once an interval has passed: chunks
    /// double while the flows waited (they were backlogged, in sum at least half
    /// the time) and still got less than 90 % of the rate; they halve after
    /// `GOOD_BEFORE_SHRINK` intervals that got 95 %. True when the scale changed.
    pub(crate) fn judge(&mut self, rate: u64, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.from_ns);
        if elapsed < SCALE_INTERVAL_NS {
            return false;
        }
        let achieved = per_second(self.bytes, elapsed);
        let backlogged = self.waited_ns >= elapsed / 2;
        let rate = rate.min(self.lowest_rate);
        (self.from_ns, self.bytes, self.waited_ns) = (now_ns, 0, 0);
        self.lowest_rate = u64::MAX;
        if rate == 0 {
            return false;
        }
        let rate = rate.min(MAX_RATE);
        if backlogged && achieved < rate / 10 * 9 {
            self.good = 0;
            if self.scale < MAX_CHUNK_SCALE {
                self.scale *= 2;
                return true;
            }
        } else if achieved >= rate / 20 * 19 {
            self.good += 1;
            if self.good >= GOOD_BEFORE_SHRINK && self.scale > 1 {
                self.good = 0;
                self.scale /= 2;
                return true;
            }
        } else {
            self.good = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::headroom;
    use super::*;

    #[test]
    fn chunks_last_a_few_packet_times_on_slow_links_and_are_capped_on_fast_ones() {
        // 4 MiB/s: the budget's 4 packets, 1 ms on the wire.
        assert_eq!(link_chunk(4 << 20), 4 * PACKET_BYTES);
        assert_eq!(link_chunk(0), 4 * PACKET_BYTES);
        // 1 GB/s: 25 us of it, in whole packets.
        assert_eq!(link_chunk(1_000_000_000), 24 * PACKET_BYTES);
        // 100 GB/s: one work request.
        assert_eq!(link_chunk(100_000_000_000), CHUNK_MAX);
        assert_eq!(link_chunk(u64::MAX), CHUNK_MAX);
        assert_eq!(headroom(16_000), 15_000);
    }

    #[test]
    fn chunks_grow_while_the_pacer_falls_short_and_shrink_once_it_keeps_up() {
        let rate = 3_000_000;
        let mut c = ChunkScale::new(0);
        let second = 1_000_000_000;
        let mut now = 0;
        let mut interval = |c: &mut ChunkScale, delivered: u64, waited: u64| {
            c.admitted(delivered / 2, waited / 2, rate);
            c.admitted(delivered - delivered / 2, waited - waited / 2, rate);
            now += second;
            c.judge(rate, now)
        };
        // Backlogged flows (waiting all the time) that get 55 % of the rate: doubles.
        assert!(interval(&mut c, rate * 55 / 100, 2 * second));
        assert_eq!(c.scale(), 2);
        // App-limited flows (hardly waiting) get what they ask for: no change.
        assert!(!interval(&mut c, rate / 10, second / 10));
        assert_eq!(c.scale(), 2);
        for _ in 0..5 {
            interval(&mut c, rate / 2, 2 * second);
        }
        assert_eq!(c.scale(), MAX_CHUNK_SCALE, "capped");
        // Delivering: after enough good intervals, smaller chunks are tried again.
        for i in 0..GOOD_BEFORE_SHRINK {
            let changed = interval(&mut c, rate * 96 / 100, 2 * second);
            assert_eq!(changed, i + 1 == GOOD_BEFORE_SHRINK);
        }
        assert_eq!(c.scale(), MAX_CHUNK_SCALE / 2);
        // Within an interval nothing is judged; unlimited is never judged short.
        let mut d = ChunkScale::new(0);
        d.admitted(1, second, rate);
        assert!(!d.judge(rate, second / 4));
        assert!(!d.judge(0, second));
        assert_eq!(d.scale(), 1);
    }

    #[test]
    fn a_rise_of_the_rate_the_flows_still_lag_does_not_grow_chunks() {
        let second = 1_000_000_000;
        let mut c = ChunkScale::new(0);
        // 2 MB/s all interval, delivered at 1.9, then AIMD raised it to 3: no growth.
        c.admitted(1_900_000, second, 2_000_000);
        assert!(!c.judge(3_000_000, second));
        assert_eq!(c.scale(), 1);
        // Short of the interval's lowest rate as well: growth.
        c.admitted(1_000_000, second, 2_000_000);
        assert!(c.judge(3_000_000, 2 * second));
        assert_eq!(c.scale(), 2);
    }

    #[test]
    fn time_held_by_unpaced_bytes_is_not_judged() {
        let (second, rate) = (1_000_000_000, 3_000_000);
        let mut c = ChunkScale::new(0);
        // A quarter of the interval held, then the flows keep up with the rate.
        c.admitted(0, second / 4, rate);
        c.restart(second / 4);
        c.admitted(rate * 3 / 4, second * 3 / 4, rate);
        assert!(!c.judge(rate, second));
        assert_eq!(c.scale(), 1);
        // Without the restart the same interval looks short: 75 % of the rate.
        let mut d = ChunkScale::new(0);
        d.admitted(0, second / 4, rate);
        d.admitted(rate * 3 / 4, second * 3 / 4, rate);
        assert!(d.judge(rate, second));
    }

    #[test]
    fn chunks_are_small_only_beside_latency_traffic() {
        assert_eq!(chunk_len(1 << 22, Some(4096)), 4096);
        assert_eq!(chunk_len(1 << 22, Some(16 << 10)), 16 << 10);
        assert_eq!(chunk_len(1 << 22, None), CHUNK_ALONE);
        assert_eq!(chunk_len(100, Some(4096)), 100);
    }
}
