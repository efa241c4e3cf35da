// SPDX-License-Identifier: GPL-2.0
//! How long a paced work request holds its place, from post to completion: what
//! the node's paced window must cover to deliver SafeUtil (Little's law).

/// Interval means are taken over at least this long ...
const HOLD_INTERVAL_NS: u64 = 250_000_000;
/// ... and at least this many work requests.
const HOLD_MIN_WRS: u64 = 4;
/// The least of this many recent interval means is the hold (2 s): the least, as
/// BBR takes the least round trip, because a queue at the bottleneck lengthens the
/// hold, and a window grown with it would keep that queue.
const HOLD_INTERVALS: usize = 8;

/// The device's totals, and the recent intervals' mean holds, for one chunk size.
pub(crate) struct PlaceHold {
    /// Which device's totals `held_ns` and `wrs` are (0: none yet).
    device: usize,
    chunk: u64,
    from_ns: u64,
    held_ns: u64,
    wrs: u64,
    /// Mean hold of each recent interval (0: none), `next` the oldest.
    recent: [u64; HOLD_INTERVALS],
    next: usize,
}

impl PlaceHold {
    pub(crate) fn new() -> Self {
        PlaceHold {
            device: 0,
            chunk: 0,
            from_ns: 0,
            held_ns: 0,
            wrs: 0,
            recent: [0; HOLD_INTERVALS],
            next: 0,
        }
    }

    /// The least recent mean hold of a `chunk`-byte work request (ns), if known.
    pub(crate) fn hold_ns(&self, chunk: u64) -> Option<u64> {
        if chunk != self.chunk {
            return None;
        }
        self.recent.iter().copied().filter(|&h| h > 0).min()
    }

    /// A `chunk`-byte paced work request goes through device `device` at `now_ns`;
    /// `totals` reads that device's places held over time (ns) and given back, which
    /// only the start and the end of an interval need (every paced work request
    /// comes here). Another device's totals, or another chunk size, start afresh:
    /// their differences mean nothing.
    pub(crate) fn sample(
        &mut self,
        device: usize,
        chunk: u64,
        now_ns: u64,
        totals: impl FnOnce() -> (u64, u64),
    ) {
        let restart = device != self.device || chunk != self.chunk;
        if !restart && now_ns.saturating_sub(self.from_ns) < HOLD_INTERVAL_NS {
            return;
        }
        let (held_ns, wrs) = totals();
        if restart || wrs < self.wrs {
            if chunk != self.chunk {
                self.recent = [0; HOLD_INTERVALS];
            }
            (self.device, self.chunk) = (device, chunk);
            (self.from_ns, self.held_ns, self.wrs) = (now_ns, held_ns, wrs);
            return;
        }
        let done = wrs - self.wrs;
        if done < HOLD_MIN_WRS {
            return;
        }
        self.recent[self.next] = held_ns.wrapping_sub(self.held_ns) / done;
        self.next = (self.next + 1) % HOLD_INTERVALS;
        (self.from_ns, self.held_ns, self.wrs) = (now_ns, held_ns, wrs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const KIB: u64 = 1 << 10;

    /// Feeds `intervals` intervals of 20 work requests held `hold` each.
    fn run(h: &mut PlaceHold, chunk: u64, hold: u64, intervals: u64, at: &mut (u64, u64, u64)) {
        for _ in 0..intervals {
            let (now, held, wrs) = at;
            *now += HOLD_INTERVAL_NS;
            *held += 20 * hold;
            *wrs += 20;
            h.sample(1, chunk, *now, || (*held, *wrs));
        }
    }

    #[test]
    fn the_hold_is_the_least_recent_mean_and_a_queue_does_not_raise_it() {
        let mut h = PlaceHold::new();
        let mut at = (0, 0, 0);
        h.sample(1, 16 * KIB, 0, || (0, 0));
        assert_eq!(h.hold_ns(16 * KIB), None);
        run(&mut h, 16 * KIB, 13 * MS, 3, &mut at);
        assert_eq!(h.hold_ns(16 * KIB), Some(13 * MS));
        // A queue lengthens the holds: the window does not follow while the short
        // ones are recent ...
        run(&mut h, 16 * KIB, 30 * MS, 5, &mut at);
        assert_eq!(h.hold_ns(16 * KIB), Some(13 * MS));
        // ... and does once they are 2 s old.
        run(&mut h, 16 * KIB, 30 * MS, 3, &mut at);
        assert_eq!(h.hold_ns(16 * KIB), Some(30 * MS));
        run(&mut h, 16 * KIB, 11 * MS, 1, &mut at);
        assert_eq!(h.hold_ns(16 * KIB), Some(11 * MS));
    }

    #[test]
    fn intervals_need_time_and_work_requests() {
        let mut h = PlaceHold::new();
        h.sample(1, 16 * KIB, 0, || (0, 0));
        // Plenty of work requests, too soon; then late, too few.
        h.sample(1, 16 * KIB, HOLD_INTERVAL_NS / 2, || (100 * MS, 10));
        h.sample(1, 16 * KIB, HOLD_INTERVAL_NS, || (100 * MS, 3));
        assert_eq!(h.hold_ns(16 * KIB), None);
        h.sample(1, 16 * KIB, HOLD_INTERVAL_NS, || (120 * MS, 12));
        assert_eq!(h.hold_ns(16 * KIB), Some(10 * MS));
    }

    #[test]
    fn another_chunk_size_or_device_starts_afresh() {
        let mut h = PlaceHold::new();
        let mut at = (0, 0, 0);
        h.sample(1, 16 * KIB, 0, || (0, 0));
        run(&mut h, 16 * KIB, 13 * MS, 2, &mut at);
        // 32 KiB work requests take longer: what 16 KiB ones took says nothing.
        assert_eq!(h.hold_ns(32 * KIB), None);
        h.sample(1, 32 * KIB, at.0, || (at.1, at.2));
        assert_eq!(h.hold_ns(16 * KIB), None);
        run(&mut h, 32 * KIB, 18 * MS, 1, &mut at);
        assert_eq!(h.hold_ns(32 * KIB), Some(18 * MS));
        // Another device's totals are not differences of these.
        h.sample(2, 32 * KIB, at.0 + HOLD_INTERVAL_NS, || (5, 1));
        assert_eq!(h.hold_ns(32 * KIB), Some(18 * MS));
        h.sample(2, 32 * KIB, at.0 + 2 * HOLD_INTERVAL_NS, || {
            (5 + 40 * MS, 5)
        });
        assert_eq!(h.hold_ns(32 * KIB), Some(10 * MS));
    }
}
