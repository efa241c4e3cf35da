// SPDX-License-Identifier: GPL-2.0
//! Where a small LT_read's time goes: the moments one user-space read from another
//! node passed, and the node's sums of its phases (`LiteMemStat::read_phases`), so
//! that the module's share can be told from the provider's.

use crate::uapi::LiteReadPhases;

/// The moments (ns) one read passed, from the module's entry to its return.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct ReadStamps {
    pub(crate) entry: u64,
    /// Its buffer was ready: a staging page taken, or its pages pinned.
    pub(crate) ready: u64,
    /// Its work request went to the provider, and came back posted.
    pub(crate) post: u64,
    pub(crate) posted: u64,
    /// The completion's handler ran.
    pub(crate) handled: u64,
    /// The reader ran again after its wait.
    pub(crate) running: u64,
    pub(crate) returned: u64,
    /// The reader slept before the completion came.
    pub(crate) slept: bool,
}

impl ReadStamps {
    /// Adds this read to `total`.
    pub(crate) fn add_to(&self, total: &mut LiteReadPhases) {
        let span = |from: u64, to: u64| to.saturating_sub(from);
        total.reads = total.reads.wrapping_add(1);
        total.pin_ns = total.pin_ns.wrapping_add(span(self.entry, self.ready));
        total.prepare_ns = total.prepare_ns.wrapping_add(span(self.ready, self.post));
        total.post_ns = total.post_ns.wrapping_add(span(self.post, self.posted));
        total.wire_ns = total.wire_ns.wrapping_add(span(self.posted, self.handled));
        total.notice_ns = total
            .notice_ns
            .wrapping_add(span(self.handled, self.running));
        total.finish_ns = total
            .finish_ns
            .wrapping_add(span(self.running, self.returned));
        total.slept = total.slept.wrapping_add(u64::from(self.slept));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_is_the_span_between_two_stamps() {
        let read = ReadStamps {
            entry: 100,
            ready: 110,
            post: 130,
            posted: 150,
            handled: 1_150,
            running: 1_160,
            returned: 1_170,
            slept: false,
        };
        let mut total = LiteReadPhases::default();
        read.add_to(&mut total);
        read.add_to(&mut total);
        assert_eq!(
            (total.reads, total.pin_ns, total.prepare_ns, total.post_ns),
            (2, 20, 40, 40)
        );
        assert_eq!(
            (total.wire_ns, total.notice_ns, total.finish_ns, total.slept),
            (2_000, 20, 20, 0)
        );
    }

    #[test]
    fn a_completion_handled_before_the_post_returned_counts_no_wire_time() {
        // The poller may run the handler before the provider's post returned.
        let read = ReadStamps {
            entry: 0,
            ready: 5,
            post: 10,
            posted: 40,
            handled: 30,
            running: 45,
            returned: 50,
            slept: true,
        };
        let mut total = LiteReadPhases::default();
        read.add_to(&mut total);
        assert_eq!((total.wire_ns, total.notice_ns, total.slept), (0, 15, 1));
    }
}
