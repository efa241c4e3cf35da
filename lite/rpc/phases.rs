// SPDX-License-Identifier: GPL-2.0
//! Where a call's time goes: the moments a call to another node passed, and the
//! node's sums of its phases (`LiteCallPhases`), user-space callers' apart from
//! the kernel's own, so that the two paths can be compared phase by phase.

use crate::uapi::LiteCallPhases;

/// Who made a call: the index of its sums in `LiteRpcStat::call_phases`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Caller {
    User = 0,
    Kernel = 1,
}

/// The moments (ns) a call reached the end of each phase before it was posted.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct CallStamps {
    pub(crate) entry: u64,
    pub(crate) pinned: u64,
    pub(crate) registered: u64,
    pub(crate) ready: u64,
}

impl CallStamps {
    /// Adds a call answered with these stamps, whose reply was handled, whose
    /// result was in the caller's slot and whose key and pages were let go at
    /// `[handled, published, released]`.
    pub(crate) fn add_to(
        &self,
        total: &mut LiteCallPhases,
        [handled, published, released]: [u64; 3],
    ) {
        let span = |from: u64, to: u64| to.saturating_sub(from);
        total.calls = total.calls.wrapping_add(1);
        total.pin_ns = total.pin_ns.wrapping_add(span(self.entry, self.pinned));
        total.register_ns = total
            .register_ns
            .wrapping_add(span(self.pinned, self.registered));
        total.stage_ns = total
            .stage_ns
            .wrapping_add(span(self.registered, self.ready));
        total.round_trip_ns = total.round_trip_ns.wrapping_add(span(self.ready, handled));
        total.publish_ns = total.publish_ns.wrapping_add(span(handled, published));
        total.release_ns = total.release_ns.wrapping_add(span(published, released));
    }
}

/// Adds a caller that slept in the kernel and ran again `ns` after its result
/// was published.
pub(crate) fn add_wakeup(total: &mut LiteCallPhases, ns: u64) {
    total.woken = total.woken.wrapping_add(1);
    total.wakeup_ns = total.wakeup_ns.wrapping_add(ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_is_the_span_between_two_stamps() {
        let stamps = CallStamps {
            entry: 100,
            pinned: 130,
            registered: 180,
            ready: 200,
        };
        let mut total = LiteCallPhases::default();
        stamps.add_to(&mut total, [1_200, 1_210, 1_500]);
        stamps.add_to(&mut total, [1_000, 1_050, 1_060]);
        add_wakeup(&mut total, 40);
        assert_eq!(
            (total.calls, total.pin_ns, total.register_ns, total.stage_ns),
            (2, 60, 100, 40)
        );
        assert_eq!((total.round_trip_ns, total.publish_ns), (1_800, 60));
        assert_eq!(total.release_ns, 300);
        assert_eq!((total.woken, total.wakeup_ns), (1, 40));
    }
}
