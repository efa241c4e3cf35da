// SPDX-License-Identifier: GPL-2.0
//! Completion context: a record landed in one of our rings, the completion
//! record of one of our calls landed, or a server reported its ring's head.

use super::client::end_call;
use super::error_of;
use super::ring::{FLAG_ABANDONED, FLAG_ONEWAY};
use super::server::{answer, Request};
use super::RpcNode;
use super::RpcPeer;
use super::{now_ns, QUEUE_MAX};
use crate::errno::{ECONNREFUSED, EOVERFLOW};
use crate::net::wire;
use crate::net::Peer;
use kernel::prelude::*;
use kernel::sync::Arc;

impl RpcNode {
    /// An RPC record from `peer` landed in one of our rings.
    pub(crate) fn on_rpc_request(&self, peer: &Arc<Peer>, payload: u32) {
        let (index, offset) = wire::decode_ring_imm(payload);
        let Some(binding) = self.binding(index).filter(|b| Arc::ptr_eq(&b.peer, peer)) else {
            return;
        };
        // A record that is malformed or out of place cannot even be answered.
        let Some(header) = binding.record(offset) else {
            pr_warn!("node {} wrote a malformed RPC record; ignored\n", peer.id);
            return;
        };
        if header.flags & FLAG_ABANDONED != 0 {
            // Its payload never came: only its room is taken back.
            return binding.consume(&header);
        }
        let refuse = |err: Error| {
            if header.flags & FLAG_ONEWAY == 0 {
                let _ = answer(peer, &binding, header.slot, header.seq, Err(err));
            }
            binding.consume(&header);
        };
        let Some(server) = self.server(binding.id) else {
            return refuse(ECONNREFUSED());
        };
        let request = Request::Remote {
            peer: peer.clone(),
            binding: binding.clone(),
            header,
        };
        let queued = {
            let mut q = server.queue.lock();
            if q.closed {
                Err(ECONNREFUSED())
            } else if q.requests.len() >= QUEUE_MAX {
                Err(EAGAIN)
            } else {
                q.requests.push(request, GFP_ATOMIC).map_err(|_| ENOMEM)
            }
        };
        match queued {
            Ok(()) => server.arrived.notify_all(),
            Err(e) => refuse(e),
        }
    }

    /// The completion record of our call in `slot` to `peer` landed.
    pub(crate) fn on_rpc_reply(&self, peer: &Peer, slot: usize) {
        let handled = now_ns();
        let Some(done) = peer.read_done(slot) else {
            return;
        };
        let Ok(calls) = RpcPeer::of(peer) else {
            return;
        };
        // Copied while the call still holds its slot: once `take` frees it, the next
        // call there may be answered, and its reply land over this one.
        let inline = match done.status {
            0 => read_inline_reply(peer, slot, done.len),
            _ => Ok(KVec::new()),
        };
        let Some(mut call) = calls.take(slot, Some(done.seq)) else {
            return;
        };
        #[cfg(lite_test_hooks)]
        hold_reply();
        if call.binding.index == done.binding {
            call.binding.head_reported(done.head);
        }
        let result = match done.status {
            0 => {
                if let Some((class, started)) = call.timed {
                    self.net
                        .qos
                        .call_returned(class, now_ns().saturating_sub(started));
                }
                inline
                    .and_then(|reply| call.output.fill(&reply))
                    .map(|()| done.len)
            }
            status if error_of(status) == EOVERFLOW() => {
                call.binding.put_user();
                call.waiter
                    .complete_overflow(call.user_slot, call.seq, done.len);
                return;
            }
            status => Err(error_of(status)),
        };
        let answered = result.is_ok().then_some((call.caller(), call.stamps));
        let published = end_call(call, result);
        if let Some((caller, stamps)) = answered {
            self.call_answered(caller, &stamps, [handled, published, now_ns()]);
        }
    }

    /// A server reports how far it consumed one of our rings.
    pub(crate) fn on_rpc_head(&self, peer: &Peer, payload: u32) {
        let (index, _offset) = wire::decode_ring_imm(payload);
        if let Some(binding) = RpcPeer::of(peer)
            .ok()
            .and_then(|calls| calls.by_index(index as u32))
        {
            binding.head_report_arrived();
        }
    }
}

/// How long each reply's handling waits once its slot is free (ms), for the debug
/// suite's `LITE_REACH_HOLD_REPLIES`.
#[cfg(lite_test_hooks)]
pub(crate) static REPLY_HOLD_MS: core::sync::atomic::AtomicU32 =
    core::sync::atomic::AtomicU32::new(0);

#[cfg(lite_test_hooks)]
fn hold_reply() {
    let ms = REPLY_HOLD_MS.load(core::sync::atomic::Ordering::Relaxed);
    if ms > 0 {
        // SAFETY: the receive CQ's work item: process context, no lock held. Its
        // result (a fatal signal) cannot concern a kernel worker.
        let _ = unsafe { crate::ffi::lite_sleep_ns(u64::from(ms) * 1_000_000) };
    }
}

/// A successful reply of at most `REPLY_INLINE_MAX` bytes followed its record in
/// the mailbox: its bytes. A larger one is in the caller's buffer already (none
/// here).
fn read_inline_reply(peer: &Peer, slot: usize, len: u64) -> Result<KVec<u8>> {
    let Some(len) = usize::try_from(len)
        .ok()
        .filter(|&len| len <= wire::REPLY_INLINE_MAX)
    else {
        return Ok(KVec::new());
    };
    let mut reply = KVec::from_elem(0u8, len, GFP_KERNEL)?;
    peer.read_inline_reply(slot, &mut reply)?;
    Ok(reply)
}
