// SPDX-License-Identifier: GPL-2.0
//! /dev/lite: per-open state, the shared page and ioctl dispatch. Every argument
//! comes from an untrusted process: sizes, reserved fields and ranges are checked
//! here before anything reaches the cluster code.

use crate::errno::ECONNRESET;
use crate::ffi;
use crate::lmr::{FileLmrs, MallocArgs};
use crate::net::verbs::Atomic;
use crate::node::Lite;
use crate::rpc::{FileRpc, Received};
use crate::sync::FileLocks;
use crate::uapi::*;
use core::mem::size_of;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

macro_rules! plain_abi_types {
    ($($t:ty),*) => {$(
        // SAFETY: `repr(C)` structs of integers and integer arrays with explicit padding
        // (their sizes are asserted in uapi): every bit pattern is valid, no byte is padding.
        unsafe impl FromBytes for $t {}
        // SAFETY: as above, no uninitialized padding can leak to user space.
        unsafe impl AsBytes for $t {}
    )*};
}
plain_abi_types!(
    LiteInfo,
    LiteJoin,
    LiteConnInfo,
    LitePeerPrepare,
    LitePeerConnect,
    LitePeerDown,
    LitePeerStatus,
    LitePeerList,
    LitePing,
    LiteMalloc,
    LiteMap,
    LiteHandle,
    LiteGrant,
    LiteRw,
    LiteMemset,
    LiteMemcpy,
    LiteLmrStat,
    LiteMemStat,
    LiteRegister,
    LiteReserve,
    LiteRpcId,
    LiteRpcCall,
    LiteWait,
    LiteRpcRecv,
    LiteRpcReply,
    LiteRpcReplyRecv,
    LiteRpcBench,
    LiteRpcStat,
    LiteAtomic,
    LiteLock,
    LiteBarrier,
    LiteQos,
    LiteClassRule,
    LiteClassRules,
    LiteClassSelf,
    LiteClassStat,
    LiteQosStat
);

/// Longest wait for one ping reply that a caller may ask for.
const PING_MAX_TIMEOUT_MS: u32 = 60_000;

/// Longest RPC timeout a caller may ask for.
const RPC_MAX_TIMEOUT_MS: u32 = LITE_RPC_MAX_TIMEOUT_MS;

/// Identifies open files for the class choices made through them.
static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

/// State of one open file of /dev/lite.
pub(crate) struct OpenFile {
    id: u64,
    /// Handles of this open file and the LMRs it masters.
    lmrs: Pin<KBox<Mutex<FileLmrs>>>,
    /// The shared page, calls in flight, servers and owed replies.
    rpc: Arc<FileRpc>,
    /// Locks this file holds.
    locks: Pin<KBox<Mutex<FileLocks>>>,
}

impl OpenFile {
    pub(crate) fn new() -> Result<KBox<OpenFile>> {
        let lmrs = KBox::pin_init(new_mutex!(FileLmrs::new(), "lite:file.lmrs"), GFP_KERNEL)?;
        let rpc = FileRpc::new()?;
        let locks = KBox::pin_init(new_mutex!(FileLocks::new(), "lite:file.locks"), GFP_KERNEL)?;
        let id = NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed);
        Ok(KBox::new(
            OpenFile {
                id,
                lmrs,
                rpc,
                locks,
            },
            GFP_KERNEL,
        )?)
    }

    /// Last close: the locks it holds pass on, every handle goes, the LMRs this
    /// file mastered are freed, the ids it served are unregistered, the replies
    /// it owed fail and the class its process chose for itself lapses.
    pub(crate) fn release(&self, lite: &Lite) {
        lite.qos.file_closed(self.id);
        lite.locks_release_file(&self.locks);
        lite.rpc_release(&self.rpc);
        lite.file_release(&self.lmrs);
    }

    /// Kernel address of the shared page, for mmap.
    pub(crate) fn shared_page(&self) -> *mut core::ffi::c_void {
        self.rpc.shared_page()
    }

    /// Every command that acts and then writes its result back first writes the
    /// argument back unchanged: one whose memory is not writable fails with EFAULT
    /// before acting. Where the final write can still fail (another thread unmapped
    /// the memory meanwhile), what was made is undone.
    pub(crate) fn ioctl(&self, lite: &Lite, cmd: u32, arg: usize) -> Result<isize> {
        self.rpc.count_crossing();
        match cmd {
            LITE_IOC_INFO => write_out(arg, &lite.info()),
            LITE_IOC_JOIN => {
                require_admin()?;
                let join: LiteJoin = read_in(arg)?;
                reserved_zero(&[join.reserved])?;
                lite.join(join.node_id, join.epoch)
            }
            LITE_IOC_LEAVE => {
                require_admin()?;
                lite.leave();
                Ok(())
            }
            LITE_IOC_PEER_PREPARE => {
                require_admin()?;
                let mut prep: LitePeerPrepare = read_in(arg)?;
                reserved_zero(&[prep.reserved])?;
                let (local, created) = lite.prepare_peer(prep.peer_id, prep.peer_epoch)?;
                prep.local = local;
                prep.created = created as u32;
                write_out(arg, &prep)
            }
            LITE_IOC_PEER_CONNECT => {
                require_admin()?;
                let conn: LitePeerConnect = read_in(arg)?;
                reserved_zero(&[conn.reserved])?;
                lite.connect_peer(conn.peer_id, conn.peer_epoch, &conn.remote)
            }
            LITE_IOC_PEER_DOWN => {
                require_admin()?;
                let down: LitePeerDown = read_in(arg)?;
                reserved_zero(&[down.reserved])?;
                lite.peer_down(down.peer_id)
            }
            LITE_IOC_PEERS => {
                let mut list: LitePeerList = read_in(arg)?;
                let peers = lite.peers()?;
                let shown = peers.len().min(list.capacity as usize);
                let mut out =
                    UserSlice::new(list.entries as usize, shown * size_of::<LitePeerStatus>())
                        .writer();
                for status in &peers[..shown] {
                    out.write(status)?;
                }
                list.count = peers.len() as u32;
                write_out(arg, &list)
            }
            LITE_IOC_PING => {
                let ping: LitePing = read_in(arg)?;
                if ping.payload > LITE_PING_MAX_PAYLOAD {
                    return Err(EINVAL);
                }
                if ping.count == 0 || ping.count > LITE_PING_MAX_COUNT {
                    return Err(EINVAL);
                }
                if ping.timeout_ms == 0 || ping.timeout_ms > PING_MAX_TIMEOUT_MS {
                    return Err(EINVAL);
                }
                let out =
                    UserSlice::new(ping.rtt_ns as usize, ping.count as usize * size_of::<u64>())
                        .writer();
                lite.ping(
                    ping.node,
                    ping.count,
                    ping.timeout_ms,
                    ping.payload as usize,
                    out,
                )
            }
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
                req.lh = lite.lmr_malloc(&self.lmrs, &args)?;
                write_out(arg, &req).inspect_err(|_| {
                    let _ = lite.lmr_free(&self.lmrs, req.lh);
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
                req.lh = lite.lmr_register(&self.lmrs, buf, &args)?;
                write_out(arg, &req).inspect_err(|_| {
                    let _ = lite.lmr_free(&self.lmrs, req.lh);
                })
            }
            LITE_IOC_MAP => {
                let mut req: LiteMap = read_in(arg)?;
                write_out(arg, &req)?;
                (req.lh, req.size) =
                    lite.lmr_map(&self.lmrs, req.namespace, &req.name, req.perm)?;
                write_out(arg, &req).inspect_err(|_| {
                    let _ = lite.lmr_unmap(&self.lmrs, req.lh);
                })
            }
            LITE_IOC_UNMAP => {
                let lh = read_in::<LiteHandle>(arg)?.lh;
                if lite.locks_held_through(&self.locks, lh) {
                    return Err(EBUSY);
                }
                lite.lmr_unmap(&self.lmrs, lh)
            }
            LITE_IOC_FREE => lite.lmr_free(&self.lmrs, read_in::<LiteHandle>(arg)?.lh),
            LITE_IOC_GRANT => {
                let req: LiteGrant = read_in(arg)?;
                lite.lmr_grant(&self.lmrs, req.lh, req.node, req.perm)
            }
            LITE_IOC_READ | LITE_IOC_WRITE => {
                let req: LiteRw = read_in(arg)?;
                let buf = usize::try_from(req.buf).map_err(|_| EFAULT)?;
                lite.lmr_rw(
                    &self.lmrs,
                    req.lh,
                    req.offset,
                    buf,
                    req.len,
                    cmd == LITE_IOC_WRITE,
                )
            }
            LITE_IOC_MEMSET => {
                let req: LiteMemset = read_in(arg)?;
                reserved_zero(&[req.reserved])?;
                lite.lmr_memset(&self.lmrs, req.lh, req.offset, req.len, req.value)
            }
            LITE_IOC_MEMCPY => {
                let req: LiteMemcpy = read_in(arg)?;
                lite.lmr_memcpy(
                    &self.lmrs,
                    req.dst_lh,
                    req.dst_offset,
                    req.src_lh,
                    req.src_offset,
                    req.len,
                )
            }
            LITE_IOC_MEM_STAT => write_out(arg, &lite.mem_stat()),
            LITE_IOC_RESERVE => {
                require_admin()?;
                lite.set_reserve(read_in::<LiteReserve>(arg)?.bytes)
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
                req.old = lite.lmr_atomic(&self.lmrs, req.lh, req.offset, atomic)?;
                write_out(arg, &req)
            }
            LITE_IOC_LOCK => {
                let req: LiteLock = read_in(arg)?;
                reserved_zero(&[req.reserved])?;
                match req.op {
                    LITE_LOCK_ACQUIRE => {
                        lite.lock_acquire(&self.lmrs, &self.locks, req.lh, req.offset)
                    }
                    LITE_LOCK_RELEASE => lite.lock_release(&self.locks, req.lh, req.offset),
                    _ => Err(EINVAL),
                }
            }
            LITE_IOC_BARRIER => {
                let req: LiteBarrier = read_in(arg)?;
                if !(1..=LITE_BARRIER_MAX_PARTICIPANTS).contains(&req.participants)
                    || !(1..=LITE_BARRIER_MAX_TIMEOUT_MS).contains(&req.timeout_ms)
                {
                    return Err(EINVAL);
                }
                lite.barrier(
                    &self.lmrs,
                    req.lh,
                    req.offset,
                    req.participants,
                    req.timeout_ms,
                )
            }
            LITE_IOC_RPC_REGISTER | LITE_IOC_RPC_UNREGISTER => {
                let req: LiteRpcId = read_in(arg)?;
                reserved_zero(&[req.reserved])?;
                if cmd == LITE_IOC_RPC_REGISTER {
                    lite.rpc_register(&self.rpc, req.id)
                } else {
                    lite.rpc_unregister(&self.rpc, req.id)
                }
            }
            LITE_IOC_RPC_CALL => {
                let mut req: LiteRpcCall = read_in(arg)?;
                // A call cannot be taken back once sent (its slot shows it until its deadline).
                write_out(arg, &req)?;
                req.seq = lite.rpc_call(&self.rpc, &req)?;
                lite.qos.account_current(req.input_len);
                write_out(arg, &req)
            }
            LITE_IOC_WAIT => {
                let req: LiteWait = read_in(arg)?;
                reserved_zero(&[req.reserved])?;
                self.rpc.wait(req.slot as usize)
            }
            LITE_IOC_RPC_RECV => {
                let mut req: LiteRpcRecv = read_in(arg)?;
                write_out(arg, &req)?;
                let received = self.recv(lite, &mut req);
                self.written_back(lite, received, req.token, || write_out(arg, &req))
            }
            LITE_IOC_RPC_REPLY => {
                let req: LiteRpcReply = read_in(arg)?;
                lite.rpc_reply(
                    &self.rpc,
                    req.token,
                    usize::try_from(req.buf).map_err(|_| EFAULT)?,
                    req.len,
                )
            }
            LITE_IOC_RPC_REPLY_RECV => {
                let mut req: LiteRpcReplyRecv = read_in(arg)?;
                write_out(arg, &req)?;
                let reply = req.reply;
                lite.rpc_reply(
                    &self.rpc,
                    reply.token,
                    usize::try_from(reply.buf).map_err(|_| EFAULT)?,
                    reply.len,
                )?;
                let received = self.recv(lite, &mut req.recv);
                self.written_back(lite, received, req.recv.token, || write_out(arg, &req))
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
                    UserSlice::new(req.rtt_ns as usize, req.count as usize * size_of::<u64>())
                        .writer();
                req.reply_len = lite.rpc_bench(&req, out)?;
                write_out(arg, &req)
            }
            LITE_IOC_RPC_STAT => write_out(arg, &lite.rpc_stat()?),
            LITE_IOC_LMR_STAT => {
                let req: LiteLmrStat = read_in(arg)?;
                write_out(arg, &lite.lmr_stat(&self.lmrs, req.lh)?)
            }
            LITE_IOC_QOS_GET => write_out(arg, &lite.qos.get()),
            LITE_IOC_QOS_SET => {
                require_admin()?;
                lite.qos.set(&read_in(arg)?)
            }
            LITE_IOC_CLASS_RULE_ADD | LITE_IOC_CLASS_RULE_DEL => {
                require_admin()?;
                let rule: LiteClassRule = read_in(arg)?;
                if cmd == LITE_IOC_CLASS_RULE_ADD {
                    lite.qos.rule_add(&rule)
                } else {
                    lite.qos.rule_del(&rule)
                }
            }
            LITE_IOC_CLASS_RULES => {
                let mut list: LiteClassRules = read_in(arg)?;
                let rules = lite.qos.rules()?;
                let shown = rules.len().min(list.capacity as usize);
                let mut out =
                    UserSlice::new(list.entries as usize, shown * size_of::<LiteClassRule>())
                        .writer();
                for rule in &rules[..shown] {
                    out.write(rule)?;
                }
                list.count = rules.len() as u32;
                write_out(arg, &list)
            }
            LITE_IOC_CLASS_SELF => {
                let req: LiteClassSelf = read_in(arg)?;
                reserved_zero(&[req.source])?;
                write_out(arg, &req)?;
                write_out(arg, &lite.qos.choose(self.id, req.class)?)
            }
            LITE_IOC_QOS_STAT => write_out(arg, &lite.qos.stat()),
            _ => Err(ENOTTY),
        }
        .map(|()| 0)
    }
}

impl OpenFile {
    /// A receive's out fields go back on success, and on EOVERFLOW (they tell the
    /// size). A request received but whose token cannot be told fails its caller.
    fn written_back(
        &self,
        lite: &Lite,
        result: Result,
        token: u64,
        write: impl FnOnce() -> Result,
    ) -> Result {
        match result {
            Ok(()) => write().inspect_err(|_| {
                if token != 0 {
                    lite.rpc_abandon(&self.rpc, token, ECONNRESET());
                }
            }),
            Err(e) if e == crate::errno::EOVERFLOW() => write().and(Err(e)),
            Err(e) => Err(e),
        }
    }

    /// LITE_IOC_RPC_RECV: fills the out fields of `req`; EOVERFLOW (with `len`
    /// written back) when the request does not fit the buffer.
    fn recv(&self, lite: &Lite, req: &mut LiteRpcRecv) -> Result {
        if req.timeout_ms == 0 || req.timeout_ms > RPC_MAX_TIMEOUT_MS {
            return Err(EINVAL);
        }
        let buf = usize::try_from(req.buf).map_err(|_| EFAULT)?;
        let (got, delivered): (Received, bool) =
            lite.rpc_recv(&self.rpc, req.id, buf, req.buf_len, req.timeout_ms)?;
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
}

fn read_in<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(arg, size_of::<T>()).reader().read()
}

fn write_out<T: AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(arg, size_of::<T>()).writer().write(value)
}

/// Reserved fields must be zero so that they can gain a meaning later.
fn reserved_zero(fields: &[u32]) -> Result {
    if fields.iter().all(|&f| f == 0) {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

/// Membership, priority rules and the reserve are for operators, not for applications.
fn require_admin() -> Result {
    // SAFETY: `capable()` only inspects the current task's credentials.
    if unsafe { ffi::lite_capable_net_admin() } != 0 {
        Ok(())
    } else {
        Err(EPERM)
    }
}
