// SPDX-License-Identifier: GPL-2.0
//! The LMR family of /dev/lite ioctls: allocating, mapping and freeing LMRs,
//! one-sided operations through handles, and the node's memory.

use crate::iobuf::{Sink, Source, Transfer};
use crate::lmr::{erange, FileLmrs, MallocArgs};
use crate::node::Lite;
use crate::uapi::*;
use crate::uarg::{read_in, require_admin, reserved_zero, write_out};
use crate::verbs::Atomic;
use kernel::prelude::*;
use kernel::sync::Mutex;

/// Serves the LMR ioctl `cmd` with its argument at `arg`; ENOTTY for any other.
/// `locked(lh)`: whether the file holds a lock through handle `lh`, which must
/// then stay mapped.
pub(super) fn ioctl(
    lite: &Lite,
    lmrs: &Mutex<FileLmrs>,
    locked: impl Fn(u64) -> bool,
    cmd: u32,
    arg: usize,
) -> Result {
    match cmd {
        LITE_IOC_MALLOC => {
            let mut req: LiteMalloc = read_in(arg)?;
            reserved_zero(&[req.reserved])?;
            let args = MallocArgs {
                size: req.size,
                nodes: req.nodes,
                perm: req.perm,
                namespace: req.namespace,
                name: req.name,
            };
            write_out(arg, &req)?;
            req.lh = lite.lmr.malloc(lmrs, &args)?;
            write_out(arg, &req).inspect_err(|_| {
                let _ = lite.lmr.free(lmrs, req.lh);
            })
        }
        LITE_IOC_REGISTER => {
            let mut req: LiteRegister = read_in(arg)?;
            let buf = usize::try_from(req.buf).map_err(|_| EFAULT)?;
            let args = MallocArgs {
                size: req.len,
                nodes: 0,
                perm: req.perm,
                namespace: req.namespace,
                name: req.name,
            };
            write_out(arg, &req)?;
            req.lh = lite.lmr.register(lmrs, buf, &args)?;
            write_out(arg, &req).inspect_err(|_| {
                let _ = lite.lmr.free(lmrs, req.lh);
            })
        }
        LITE_IOC_MAP => {
            let mut req: LiteMap = read_in(arg)?;
            write_out(arg, &req)?;
            (req.lh, req.size) = lite.lmr.map(lmrs, req.namespace, &req.name, req.perm)?;
            write_out(arg, &req).inspect_err(|_| {
                let _ = lite.lmr.unmap(lmrs, req.lh);
            })
        }
        LITE_IOC_UNMAP => {
            let lh = read_in::<LiteHandle>(arg)?.lh;
            if locked(lh) {
                return Err(EBUSY);
            }
            lite.lmr.unmap(lmrs, lh)
        }
        LITE_IOC_FREE => lite.lmr.free(lmrs, read_in::<LiteHandle>(arg)?.lh),
        LITE_IOC_GRANT => {
            let req: LiteGrant = read_in(arg)?;
            lite.lmr.grant(lmrs, req.lh, req.node, req.perm)
        }
        LITE_IOC_READ | LITE_IOC_WRITE => {
            let req: LiteRw = read_in(arg)?;
            let addr = usize::try_from(req.buf).map_err(|_| EFAULT)?;
            let len = usize::try_from(req.len).map_err(|_| erange())?;
            let io = if cmd == LITE_IOC_WRITE {
                Transfer::Write(Source::User { addr, len })
            } else {
                Transfer::Read(Sink::User { addr, len })
            };
            lite.lmr.rw(lmrs, req.lh, req.offset, io)
        }
        LITE_IOC_MEMSET => {
            let req: LiteMemset = read_in(arg)?;
            reserved_zero(&[req.reserved])?;
            lite.lmr
                .memset(lmrs, req.lh, req.offset, req.len, req.value)
        }
        LITE_IOC_MEMCPY => {
            let req: LiteMemcpy = read_in(arg)?;
            lite.lmr.memcpy(
                lmrs,
                req.dst_lh,
                req.dst_offset,
                req.src_lh,
                req.src_offset,
                req.len,
            )
        }
        LITE_IOC_MEM_STAT => {
            let (lock_queued, barrier_queued) = lite.locks.queued();
            let stat = LiteMemStat {
                lock_queued,
                barrier_queued,
                ..lite.lmr.mem_stat()
            };
            write_out(arg, &stat)
        }
        LITE_IOC_RESERVE => {
            require_admin()?;
            lite.lmr.set_reserve(read_in::<LiteReserve>(arg)?.bytes)
        }
        LITE_IOC_ATOMIC => {
            let mut req: LiteAtomic = read_in(arg)?;
            let atomic = match req.op {
                LITE_ATOMIC_FETCH_ADD if req.swap == 0 => Atomic::FetchAdd(req.operand),
                LITE_ATOMIC_COMPARE_SWAP => Atomic::CompareSwap {
                    expected: req.operand,
                    new: req.swap,
                },
                _ => return Err(EINVAL),
            };
            if req.reserved != 0 {
                return Err(EINVAL);
            }
            write_out(arg, &req)?;
            req.old = lite.lmr.atomic(lmrs, req.lh, req.offset, atomic)?;
            write_out(arg, &req)
        }
        LITE_IOC_LMR_STAT => {
            let req: LiteLmrStat = read_in(arg)?;
            write_out(arg, &lite.lmr.stat(lmrs, req.lh)?)
        }
        _ => Err(ENOTTY),
    }
}
