// SPDX-License-Identifier: GPL-2.0
//! Kernel-to-kernel messages: each peer's mailbox (a request and a response slot
//! per request slot, RPC call slots), posting into it, the request slots a caller
//! waits in, and serving the peer's requests.

use crate::errno::{EHOSTDOWN, EOPNOTSUPP, ETIMEDOUT};
use crate::net::deadline;
use crate::net::wire::{self, Header, ImmKind, MsgKind, RpcDone, CALL_SLOTS, HEADER_LEN, SLOTS};
use crate::uapi::*;
use crate::verbs::{Op, WriteImm};
use crate::workqueue::module_queue;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, CondVarTimeoutResult};
use kernel::time::{msecs_to_jiffies, Jiffies};

use super::{Dispatch, Peer};

/// Generous bound for control requests (allocation of large chunks, memsets) on
/// slow (emulated, debug) kernels.
pub(crate) const CONTROL_TIMEOUT_MS: u32 = 30_000;

/// An error as the `status` of a message answer (a positive errno).
fn wire_status(err: Error) -> u16 {
    err.to_errno().unsigned_abs() as u16
}

/// Whether a signal ends a wait for an answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Patience {
    /// EINTR: the caller's process may be interrupted.
    Signals,
    /// Only the answer, the peer's failure or the timeout end it.
    ToTheEnd,
}

/// How long a wait that a signal cannot end sleeps before it looks again.
const SIGNAL_BACKOFF_MS: u32 = 5;

/// With a signal pending, an interruptible wait returns at once: sleep
/// uninterruptibly for a moment instead, counted against `left`.
fn back_off(left: &mut Jiffies) -> Result {
    let step = msecs_to_jiffies(SIGNAL_BACKOFF_MS);
    if *left <= step {
        return Err(ETIMEDOUT());
    }
    // SAFETY: sleeps the current task, which holds no spinlock (process context).
    unsafe { kernel::bindings::schedule_timeout_uninterruptible(step as _) };
    *left -= step;
    Ok(())
}

/// One request slot of ours at the peer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Free,
    /// Request `seq` sent, answer pending.
    Waiting(u64),
    /// The answer to `seq` is in our response slot.
    Answered(u64),
    /// The caller gave up on `seq`; the slot is reusable once its answer lands.
    Abandoned(u64),
}

pub(crate) struct Calls {
    pub(crate) slots: [Slot; SLOTS],
    pub(crate) next_seq: u64,
}

/// A request sent with `Peer::start_call` whose answer is still to be collected;
/// dropped uncollected, it gives its slot up.
pub(crate) struct PendingCall {
    peer: Arc<Peer>,
    slot: usize,
    seq: u64,
    /// Jiffies left to wait for the answer.
    left: Jiffies,
    collected: bool,
}

impl PendingCall {
    /// Waits for the answer and copies it into `reply`; returns its length.
    pub(crate) fn answer(self, reply: &mut [u8]) -> Result<usize> {
        self.collect(reply, Patience::Signals)
    }

    /// As [`Self::answer`], but a signal does not end the wait: for a request that
    /// leaves state at the peer (an allocation) which the caller must know of to
    /// undo it.
    pub(crate) fn answer_to_the_end(self, reply: &mut [u8]) -> Result<usize> {
        self.collect(reply, Patience::ToTheEnd)
    }

    fn collect(mut self, reply: &mut [u8], patience: Patience) -> Result<usize> {
        self.collected = true;
        self.peer
            .collect_answer(self.slot, self.seq, reply, &mut self.left, patience)
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if !self.collected {
            let mut calls = self.peer.calls.lock();
            Peer::give_up_slot(&mut calls, self.slot, self.seq);
            self.peer.call_done.notify_all();
        }
    }
}

/// Body of an outgoing message.
enum Body<'a> {
    /// Copied into the outbox slot now.
    Copy(&'a [u8]),
    /// Already in the outbox slot (an answer built in place).
    Staged,
}

impl Peer {
    /// Writes a message into the peer's mailbox slot `slot` (request or response
    /// area by `kind`) through QP `qp_index % K`, announcing it with immediate
    /// (`kind`, `slot`). `header.len` body bytes follow the header.
    fn post_message(
        &self,
        qp_index: usize,
        kind: ImmKind,
        slot: usize,
        header: &Header,
        body: Body<'_>,
    ) -> Result {
        let offset = match kind {
            ImmKind::Request => wire::request_offset(slot),
            ImmKind::Response => wire::response_offset(slot),
            // RPC immediates are posted by `post_write_imm`, `post_done`, `post_imm`.
            ImmKind::RpcRequest | ImmKind::RpcReply | ImmKind::RpcHead => return Err(EINVAL),
        };
        let imm = wire::encode_imm(kind, slot as u32).ok_or(EINVAL)?;
        let len = HEADER_LEN + header.len as usize;
        let header = header.encode();
        let staged: &[&[u8]] = match body {
            Body::Copy(bytes) => &[&header, bytes],
            Body::Staged => &[&header],
        };
        self.post_from_outbox(qp_index, offset, staged, len, imm)
    }

    /// Copies `staged` into our outbox at `offset` and posts a write-with-immediate
    /// of the `len` bytes there to the same offset of the peer's mailbox, through
    /// QP `hint % K`.
    fn post_from_outbox(
        &self,
        hint: usize,
        offset: usize,
        staged: &[&[u8]],
        len: usize,
        imm: u32,
    ) -> Result {
        let mut guard = self.link.lock();
        let link = &mut *guard;
        let (Some(remote), Some(mailbox)) = (link.remote, link.mailbox.as_mut()) else {
            return Err(EHOSTDOWN());
        };
        if link.state != LITE_PEER_CONNECTED || link.qps.is_empty() {
            return Err(EHOSTDOWN());
        }
        // Picked right after the check, where the compiler sees that `qps` is not empty.
        let qp = &link.qps[hint % link.qps.len()];
        let mut at = offset;
        for part in staged {
            mailbox.outbox.write(at, part)?;
            at += part.len();
        }
        let data = WriteImm {
            src: &mailbox.outbox,
            offset,
            len,
            remote_addr: remote.mailbox_addr + offset as u64,
        };
        qp.post_write_imm(&data, remote.mailbox_rkey, imm, None)
    }

    /// Writes the completion record of the peer's call in call slot `slot` into its
    /// mailbox, followed by `inline` (a reply of at most `REPLY_INLINE_MAX` bytes),
    /// announcing it with an `RpcReply` immediate, through QP `qp % K`. Both are
    /// staged in our outbox at the same offset: the peer reuses the slot only after
    /// it read this record, so the staging is never overwritten while in flight.
    pub(crate) fn post_done(
        &self,
        slot: usize,
        qp: usize,
        done: &RpcDone,
        inline: &[u8],
    ) -> Result {
        if slot >= CALL_SLOTS || inline.len() > wire::REPLY_INLINE_MAX {
            return Err(EINVAL);
        }
        let offset = wire::done_offset(slot);
        let imm = wire::encode_imm(ImmKind::RpcReply, slot as u32).ok_or(EINVAL)?;
        let len = RpcDone::LEN + inline.len();
        self.post_from_outbox(qp, offset, &[&done.encode(), inline], len, imm)
    }

    /// The completion record in our RPC call slot `slot`.
    pub(crate) fn read_done(&self, slot: usize) -> Option<RpcDone> {
        if slot >= CALL_SLOTS {
            return None;
        }
        let mut raw = [0u8; RpcDone::LEN];
        let link = self.link.lock();
        link.mailbox
            .as_ref()?
            .inbox
            .read(wire::done_offset(slot), &mut raw)
            .ok()?;
        Some(RpcDone::decode(&raw))
    }

    /// The reply that followed the completion record in call slot `slot`: the
    /// first `out.len()` bytes (at most `REPLY_INLINE_MAX`).
    pub(crate) fn read_inline_reply(&self, slot: usize, out: &mut [u8]) -> Result {
        if slot >= CALL_SLOTS || out.len() > wire::REPLY_INLINE_MAX {
            return Err(EINVAL);
        }
        let link = self.link.lock();
        let mailbox = link.mailbox.as_ref().ok_or_else(EHOSTDOWN)?;
        mailbox
            .inbox
            .read(wire::done_offset(slot) + RpcDone::LEN, out)
    }

    /// Posts a write-with-immediate of `data` (to an address the peer published,
    /// such as a ring, under `rkey`), on QP `hint % K`; with `sync`, waits until it
    /// landed.
    pub(crate) fn post_write_imm(
        &self,
        hint: usize,
        kind: ImmKind,
        payload: u32,
        data: &WriteImm<'_>,
        rkey: u32,
        sync: bool,
    ) -> Result {
        let imm = wire::encode_imm(kind, payload).ok_or(EINVAL)?;
        let op = if sync { Some(Op::new()?) } else { None };
        {
            let link = self.link.lock();
            if link.state != LITE_PEER_CONNECTED || link.qps.is_empty() {
                return Err(EHOSTDOWN());
            }
            let qp = &link.qps[hint % link.qps.len()];
            qp.post_write_imm(data, rkey, imm, op.as_ref())?;
        }
        match op {
            Some(op) => self
                .wait_alive(&op, deadline::allowance_ns(data.len as u64), |ns| {
                    op.wait_timeout(ns)
                })
                .map_err(|status| self.wc_error(status)),
            None => Ok(()),
        }
    }

    /// Posts an immediate without data (a head report), on QP `hint % K`.
    pub(crate) fn post_imm(&self, hint: usize, kind: ImmKind, payload: u32) -> Result {
        let imm = wire::encode_imm(kind, payload).ok_or(EINVAL)?;
        self.post_from_outbox(hint, 0, &[], 0, imm)
    }

    /// Reads the header a peer wrote at `offset` of our inbox.
    fn inbox_header(&self, offset: usize) -> Option<Header> {
        let link = self.link.lock();
        let mut raw = [0u8; HEADER_LEN];
        link.mailbox.as_ref()?.inbox.read(offset, &mut raw).ok()?;
        Header::decode(&raw).ok()
    }

    /// Sends request `kind` with `body` and waits up to `timeout_ms` for the answer,
    /// which is copied into `reply`. Returns the answer's length. Process context.
    pub(crate) fn call(
        &self,
        kind: MsgKind,
        body: &[u8],
        reply: &mut [u8],
        timeout_ms: u32,
    ) -> Result<usize> {
        self.call_with(kind, body, reply, timeout_ms, Patience::Signals)
    }

    /// As [`Self::call`], but a signal does not end the wait: for a request that
    /// changes state at the peer and must not be left in doubt (an atomic the
    /// holder executes), as a work request on a QP is waited for.
    pub(crate) fn call_to_the_end(
        &self,
        kind: MsgKind,
        body: &[u8],
        reply: &mut [u8],
        timeout_ms: u32,
    ) -> Result<usize> {
        self.call_with(kind, body, reply, timeout_ms, Patience::ToTheEnd)
    }

    fn call_with(
        &self,
        kind: MsgKind,
        body: &[u8],
        reply: &mut [u8],
        timeout_ms: u32,
        patience: Patience,
    ) -> Result<usize> {
        let mut left = msecs_to_jiffies(timeout_ms);
        let (slot, seq) = self.send_request(kind, body, &mut left, patience)?;
        self.collect_answer(slot, seq, reply, &mut left, patience)
    }

    /// Sends teardown message `kind` with `body` (its answer is empty) until the
    /// peer answers it with success, within `CONTROL_TIMEOUT_MS` whatever signals
    /// come: the caller frees memory the peer may write once it returns. An error
    /// answer means the peer is alive but could not serve it now (short of memory,
    /// its workqueue behind): it is asked again a moment later, since fencing a
    /// merely loaded node would cut every tenant off it. ETIMEDOUT or EHOSTDOWN
    /// when it never answered.
    pub(crate) fn call_until_done(&self, kind: MsgKind, body: &[u8]) -> Result {
        let mut left = msecs_to_jiffies(CONTROL_TIMEOUT_MS);
        loop {
            let answered = self
                .send_request(kind, body, &mut left, Patience::ToTheEnd)
                .and_then(|(slot, seq)| {
                    self.collect_answer(slot, seq, &mut [], &mut left, Patience::ToTheEnd)
                });
            match answered {
                Ok(_) => return Ok(()),
                Err(e) if e == EHOSTDOWN() || e == ETIMEDOUT() => return Err(e),
                Err(_) => back_off(&mut left)?,
            }
        }
    }

    /// Sends request `kind` with `body` to `peer` without waiting: the caller may ask
    /// other nodes meanwhile and collect the answer later (`PendingCall::answer`).
    pub(crate) fn start_call(
        peer: Arc<Peer>,
        kind: MsgKind,
        body: &[u8],
        timeout_ms: u32,
    ) -> Result<PendingCall> {
        let mut left = msecs_to_jiffies(timeout_ms);
        let (slot, seq) = peer.send_request(kind, body, &mut left, Patience::Signals)?;
        Ok(PendingCall {
            peer,
            slot,
            seq,
            left,
            collected: false,
        })
    }

    /// Waits up to `left` jiffies for the call-done signal; `left` keeps what remains.
    fn wait_for_calls<B: kernel::sync::lock::Backend>(
        &self,
        calls: &mut kernel::sync::lock::Guard<'_, Calls, B>,
        left: &mut Jiffies,
    ) -> Result {
        match self.call_done.wait_interruptible_timeout(calls, *left) {
            CondVarTimeoutResult::Timeout => Err(ETIMEDOUT()),
            CondVarTimeoutResult::Signal { .. } => Err(EINTR),
            CondVarTimeoutResult::Woken { jiffies } => {
                *left = jiffies;
                Ok(())
            }
        }
    }

    /// Takes a free request slot and posts the request in it; returns the slot and
    /// the request's sequence number.
    fn send_request(
        &self,
        kind: MsgKind,
        body: &[u8],
        left: &mut Jiffies,
        patience: Patience,
    ) -> Result<(usize, u64)> {
        let (slot, seq) = {
            let mut calls = self.calls.lock();
            loop {
                if self.failed.load(Ordering::Acquire) {
                    return Err(EHOSTDOWN());
                }
                if let Some(slot) = calls.slots.iter().position(|s| *s == Slot::Free) {
                    let seq = calls.next_seq;
                    calls.next_seq += 1;
                    calls.slots[slot] = Slot::Waiting(seq);
                    break (slot, seq);
                }
                match self.wait_for_calls(&mut calls, left) {
                    Err(e) if e == EINTR && patience == Patience::ToTheEnd => {
                        drop(calls);
                        back_off(left)?;
                        calls = self.calls.lock();
                    }
                    waited => waited?,
                }
            }
        };
        let header = Header {
            kind: kind as u16,
            status: 0,
            len: body.len() as u32,
            seq,
        };
        if let Err(e) = self.post_message(slot, ImmKind::Request, slot, &header, Body::Copy(body)) {
            self.finish_slot(slot);
            return Err(e);
        }
        Ok((slot, seq))
    }

    /// Waits up to `left` jiffies for the answer to request `seq` in `slot`, copies it
    /// into `reply` and frees the slot; returns the answer's length. On failure the
    /// slot is given up (`give_up_slot`).
    fn collect_answer(
        &self,
        slot: usize,
        seq: u64,
        reply: &mut [u8],
        left: &mut Jiffies,
        patience: Patience,
    ) -> Result<usize> {
        {
            let mut calls = self.calls.lock();
            while calls.slots[slot] != Slot::Answered(seq) {
                let mut outcome = if self.failed.load(Ordering::Acquire) {
                    Err(EHOSTDOWN())
                } else {
                    self.wait_for_calls(&mut calls, left)
                };
                if matches!(outcome, Err(e) if e == EINTR) && patience == Patience::ToTheEnd {
                    drop(calls);
                    outcome = back_off(left);
                    calls = self.calls.lock();
                }
                if let Err(e) = outcome {
                    Self::give_up_slot(&mut calls, slot, seq);
                    return Err(e);
                }
            }
        }
        let result = self.read_answer(slot, seq, reply);
        self.finish_slot(slot);
        result
    }

    /// Nobody will read the answer to `seq`: the slot is free at once if the answer
    /// already landed, else when it lands.
    fn give_up_slot(calls: &mut Calls, slot: usize, seq: u64) {
        match calls.slots[slot] {
            Slot::Answered(s) if s == seq => calls.slots[slot] = Slot::Free,
            Slot::Waiting(s) if s == seq => calls.slots[slot] = Slot::Abandoned(seq),
            _ => {}
        }
    }

    fn read_answer(&self, slot: usize, seq: u64, reply: &mut [u8]) -> Result<usize> {
        let offset = wire::response_offset(slot);
        let answer = self.inbox_header(offset).ok_or(EIO)?;
        if answer.seq != seq {
            return Err(EIO);
        }
        if answer.status != 0 {
            return Err(Error::from_errno(-i32::from(answer.status)));
        }
        let len = answer.len as usize;
        let out = reply.get_mut(..len).ok_or(EIO)?;
        let link = self.link.lock();
        link.mailbox
            .as_ref()
            .ok_or_else(EHOSTDOWN)?
            .inbox
            .read(offset + HEADER_LEN, out)?;
        Ok(len)
    }

    fn finish_slot(&self, slot: usize) {
        let mut calls = self.calls.lock();
        calls.slots[slot] = Slot::Free;
        self.call_done.notify_all();
    }

    /// The answer to our request in `slot` arrived (completion context).
    pub(crate) fn answer_arrived(&self, slot: usize) {
        let Some(answer) = self.inbox_header(wire::response_offset(slot)) else {
            return;
        };
        let mut calls = self.calls.lock();
        match calls.slots[slot] {
            Slot::Waiting(seq) if seq == answer.seq => calls.slots[slot] = Slot::Answered(seq),
            Slot::Abandoned(seq) if seq == answer.seq => calls.slots[slot] = Slot::Free,
            // Stale or forged: nothing waits for it.
            _ => return,
        }
        self.call_done.notify_all();
    }

    /// A request from the peer landed in our request `slot` through QP `qp_index`
    /// (completion context): serve it and answer in the peer's response slot. Echo is
    /// answered at once; the rest may sleep and goes to the module's workqueue.
    pub(crate) fn serve_request(
        this: ArcBorrow<'_, Self>,
        dispatch: Arc<dyn Dispatch>,
        qp_index: usize,
        slot: usize,
    ) {
        let offset = wire::request_offset(slot);
        let mut raw = [0u8; HEADER_LEN];
        // Room for a deferred request's body, allocated before taking the spinlock.
        let Ok(mut body) = KVec::with_capacity(wire::BODY_MAX, GFP_ATOMIC) else {
            return this.answer_error(qp_index, slot, ENOMEM);
        };
        let answer = {
            let mut guard = this.link.lock();
            let Some(mailbox) = guard.mailbox.as_mut() else {
                return;
            };
            if mailbox.inbox.read(offset, &mut raw).is_err() {
                return;
            }
            match Header::decode(&raw).map(|h| (h, h.msg_kind())) {
                Ok((request, Some(MsgKind::Echo))) => {
                    let len = request.len as usize;
                    let copied = mailbox.outbox.copy_from(
                        wire::response_offset(slot) + HEADER_LEN,
                        &mailbox.inbox,
                        offset + HEADER_LEN,
                        len,
                    );
                    match copied {
                        Ok(()) => Header {
                            status: 0,
                            ..request
                        },
                        Err(_) => Header {
                            status: wire_status(EIO),
                            len: 0,
                            ..request
                        },
                    }
                }
                Ok((request, Some(kind))) => {
                    // Within the capacity reserved above: does not allocate.
                    let _ = body.extend_with(request.len as usize, 0, GFP_ATOMIC);
                    match mailbox.inbox.read(offset + HEADER_LEN, &mut body) {
                        Ok(()) => {
                            drop(guard);
                            return Self::defer(
                                this.into(),
                                dispatch,
                                qp_index,
                                slot,
                                request,
                                kind,
                                body,
                            );
                        }
                        Err(_) => Header {
                            status: wire_status(EIO),
                            len: 0,
                            ..request
                        },
                    }
                }
                Ok((request, None)) => Header {
                    status: wire_status(EOPNOTSUPP()),
                    len: 0,
                    ..request
                },
                Err(seq) => Header {
                    kind: 0,
                    status: wire_status(EINVAL),
                    len: 0,
                    seq,
                },
            }
        };
        // The body (if any) is already staged in our outbox; a peer going away loses the answer.
        let _ = this.post_message(qp_index, ImmKind::Response, slot, &answer, Body::Staged);
    }

    fn answer_error(&self, qp_index: usize, slot: usize, err: Error) {
        let Some(request) = self.inbox_header(wire::request_offset(slot)) else {
            return;
        };
        let answer = Header {
            status: wire_status(err),
            len: 0,
            ..request
        };
        let _ = self.post_message(qp_index, ImmKind::Response, slot, &answer, Body::Staged);
    }

    /// Serves request `kind` on the module's workqueue and answers from there.
    fn defer(
        peer: Arc<Peer>,
        dispatch: Arc<dyn Dispatch>,
        qp_index: usize,
        slot: usize,
        request: Header,
        kind: MsgKind,
        body: KVec<u8>,
    ) {
        let reply_to = peer.clone();
        let spawned = module_queue().try_spawn(GFP_ATOMIC, move || {
            let answer = dispatch.serve(&peer, kind, &body);
            let (header, bytes): (Header, &[u8]) = match &answer {
                Ok(out) => (
                    Header {
                        status: 0,
                        len: out.len() as u32,
                        ..request
                    },
                    out,
                ),
                Err(e) => (
                    Header {
                        status: wire_status(*e),
                        len: 0,
                        ..request
                    },
                    &[],
                ),
            };
            let _ = peer.post_message(
                qp_index,
                ImmKind::Response,
                slot,
                &header,
                Body::Copy(bytes),
            );
        });
        if spawned.is_err() {
            reply_to.answer_error(qp_index, slot, ENOMEM);
        }
    }
}
