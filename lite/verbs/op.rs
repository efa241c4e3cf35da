// SPDX-License-Identifier: GPL-2.0
//! `Op`: waiting for the completions of a one-sided operation's work requests.

use super::Device;
use crate::ffi;
use core::ptr::NonNull;
use kernel::prelude::*;

/// The status of a wait that ran out of time with work requests still posted; a
/// failed work request's status is an `IB_WC_*` (not negative).
pub(crate) const TIMED_OUT: i32 = -(kernel::bindings::ETIMEDOUT as i32);

/// Where an op's time went (ns, `Ktime` clock; 0: not yet).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct OpStamps {
    /// Its last RDMA READ or WRITE went to the provider.
    pub(crate) post_ns: u64,
    /// The provider's post returned.
    pub(crate) posted_ns: u64,
    /// Its last completion's handler ran.
    pub(crate) done_ns: u64,
    /// A waiter slept on it (it was not done when the wait began).
    pub(crate) slept: bool,
}

/// Completion of a one-sided operation made of several work requests. Dropping it
/// waits for whatever is still posted.
pub(crate) struct Op {
    pub(in crate::verbs) raw: NonNull<ffi::lite_op>,
}

// SAFETY: the C op is a completion plus atomics, usable from any thread.
unsafe impl Send for Op {}
// SAFETY: see `Send`.
unsafe impl Sync for Op {}

impl Op {
    pub(crate) fn new() -> Result<Op> {
        // SAFETY: plain allocation, NULL on failure.
        let raw = NonNull::new(unsafe { ffi::lite_op_new() }).ok_or(ENOMEM)?;
        Ok(Op { raw })
    }

    /// Waits until at most `outstanding` posted work requests are still in flight,
    /// for at most `timeout_ns`; false if more were still when the time ran out.
    pub(crate) fn wait_below(&self, outstanding: u32, timeout_ns: u64) -> bool {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_op_wait_below(self.raw.as_ptr(), outstanding, timeout_ns) == 0 }
    }

    /// As [`Self::wait_timeout`], busy-polling `dev`'s send CQ for up to `budget_ns`
    /// first. The caller holds no lock that a completion handler takes.
    pub(crate) fn wait_polling(
        &self,
        dev: &Device,
        budget_ns: u64,
        timeout_ns: u64,
    ) -> core::result::Result<(), i32> {
        // SAFETY: `self.raw` is live and `dev.raw` is valid for the life of `dev`, whose
        // send CQ carries this op's completions.
        let status = unsafe {
            ffi::lite_op_wait_polling(self.raw.as_ptr(), dev.raw.as_ptr(), budget_ns, timeout_ns)
        };
        match status {
            0 => Ok(()),
            status => Err(status),
        }
    }

    /// As [`Self::wait`], for at most `timeout_ns`: `Err(TIMED_OUT)` if work requests
    /// were still posted then (and still are: the caller flushes their QP before it
    /// drops the op, whose drop waits for them).
    pub(crate) fn wait_timeout(&self, timeout_ns: u64) -> core::result::Result<(), i32> {
        // SAFETY: `self.raw` is live.
        match unsafe { ffi::lite_op_wait_timeout(self.raw.as_ptr(), timeout_ns) } {
            0 => Ok(()),
            status => Err(status),
        }
    }

    /// When the last completion of the op ran (ns, `Ktime` clock; 0: none yet).
    pub(crate) fn done_ns(&self) -> u64 {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_op_done_ns(self.raw.as_ptr()) }
    }

    /// Where its time went, for its poster once it is done.
    pub(crate) fn stamps(&self) -> OpStamps {
        let mut raw = ffi::lite_op_stamps {
            post_ns: 0,
            posted_ns: 0,
            done_ns: 0,
            slept: 0,
        };
        // SAFETY: `self.raw` is live and `raw` is a valid place for the helper to fill.
        unsafe { ffi::lite_op_stamps(self.raw.as_ptr(), &mut raw) };
        OpStamps {
            post_ns: raw.post_ns,
            posted_ns: raw.posted_ns,
            done_ns: raw.done_ns,
            slept: raw.slept != 0,
        }
    }

    /// How long ago one of its work requests was last posted or completed (ns, to
    /// a jiffy; meaningful once one was posted).
    pub(crate) fn idle_ns(&self) -> u64 {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_op_idle_ns(self.raw.as_ptr()) }
    }

    /// Its work requests posted and not yet completed, for the log: a provider
    /// that completes one twice shows as a count wrapped past `u32::MAX / 2`.
    pub(crate) fn pending(&self) -> u32 {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_op_pending(self.raw.as_ptr()) }
    }

    /// Waits until every posted work request completed; `Err(wc_status)` if one failed.
    pub(crate) fn wait(&self) -> core::result::Result<(), i32> {
        // SAFETY: `self.raw` is live.
        match unsafe { ffi::lite_op_wait(self.raw.as_ptr()) } {
            0 => Ok(()),
            status => Err(status),
        }
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        let _ = self.wait();
        // SAFETY: nothing is posted any more, so no completion can refer to the op.
        unsafe { ffi::lite_op_free(self.raw.as_ptr()) };
    }
}
