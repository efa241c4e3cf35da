// SPDX-License-Identifier: GPL-2.0
//! The token bucket that lets bulk bytes and operations through at SafeUtil.

use super::chunk::{BUDGET_PACKETS, PACKET_BYTES};
use super::{bytes_in, NS_PER_S};

/// The rate's bytes per operation it lets through: what one operation takes of a
/// link besides its payload, a packet's headers and its acknowledgement, so that
/// the operations of a flood of tiny messages are paced to the link as bulk bytes
/// are (Justitia's tokens carry about as many: 5 000 operations per 1 MB).
pub(crate) const BYTES_PER_OP: u64 = 200;

/// Bytes and operations issued at a rate, with a bounded bank.
pub(crate) struct TokenBucket {
    /// Bytes per second; 0 means unlimited.
    rate: u64,
    /// Operations per second that go with `rate` (one per BYTES_PER_OP).
    ops_rate: u64,
    bytes: u64,
    ops: u64,
    /// The most bytes banked: two chunks.
    pub(super) bank_bytes: u64,
    /// When the balances were last brought up to date.
    at_ns: u64,
    /// What the last refills earned beyond whole bytes and operations (in units of
    /// 1/NS_PER_S), so that no time is lost to rounding however often they run.
    byte_rest: u64,
    op_rest: u64,
    /// Bytes the rate offered over time, banked or not.
    offered: u64,
}

impl TokenBucket {
    pub(crate) fn new(rate: u64, now_ns: u64) -> Self {
        let mut b = TokenBucket {
            rate: 0,
            ops_rate: 0,
            bytes: 0,
            ops: 0,
            bank_bytes: 2 * BUDGET_PACKETS * PACKET_BYTES,
            at_ns: now_ns,
            byte_rest: 0,
            op_rest: 0,
            offered: 0,
        };
        b.set_rate(rate, now_ns);
        b
    }

    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }

    /// Bytes the rate offered up to `now_ns` since the bucket was made, whether or
    /// not anyone took them: what pacing should deliver to backlogged flows.
    pub(crate) fn offered(&mut self, now_ns: u64) -> u64 {
        self.refill(now_ns);
        self.offered
    }

    /// Bytes banked at `now_ns` (0 while unlimited).
    pub(crate) fn banked(&mut self, now_ns: u64) -> u64 {
        self.refill(now_ns);
        if self.rate == 0 {
            0
        } else {
            self.bytes
        }
    }

    /// Changes the rate from `now_ns` on (what was earned so far is kept). Rates
    /// are capped at 1 TB/s, which keeps every product below in 64 bits.
    pub(crate) fn set_rate(&mut self, rate: u64, now_ns: u64) {
        self.refill(now_ns);
        self.rate = rate.min(MAX_RATE);
        self.ops_rate = self.rate / BYTES_PER_OP;
    }

    /// Nothing banked, and nothing earned or offered up to `now_ns`: while unpaced
    /// bulk bytes still queued at the bottleneck hold paced work requests, the
    /// link's time is theirs, and tokens earned meanwhile would follow that queue
    /// as a burst of paced work requests (32 transfers held about 100 KiB of them,
    /// a queue of 2-3 chunks at a 1 MiB/s link for a second).
    pub(crate) fn restart(&mut self, now_ns: u64) {
        self.at_ns = self.at_ns.max(now_ns);
        self.bytes = 0;
        self.ops = 0;
        self.byte_rest = 0;
        self.op_rest = 0;
    }

    /// Chunks of `chunk` bytes from `now_ns` on. The bank holds two of them: with a
    /// bank of one, every chunk would wait for a full bank, and what the bucket earns
    /// between the time it names and the taker's wakeup would be lost (a 32 KiB chunk
    /// at 16 MB/s then went at 10 MB/s on emulated guests); a bigger bank is a burst
    /// that queues at the bottleneck in front of latency-class packets.
    pub(crate) fn set_chunk(&mut self, chunk: u64, now_ns: u64) {
        self.refill(now_ns);
        self.bank_bytes = chunk
            .max(PACKET_BYTES)
            .saturating_mul(2)
            .min(MAX_BANK_BYTES);
        self.bytes = self.bytes.min(self.bank_bytes);
        self.ops = self.ops.min(self.bank_ops());
    }

    /// The most operations banked: as much of the link as the byte bank.
    fn bank_ops(&self) -> u64 {
        (self.bank_bytes / BYTES_PER_OP).max(1)
    }

    /// Adds what `elapsed` ns earn at `rate` to a balance capped at `cap`.
    fn earn(balance: &mut u64, rest: &mut u64, elapsed: u64, rate: u64, cap: u64) {
        // Beyond the time that fills the bank, time earns nothing: this bounds the
        // product (about cap * NS_PER_S).
        let fill_ns = (cap - *balance).saturating_mul(NS_PER_S) / rate + 1;
        let earned = elapsed.min(fill_ns) * rate + *rest;
        *rest = earned % NS_PER_S;
        *balance = (*balance + earned / NS_PER_S).min(cap);
        if *balance == cap {
            *rest = 0;
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let elapsed = now_ns.saturating_sub(self.at_ns);
        self.at_ns = self.at_ns.max(now_ns);
        if self.rate == 0 {
            return;
        }
        self.offered = self.offered.saturating_add(bytes_in(self.rate, elapsed));
        Self::earn(
            &mut self.bytes,
            &mut self.byte_rest,
            elapsed,
            self.rate,
            self.bank_bytes,
        );
        let bank_ops = self.bank_ops();
        Self::earn(
            &mut self.ops,
            &mut self.op_rest,
            elapsed,
            self.ops_rate.max(1),
            bank_ops,
        );
    }

    /// Takes `bytes` and one operation if the balances allow it at `now_ns`;
    /// otherwise returns the time at which they will (the caller's timer).
    ///
    /// A chunk larger than the bank is allowed once the bank is full and leaves a
    /// debt, which keeps the long-run rate exact for any chunk size.
    pub(crate) fn take(&mut self, bytes: u64, now_ns: u64) -> Result<(), u64> {
        if self.rate == 0 {
            return Ok(());
        }
        self.refill(now_ns);
        let need = bytes.min(self.bank_bytes);
        if self.bytes >= need && self.ops >= 1 {
            self.bytes -= need;
            self.ops -= 1;
            // The debt is paid by moving the bucket's clock on.
            let debt = bytes - need;
            if debt > 0 {
                self.at_ns += debt.saturating_mul(NS_PER_S) / self.rate;
            }
            return Ok(());
        }
        let wait = |have: u64, want: u64, rate: u64, rest: u64| {
            (want.saturating_sub(have) * NS_PER_S)
                .saturating_sub(rest)
                .div_ceil(rate.max(1))
        };
        let ns = wait(self.bytes, need, self.rate, self.byte_rest).max(wait(
            self.ops,
            1,
            self.ops_rate,
            self.op_rest,
        ));
        Err(self.at_ns.saturating_add(ns).max(now_ns + 1))
    }
}

/// Keeps `earn`'s products (bank * NS_PER_S) far below 64 bits.
const MAX_BANK_BYTES: u64 = 1 << 30;
/// 1 TB/s.
pub(crate) const MAX_RATE: u64 = 1 << 40;

#[cfg(test)]
mod tests {
    use super::super::sim::simulate;
    use super::super::{headroom, link_chunk};
    use super::*;

    #[test]
    fn rate_is_accurate_from_1_to_1000_flows() {
        let rate = 1_000_000_000;
        for &(n, chunk) in &[
            (1usize, 5 * 1024u64),
            (10, 5 * 1024),
            (100, 16 * 1024),
            (1000, 5 * 1024),
            (3, 1 << 20),
        ] {
            let weights = vec![1u32; n];
            let chunks = (n * 10).max(2000);
            let (sent, ns) = simulate(&weights, chunk, rate, chunks);
            let total: u64 = sent.iter().sum();
            let measured = total as f64 * 1e9 / ns as f64;
            let error = (measured / rate as f64 - 1.0).abs();
            assert!(
                error < 0.02,
                "{n} flows of {chunk} B chunks: {measured:.0} B/s, {:.2}% off",
                error * 100.0
            );
        }
    }

    #[test]
    fn fast_links_are_paced_exactly_too() {
        // 100 GB/s of 1 MB chunks, and 1 GB/s of 64-byte messages (ops-bound).
        for &(rate, chunk) in &[(100_000_000_000u64, 1u64 << 20), (1_000_000_000, 64)] {
            let (sent, ns) = simulate(&[1, 1], chunk, rate, 20_000);
            let measured = sent.iter().sum::<u64>() as f64 * 1e9 / ns as f64;
            let want = (rate as f64).min(rate as f64 / BYTES_PER_OP as f64 * chunk as f64);
            assert!(
                (measured / want - 1.0).abs() < 0.02,
                "{measured:.0} B/s, want {want:.0}"
            );
        }
    }

    #[test]
    fn the_bucket_never_busy_waits_it_names_the_time() {
        let mut b = TokenBucket::new(1_000_000, 0); // 1 MB/s
        let _ = b.take(b.bank_bytes, 0);
        let at = b.take(1000, 0).err().unwrap_or(0);
        // 1000 bytes at 1 MB/s: 1 ms.
        assert!((999_000..=1_001_000).contains(&at), "{at}");
        assert_eq!(b.take(1000, at), Ok(()));
        // Unlimited: always now.
        let mut free = TokenBucket::new(0, 0);
        assert_eq!(free.take(1 << 30, 0), Ok(()));
    }

    #[test]
    fn a_restart_banks_and_offers_nothing_for_the_time_before() {
        let ms = 1_000_000;
        let mut b = TokenBucket::new(1_000_000, 0); // 1 MB/s
        b.set_chunk(4096, 0);
        assert_eq!(b.banked(100 * ms), 8192, "a full bank after 100 ms");
        let offered = b.offered(100 * ms);
        b.restart(200 * ms);
        assert_eq!(b.offered(200 * ms), offered, "the time held is not offered");
        // The next chunk waits for its own time from the restart: 4096 B at 1 MB/s.
        assert_eq!(b.take(4096, 200 * ms), Err(200 * ms + 4_096_000));
        assert_eq!(b.take(4096, 200 * ms + 4_096_000), Ok(()));
        // A debt (the bucket's clock ahead of now) is kept.
        let _ = b.take(b.bank_bytes * 4, 400 * ms);
        let ahead = b.at_ns;
        b.restart(401 * ms);
        assert_eq!(b.at_ns, ahead.max(401 * ms));
    }

    #[test]
    fn a_bank_of_two_chunks_absorbs_late_takers() {
        // 32 KiB chunks at 16 MB/s, each taken 1 ms after the time the bucket named.
        let (rate, chunk, late) = (16_000_000u64, 32u64 << 10, 1_000_000u64);
        let mut b = TokenBucket::new(rate, 0);
        b.set_chunk(chunk, 0);
        let (mut now, mut sent) = (0u64, 0u64);
        while now < 1_000_000_000 {
            match b.take(chunk, now) {
                Ok(()) => sent += chunk,
                Err(at) => now = at + late,
            }
        }
        let achieved = sent as f64 * 1e9 / now as f64;
        assert!(
            achieved >= 0.97 * rate as f64,
            "{achieved:.0} B/s of {rate}"
        );
        // Small chunks, a small bank: no burst beyond two chunks.
        b.set_chunk(4096, now);
        assert_eq!(b.bank_bytes, 8192);
    }

    #[test]
    fn a_slow_link_gets_the_safe_util_it_is_given_from_late_takers() {
        // A 4 MiB/s link's chunks (4 KiB) at its headroom, each taken up to 1 ms
        // late (an emulated guest's timers): within 5 % of the rate.
        let rate = headroom(4 << 20);
        let chunk = link_chunk(4 << 20);
        let mut b = TokenBucket::new(rate, 0);
        b.set_chunk(chunk, 0);
        let (mut now, mut sent, mut seed) = (0u64, 0u64, 0x9e37_79b9_7f4a_7c15u64);
        while now < 10_000_000_000 {
            match b.take(chunk, now) {
                Ok(()) => sent += chunk,
                Err(at) => {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    now = at + seed % 1_000_000;
                }
            }
        }
        let achieved = sent as f64 * 1e9 / now as f64;
        assert!(
            achieved >= 0.95 * rate as f64,
            "{achieved:.0} B/s of {rate}"
        );
        assert!(
            achieved <= 1.01 * rate as f64,
            "{achieved:.0} B/s of {rate}"
        );
    }

    #[test]
    fn the_offered_bytes_follow_the_rate_in_force() {
        // 1 MB/s for 1.5 s in uneven steps, unlimited for 1 s, then 1 TB/s for 10 min.
        let mut b = TokenBucket::new(1_000_000, 0);
        let mut now = 0;
        for step in [1, 999_999, 7_000_001, 492_000_000, 1_000_000_000] {
            now += step;
            b.offered(now);
        }
        assert!(
            b.offered(now).abs_diff(1_500_000) <= 5,
            "{}",
            b.offered(now)
        );
        b.set_rate(0, now);
        now += 1_000_000_000;
        assert!(b.offered(now).abs_diff(1_500_000) <= 5);
        b.set_rate(MAX_RATE, now);
        let want = 1_500_000 + MAX_RATE * 600;
        assert!(b.offered(now + 600_000_000_000).abs_diff(want) <= 5);
    }

    #[test]
    fn an_idle_bucket_banks_as_many_operations_as_bytes() {
        // A flood of 8 B writes after a quiet spell bursts no more of the link
        // than a chunk-sized bulk flow could: two 4 KiB chunks' worth.
        let mut b = TokenBucket::new(1 << 20, 0);
        b.set_chunk(4096, 0);
        let later = 10_000_000_000;
        let mut burst = 0;
        while b.take(8, later).is_ok() {
            burst += 1;
        }
        assert_eq!(burst, 2 * 4096 / BYTES_PER_OP);
    }

    #[test]
    fn operations_are_limited_too() {
        // Tiny messages: the ops balance, not the bytes, sets the pace.
        let rate = 1 << 20;
        let ops_rate = rate / BYTES_PER_OP;
        let mut b = TokenBucket::new(rate, 0);
        let (mut now, mut sent) = (0u64, 0u64);
        while now < 1_000_000_000 {
            match b.take(1, now) {
                Ok(()) => sent += 1,
                Err(at) => now = at,
            }
        }
        // The bucket starts empty: one second earns exactly the ops rate.
        let expect = ops_rate;
        assert!(
            (sent as f64 / expect as f64 - 1.0).abs() < 0.02,
            "{sent} ops, want about {expect}"
        );
    }
}
