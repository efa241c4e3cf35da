// SPDX-License-Identifier: GPL-2.0
//! Admission: a transfer's `Ticket`, which lets each work request go, paced
//! by WF²Q+ and the token bucket while latency traffic is active.

use super::classes::qp_for;
use super::pacer::{self, Delivered, Flow};
use super::state::{Phases, QosState, Who};
use super::{fatal_signal, now_ns, Qos, PROBE_BELOW_SAMPLES, PROBE_NS, TURN_WAIT_MS};
use crate::ffi;
use crate::kvec::swap_remove;
use crate::uapi::*;
use crate::verbs::Device;
use kernel::prelude::*;
use kernel::sync::{new_condvar, Arc, CondVar};
use kernel::time::msecs_to_jiffies;

/// How often the flow picked rechecks whether unpaced bytes still hold paced work
/// requests: nothing signals their last completion to it.
const UNPACED_POLL_NS: u64 = 2_000_000;

impl Qos {
    /// A transfer of the current task through `dev` starts: its class, QP and first
    /// work request size are decided at once; pacing decisions go through the ticket.
    pub(crate) fn begin<'a>(&'a self, dev: &'a Device, nr_qps: usize, spread: usize) -> Ticket<'a> {
        let who = Who::current();
        let mut st = self.state.lock();
        let class = st.class_of(&who).0.min(LITE_NR_CLASSES - 1);
        st.classes[class as usize].active += 1;
        let start_ns = now_ns();
        let (qp, paced) = st.route(class, start_ns, nr_qps, spread);
        let probe_qp = qp_for(st.mode, LITE_CLASS_LATENCY, false, nr_qps, spread);
        let chunk = st.chunk();
        Ticket {
            qos: self,
            dev,
            class,
            qp,
            probe_qp,
            paced,
            chunk,
            inflight: if paced {
                st.inflight_budget()
            } else {
                st.unpaced_budget(class)
            },
            flow: None,
            places: None,
            start_ns,
            last_post_ns: 0,
            phases: None,
            bytes: 0,
            wrs: 0,
        }
    }
}

/// Work requests posted from which a transfer is backlogged.
const BACKLOGGED_WRS: u32 = 2;

/// A transfer in progress: its class, its WF²Q+ flow once paced, and its latency.
pub(crate) struct Ticket<'a> {
    qos: &'a Qos,
    /// The device its work requests go through, whose places over time size the
    /// paced window and whose delivered bytes find the link's rate.
    dev: &'a Device,
    class: u32,
    qp: usize,
    /// Where a reference probe goes: where latency-class operations would.
    probe_qp: usize,
    /// Paced when the transfer began (later work requests learn it from `admit`).
    paced: bool,
    /// Work request bytes while paced.
    chunk: u64,
    /// Bytes of work requests in flight at most (`u64::MAX`: no limit but the
    /// transfer's own).
    inflight: u64,
    flow: Option<usize>,
    /// While paced: the node's places for paced work requests in flight.
    places: Option<u32>,
    start_ns: u64,
    /// When its last work request so far was posted (0: none yet).
    last_post_ns: u64,
    /// A latency-class transfer's phases once it completed, and whether it read.
    phases: Option<(usize, Phases)>,
    bytes: u64,
    /// Work requests posted; from the second on the transfer is backlogged, and
    /// its time counts for the link's delivery rate (a transfer that fits one work
    /// request goes at the application's rate).
    wrs: u32,
}

/// What the ticket lets go of the work request it was asked for, and what next.
pub(crate) struct Admit {
    /// Bytes that go now, at most those asked for: a paced chunk when pacing began
    /// after the work request was gathered. The rest waits for its own admission.
    pub(crate) bytes: usize,
    /// The most bytes the transfer's next work request may carry.
    pub(crate) next: usize,
    /// This task was picked to send a reference probe before these bytes.
    pub(crate) probe: bool,
}

impl Ticket<'_> {
    pub(crate) fn qp(&self) -> usize {
        self.qp
    }

    pub(crate) fn probe_qp(&self) -> usize {
        self.probe_qp
    }

    pub(crate) fn class(&self) -> u32 {
        self.class
    }

    /// Bytes admitted so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// When the transfer began (ns, `Ktime` clock).
    pub(crate) fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// Largest first work request of this transfer (at most `most`): small chunks
    /// while paced, and no more than its unpaced window otherwise.
    pub(crate) fn first_wr_limit(&self, most: usize) -> usize {
        let limit = if self.paced {
            pacer::chunk_len(most as u64, Some(self.chunk))
        } else {
            self.inflight.min(most as u64)
        };
        limit as usize
    }

    /// Bytes of work requests this transfer may have in flight (at most `most`): its
    /// share of the node's paced window while paced.
    pub(crate) fn inflight_limit(&self, most: usize) -> usize {
        self.inflight.min(most as u64) as usize
    }

    /// While the last work request admitted was paced, the node's places for paced
    /// work requests in flight, one of which it must hold (`None`: not paced).
    pub(crate) fn paced_places(&self) -> Option<u32> {
        self.places
    }

    /// More than one work request posted: the transfer's pace is the link's, not
    /// the application's (see `DeliveryRate`).
    fn backlogged(&self) -> bool {
        self.wrs >= BACKLOGGED_WRS
    }

    /// The device's delivered bytes now.
    fn delivered(&self) -> Delivered {
        Delivered {
            device: self.dev.key(),
            bytes: self.dev.delivered_bytes(),
        }
    }

    /// A work request of the transfer was posted just now.
    pub(crate) fn posted(&mut self) {
        self.last_post_ns = now_ns();
        self.wrs = self.wrs.saturating_add(1);
        if self.wrs == BACKLOGGED_WRS {
            let count = self.delivered();
            self.qos
                .state
                .lock()
                .delivery
                .backlog_begins(self.last_post_ns, count);
        }
    }

    /// The transfer completed, its last completion having run at `done_ns`, and its
    /// caller runs again: a latency-class transfer's phases are kept for the
    /// statistics (`write`: an LT_write, else an LT_read).
    pub(crate) fn completed(&mut self, write: bool, done_ns: u64) {
        if self.class != LITE_CLASS_LATENCY || self.last_post_ns == 0 || done_ns < self.last_post_ns
        {
            return;
        }
        let phases = Phases {
            before_post: self.last_post_ns.saturating_sub(self.start_ns),
            in_network: done_ns - self.last_post_ns,
            wakeup: now_ns().saturating_sub(done_ns),
        };
        self.phases = Some((usize::from(!write), phases));
    }

    /// Waits until a work request of `bytes`, or while paced its first chunk, may go
    /// (at once for the latency class, and whenever pacing is off). EINTR when the
    /// task is killed meanwhile.
    pub(crate) fn admit(&mut self, bytes: usize) -> Result<Admit> {
        if self.class == LITE_CLASS_LATENCY {
            return Ok(self.grant(bytes, usize::MAX, false));
        }
        let asked = bytes;
        let bytes = bytes as u64;
        let mut waited_from = None;
        let count = self.delivered();
        let mut st = self.qos.state.lock();
        if self.backlogged() {
            st.delivered(now_ns(), count);
        }
        loop {
            let now = now_ns();
            st.control(now);
            if !st.pacing(now) {
                if waited_from.is_some() {
                    st.classes[self.class as usize].queued -= 1;
                }
                // The flows still waiting learn that pacing ended one after another.
                let next = self.leave_flow(&mut st);
                self.places = None;
                self.inflight = st.unpaced_budget(self.class);
                drop(st);
                if let Some(turn) = next {
                    turn.notify_all();
                }
                // A work request larger than the window would be in flight alone, over it.
                let next = self.inflight.try_into().unwrap_or(usize::MAX);
                return Ok(self.grant(asked, next, false));
            }
            let index = match self.flow {
                Some(i) => i,
                None => {
                    let weight = st.weights[self.class as usize];
                    let i = match st.used.iter().position(|used| !used) {
                        Some(i) => i,
                        None => {
                            let turn = Arc::pin_init(new_condvar!("lite:qos.turn"), GFP_KERNEL)?;
                            st.turns.push(turn, GFP_KERNEL)?;
                            let last = st.turns.len() - 1;
                            if let Err(e) = st.flows.push(Flow::new(weight), GFP_KERNEL) {
                                swap_remove(&mut st.turns, last);
                                return Err(e.into());
                            }
                            if let Err(e) = st.used.push(false, GFP_KERNEL) {
                                swap_remove(&mut st.flows, last);
                                swap_remove(&mut st.turns, last);
                                return Err(e.into());
                            }
                            last
                        }
                    };
                    st.flows[i].renew(weight);
                    st.used[i] = true;
                    st.transfers += 1;
                    self.flow = Some(i);
                    i
                }
            };
            let st_ref = &mut *st;
            let grant = bytes.min(st_ref.chunk().max(1));
            st_ref.wf.arrive(&mut st_ref.flows, index, grant);
            if st_ref.wf.pick() == Some(index) {
                // While unpaced bulk bytes are queued at the bottleneck, the device
                // holds paced work requests back (`enter_paced`); the flow picked
                // waits for them without tokens, and the bucket earns none.
                let hold = self.dev.unpaced_hold_ns();
                let taken = if hold > 0 {
                    st_ref.held_by_unpaced(now);
                    Err(now + hold.min(UNPACED_POLL_NS))
                } else {
                    st_ref.bucket.take(grant, now)
                };
                match taken {
                    Ok(()) => {
                        st_ref.wf.served(&mut st_ref.flows, index, 0);
                        let class = &mut st_ref.classes[self.class as usize];
                        let waited =
                            waited_from.map_or(0, |from: u64| st_ref.drain.token_wait(from, now));
                        if waited_from.is_some() {
                            class.queued -= 1;
                            class.paced_chunks += 1;
                            class.paced_ns += waited;
                        }
                        st_ref.paced_bytes = st_ref.paced_bytes.wrapping_add(grant);
                        let chunk = st_ref.chunk();
                        let dev = self.dev;
                        st_ref.hold.sample(dev.key(), chunk, now, || {
                            let places = dev.paced_stat();
                            (places.held_ns, places.wrs)
                        });
                        let rate = st_ref.bucket.rate();
                        st_ref.scale.admitted(grant, waited, rate);
                        if st_ref.scale.judge(rate, now) {
                            let chunk = st_ref.chunk();
                            st_ref.bucket.set_chunk(chunk, now);
                        }
                        // The reference flow fills in when latency traffic is sparse.
                        let probe = now >= st_ref.next_probe_ns
                            && st_ref.windows.control.len() < PROBE_BELOW_SAMPLES;
                        if probe {
                            st_ref.next_probe_ns = now + PROBE_NS;
                        }
                        self.chunk = st_ref.chunk();
                        self.inflight = st_ref.inflight_budget();
                        self.places = Some(st_ref.paced_places());
                        let next = st_ref.next_turn();
                        drop(st);
                        if let Some(turn) = next {
                            turn.notify_all();
                        }
                        let next = pacer::chunk_len(u64::MAX, Some(self.chunk)) as usize;
                        return Ok(self.grant(grant as usize, next, probe));
                    }
                    Err(wake_ns) => {
                        if waited_from.is_none() {
                            waited_from = Some(now);
                            st.classes[self.class as usize].queued += 1;
                        }
                        drop(st);
                        // SAFETY: sleeps the current task on an hrtimer; no lock is held.
                        let slept = unsafe { ffi::lite_sleep_ns(wake_ns.saturating_sub(now)) };
                        st = self.qos.state.lock();
                        if slept != 0 {
                            st.classes[self.class as usize].queued -= 1;
                            return Err(EINTR);
                        }
                    }
                }
            } else {
                if waited_from.is_none() {
                    waited_from = Some(now);
                    st.classes[self.class as usize].queued += 1;
                }
                // Whoever goes to wait sees that the flow picked now is awake: then no
                // pick sleeps on its turn unsignalled, whatever moved the turn to it.
                if let Some(pick) = st.next_turn() {
                    pick.notify_all();
                }
                if let Some(turn) = st.turns.get(index).cloned() {
                    let _ =
                        turn.wait_interruptible_timeout(&mut st, msecs_to_jiffies(TURN_WAIT_MS));
                }
                if fatal_signal() {
                    st.classes[self.class as usize].queued -= 1;
                    return Err(EINTR);
                }
            }
        }
    }

    /// Lets `bytes` of the work request asked for go, counted to the transfer.
    fn grant(&mut self, bytes: usize, next: usize, probe: bool) -> Admit {
        self.bytes += bytes as u64;
        Admit { bytes, next, probe }
    }

    /// The transfer is no longer paced: its flow leaves the schedule. Returns the
    /// turn to signal once the lock is released: the pick may have moved.
    fn leave_flow(&mut self, st: &mut QosState) -> Option<Arc<CondVar>> {
        let i = self.flow.take()?;
        st.wf.leave(&mut st.flows, i);
        if let Some(used) = st.used.get_mut(i).filter(|used| **used) {
            *used = false;
            st.transfers -= 1;
        }
        st.next_turn()
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let now = now_ns();
        let count = self.delivered();
        let next = {
            let mut guard = self.qos.state.lock();
            let st = &mut *guard;
            if self.backlogged() {
                st.backlog_ends(now, count);
            }
            let next = self.leave_flow(st);
            let class = self.class as usize;
            st.classes[class].active -= 1;
            st.classes[class].bytes = st.classes[class].bytes.wrapping_add(self.bytes);
            st.classes[class].ops = st.classes[class].ops.wrapping_add(1);
            st.sample(self.class, now.saturating_sub(self.start_ns), now);
            if let Some((kind, phases)) = &self.phases {
                phases.add_to(&mut st.latency_phases[*kind]);
            }
            next
        };
        // Only a paced transfer's end moves the turn (`next` is None otherwise).
        if let Some(turn) = next {
            turn.notify_all();
        }
    }
}
