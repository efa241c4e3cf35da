// SPDX-License-Identifier: GPL-2.0
//! The link's rate as this node finds it: the rate its bytes are acknowledged at
//! while it has more to send than one work request.

use super::per_second;

/// The link's rate as this node finds it: the best rate at which its device
/// delivered bytes over `RATE_INTERVAL_NS` of the time it had backlogged transfers
/// (those of more than one work request) in progress.
///
/// Only backlogged time counts, as BBR leaves out app-limited samples: a node whose
/// first traffic was latency-class operations of 16 bytes, or a flood of 8-byte
/// writes, found the rate of those (0.06 MB/s) and held later bulk transfers below
/// it while latency traffic stayed active. Paced intervals never raise it (they run
/// below it); an unpaced backlogged interval, at the bottleneck's rate, sets it.
///
/// Bytes count when their completions run (the device's `Delivered` count), not
/// when their transfers learn of them: a transfer learns a few work requests late,
/// and 32 transfers at once, each with 128 KiB of completions unseen, put several
/// MiB of earlier bytes into a 2 MB interval and found a 1.03 MB/s link at 1.31.
pub(crate) struct DeliveryRate {
    /// Backlogged transfers in progress, and since when there were any.
    backlogged: u32,
    since_ns: u64,
    /// The device's count when they began (or the interval did, if later).
    since: Delivered,
    /// The interval so far: its backlogged time before `since_ns`, and the bytes
    /// delivered in that time.
    busy_ns: u64,
    bytes: u64,
    best: u64,
}

/// A device's count of the bytes it delivered (of RDMA reads and writes completed
/// without error), and which device's it is: counts of two devices do not subtract.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivered {
    pub(crate) device: usize,
    pub(crate) bytes: u64,
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
            since: Delivered {
                device: 0,
                bytes: 0,
            },
            busy_ns: 0,
            bytes: 0,
            best: 0,
        }
    }

    /// Bytes/s found so far; 0 before the first interval.
    pub(crate) fn found(&self) -> u64 {
        self.best
    }

    /// A transfer became backlogged (it posted its second work request) at
    /// `now_ns`, when its device had delivered `count`.
    pub(crate) fn backlog_begins(&mut self, now_ns: u64, count: Delivered) {
        if self.backlogged == 0 {
            (self.since_ns, self.since) = (now_ns, count);
        } else if count.device != self.since.device {
            self.restart(now_ns, count);
        }
        self.backlogged = self.backlogged.saturating_add(1);
    }

    /// A backlogged transfer ended; true when the found rate rose.
    pub(crate) fn backlog_ends(&mut self, now_ns: u64, count: Delivered) -> bool {
        if self.backlogged == 0 {
            return false;
        }
        let rose = self.progress(now_ns, count);
        self.backlogged -= 1;
        if self.backlogged == 0 {
            self.busy_ns = self
                .busy_ns
                .saturating_add(now_ns.saturating_sub(self.since_ns));
            self.bytes = self
                .bytes
                .saturating_add(count.bytes.saturating_sub(self.since.bytes));
        }
        rose
    }

    /// The device had delivered `count` by `now_ns` (nothing counts while no
    /// backlogged transfer is in progress); true when the found rate rose.
    pub(crate) fn progress(&mut self, now_ns: u64, count: Delivered) -> bool {
        if self.backlogged == 0 {
            return false;
        }
        if count.device != self.since.device || count.bytes < self.since.bytes {
            self.restart(now_ns, count);
            return false;
        }
        let busy = self
            .busy_ns
            .saturating_add(now_ns.saturating_sub(self.since_ns));
        if busy < RATE_INTERVAL_NS {
            return false;
        }
        let bytes = self.bytes.saturating_add(count.bytes - self.since.bytes);
        let rate = per_second(bytes, busy);
        self.restart(now_ns, count);
        if rate > self.best {
            self.best = rate;
            return true;
        }
        false
    }

    /// A new interval starts at `now_ns`, from `count`.
    fn restart(&mut self, now_ns: u64, count: Delivered) {
        (self.busy_ns, self.bytes, self.since_ns, self.since) = (0, 0, now_ns, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A device's count, delivering in lumps at a rate.
    struct Device {
        count: Delivered,
    }

    impl Device {
        fn new(key: usize) -> Self {
            Device {
                count: Delivered {
                    device: key,
                    bytes: 0,
                },
            }
        }

        /// Delivers `bytes` at `rate` from `now`: the time they take passes.
        fn deliver(&mut self, now: &mut u64, bytes: u64, rate: u64) -> Delivered {
            *now += bytes * 1_000_000_000 / rate;
            self.count.bytes += bytes;
            self.count
        }
    }

    /// One backlogged transfer of `lumps` 32 KiB lumps at `rate` from `now`,
    /// looking at the count after each; how often the found rate rose.
    fn transfer(
        d: &mut DeliveryRate,
        dev: &mut Device,
        now: &mut u64,
        lumps: u32,
        rate: u64,
    ) -> u32 {
        let mut rose = 0;
        d.backlog_begins(*now, dev.count);
        for _ in 0..lumps {
            let count = dev.deliver(now, 32 << 10, rate);
            rose += d.progress(*now, count) as u32;
        }
        rose + d.backlog_ends(*now, dev.count) as u32
    }

    #[test]
    fn the_delivery_rate_finds_the_bottleneck_and_paced_intervals_keep_it() {
        let mut d = DeliveryRate::new();
        let mut dev = Device::new(1);
        assert_eq!(d.found(), 0);
        // 4 MB/s delivered in 32 KiB lumps: found after the first interval.
        let mut now = 0;
        let rose = transfer(&mut d, &mut dev, &mut now, 400, 4_000_000);
        let found = d.found() as f64;
        assert!((found / 4e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
        assert!(rose >= 1);
        // Paced at 2 MB/s: the link's rate stays what it was.
        transfer(&mut d, &mut dev, &mut now, 400, 2_000_000);
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
        let mut dev = Device::new(1);
        let mut now = 0;
        // 1 MiB transfers at 4 MB/s, each followed by a second of nothing.
        for _ in 0..8 {
            transfer(&mut d, &mut dev, &mut now, 32, 4_000_000);
            now += 1000 * MS;
        }
        let found = d.found() as f64;
        assert!((found / 4e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
    }

    #[test]
    fn bytes_outside_backlogged_transfers_find_nothing() {
        let mut d = DeliveryRate::new();
        let mut dev = Device::new(1);
        // A flood of single work requests: 8 bytes every 100 us for 10 s.
        let mut now = 0;
        for _ in 0..100_000 {
            let count = dev.deliver(&mut now, 8, 80_000);
            d.progress(now, count);
        }
        assert_eq!(d.found(), 0);
        // Two overlapping transfers count their time once.
        d.backlog_begins(now, dev.count);
        d.backlog_begins(now, dev.count);
        for _ in 0..250 {
            let count = dev.deliver(&mut now, 32 << 10, 4_096_000);
            d.progress(now, count);
        }
        d.backlog_ends(now, dev.count);
        d.backlog_ends(now, dev.count);
        let found = d.found() as f64;
        assert!((found / 4.096e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
        // An end without a beginning changes nothing.
        assert!(!d.backlog_ends(now + MS, dev.count));
    }

    /// 32 transfers of 1 MiB at once share a 1 MB/s link, 32 KiB work requests
    /// round robin, and each looks at the count only when it posts its next
    /// requests, four at a time, and when it ends, as 32 unpaced bulk processes
    /// do; a new one starts as each ends. Bytes count when delivered, so however
    /// late the transfers look, the rate found is the link's.
    #[test]
    fn many_transfers_that_look_late_find_the_link() {
        let mut d = DeliveryRate::new();
        let mut dev = Device::new(1);
        let mut now = 0;
        let mut left = [32u32; 32];
        for _ in 0..32 {
            d.backlog_begins(now, dev.count);
        }
        for wr in 0..32 * 32 * 4 {
            let t = wr % 32;
            let count = dev.deliver(&mut now, 32 << 10, 1_000_000);
            left[t] -= 1;
            if left[t] == 0 {
                d.backlog_ends(now, count);
                d.backlog_begins(now, count);
                left[t] = 32;
            } else if left[t] % 4 == 0 {
                d.progress(now, count);
            }
        }
        let found = d.found() as f64;
        assert!((found / 1e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
    }

    #[test]
    fn another_devices_count_starts_a_new_interval() {
        let mut d = DeliveryRate::new();
        let (mut one, mut two) = (Device::new(1), Device::new(2));
        let mut now = 0;
        // Device 2 counted far more before: none of it is this interval's.
        two.count.bytes = 1 << 40;
        d.backlog_begins(now, one.count);
        for _ in 0..100 {
            one.deliver(&mut now, 32 << 10, 2_000_000);
        }
        d.backlog_begins(now, two.count);
        for _ in 0..200 {
            let count = two.deliver(&mut now, 32 << 10, 2_000_000);
            d.progress(now, count);
        }
        let found = d.found() as f64;
        assert!((found / 2e6 - 1.0).abs() < 0.02, "{found:.0} B/s");
    }
}
