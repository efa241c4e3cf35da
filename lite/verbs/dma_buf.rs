// SPDX-License-Identifier: GPL-2.0
//! `DmaBuf`: kernel memory (or a pinned user page) mapped for the device, which
//! peers reach once a range of it is exposed, with its byte-level accessors.

use super::{Atomic, Device, RemoteKey, DMA_BIDIRECTIONAL, PAGE_SIZE};
use crate::ffi;
use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::uaccess::{UserSliceReader, UserSliceWriter};

/// Physically contiguous kernel memory mapped for the device. Peers reach it only
/// through the key of `expose` (with `remote_access=global`, through the global
/// MR anyway). Freed (and unmapped) on drop, after its key is revoked at the NIC:
/// the owner drops it only once no posted work request of its own touches it.
pub(crate) struct DmaBuf {
    dev: Arc<Device>,
    ptr: NonNull<u8>,
    dma: u64,
    size: usize,
    /// A pinned page of a process (LT_register) instead of kernel-allocated memory.
    user_page: Option<NonNull<c_void>>,
    /// Peers' key to the exposed range.
    key: Option<RemoteKey>,
}

// SAFETY: the buffer is plain memory; access to its contents goes through `&mut self`
// or explicit byte copies made by the owner under its own locking.
unsafe impl Send for DmaBuf {}
// SAFETY: see `Send`.
unsafe impl Sync for DmaBuf {}

/// Largest `DmaBuf`: one block of the page allocator (`MAX_PAGE_ORDER` 10).
pub(crate) const DMA_BUF_MAX: usize = PAGE_SIZE << 10;

impl DmaBuf {
    pub(crate) fn new(dev: &Arc<Device>, size: usize) -> Result<DmaBuf> {
        Self::alloc(dev, size, false)
    }

    /// Like `new`, but a large size fails quietly and early instead of reclaiming hard.
    pub(crate) fn try_new(dev: &Arc<Device>, size: usize) -> Result<DmaBuf> {
        Self::alloc(dev, size, true)
    }

    fn alloc(dev: &Arc<Device>, size: usize, may_fail: bool) -> Result<DmaBuf> {
        // alloc_pages_exact() WARNs on 0 bytes and on more than the largest page
        // block: neither may ever reach it from an argument.
        if size == 0 {
            return Err(EINVAL);
        }
        if size > DMA_BUF_MAX {
            return Err(ENOMEM);
        }
        let mut dma = 0;
        // SAFETY: `dev.raw` is a registered device; `dma` is a local.
        let ptr = unsafe {
            ffi::lite_dma_buf_alloc(dev.raw.as_ptr(), size as _, may_fail as i32, &mut dma)
        };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(ENOMEM)?;
        Ok(DmaBuf {
            dev: dev.clone(),
            ptr,
            dma,
            size,
            user_page: None,
            key: None,
        })
    }

    /// Pins the current process's page at `addr` (page aligned) for as long as the
    /// buffer lives and maps it for the device both ways. EFAULT when it is not a
    /// writable page of the process.
    pub(crate) fn pin_user_page(dev: &Arc<Device>, addr: usize) -> Result<DmaBuf> {
        let mut page = core::ptr::null_mut();
        // SAFETY: room for one page pointer; a long-term pin, released in `drop`.
        let pinned = unsafe { ffi::lite_pin_user_pages(addr as _, 1, 1, 1, &mut page) };
        let page = match NonNull::new(page) {
            Some(page) if pinned == 1 => page,
            _ => return Err(EFAULT),
        };
        let mut dma = 0;
        // SAFETY: `page` is pinned; the device is registered.
        let mapped = to_result(unsafe {
            ffi::lite_dma_map_page(dev.raw.as_ptr(), page.as_ptr(), DMA_BIDIRECTIONAL, &mut dma)
        });
        // SAFETY: a pinned page has a kernel address (no highmem on the architectures we build for).
        let ptr = NonNull::new(unsafe { ffi::lite_page_address(page.as_ptr()) }.cast::<u8>());
        match (mapped, ptr) {
            (Ok(()), Some(ptr)) => Ok(DmaBuf {
                dev: dev.clone(),
                ptr,
                dma,
                size: PAGE_SIZE,
                user_page: Some(page),
                key: None,
            }),
            (mapped, _) => {
                if mapped.is_ok() {
                    // SAFETY: mapped just above.
                    unsafe { ffi::lite_dma_unmap_page(dev.raw.as_ptr(), dma, DMA_BIDIRECTIONAL) };
                }
                let mut pages = [page.as_ptr()];
                // SAFETY: pinned above, used by nothing.
                unsafe { ffi::lite_unpin_user_pages(pages.as_mut_ptr(), 1, 0) };
                Err(EFAULT)
            }
        }
    }

    /// Lets peers reach `[offset, offset + len)` of the buffer with `access`
    /// (`REMOTE_*`) and returns their rkey. Once per buffer: EBUSY after that.
    pub(crate) fn expose(&mut self, offset: usize, len: usize, access: u32) -> Result<u32> {
        if self.key.is_some() {
            return Err(EBUSY);
        }
        let (dma, len) = self.range(offset, len)?;
        let key = RemoteKey::register(&self.dev, &[(dma, len as usize)], access)?;
        let rkey = key.rkey();
        self.key = Some(key);
        Ok(rkey)
    }

    /// `expose` for each of `bufs` from its start, for the length beside it, with
    /// the registrations made at once (`RemoteKey::register_each`); returns the
    /// rkeys in order. On failure none is exposed.
    pub(crate) fn expose_each(
        dev: &Arc<Device>,
        bufs: &mut [(DmaBuf, usize)],
        access: u32,
    ) -> Result<KVec<u32>> {
        let mut ranges = KVec::with_capacity(bufs.len(), GFP_KERNEL)?;
        for (buf, len) in bufs.iter() {
            if buf.key.is_some() {
                return Err(EBUSY);
            }
            let (dma, len) = buf.range(0, *len)?;
            ranges.push((dma, len as usize), GFP_KERNEL)?;
        }
        let keys = RemoteKey::register_each(dev, &ranges, access)?;
        let mut rkeys = KVec::with_capacity(bufs.len(), GFP_KERNEL)?;
        for ((buf, _), key) in bufs.iter_mut().zip(keys) {
            rkeys.push(key.rkey(), GFP_KERNEL)?;
            buf.key = Some(key);
        }
        Ok(rkeys)
    }

    /// Peers' rkey to the exposed range, if any.
    pub(crate) fn rkey(&self) -> Option<u32> {
        self.key.as_ref().map(RemoteKey::rkey)
    }

    /// Offset in this buffer of DMA range `[dma, dma + len)`, if it lies inside.
    pub(crate) fn offset_of(&self, dma: u64, len: u64) -> Option<usize> {
        let offset = dma.checked_sub(self.dma)?;
        (offset.checked_add(len)? <= self.size as u64).then_some(offset as usize)
    }

    /// DMA address of the start of the buffer.
    pub(crate) fn dma(&self) -> u64 {
        self.dma
    }

    /// Bytes of the buffer.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// DMA address and length of `[offset, offset + len)`, checked against the buffer.
    pub(crate) fn range(&self, offset: usize, len: usize) -> Result<(u64, u32)> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size && len <= u32::MAX as usize => {
                Ok((self.dma + offset as u64, len as u32))
            }
            _ => Err(EINVAL),
        }
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer, after the device's writes.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        let (dma, len) = self.range(offset, out.len())?;
        // SAFETY: the range is inside the buffer (checked); the device is registered.
        unsafe {
            ffi::lite_dma_sync_for_cpu(self.dev.raw.as_ptr(), dma, len);
            core::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    /// Hands `[offset, offset + len)` back to the device after the CPU read it, so
    /// that the device may write it again: a buffer reused by many transfers.
    pub(crate) fn give_to_device(&self, offset: usize, len: usize) -> Result {
        let (dma, len) = self.range(offset, len)?;
        // SAFETY: the range is inside the buffer (checked); the device is registered.
        unsafe { ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len) };
        Ok(())
    }

    /// Copies `data` into the buffer at `offset` and hands the range to the device.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) -> Result {
        let (dma, len) = self.range(offset, data.len())?;
        // SAFETY: as in `read`; `&mut self` makes this the only CPU access.
        unsafe {
            core::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(offset),
                data.len(),
            );
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len);
        }
        Ok(())
    }
}

impl DmaBuf {
    /// Copies `len` bytes from `src` at `src_offset` to `dst_offset` of this buffer.
    pub(crate) fn copy_from(
        &mut self,
        dst_offset: usize,
        src: &DmaBuf,
        src_offset: usize,
        len: usize,
    ) -> Result {
        let (src_dma, sync_len) = src.range(src_offset, len)?;
        let (dst_dma, _) = self.range(dst_offset, len)?;
        // SAFETY: both ranges are inside their buffers (checked); `&mut self` and `&src`
        // are distinct buffers, so the ranges cannot overlap.
        unsafe {
            ffi::lite_dma_sync_for_cpu(src.dev.raw.as_ptr(), src_dma, sync_len);
            core::ptr::copy_nonoverlapping(
                src.ptr.as_ptr().add(src_offset),
                self.ptr.as_ptr().add(dst_offset),
                len,
            );
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dst_dma, sync_len);
        }
        Ok(())
    }
}

/// Byte-level access to LMR chunks, which several processes, peers (through their
/// keys) and the device touch concurrently, like any RDMA-exposed memory: all
/// accesses go through raw pointers, never through Rust references to the bytes.
impl DmaBuf {
    fn span(&self, offset: usize, len: usize) -> Result<*mut u8> {
        self.range(offset, len)?;
        // SAFETY: `offset + len <= size` (checked), so the pointer stays inside the allocation.
        Ok(unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// Copies `data` into the buffer at `offset` and hands the range to the device.
    pub(crate) fn write_bytes(&self, offset: usize, data: &[u8]) -> Result {
        let (dma, len) = self.range(offset, data.len())?;
        let dst = self.span(offset, data.len())?;
        // SAFETY: `dst..dst + len` is inside the buffer; `data` is a distinct allocation.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len);
        }
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `value`.
    pub(crate) fn fill(&self, offset: usize, len: usize, value: u8) -> Result {
        let (dma, _) = self.range(offset, len)?;
        let dst = self.span(offset, len)?;
        // SAFETY: `dst..dst + len` is inside the buffer; bytes have no validity invariant.
        unsafe {
            core::ptr::write_bytes(dst, value, len);
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len as u32);
        }
        Ok(())
    }

    /// `atomic` on the 8-byte word at `offset`, by this CPU: how the holder's kernel
    /// serves atomics (`Paths::holder_atomics`), where no RNIC updates such words.
    /// Returns the old value; EINVAL unless the word is 8-aligned.
    pub(crate) fn atomic(&self, offset: usize, atomic: Atomic) -> Result<u64> {
        let (dma, len) = self.range(offset, 8)?;
        let at = self.span(offset, 8)?;
        if at as usize % 8 != 0 {
            return Err(EINVAL);
        }
        // Under holder atomics every atomic on the word is this kind of CPU access; a
        // peer's RDMA WRITE racing it is its user's race, as it would be with NIC atomics.
        // SAFETY: `at..at + 8` is inside the buffer and 8-aligned (both checked above).
        let word = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
        // SAFETY: `dma..dma + len` is the word's mapping (from `range`).
        unsafe { ffi::lite_dma_sync_for_cpu(self.dev.raw.as_ptr(), dma, len) };
        let old = match atomic {
            Atomic::FetchAdd(add) => word.fetch_add(add, Ordering::SeqCst),
            Atomic::CompareSwap { expected, new } => {
                match word.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(old) | Err(old) => old,
                }
            }
        };
        // SAFETY: as above.
        unsafe { ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len) };
        Ok(old)
    }

    /// Copies `len` bytes from `src` at `src_offset` to `dst_offset` here; the two
    /// ranges may overlap (memmove) when `src` is this buffer.
    pub(crate) fn move_from(
        &self,
        dst_offset: usize,
        src: &DmaBuf,
        src_offset: usize,
        len: usize,
    ) -> Result {
        let from = src.span(src_offset, len)?;
        let to = self.span(dst_offset, len)?;
        let (src_dma, _) = src.range(src_offset, len)?;
        let (dst_dma, _) = self.range(dst_offset, len)?;
        // SAFETY: both ranges are inside their buffers (checked); `copy` allows overlap.
        unsafe {
            ffi::lite_dma_sync_for_cpu(src.dev.raw.as_ptr(), src_dma, len as u32);
            core::ptr::copy(from, to, len);
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dst_dma, len as u32);
        }
        Ok(())
    }

    /// Copies `len` bytes from user memory into the buffer at `offset`.
    pub(crate) fn copy_from_user(
        &self,
        offset: usize,
        reader: &mut UserSliceReader,
        len: usize,
    ) -> Result {
        let (dma, _) = self.range(offset, len)?;
        let dst = self.span(offset, len)?;
        // SAFETY: the span is inside the buffer and lives as long as `self`; the slice is
        // only written through by `read_raw` (a copy_from_user), like a device write.
        let out = unsafe {
            core::slice::from_raw_parts_mut(dst.cast::<core::mem::MaybeUninit<u8>>(), len)
        };
        reader.read_raw(out)?;
        // SAFETY: the range is inside the buffer.
        unsafe { ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len as u32) };
        Ok(())
    }

    /// Copies `len` bytes at `offset` of the buffer to user memory.
    pub(crate) fn copy_to_user(
        &self,
        offset: usize,
        writer: &mut UserSliceWriter,
        len: usize,
    ) -> Result {
        let (dma, _) = self.range(offset, len)?;
        let src = self.span(offset, len)?;
        // SAFETY: the range is inside the buffer.
        unsafe { ffi::lite_dma_sync_for_cpu(self.dev.raw.as_ptr(), dma, len as u32) };
        // SAFETY: as in `copy_from_user`; the bytes are only read (copy_to_user).
        let bytes = unsafe { core::slice::from_raw_parts(src, len) };
        writer.write_slice(bytes)
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // Unreachable at the NIC before the memory goes back (`RemoteKey`'s drop).
        drop(self.key.take());
        match self.user_page {
            Some(page) => {
                let mut pages = [page.as_ptr()];
                // SAFETY: mapped and pinned in `pin_user_page`; nothing reaches it any more.
                unsafe {
                    ffi::lite_dma_unmap_page(self.dev.raw.as_ptr(), self.dma, DMA_BIDIRECTIONAL);
                    ffi::lite_unpin_user_pages(pages.as_mut_ptr(), 1, 1);
                }
            }
            // SAFETY: allocated by `lite_dma_buf_alloc` with this size and mapping.
            None => unsafe {
                ffi::lite_dma_buf_free(
                    self.dev.raw.as_ptr(),
                    self.ptr.as_ptr().cast(),
                    self.size as _,
                    self.dma,
                )
            },
        }
    }
}
