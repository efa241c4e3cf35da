// SPDX-License-Identifier: GPL-2.0
//! `RemoteKey`: the rkey through which peers reach one range of this node's
//! memory. With `remote_access=chunks` it is an MR of its own over exactly that
//! range, registered with a fresh key byte and deregistered (revoked at the NIC)
//! by `revoke` or on drop; with `global` it is the global MR's key, which reaches
//! all memory and is never revoked (LITE's design, kept for comparison).

use super::Device;
use crate::ffi;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

/// A peer may read the range.
pub(crate) const REMOTE_READ: u32 = ffi::LITE_MR_REMOTE_READ;
/// A peer may write it.
pub(crate) const REMOTE_WRITE: u32 = ffi::LITE_MR_REMOTE_WRITE;
/// A peer may run atomics on it.
pub(crate) const REMOTE_ATOMIC: u32 = ffi::LITE_MR_REMOTE_ATOMIC;

/// How peers reach this node's memory (the `remote_access` module parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteAccess {
    /// One MR per exposed range, revoked when it is freed.
    Chunks,
    /// LITE's global MR over all memory.
    Global,
}

/// Peers' key to one range; see the module comment.
pub(crate) struct RemoteKey {
    /// Outlives the MR: the device's PD may only go once its MRs are gone.
    _dev: Arc<Device>,
    /// The range's own MR (null with `global`, or once revoked).
    mr: AtomicPtr<ffi::ib_mr>,
    rkey: u32,
}

// SAFETY: the MR pointer is only handed to `lite_mr_deregister`, once (swapped out
// atomically), which may run on any thread.
unsafe impl Send for RemoteKey {}
// SAFETY: see `Send`; `&RemoteKey` reads the key or revokes through the atomic swap.
unsafe impl Sync for RemoteKey {}

impl RemoteKey {
    /// Lets peers reach the DMA `runs` (one contiguous range in the MR's address
    /// space, starting at the first run's address) with `access` (`REMOTE_*`).
    /// Several runs must be page-aligned where they meet.
    pub(crate) fn register(dev: &Arc<Device>, runs: &[(u64, usize)], access: u32) -> Result<Self> {
        if dev.remote_access() == RemoteAccess::Global {
            return Ok(RemoteKey {
                _dev: dev.clone(),
                mr: AtomicPtr::new(ptr::null_mut()),
                rkey: dev.global_rkey(),
            });
        }
        if runs.is_empty() || runs.len() > ffi::LITE_MR_MAX_RUNS as usize {
            return Err(EINVAL);
        }
        let mut sges = KVec::with_capacity(runs.len(), GFP_KERNEL)?;
        for &(addr, len) in runs {
            let len = u32::try_from(len).map_err(|_| EINVAL)?;
            sges.push(
                ffi::lite_sge {
                    addr,
                    len,
                    reserved: 0,
                },
                GFP_KERNEL,
            )?;
        }
        let (mut rkey, mut err) = (0, 0);
        // SAFETY: the device is registered; `sges` holds `runs.len()` entries the
        // helper only reads; the out pointers are locals.
        let mr = unsafe {
            ffi::lite_mr_register(
                dev.raw.as_ptr(),
                sges.as_ptr(),
                sges.len() as u32,
                access as i32,
                &mut rkey,
                &mut err,
            )
        };
        if mr.is_null() {
            return Err(Error::from_errno(err));
        }
        Ok(RemoteKey {
            _dev: dev.clone(),
            mr: AtomicPtr::new(mr),
            rkey,
        })
    }

    /// The key peers put in their work requests.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// From now on the NIC refuses every request under this key (with `chunks`):
    /// when this returns, none is executing any more. Idempotent.
    pub(crate) fn revoke(&self) {
        let mr = self.mr.swap(ptr::null_mut(), Ordering::AcqRel);
        if !mr.is_null() {
            // SAFETY: registered in `register` on `self._dev`, still alive, and
            // swapped out above, so deregistered exactly once.
            unsafe { ffi::lite_mr_deregister(mr) };
        }
    }
}

impl Drop for RemoteKey {
    fn drop(&mut self) {
        self.revoke();
    }
}
