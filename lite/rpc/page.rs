// SPDX-License-Identifier: GPL-2.0
//! The shared page: the page a process maps from /dev/lite, with its crossing
//! counter and the slots its asynchronous calls complete in.

use super::SLOTS;
use crate::ffi;
use crate::uapi::*;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;

/// The page a process maps from /dev/lite: its crossing counter and the slots
/// where the results of its asynchronous calls appear. Written by the kernel
/// through atomics only: the process may scribble on it at any time.
pub(crate) struct SharedPage {
    pub(crate) page: NonNull<LiteSharedPage>,
}

// SAFETY: the page is only accessed through atomics (or before it is shared).
unsafe impl Send for SharedPage {}
// SAFETY: see `Send`.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    pub(crate) fn new() -> Result<SharedPage> {
        // SAFETY: plain page allocation; NULL on failure.
        let page = NonNull::new(unsafe { ffi::lite_shared_page_alloc() }.cast::<LiteSharedPage>())
            .ok_or(ENOMEM)?;
        // SAFETY: a fresh zeroed page, not yet visible to user space.
        unsafe {
            (*page.as_ptr()).magic = LITE_SHARED_MAGIC;
            (*page.as_ptr()).abi_version = LITE_ABI_VERSION;
        }
        Ok(SharedPage { page })
    }

    fn u64_at(&self, field: *mut u64) -> &AtomicU64 {
        // SAFETY: `field` points into the page, which lives as long as `self`, and is
        // 8-byte aligned (asserted layout of the ABI structs).
        unsafe { AtomicU64::from_ptr(field) }
    }

    fn u32_at(&self, field: *mut u32) -> &AtomicU32 {
        // SAFETY: as in `u64_at`, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(field) }
    }

    pub(crate) fn count_crossing(&self) {
        // SAFETY: a field of the page.
        let count =
            self.u64_at(unsafe { core::ptr::addr_of_mut!((*self.page.as_ptr()).ioctl_count) });
        count.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes `slot`'s state; the result fields are written before `state`.
    pub(crate) fn publish(&self, slot: usize, state: u32, status: u32, len: u64, seq: u64) {
        if slot >= SLOTS {
            return;
        }
        // SAFETY: `slot` is in bounds, so the pointer stays inside the page.
        let s = unsafe { core::ptr::addr_of_mut!((*self.page.as_ptr()).slots[slot]) };
        // SAFETY: fields of a slot inside the page.
        unsafe {
            self.u32_at(core::ptr::addr_of_mut!((*s).error))
                .store(status, Ordering::Relaxed);
            self.u64_at(core::ptr::addr_of_mut!((*s).len))
                .store(len, Ordering::Relaxed);
            self.u64_at(core::ptr::addr_of_mut!((*s).seq))
                .store(seq, Ordering::Relaxed);
            self.u32_at(core::ptr::addr_of_mut!((*s).state))
                .store(state, Ordering::Release);
        }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; a process still mapping it holds its own reference.
        unsafe { ffi::lite_shared_page_free(self.page.as_ptr().cast()) };
    }
}

impl SharedPage {
    /// (error, len, seq) of a DONE slot.
    pub(crate) fn result(&self, slot: usize) -> (u32, u64, u64) {
        // SAFETY: `slot` is 0 here (checked by callers), inside the page.
        let s =
            unsafe { core::ptr::addr_of_mut!((*self.page.as_ptr()).slots[slot.min(SLOTS - 1)]) };
        // SAFETY: fields of a slot inside the page.
        unsafe {
            (
                self.u32_at(core::ptr::addr_of_mut!((*s).error))
                    .load(Ordering::Acquire),
                self.u64_at(core::ptr::addr_of_mut!((*s).len))
                    .load(Ordering::Relaxed),
                self.u64_at(core::ptr::addr_of_mut!((*s).seq))
                    .load(Ordering::Relaxed),
            )
        }
    }
}
