// SPDX-License-Identifier: GPL-2.0
//! A peer: another node, one incarnation of it, reached over K RC QPs with a
//! mailbox each way; its setup, connection, failure and teardown.

use crate::compat::now_ns;
use crate::errno::{EHOSTDOWN, EINPROGRESS, ENETDOWN, EOPNOTSUPP, ETIMEDOUT};
use crate::net::deadline::{self, STALL_NS};
use crate::net::polling::PollBudget;
use crate::net::wire::{self, CALL_SLOTS, SLOTS};
use crate::qos::Qos;
use crate::uapi::*;
use crate::verbs::{
    Device, DmaBuf, Op, Qp, RemoteQp, Staging, PORT_ACTIVE, REMOTE_READ, REMOTE_WRITE, TIMED_OUT,
};
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, new_spinlock, Arc, CondVar, Mutex, SpinLock};

use super::mailbox::{Calls, Slot};
use super::PeerServices;

/// Receives kept posted on every QP (each write-with-immediate consumes one).
const RECV_DEPTH: u32 = 256;
/// Send queue depth of every QP (verbs.c): messages need at most `2 * SLOTS` of it,
/// RPC requests and replies at most `2 * CALL_SLOTS`, head reports a few; one-sided
/// operations share the rest as credits.
const SEND_DEPTH: u32 = 512;
const HEAD_REPORTS: u32 = 16;
/// Staging pages per peer: one polls at a time and the others sleep (polling.rs),
/// so a few cover many callers; one finding them all taken pins or maps its own.
const STAGING_PAGES: usize = 8;
const DATA_CREDITS: u32 = SEND_DEPTH - 2 * SLOTS as u32 - 2 * CALL_SLOTS as u32 - HEAD_REPORTS;
/// Work completion statuses (`IB_WC_*`) that mean the peer is unreachable.
const WC_FLUSH_ERR: i32 = 5;
const WC_RETRY_EXC_ERR: i32 = 12;
const WC_RNR_RETRY_EXC_ERR: i32 = 13;
/// What siw completes a READ with whose response failed (MPA's CRC, a broken
/// frame) as it ends the connection: on iWARP, the peer is unreachable too.
const WC_GENERAL_ERR: i32 = 21;
/// The peer's NIC refused the key, address or access.
const WC_REM_ACCESS_ERR: i32 = 10;
/// A failed link's work requests are flushed at once; past this, `fail_op` says so.
const FLUSH_WARN_NS: u64 = 10_000_000_000;
// At most SLOTS requests and SLOTS answers, CALL_SLOTS RPC requests and replies each
// way, and a few head reports are in flight between two nodes, so even if all of
// them use one QP its receive queue never runs dry (no RNR retries).
const _: () = assert!(2 * SLOTS as u32 + 2 * CALL_SLOTS as u32 + HEAD_REPORTS <= RECV_DEPTH);

/// `IB_MTU_256` ..= `IB_MTU_4096`.
pub(crate) const MTU_CODES: core::ops::RangeInclusive<u32> = 1..=5;

/// Starting PSN of a QP: any 24-bit value works; deriving it from the QPN keeps both
/// sides' view reproducible without storing it.
fn psn_for(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9E37_79B1) & 0x00FF_FFFF
}

/// Where peers write messages to us (`inbox`) and where ours are staged (`outbox`).
pub(crate) struct Mailbox {
    pub(crate) inbox: DmaBuf,
    pub(crate) outbox: DmaBuf,
}

pub(crate) struct Link {
    pub(crate) state: u32,
    pub(crate) qps: KVec<Arc<Qp>>,
    pub(crate) mailbox: Option<Mailbox>,
    pub(crate) remote: Option<LiteConnInfo>,
    /// Through the RDMA CM: the QPs (bits) on which the other side's hello came.
    pub(crate) cm_hellos: u32,
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

    /// Every QP's bit.
    fn all_qps(&self) -> u32 {
        (1u32 << self.qps.len()) - 1
    }
}

/// Another node, one incarnation of it (`epoch`), reached over K RC QPs.
#[pin_data(PinnedDrop)]
pub(crate) struct Peer {
    pub(crate) id: u32,
    pub(crate) epoch: u64,
    /// This node's id and epoch when the peer was prepared.
    me: (u32, u64),
    /// Identifies the device the QPs live on; its verbs are only used while it is registered.
    pub(crate) dev: Arc<Device>,
    pub(crate) sgid_index: i32,
    pub(crate) gid: [u8; 16],
    pub(crate) mtu: u32,
    /// Set once the peer failed or was shut down: waiters check it without `link`.
    pub(crate) failed: AtomicBool,
    /// `mark_failed` calls that may hold references to the QPs (counted under
    /// `link`): `shutdown` waits until none does, so that the last reference, whose
    /// drop drains and destroys the QP, is its own and never a completion
    /// handler's (a drain there waits for that very handler).
    marking: AtomicU32,
    #[pin]
    pub(crate) link: SpinLock<Link>,
    #[pin]
    pub(crate) calls: SpinLock<Calls>,
    #[pin]
    pub(crate) call_done: CondVar,
    /// Free send queue entries per QP for one-sided operations.
    #[pin]
    pub(crate) credits: Mutex<[u32; LITE_MAX_QPS_PER_PEER as usize]>,
    #[pin]
    pub(crate) credit_freed: CondVar,
    /// Spreads one-sided operations over the QPs.
    pub(crate) next_qp: AtomicUsize,
    /// Classes and pacing of this node's traffic.
    pub(crate) qos: Arc<Qos>,
    /// How long small operations to this peer busy-poll for their completion.
    pub(crate) poll: PollBudget,
    /// Where the READ that ends a transfer of writes lands (`fence_writes`).
    pub(crate) fence_sink: DmaBuf,
    /// Where small reads and atomics from this peer land (`Peer::rdma_user`).
    pub(crate) staging: Staging,
    /// What the services above net keep per peer (our calls to its RPC servers);
    /// none for the loopback peer.
    services: Option<Arc<dyn PeerServices>>,
}

impl Peer {
    pub(crate) fn new(
        dev: &Arc<Device>,
        me: (u32, u64),
        id: u32,
        epoch: u64,
        nr_qps: u32,
        qos: Arc<Qos>,
        services: Option<Arc<dyn PeerServices>>,
    ) -> Result<Arc<Peer>> {
        let port = dev.query_port()?;
        if port.state != PORT_ACTIVE {
            return Err(ENETDOWN());
        }
        qos.port_is(port.speed, port.width);
        let mtu = port.mtu;
        let (gid, sgid_index) = dev.ip_gid()?;
        if dev.connects_through_cm() && id == me.0 {
            // A QP connected to itself: only the NIC's atomics use one (loopback).
            return Err(EOPNOTSUPP());
        }
        let mut inbox = DmaBuf::new(dev, wire::MAILBOX_SIZE)?;
        // Written by the peer's messages, read by its latency probe (`Peer::probe`).
        inbox.expose(0, wire::MAILBOX_SIZE, REMOTE_WRITE | REMOTE_READ)?;
        let mailbox = Mailbox {
            inbox,
            outbox: DmaBuf::new(dev, wire::MAILBOX_SIZE)?,
        };
        let fence_sink = DmaBuf::new(dev, 8)?;
        let staging = Staging::new(dev, STAGING_PAGES)?;
        let peer = Arc::pin_init(
            pin_init!(Peer {
                id,
                epoch,
                me,
                dev: dev.clone(),
                sgid_index,
                gid,
                mtu,
                failed: AtomicBool::new(false),
                marking: AtomicU32::new(0),
                link <- new_spinlock!(
                    Link {
                        state: LITE_PEER_PREPARED,
                        qps: KVec::new(),
                        mailbox: Some(mailbox),
                        remote: None,
                        cm_hellos: 0,
                    },
                    "lite:peer.link"
                ),
                calls <- new_spinlock!(Calls { slots: [Slot::Free; SLOTS], next_seq: 1 }, "lite:peer.calls"),
                call_done <- new_condvar!("lite:peer.call_done"),
                credits <- new_mutex!([DATA_CREDITS; LITE_MAX_QPS_PER_PEER as usize], "lite:peer.credits"),
                credit_freed <- new_condvar!("lite:peer.credit_freed"),
                next_qp: AtomicUsize::new(0),
                qos,
                poll: PollBudget::new(),
                fence_sink,
                staging,
                services,
            }),
            GFP_KERNEL,
        )?;
        // The QPs call back with the peer's address, so they are created once it is final.
        let mut qps = KVec::with_capacity(nr_qps as usize, GFP_KERNEL)?;
        for index in 0..nr_qps {
            let qp = dev.create_qp(&*peer as *const Peer as *const c_void, index, RECV_DEPTH)?;
            if dev.connects_through_cm() && !peer.cm_active() {
                qp.cm_expect((id, epoch), me)?;
            }
            qps.push(Arc::new(qp, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        peer.link.lock().qps = qps;
        Ok(peer)
    }

    /// Through the RDMA CM, the node with the lower id connects; the other accepts.
    fn cm_active(&self) -> bool {
        self.me.0 < self.id
    }

    /// What the peer needs to connect its QPs to ours and to write to our mailbox.
    /// The QP an RPC request or reply goes on: `class`'s (the current task's when
    /// `None`), as its transfers would use; `spread` rotates among them.
    pub(crate) fn message_qp(&self, class: Option<u32>, spread: usize) -> usize {
        let nr_qps = self.link.lock().qps.len().max(1);
        match class {
            Some(class) => self.qos.message_qp(class, nr_qps, spread),
            None => self.qos.current_message_qp(nr_qps, spread),
        }
    }

    /// What the services keep for this peer; `None` for the loopback peer.
    pub(crate) fn services(&self) -> Option<&dyn PeerServices> {
        self.services.as_deref()
    }

    pub(crate) fn local_info(&self) -> LiteConnInfo {
        let link = self.link.lock();
        let mut info = LiteConnInfo {
            gid: self.gid,
            mtu: self.mtu,
            transport: self.dev.caps().transport,
            paths: self.dev.caps().flags & LITE_PATH_HOLDER_ATOMICS,
            ..Default::default()
        };
        info.nr_qps = link.qps.len() as u32;
        for (i, qp) in link.qps.iter().enumerate() {
            info.qpn[i] = qp.num();
            info.psn[i] = psn_for(info.qpn[i]);
        }
        if let Some(mailbox) = &link.mailbox {
            info.mailbox_addr = mailbox.inbox.dma();
            info.mailbox_rkey = mailbox.inbox.rkey().unwrap_or(0);
            info.mailbox_slots = SLOTS as u32;
        }
        info
    }

    /// Connects every QP to the peer's published side. Idempotent for the same info.
    /// Caller holds `Network::state`, so the QPs cannot be shut down meanwhile.
    /// Through the RDMA CM the connection completes later: EINPROGRESS until then.
    pub(crate) fn connect(&self, remote: &LiteConnInfo) -> Result {
        if self.dev.connects_through_cm() {
            return self.connect_through_cm(remote);
        }
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
            let far = RemoteQp {
                gid: &remote.gid,
                qpn: remote.qpn[i],
                psn: remote.psn[i],
            };
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

    /// The RDMA CM's side of `connect`: the active side starts every QP's connection
    /// and sends a hello on each once established (cm.c); the passive side answers
    /// the hellos once it has the active side's mailbox here. So neither side is
    /// connected before the other can answer it.
    fn connect_through_cm(&self, remote: &LiteConnInfo) -> Result {
        let (qps, answered) = {
            let mut link = self.link.lock();
            match &link.remote {
                Some(known) if known == remote => return Self::cm_outcome(&link),
                Some(_) => return Err(EEXIST),
                None => {}
            }
            if remote.nr_qps as usize != link.qps.len() {
                return Err(EINVAL);
            }
            link.remote = Some(*remote);
            if self.cm_active() {
                (link.qp_refs(), Ok(()))
            } else {
                (Default::default(), self.answer_hellos(&mut link))
            }
        };
        let started = qps
            .iter()
            .flatten()
            .try_for_each(|qp| qp.cm_connect(&remote.gid, self.me, (self.id, self.epoch)));
        if let Err(e) = answered.and(started) {
            pr_warn!(
                "cannot connect to node {} through the RDMA CM ({:?}); marking it failed\n",
                self.id,
                e
            );
            self.mark_failed();
            return Err(e);
        }
        Self::cm_outcome(&self.link.lock())
    }

    fn cm_outcome(link: &Link) -> Result {
        match link.state {
            LITE_PEER_CONNECTED => Ok(()),
            LITE_PEER_PREPARED => Err(EINPROGRESS()),
            _ => Err(EHOSTDOWN()),
        }
    }

    /// The passive side, once every QP's hello came and the active side's mailbox
    /// is known: connected, and a hello back on every QP. Under `link`, which every
    /// message takes to be sent, so that on each QP the hello goes first.
    fn answer_hellos(&self, link: &mut Link) -> Result {
        if link.state != LITE_PEER_PREPARED
            || link.remote.is_none()
            || link.qps.is_empty()
            || link.cm_hellos != link.all_qps()
        {
            return Ok(());
        }
        link.state = LITE_PEER_CONNECTED;
        for qp in link.qps.iter() {
            qp.cm_hello()?;
        }
        Ok(())
    }

    /// On QP `index`, connected through the RDMA CM, the other side's hello came
    /// (`status` 0), or the connection failed or ended (a negative errno).
    pub(crate) fn on_cm_event(&self, index: u32, status: i32) {
        let answered = if status == 0 {
            let mut link = self.link.lock();
            link.cm_hellos |= 1u32.checked_shl(index).unwrap_or(0);
            if self.cm_active() {
                // The passive side answers only once it can answer us.
                if link.state == LITE_PEER_PREPARED && link.remote.is_some() {
                    link.state = LITE_PEER_CONNECTED;
                }
                Ok(())
            } else {
                self.answer_hellos(&mut link)
            }
        } else {
            Err(Error::from_errno(status))
        };
        if let Err(e) = answered {
            if !self.failed.load(Ordering::Acquire) {
                pr_warn!(
                    "the RDMA CM connection of QP {} to node {} failed or ended ({:?}); marking it failed\n",
                    index,
                    self.id,
                    e
                );
            }
            self.mark_failed();
        }
    }

    /// `op` missed its deadline (deadline.rs) with work requests still posted: the
    /// link counts as failed. Its QPs are flushed, so that `op` completes, and the
    /// status to report (`wc_error`) is returned.
    pub(crate) fn expire(&self, op: &Op) -> i32 {
        if !self.failed.load(Ordering::Acquire) {
            pr_warn!(
                "RDMA to node {} did not complete within its deadline; marking it failed\n",
                self.id
            );
        }
        self.fail_op(op, TIMED_OUT)
    }

    /// Marks the link failed, so that `op`'s work requests are flushed, waits for
    /// them and returns `status`. The wait has no bound: until a work request
    /// completes, the NIC may still write its buffer. A provider flushes them as
    /// its QP enters the error state; one that has not after `FLUSH_WARN_NS` lost
    /// them (siw did, behind a failed Read Response), and the log says so.
    fn fail_op(&self, op: &Op, status: i32) -> i32 {
        self.mark_failed();
        if op.wait_timeout(FLUSH_WARN_NS) == Err(TIMED_OUT) {
            pr_warn!(
                "work requests to node {} not flushed {} s after its link failed ({} counted); still waiting (a provider bug?)\n",
                self.id,
                FLUSH_WARN_NS / 1_000_000_000,
                op.pending()
            );
            let _ = op.wait();
        }
        status
    }

    /// Waits with `wait`, given the ns it may take (`TIMED_OUT` when they ran out),
    /// for at most `left_ns`, then `expire`s `op`. Where the transport bounds no
    /// retries itself (iWARP) it also gives up once `op` went `STALL_NS` without a
    /// work request posted or completed, as RC's retry budget would: the link
    /// counts as failed then too, and the status is WC_RETRY_EXC_ERR. Returns what
    /// `wait` returned otherwise.
    pub(crate) fn wait_alive(
        &self,
        op: &Op,
        left_ns: u64,
        mut wait: impl FnMut(u64) -> core::result::Result<(), i32>,
    ) -> core::result::Result<(), i32> {
        let end = now_ns().saturating_add(left_ns);
        let watch = self.dev.connects_through_cm();
        let stall_left = || {
            if watch {
                deadline::stall_left_ns(op.idle_ns())
            } else {
                u64::MAX
            }
        };
        loop {
            match wait(end.saturating_sub(now_ns()).min(stall_left())) {
                Err(TIMED_OUT) => {}
                done => return done,
            }
            if now_ns() >= end {
                return Err(self.expire(op));
            }
            if stall_left() == 0 {
                if !self.failed.load(Ordering::Acquire) {
                    pr_warn!(
                        "RDMA to node {} made no progress for {} s; marking it failed\n",
                        self.id,
                        STALL_NS / 1_000_000_000
                    );
                }
                return Err(self.fail_op(op, WC_RETRY_EXC_ERR));
            }
        }
    }

    /// A failed work request: the QP is in error, the peer unreachable.
    pub(crate) fn wc_error(&self, status: i32) -> Error {
        if !self.failed.load(Ordering::Acquire) {
            pr_warn!(
                "RDMA to node {} failed (wc status {}); marking it failed\n",
                self.id,
                status
            );
        }
        self.mark_failed();
        match status {
            TIMED_OUT => ETIMEDOUT(),
            WC_FLUSH_ERR | WC_RETRY_EXC_ERR | WC_RNR_RETRY_EXC_ERR => EHOSTDOWN(),
            WC_GENERAL_ERR if self.dev.connects_through_cm() => EHOSTDOWN(),
            WC_REM_ACCESS_ERR => EACCES,
            _ => EIO,
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

    /// A send failed for good (retries exhausted) or the peer did not confirm a
    /// teardown: the peer is unreachable. Every QP to it goes to error first, so
    /// nothing it still sends lands here once its callers' buffers (pinned output
    /// pages, rings) are let go. Process context (the CQ's workqueue included).
    pub(crate) fn mark_failed(&self) {
        let qps = {
            let mut link = self.link.lock();
            if link.state == LITE_PEER_CONNECTED || link.state == LITE_PEER_PREPARED {
                link.state = LITE_PEER_ERROR;
            }
            self.marking.fetch_add(1, Ordering::Relaxed);
            link.qp_refs()
        };
        for qp in qps.iter().flatten() {
            if let Err(e) = qp.to_error() {
                pr_err!(
                    "node {}: QP {} refused the error state ({:?})\n",
                    self.id,
                    qp.num(),
                    e
                );
            }
        }
        drop(qps);
        self.marking.fetch_sub(1, Ordering::Release);
        self.fail_waiters();
    }

    /// The peer did not confirm a teardown, so it may still write into memory
    /// about to be freed: fenced off as a failed peer, and its QPs drained. A QP
    /// moved to error only stops taking new packets; the NIC may still be executing
    /// one that arrived before (rxe's responder works through a queue), so the
    /// memory is let go only once each QP's flush came back through it. Process
    /// context, never the CQ's: the drain waits for the CQ's handler.
    pub(crate) fn fence(&self, why: &str) {
        if !self.failed.load(Ordering::Acquire) {
            pr_warn!("node {} {}; its QPs are fenced off\n", self.id, why);
        }
        self.mark_failed();
        let qps = self.link.lock().qp_refs();
        for qp in qps.iter().flatten() {
            qp.drain();
        }
    }

    fn fail_waiters(&self) {
        self.failed.store(true, Ordering::Release);
        if let Some(services) = &self.services {
            services.peer_failed();
        }
        {
            let _calls = self.calls.lock();
            self.call_done.notify_all();
        }
        let _credits = self.credits.lock();
        self.credit_freed.notify_all();
    }

    /// Stops all traffic and destroys the QPs (draining reaps every completion),
    /// then frees the mailbox, which no work request or peer can reach any more.
    /// An RDMA CM event handler or a completion handler may hold QP references of
    /// its own (`mark_failed`): every connection is ended first, and the QPs go
    /// once no `mark_failed` holds any, so that no QP outlives the peer its
    /// callbacks point to and none is destroyed in a handler.
    pub(crate) fn shutdown(&self) {
        let (qps, mailbox) = {
            let mut link = self.link.lock();
            link.state = LITE_PEER_DOWN;
            (core::mem::take(&mut link.qps), link.mailbox.take())
        };
        for qp in qps.iter() {
            qp.end_cm();
        }
        // Counted under `link` before it cloned: one that began after the QPs left
        // `link` holds none.
        while self.marking.load(Ordering::Acquire) != 0 {
            // SAFETY: sleeps the current task, which holds no spinlock (process context).
            unsafe { kernel::bindings::schedule_timeout_uninterruptible(1) };
        }
        drop(qps);
        drop(mailbox);
        self.fail_waiters();
    }

    pub(crate) fn status(&self) -> LitePeerStatus {
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
