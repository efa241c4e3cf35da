// SPDX-License-Identifier: GPL-2.0
//! The link's rate as this node finds it: the rate its bytes are acknowledged at
//! while it has more to send than one work request.

use super::per_second;

/// The link's rate as this node finds it: the best rate at which the bytes of its
/// backlogged transfers (those of more than one work request) were acknowledged,
/// over `RATE_INTERVAL_NS` of the time such transfers were in progress.
///
/// Only backlogged time counts, as BBR leaves out app-limited samples: a node whose
/// first traffic was latency-class operations of 16 bytes, or a flood of 8-byte
/// writes, found the rate of those (0.06 MB/s) and held later bulk transfers below
/// it while latency traffic stayed active. Paced intervals never raise it (they run
/// below it); an unpaced backlogged interval, at the bottleneck's rate, sets it.
/// Intervals are long because transfers learn of their completions a work request
/// late: the lag (a few 32 KiB requests per transfer) must be small against an
/// interval's bytes.
pub(crate) struct DeliveryRate {
    /// Backlogged transfers in progress, and since when there were any.
    backlogged: u32,
    since_ns: u64,
    /// The interval so far: its backlogged time before `since_ns`, and its bytes.
    busy_ns: u64,
    bytes: u64,
    best: u64,
}

pub(crate) const RATE_INTERVAL_NS: u64 = 2_000_000_000;

/// The rate (bytes/s) a port signals at, from `ib_port_attr`'s `active_speed`
/// (`IB_SPEED_*`, per lane) and `active_width` (`IB_WIDTH_*`); None for values
/// this table does not know. What a node assumes until it finds its link: the
/// bottleneck is often the port itself, and a guess below it held a paced node
/// there (paced intervals never raise the found rate).
pub(crate) fn port_rate(speed: u32, width: u32) -> Option<u64> {
    let lane_mbit: u64 = match speed {
        1 => 2_500,
        2 => 5_000,
        4 | 8 => 10_000,
        16 => 14_000,
        32 => 25_000,
        64 => 50_000,
        128 => 100_000,
        256 => 200_000,
        _ => return None,
    };
    let lanes: u64 = match width {
        1 => 1,
        16 => 2,
        2 => 4,
        4 => 8,
        8 => 12,
        _ => return None,
    };
    Some(lane_mbit * lanes * 1_000_000 / 8)
}

impl DeliveryRate {
    pub(crate) fn new() -> Self {
        DeliveryRate {
            backlogged: 0,
            since_ns: 0,
            busy_ns: 0,
            bytes: 0,
            best: 0,
        }
    }

    /// Bytes/s found so far; 0 before the first interval.
    pub(crate) fn found(&self) -> u64 {
        self.best
    }

    /// A transfer became backlogged (it posted its second work request).
    pub(crate) fn backlog_begins(&mut self, now_ns: u64) {
        if self.backlogged == 0 {
            self.since_ns = now_ns;
        }
        self.backlogged = self.backlogged.saturating_add(1);
    }

    /// A backlogged transfer ended; true when the found rate rose.
    pub(crate) fn backlog_ends(&mut self, now_ns: u64) -> bool {
        if self.backlogged == 0 {
            return false;
        }
        self.backlogged -= 1;
        if self.backlogged == 0 {
            self.busy_ns = self
                .busy_ns
                .saturating_add(now_ns.saturating_sub(self.since_ns));
        }
        self.judge(now_ns)
    }

    /// `bytes` of a backlogged transfer were acknowledged by `now_ns` (bytes while
    /// none is in progress do not count); true when the found rate rose.
    pub(crate) fn delivered(&mut self, bytes: u64, now_ns: u64) -> bool {
        if self.backlogged == 0 {
            return false;
        }
        self.bytes = self.bytes.saturating_add(bytes);
        self.judge(now_ns)
    }

    /// Ends the interval once it has `RATE_INTERVAL_NS` of backlogged time.
    fn judge(&mut self, now_ns: u64) -> bool {
        let running = if self.backlogged > 0 {
            now_ns.saturating_sub(self.since_ns)
        } else {
            0
        };
        let busy = self.busy_ns.saturating_add(running);
        if busy < RATE_INTERVAL_NS {
            return false;
        }
        let rate = per_second(self.bytes, busy);
        (self.busy_ns, self.bytes, self.since_ns) = (0, 0, now_ns);
        if rate > self.best {
            self.best = rate;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// One backlogged transfer of `lumps` 32 KiB lumps at `rate` from `now`.
    fn transfer(d: &mut DeliveryRate, now: &mut u64, lumps: u32, rate: u64) -> u32 {
        let lump = 32u64 << 10;
        let mut rose = 0;
        d.backlog_begins(*now);
        for _ in 0..lumps {
            *now += lump * 1_000_000_000 / rate;
            rose += d.delivered(lump, *now) as u32;
        }
        rose + d.backlog_ends(*now) as u32
    }

    #[test]
    fn the_delivery_rate_finds_the_bottleneck_and_paced_intervals_keep_it() {
        let mut d = DeliveryRate::new();
        assert_eq!(d.found(), 0);
        // 4 MB/s delivered in 32 KiB lumps: found after the first interval.
        let mut now = 0;
        let rose = transfer(&mut d, &mut now, 400, 4_000_000);
        let found = d.found() as f64;
        assert!((found / 4e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
        assert!(rose >= 1);
        // Paced at 2 MB/s: the link's rate stays what it was.
        transfer(&mut d, &mut now, 400, 2_000_000);
        assert_eq!(d.found() as f64, found);
    }

    #[test]
    fn port_rates_are_lanes_times_their_speed() {
        // Soft-RoCE on a NIC of unknown speed reports SDR 1X: 2.5 Gbit/s.
        assert_eq!(port_rate(1, 1), Some(312_500_000));
        // EDR 4X (100 Gbit/s), NDR 4X (400), HDR 2X (100).
        assert_eq!(port_rate(32, 2), Some(12_500_000_000));
        assert_eq!(port_rate(128, 2), Some(50_000_000_000));
        assert_eq!(port_rate(64, 16), Some(12_500_000_000));
        assert_eq!(port_rate(3, 1), None);
        assert_eq!(port_rate(1, 3), None);
    }

    #[test]
    fn idle_time_between_backlogged_transfers_does_not_count() {
        let mut d = DeliveryRate::new();
        let mut now = 0;
        // 1 MiB transfers at 4 MB/s, each followed by a second of nothing.
        for _ in 0..8 {
            transfer(&mut d, &mut now, 32, 4_000_000);
            now += 1000 * MS;
        }
        let found = d.found() as f64;
        assert!((found / 4e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
    }

    #[test]
    fn bytes_outside_backlogged_transfers_find_nothing() {
        let mut d = DeliveryRate::new();
        // A flood of single work requests: 8 bytes every 100 us for 10 s.
        for i in 1..=100_000u64 {
            d.delivered(8, i * 100_000);
        }
        assert_eq!(d.found(), 0);
        // Two overlapping transfers count their time once.
        let mut now = 20_000 * MS;
        d.backlog_begins(now);
        d.backlog_begins(now);
        for _ in 0..250 {
            now += 8 * MS;
            d.delivered(32 << 10, now);
        }
        d.backlog_ends(now);
        d.backlog_ends(now);
        let found = d.found() as f64;
        assert!((found / 4.096e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
        // An end without a beginning changes nothing.
        assert!(!d.backlog_ends(now + MS));
    }
}
