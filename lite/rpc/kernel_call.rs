// SPDX-License-Identifier: GPL-2.0
//! The in-kernel caller: RPCs issued by kernel code, which LITE_IOC_RPC_BENCH
//! times without the crossings of a user-space caller.

use super::call::{Input, OutputSpec, Sender};
use super::error_of;
use super::file::FileRpc;
use super::phases::Caller;
use super::ring::MAX_MSG;
use super::RpcNode;
use crate::compat::now_ns;
use crate::errno::EMSGSIZE;
use crate::kvec::caller_sized;
use crate::uapi::*;
use crate::verbs::DmaBuf;
use kernel::prelude::*;
use kernel::sync::Arc;

impl RpcNode {
    /// One RPC from kernel code: `input` to `id` at `node`, the reply (at most
    /// `out.len()` bytes) copied to `out`. Returns the reply's length.
    pub(crate) fn kernel_rpc(
        &self,
        waiter: &Arc<FileRpc>,
        node: u32,
        id: u32,
        input: &[u8],
        reply: Option<&Arc<DmaBuf>>,
        timeout_ms: u32,
    ) -> Result<u64> {
        let output = reply.map_or(OutputSpec::None, |buf| OutputSpec::Kernel(buf.clone()));
        let seq = self.post_call(
            node,
            id,
            Input::Kernel(input),
            output,
            Sender {
                file: waiter,
                slot: Some(0),
                class: None,
            },
            timeout_ms,
        )?;
        if let Some(ns) = waiter.wait(0)? {
            self.caller_woke(Caller::Kernel, ns);
        }
        let (status, len, done_seq) = waiter.page.result(0);
        if done_seq != seq {
            return Err(EIO);
        }
        match status {
            0 => Ok(len),
            status => Err(error_of(status)),
        }
    }

    /// LITE_IOC_RPC_BENCH: `count` kernel-issued calls, each one's time to `out`.
    pub(crate) fn bench(
        &self,
        req: &LiteRpcBench,
        mut out: kernel::uaccess::UserSliceWriter,
    ) -> Result<u64> {
        if req.request_len > MAX_MSG || req.reply_capacity > MAX_MSG {
            return Err(EMSGSIZE());
        }
        let waiter = FileRpc::new()?;
        let input = KVec::from_elem(0x5Au8, req.request_len as usize, caller_sized())?;
        let dev = self.net.device()?;
        // No reply buffer for a capacity of 0: the call expects an empty reply.
        let reply = match req.reply_capacity {
            0 => None,
            capacity => Some(Arc::new(DmaBuf::new(&dev, capacity as usize)?, GFP_KERNEL)?),
        };
        let mut last = 0;
        for _ in 0..req.count {
            let start = now_ns();
            last = self.kernel_rpc(
                &waiter,
                req.node,
                req.id,
                &input,
                reply.as_ref(),
                req.timeout_ms,
            )?;
            out.write(&(now_ns() - start))?;
        }
        Ok(last)
    }
}
