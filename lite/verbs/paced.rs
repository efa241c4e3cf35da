// SPDX-License-Identifier: GPL-2.0
//! `PacedPlace`: one of the places a device gives its paced work requests.
//!
//! SW-Pri bounds the node's paced bytes in flight, not each transfer's: with one
//! place per transfer, 32 bulk processes kept 32 chunks (1 MiB, 280 ms of a
//! 3.6 MB/s wire) at the bottleneck. A transfer learns its own completions only
//! when it next waits, so the count lives with the device and each completion
//! gives its place back, whichever transfer it belongs to.
//!
//! `Pacing`: how a work request stands to pacing. The device also counts its
//! unpaced bulk bytes in flight, and no paced work request takes a place while
//! any is, unless none moved for 500 ms (a dead peer's drain only when flushed,
//! seconds later): when pacing begins they are a queue at the bottleneck, which
//! then drains at the link's whole rate rather than at what SafeUtil leaves of it.
//! Admission (`qos/admission.rs`) holds the flow picked meanwhile, before it takes
//! tokens: tokens taken during the drain were work requests that then went at
//! once, as fast as places came back, a queue of their own.

use super::Device;
use kernel::error::to_result;
use kernel::prelude::*;

/// A place among the device's paced work requests in flight, taken and not yet
/// handed to a work request: dropping it gives it back.
pub(crate) struct PacedPlace<'a> {
    dev: &'a Device,
}

impl Device {
    /// Waits, for at most `timeout_ns`, until fewer than `limit` paced work requests
    /// are in flight from this device, and takes a place among them. ETIMEDOUT when
    /// the time ran out, EINTR when the task is killed meanwhile.
    pub(crate) fn enter_paced(&self, limit: u32, timeout_ns: u64) -> Result<PacedPlace<'_>> {
        // SAFETY: `self.raw` is valid for the life of `self`.
        to_result(unsafe { crate::ffi::lite_paced_enter(self.raw.as_ptr(), limit, timeout_ns) })?;
        Ok(PacedPlace { dev: self })
    }

    /// Paced work requests in flight from this device.
    fn paced_in_flight(&self) -> u32 {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { crate::ffi::lite_paced_inflight(self.raw.as_ptr()) }
    }

    /// How much longer (ns) unpaced bulk bytes in flight hold this device's paced
    /// work requests: 0 when none are, or none moved for 500 ms.
    pub(crate) fn unpaced_hold_ns(&self) -> u64 {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { crate::ffi::lite_unpaced_hold(self.raw.as_ptr()) }
    }

    /// A key that tells this device from the node's others while it exists.
    pub(crate) fn key(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// This device's places over time since it was added.
    pub(crate) fn paced_stat(&self) -> PacedStat {
        let mut stat = crate::ffi::lite_paced_stat {
            held_ns: 0,
            wait_ns: 0,
            wrs: 0,
        };
        // SAFETY: `self.raw` is valid for the life of `self`; the helper writes `stat`.
        unsafe { crate::ffi::lite_paced_stat(self.raw.as_ptr(), &mut stat) };
        PacedStat {
            in_flight: self.paced_in_flight(),
            held_ns: stat.held_ns,
            wait_ns: stat.wait_ns,
            wrs: stat.wrs,
        }
    }
}

/// Paced work requests in flight, and their places over time, summed (ns, WRs).
#[derive(Default, Clone, Copy)]
pub(crate) struct PacedStat {
    pub(crate) in_flight: u32,
    /// Places held: the integral over time of the work requests in flight.
    pub(crate) held_ns: u64,
    /// Tasks' time waiting for a place.
    pub(crate) wait_ns: u64,
    /// Places given back.
    pub(crate) wrs: u64,
}

impl core::ops::Add for PacedStat {
    type Output = PacedStat;

    fn add(self, other: PacedStat) -> PacedStat {
        PacedStat {
            in_flight: self.in_flight.saturating_add(other.in_flight),
            held_ns: self.held_ns.wrapping_add(other.held_ns),
            wait_ns: self.wait_ns.wrapping_add(other.wait_ns),
            wrs: self.wrs.wrapping_add(other.wrs),
        }
    }
}

impl PacedPlace<'_> {
    /// The work request posted next through this device's QP takes the place over:
    /// its completion, or failure to post, gives it back.
    pub(in crate::verbs) fn hand_over(self) {
        core::mem::forget(self);
    }
}

/// How an RDMA read or write stands to SW-Pri's pacing.
pub(crate) enum Pacing<'a> {
    /// The latency class's, or its probe: never waited for.
    Exempt,
    /// Bulk while not paced: paced work requests wait until it completed (what
    /// is in flight of it queues at the bottleneck).
    Unpaced,
    /// Paced, holding this place among the QP's device's paced work requests.
    Paced(PacedPlace<'a>),
}

impl Drop for PacedPlace<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.dev.raw` is valid; this place was taken by `enter_paced` and
        // no work request holds it.
        unsafe { crate::ffi::lite_paced_leave(self.dev.raw.as_ptr()) };
    }
}
