// SPDX-License-Identifier: GPL-2.0
//! This node's view of the cluster: identity, RDMA devices, peers with their K RC
//! QPs and message mailboxes, kernel-to-kernel requests, and the ping built on them.
//!
//! Locking: `Lite::state` (mutex) serializes every membership change and is never
//! taken by completion callbacks. Each peer's `link` spinlock guards its QPs and
//! mailbox for posting; shutting a peer down takes them out under it, so once
//! `shutdown` returns nothing can post to them and their drain has reaped every
//! completion. A peer's `calls` spinlock guards its request slots; it is never
//! held together with `link`.

use crate::errno::{EHOSTDOWN, ENETDOWN, ENOTCONN, EOPNOTSUPP, ETIMEDOUT};
use crate::ffi;
use crate::memory::Memory;
use crate::uapi::*;
use crate::inflight::{InFlight, MAX_INFLIGHT};
use crate::verbs::{Atomic, Device, DmaBuf, Op, Qp, RemoteQp, UserPages, PAGE_SIZE, PORT_ACTIVE};
use crate::lock::LockNode;
use crate::polling::{self, PollBudget, Wait};
use crate::qos::{Admit, Qos, Ticket};
use crate::rpc::{RpcNode, RpcPeer};
use crate::kvec::swap_remove;
use crate::wire::{self, Header, ImmKind, MsgKind, RpcDone, CALL_SLOTS, HEADER_LEN, SLOTS};
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, new_spinlock, Arc, ArcBorrow, CondVar, CondVarTimeoutResult, Mutex, SpinLock};
use kernel::time::{msecs_to_jiffies, Jiffies, Ktime};
use kernel::uaccess::UserSliceWriter;

/// Receives kept posted on every QP (each write-with-immediate consumes one).
const RECV_DEPTH: u32 = 256;
/// Send queue depth of every QP (helpers.c): messages need at most `2 * SLOTS` of it,
/// RPC requests and replies at most `2 * CALL_SLOTS`, head reports a few; one-sided
/// operations share the rest as credits.
const SEND_DEPTH: u32 = 512;
const HEAD_REPORTS: u32 = 16;
const DATA_CREDITS: u32 = SEND_DEPTH - 2 * SLOTS as u32 - 2 * CALL_SLOTS as u32 - HEAD_REPORTS;
/// User memory pinned at a time by one transfer.
const WINDOW_BYTES: usize = 1 << 20;
/// Bytes per RDMA work request, and bytes in flight per transfer (see inflight.rs);
/// while paced, the pacer sizes both (qos.rs).
const WR_BYTES: usize = 32 << 10;
const INFLIGHT_BYTES: usize = 4 * WR_BYTES;
/// Send queue credits one transfer holds: its most work requests in flight.
const TRANSFER_CREDITS: u32 = MAX_INFLIGHT as u32;
/// Generous bound for control requests (allocation of large chunks, memsets) on
/// slow (emulated, debug) kernels.
pub(crate) const CONTROL_TIMEOUT_MS: u32 = 30_000;
/// Work completion statuses (`IB_WC_*`) that mean the peer is unreachable.
const WC_FLUSH_ERR: i32 = 5;
const WC_RETRY_EXC_ERR: i32 = 12;
const WC_RNR_RETRY_EXC_ERR: i32 = 13;
// At most SLOTS requests and SLOTS answers, CALL_SLOTS RPC requests and replies each
// way, and a few head reports are in flight between two nodes, so even if all of
// them use one QP its receive queue never runs dry (no RNR retries).
const _: () = assert!(2 * SLOTS as u32 + 2 * CALL_SLOTS as u32 + HEAD_REPORTS <= RECV_DEPTH);
// A paced chunk is one work request.
const _: () = assert!(LITE_QOS_CHUNK_MAX as usize == WR_BYTES);

/// An error as the `status` of a message answer (a positive errno).
fn wire_status(err: Error) -> u16 {
    err.to_errno().unsigned_abs() as u16
}

/// Local runs, in order, going to the contiguous remote range at `remote`.
fn contiguous(runs: impl Iterator<Item = (u64, usize)>, mut remote: u64) -> impl Iterator<Item = (u64, usize, u64)> {
    runs.map(move |(addr, len)| {
        let piece = (addr, len, remote);
        remote += len as u64;
        piece
    })
}

/// `IB_MTU_256` ..= `IB_MTU_4096`.
const MTU_CODES: core::ops::RangeInclusive<u32> = 1..=5;

/// The module's workqueue, for work that may sleep.
pub(crate) fn module_queue() -> &'static kernel::workqueue::Queue {
    // SAFETY: the C glue creates the workqueue before it registers the ib_client and
    // /dev/lite (the only ways into the module) and destroys it after both are gone.
    unsafe { kernel::workqueue::Queue::from_raw(ffi::lite_workqueue().cast()) }
}

/// Starting PSN of a QP: any 24-bit value works; deriving it from the QPN keeps both
/// sides' view reproducible without storing it.
fn psn_for(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9E37_79B1) & 0x00FF_FFFF
}

struct Identity {
    id: u32,
    epoch: u64,
}

/// A peer the manager declared down, kept so that status can show it.
struct DownPeer {
    id: u32,
    epoch: u64,
}

struct State {
    node: Option<Identity>,
    devices: KVec<Arc<Device>>,
    peers: KVec<Arc<Peer>>,
    down: KVec<DownPeer>,
    /// One QP connected to itself, for atomics on memory this node holds.
    loopback: Option<Arc<Peer>>,
}

impl State {
    fn peer_index(&self, id: u32) -> Option<usize> {
        self.peers.iter().position(|p| p.id == id)
    }

    fn forget_down(&mut self, id: u32) {
        if let Some(i) = self.down.iter().position(|d| d.id == id) {
            swap_remove(&mut self.down, i);
        }
    }

    /// Tears the peer at `index` down and records it as down.
    fn remove_peer(&mut self, index: usize) -> Result {
        let peer = swap_remove(&mut self.peers, index);
        peer.shutdown();
        self.forget_down(peer.id);
        self.down.push(DownPeer { id: peer.id, epoch: peer.epoch }, GFP_KERNEL)?;
        Ok(())
    }

    fn drop_loopback(&mut self) {
        if let Some(peer) = self.loopback.take() {
            peer.shutdown();
        }
    }
}

/// Where peers write messages to us (`inbox`) and where ours are staged (`outbox`).
struct Mailbox {
    inbox: DmaBuf,
    outbox: DmaBuf,
}

struct Link {
    state: u32,
    qps: KVec<Arc<Qp>>,
    mailbox: Option<Mailbox>,
    remote: Option<LiteConnInfo>,
}

impl Link {
    /// References to the QPs, to use them without `link` held (verbs may sleep).
    fn qp_refs(&self) -> [Option<Arc<Qp>>; LITE_MAX_QPS_PER_PEER as usize] {
        let mut qps: [Option<Arc<Qp>>; LITE_MAX_QPS_PER_PEER as usize] = Default::default();
        for (slot, qp) in qps.iter_mut().zip(self.qps.iter()) {
            *slot = Some(qp.clone());
        }
        qps
    }
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
enum Slot {
    Free,
    /// Request `seq` sent, answer pending.
    Waiting(u64),
    /// The answer to `seq` is in our response slot.
    Answered(u64),
    /// The caller gave up on `seq`; the slot is reusable once its answer lands.
    Abandoned(u64),
}

struct Calls {
    slots: [Slot; SLOTS],
    next_seq: u64,
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
    pub(crate) fn answer(mut self, reply: &mut [u8]) -> Result<usize> {
        self.collected = true;
        self.peer.collect_answer(self.slot, self.seq, reply, &mut self.left, Patience::Signals)
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

/// Another node, one incarnation of it (`epoch`), reached over K RC QPs.
#[pin_data(PinnedDrop)]
pub(crate) struct Peer {
    pub(crate) id: u32,
    epoch: u64,
    /// Identifies the device the QPs live on; its verbs are only used while it is registered.
    dev: Arc<Device>,
    sgid_index: i32,
    gid: [u8; 16],
    mtu: u32,
    /// Set once the peer failed or was shut down: waiters check it without `link`.
    failed: AtomicBool,
    #[pin]
    link: SpinLock<Link>,
    #[pin]
    calls: SpinLock<Calls>,
    #[pin]
    call_done: CondVar,
    /// Free send queue entries per QP for one-sided operations.
    #[pin]
    credits: Mutex<[u32; LITE_MAX_QPS_PER_PEER as usize]>,
    #[pin]
    credit_freed: CondVar,
    /// Spreads one-sided operations over the QPs.
    next_qp: AtomicUsize,
    /// Classes and pacing of this node's traffic.
    qos: Arc<Qos>,
    /// How long small operations to this peer busy-poll for their completion.
    poll: PollBudget,
    /// Our calls to the peer's RPC servers.
    #[pin]
    pub(crate) rpc: RpcPeer,
}

impl Peer {
    fn new(dev: &Arc<Device>, id: u32, epoch: u64, nr_qps: u32, qos: Arc<Qos>) -> Result<Arc<Peer>> {
        let (port_state, mtu) = dev.query_port()?;
        if port_state != PORT_ACTIVE {
            return Err(ENETDOWN());
        }
        let (gid, sgid_index) = dev.roce_gid()?;
        let mailbox = Mailbox {
            inbox: DmaBuf::new(dev, wire::MAILBOX_SIZE)?,
            outbox: DmaBuf::new(dev, wire::MAILBOX_SIZE)?,
        };
        let peer = Arc::pin_init(
            pin_init!(Peer {
                id,
                epoch,
                dev: dev.clone(),
                sgid_index,
                gid,
                mtu,
                failed: AtomicBool::new(false),
                link <- new_spinlock!(
                    Link { state: LITE_PEER_PREPARED, qps: KVec::new(), mailbox: Some(mailbox), remote: None },
                    "lite:peer.link"
                ),
                calls <- new_spinlock!(Calls { slots: [Slot::Free; SLOTS], next_seq: 1 }, "lite:peer.calls"),
                call_done <- new_condvar!("lite:peer.call_done"),
                credits <- new_mutex!([DATA_CREDITS; LITE_MAX_QPS_PER_PEER as usize], "lite:peer.credits"),
                credit_freed <- new_condvar!("lite:peer.credit_freed"),
                next_qp: AtomicUsize::new(0),
                qos,
                poll: PollBudget::new(),
                rpc <- RpcPeer::new(),
            }),
            GFP_KERNEL,
        )?;
        // The QPs call back with the peer's address, so they are created once it is final.
        let mut qps = KVec::with_capacity(nr_qps as usize, GFP_KERNEL)?;
        for index in 0..nr_qps {
            let qp = dev.create_qp(&*peer as *const Peer as *const c_void, index, RECV_DEPTH)?;
            qps.push(Arc::new(qp, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        peer.link.lock().qps = qps;
        Ok(peer)
    }

    /// What the peer needs to connect its QPs to ours and to write to our mailbox.
    fn local_info(&self) -> LiteConnInfo {
        let link = self.link.lock();
        let mut info = LiteConnInfo { gid: self.gid, mtu: self.mtu, ..Default::default() };
        info.nr_qps = link.qps.len() as u32;
        for (i, qp) in link.qps.iter().enumerate() {
            info.qpn[i] = qp.num();
            info.psn[i] = psn_for(info.qpn[i]);
        }
        if let Some(mailbox) = &link.mailbox {
            info.mailbox_addr = mailbox.inbox.dma();
            info.mailbox_rkey = self.dev.global_rkey();
            info.mailbox_slots = SLOTS as u32;
        }
        info
    }

    /// Connects every QP to the peer's published side. Idempotent for the same info.
    /// Caller holds `Lite::state`, so the QPs cannot be shut down meanwhile.
    fn connect(&self, remote: &LiteConnInfo) -> Result {
        let mut qps = KVec::with_capacity(LITE_MAX_QPS_PER_PEER as usize, GFP_KERNEL)?;
        {
            let link = self.link.lock();
            match &link.remote {
                Some(known) if known == remote => return Ok(()),
                Some(_) => return Err(EEXIST),
                None => {}
            }
            if remote.nr_qps as usize != link.qps.len() {
                return Err(EINVAL);
            }
            for qp in link.qps.iter() {
                qps.push(qp.clone(), GFP_ATOMIC)?;
            }
        }
        let mtu = self.mtu.min(remote.mtu);
        for (i, qp) in qps.iter().enumerate() {
            let far = RemoteQp { gid: &remote.gid, qpn: remote.qpn[i], psn: remote.psn[i] };
            if let Err(e) = qp.connect(&far, self.sgid_index, psn_for(qp.num()), mtu) {
                self.mark_failed();
                return Err(e);
            }
        }
        let mut link = self.link.lock();
        link.remote = Some(*remote);
        if link.state == LITE_PEER_PREPARED {
            link.state = LITE_PEER_CONNECTED;
        }
        Ok(())
    }

    /// Writes a message into the peer's mailbox slot `slot` (request or response
    /// area by `kind`) through QP `qp_index % K`, announcing it with immediate
    /// (`kind`, `slot`). `header.len` body bytes follow the header.
    fn post_message(&self, qp_index: usize, kind: ImmKind, slot: usize, header: &Header, body: Body<'_>) -> Result {
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
    fn post_from_outbox(&self, hint: usize, offset: usize, staged: &[&[u8]], len: usize, imm: u32) -> Result {
        let mut guard = self.link.lock();
        let link = &mut *guard;
        let (Some(remote), Some(mailbox)) = (link.remote, link.mailbox.as_mut()) else {
            return Err(EHOSTDOWN());
        };
        if link.state != LITE_PEER_CONNECTED || link.qps.is_empty() {
            return Err(EHOSTDOWN());
        }
        let mut at = offset;
        for part in staged {
            mailbox.outbox.write(at, part)?;
            at += part.len();
        }
        let qp = &link.qps[hint % link.qps.len()];
        qp.post_write_imm(&mailbox.outbox, offset, len, remote.mailbox_addr + offset as u64, remote.mailbox_rkey, imm, None)
    }

    /// Writes the completion record of the peer's call in call slot `slot` into its
    /// mailbox, announcing it with an `RpcReply` immediate. The record is staged
    /// in our outbox at the same offset: the peer reuses the slot only after it
    /// read this record, so the staging is never overwritten while in flight.
    pub(crate) fn post_done(&self, slot: usize, done: &RpcDone) -> Result {
        if slot >= CALL_SLOTS {
            return Err(EINVAL);
        }
        let offset = wire::done_offset(slot);
        let imm = wire::encode_imm(ImmKind::RpcReply, slot as u32).ok_or(EINVAL)?;
        self.post_from_outbox(slot, offset, &[&done.encode()], RpcDone::LEN, imm)
    }

    /// The completion record in our RPC call slot `slot`.
    pub(crate) fn read_done(&self, slot: usize) -> Option<RpcDone> {
        if slot >= CALL_SLOTS {
            return None;
        }
        let mut raw = [0u8; RpcDone::LEN];
        let link = self.link.lock();
        link.mailbox.as_ref()?.inbox.read(wire::done_offset(slot), &mut raw).ok()?;
        Some(RpcDone::decode(&raw))
    }

    /// Posts a write-with-immediate of `len` bytes at the start of `src` to the
    /// peer's `remote_addr` (an address it published, such as a ring), on QP
    /// `hint % K`; with `sync`, waits until it landed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_write_imm(&self, hint: usize, kind: ImmKind, payload: u32, src: &DmaBuf, len: usize, remote_addr: u64, sync: bool) -> Result {
        let imm = wire::encode_imm(kind, payload).ok_or(EINVAL)?;
        let op = if sync { Some(Op::new()?) } else { None };
        {
            let link = self.link.lock();
            let (Some(remote), true) = (link.remote, link.state == LITE_PEER_CONNECTED && !link.qps.is_empty()) else {
                return Err(EHOSTDOWN());
            };
            let qp = &link.qps[hint % link.qps.len()];
            qp.post_write_imm(src, 0, len, remote_addr, remote.mailbox_rkey, imm, op.as_ref())?;
        }
        match op {
            Some(op) => op.wait().map_err(|status| self.wc_error(status)),
            None => Ok(()),
        }
    }

    /// Posts an immediate without data (a head report), on QP `hint % K`.
    pub(crate) fn post_imm(&self, hint: usize, kind: ImmKind, payload: u32) -> Result {
        let imm = wire::encode_imm(kind, payload).ok_or(EINVAL)?;
        self.post_from_outbox(hint, 0, &[], 0, imm)
    }

    /// A failed work request: the QP is in error, the peer unreachable.
    fn wc_error(&self, status: i32) -> Error {
        if !self.failed.load(Ordering::Acquire) {
            pr_warn!("RDMA to node {} failed (wc status {}); marking it failed\n", self.id, status);
        }
        self.mark_failed();
        if matches!(status, WC_FLUSH_ERR | WC_RETRY_EXC_ERR | WC_RNR_RETRY_EXC_ERR) {
            EHOSTDOWN()
        } else {
            EIO
        }
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
    pub(crate) fn call(&self, kind: MsgKind, body: &[u8], reply: &mut [u8], timeout_ms: u32) -> Result<usize> {
        let mut left = msecs_to_jiffies(timeout_ms);
        let (slot, seq) = self.send_request(kind, body, &mut left, Patience::Signals)?;
        self.collect_answer(slot, seq, reply, &mut left, Patience::Signals)
    }

    /// As [`Self::call`], but a signal does not end it: for a message whose answer
    /// the caller must have before it frees memory the peer may write.
    pub(crate) fn call_to_the_end(&self, kind: MsgKind, body: &[u8], reply: &mut [u8], timeout_ms: u32) -> Result<usize> {
        let mut left = msecs_to_jiffies(timeout_ms);
        let (slot, seq) = self.send_request(kind, body, &mut left, Patience::ToTheEnd)?;
        self.collect_answer(slot, seq, reply, &mut left, Patience::ToTheEnd)
    }

    /// Sends request `kind` with `body` to `peer` without waiting: the caller may ask
    /// other nodes meanwhile and collect the answer later (`PendingCall::answer`).
    pub(crate) fn start_call(peer: Arc<Peer>, kind: MsgKind, body: &[u8], timeout_ms: u32) -> Result<PendingCall> {
        let mut left = msecs_to_jiffies(timeout_ms);
        let (slot, seq) = peer.send_request(kind, body, &mut left, Patience::Signals)?;
        Ok(PendingCall { peer, slot, seq, left, collected: false })
    }

    /// Waits up to `left` jiffies for the call-done signal; `left` keeps what remains.
    fn wait_for_calls<B: kernel::sync::lock::Backend>(&self, calls: &mut kernel::sync::lock::Guard<'_, Calls, B>, left: &mut Jiffies) -> Result {
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
    fn send_request(&self, kind: MsgKind, body: &[u8], left: &mut Jiffies, patience: Patience) -> Result<(usize, u64)> {
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
        let header = Header { kind: kind as u16, status: 0, len: body.len() as u32, seq };
        if let Err(e) = self.post_message(slot, ImmKind::Request, slot, &header, Body::Copy(body)) {
            self.finish_slot(slot);
            return Err(e);
        }
        Ok((slot, seq))
    }

    /// Waits up to `left` jiffies for the answer to request `seq` in `slot`, copies it
    /// into `reply` and frees the slot; returns the answer's length. On failure the
    /// slot is given up (`give_up_slot`).
    fn collect_answer(&self, slot: usize, seq: u64, reply: &mut [u8], left: &mut Jiffies, patience: Patience) -> Result<usize> {
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
        link.mailbox.as_ref().ok_or_else(EHOSTDOWN)?.inbox.read(offset + HEADER_LEN, out)?;
        Ok(len)
    }

    fn finish_slot(&self, slot: usize) {
        let mut calls = self.calls.lock();
        calls.slots[slot] = Slot::Free;
        self.call_done.notify_all();
    }

    /// The answer to our request in `slot` arrived (completion context).
    fn answer_arrived(&self, slot: usize) {
        let Some(answer) = self.inbox_header(wire::response_offset(slot)) else { return };
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
    fn serve_request(this: ArcBorrow<'_, Self>, lite: ArcBorrow<'_, Lite>, qp_index: usize, slot: usize) {
        let offset = wire::request_offset(slot);
        let mut raw = [0u8; HEADER_LEN];
        // Room for a deferred request's body, allocated before taking the spinlock.
        let Ok(mut body) = KVec::with_capacity(wire::BODY_MAX, GFP_ATOMIC) else {
            return this.answer_error(qp_index, slot, ENOMEM);
        };
        let answer = {
            let mut guard = this.link.lock();
            let Some(mailbox) = guard.mailbox.as_mut() else { return };
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
                        Ok(()) => Header { status: 0, ..request },
                        Err(_) => Header { status: wire_status(EIO), len: 0, ..request },
                    }
                }
                Ok((request, Some(kind))) => {
                    // Within the capacity reserved above: does not allocate.
                    let _ = body.extend_with(request.len as usize, 0, GFP_ATOMIC);
                    match mailbox.inbox.read(offset + HEADER_LEN, &mut body) {
                        Ok(()) => {
                            drop(guard);
                            return Self::defer(this.into(), lite.into(), qp_index, slot, request, kind, body);
                        }
                        Err(_) => Header { status: wire_status(EIO), len: 0, ..request },
                    }
                }
                Ok((request, None)) => Header { status: wire_status(EOPNOTSUPP()), len: 0, ..request },
                Err(seq) => Header { kind: 0, status: wire_status(EINVAL), len: 0, seq },
            }
        };
        // The body (if any) is already staged in our outbox; a peer going away loses the answer.
        let _ = this.post_message(qp_index, ImmKind::Response, slot, &answer, Body::Staged);
    }

    fn answer_error(&self, qp_index: usize, slot: usize, err: Error) {
        let Some(request) = self.inbox_header(wire::request_offset(slot)) else { return };
        let answer = Header { status: wire_status(err), len: 0, ..request };
        let _ = self.post_message(qp_index, ImmKind::Response, slot, &answer, Body::Staged);
    }

    /// Serves request `kind` on the module's workqueue and answers from there.
    fn defer(peer: Arc<Peer>, lite: Arc<Lite>, qp_index: usize, slot: usize, request: Header, kind: MsgKind, body: KVec<u8>) {
        let reply_to = peer.clone();
        let spawned = module_queue().try_spawn(GFP_ATOMIC, move || {
            let answer = match kind {
                MsgKind::RpcBind | MsgKind::RpcUnbind | MsgKind::RpcHead => lite.serve_rpc_request(&peer, kind, &body),
                _ => lite.serve_lmr_request(&peer, kind, &body),
            };
            let (header, bytes): (Header, &[u8]) = match &answer {
                Ok(out) => (Header { status: 0, len: out.len() as u32, ..request }, out),
                Err(e) => (Header { status: wire_status(*e), len: 0, ..request }, &[]),
            };
            let _ = peer.post_message(qp_index, ImmKind::Response, slot, &header, Body::Copy(bytes));
        });
        if spawned.is_err() {
            reply_to.answer_error(qp_index, slot, ENOMEM);
        }
    }

    /// EHOSTDOWN unless the QPs are connected.
    pub(crate) fn ensure_connected(&self) -> Result {
        if self.link.lock().state == LITE_PEER_CONNECTED && !self.failed.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(EHOSTDOWN())
        }
    }

    fn take_credits(&self, qp: usize, count: u32) -> Result {
        let mut credits = self.credits.lock();
        while credits[qp] < count {
            if self.failed.load(Ordering::Acquire) {
                return Err(EHOSTDOWN());
            }
            self.credit_freed.wait(&mut credits);
        }
        credits[qp] -= count;
        Ok(())
    }

    fn return_credits(&self, qp: usize, count: u32) {
        self.credits.lock()[qp] += count;
        self.credit_freed.notify_all();
    }

    /// Moves `pieces` (local DMA address, bytes, remote address) to or from the peer
    /// through one QP, and waits until all of it is there. Consecutive pieces whose
    /// remote ranges follow each other share a work request.
    ///
    /// Work requests carry at most `WR_BYTES`, and at most `INFLIGHT_BYTES` of them
    /// are outstanding (`InFlight`): rxe has no congestion control, and a larger burst
    /// overflows the receiving side's queues, which costs a retransmit timeout per loss.
    /// The caller's class decides the QP (HW-Sep) and, while paced (SW-Pri), smaller
    /// work requests, fewer of them in flight, and when each may go (qos.rs).
    fn transfer(&self, op: &Op, write: bool, wait: Wait, pieces: impl Iterator<Item = (u64, usize, u64)>) -> Result {
        let max_sge = self.dev.max_sge().clamp(1, ffi::LITE_MAX_SGE as usize);
        let nr_qps = self.link.lock().qps.len().max(1);
        let mut ticket = self.qos.begin(nr_qps, self.next_qp.fetch_add(1, Ordering::Relaxed));
        let qp_index = ticket.qp();
        self.take_credits(qp_index, TRANSFER_CREDITS)?;
        let mut wr_bytes = ticket.first_wr_limit(WR_BYTES);
        let mut inflight = InFlight::new(ticket.inflight_limit(INFLIGHT_BYTES));
        let mut sges = [ffi::lite_sge { addr: 0, len: 0, reserved: 0 }; ffi::LITE_MAX_SGE as usize];
        // SGEs gathered so far, their bytes, and where they go.
        let (mut count, mut batch, mut at) = (0, 0usize, 0u64);
        let mut posted: Result = Ok(());
        let mut post = |sges: &[ffi::lite_sge], at: u64, wr_bytes: &mut usize| {
            let limit = self.post_rdma(qp_index, op, &mut ticket, &mut inflight, write, sges, at)?;
            *wr_bytes = limit.min(WR_BYTES);
            inflight.set_budget(ticket.inflight_limit(INFLIGHT_BYTES));
            Ok(())
        };
        'pieces: for (mut addr, mut len, mut remote) in pieces {
            while len > 0 {
                if count > 0 && remote != at + batch as u64 {
                    posted = post(&sges[..count], at, &mut wr_bytes);
                    if posted.is_err() {
                        break 'pieces;
                    }
                    (count, batch) = (0, 0);
                }
                if count == 0 {
                    at = remote;
                }
                let take = len.min(wr_bytes.saturating_sub(batch).max(1));
                sges[count] = ffi::lite_sge { addr, len: take as u32, reserved: 0 };
                (count, batch) = (count + 1, batch + take);
                (addr, len, remote) = (addr + take as u64, len - take, remote + take as u64);
                if count == max_sge || batch >= wr_bytes {
                    posted = post(&sges[..count], at, &mut wr_bytes);
                    if posted.is_err() {
                        break 'pieces;
                    }
                    (count, batch) = (0, 0);
                }
            }
        }
        if posted.is_ok() && count > 0 {
            posted = post(&sges[..count], at, &mut wr_bytes);
        }
        let completed = self.wait(op, wait, ticket.class(), ticket.bytes(), ticket.start_ns());
        if completed.is_ok() && posted.is_ok() {
            ticket.acknowledged(ticket.bytes());
        }
        self.return_credits(qp_index, TRANSFER_CREDITS);
        posted?;
        completed.map_err(|status| self.wc_error(status))
    }

    /// Zero-copy RDMA WRITE of `pieces` (local DMA address, bytes, remote address);
    /// returns once all of it landed.
    pub(crate) fn write_pieces(&self, pieces: impl Iterator<Item = (u64, usize, u64)>) -> Result {
        let op = Op::new()?;
        self.transfer(&op, true, Wait::Sleep, pieces)
    }

    /// Posts one RDMA read or write on QP `qp_index` once the bytes of `op` still in
    /// flight leave room for it and the ticket lets it go; returns the largest work
    /// request the ticket allows next.
    #[allow(clippy::too_many_arguments)]
    fn post_rdma(&self, qp_index: usize, op: &Op, ticket: &mut Ticket<'_>, inflight: &mut InFlight, write: bool, sges: &[ffi::lite_sge], remote_addr: u64) -> Result<usize> {
        let bytes = sges.iter().map(|sge| sge.len as usize).sum();
        let limit = match ticket.admit(bytes)? {
            Admit::Go(limit) => limit,
            Admit::ProbeFirst(limit) => {
                // A failed probe only means no sample: the transfer's own error tells.
                if let Ok(ns) = self.probe(ticket.probe_qp()) {
                    self.qos.probed(ns);
                }
                limit
            }
        };
        let pending = op.wait_below(inflight.may_remain(bytes));
        ticket.acknowledged(inflight.completed_bytes(pending));
        inflight.posted(bytes);
        let link = self.link.lock();
        let (Some(remote), true) = (link.remote, link.state == LITE_PEER_CONNECTED) else {
            return Err(EHOSTDOWN());
        };
        let qp = link.qps.get(qp_index).ok_or_else(EHOSTDOWN)?;
        qp.post_rdma(op, write, sges, remote_addr, remote.mailbox_rkey)?;
        Ok(limit)
    }

    /// SW-Pri's reference flow: the round trip (ns) of an 8-byte RDMA READ of the
    /// peer's mailbox on QP `qp_index`, one latency-class operations use, which queues
    /// behind this node's paced traffic wherever a latency-class operation would.
    fn probe(&self, qp_index: usize) -> Result<u64> {
        let target = DmaBuf::new(&self.dev, 8)?;
        let (dma, _) = target.range(0, 8)?;
        let sge = [ffi::lite_sge { addr: dma, len: 8, reserved: 0 }];
        let op = Op::new()?;
        let start = Ktime::ktime_get();
        // Polls as the latency class's calls do, to see what they see.
        self.single_request(qp_index, Wait::PollFirst, LITE_CLASS_LATENCY, &op, |qp, remote| {
            qp.post_rdma(&op, false, &sge, remote.mailbox_addr, remote.mailbox_rkey)
        })?;
        Ok((Ktime::ktime_get() - start).to_ns() as u64)
    }

    /// Waits for `op`, `bytes` of `class` posted since `start_ns`: users' small operations
    /// of the latency and default classes busy-poll first, one waiter per peer at a
    /// time (polling.rs). Called with no lock held that a completion handler takes.
    fn wait(&self, op: &Op, wait: Wait, class: u32, bytes: u64, start_ns: u64) -> core::result::Result<(), i32> {
        if !polling::polls(wait, class, bytes) {
            return op.wait();
        }
        let Some(_turn) = self.poll.try_poll() else {
            return op.wait();
        };
        let completed = op.wait_polling(&self.dev, self.poll.budget_ns());
        self.poll.record((Ktime::ktime_get().to_ns() as u64).saturating_sub(start_ns));
        completed
    }

    /// Posts one work request of `op` (for `class`) with `post` on QP `qp_index` of
    /// the connected peer, holding a send credit, and waits for its completion.
    fn single_request(&self, qp_index: usize, wait: Wait, class: u32, op: &Op, post: impl FnOnce(&Qp, &LiteConnInfo) -> Result) -> Result {
        self.take_credits(qp_index, 1)?;
        let start_ns = Ktime::ktime_get().to_ns() as u64;
        let posted = {
            let link = self.link.lock();
            match (&link.remote, link.state == LITE_PEER_CONNECTED, link.qps.get(qp_index)) {
                (Some(remote), true, Some(qp)) => post(qp, remote),
                _ => Err(EHOSTDOWN()),
            }
        };
        let completed = self.wait(op, wait, class, 8, start_ns);
        self.return_credits(qp_index, 1);
        posted?;
        completed.map_err(|status| self.wc_error(status))
    }

    /// Zero-copy RDMA WRITE (`write`) of user memory `[addr, addr + len)` to the peer's
    /// `remote_addr`, or READ into it; returns once the data is there. The buffer is
    /// pinned and mapped a window at a time.
    ///
    /// `still_valid` is checked before each window, so that revoking the mapping
    /// waits for at most one window of a long transfer.
    pub(crate) fn rdma_user(&self, write: bool, addr: usize, len: usize, remote_addr: u64, still_valid: &dyn Fn() -> Result) -> Result {
        let op = Op::new()?;
        let mut done = 0;
        while done < len {
            still_valid()?;
            let start = addr + done;
            let window = (WINDOW_BYTES - start % PAGE_SIZE).min(len - done);
            let pages = UserPages::pin(&self.dev, start, window, !write)?;
            self.transfer(&op, write, Wait::PollFirst, contiguous(pages.runs(), remote_addr + done as u64))?;
            done += window;
        }
        Ok(())
    }

    /// RDMA WRITE of `len` bytes at `offset` of kernel buffer `src` to `remote_addr`.
    pub(crate) fn rdma_write_kernel(&self, src: &DmaBuf, offset: usize, len: usize, remote_addr: u64) -> Result {
        let (dma, len) = src.range(offset, len)?;
        let op = Op::new()?;
        self.transfer(&op, true, Wait::Sleep, core::iter::once((dma, len as usize, remote_addr)))
    }

    /// Performs `atomic` on the peer's 8-byte word at `remote_addr` through its RNIC
    /// and returns the word's previous value.
    pub(crate) fn atomic(&self, atomic: Atomic, remote_addr: u64, wait: Wait) -> Result<u64> {
        let result = DmaBuf::new(&self.dev, 8)?;
        let op = Op::new()?;
        let nr_qps = self.link.lock().qps.len().max(1);
        let (class, qp_index) = self.qos.classify(nr_qps, self.next_qp.fetch_add(1, Ordering::Relaxed));
        let start = Ktime::ktime_get();
        self.single_request(qp_index, wait, class, &op, |qp, remote| {
            qp.post_atomic(&op, atomic, &result, remote_addr, remote.mailbox_rkey)
        })?;
        self.qos.account(class, 8, Some((Ktime::ktime_get() - start).to_ns() as u64));
        let mut old = [0u8; 8];
        result.read(0, &mut old)?;
        // The old value arrives in host order (rxe).
        Ok(u64::from_ne_bytes(old))
    }

    /// A send failed for good (retries exhausted) or the peer did not confirm a
    /// teardown: the peer is unreachable. Every QP to it goes to error first, so
    /// nothing it still sends lands here once its callers' buffers (pinned output
    /// pages, rings) are let go. Process context (the CQ's workqueue included).
    fn mark_failed(&self) {
        let qps = {
            let mut link = self.link.lock();
            if link.state == LITE_PEER_CONNECTED || link.state == LITE_PEER_PREPARED {
                link.state = LITE_PEER_ERROR;
            }
            link.qp_refs()
        };
        for qp in qps.iter().flatten() {
            if let Err(e) = qp.to_error() {
                pr_err!("node {}: QP {} refused the error state ({:?})\n", self.id, qp.num(), e);
            }
        }
        self.fail_waiters();
    }

    /// The peer did not confirm a teardown, so it may still write into memory
    /// about to be freed: fenced off as a failed peer.
    pub(crate) fn fence(&self) {
        pr_warn!("node {} did not confirm a teardown; its QPs are fenced off\n", self.id);
        self.mark_failed();
    }

    fn fail_waiters(&self) {
        self.failed.store(true, Ordering::Release);
        self.rpc.fail_all();
        {
            let _calls = self.calls.lock();
            self.call_done.notify_all();
        }
        let _credits = self.credits.lock();
        self.credit_freed.notify_all();
    }

    /// Stops all traffic and destroys the QPs (draining reaps every completion),
    /// then frees the mailbox, which no work request or peer can reach any more.
    fn shutdown(&self) {
        let (qps, mailbox) = {
            let mut link = self.link.lock();
            link.state = LITE_PEER_DOWN;
            (core::mem::replace(&mut link.qps, KVec::new()), link.mailbox.take())
        };
        drop(qps);
        drop(mailbox);
        self.fail_waiters();
    }

    fn status(&self) -> LitePeerStatus {
        let (state, remote, qps) = {
            let link = self.link.lock();
            (link.state, link.remote, link.qp_refs())
        };
        let mut st = LitePeerStatus {
            id: self.id,
            state,
            epoch: self.epoch,
            qp_state: [LITE_QPS_NONE; 8],
            ..Default::default()
        };
        for (i, qp) in qps.iter().enumerate() {
            let Some(qp) = qp else { break };
            st.nr_qps += 1;
            st.local_qpn[i] = qp.num();
            st.qp_state[i] = qp.state().unwrap_or(LITE_QPS_NONE);
        }
        if let Some(remote) = remote {
            st.mtu = self.mtu.min(remote.mtu);
            st.remote_qpn = remote.qpn;
            st.remote_gid = remote.gid;
        }
        st
    }
}

#[pinned_drop]
impl PinnedDrop for Peer {
    fn drop(self: Pin<&mut Self>) {
        self.shutdown();
    }
}

/// The module's global state.
#[pin_data]
pub(crate) struct Lite {
    #[pin]
    state: Mutex<State>,
    /// LMR registries (lmr.rs); taken after `state`, never before it.
    #[pin]
    pub(crate) mem: Mutex<Memory>,
    /// Serializes allocation of LMR memory with device removal.
    #[pin]
    pub(crate) alloc_lock: Mutex<()>,
    /// The reserve's refill sleeps here, releasing `mem`, until allocations pause
    /// (a timed wait: nothing signals it).
    #[pin]
    pub(crate) reserve_quiet: CondVar,
    /// Next LMR handle: unique across processes, so another process's handle is
    /// never valid by accident.
    pub(crate) next_handle: AtomicU64,
    pub(crate) qps_per_peer: u32,
    /// RPC servers of this node and the rings its clients write to.
    #[pin]
    pub(crate) rpc: RpcNode,
    /// Lock and barrier waiters of this node and queued at it.
    #[pin]
    pub(crate) locks: LockNode,
    /// Priority classes, their rules and SW-Pri pacing.
    pub(crate) qos: Arc<Qos>,
}

impl Lite {
    pub(crate) fn new(qps_per_peer: u32) -> Result<Arc<Lite>> {
        let qos = Qos::new()?;
        Arc::pin_init(
            pin_init!(Lite {
                state <- new_mutex!(
                    State { node: None, devices: KVec::new(), peers: KVec::new(), down: KVec::new(), loopback: None },
                    "lite:state"
                ),
                mem <- new_mutex!(Memory::new(), "lite:mem"),
                alloc_lock <- new_mutex!((), "lite:alloc"),
                reserve_quiet <- new_condvar!("lite:reserve_quiet"),
                next_handle: AtomicU64::new(0x1000),
                qps_per_peer,
                rpc <- RpcNode::new(),
                locks <- LockNode::new(),
                qos,
            }),
            GFP_KERNEL,
        )
    }

    // ---- devices (ib_client callbacks) ----

    pub(crate) fn device_added(&self, dev: Arc<Device>) -> Result {
        self.state.lock().devices.push(dev, GFP_KERNEL)?;
        Ok(())
    }

    /// Shuts down every peer reached through `dev`; they show as down until rejoined.
    pub(crate) fn device_removing(&self, dev: &Arc<Device>) {
        {
            let mut st = self.state.lock();
            if let Some(i) = st.devices.iter().position(|d| Arc::ptr_eq(d, dev)) {
                swap_remove(&mut st.devices, i);
            }
            while let Some(i) = st.peers.iter().position(|p| Arc::ptr_eq(&p.dev, dev)) {
                if st.remove_peer(i).is_err() {
                    pr_warn!("out of memory recording a peer as down\n");
                }
            }
            st.drop_loopback();
        }
        // One device carries all LMR traffic and memory.
        self.forget_all();
        self.drop_reserve();
    }

    // ---- membership (driven by the user-space agent) ----

    pub(crate) fn info(&self) -> LiteInfo {
        let st = self.state.lock();
        let mut info = LiteInfo {
            abi_version: LITE_ABI_VERSION,
            qps_per_peer: self.qps_per_peer,
            nr_peers: st.peers.len() as u32,
            ..Default::default()
        };
        if let Some(node) = &st.node {
            info.node_id = node.id;
            info.epoch = node.epoch;
        }
        if let Some(dev) = st.devices.first() {
            info.device = *dev.name();
            info.port = dev.port();
            if let Ok((state, mtu)) = dev.query_port() {
                info.port_state = state;
                info.active_mtu = mtu;
            }
            if let Ok((gid, _)) = dev.roce_gid() {
                info.gid = gid;
            }
        }
        info
    }

    pub(crate) fn join(&self, id: u32, epoch: u64) -> Result {
        if id >= LITE_MAX_NODES {
            return Err(EINVAL);
        }
        let mut st = self.state.lock();
        match &st.node {
            Some(node) if node.id != id => Err(EBUSY),
            _ => {
                st.node = Some(Identity { id, epoch });
                Ok(())
            }
        }
    }

    pub(crate) fn leave(&self) {
        {
            let mut st = self.state.lock();
            let peers = core::mem::replace(&mut st.peers, KVec::new());
            for peer in peers.iter() {
                peer.shutdown();
            }
            st.down = KVec::new();
            st.drop_loopback();
            st.node = None;
        }
        self.forget_all();
    }

    /// Returns this node's side for `peer_id`'s incarnation `epoch`, creating QPs if
    /// the peer is new or came back with a newer epoch. The bool is true when created.
    pub(crate) fn prepare_peer(&self, peer_id: u32, epoch: u64) -> Result<(LiteConnInfo, bool)> {
        let mut replaced = false;
        let result = self.prepare_peer_locked(peer_id, epoch, &mut replaced);
        if replaced {
            // What the previous incarnation mastered died with it.
            self.forget_node(peer_id);
        }
        result
    }

    fn prepare_peer_locked(&self, peer_id: u32, epoch: u64, replaced: &mut bool) -> Result<(LiteConnInfo, bool)> {
        let mut st = self.state.lock();
        let me = st.node.as_ref().ok_or_else(ENOTCONN)?.id;
        if peer_id == me || peer_id >= LITE_MAX_NODES {
            return Err(EINVAL);
        }
        if let Some(i) = st.peer_index(peer_id) {
            let known = st.peers[i].epoch;
            if known == epoch {
                return Ok((st.peers[i].local_info(), false));
            }
            if known > epoch {
                return Err(ENOENT);
            }
            st.remove_peer(i)?;
            *replaced = true;
        }
        let dev = st.devices.first().ok_or(ENODEV)?.clone();
        let peer = Peer::new(&dev, peer_id, epoch, self.qps_per_peer, self.qos.clone())?;
        let info = peer.local_info();
        st.peers.push(peer, GFP_KERNEL)?;
        st.forget_down(peer_id);
        Ok((info, true))
    }

    pub(crate) fn connect_peer(&self, peer_id: u32, epoch: u64, remote: &LiteConnInfo) -> Result {
        if remote.nr_qps != self.qps_per_peer
            || !MTU_CODES.contains(&remote.mtu)
            || remote.mailbox_slots != SLOTS as u32
            || remote.mailbox_addr == 0
        {
            return Err(EINVAL);
        }
        let st = self.state.lock();
        let peer = st.peer_index(peer_id).map(|i| &st.peers[i]).ok_or(ENOENT)?;
        if peer.epoch != epoch {
            return Err(ENOENT);
        }
        peer.connect(remote)
    }

    pub(crate) fn peer_down(&self, peer_id: u32) -> Result {
        {
            let mut st = self.state.lock();
            let i = st.peer_index(peer_id).ok_or(ENOENT)?;
            st.remove_peer(i)?;
        }
        self.forget_node(peer_id);
        Ok(())
    }

    /// Status of every peer, down ones included.
    pub(crate) fn peers(&self) -> Result<KVec<LitePeerStatus>> {
        let st = self.state.lock();
        let mut out = KVec::with_capacity(st.peers.len() + st.down.len(), GFP_KERNEL)?;
        for peer in st.peers.iter() {
            out.push(peer.status(), GFP_KERNEL)?;
        }
        for down in st.down.iter() {
            let status = LitePeerStatus {
                id: down.id,
                state: LITE_PEER_DOWN,
                epoch: down.epoch,
                qp_state: [LITE_QPS_NONE; 8],
                ..Default::default()
            };
            out.push(status, GFP_KERNEL)?;
        }
        Ok(out)
    }

    /// The `Arc` this `Lite` lives in, for work queued beyond the caller.
    pub(crate) fn arc(&self) -> Arc<Lite> {
        // SAFETY: `Lite::new` (the only constructor) puts it in an `Arc` the module keeps
        // until every callback and file is gone, so the count is not zero while `&self` lives.
        unsafe { ArcBorrow::from_raw(self as *const Lite) }.into()
    }

    /// This node's id; ENOTCONN before it joined.
    pub(crate) fn me(&self) -> Result<u32> {
        self.state.lock().node.as_ref().map(|n| n.id).ok_or_else(ENOTCONN)
    }

    /// A peer whose one QP is connected to itself: atomics on memory this node holds
    /// go through it, because RNIC atomics are atomic only against each other
    /// (IB_ATOMIC_HCA), not against the CPU's. Created at first use, again after
    /// a failure.
    pub(crate) fn loopback(&self) -> Result<Arc<Peer>> {
        let mut st = self.state.lock();
        let (id, epoch) = st.node.as_ref().map(|n| (n.id, n.epoch)).ok_or_else(ENOTCONN)?;
        if let Some(peer) = &st.loopback {
            if peer.ensure_connected().is_ok() {
                return Ok(peer.clone());
            }
        }
        let dev = st.devices.first().ok_or(ENODEV)?.clone();
        let peer = Peer::new(&dev, id, epoch, 1, self.qos.clone())?;
        peer.connect(&peer.local_info())?;
        st.drop_loopback();
        st.loopback = Some(peer.clone());
        Ok(peer)
    }

    /// The RDMA device LMR memory lives on.
    pub(crate) fn device(&self) -> Result<Arc<Device>> {
        self.state.lock().devices.first().cloned().ok_or(ENODEV)
    }

    /// Every peer whose QPs are connected.
    pub(crate) fn connected_peers(&self) -> Result<KVec<Arc<Peer>>> {
        let peers = {
            let st = self.state.lock();
            let mut peers = KVec::with_capacity(st.peers.len(), GFP_KERNEL)?;
            for peer in st.peers.iter() {
                peers.push(peer.clone(), GFP_KERNEL)?;
            }
            peers
        };
        let mut connected = KVec::with_capacity(peers.len(), GFP_KERNEL)?;
        for peer in peers.into_iter() {
            if peer.ensure_connected().is_ok() {
                connected.push(peer, GFP_KERNEL)?;
            }
        }
        Ok(connected)
    }

    pub(crate) fn peer(&self, id: u32) -> Result<Arc<Peer>> {
        let st = self.state.lock();
        if st.node.is_none() {
            return Err(ENOTCONN());
        }
        match st.peer_index(id) {
            Some(i) => Ok(st.peers[i].clone()),
            None if st.down.iter().any(|d| d.id == id) => Err(EHOSTDOWN()),
            None => Err(ENOENT),
        }
    }

    // ---- data path ----

    /// `count` echo round trips of `payload` bytes to `node`, writing each RTT in
    /// nanoseconds to `out`. A reply that differs from what was sent is EIO.
    pub(crate) fn ping(&self, node: u32, count: u32, timeout_ms: u32, payload: usize, mut out: UserSliceWriter) -> Result {
        let peer = self.peer(node)?;
        let mut body = KVec::from_elem(0u8, payload, GFP_KERNEL)?;
        let mut reply = KVec::from_elem(0u8, payload, GFP_KERNEL)?;
        for round in 0..count as usize {
            for (i, byte) in body.iter_mut().enumerate() {
                *byte = (round.wrapping_mul(31) ^ i) as u8;
            }
            let start = Ktime::ktime_get();
            let len = peer.call(MsgKind::Echo, &body, &mut reply, timeout_ms)?;
            let rtt = (Ktime::ktime_get() - start).to_ns();
            if len != payload || reply[..] != body[..] {
                return Err(EIO);
            }
            out.write(&(rtt as u64))?;
        }
        Ok(())
    }

    /// A write-with-immediate from `peer` arrived on QP `index` (completion context).
    pub(crate) fn on_recv(this: ArcBorrow<'_, Self>, peer: ArcBorrow<'_, Peer>, index: u32, imm: u32) {
        match wire::decode_imm(imm) {
            Some((ImmKind::Request, slot)) if (slot as usize) < SLOTS => {
                Peer::serve_request(peer, this, index as usize, slot as usize)
            }
            Some((ImmKind::Response, slot)) if (slot as usize) < SLOTS => peer.answer_arrived(slot as usize),
            Some((ImmKind::RpcRequest, payload)) => this.on_rpc_request(&peer.into(), payload),
            Some((ImmKind::RpcReply, slot)) => this.on_rpc_reply(&peer, slot as usize),
            Some((ImmKind::RpcHead, payload)) => this.on_rpc_head(&peer, payload),
            // A peer speaking a kind or slot we do not know: ignore it, never trust it.
            _ => {}
        }
    }

    /// A send to `peer` failed (completion context): fail its waiters now.
    pub(crate) fn on_send_error(&self, peer: &Peer, status: i32) {
        if !peer.failed.load(Ordering::Acquire) {
            pr_warn!("send to node {} failed (wc status {}); marking it failed\n", peer.id, status);
        }
        peer.mark_failed();
    }
}
