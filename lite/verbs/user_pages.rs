// SPDX-License-Identifier: GPL-2.0
//! `UserPages`: a user buffer pinned and DMA-mapped for one transfer.

use super::{Device, DMA_FROM_DEVICE, DMA_TO_DEVICE, PAGE_SIZE};
use crate::ffi;
use crate::kvec::caller_sized;
use core::ffi::c_void;
use core::mem::MaybeUninit;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::uaccess::UserSliceReader;

/// Pages of a user buffer pinned and DMA-mapped for one transfer; unmapped and
/// unpinned on drop (marked dirty when the device wrote them).
pub(crate) struct UserPages {
    dev: Arc<Device>,
    pages: KVec<*mut c_void>,
    dma: KVec<u64>,
    /// Offset of the buffer in its first page.
    head: usize,
    len: usize,
    device_writes: bool,
}

// SAFETY: the page pointers are pinned `struct page`s, only handed to the C helpers
// (unmap, unpin), which may run on any thread.
unsafe impl Send for UserPages {}
// SAFETY: `&UserPages` only reads the DMA addresses.
unsafe impl Sync for UserPages {}

/// The DMA direction of a user page the device writes (`device_writes`) or reads.
fn user_dir(device_writes: bool) -> i32 {
    if device_writes {
        DMA_FROM_DEVICE
    } else {
        DMA_TO_DEVICE
    }
}

impl UserPages {
    /// Pins and maps `[addr, addr + len)` of the current process. EFAULT when any
    /// page is not mapped (or not writable when the device writes it).
    pub(crate) fn pin(
        dev: &Arc<Device>,
        addr: usize,
        len: usize,
        device_writes: bool,
    ) -> Result<UserPages> {
        let head = addr % PAGE_SIZE;
        addr.checked_add(len).ok_or(EFAULT)?;
        // No bytes, no pages (and pin_user_pages_fast() must never be asked for 0).
        let count = if len == 0 {
            0
        } else {
            (head + len).div_ceil(PAGE_SIZE)
        };
        let mut pages = KVec::from_elem(core::ptr::null_mut(), count, caller_sized())?;
        let mut this = UserPages {
            dev: dev.clone(),
            pages: KVec::with_capacity(count, caller_sized())?,
            dma: KVec::with_capacity(count, caller_sized())?,
            head,
            len,
            device_writes,
        };
        if count == 0 {
            return Ok(this);
        }
        // SAFETY: `pages` has room for `count` page pointers.
        let pinned = unsafe {
            ffi::lite_pin_user_pages(
                (addr - head) as _,
                count as u32,
                device_writes as i32,
                0,
                pages.as_mut_ptr(),
            )
        };
        let pinned = usize::try_from(pinned).map_err(|_| EFAULT)?;
        for &page in &pages[..pinned] {
            // `this` owns each page from here on, so drop unpins it on any error.
            this.pages.push(page, GFP_KERNEL)?;
        }
        if pinned < count {
            return Err(EFAULT);
        }
        for &page in this.pages.iter() {
            let mut dma = 0;
            // SAFETY: `page` is pinned; the device is registered.
            to_result(unsafe {
                ffi::lite_dma_map_page(dev.raw.as_ptr(), page, user_dir(device_writes), &mut dma)
            })?;
            this.dma.push(dma, GFP_KERNEL)?;
        }
        Ok(this)
    }

    /// The first `len` bytes of the buffer (at most its length), one piece per page:
    /// each piece's kernel address, its offset in the buffer and its length.
    fn pieces(&self, len: usize) -> impl Iterator<Item = (*mut u8, usize, usize)> + '_ {
        let len = len.min(self.len);
        let mut done = 0;
        self.pages.iter().enumerate().map_while(move |(i, &page)| {
            if done >= len {
                return None;
            }
            let skip = if i == 0 { self.head } else { 0 };
            let take = (PAGE_SIZE - skip).min(len - done);
            // SAFETY: a pinned page has a kernel address (no highmem where we build).
            let base = unsafe { ffi::lite_page_address(page) }.cast::<u8>();
            // SAFETY: `skip < PAGE_SIZE`, so the pointer stays inside the page.
            let at = unsafe { base.add(skip) };
            let piece = (at, done, take);
            done += take;
            Some(piece)
        })
    }

    /// Copies `len` bytes (at most the buffer's length) from user memory into the
    /// pinned pages: a reply from a server process on this node.
    pub(crate) fn copy_from_user(&self, reader: &mut UserSliceReader, len: usize) -> Result {
        for (at, _, take) in self.pieces(len) {
            // SAFETY: `at..at + take` is inside a pinned page, which only `read_raw` writes.
            let out =
                unsafe { core::slice::from_raw_parts_mut(at.cast::<MaybeUninit<u8>>(), take) };
            reader.read_raw(out)?;
        }
        Ok(())
    }

    /// Copies `data` into the start of the buffer from the CPU, in the device's
    /// place: a reply that came inline. The pages are unmapped first, so that no
    /// later unmap can discard the CPU's writes where DMA is not cache-coherent.
    pub(crate) fn fill(&mut self, data: &[u8]) -> Result {
        if data.len() > self.len {
            return Err(EINVAL);
        }
        self.unmap();
        for (at, done, take) in self.pieces(data.len()) {
            // SAFETY: `at..at + take` is in a pinned page; `done + take <= data.len()`.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(done), at, take) };
        }
        Ok(())
    }

    fn unmap(&mut self) {
        let mapped = core::mem::take(&mut self.dma);
        for &dma in mapped.iter() {
            // SAFETY: mapped in `pin` with the same direction, and unmapped only once
            // (taken out of `self.dma`).
            unsafe {
                ffi::lite_dma_unmap_page(self.dev.raw.as_ptr(), dma, user_dir(self.device_writes))
            };
        }
    }

    /// The buffer as runs of DMA-contiguous memory, in order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let mut index = 0;
        let mut done = 0;
        core::iter::from_fn(move || {
            if done >= self.len {
                return None;
            }
            let skip = if index == 0 { self.head } else { 0 };
            let start = self.dma[index] + skip as u64;
            let mut run = (PAGE_SIZE - skip).min(self.len - done);
            index += 1;
            while done + run < self.len && self.dma[index] == start + run as u64 {
                run += (self.len - done - run).min(PAGE_SIZE);
                index += 1;
            }
            done += run;
            Some((start, run))
        })
    }
}

impl Drop for UserPages {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: these pages were pinned in `pin` and no posted request uses them any more.
        unsafe {
            ffi::lite_unpin_user_pages(
                self.pages.as_mut_ptr(),
                self.pages.len() as u32,
                self.device_writes as i32,
            )
        };
    }
}
