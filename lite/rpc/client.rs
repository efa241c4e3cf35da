// SPDX-License-Identifier: GPL-2.0
//! The client side, per peer (`RpcPeer`): a binding per RPC id called there,
//! with this node's view of its ring, and the call slots holding what each call
//! in flight owns until its completion record arrives.

use super::file::FileRpc;
use super::phases::{CallStamps, Caller};
use super::ring::{self, ClientRing, Reservation, RING_BYTES};
use super::{jiffies_until, wait_result, CALLS_PER_FILE, HEAD_POLL_MS};
use crate::errno::ENOTCONN;
use crate::errno::{EHOSTDOWN, ETIMEDOUT};
use crate::lmr::layout::Extent;
use crate::net::wire::{
    self, Body, Bound, MsgKind, Reader, RpcBind, RpcUnbind, BINDINGS, CALL_SLOTS,
};
use crate::net::Peer;
use crate::net::PeerServices;
use crate::verbs::{DmaBuf, RemoteKey, UserPages};
use core::any::Any;
use kernel::prelude::*;
use kernel::sync::{
    new_condvar, new_mutex, new_spinlock, Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLock,
};
use kernel::time::msecs_to_jiffies;

/// This node's binding to one RPC id at a peer: its view of the ring there.
#[pin_data]
pub(crate) struct ClientBinding {
    id: u32,
    /// The binding's index at the server (in every immediate).
    pub(crate) index: u32,
    /// The ring's chunks in ring order (`start` is the ring offset).
    pub(crate) extents: KVec<Extent>,
    #[pin]
    pub(crate) state: SpinLock<ClientState>,
    #[pin]
    pub(crate) changed: CondVar,
}

pub(crate) struct ClientState {
    pub(crate) ring: ClientRing,
    /// Records reserved whose call has not ended.
    pub(crate) users: u32,
    /// The server unbound it, or a post failed: new calls bind anew.
    dead: bool,
}

impl ClientBinding {
    /// Reserves `len` bytes of ring, waiting for room (and asking the server how
    /// far it consumed) until `deadline`.
    pub(crate) fn reserve(&self, peer: &Peer, len: u64, deadline: u64) -> Result<Reservation> {
        loop {
            {
                let mut st = self.state.lock();
                if st.dead {
                    return Err(EAGAIN);
                }
                if let Some(r) = st.ring.reserve(len) {
                    st.users += 1;
                    return Ok(r);
                }
                let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
                let poll = msecs_to_jiffies(HEAD_POLL_MS);
                if let CondVarTimeoutResult::Signal { .. } = self
                    .changed
                    .wait_interruptible_timeout(&mut st, if left < poll { left } else { poll })
                {
                    return Err(EINTR);
                }
            }
            let query = RpcUnbind {
                binding: self.index,
                id: self.id,
            };
            let mut answer = [0u8; 8];
            if peer.request(MsgKind::RpcHead, &query, &mut answer).is_ok() {
                self.head_reported(u64::from_le_bytes(answer));
            }
        }
    }

    pub(crate) fn head_reported(&self, head: u64) {
        if self.state.lock().ring.set_head(head) {
            self.changed.notify_all();
        }
    }

    /// The server pushed a head report. It carries only a ring offset, and it may
    /// arrive after a reply that reported a later head (another QP): read as a
    /// position, a late one looks a whole lap ahead. So it only wakes a caller
    /// waiting for room, which asks the server for its head (`reserve`).
    pub(crate) fn head_report_arrived(&self) {
        self.changed.notify_all();
    }

    /// A call that reserved ring room ended.
    pub(crate) fn put_user(&self) {
        let mut st = self.state.lock();
        st.users = st.users.saturating_sub(1);
        drop(st);
        self.changed.notify_all();
    }

    pub(crate) fn kill(&self) {
        self.state.lock().dead = true;
        self.changed.notify_all();
    }

    fn is_dead(&self) -> bool {
        self.state.lock().dead
    }
}

/// Where a reply goes.
pub(crate) enum Output {
    None,
    /// The caller's pages, pinned until the call ends.
    User(UserPages),
    /// A kernel caller's buffer.
    Kernel(Arc<DmaBuf>),
}

/// What a call in flight owns until its completion record arrives.
pub(crate) struct Call {
    pub(crate) seq: u64,
    pub(crate) waiter: Arc<FileRpc>,
    pub(crate) user_slot: usize,
    pub(crate) binding: Arc<ClientBinding>,
    /// The server's key to `output` (for a reply too large to ride inline),
    /// revoked before the output is let go.
    pub(crate) reply_key: Option<RemoteKey>,
    /// Kept mapped until the reply: the RNIC writes it, or the reply came inline
    /// and is copied into it.
    pub(crate) output: Output,
    /// The posted header (and payload): the RNIC reads it until the request lands.
    pub(crate) _stage: Arc<DmaBuf>,
    /// A user's call: its class and when it was made, for its round trip.
    pub(crate) timed: Option<(u32, u64)>,
    /// When it passed each phase until it was posted.
    pub(crate) stamps: CallStamps,
}

impl Call {
    /// Who made it: only a user's call is timed for its class.
    pub(crate) fn caller(&self) -> Caller {
        if self.timed.is_some() {
            Caller::User
        } else {
            Caller::Kernel
        }
    }
}

enum CallSlot {
    Free,
    /// Reserved by a call being posted.
    Claimed,
    Active(KBox<Call>),
}

struct CallTable {
    slots: [CallSlot; CALL_SLOTS],
    next_seq: u64,
    failed: bool,
}

/// RPC state this node keeps per peer, as a client.
#[pin_data]
pub(crate) struct RpcPeer {
    #[pin]
    calls: SpinLock<CallTable>,
    #[pin]
    call_freed: CondVar,
    #[pin]
    bindings: SpinLock<KVec<Arc<ClientBinding>>>,
    /// Serializes binding to an id, so that two callers do not both bind.
    #[pin]
    bind_lock: Mutex<()>,
}

/// Net holds our RPC state with each peer without knowing it, and tells it when
/// the peer fails.
impl PeerServices for RpcPeer {
    fn peer_failed(&self) {
        self.fail_all();
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl RpcPeer {
    /// Our RPC state with `peer`; ENOTCONN for a peer without it (loopback).
    pub(crate) fn of(peer: &Peer) -> Result<&RpcPeer> {
        peer.services()
            .and_then(|services| services.as_any().downcast_ref())
            .ok_or_else(ENOTCONN)
    }

    pub(crate) fn new() -> impl PinInit<RpcPeer> {
        pin_init!(RpcPeer {
            calls <- new_spinlock!(
                CallTable { slots: core::array::from_fn(|_| CallSlot::Free), next_seq: 1, failed: false },
                "lite:rpc.calls"
            ),
            call_freed <- new_condvar!("lite:rpc.call_freed"),
            bindings <- new_spinlock!(KVec::new(), "lite:rpc.bindings"),
            bind_lock <- new_mutex!((), "lite:rpc.bind"),
        })
    }

    fn find(&self, id: u32) -> Option<Arc<ClientBinding>> {
        self.bindings
            .lock()
            .iter()
            .find(|b| b.id == id && !b.is_dead())
            .cloned()
    }

    pub(crate) fn by_index(&self, index: u32) -> Option<Arc<ClientBinding>> {
        self.bindings
            .lock()
            .iter()
            .find(|b| b.index == index)
            .cloned()
    }

    /// The live binding to `id` at `peer`, binding first if needed.
    pub(crate) fn binding(&self, peer: &Peer, id: u32) -> Result<Arc<ClientBinding>> {
        if let Some(b) = self.find(id) {
            return Ok(b);
        }
        let _bind = self.bind_lock.lock();
        if let Some(b) = self.find(id) {
            return Ok(b);
        }
        let mut answer = KVec::from_elem(0u8, wire::BODY_MAX, GFP_KERNEL)?;
        let len = peer.request(MsgKind::RpcBind, &RpcBind { id }, &mut answer)?;
        let bound = Bound::decode(&mut Reader::new(&answer[..len])).ok_or(EIO)?;
        let mut extents = KVec::with_capacity(bound.count as usize, GFP_KERNEL)?;
        let mut size = 0u64;
        for &(addr, len, rkey) in bound.chunks.get(..bound.count as usize).ok_or(EIO)? {
            if len == 0 || len % ring::RECORD_ALIGN != 0 {
                return Err(EIO);
            }
            extents.push(
                Extent {
                    node: peer.id,
                    start: size,
                    addr,
                    len,
                    rkey,
                },
                GFP_KERNEL,
            )?;
            size = size.checked_add(len).ok_or(EIO)?;
        }
        if bound.binding as usize >= BINDINGS
            || !(ring::MAX_RECORD * 2..=2 * RING_BYTES).contains(&size)
        {
            return Err(EIO);
        }
        let binding = Arc::pin_init(
            pin_init!(ClientBinding {
                id,
                index: bound.binding,
                extents,
                state <- new_spinlock!(
                    ClientState { ring: ClientRing::new(size, bound.head), users: 0, dead: false },
                    "lite:rpc.binding"
                ),
                changed <- new_condvar!("lite:rpc.binding.changed"),
            }),
            GFP_KERNEL,
        )?;
        let mut list = self.bindings.lock();
        // Dead bindings whose calls all ended are forgotten here.
        let mut i = 0;
        while i < list.len() {
            let done = {
                let st = list[i].state.lock();
                st.dead && st.users == 0
            };
            if done {
                crate::kvec::swap_remove(&mut list, i);
            } else {
                i += 1;
            }
        }
        list.push(binding.clone(), GFP_ATOMIC)?;
        Ok(binding)
    }

    /// Claims a call slot, waiting for one until `deadline`. A call outlives its
    /// caller's timeout until the server answers: `caller` (none for a message)
    /// gets EAGAIN while it has `CALLS_PER_FILE` calls there, so that no process
    /// can take every slot to this peer from the others.
    pub(crate) fn claim(&self, deadline: u64, caller: Option<&FileRpc>) -> Result<(usize, u64)> {
        let mut table = self.calls.lock();
        loop {
            if table.failed {
                return Err(EHOSTDOWN());
            }
            if let Some(file) = caller {
                let mine = table.slots.iter().filter(
                    |s| matches!(s, CallSlot::Active(c) if core::ptr::eq(&*c.waiter, file)),
                );
                if mine.count() >= CALLS_PER_FILE {
                    return Err(EAGAIN);
                }
            }
            if let Some(slot) = table.slots.iter().position(|s| matches!(s, CallSlot::Free)) {
                let seq = table.next_seq;
                table.next_seq += 1;
                table.slots[slot] = CallSlot::Claimed;
                return Ok((slot, seq));
            }
            let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
            wait_result(self.call_freed.wait_interruptible_timeout(&mut table, left))?;
        }
    }

    pub(crate) fn unclaim(&self, slot: usize) {
        self.calls.lock().slots[slot] = CallSlot::Free;
        self.call_freed.notify_all();
    }

    /// Makes a claimed slot active; false when the peer failed meanwhile.
    pub(crate) fn activate(
        &self,
        slot: usize,
        call: KBox<Call>,
    ) -> core::result::Result<(), KBox<Call>> {
        let mut table = self.calls.lock();
        if table.failed {
            return Err(call);
        }
        table.slots[slot] = CallSlot::Active(call);
        Ok(())
    }

    /// Takes the call in `slot` if it is `seq` (any when `None`), freeing the slot.
    pub(crate) fn take(&self, slot: usize, seq: Option<u64>) -> Option<KBox<Call>> {
        let mut table = self.calls.lock();
        let matches = match table.slots.get(slot)? {
            CallSlot::Active(call) => seq.map_or(true, |s| s == call.seq),
            _ => false,
        };
        if !matches {
            return None;
        }
        let CallSlot::Active(call) = core::mem::replace(&mut table.slots[slot], CallSlot::Free)
        else {
            return None;
        };
        drop(table);
        self.call_freed.notify_all();
        Some(call)
    }

    /// The peer is unreachable: every call fails, every binding dies. Its QPs are
    /// in error or gone, so nothing writes into the callers' buffers any more.
    pub(crate) fn fail_all(&self) {
        self.calls.lock().failed = true;
        for slot in 0..CALL_SLOTS {
            if let Some(call) = self.take(slot, None) {
                end_call(call, Err(EHOSTDOWN()));
            }
        }
        let list = core::mem::take(&mut *self.bindings.lock());
        for b in list.iter() {
            b.kill();
        }
        self.call_freed.notify_all();
    }

    /// Calls in flight (abandoned ones included) and live bindings.
    pub(crate) fn counts(&self) -> (u32, u32) {
        let calls = self
            .calls
            .lock()
            .slots
            .iter()
            .filter(|s| !matches!(s, CallSlot::Free))
            .count() as u32;
        let bindings = self.bindings.lock().iter().filter(|b| !b.is_dead()).count() as u32;
        (calls, bindings)
    }
}

impl Output {
    /// Copies a reply that came inline (with its completion record) into the
    /// caller's buffer; EIO when it does not fit, as no honest server sends.
    pub(crate) fn fill(&mut self, reply: &[u8]) -> Result {
        if reply.is_empty() {
            return Ok(());
        }
        match self {
            Output::None => Err(EIO),
            Output::User(pages) => pages.fill(reply).map_err(|_| EIO),
            Output::Kernel(buf) => buf.write_bytes(0, reply).map_err(|_| EIO),
        }
    }
}

/// Ends a call taken out of its slot: the ring room is released, the caller told,
/// and then what the call held let go (its key revoked, its pages unpinned).
/// Returns when the result was there for the caller (ns).
pub(crate) fn end_call(call: KBox<Call>, result: Result<u64>) -> u64 {
    call.binding.put_user();
    call.waiter.complete(call.user_slot, call.seq, result)
}
