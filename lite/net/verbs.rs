// SPDX-License-Identifier: GPL-2.0
//! Safe wrappers over the C verbs helpers: an RDMA device and its RC QPs.

use crate::ffi;
use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::uaccess::{UserSliceReader, UserSliceWriter};

/// `IB_PORT_ACTIVE`.
pub(crate) const PORT_ACTIVE: u32 = 4;

/// One RDMA device with its PD, global MR and CQs (owned by the C side, which
/// creates them before `lite_rust_dev_added` and frees them after `lite_rust_dev_release`).
pub(crate) struct Device {
    pub(in crate::net::verbs) raw: NonNull<ffi::lite_dev>,
    name: [u8; 64],
}

// SAFETY: the C device object is immutable after creation and the verbs it is passed to
// are thread-safe; it outlives every `Device` (freed only after `lite_rust_dev_release`).
unsafe impl Send for Device {}
// SAFETY: see `Send`; `&Device` only calls thread-safe verbs.
unsafe impl Sync for Device {}

impl Device {
    /// Wraps a device handed to `lite_rust_dev_added`.
    ///
    /// # Safety
    /// `raw` must be valid until `lite_rust_dev_release` is called for it.
    pub(crate) unsafe fn new(raw: NonNull<ffi::lite_dev>) -> Self {
        let mut name = [0u8; 64];
        // SAFETY: `raw` is valid (caller), and the name is a NUL-terminated string owned by
        // the ib_device, which outlives this call.
        let cname = unsafe { core::ffi::CStr::from_ptr(ffi::lite_dev_name(raw.as_ptr()).cast()) };
        let bytes = cname.to_bytes();
        let len = bytes.len().min(name.len() - 1);
        name[..len].copy_from_slice(&bytes[..len]);
        Device { raw, name }
    }

    /// NUL-padded device name ("rxe0").
    pub(crate) fn name(&self) -> &[u8; 64] {
        &self.name
    }

    pub(crate) fn port(&self) -> u32 {
        // SAFETY: `self.raw` is valid for the life of `self` (see `new`).
        unsafe { ffi::lite_dev_port(self.raw.as_ptr()) }
    }

    /// Port state (`IB_PORT_*`) and active MTU (`IB_MTU_*`).
    pub(crate) fn query_port(&self) -> Result<(u32, u32)> {
        let (mut state, mut mtu) = (0, 0);
        // SAFETY: `self.raw` is valid; the out pointers are to locals.
        to_result(unsafe { ffi::lite_dev_query_port(self.raw.as_ptr(), &mut state, &mut mtu) })?;
        Ok((state, mtu))
    }

    /// The port's RoCE v2 IPv4-mapped GID and its index in the GID table.
    pub(crate) fn roce_gid(&self) -> Result<([u8; 16], i32)> {
        let mut gid = [0u8; 16];
        // SAFETY: `self.raw` is valid and `gid` has the 16 bytes the helper writes.
        let index = unsafe { ffi::lite_dev_roce_gid(self.raw.as_ptr(), gid.as_mut_ptr()) };
        to_result(index.min(0))?;
        Ok((gid, index))
    }

    /// The global MR's remote key.
    pub(crate) fn global_rkey(&self) -> u32 {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { ffi::lite_dev_global_rkey(self.raw.as_ptr()) }
    }

    /// SGEs per RDMA read/write work request.
    pub(crate) fn max_sge(&self) -> usize {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { ffi::lite_dev_max_sge(self.raw.as_ptr()) as usize }
    }

    /// Creates an RC QP in INIT with `recv_depth` receives posted. Completions call
    /// back with (`peer`, `index`), so `peer` must stay valid until the QP is dropped.
    pub(crate) fn create_qp(&self, peer: *const c_void, index: u32, recv_depth: u32) -> Result<Qp> {
        let mut err = 0;
        // SAFETY: `self.raw` is valid; `peer` is only stored and handed back to our callbacks.
        let raw = unsafe {
            ffi::lite_qp_create(
                self.raw.as_ptr(),
                peer as *mut c_void,
                index,
                recv_depth,
                &mut err,
            )
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Qp { raw }),
            None => Err(Error::from_errno(err)),
        }
    }
}

/// An RC QP. Dropping it drains every outstanding work request, then destroys it.
pub(crate) struct Qp {
    pub(in crate::net::verbs) raw: NonNull<ffi::lite_qp>,
}

// SAFETY: QP verbs (post, modify, query) may be called from any thread concurrently.
unsafe impl Send for Qp {}
// SAFETY: see `Send`.
unsafe impl Sync for Qp {}

/// Remote side of a connection, as published by the peer.
pub(crate) struct RemoteQp<'a> {
    pub(crate) gid: &'a [u8; 16],
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
}

impl Qp {
    pub(crate) fn num(&self) -> u32 {
        // SAFETY: `self.raw` is a live QP until `drop`.
        unsafe { ffi::lite_qp_num(self.raw.as_ptr()) }
    }

    /// INIT -> RTR -> RTS. May sleep (resolves the peer's MAC).
    pub(crate) fn connect(
        &self,
        remote: &RemoteQp<'_>,
        sgid_index: i32,
        local_psn: u32,
        mtu: u32,
    ) -> Result {
        // SAFETY: `self.raw` is live; `remote.gid` points to 16 readable bytes.
        to_result(unsafe {
            ffi::lite_qp_connect(
                self.raw.as_ptr(),
                remote.gid.as_ptr(),
                sgid_index,
                remote.qpn,
                remote.psn,
                local_psn,
                mtu,
            )
        })
    }

    /// Error state: the QP neither sends nor accepts anything more; what is posted
    /// on it is flushed.
    pub(crate) fn to_error(&self) -> Result {
        // SAFETY: `self.raw` is live.
        to_result(unsafe { ffi::lite_qp_to_error(self.raw.as_ptr()) })
    }

    /// `IB_QPS_*` of the QP.
    pub(crate) fn state(&self) -> Result<u32> {
        // SAFETY: `self.raw` is live.
        let state = unsafe { ffi::lite_qp_state(self.raw.as_ptr()) };
        to_result(state.min(0))?;
        Ok(state as u32)
    }

    /// Posts an RDMA write with immediate of `data` (under the peer's global rkey
    /// `rkey`), counted in `op` when given.
    pub(crate) fn post_write_imm(
        &self,
        data: &WriteImm<'_>,
        rkey: u32,
        imm: u32,
        op: Option<&Op>,
    ) -> Result {
        let remote_addr = data.remote_addr;
        let (dma, len) = data.src.range(data.offset, data.len)?;
        let op = op.map_or(core::ptr::null_mut(), |op| op.raw.as_ptr());
        // SAFETY: `self.raw` is live; `dma..dma + len` is inside `data.src`, which the caller
        // keeps alive until the write completes or the QP drains (`Peer::shutdown`); so is `op`.
        to_result(unsafe {
            ffi::lite_qp_post_write_imm(self.raw.as_ptr(), op, dma, len, remote_addr, rkey, imm)
        })
    }
}

/// What a write with immediate carries: `src[offset..offset + len]`, to the peer's
/// `remote_addr`.
pub(crate) struct WriteImm<'a> {
    pub(crate) src: &'a DmaBuf,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) remote_addr: u64,
}

impl Qp {
    /// Posts one RDMA WRITE (`write`) from, or READ into, the local `sges` at
    /// `remote_addr` of the peer, counted in `op`. The memory behind `sges` must stay
    /// mapped until `op.wait()` returns.
    pub(crate) fn post_rdma(
        &self,
        op: &Op,
        write: bool,
        sges: &[ffi::lite_sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result {
        // SAFETY: `self.raw` and `op.raw` are live; the helper copies `sges` (checked
        // against LITE_MAX_SGE) before returning.
        to_result(unsafe {
            ffi::lite_qp_post_rdma(
                self.raw.as_ptr(),
                op.raw.as_ptr(),
                write as i32,
                sges.as_ptr(),
                sges.len() as u32,
                remote_addr,
                rkey,
            )
        })
    }
}

/// An 8-byte RDMA atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Atomic {
    FetchAdd(u64),
    CompareSwap { expected: u64, new: u64 },
}

impl Qp {
    /// Posts `atomic` on the peer's word at `remote_addr` (8-aligned), counted in
    /// `op`; the old value lands in the first 8 bytes of `result`, which must stay
    /// alive until `op.wait()` returns.
    pub(crate) fn post_atomic(
        &self,
        op: &Op,
        atomic: Atomic,
        result: &DmaBuf,
        remote_addr: u64,
        rkey: u32,
    ) -> Result {
        let (dma, _) = result.range(0, 8)?;
        let (compare_swap, compare_add, swap) = match atomic {
            Atomic::FetchAdd(add) => (false, add, 0),
            Atomic::CompareSwap { expected, new } => (true, expected, new),
        };
        // SAFETY: `self.raw` and `op.raw` are live; `dma..dma + 8` lies inside `result`,
        // which the caller keeps alive until the op completed.
        to_result(unsafe {
            ffi::lite_qp_post_atomic(
                self.raw.as_ptr(),
                op.raw.as_ptr(),
                compare_swap as i32,
                dma,
                remote_addr,
                rkey,
                compare_add,
                swap,
            )
        })
    }
}

/// Completion of a one-sided operation made of several work requests. Dropping it
/// waits for whatever is still posted.
pub(crate) struct Op {
    pub(in crate::net::verbs) raw: NonNull<ffi::lite_op>,
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

    /// Waits until at most `outstanding` posted work requests are still in flight;
    /// returns how many were then.
    pub(crate) fn wait_below(&self, outstanding: u32) -> u32 {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_op_wait_below(self.raw.as_ptr(), outstanding) }
    }

    /// As [`Self::wait`], busy-polling `dev`'s send CQ for up to `budget_ns` first.
    /// The caller holds no lock that a completion handler takes.
    pub(crate) fn wait_polling(
        &self,
        dev: &Device,
        budget_ns: u64,
    ) -> core::result::Result<(), i32> {
        // SAFETY: `self.raw` is live and `dev.raw` is valid for the life of `dev`, whose
        // send CQ carries this op's completions.
        match unsafe { ffi::lite_op_wait_polling(self.raw.as_ptr(), dev.raw.as_ptr(), budget_ns) } {
            0 => Ok(()),
            status => Err(status),
        }
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

/// Bytes of a page.
pub(crate) const PAGE_SIZE: usize = 4096;

/// `enum dma_data_direction`.
const DMA_BIDIRECTIONAL: i32 = 0;
const DMA_TO_DEVICE: i32 = 1;
const DMA_FROM_DEVICE: i32 = 2;

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
        let mut pages = KVec::from_elem(core::ptr::null_mut(), count, GFP_KERNEL)?;
        let mut this = UserPages {
            dev: dev.clone(),
            pages: KVec::with_capacity(count, GFP_KERNEL)?,
            dma: KVec::with_capacity(count, GFP_KERNEL)?,
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

    /// Copies `len` bytes (at most the buffer's length) from user memory into the
    /// pinned pages: a reply from a server process on this node.
    pub(crate) fn copy_from_user(&self, reader: &mut UserSliceReader, len: usize) -> Result {
        let len = len.min(self.len);
        let mut done = 0;
        for (i, &page) in self.pages.iter().enumerate() {
            if done >= len {
                break;
            }
            let skip = if i == 0 { self.head } else { 0 };
            let take = (PAGE_SIZE - skip).min(len - done);
            // SAFETY: a pinned page has a kernel address (no highmem where we build).
            let base = unsafe { ffi::lite_page_address(page) }.cast::<u8>();
            // SAFETY: `skip + take <= PAGE_SIZE`, inside the pinned page, which only
            // `read_raw` (a copy_from_user) writes through here.
            let out = unsafe {
                core::slice::from_raw_parts_mut(
                    base.add(skip).cast::<core::mem::MaybeUninit<u8>>(),
                    take,
                )
            };
            reader.read_raw(out)?;
            done += take;
        }
        Ok(())
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
        for &dma in self.dma.iter() {
            // SAFETY: mapped in `pin` with the same direction.
            unsafe {
                ffi::lite_dma_unmap_page(self.dev.raw.as_ptr(), dma, user_dir(self.device_writes))
            };
        }
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

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: `self.raw` is live and owned by us; after this call it is freed and no
        // completion callback refers to it any more.
        unsafe { ffi::lite_qp_destroy(self.raw.as_ptr()) };
    }
}

/// Physically contiguous kernel memory mapped for the device, reachable by peers
/// through the global MR. Freed (and unmapped) on drop: the owner drops it only
/// once no posted work request or peer write can touch it any more.
pub(crate) struct DmaBuf {
    dev: Arc<Device>,
    ptr: NonNull<u8>,
    dma: u64,
    size: usize,
    /// A pinned page of a process (LT_register) instead of kernel-allocated memory.
    user_page: Option<NonNull<c_void>>,
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

/// Byte-level access to LMR chunks, which several processes, peers (through the
/// global MR) and the device touch concurrently, like any RDMA-exposed memory: all
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
