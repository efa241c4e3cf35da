// SPDX-License-Identifier: GPL-2.0
//! `Qp`: an RC QP, its connection, and posting on it: writes with immediate
//! (`WriteImm`), RDMA reads and writes, and atomics (`Atomic`).

use super::{DmaBuf, Op, Pacing};
use crate::ffi;
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;

/// An RC QP. Dropping it drains every outstanding work request, then destroys it.
pub(crate) struct Qp {
    pub(in crate::verbs) raw: NonNull<ffi::lite_qp>,
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

    /// Waits, on a device that connects through the RDMA CM, for `peer`'s
    /// connection to this QP: the passive side (`peer` and `me` are node id and
    /// epoch). The connection's outcome comes as `lite_rust_qp_connected`.
    pub(crate) fn cm_expect(&self, peer: (u32, u64), me: (u32, u64)) -> Result {
        // SAFETY: `self.raw` is live.
        to_result(unsafe { ffi::lite_qp_cm_expect(self.raw.as_ptr(), peer.0, peer.1, me.0, me.1) })
    }

    /// Starts the connection of this QP to `peer`'s, whose address is `gid`, through
    /// the RDMA CM: the active side. The outcome comes as `lite_rust_qp_connected`.
    pub(crate) fn cm_connect(&self, gid: &[u8; 16], me: (u32, u64), peer: (u32, u64)) -> Result {
        // SAFETY: `self.raw` is live; `gid` points to 16 readable bytes.
        to_result(unsafe {
            ffi::lite_qp_cm_connect(self.raw.as_ptr(), gid.as_ptr(), me.0, me.1, peer.0, peer.1)
        })
    }

    /// Sends this side's hello through the RDMA CM connection (the passive side's
    /// answer; the active side's goes when the connection is established).
    pub(crate) fn cm_hello(&self) -> Result {
        // SAFETY: `self.raw` is live.
        to_result(unsafe { ffi::lite_qp_cm_hello(self.raw.as_ptr()) })
    }

    /// Ends the QP's RDMA CM connection, if any, and waits until none of its CM
    /// events runs any more (each may call back into the QP's peer).
    pub(crate) fn end_cm(&self) {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_qp_cm_end(self.raw.as_ptr()) };
    }

    /// Error state: the QP neither sends nor accepts anything more; what is posted
    /// on it is flushed.
    pub(crate) fn to_error(&self) -> Result {
        // SAFETY: `self.raw` is live.
        to_result(unsafe { ffi::lite_qp_to_error(self.raw.as_ptr()) })
    }

    /// Moves the QP to error and waits until every work request posted and every
    /// packet the NIC took in before has been processed (its flushes reaped).
    /// Process context, not a completion handler of this QP's CQs.
    pub(crate) fn drain(&self) {
        // SAFETY: `self.raw` is live.
        unsafe { ffi::lite_qp_drain(self.raw.as_ptr()) };
    }

    /// `IB_QPS_*` of the QP.
    pub(crate) fn state(&self) -> Result<u32> {
        // SAFETY: `self.raw` is live.
        let state = unsafe { ffi::lite_qp_state(self.raw.as_ptr()) };
        to_result(state.min(0))?;
        Ok(state as u32)
    }

    /// Posts an RDMA write with immediate of `data` (under the peer's key `rkey` for
    /// the range), counted in `op` when given.
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
    /// `remote_addr` of the peer, counted in `op`, paced as `pacing` says (a paced
    /// one's place must be this QP's device's). The memory behind `sges` must stay
    /// mapped until `op.wait()` returns.
    pub(crate) fn post_rdma(
        &self,
        op: &Op,
        write: bool,
        sges: &[ffi::lite_sge],
        remote_addr: u64,
        rkey: u32,
        pacing: Pacing<'_>,
    ) -> Result {
        let pacing = match pacing {
            Pacing::Exempt => ffi::LITE_PACING_EXEMPT,
            Pacing::Unpaced => ffi::LITE_PACING_UNPACED,
            Pacing::Paced(place) => {
                // Given back on the work request's completion or failure to post.
                place.hand_over();
                ffi::LITE_PACING_PACED
            }
        };
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
                pacing as i32,
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

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: `self.raw` is live and owned by us; after this call it is freed and no
        // completion callback refers to it any more.
        unsafe { ffi::lite_qp_destroy(self.raw.as_ptr()) };
    }
}
