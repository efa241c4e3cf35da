// SPDX-License-Identifier: GPL-2.0
//! Safe wrappers over the C verbs helpers: an RDMA device and its RC QPs.

use crate::ffi;
use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Arc;

/// `IB_PORT_ACTIVE`.
pub(crate) const PORT_ACTIVE: u32 = 4;

/// One RDMA device with its PD, global MR and CQs (owned by the C side, which
/// creates them before `lite_rust_dev_added` and frees them after `lite_rust_dev_release`).
pub(crate) struct Device {
    raw: NonNull<ffi::lite_dev>,
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
        let cname = unsafe { kernel::str::CStr::from_char_ptr(ffi::lite_dev_name(raw.as_ptr()).cast()) };
        let bytes = cname.as_bytes();
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

    /// Creates an RC QP in INIT with `recv_depth` receives posted. Completions call
    /// back with (`peer`, `index`), so `peer` must stay valid until the QP is dropped.
    pub(crate) fn create_qp(&self, peer: *const c_void, index: u32, recv_depth: u32) -> Result<Qp> {
        let mut err = 0;
        // SAFETY: `self.raw` is valid; `peer` is only stored and handed back to our callbacks.
        let raw = unsafe {
            ffi::lite_qp_create(self.raw.as_ptr(), peer as *mut c_void, index, recv_depth, &mut err)
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Qp { raw }),
            None => Err(Error::from_errno(err)),
        }
    }
}

/// An RC QP. Dropping it drains every outstanding work request, then destroys it.
pub(crate) struct Qp {
    raw: NonNull<ffi::lite_qp>,
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
    pub(crate) fn connect(&self, remote: &RemoteQp<'_>, sgid_index: i32, local_psn: u32, mtu: u32) -> Result {
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

    /// `IB_QPS_*` of the QP.
    pub(crate) fn state(&self) -> Result<u32> {
        // SAFETY: `self.raw` is live.
        let state = unsafe { ffi::lite_qp_state(self.raw.as_ptr()) };
        to_result(state.min(0))?;
        Ok(state as u32)
    }

    /// Posts an RDMA write with immediate of `src[offset..offset + len]` to the peer's
    /// `remote_addr` (its global rkey `rkey`).
    pub(crate) fn post_write_imm(&self, src: &DmaBuf, offset: usize, len: usize, remote_addr: u64, rkey: u32, imm: u32) -> Result {
        let (dma, len) = src.range(offset, len)?;
        // SAFETY: `self.raw` is live; `dma..dma + len` lies inside `src`, which the caller
        // keeps alive until the QP is drained (see `Peer::shutdown`).
        to_result(unsafe { ffi::lite_qp_post_write_imm(self.raw.as_ptr(), dma, len, remote_addr, rkey, imm) })
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
}

// SAFETY: the buffer is plain memory; access to its contents goes through `&mut self`
// or explicit byte copies made by the owner under its own locking.
unsafe impl Send for DmaBuf {}
// SAFETY: see `Send`.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    pub(crate) fn new(dev: &Arc<Device>, size: usize) -> Result<DmaBuf> {
        let mut dma = 0;
        // SAFETY: `dev.raw` is a registered device; `dma` is a local.
        let ptr = unsafe { ffi::lite_dma_buf_alloc(dev.raw.as_ptr(), size as _, &mut dma) };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(ENOMEM)?;
        Ok(DmaBuf { dev: dev.clone(), ptr, dma, size })
    }

    /// DMA address of the start of the buffer.
    pub(crate) fn dma(&self) -> u64 {
        self.dma
    }

    fn range(&self, offset: usize, len: usize) -> Result<(u64, u32)> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok((self.dma + offset as u64, len as u32)),
            _ => Err(EINVAL),
        }
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer, after the device's writes.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        let (dma, len) = self.range(offset, out.len())?;
        // SAFETY: the range is inside the buffer (checked); the device is registered.
        unsafe {
            ffi::lite_dma_sync_for_cpu(self.dev.raw.as_ptr(), dma, len);
            core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len());
        }
        Ok(())
    }

    /// Copies `data` into the buffer at `offset` and hands the range to the device.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) -> Result {
        let (dma, len) = self.range(offset, data.len())?;
        // SAFETY: as in `read`; `&mut self` makes this the only CPU access.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len());
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dma, len);
        }
        Ok(())
    }
}

impl DmaBuf {
    /// Copies `len` bytes from `src` at `src_offset` to `dst_offset` of this buffer.
    pub(crate) fn copy_from(&mut self, dst_offset: usize, src: &DmaBuf, src_offset: usize, len: usize) -> Result {
        let (src_dma, sync_len) = src.range(src_offset, len)?;
        let (dst_dma, _) = self.range(dst_offset, len)?;
        // SAFETY: both ranges are inside their buffers (checked); `&mut self` and `&src`
        // are distinct buffers, so the ranges cannot overlap.
        unsafe {
            ffi::lite_dma_sync_for_cpu(src.dev.raw.as_ptr(), src_dma, sync_len);
            core::ptr::copy_nonoverlapping(src.ptr.as_ptr().add(src_offset), self.ptr.as_ptr().add(dst_offset), len);
            ffi::lite_dma_sync_for_device(self.dev.raw.as_ptr(), dst_dma, sync_len);
        }
        Ok(())
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `lite_dma_buf_alloc` with this size and mapping.
        unsafe { ffi::lite_dma_buf_free(self.dev.raw.as_ptr(), self.ptr.as_ptr().cast(), self.size as _, self.dma) };
    }
}
