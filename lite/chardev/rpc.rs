// SPDX-License-Identifier: GPL-2.0
//! The RPC family of /dev/lite ioctls: serving ids, calls and messages, waiting
//! for a call, receiving and replying, the in-kernel benchmark and statistics.

use crate::compat::user_slice;
use crate::errno::{ECONNRESET, EMSGSIZE};
use crate::iobuf::{Sink, Source};
use crate::node::Lite;
use crate::rpc::{Caller, FileRpc, Received};
use crate::uapi::*;
use crate::uarg::{read_in, reserved_zero, write_out};
use core::mem::size_of;
use kernel::prelude::*;
use kernel::sync::Arc;

/// Longest RPC timeout a caller may ask for.
const RPC_MAX_TIMEOUT_MS: u32 = LITE_RPC_MAX_TIMEOUT_MS;

/// Serves the RPC ioctl `cmd` with its argument at `arg`; ENOTTY for any other.
pub(super) fn ioctl(lite: &Lite, rpc: &Arc<FileRpc>, cmd: u32, arg: usize) -> Result {
    match cmd {
        LITE_IOC_RPC_REGISTER | LITE_IOC_RPC_UNREGISTER => {
            let req: LiteRpcId = read_in(arg)?;
            reserved_zero(&[req.reserved])?;
            if cmd == LITE_IOC_RPC_REGISTER {
                lite.rpc.register(rpc, req.id)
            } else {
                lite.rpc.unregister(rpc, req.id)
            }
        }
        LITE_IOC_RPC_CALL => {
            let mut req: LiteRpcCall = read_in(arg)?;
            // A call cannot be taken back once sent (its slot shows it until its deadline).
            write_out(arg, &req)?;
            let class = lite.net.qos.current_class();
            req.seq = lite.rpc.call(rpc, &req, class)?;
            lite.net.qos.account(class, req.input_len, None);
            write_out(arg, &req)
        }
        LITE_IOC_WAIT => {
            let req: LiteWait = read_in(arg)?;
            reserved_zero(&[req.reserved])?;
            if let Some(ns) = rpc.wait(req.slot as usize)? {
                lite.rpc.caller_woke(Caller::User, ns);
            }
            Ok(())
        }
        LITE_IOC_RPC_RECV => {
            let mut req: LiteRpcRecv = read_in(arg)?;
            write_out(arg, &req)?;
            let received = recv(lite, rpc, &mut req);
            written_back(lite, rpc, received, req.token, || write_out(arg, &req))
        }
        LITE_IOC_RPC_REPLY => {
            let req: LiteRpcReply = read_in(arg)?;
            lite.rpc
                .reply(rpc, req.token, user_source(req.buf, req.len)?)
        }
        LITE_IOC_RPC_REPLY_RECV => {
            let mut req: LiteRpcReplyRecv = read_in(arg)?;
            write_out(arg, &req)?;
            let reply = req.reply;
            lite.rpc
                .reply(rpc, reply.token, user_source(reply.buf, reply.len)?)?;
            let received = recv(lite, rpc, &mut req.recv);
            written_back(lite, rpc, received, req.recv.token, || write_out(arg, &req))
        }
        LITE_IOC_RPC_BENCH => {
            let mut req: LiteRpcBench = read_in(arg)?;
            if req.count == 0
                || req.count > LITE_PING_MAX_COUNT
                || req.timeout_ms == 0
                || req.timeout_ms > RPC_MAX_TIMEOUT_MS
            {
                return Err(EINVAL);
            }
            let out =
                user_slice(req.rtt_ns as usize, req.count as usize * size_of::<u64>()).writer();
            req.reply_len = lite.rpc.bench(&req, out)?;
            write_out(arg, &req)
        }
        LITE_IOC_RPC_STAT => write_out(arg, &lite.rpc.stat()?),
        _ => Err(ENOTTY),
    }
}

/// A receive's out fields go back on success, and on EOVERFLOW (they tell the
/// size). A request received but whose token cannot be told fails its caller.
fn written_back(
    lite: &Lite,
    rpc: &FileRpc,
    result: Result,
    token: u64,
    write: impl FnOnce() -> Result,
) -> Result {
    match result {
        Ok(()) => write().inspect_err(|_| {
            if token != 0 {
                lite.rpc.abandon(rpc, token, ECONNRESET());
            }
        }),
        Err(e) if e == crate::errno::EOVERFLOW() => write().and(Err(e)),
        Err(e) => Err(e),
    }
}

/// LITE_IOC_RPC_RECV: fills the out fields of `req`; EOVERFLOW (with `len`
/// written back) when the request does not fit the buffer.
fn recv(lite: &Lite, rpc: &FileRpc, req: &mut LiteRpcRecv) -> Result {
    if req.timeout_ms == 0 || req.timeout_ms > RPC_MAX_TIMEOUT_MS {
        return Err(EINVAL);
    }
    let into = Sink::User {
        addr: usize::try_from(req.buf).map_err(|_| EFAULT)?,
        len: usize::try_from(req.buf_len).map_err(|_| EINVAL)?,
    };
    let (got, delivered): (Received, bool) = lite.rpc.recv(rpc, req.id, into, req.timeout_ms)?;
    req.len = got.len;
    req.token = got.token;
    req.node = got.node;
    req.flags = got.flags;
    req.reply_capacity = got.capacity;
    if delivered {
        Ok(())
    } else {
        Err(crate::errno::EOVERFLOW())
    }
}

/// A reply of `len` bytes at user address `buf`.
fn user_source(buf: u64, len: u64) -> Result<Source<'static>> {
    Ok(Source::User {
        addr: usize::try_from(buf).map_err(|_| EFAULT)?,
        len: usize::try_from(len).map_err(|_| EMSGSIZE())?,
    })
}
