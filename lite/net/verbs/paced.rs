// SPDX-License-Identifier: GPL-2.0
//! `PacedPlace`: one of the places a device gives its paced work requests.
//!
//! SW-Pri bounds the node's paced bytes in flight, not each transfer's: with one
//! place per transfer, 32 bulk processes kept 32 chunks (1 MiB, 280 ms of a
//! 3.6 MB/s wire) at the bottleneck. A transfer learns its own completions only
//! when it next waits, so the count lives with the device and each completion
//! gives its place back, whichever transfer it belongs to.

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
    pub(crate) fn paced_in_flight(&self) -> u32 {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { crate::ffi::lite_paced_inflight(self.raw.as_ptr()) }
    }
}

impl PacedPlace<'_> {
    /// The device the place belongs to, for the work request that takes it over
    /// (whose completion, or failure to post, gives it back).
    pub(in crate::net::verbs) fn hand_over(self) -> *mut crate::ffi::lite_dev {
        let raw = self.dev.raw.as_ptr();
        core::mem::forget(self);
        raw
    }
}

impl Drop for PacedPlace<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.dev.raw` is valid; this place was taken by `enter_paced` and
        // no work request holds it.
        unsafe { crate::ffi::lite_paced_leave(self.dev.raw.as_ptr()) };
    }
}
