// SPDX-License-Identifier: GPL-2.0
//! One-sided transfers: RDMA reads, writes and atomics to a peer, windowed over
//! pinned user memory, within the QP's send credits and the pacer's chunks.

use crate::compat::{now_ns, user_slice};
use crate::errno::{EHOSTDOWN, ETIMEDOUT};
use crate::ffi;
use crate::net::deadline::Deadline;
use crate::net::gather;
use crate::net::inflight::{InFlight, MAX_INFLIGHT};
use crate::net::polling::{self, Wait};
use crate::qos::Ticket;
use crate::uapi::*;
use crate::verbs::{
    Atomic, DmaBuf, Op, OpStamps, PacedPlace, Pacing, Qp, UserPages, PAGE_SIZE, STAGING_BYTES,
    TIMED_OUT,
};
use core::sync::atomic::Ordering;
use kernel::prelude::*;

use super::Peer;

/// User memory pinned at a time by one transfer.
const WINDOW_BYTES: usize = 1 << 20;
/// Bytes per RDMA work request, and bytes in flight per transfer (see inflight.rs);
/// while paced, the pacer sizes both (qos.rs).
const WR_BYTES: usize = 32 << 10;
const INFLIGHT_BYTES: usize = 4 * WR_BYTES;
/// Send queue credits one transfer holds: its most work requests in flight.
const TRANSFER_CREDITS: u32 = MAX_INFLIGHT as u32;
/// How often a transfer waiting for a place among the node's paced work requests
/// looks whether its peer failed meanwhile.
const PACED_WAIT_NS: u64 = 1_000_000_000;
// A paced chunk is one work request.
const _: () = assert!(LITE_QOS_CHUNK_MAX as usize == WR_BYTES);
// An op counts the bytes of its work requests in flight, each until it completes.
const _: () = assert!(MAX_INFLIGHT <= ffi::LITE_OP_MAX_RDMA as usize);

/// Local runs, in order, going to the contiguous remote range at `remote`, which
/// the peer reaches under `rkey`.
fn contiguous(
    runs: impl Iterator<Item = (u64, usize)>,
    mut remote: u64,
    rkey: u32,
) -> impl Iterator<Item = (u64, usize, u64, u32)> {
    runs.map(move |(addr, len)| {
        let piece = (addr, len, remote, rkey);
        remote += len as u64;
        piece
    })
}

/// Where the time of a user transfer's last window went (ns, `Ktime` clock).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct WindowStamps {
    /// Its buffer was ready: a staging page taken, or its pages pinned and mapped.
    pub(crate) ready_ns: u64,
    /// Its op's post and completion.
    pub(crate) op: OpStamps,
    /// The caller ran again after the wait for it.
    pub(crate) running_ns: u64,
}

impl Peer {
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

    /// Moves `pieces` (local DMA address, bytes, remote address, rkey) to or from
    /// the peer through one QP, and waits until all of it is there. Consecutive
    /// pieces whose remote ranges follow each other under one rkey share a work
    /// request.
    ///
    /// Work requests carry at most `WR_BYTES`, and at most `INFLIGHT_BYTES` of them
    /// are outstanding (`InFlight`): rxe has no congestion control, and a larger burst
    /// overflows the receiving side's queues, which costs a retransmit timeout per loss.
    /// The caller's class decides the QP (HW-Sep) and, while paced (SW-Pri), smaller
    /// work requests, fewer of them in flight, and when each may go (qos.rs).
    /// ETIMEDOUT, and the peer marked failed, when the operation misses `deadline`.
    fn transfer(
        &self,
        op: &Op,
        write: bool,
        wait: Wait,
        pieces: impl Iterator<Item = (u64, usize, u64, u32)>,
        deadline: &mut Deadline,
    ) -> Result {
        let max_sge = self.dev.max_sge(!write);
        let nr_qps = self.link.lock().qps.len().max(1);
        let mut ticket = self.qos.begin(
            &self.dev,
            nr_qps,
            self.next_qp.fetch_add(1, Ordering::Relaxed),
        );
        let qp_index = ticket.qp();
        let turn = now_ns();
        self.take_credits(qp_index, TRANSFER_CREDITS)?;
        deadline.excuse(now_ns().saturating_sub(turn));
        let mut wr_bytes = ticket.first_wr_limit(WR_BYTES);
        let mut inflight = InFlight::new(ticket.inflight_limit(INFLIGHT_BYTES));
        let mut sges = [ffi::lite_sge {
            addr: 0,
            len: 0,
            reserved: 0,
        }; ffi::LITE_MAX_SGE as usize];
        // SGEs gathered so far, their bytes, and where they go (under which key).
        let (mut count, mut batch, mut at, mut at_rkey) = (0, 0usize, 0u64, 0u32);
        let mut posted: Result = Ok(());
        let mut post = |sges: &[ffi::lite_sge], at: u64, rkey: u32, wr_bytes: &mut usize| {
            let limit = self.post_rdma(
                qp_index,
                op,
                &mut ticket,
                &mut inflight,
                deadline,
                write,
                sges,
                at,
                rkey,
            )?;
            *wr_bytes = limit.min(WR_BYTES);
            inflight.set_budget(ticket.inflight_limit(INFLIGHT_BYTES));
            Ok(())
        };
        'pieces: for (mut addr, mut len, mut remote, rkey) in pieces {
            while len > 0 {
                if count > 0 && (remote != at + batch as u64 || rkey != at_rkey) {
                    posted = post(&sges[..count], at, at_rkey, &mut wr_bytes);
                    if posted.is_err() {
                        break 'pieces;
                    }
                    (count, batch) = (0, 0);
                }
                if count == 0 {
                    (at, at_rkey) = (remote, rkey);
                }
                let take = len.min(wr_bytes.saturating_sub(batch).max(1));
                sges[count] = ffi::lite_sge {
                    addr,
                    len: take as u32,
                    reserved: 0,
                };
                (count, batch) = (count + 1, batch + take);
                (addr, len, remote) = (addr + take as u64, len - take, remote + take as u64);
                if count == max_sge || batch >= wr_bytes {
                    posted = post(&sges[..count], at, at_rkey, &mut wr_bytes);
                    if posted.is_err() {
                        break 'pieces;
                    }
                    (count, batch) = (0, 0);
                }
            }
        }
        if posted.is_ok() && count > 0 {
            posted = post(&sges[..count], at, at_rkey, &mut wr_bytes);
        }
        if posted.is_ok() && write && self.dev.connects_through_cm() {
            posted = self.fence_writes(qp_index, op, deadline);
        }
        let completed = self.wait(
            op,
            wait,
            ticket.class(),
            ticket.bytes(),
            ticket.start_ns(),
            deadline,
        );
        if completed.is_ok() && posted.is_ok() {
            ticket.completed(write, op.done_ns());
        }
        self.return_credits(qp_index, TRANSFER_CREDITS);
        posted?;
        completed.map_err(|status| self.wc_error(status))
    }

    /// Zero-copy RDMA WRITE of `pieces` (local DMA address, bytes, remote address,
    /// rkey); returns once all of it landed.
    pub(crate) fn write_pieces(
        &self,
        pieces: impl Iterator<Item = (u64, usize, u64, u32)>,
    ) -> Result {
        let op = Op::new()?;
        let mut deadline = Deadline::starting(now_ns());
        self.transfer(&op, true, Wait::Sleep, pieces, &mut deadline)
    }

    /// Ends a transfer of writes with an 8-byte RDMA READ of the peer's inbox on the
    /// same QP. On iWARP a WRITE's completion says only that its data left, and a
    /// later message on another QP (an RPC reply's notice, a user's next call) may
    /// reach the peer first; a READ completes only once the peer placed every WRITE
    /// before it on the QP. So a transfer ends when its data is there, as on RoCE.
    fn fence_writes(&self, qp_index: usize, op: &Op, deadline: &Deadline) -> Result {
        // An op counts at most MAX_INFLIGHT work requests in flight.
        self.wait_below(op, MAX_INFLIGHT as u32 - 1, deadline.left_ns(now_ns()))?;
        let link = self.link.lock();
        let Some(remote) = link.remote.filter(|_| link.state == LITE_PEER_CONNECTED) else {
            return Err(EHOSTDOWN());
        };
        let qp = link.qps.get(qp_index).ok_or_else(EHOSTDOWN)?;
        let sink = [ffi::lite_sge {
            addr: self.fence_sink.dma(),
            len: 8,
            reserved: 0,
        }];
        qp.post_rdma(
            op,
            false,
            &sink,
            remote.mailbox_addr,
            remote.mailbox_rkey,
            Pacing::Exempt,
        )
    }

    /// Posts the RDMA read or write gathered in `sges` on QP `qp_index` as the ticket
    /// lets it go, in pieces when pacing began since it was gathered, each once the
    /// bytes of `op` still in flight leave room for it; returns the largest work
    /// request the ticket allows next.
    #[allow(clippy::too_many_arguments)]
    fn post_rdma(
        &self,
        qp_index: usize,
        op: &Op,
        ticket: &mut Ticket<'_>,
        inflight: &mut InFlight,
        deadline: &mut Deadline,
        write: bool,
        sges: &[ffi::lite_sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<usize> {
        let mut rest = [ffi::lite_sge {
            addr: 0,
            len: 0,
            reserved: 0,
        }; ffi::LITE_MAX_SGE as usize];
        let mut count = 0;
        for (to, from) in rest.iter_mut().zip(sges) {
            *to = *from;
            count += 1;
        }
        let mut at = remote_addr;
        loop {
            let lens = || rest[..count].iter().map(|sge| sge.len as usize);
            let turn = now_ns();
            let admit = ticket.admit(lens().sum())?;
            if admit.probe {
                // A failed probe only means no sample: the transfer's own error tells.
                if let Ok(ns) = self.probe(ticket.probe_qp()) {
                    self.qos.probed(ns);
                }
            }
            let admitted = now_ns();
            deadline.excuse(admitted.saturating_sub(turn));
            let (whole, part) = gather::cut(lens(), admit.bytes);
            let mut piece = rest;
            let mut entries = whole;
            if part > 0 {
                piece[whole].len = part as u32;
                entries += 1;
            }
            deadline.posting(admit.bytes as u64);
            // Its tokens are taken while its earlier work requests are still in flight.
            // One let go unpaced just before pacing began still goes unpaced, and paced
            // ones wait until it completed, as for all others (Pacing::Unpaced).
            self.wait_below(
                op,
                inflight.may_remain(admit.bytes),
                deadline.left_ns(admitted),
            )?;
            inflight.posted(admit.bytes);
            let pacing = match ticket.paced_places() {
                Some(places) => {
                    let turn = now_ns();
                    let place = self.enter_paced(places)?;
                    deadline.excuse(now_ns().saturating_sub(turn));
                    Pacing::Paced(place)
                }
                None if ticket.class() == LITE_CLASS_LATENCY => Pacing::Exempt,
                None => Pacing::Unpaced,
            };
            let link = self.link.lock();
            if link.remote.is_none() || link.state != LITE_PEER_CONNECTED {
                return Err(EHOSTDOWN());
            }
            let qp = link.qps.get(qp_index).ok_or_else(EHOSTDOWN)?;
            qp.post_rdma(op, write, &piece[..entries], at, rkey, pacing)?;
            drop(link);
            ticket.posted();
            rest.copy_within(whole..count, 0);
            count -= whole;
            if part > 0 {
                rest[0].addr += part as u64;
                rest[0].len -= part as u32;
            }
            at += admit.bytes as u64;
            if count == 0 {
                return Ok(admit.next);
            }
        }
    }

    /// Waits until at most `outstanding` work requests of `op` are in flight, for
    /// at most `left_ns` (`wait_alive`).
    fn wait_below(&self, op: &Op, outstanding: u32, left_ns: u64) -> Result {
        self.wait_alive(op, left_ns, |ns| {
            if op.wait_below(outstanding, ns) {
                Ok(())
            } else {
                Err(TIMED_OUT)
            }
        })
        .map_err(|status| self.wc_error(status))
    }

    /// A place among this node's paced work requests in flight (at most `places`).
    /// Other transfers' completions give places back, and each of those ends by its
    /// deadline; EHOSTDOWN once this peer failed meanwhile, EINTR when killed.
    fn enter_paced(&self, places: u32) -> Result<PacedPlace<'_>> {
        loop {
            match self.dev.enter_paced(places, PACED_WAIT_NS) {
                Err(e) if e == ETIMEDOUT() => {
                    if self.failed.load(Ordering::Acquire) {
                        return Err(EHOSTDOWN());
                    }
                }
                entered => return entered,
            }
        }
    }

    /// SW-Pri's reference flow: the round trip (ns) of an 8-byte RDMA READ of the
    /// peer's mailbox on QP `qp_index`, one latency-class operations use, which queues
    /// behind this node's paced traffic wherever a latency-class operation would.
    fn probe(&self, qp_index: usize) -> Result<u64> {
        let target = self.staging.page(&self.dev)?;
        let (dma, _) = target.range(0, 8)?;
        let sge = [ffi::lite_sge {
            addr: dma,
            len: 8,
            reserved: 0,
        }];
        let op = Op::new()?;
        let start = now_ns();
        // Polls as the latency class's calls do, to see what they see.
        self.single_request(
            qp_index,
            Wait::PollFirst,
            LITE_CLASS_LATENCY,
            &op,
            |qp, remote| {
                qp.post_rdma(
                    &op,
                    false,
                    &sge,
                    remote.mailbox_addr,
                    remote.mailbox_rkey,
                    Pacing::Exempt,
                )
            },
        )?;
        Ok(now_ns() - start)
    }

    /// Waits for `op`, `bytes` of `class` posted since `start_ns`, until `deadline`
    /// (`wait_alive`): users' small operations of the latency and default classes
    /// busy-poll first, one waiter per peer at a time (polling.rs). Called with no
    /// lock held that a completion handler takes.
    fn wait(
        &self,
        op: &Op,
        wait: Wait,
        class: u32,
        bytes: u64,
        start_ns: u64,
        deadline: &Deadline,
    ) -> core::result::Result<(), i32> {
        let polls = polling::polls(wait, class, bytes);
        self.wait_alive(op, deadline.left_ns(now_ns()), |ns| {
            self.wait_within(op, polls, start_ns, ns)
        })
    }

    /// `wait`'s wait, for at most `left` ns: polling first if `polls`, the peer's
    /// round trips are short enough (polling.rs) and no other waiter of it polls.
    fn wait_within(
        &self,
        op: &Op,
        polls: bool,
        start_ns: u64,
        left: u64,
    ) -> core::result::Result<(), i32> {
        if !polls {
            return op.wait_timeout(left);
        }
        let budget_ns = self.poll.budget_ns();
        let turn = if budget_ns > 0 {
            self.poll.try_poll()
        } else {
            None
        };
        let completed = match turn {
            Some(_turn) => op.wait_polling(&self.dev, budget_ns, left),
            None => op.wait_timeout(left),
        };
        // To the completion's handler, not to this wakeup, which a sleeper pays on top.
        let done_ns = op.done_ns();
        if done_ns > start_ns {
            self.poll.record(done_ns - start_ns);
        }
        completed
    }

    /// Posts one work request of `op` (for `class`) with `post` on QP `qp_index` of
    /// the connected peer, holding a send credit, and waits for its completion.
    fn single_request(
        &self,
        qp_index: usize,
        wait: Wait,
        class: u32,
        op: &Op,
        post: impl FnOnce(&Qp, &LiteConnInfo) -> Result,
    ) -> Result {
        self.take_credits(qp_index, 1)?;
        let start_ns = now_ns();
        let posted = {
            let link = self.link.lock();
            match (
                &link.remote,
                link.state == LITE_PEER_CONNECTED,
                link.qps.get(qp_index),
            ) {
                (Some(remote), true, Some(qp)) => post(qp, remote),
                _ => Err(EHOSTDOWN()),
            }
        };
        let mut deadline = Deadline::starting(start_ns);
        deadline.posting(8);
        let completed = self.wait(op, wait, class, 8, start_ns, &deadline);
        self.return_credits(qp_index, 1);
        posted?;
        completed.map_err(|status| self.wc_error(status))
    }

    /// Zero-copy RDMA WRITE (`write`) of user memory `[addr, addr + len)` to the peer's
    /// `remote_addr` (under `rkey`), or READ into it; returns once the data is there,
    /// with where the time of its last window went.
    /// A READ of at most a page goes through one of the peer's staging pages while
    /// one is free (`read_staged`); otherwise the buffer is pinned and mapped a
    /// window at a time.
    ///
    /// `still_valid` is checked before each window, so that revoking the mapping
    /// waits for at most one window of a long transfer.
    pub(crate) fn rdma_user(
        &self,
        write: bool,
        addr: usize,
        len: usize,
        remote_addr: u64,
        rkey: u32,
        still_valid: &dyn Fn() -> Result,
    ) -> Result<WindowStamps> {
        if !write && len <= STAGING_BYTES {
            if let Some(page) = self.staging.take() {
                still_valid()?;
                let stamps = self.read_staged(&page, len, remote_addr, rkey)?;
                // A buffer that turns out not to be writable fails only now, after the READ.
                page.copy_to_user(0, &mut user_slice(addr, len).writer(), len)?;
                return Ok(stamps);
            }
        }
        let op = Op::new()?;
        let mut deadline = Deadline::starting(now_ns());
        let mut stamps = WindowStamps::default();
        let mut done = 0;
        while done < len {
            still_valid()?;
            let start = addr + done;
            let window = (WINDOW_BYTES - start % PAGE_SIZE).min(len - done);
            let pages = UserPages::pin(&self.dev, start, window, !write)?;
            stamps.ready_ns = now_ns();
            self.transfer(
                &op,
                write,
                Wait::PollFirst,
                contiguous(pages.runs(), remote_addr + done as u64, rkey),
                &mut deadline,
            )?;
            stamps.running_ns = now_ns();
            done += window;
        }
        stamps.op = op.stamps();
        Ok(stamps)
    }

    /// `rdma_user`'s READ of `len` bytes, at most a page, into a staging `page` of
    /// this peer, from which the caller copies them out: no user page is pinned.
    fn read_staged(
        &self,
        page: &DmaBuf,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<WindowStamps> {
        let (dma, len) = page.range(0, len)?;
        // Dropped before the caller gives `page` back, the op waits for whatever of
        // its work request is still posted.
        let op = Op::new()?;
        let mut deadline = Deadline::starting(now_ns());
        let mut stamps = WindowStamps {
            ready_ns: now_ns(),
            ..Default::default()
        };
        self.transfer(
            &op,
            false,
            Wait::PollFirst,
            core::iter::once((dma, len as usize, remote_addr, rkey)),
            &mut deadline,
        )?;
        stamps.running_ns = now_ns();
        stamps.op = op.stamps();
        Ok(stamps)
    }

    /// RDMA WRITE of `len` bytes at `offset` of kernel buffer `src` to `remote_addr`
    /// (under `rkey`).
    pub(crate) fn rdma_write_kernel(
        &self,
        src: &DmaBuf,
        offset: usize,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result {
        self.rdma_kernel(true, src, offset, len, remote_addr, rkey)
    }

    /// RDMA WRITE (`write`) of `len` bytes at `offset` of kernel buffer `buf` to
    /// `remote_addr` (under `rkey`), or READ from there into it.
    pub(crate) fn rdma_kernel(
        &self,
        write: bool,
        buf: &DmaBuf,
        offset: usize,
        len: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result {
        let (dma, len) = buf.range(offset, len)?;
        let op = Op::new()?;
        let mut deadline = Deadline::starting(now_ns());
        self.transfer(
            &op,
            write,
            Wait::Sleep,
            core::iter::once((dma, len as usize, remote_addr, rkey)),
            &mut deadline,
        )
    }

    /// Performs `atomic` on the peer's 8-byte word at `remote_addr` (under `rkey`)
    /// through its RNIC and returns the word's previous value.
    pub(crate) fn atomic(
        &self,
        atomic: Atomic,
        remote_addr: u64,
        rkey: u32,
        wait: Wait,
    ) -> Result<u64> {
        let result = self.staging.page(&self.dev)?;
        let op = Op::new()?;
        let nr_qps = self.link.lock().qps.len().max(1);
        let (class, qp_index) = self
            .qos
            .classify(nr_qps, self.next_qp.fetch_add(1, Ordering::Relaxed));
        let start = now_ns();
        self.single_request(qp_index, wait, class, &op, |qp, _| {
            qp.post_atomic(&op, atomic, &result, remote_addr, rkey)
        })?;
        self.qos.account(class, 8, Some(now_ns() - start));
        let mut old = [0u8; 8];
        result.read(0, &mut old)?;
        // The old value arrives in host order (rxe).
        Ok(u64::from_ne_bytes(old))
    }
}
