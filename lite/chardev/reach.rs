// SPDX-License-Identifier: GPL-2.0
//! `LITE_IOC_REACH`, built only for the debug test suite (`lite_test_hooks`): raw
//! RDMA to a peer with any address and key, past every check of the module, and
//! a canary page outside every LMR, so that the tests see what the peer's NIC
//! lets through (with `remote_access=chunks`: only live ranges under their keys);
//! and RPC replies held in their handler, to race the next call on their slot.

use crate::lmr::FileLmrs;
use crate::net::polling::Wait;
use crate::node::Lite;
use crate::uapi::*;
use crate::uarg::{read_in, reserved_zero, write_out};
use crate::verbs::{Atomic, DmaBuf, PAGE_SIZE};
use kernel::prelude::*;
use kernel::sync::Mutex;

/// What an open file keeps for `LITE_IOC_REACH`: its canary page, until close.
pub(crate) struct FileReach {
    canary: Option<DmaBuf>,
}

impl FileReach {
    pub(crate) fn new() -> Self {
        FileReach { canary: None }
    }
}

pub(super) fn ioctl(
    lite: &Lite,
    lmrs: &Mutex<FileLmrs>,
    reach: &Mutex<FileReach>,
    arg: usize,
) -> Result {
    let mut req: LiteReach = read_in(arg)?;
    reserved_zero(&[req.reserved])?;
    let len = req.len as usize;
    let data_op = matches!(req.op, LITE_REACH_READ | LITE_REACH_WRITE);
    if data_op && (len == 0 || len > LITE_REACH_DATA) {
        return Err(EINVAL);
    }
    match req.op {
        LITE_REACH_EXTENT => {
            let (mapping, _) = lmrs.lock().get(req.lh)?;
            let extent = mapping.extents.get(req.index as usize).ok_or(EINVAL)?;
            req.node = extent.node;
            req.addr = extent.addr;
            req.rkey = extent.rkey;
            req.len = u32::try_from(extent.len).map_err(|_| EINVAL)?;
        }
        LITE_REACH_CANARY => {
            let mut file = reach.lock();
            if file.canary.is_none() {
                let page = DmaBuf::new(&lite.net.device()?, PAGE_SIZE)?;
                page.fill(0, PAGE_SIZE, LITE_REACH_CANARY_BYTE)?;
                file.canary = Some(page);
            }
            req.addr = file.canary.as_ref().map_or(0, DmaBuf::dma);
            req.len = PAGE_SIZE as u32;
        }
        LITE_REACH_READ => {
            let buf = DmaBuf::new(&lite.net.device()?, len)?;
            lite.net
                .peer(req.node)?
                .rdma_kernel(false, &buf, 0, len, req.addr, req.rkey)?;
            buf.read(0, &mut req.data[..len])?;
        }
        LITE_REACH_WRITE => {
            let buf = DmaBuf::new(&lite.net.device()?, len)?;
            buf.write_bytes(0, &req.data[..len])?;
            lite.net
                .peer(req.node)?
                .rdma_write_kernel(&buf, 0, len, req.addr, req.rkey)?;
        }
        LITE_REACH_ATOMIC => {
            let old = lite.net.peer(req.node)?.atomic(
                Atomic::FetchAdd(1),
                req.addr,
                req.rkey,
                Wait::Sleep,
            )?;
            req.data[..8].copy_from_slice(&old.to_ne_bytes());
        }
        LITE_REACH_HOLD_REPLIES => {
            crate::rpc::REPLY_HOLD_MS.store(req.len, core::sync::atomic::Ordering::Relaxed);
        }
        _ => return Err(EINVAL),
    }
    write_out(arg, &req)
}
