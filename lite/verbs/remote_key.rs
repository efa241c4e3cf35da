// SPDX-License-Identifier: GPL-2.0
//! `RemoteKey`: the rkey through which peers reach one range of this node's
//! memory. With `remote_access=chunks` it is an MR of its own over exactly that
//! range, registered with a fresh key byte and deregistered (revoked at the NIC)
//! when it is dropped; with `global` it is the global MR's key, which reaches
//! all memory and is never revoked (LITE's design, kept for comparison).

use super::Device;
use crate::ffi;
use core::ptr::NonNull;
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
    /// The range's own MR (none with `global`).
    mr: Option<NonNull<ffi::ib_mr>>,
    rkey: u32,
}

// SAFETY: the MR pointer is only handed to `lite_mr_deregister`, once, on drop,
// which may run on any thread.
unsafe impl Send for RemoteKey {}
// SAFETY: `&RemoteKey` only reads the key.
unsafe impl Sync for RemoteKey {}

impl RemoteKey {
    /// Lets peers reach the DMA `runs` (one contiguous range in the MR's address
    /// space, starting at the first run's address) with `access` (`REMOTE_*`).
    /// Several runs must be page-aligned where they meet.
    pub(crate) fn register(dev: &Arc<Device>, runs: &[(u64, usize)], access: u32) -> Result<Self> {
        if dev.remote_access() == RemoteAccess::Global {
            return Ok(Self::global(dev));
        }
        if runs.is_empty() || runs.len() > ffi::LITE_MR_MAX_RUNS as usize {
            return Err(EINVAL);
        }
        let sges = sges_of(runs)?;
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
        let Some(mr) = NonNull::new(mr) else {
            return Err(Error::from_errno(err));
        };
        Ok(RemoteKey {
            _dev: dev.clone(),
            mr: Some(mr),
            rkey,
        })
    }

    /// `register` for each of the physically contiguous `ranges` (DMA address,
    /// bytes), one key each, with the registrations sent to the NIC together and
    /// waited for at once: a holder exposes up to 1 024 chunks of one LMR. On
    /// failure none is registered.
    pub(crate) fn register_each(
        dev: &Arc<Device>,
        ranges: &[(u64, usize)],
        access: u32,
    ) -> Result<KVec<Self>> {
        let mut keys = KVec::with_capacity(ranges.len(), GFP_KERNEL)?;
        if ranges.is_empty() {
            return Ok(keys);
        }
        if dev.remote_access() == RemoteAccess::Global {
            for _ in ranges {
                keys.push(Self::global(dev), GFP_KERNEL)?;
            }
            return Ok(keys);
        }
        if ranges.len() > ffi::LITE_MR_MAX_EACH as usize {
            return Err(EINVAL);
        }
        let sges = sges_of(ranges)?;
        let mut mrs = KVec::from_elem(core::ptr::null_mut(), ranges.len(), GFP_KERNEL)?;
        let mut rkeys = KVec::from_elem(0u32, ranges.len(), GFP_KERNEL)?;
        // SAFETY: the device is registered; `sges` holds `ranges.len()` entries the
        // helper only reads, and `mrs` and `rkeys` as many that it writes.
        let err = unsafe {
            ffi::lite_mr_register_each(
                dev.raw.as_ptr(),
                sges.as_ptr(),
                sges.len() as u32,
                access as i32,
                mrs.as_mut_ptr(),
                rkeys.as_mut_ptr(),
            )
        };
        if err != 0 {
            return Err(Error::from_errno(err));
        }
        for (&mr, &rkey) in mrs.iter().zip(rkeys.iter()) {
            // Within the capacity reserved above: does not allocate, so every MR
            // the helper made gets its key, which deregisters it when dropped.
            keys.push(
                RemoteKey {
                    _dev: dev.clone(),
                    mr: NonNull::new(mr),
                    rkey,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(keys)
    }

    /// With `global`: the global MR's key, which nothing revokes.
    fn global(dev: &Arc<Device>) -> Self {
        RemoteKey {
            _dev: dev.clone(),
            mr: None,
            rkey: dev.global_rkey(),
        }
    }

    /// The key peers put in their work requests.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }
}

/// `ranges` (DMA address, bytes) as the helpers take them; EINVAL for one of 4 GiB or more.
fn sges_of(ranges: &[(u64, usize)]) -> Result<KVec<ffi::lite_sge>> {
    let mut sges = KVec::with_capacity(ranges.len(), GFP_KERNEL)?;
    for &(addr, len) in ranges {
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
    Ok(sges)
}

impl Drop for RemoteKey {
    /// From now on the NIC refuses every request under this key (with `chunks`):
    /// once this returns, none is executing any more.
    fn drop(&mut self) {
        if let Some(mr) = self.mr {
            // SAFETY: registered in `register` on `self._dev`, which is still alive,
            // and dropped once.
            unsafe { ffi::lite_mr_deregister(mr.as_ptr()) };
        }
    }
}
