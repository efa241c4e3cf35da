// SPDX-License-Identifier: GPL-2.0
//! Priority classes and their enforcement on this node's sending side (SW-Pri,
//! HW-Sep): every one-sided transfer, atomic and RPC message of a process is
//! accounted to its class (classes.rs decides which), and in SW-Pri mode, while
//! latency-class traffic is active, the other classes' transfers go in small
//! chunks paced by the token bucket at SafeUtil, shared by weight (pacer/), on
//! QPs the latency class does not use (classes::qp_for).
//!
//! Pacing happens in the calling task, which owns its transfer: it waits for its
//! turn on its flow's condition variable and for tokens on an hrtimer, never
//! spinning. Only the task whose flow WF²Q+ picks sleeps for tokens; the others wait
//! until the pick moves to them, and only the flow picked next is woken. Remote
//! READs are paced like writes: the reader pulls the bytes.
//!
//! SafeUtil follows AIMD on the p99 of the latency samples since its last step
//! (`STEP_SAMPLES` of them, or what `UPDATE_NS` brought): the latency class's own
//! completions, and a reference probe (an 8-byte RDMA READ timed like RPerf's,
//! issued by a paced task every `PROBE_NS`) that measures the queueing bulk traffic
//! causes even when latency traffic is sparse. Target99 is the operator's, or a
//! multiple of the latency class's p99 alone (pacer/alone.rs). SafeUtil's ceiling
//! is the link's rate (set by the operator, or found from the rate transfers are
//! acknowledged at) less the headroom, and the chunks, the bank and the bytes in
//! flight are sized to it; the chunks grow while the flows, backlogged, get less
//! than SafeUtil (ChunkScale).
//! The node's paced work requests in flight are bounded at the device, whichever
//! transfers they belong to (`Ticket::paced_places`, net/verbs/paced.rs).
//!
//! - `classes`: which class a process's operation is in (pure, host-tested).
//! - `pacer`: chunk sizes, the token bucket, WF²Q+, AIMD and the link's rate, a
//!   file each (pure, host-tested).
//! - `state`: the counters, latency windows and `QosState`'s control step.
//! - here: `Qos`, classifying the current task and accounting its operations.
//! - `admission`: a transfer's `Ticket`, which paces its work requests.
//! - `settings`: the operator's and the processes' settings, and the statistics.
//!
//! Locking: `Qos::state` is one mutex, a leaf: taken alone, and released while a
//! paced task sleeps (on its flow's turn or for tokens).

mod admission;
pub(crate) mod classes;
pub(crate) mod pacer;
mod settings;
mod state;

pub(crate) use admission::Ticket;

use crate::compat::{init_zeroed, now_ns};
use crate::ffi;

use crate::uapi::*;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use pacer::{
    Aimd, AimdControl, ChunkScale, DeliveryRate, PlaceHold, TokenBucket, UnpacedDrain, Wf2q,
};
use pacer::{
    ACTIVE_NS, DEFAULT_TARGET_NS, DEFAULT_TARGET_RATIO_PCT, DEFAULT_WEIGHTS, MIN_INFLIGHT,
    UNPACED_WINDOW_NS,
};
use state::{ClassCounters, QosState, Who, Windows};

/// Reference probe interval while paced traffic and latency traffic coexist, and
/// the samples of an AIMD interval below which probes are sent.
const PROBE_NS: u64 = 10_000_000;
const PROBE_BELOW_SAMPLES: usize = 4;
/// Until a link rate was found, SafeUtil is bounded by the port's rate, or by
/// this one (bytes/s) while no port's rate is known.
const INITIAL_LINK_RATE: u64 = 100 << 20;
/// A waiter not picked rechecks at least this often. Only a safety net: the flow
/// picked next is woken whenever a chunk goes, a flow leaves the schedule or
/// another flow goes to wait, and when pacing ends each flow that learns it wakes
/// the next.
const TURN_WAIT_MS: u32 = 200;

/// This node's classes, rules and pacing state.
#[pin_data]
pub(crate) struct Qos {
    #[pin]
    state: Mutex<QosState>,
}

impl Qos {
    pub(crate) fn new() -> Result<Arc<Qos>> {
        // 24 KiB: built in place, never on the stack.
        let windows: KBox<Windows> = KBox::init(init_zeroed(), GFP_KERNEL)?;
        let now = now_ns();
        let state = QosState {
            mode: LITE_QOS_SW_PRI,
            weights: DEFAULT_WEIGHTS,
            target_ns: DEFAULT_TARGET_NS,
            target_ratio_pct: DEFAULT_TARGET_RATIO_PCT,
            others_ended_ns: 0,
            link_rate: 0,
            port_rate: 0,
            chunk_bytes: LITE_QOS_CHUNK_AUTO,
            scale: ChunkScale::new(now),
            hold: PlaceHold::new(),
            delivery: DeliveryRate::new(),
            rules: KVec::new(),
            choices: KVec::new(),
            classes: [ClassCounters::default(); 3],
            latency_phases: [LitePhases::default(); 2],
            windows,
            bucket: TokenBucket::new(0, now),
            aimd_control: AimdControl::new(Aimd::new(INITIAL_LINK_RATE, 0, DEFAULT_TARGET_NS)),
            wf: Wf2q::default(),
            flows: KVec::new(),
            used: KVec::new(),
            transfers: 0,
            turns: KVec::new(),
            last_latency_ns: 0,
            drain: UnpacedDrain::default(),
            next_probe_ns: 0,
            probes: 0,
            last_probe_ns: 0,
            paced_bytes: 0,
        };
        let qos = Arc::pin_init(
            pin_init!(Qos {
                state <- new_mutex!(state, "lite:qos.state"),
            }),
            GFP_KERNEL,
        )?;
        qos.state.lock().reconfigure(now);
        Ok(qos)
    }

    /// The current task's class and the QP (of `nr_qps`; `spread` rotates) its
    /// operation uses.
    pub(crate) fn classify(&self, nr_qps: usize, spread: usize) -> (u32, usize) {
        let who = Who::current();
        let st = self.state.lock();
        let class = st.class_of(&who).0;
        (class, st.route(class, now_ns(), nr_qps, spread).0)
    }

    /// The current task's class.
    pub(crate) fn current_class(&self) -> u32 {
        let who = Who::current();
        self.state.lock().class_of(&who).0
    }

    /// The QP (of `nr_qps`; `spread` rotates) that an RPC request or reply of
    /// `class` goes on, as the class's transfers would: the latency class's
    /// messages must not wait behind paced chunks in QP 0's send queue.
    pub(crate) fn message_qp(&self, class: u32, nr_qps: usize, spread: usize) -> usize {
        self.state.lock().route(class, now_ns(), nr_qps, spread).0
    }

    /// `message_qp` for the current task's class.
    pub(crate) fn current_message_qp(&self, nr_qps: usize, spread: usize) -> usize {
        let who = Who::current();
        let st = self.state.lock();
        let class = st.class_of(&who).0;
        st.route(class, now_ns(), nr_qps, spread).0
    }

    /// An RPC call of `class` was answered `ns` after it was made: a latency sample
    /// like a transfer's, so that AIMD sees what bulk traffic costs a call's round
    /// trip (the server's node, the way back), which no transfer of this node times.
    pub(crate) fn call_returned(&self, class: u32, ns: u64) {
        let mut st = self.state.lock();
        st.sample(class, ns, now_ns());
    }

    /// Accounts an operation that is not a paced transfer (atomics, RPC messages).
    pub(crate) fn account(&self, class: u32, bytes: u64, latency_ns: Option<u64>) {
        let now = now_ns();
        let mut st = self.state.lock();
        let st = &mut *st;
        let class = class.min(LITE_NR_CLASSES - 1) as usize;
        st.classes[class].bytes = st.classes[class].bytes.wrapping_add(bytes);
        st.classes[class].ops = st.classes[class].ops.wrapping_add(1);
        if let Some(ns) = latency_ns {
            st.sample(class as u32, ns, now);
        } else if class == LITE_CLASS_LATENCY as usize {
            st.last_latency_ns = now;
        } else {
            st.others_ended_ns = now;
        }
        st.control(now);
    }

    /// A port of this node signals at `speed` per lane (`IB_SPEED_*`) over `width`
    /// (`IB_WIDTH_*`): the link's rate until one is found, the fastest port's.
    pub(crate) fn port_is(&self, speed: u32, width: u32) {
        let Some(rate) = pacer::port_rate(speed, width) else {
            return;
        };
        let mut st = self.state.lock();
        if rate > st.port_rate {
            st.port_rate = rate;
            st.reconfigure(now_ns());
        }
    }

    /// A reference probe's round trip (ns).
    pub(crate) fn probed(&self, ns: u64) {
        let mut st = self.state.lock();
        st.probes += 1;
        st.last_probe_ns = ns;
        st.windows.control.add(ns);
    }
}

fn fatal_signal() -> bool {
    // SAFETY: only inspects the current task's pending signals.
    unsafe { ffi::lite_fatal_signal_pending() != 0 }
}
