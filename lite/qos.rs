// SPDX-License-Identifier: GPL-2.0
//! Priority classes and their enforcement on this node's sending side (SW-Pri,
//! HW-Sep): every one-sided transfer, atomic and RPC message of a process is
//! accounted to its class (classes.rs decides which), and in SW-Pri mode, while
//! latency-class traffic is active, the other classes' transfers go in small
//! chunks paced by the token bucket at SafeUtil, shared by weight (pacer.rs), on
//! QPs the latency class does not use (classes::qp_for).
//!
//! Pacing happens in the calling task, which owns its transfer: it waits for its
//! turn on a condition variable and for tokens on an hrtimer, never spinning. Only
//! the task whose flow WF²Q+ picks sleeps for tokens; the others wait until a chunk
//! was let through. Remote READs are paced like writes: the reader pulls the bytes.
//!
//! SafeUtil follows AIMD on the p99 of the latency samples since its last step
//! (`STEP_SAMPLES` of them, or what `UPDATE_NS` brought): the latency class's own
//! completions, and a reference probe (an 8-byte RDMA READ timed like RPerf's,
//! issued by a paced task every `PROBE_NS`) that measures the queueing bulk traffic
//! causes even when latency traffic is sparse. Its ceiling is the link's rate (set
//! by the operator, or found from the rate transfers are acknowledged at) less the
//! headroom, and the chunks, the bank and the bytes in flight are sized to it; the
//! chunks grow while the flows, backlogged, get less than SafeUtil (ChunkScale).

use crate::classes::{
    self, qp_for, Lineage, Rule, Source, MAX_LINEAGE, MAX_RULES, MAX_SELF_CHOICES,
};
use crate::ffi;
use crate::kvec::{remove_at, retain, swap_remove};
use crate::pacer::{
    self, Aimd, ChunkScale, DeliveryRate, Flow, LatencyWindow, TokenBucket, Wf2q, WINDOW,
};
use crate::uapi::*;
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::{msecs_to_jiffies, Ktime};

/// Latency traffic counts as active for this long after its last operation.
const ACTIVE_NS: u64 = 200_000_000;
/// An AIMD step takes the p99 of this many latency samples, or of at least
/// `MIN_STEP_SAMPLES` once `UPDATE_NS` passed: the p99 of fewer is their maximum,
/// and at emulated millisecond latencies that is noise, not queueing.
const STEP_SAMPLES: usize = 128;
const MIN_STEP_SAMPLES: usize = 32;
const UPDATE_NS: u64 = 500_000_000;
/// Reference probe interval while paced traffic and latency traffic coexist, and
/// the samples of an AIMD interval below which probes are sent.
const PROBE_NS: u64 = 10_000_000;
const PROBE_BELOW_SAMPLES: usize = 4;
/// Target99 until the operator sets one.
const DEFAULT_TARGET_NS: u64 = 2_000_000;
/// Default weights: latency, default, bulk.
const DEFAULT_WEIGHTS: [u32; 3] = [8, 4, 1];
/// Until a link rate was found, SafeUtil is bounded by this one (bytes/s).
const INITIAL_LINK_RATE: u64 = 100 << 20;
/// Paced bytes in flight per node: what SafeUtil carries in this time, about two
/// emulated round trips. Less leaves the wire idle between chunks; more is queue
/// when SafeUtil overshoots the link (twice the latency class's median round trip
/// instead raised its p50 beside bulk from 12 to 21 ms and bulk did not gain).
const WINDOW_NS: u64 = 10_000_000;
/// In SW-Pri mode, bytes in flight per node while nothing is paced: what the link
/// carries in this time. Work conserving (several emulated round trips; 30 ms cost
/// bulk a quarter of a 4 MiB/s wire), yet the queue bulk leaves at the bottleneck
/// when latency traffic starts drains in this long: unbounded (128 KiB per
/// transfer) it held 250 ms of a 1 MiB/s wire, and the latency class's first
/// operations waited for all of it (p99 ratio 9.3 instead of 2.5).
const UNPACED_WINDOW_NS: u64 = 60_000_000;
/// Bytes in flight per transfer at the least: one full work request.
const MIN_INFLIGHT: u64 = 32 << 10;
/// A waiter not picked rechecks at least this often, to notice that pacing ended
/// (the chunk let through and a paced transfer's end wake it earlier).
const TURN_WAIT_MS: u32 = 20;

fn now_ns() -> u64 {
    Ktime::ktime_get().to_ns() as u64
}

/// The current task: its process and ancestors, uid and cgroup.
struct Who {
    tgids: [u32; MAX_LINEAGE],
    len: usize,
    uid: u32,
    cgroup: u64,
}

impl Who {
    fn current() -> Who {
        let mut who = Who {
            tgids: [0; MAX_LINEAGE],
            len: 0,
            uid: 0,
            cgroup: 0,
        };
        // SAFETY: the helper writes at most MAX_LINEAGE entries to `tgids` and the two
        // scalars, all owned by `who`, and only reads the current task's lineage.
        let n = unsafe {
            ffi::lite_current_lineage(
                who.tgids.as_mut_ptr(),
                MAX_LINEAGE as i32,
                &mut who.uid,
                &mut who.cgroup,
            )
        };
        who.len = (n.max(0) as usize).min(MAX_LINEAGE);
        who
    }

    fn lineage(&self) -> Lineage<'_> {
        Lineage {
            tgids: &self.tgids[..self.len],
            uid: self.uid,
            cgroup: self.cgroup,
        }
    }
}

#[derive(Default, Clone, Copy)]
struct ClassCounters {
    bytes: u64,
    ops: u64,
    active: u32,
    queued: u32,
    paced_chunks: u64,
    paced_ns: u64,
}

/// Latency samples: per class for the statistics, and the latency class's since
/// the last AIMD step.
struct Windows {
    stats: [LatencyWindow; 3],
    control: LatencyWindow,
    scratch: [u32; WINDOW],
}

// SAFETY: all-zero windows are empty windows (`LatencyWindow::new()` is all zeros)
// and a zeroed scratch array.
unsafe impl kernel::init::Zeroable for Windows {}

/// A process that lowered its own class, while `file` stays open.
struct Choice {
    pid: u32,
    class: u32,
    file: u64,
}

struct QosState {
    mode: u32,
    weights: [u32; 3],
    target_ns: u64,
    /// Set by the operator; 0: the one `delivery` found.
    link_rate: u64,
    /// Work request bytes of paced transfers; 0: sized to the link, and scaled by
    /// `scale` to what this node's tasks can hand out.
    chunk_bytes: u32,
    scale: ChunkScale,
    delivery: DeliveryRate,
    rules: KVec<Rule>,
    choices: KVec<Choice>,
    classes: [ClassCounters; 3],
    windows: KBox<Windows>,
    bucket: TokenBucket,
    aimd: Aimd,
    wf: Wf2q,
    /// One per paced transfer in progress, by slot; `used` tells which are taken.
    flows: KVec<Flow>,
    used: KVec<bool>,
    last_latency_ns: u64,
    next_update_ns: u64,
    next_probe_ns: u64,
    probes: u64,
    last_probe_ns: u64,
    decreases: u64,
    increases: u64,
}

impl QosState {
    fn latency_active(&self, now: u64) -> bool {
        self.last_latency_ns != 0 && now.saturating_sub(self.last_latency_ns) < ACTIVE_NS
    }

    fn pacing(&self, now: u64) -> bool {
        self.mode == LITE_QOS_SW_PRI && self.latency_active(now)
    }

    /// The QP (of `nr_qps`; `spread` rotates) an operation of `class` starting now
    /// uses, and whether it is paced: only the latency class never is.
    fn route(&self, class: u32, now: u64, nr_qps: usize, spread: usize) -> (usize, bool) {
        let paced = class != LITE_CLASS_LATENCY && self.pacing(now);
        (qp_for(self.mode, class, paced, nr_qps, spread), paced)
    }

    /// The link's rate: set, found, or assumed until found.
    fn link(&self) -> u64 {
        if self.link_rate != 0 {
            self.link_rate
        } else {
            match self.delivery.found() {
                0 => INITIAL_LINK_RATE,
                found => found,
            }
        }
    }

    /// SafeUtil's ceiling.
    fn ceiling(&self) -> u64 {
        pacer::headroom(self.link())
    }

    /// Bytes per paced work request.
    fn chunk(&self) -> u64 {
        match self.chunk_bytes {
            LITE_QOS_CHUNK_AUTO => {
                (pacer::link_chunk(self.link()) * self.scale.scale()).min(pacer::CHUNK_MAX)
            }
            chosen => u64::from(chosen),
        }
    }

    /// Bytes one paced transfer may have in flight: its share of the node's window
    /// at SafeUtil, at least two chunks.
    fn inflight_budget(&self) -> u64 {
        let flows = self.used.iter().filter(|&&used| used).count().max(1) as u64;
        (pacer::bytes_in(self.bucket.rate(), WINDOW_NS) / flows).max(2 * self.chunk())
    }

    /// Bytes one transfer of `class` that is not paced may have in flight: in SW-Pri
    /// mode, the bulk classes' share of the node's unpaced window.
    fn unpaced_budget(&self, class: u32) -> u64 {
        if self.mode != LITE_QOS_SW_PRI || class == LITE_CLASS_LATENCY {
            return u64::MAX;
        }
        let transfers = u64::from(
            self.classes[LITE_CLASS_DEFAULT as usize].active
                + self.classes[LITE_CLASS_BULK as usize].active,
        )
        .max(1);
        (pacer::bytes_in(self.link(), UNPACED_WINDOW_NS) / transfers).max(MIN_INFLIGHT)
    }

    fn paced_weight(&self) -> u32 {
        self.weights[LITE_CLASS_DEFAULT as usize].max(self.weights[LITE_CLASS_BULK as usize])
    }

    /// Applies new settings: AIMD's bounds, and the bucket's rate.
    fn reconfigure(&mut self, now: u64) {
        let ceiling = self.ceiling();
        let floor = pacer::bulk_floor(
            ceiling,
            self.paced_weight(),
            self.weights[LITE_CLASS_LATENCY as usize],
        );
        self.aimd.reconfigure(ceiling, floor, self.target_ns);
        let rate = if self.pacing(now) {
            self.aimd.safe_util()
        } else {
            0
        };
        self.bucket.set_rate(rate, now);
        self.bucket.set_chunk(self.chunk(), now);
    }

    /// One AIMD step when due, in SW-Pri mode: on the p99 of the latency samples
    /// since the last step, once `STEP_SAMPLES` arrived (or `UPDATE_NS` passed with a
    /// few); with no latency traffic active, no limit.
    fn control(&mut self, now: u64) {
        let samples = self.windows.control.len();
        let active = self.latency_active(now);
        let due = now >= self.next_update_ns;
        if !due && !(active && samples >= STEP_SAMPLES) {
            return;
        }
        self.next_update_ns = now + UPDATE_NS;
        if self.mode != LITE_QOS_SW_PRI {
            // Nothing is paced: no AIMD steps, and the next mode starts from fresh samples.
            self.windows.control.clear();
            return;
        }
        let p99 = if active {
            if samples < MIN_STEP_SAMPLES {
                // Too few samples to judge: keep SafeUtil.
                return;
            }
            let w = &mut *self.windows;
            let p99 = w.control.quantile(990, &mut w.scratch);
            w.control.clear();
            p99
        } else {
            None
        };
        let before = self.aimd.safe_util();
        let after = self.aimd.update(p99);
        if after < before {
            self.decreases += 1;
        } else if after > before {
            self.increases += 1;
        }
        self.bucket
            .set_rate(if p99.is_some() { after } else { 0 }, now);
    }

    /// `bytes` were acknowledged: a faster link found changes the ceiling and chunks.
    fn delivered(&mut self, bytes: u64, now: u64) {
        if self.delivery.delivered(bytes, now) && self.link_rate == 0 {
            self.reconfigure(now);
        }
    }

    fn class_of(&self, who: &Who) -> (u32, Source) {
        classes::effective_class(
            &self.rules,
            self.choices.iter().map(|c| (c.pid, c.class)),
            &who.lineage(),
        )
    }
}

/// This node's classes, rules and pacing state.
#[pin_data]
pub(crate) struct Qos {
    #[pin]
    state: Mutex<QosState>,
    /// Signalled whenever a paced chunk goes or a paced transfer ends.
    #[pin]
    turn: CondVar,
}

impl Qos {
    pub(crate) fn new() -> Result<Arc<Qos>> {
        // 20 KiB: built in place, never on the stack.
        let windows: KBox<Windows> = KBox::init(kernel::init::zeroed(), GFP_KERNEL)?;
        let now = now_ns();
        let state = QosState {
            mode: LITE_QOS_SW_PRI,
            weights: DEFAULT_WEIGHTS,
            target_ns: DEFAULT_TARGET_NS,
            link_rate: 0,
            chunk_bytes: LITE_QOS_CHUNK_AUTO,
            scale: ChunkScale::new(now),
            delivery: DeliveryRate::new(now),
            rules: KVec::new(),
            choices: KVec::new(),
            classes: [ClassCounters::default(); 3],
            windows,
            bucket: TokenBucket::new(0, now),
            aimd: Aimd::new(INITIAL_LINK_RATE, 0, DEFAULT_TARGET_NS),
            wf: Wf2q::default(),
            flows: KVec::new(),
            used: KVec::new(),
            last_latency_ns: 0,
            next_update_ns: 0,
            next_probe_ns: 0,
            probes: 0,
            last_probe_ns: 0,
            decreases: 0,
            increases: 0,
        };
        let qos = Arc::pin_init(
            pin_init!(Qos {
                state <- new_mutex!(state, "lite:qos.state"),
                turn <- new_condvar!("lite:qos.turn"),
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

    /// A transfer of the current task starts: its class, QP and first work request
    /// size are decided at once; pacing decisions go through the ticket.
    pub(crate) fn begin(&self, nr_qps: usize, spread: usize) -> Ticket<'_> {
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
            start_ns,
            bytes: 0,
            acknowledged: 0,
            reported: 0,
        }
    }

    /// Accounts an RPC call or message of the current task (its class, no latency).
    pub(crate) fn account_current(&self, bytes: u64) {
        let who = Who::current();
        let class = self.state.lock().class_of(&who).0;
        self.account(class, bytes, None);
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
            st.windows.stats[class].add(ns);
            if class == LITE_CLASS_LATENCY as usize {
                st.windows.control.add(ns);
            }
        }
        if class == LITE_CLASS_LATENCY as usize {
            st.last_latency_ns = now;
        }
        st.delivered(bytes, now);
        st.control(now);
    }

    /// A reference probe's round trip (ns).
    pub(crate) fn probed(&self, ns: u64) {
        let mut st = self.state.lock();
        st.probes += 1;
        st.last_probe_ns = ns;
        st.windows.control.add(ns);
    }

    // ---- operator and process settings ----

    pub(crate) fn get(&self) -> LiteQos {
        let st = self.state.lock();
        LiteQos {
            set: 0,
            mode: st.mode,
            target99_ns: st.target_ns,
            weights: st.weights,
            chunk_bytes: st.chunk_bytes,
            link_rate: st.link_rate,
        }
    }

    pub(crate) fn set(&self, req: &LiteQos) -> Result {
        let known = LITE_QOS_SET_MODE
            | LITE_QOS_SET_TARGET
            | LITE_QOS_SET_WEIGHTS
            | LITE_QOS_SET_LINK_RATE
            | LITE_QOS_SET_CHUNK;
        if req.set & !known != 0 {
            return Err(EINVAL);
        }
        if req.set & LITE_QOS_SET_CHUNK != 0
            && req.chunk_bytes != LITE_QOS_CHUNK_AUTO
            && !(LITE_QOS_CHUNK_MIN..=LITE_QOS_CHUNK_MAX).contains(&req.chunk_bytes)
        {
            return Err(EINVAL);
        }
        if req.set & LITE_QOS_SET_MODE != 0 && req.mode > LITE_QOS_SW_PRI {
            return Err(EINVAL);
        }
        if req.set & LITE_QOS_SET_TARGET != 0
            && (req.target99_ns == 0 || req.target99_ns > 10_000_000_000)
        {
            return Err(EINVAL);
        }
        if req.set & LITE_QOS_SET_WEIGHTS != 0
            && req
                .weights
                .iter()
                .any(|w| !(1..=LITE_QOS_MAX_WEIGHT).contains(w))
        {
            return Err(EINVAL);
        }
        if req.set & LITE_QOS_SET_LINK_RATE != 0 && req.link_rate > pacer::MAX_RATE {
            return Err(EINVAL);
        }
        let now = now_ns();
        {
            let mut st = self.state.lock();
            if req.set & LITE_QOS_SET_MODE != 0 {
                st.mode = req.mode;
            }
            if req.set & LITE_QOS_SET_TARGET != 0 {
                st.target_ns = req.target99_ns;
            }
            if req.set & LITE_QOS_SET_WEIGHTS != 0 {
                st.weights = req.weights;
            }
            if req.set & LITE_QOS_SET_LINK_RATE != 0 {
                st.link_rate = req.link_rate;
            }
            if req.set & LITE_QOS_SET_CHUNK != 0 {
                st.chunk_bytes = req.chunk_bytes;
            }
            st.reconfigure(now);
        }
        // Waiters recheck: pacing may be off now.
        self.turn.notify_all();
        Ok(())
    }

    pub(crate) fn rule_add(&self, rule: &LiteClassRule) -> Result {
        let rule = Rule {
            kind: rule.kind,
            id: rule.id,
            class: rule.class,
        };
        if !classes::rule_valid(&rule) {
            return Err(EINVAL);
        }
        let mut st = self.state.lock();
        if let Some(r) = st
            .rules
            .iter_mut()
            .find(|r| r.kind == rule.kind && r.id == rule.id)
        {
            r.class = rule.class;
            return Ok(());
        }
        if st.rules.len() >= MAX_RULES {
            return Err(ENOSPC);
        }
        st.rules.push(rule, GFP_KERNEL)?;
        Ok(())
    }

    pub(crate) fn rule_del(&self, rule: &LiteClassRule) -> Result {
        let mut st = self.state.lock();
        let i = st
            .rules
            .iter()
            .position(|r| r.kind == rule.kind && r.id == rule.id)
            .ok_or(ENOENT)?;
        remove_at(&mut st.rules, i);
        Ok(())
    }

    /// The rules, in the order they were added.
    pub(crate) fn rules(&self) -> Result<KVec<LiteClassRule>> {
        let st = self.state.lock();
        let mut out = KVec::with_capacity(st.rules.len(), GFP_KERNEL)?;
        for r in st.rules.iter() {
            out.push(
                LiteClassRule {
                    kind: r.kind,
                    class: r.class,
                    id: r.id,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(out)
    }

    /// LITE_IOC_CLASS_SELF for the current task through open file `file`.
    pub(crate) fn choose(&self, file: u64, wanted: u32) -> Result<LiteClassSelf> {
        let who = Who::current();
        let mut st = self.state.lock();
        if wanted != LITE_CLASS_QUERY {
            let (current, _) = st.class_of(&who);
            if wanted >= LITE_NR_CLASSES {
                return Err(EINVAL);
            }
            if !classes::may_choose(current, wanted) {
                return Err(EPERM);
            }
            let pid = who.tgids.first().copied().unwrap_or(0);
            match st.choices.iter().position(|c| c.pid == pid) {
                Some(i) => {
                    let c = &mut st.choices[i];
                    c.class = c.class.max(wanted);
                    c.file = file;
                }
                None if st.choices.len() >= MAX_SELF_CHOICES => return Err(ENOSPC),
                None => st.choices.push(
                    Choice {
                        pid,
                        class: wanted,
                        file,
                    },
                    GFP_KERNEL,
                )?,
            }
        }
        let (class, source) = st.class_of(&who);
        let source = match source {
            Source::Default => LITE_CLASS_FROM_DEFAULT,
            Source::Pid => LITE_CLASS_FROM_PID,
            Source::Cgroup => LITE_CLASS_FROM_CGROUP,
            Source::Uid => LITE_CLASS_FROM_UID,
            Source::Itself => LITE_CLASS_FROM_SELF,
        };
        Ok(LiteClassSelf { class, source })
    }

    /// Open file `file` closed: the choices made through it end.
    pub(crate) fn file_closed(&self, file: u64) {
        let mut st = self.state.lock();
        retain(&mut st.choices, |c| c.file != file);
    }

    pub(crate) fn stat(&self) -> LiteQosStat {
        let now = now_ns();
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut out = LiteQosStat {
            mode: st.mode,
            latency_active: st.latency_active(now) as u32,
            safe_util: st.bucket.rate(),
            link_rate: st.link(),
            found_rate: st.delivery.found(),
            chunk_bytes: st.chunk(),
            tokens: st.bucket.banked(now),
            probes: st.probes,
            last_probe_ns: st.last_probe_ns,
            decreases: st.decreases,
            increases: st.increases,
            classes: [LiteClassStat::default(); 3],
        };
        for (i, c) in st.classes.iter().enumerate() {
            let w = &mut *st.windows;
            out.classes[i] = LiteClassStat {
                bytes: c.bytes,
                ops: c.ops,
                p50_ns: w.stats[i].quantile(500, &mut w.scratch).unwrap_or(0),
                p99_ns: w.stats[i].quantile(990, &mut w.scratch).unwrap_or(0),
                active: c.active,
                queued: c.queued,
                paced_chunks: c.paced_chunks,
                paced_ns: c.paced_ns,
            };
        }
        out
    }
}

/// A transfer in progress: its class, its WF²Q+ flow once paced, and its latency.
pub(crate) struct Ticket<'a> {
    qos: &'a Qos,
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
    start_ns: u64,
    bytes: u64,
    /// Bytes the transfer knows were acknowledged, and those of them reported to
    /// the link's delivery rate.
    acknowledged: u64,
    reported: u64,
}

/// What the ticket lets the next work request carry.
pub(crate) enum Admit {
    /// Go, with work requests of at most this many bytes.
    Go(usize),
    /// Go after a reference probe (this task was picked to send it).
    ProbeFirst(usize),
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
    /// while paced.
    pub(crate) fn first_wr_limit(&self, most: usize) -> usize {
        pacer::chunk_len(most as u64, self.paced.then_some(self.chunk)) as usize
    }

    /// Bytes of work requests this transfer may have in flight (at most `most`): its
    /// share of the node's paced window while paced.
    pub(crate) fn inflight_limit(&self, most: usize) -> usize {
        self.inflight.min(most as u64) as usize
    }

    /// `bytes` of the transfer (in all) are known to be acknowledged by the peer.
    pub(crate) fn acknowledged(&mut self, bytes: u64) {
        self.acknowledged = self.acknowledged.max(bytes);
    }

    /// Hands what was acknowledged since the last report to the delivery rate.
    fn report(&mut self, st: &mut QosState, now: u64) {
        let fresh = self.acknowledged.saturating_sub(self.reported);
        self.reported = self.acknowledged;
        if fresh > 0 {
            st.delivered(fresh, now);
        }
    }

    /// Waits until a work request of `bytes` may go (at once for the latency class,
    /// and whenever pacing is off). EINTR when the task is killed meanwhile.
    pub(crate) fn admit(&mut self, bytes: usize) -> Result<Admit> {
        self.bytes += bytes as u64;
        let bytes = bytes as u64;
        let unpaced = Admit::Go(usize::MAX);
        if self.class == LITE_CLASS_LATENCY {
            return Ok(unpaced);
        }
        let mut waited_from = None;
        let mut st = self.qos.state.lock();
        self.report(&mut st, now_ns());
        loop {
            let now = now_ns();
            st.control(now);
            if !st.pacing(now) {
                self.leave_flow(&mut st);
                self.inflight = st.unpaced_budget(self.class);
                return Ok(unpaced);
            }
            let index = match self.flow {
                Some(i) => i,
                None => {
                    let weight = st.weights[self.class as usize];
                    let i = match st.used.iter().position(|used| !used) {
                        Some(i) => i,
                        None => {
                            st.flows.push(Flow::new(weight), GFP_KERNEL)?;
                            if let Err(e) = st.used.push(false, GFP_KERNEL) {
                                let last = st.flows.len() - 1;
                                swap_remove(&mut st.flows, last);
                                return Err(e.into());
                            }
                            st.flows.len() - 1
                        }
                    };
                    st.flows[i] = Flow::new(weight);
                    st.used[i] = true;
                    self.flow = Some(i);
                    i
                }
            };
            let st_ref = &mut *st;
            st_ref.wf.arrive(&mut st_ref.flows[index], bytes);
            if st_ref.wf.pick(&st_ref.flows) == Some(index) {
                match st_ref.bucket.take(bytes, now) {
                    Ok(()) => {
                        st_ref.wf.served(&mut st_ref.flows, index, 0);
                        let class = &mut st_ref.classes[self.class as usize];
                        let waited = waited_from.map_or(0, |from| now.saturating_sub(from));
                        if waited_from.is_some() {
                            class.queued -= 1;
                            class.paced_chunks += 1;
                            class.paced_ns += waited;
                        }
                        st_ref.scale.admitted(bytes, waited);
                        if st_ref.scale.judge(st_ref.bucket.rate(), now) {
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
                        drop(st);
                        self.qos.turn.notify_all();
                        let limit = pacer::chunk_len(u64::MAX, Some(self.chunk)) as usize;
                        return Ok(if probe {
                            Admit::ProbeFirst(limit)
                        } else {
                            Admit::Go(limit)
                        });
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
                let _ = self
                    .qos
                    .turn
                    .wait_interruptible_timeout(&mut st, msecs_to_jiffies(TURN_WAIT_MS));
                if fatal_signal() {
                    st.classes[self.class as usize].queued -= 1;
                    return Err(EINTR);
                }
            }
        }
    }

    /// The transfer is no longer paced: its flow leaves the schedule.
    fn leave_flow(&mut self, st: &mut QosState) {
        if let Some(i) = self.flow.take() {
            if let Some(flow) = st.flows.get_mut(i) {
                st.wf.leave(flow);
            }
            if let Some(used) = st.used.get_mut(i) {
                *used = false;
            }
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let now = now_ns();
        let was_paced = self.flow.is_some();
        {
            let mut guard = self.qos.state.lock();
            let st = &mut *guard;
            self.report(st, now);
            self.leave_flow(st);
            let class = self.class as usize;
            st.classes[class].active -= 1;
            st.classes[class].bytes = st.classes[class].bytes.wrapping_add(self.bytes);
            st.classes[class].ops = st.classes[class].ops.wrapping_add(1);
            let ns = now.saturating_sub(self.start_ns);
            st.windows.stats[class].add(ns);
            if self.class == LITE_CLASS_LATENCY {
                st.windows.control.add(ns);
                st.last_latency_ns = now;
            }
        }
        // Only a paced transfer's end changes whose turn it is; waking the waiters
        // after every latency-class operation would only make them compete with it.
        if was_paced {
            self.qos.turn.notify_all();
        }
    }
}

fn fatal_signal() -> bool {
    // SAFETY: only inspects the current task's pending signals.
    unsafe { ffi::lite_fatal_signal_pending() != 0 }
}
