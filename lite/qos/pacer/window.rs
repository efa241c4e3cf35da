// SPDX-License-Identifier: GPL-2.0
//! The node's paced window: how many bytes of paced work requests may be in flight
//! from this node, how many work requests that makes, and each transfer's share.
//!
//! Paced bytes in flight sit in the bottleneck's queue in front of the latency
//! class whenever SafeUtil exceeds what the link passes, so the window is small:
//! what SafeUtil carries in two holds of a place by a paced work request (post to
//! completion, `PlaceHold`), in whole chunks, and two chunks at the least (one in
//! flight while the next is admitted). One hold is the least that can deliver
//! SafeUtil (Little's law), and the second covers the tasks' late wakeups, as BBR
//! keeps twice the bandwidth-delay product in flight while it paces: a fixed 10 ms
//! window held two transfers to one 16 KiB chunk each, which took 13 ms to
//! complete on the emulated cluster, and they got 88 % of SafeUtil; 5/4 of a hold,
//! 91-92 %; two holds, 98-99 %.
//! It bounds the node's paced work requests together, not one transfer's: each transfer may post
//! at least a chunk, so per-transfer shares alone let 32 bulk processes keep 32
//! chunks (1 MiB, 280 ms of a 3.6 MB/s wire) at the bottleneck.

use super::bytes_in;

/// The window's time until a hold was measured (about two emulated round trips).
pub(crate) const WINDOW_NS: u64 = 10_000_000;
/// The window's time at most, however long the holds: a window is queue at the
/// bottleneck whenever SafeUtil overshoots the link (twice the latency class's
/// median round trip raised its p50 beside bulk from 12 to 21 ms).
const MAX_WINDOW_NS: u64 = 4 * WINDOW_NS;

/// Paced bytes the node may have in flight at SafeUtil `rate` with `chunk`-byte
/// work requests that each hold their place for `hold_ns` (None: not measured
/// yet): what SafeUtil carries in two holds, rounded up to whole chunks
/// (rounded down, two 16 KiB chunks carried 2.6 of a 3.3 MB/s SafeUtil through a
/// 4 MiB/s wire), and two chunks at the least.
pub(crate) fn paced_window(rate: u64, chunk: u64, hold_ns: Option<u64>) -> u64 {
    let ns = hold_ns.map_or(WINDOW_NS, |hold| hold.saturating_mul(2).min(MAX_WINDOW_NS));
    whole_chunks(bytes_in(rate, ns), chunk, 2)
}

/// `bytes` rounded up to whole `chunk`s, and `at_least` of them.
fn whole_chunks(bytes: u64, chunk: u64, at_least: u64) -> u64 {
    let chunk = chunk.max(1);
    bytes.div_ceil(chunk).max(at_least).saturating_mul(chunk)
}

/// Paced work requests the node may have in flight, whichever transfers they
/// belong to: the window in chunks, at least one.
pub(crate) fn paced_places(window: u64, chunk: u64) -> u32 {
    (window / chunk.max(1)).clamp(1, u64::from(u32::MAX)) as u32
}

/// Bytes one of `flows` paced transfers may have in flight: its share of the
/// window rounded up to whole chunks (its work requests are no smaller), so that
/// together they can fill the places: two transfers rounded down to one 16 KiB
/// chunk each left the third of three places empty. The device bounds the sum.
pub(crate) fn transfer_share(window: u64, flows: u64, chunk: u64) -> u64 {
    whole_chunks(window / flows.max(1), chunk, 1)
}

#[cfg(test)]
mod tests {
    use super::super::MAX_RATE;
    use super::*;

    const KIB: u64 = 1 << 10;

    #[test]
    fn a_slow_link_gets_two_chunks_whatever_the_flows() {
        // 3.5 MB/s carries 35 KB in 10 ms: the two-chunk floor decides.
        let window = paced_window(3_500_000, 32 * KIB, None);
        assert_eq!(window, 64 * KIB);
        assert_eq!(paced_places(window, 32 * KIB), 2);
        // 32 transfers: each may post its chunk, but the node holds two at a time.
        assert_eq!(transfer_share(window, 32, 32 * KIB), 32 * KIB);
        assert_eq!(transfer_share(window, 2, 32 * KIB), 32 * KIB);
        assert_eq!(transfer_share(window, 1, 32 * KIB), 64 * KIB);
    }

    #[test]
    fn a_fast_link_gets_what_safe_util_carries() {
        // 1 GB/s carries 10 MB in 10 ms: 306 chunks of 32 KiB; 4 transfers may take 77 each.
        let window = paced_window(1_000_000_000, 32 * KIB, None);
        assert_eq!(window, 306 * 32 * KIB);
        assert_eq!(paced_places(window, 32 * KIB), 306);
        assert_eq!(transfer_share(window, 4, 32 * KIB), 77 * 32 * KIB);
    }

    #[test]
    fn the_window_rounds_up_to_whole_chunks() {
        // 3.3 MB/s carries 33 KB in 10 ms: three chunks of 16 KiB, not two.
        let window = paced_window(3_300_000, 16 * KIB, None);
        assert_eq!(window, 48 * KIB);
        assert_eq!(paced_places(window, 16 * KIB), 3);
        // Two transfers may take two each, so together they fill the three places.
        assert_eq!(transfer_share(window, 2, 16 * KIB), 32 * KIB);
    }

    #[test]
    fn the_window_covers_what_safe_util_carries_in_a_hold() {
        const MS: u64 = 1_000_000;
        // 2.4 MB/s, 16 KiB chunks held 13 ms: 62.4 KB, four chunks (ten ms: two).
        let window = paced_window(2_400_000, 16 * KIB, Some(13 * MS));
        assert_eq!(paced_places(window, 16 * KIB), 4);
        assert_eq!(transfer_share(window, 2, 16 * KIB), 32 * KIB);
        // A real RNIC: 5 GB/s, 32 KiB chunks held 20 us, 200 KB: seven chunks.
        assert_eq!(
            paced_window(5_000_000_000, 32 * KIB, Some(20_000)),
            7 * 32 * KIB
        );
        // Holds of a second are capped at 40 ms: 160 KB at 4 MB/s.
        let capped = paced_window(4_000_000, 16 * KIB, Some(1000 * MS));
        assert_eq!(capped, 10 * 16 * KIB);
        assert_eq!(paced_window(u64::MAX, 1, Some(u64::MAX)), MAX_RATE / 25);
    }

    #[test]
    fn degenerate_settings_still_let_one_request_go() {
        assert_eq!(paced_places(0, 0), 1);
        assert_eq!(paced_places(paced_window(0, 1, None), 1), 2);
        assert_eq!(transfer_share(0, 0, 4 * KIB), 4 * KIB);
        assert_eq!(paced_places(u64::MAX, 1), u32::MAX);
    }
}
