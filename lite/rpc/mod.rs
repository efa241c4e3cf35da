// SPDX-License-Identifier: GPL-2.0
//! RPC and one-way messages (LITE §5): rings written with write-with-immediate,
//! replies written straight into the caller's buffer, and the shared-page slots
//! through which a process learns that its call completed.
//!
//! Client side (per peer, `RpcPeer`): a *binding* per RPC id called there, with
//! the client's view of its ring at the server; `CALL_SLOTS` call slots, each
//! holding what a call in flight owns (pinned output pages, staged header) until
//! its completion record arrives. Server side (node-wide, `RpcNode`): the
//! registered servers with their queues of received requests, and the bindings
//! (client node, id) with their rings.
//!
//! A request: the client reserves room in the ring, writes the payload (zero-copy
//! from the caller's pages, or staged when small), then the record header and the
//! caller's output runs with a write-with-immediate naming (binding, offset). The
//! server queues it; a server process receives it (payload copied to its buffer,
//! the ring space consumed) and replies with a write-with-immediate of a
//! completion record into the caller's mailbox, which also reports how far the
//! ring is consumed. A reply of up to `REPLY_INLINE_MAX` bytes rides in that
//! record and the caller's kernel copies it out; a larger one is first written
//! with RDMA WRITEs into the caller's output runs. Nothing waits for
//! credit in completion context; a client without ring room waits (and asks the
//! server for its head), so nothing is dropped or overwritten.
//!
//! Locking: every lock here is a spinlock taken alone or in this order:
//! `RpcNode::servers` -> `Server::queue`; `RpcNode::bindings`,
//! `ServerBinding::ring`, `RpcPeer::calls`, `RpcPeer::bindings`,
//! `ClientBinding::state` and `FileRpc::slots` are leaves. Messages to peers and
//! pinning happen with none held.
//!
//! - `ring`: the ring's record layout and both ends' accounting (pure, host-tested).
//! - `page`: the shared page a process maps.
//! - `file`: an open file's RPC state (`FileRpc`).
//! - `client`: per peer, the bindings to its ids and the call slots (`RpcPeer`).
//! - `call`: LT_RPC and LT_send, to a peer or to a server on this node.
//! - `server`: node-wide, the servers, their queues and rings (`RpcNode`).
//! - `receive`: a server process registers, receives and replies.
//! - `completion`: records, replies and head reports landing (completion context).
//! - `serve`: bind, head and unbind requests from peers.
//! - `kernel_call`: calls from kernel code (LITE_IOC_RPC_BENCH).
//! - `phases`: where calls spend their time (`LiteRpcStat::call_phases`).

mod call;
mod client;
mod completion;
mod file;
mod kernel_call;
mod page;
mod phases;
mod receive;
pub(crate) mod ring;
mod serve;
mod server;

pub(crate) use client::RpcPeer;
#[cfg(lite_test_hooks)]
pub(crate) use completion::REPLY_HOLD_MS;
pub(crate) use file::FileRpc;
pub(crate) use phases::Caller;
pub(crate) use server::{Received, RpcNode};

use crate::compat::now_ns;
use crate::net::wire::CALL_SLOTS;
use crate::uapi::*;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::CondVarTimeoutResult;
use kernel::time::msecs_to_jiffies;
use ring::{FLAG_ONEWAY, MAX_MSG, RING_BYTES};

/// Requests up to this size (record header, output runs and payload) are staged
/// in one buffer and posted as one write-with-immediate; larger payloads go
/// zero-copy from the caller's pages first.
const INLINE_MAX: usize = 4096;
/// A client without ring room asks the server for its head this often.
const HEAD_POLL_MS: u32 = 10;
/// Smallest ring chunk tried when memory is fragmented.
const RING_CHUNK_MIN: u64 = 64 << 10;

const SLOTS: usize = LITE_SLOTS as usize;
/// Calls one open file may have in flight to one peer, of the node's `CALL_SLOTS`:
/// a quarter stays for the node's other processes.
const CALLS_PER_FILE: usize = CALL_SLOTS * 3 / 4;
/// Requests one server's queue holds; past it, EAGAIN (a message from another
/// node is refused with it).
const QUEUE_MAX: usize = 4096;
/// RPC ids one open file, and the whole node, may serve.
const IDS_PER_FILE: usize = 256;
const IDS_PER_NODE: usize = 4096;

/// Kernel memory that requests from processes on this node may hold in servers'
/// queues until received: per sending file as much as one remote client's ring
/// (which bounds a remote sender), and for the whole node. Past either, EAGAIN.
const LOCAL_FILE_MAX: u64 = RING_BYTES;
const LOCAL_NODE_MAX: u64 = 64 << 20;
/// What a queued local request costs beyond its payload (the request, its queue entry).
const LOCAL_REQUEST_COST: u64 = 256;
/// Bytes queued in local requests on this node.
static LOCAL_QUEUED: AtomicU64 = AtomicU64::new(0);

/// Adds `bytes` to `counter` unless that takes it past `max`.
fn charge(counter: &AtomicU64, bytes: u64, max: u64) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            queued.checked_add(bytes).filter(|&n| n <= max)
        })
        .is_ok()
}
const _: () = assert!(MAX_MSG == LITE_RPC_MAX_MSG && FLAG_ONEWAY == LITE_RPC_ONEWAY);
const _: () = assert!(core::mem::size_of::<LiteSharedPage>() == 4096);

/// An error as a completion status (a positive errno).
fn status_of(err: Error) -> u32 {
    err.to_errno().unsigned_abs()
}

fn error_of(status: u32) -> Error {
    Error::from_errno(-(status.min(4095) as i32))
}

/// Jiffies left until `deadline` (ns), at least one; `None` once it passed.
fn jiffies_until(deadline: u64) -> Option<kernel::time::Jiffies> {
    let now = now_ns();
    if now >= deadline {
        return None;
    }
    let ms = ((deadline - now) / 1_000_000).min(u32::MAX as u64) as u32;
    Some(msecs_to_jiffies(ms.max(1)))
}

fn wait_result(result: CondVarTimeoutResult) -> Result {
    match result {
        CondVarTimeoutResult::Signal { .. } => Err(EINTR),
        _ => Ok(()),
    }
}

impl RpcNode {
    /// LITE_IOC_RPC_STAT.
    pub(crate) fn stat(&self) -> Result<LiteRpcStat> {
        let mut stat = LiteRpcStat {
            servers: self.servers.lock().iter().count() as u32,
            ..Default::default()
        };
        {
            let table = self.bindings.lock();
            for b in table.iter().flatten() {
                stat.rings += 1;
                stat.ring_bytes += b.size();
            }
        }
        for peer in self.net.connected_peers()?.iter() {
            if let Ok(rpc) = RpcPeer::of(peer) {
                let (calls, bindings) = rpc.counts();
                stat.calls += calls;
                stat.bindings += bindings;
            }
        }
        let servers = {
            let servers = self.servers.lock();
            let mut out = KVec::new();
            for (_, s) in servers.iter() {
                out.push(s.clone(), GFP_ATOMIC)?;
            }
            out
        };
        for s in servers.iter() {
            stat.requests += s.queue.lock().requests.len() as u32;
        }
        stat.call_phases = *self.call_phases.lock();
        Ok(stat)
    }

    /// A call from `caller` that was stamped `stamps` got its reply: `after` are
    /// when its reply was handled, its result in the caller's slot and what it
    /// held let go (ns).
    fn call_answered(&self, caller: Caller, stamps: &phases::CallStamps, after: [u64; 3]) {
        stamps.add_to(&mut self.call_phases.lock()[caller as usize], after);
    }

    /// A `caller` that slept for its call's result ran again `ns` after it was there.
    pub(crate) fn caller_woke(&self, caller: Caller, ns: u64) {
        phases::add_wakeup(&mut self.call_phases.lock()[caller as usize], ns);
    }
}
