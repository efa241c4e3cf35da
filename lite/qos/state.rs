// SPDX-License-Identifier: GPL-2.0
//! What the node's QoS knows: the current task's lineage, the per-class
//! counters and latency windows, and `QosState` with SW-Pri's control step
//! (pacing, SafeUtil's ceiling, the chunk and in-flight budgets, AIMD).

use super::classes::{self, qp_for, Lineage, Rule, Source, MAX_LINEAGE};
use super::pacer::{
    self, AimdControl, AloneP99, ChunkScale, ControlInput, Delivered, DeliveryRate, Flow,
    LatencyWindow, PlaceHold, StepSamples, TokenBucket, UnpacedDrain, Wf2q, WINDOW,
};
use super::{ACTIVE_NS, INITIAL_LINK_RATE, MIN_INFLIGHT, UNPACED_WINDOW_NS};
use crate::ffi;
use crate::uapi::*;
use kernel::prelude::*;
use kernel::sync::{Arc, CondVar};

/// The current task: its process and ancestors, uid and cgroup.
pub(crate) struct Who {
    pub(crate) tgids: [u32; MAX_LINEAGE],
    len: usize,
    uid: u32,
    cgroup: u64,
}

impl Who {
    pub(crate) fn current() -> Who {
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

/// A one-sided transfer's time in each phase (ns), as `LitePhases` sums them.
#[derive(Clone, Copy)]
pub(crate) struct Phases {
    pub(crate) before_post: u64,
    pub(crate) in_network: u64,
    pub(crate) wakeup: u64,
}

impl Phases {
    /// Adds this transfer to `total`.
    pub(crate) fn add_to(&self, total: &mut LitePhases) {
        total.ops = total.ops.wrapping_add(1);
        total.before_post_ns = total.before_post_ns.wrapping_add(self.before_post);
        total.in_network_ns = total.in_network_ns.wrapping_add(self.in_network);
        total.wakeup_ns = total.wakeup_ns.wrapping_add(self.wakeup);
    }
}

#[derive(Default, Clone, Copy)]
pub(crate) struct ClassCounters {
    pub(crate) bytes: u64,
    pub(crate) ops: u64,
    pub(crate) active: u32,
    pub(crate) queued: u32,
    pub(crate) paced_chunks: u64,
    pub(crate) paced_ns: u64,
}

/// Latency samples: per class for the statistics, and the latency class's since
/// the last AIMD step.
pub(crate) struct Windows {
    pub(crate) stats: [LatencyWindow; 3],
    pub(crate) control: LatencyWindow,
    /// The latency class's samples while no other class's transfer was in progress.
    pub(crate) alone: AloneP99,
    pub(crate) scratch: [u32; WINDOW],
}

// SAFETY: all-zero windows are empty windows (`LatencyWindow::new()` and
// `AloneP99::new()` are all zeros) and a zeroed scratch array.
unsafe impl crate::compat::Zeroable for Windows {}

/// A process that lowered its own class, while `file` stays open.
pub(crate) struct Choice {
    pub(crate) pid: u32,
    pub(crate) class: u32,
    pub(crate) file: u64,
}

pub(crate) struct QosState {
    pub(crate) mode: u32,
    pub(crate) weights: [u32; 3],
    pub(crate) target_ns: u64,
    /// Target99 as a percentage of the latency class's p99 alone (0: `target_ns`).
    pub(crate) target_ratio_pct: u32,
    /// When a transfer of another class than the latency class last ended.
    pub(crate) others_ended_ns: u64,
    /// Set by the operator; 0: the one `delivery` found.
    pub(crate) link_rate: u64,
    /// The fastest port's signalling rate (0: none known), assumed until found.
    pub(crate) port_rate: u64,
    /// Work request bytes of paced transfers; 0: sized to the link, and scaled by
    /// `scale` to what this node's tasks can hand out.
    pub(crate) chunk_bytes: u32,
    pub(crate) scale: ChunkScale,
    /// How long paced work requests hold their places, which the window covers.
    pub(crate) hold: PlaceHold,
    pub(crate) delivery: DeliveryRate,
    pub(crate) rules: KVec<Rule>,
    pub(crate) choices: KVec<Choice>,
    pub(crate) classes: [ClassCounters; 3],
    /// The latency class's LT_writes' (`[0]`) and LT_reads' (`[1]`) phases.
    pub(crate) latency_phases: [LitePhases; 2],
    pub(crate) windows: KBox<Windows>,
    pub(crate) bucket: TokenBucket,
    pub(crate) aimd_control: AimdControl,
    pub(crate) wf: Wf2q,
    /// One per paced transfer in progress, by slot; `used` tells which are taken.
    pub(crate) flows: KVec<Flow>,
    pub(crate) used: KVec<bool>,
    /// The slots taken: `used` counted once per transfer, not per chunk.
    pub(crate) transfers: u64,
    /// Each slot's turn: its transfer waits there while another flow is picked,
    /// and is woken alone when the pick moves to it.
    pub(crate) turns: KVec<Arc<CondVar>>,
    pub(crate) last_latency_ns: u64,
    /// When unpaced bytes last held paced work requests back.
    pub(crate) drain: UnpacedDrain,
    pub(crate) next_probe_ns: u64,
    pub(crate) probes: u64,
    pub(crate) last_probe_ns: u64,
    /// Bytes of paced work requests let through since load.
    pub(crate) paced_bytes: u64,
}

impl QosState {
    /// While a latency-class operation is in flight, and for `ACTIVE_NS` after the
    /// last one ended: behind enough bulk bytes one operation outlasts `ACTIVE_NS`
    /// (32 bulk processes' least unpaced windows are 1 MiB, 280 ms of a 3.6 MB/s
    /// wire), and pacing that stopped under it let the queue grow back.
    pub(crate) fn latency_active(&self, now: u64) -> bool {
        self.classes[LITE_CLASS_LATENCY as usize].active > 0
            || (self.last_latency_ns != 0 && now.saturating_sub(self.last_latency_ns) < ACTIVE_NS)
    }

    pub(crate) fn pacing(&self, now: u64) -> bool {
        self.mode == LITE_QOS_SW_PRI && self.latency_active(now)
    }

    /// The QP (of `nr_qps`; `spread` rotates) an operation of `class` starting now
    /// uses, and whether it is paced: only the latency class never is.
    pub(crate) fn route(
        &self,
        class: u32,
        now: u64,
        nr_qps: usize,
        spread: usize,
    ) -> (usize, bool) {
        let paced = class != LITE_CLASS_LATENCY && self.pacing(now);
        (qp_for(self.mode, class, paced, nr_qps, spread), paced)
    }

    /// The turn to signal, once the state's lock is released, after a flow was
    /// served or left: that of the flow picked now, if one waits. Waking only it,
    /// not every waiter, matters with many flows: 32 paced transfers woke 31 tasks
    /// per chunk, which re-checked and slept again on the sending node's one vCPU.
    pub(crate) fn next_turn(&self) -> Option<Arc<CondVar>> {
        let pick = self.wf.pick()?;
        self.turns.get(pick).cloned()
    }

    /// The link's rate: set, found, or assumed until found (the port's).
    pub(crate) fn link(&self) -> u64 {
        if self.link_rate != 0 {
            self.link_rate
        } else {
            match (self.delivery.found(), self.port_rate) {
                (0, 0) => INITIAL_LINK_RATE,
                (0, port) => port,
                (found, _) => found,
            }
        }
    }

    /// SafeUtil's ceiling.
    fn ceiling(&self) -> u64 {
        pacer::headroom(self.link())
    }

    /// Bytes per paced work request.
    pub(crate) fn chunk(&self) -> u64 {
        match self.chunk_bytes {
            LITE_QOS_CHUNK_AUTO => {
                (pacer::link_chunk(self.link()) * self.scale.scale()).min(pacer::CHUNK_MAX)
            }
            chosen => u64::from(chosen),
        }
    }

    /// Bytes one paced transfer may have in flight: its share of the node's paced
    /// window, and at least one chunk (pacer/window.rs).
    pub(crate) fn inflight_budget(&self) -> u64 {
        pacer::transfer_share(self.paced_window(), self.transfers, self.chunk())
    }

    /// Paced work requests the node may have in flight, whichever transfers they
    /// belong to (pacer/window.rs).
    pub(crate) fn paced_places(&self) -> u32 {
        pacer::paced_places(self.paced_window(), self.chunk())
    }

    fn paced_window(&self) -> u64 {
        let chunk = self.chunk();
        pacer::paced_window(self.bucket.rate(), chunk, self.hold.hold_ns(chunk))
    }

    /// Bytes one transfer of `class` that is not paced may have in flight: in SW-Pri
    /// mode, the bulk classes' share of the node's unpaced window.
    pub(crate) fn unpaced_budget(&self, class: u32) -> u64 {
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

    /// Applies new settings: AIMD's bounds, and the bucket's rate and chunk.
    pub(crate) fn reconfigure(&mut self, now: u64) {
        let ceiling = self.ceiling();
        let floor = pacer::bulk_floor(
            ceiling,
            self.paced_weight(),
            self.weights[LITE_CLASS_LATENCY as usize],
        );
        let at = self.control_input(now);
        self.aimd_control
            .reconfigure(at, ceiling, floor, &mut self.bucket);
        self.bucket.set_chunk(self.chunk(), now);
    }

    /// What SafeUtil's control loop sees of the node at `now`.
    fn control_input(&self, now: u64) -> ControlInput {
        ControlInput {
            now,
            sw_pri: self.mode == LITE_QOS_SW_PRI,
            latency_active: self.latency_active(now),
            target_ns: self.target99(),
        }
    }

    /// The Target99 AIMD steers to (pacer/alone.rs).
    pub(crate) fn target99(&self) -> u64 {
        self.windows
            .alone
            .target_ns(self.target_ratio_pct, self.target_ns)
    }

    /// No transfer of a class other than the latency class is in progress, and the
    /// last one ended `UNPACED_WINDOW_NS` before `since` at the least: until then
    /// the bytes it left in flight may still wait at the bottleneck. An operation
    /// in the gap between two transfers of a back-to-back bulk flow is not alone
    /// either: on the debug guests such gaps held a few of the latency class's
    /// operations, enough to retake the p99 alone beside bulk traffic.
    fn others_idle_since(&self, since: u64) -> bool {
        self.classes[LITE_CLASS_DEFAULT as usize].active == 0
            && self.classes[LITE_CLASS_BULK as usize].active == 0
            && self.others_ended_ns.saturating_add(UNPACED_WINDOW_NS) <= since
    }

    /// The flow picked found, at `now`, paced work requests held back while unpaced
    /// bulk bytes are queued at the bottleneck: the link's time is theirs, so the
    /// bucket earns nothing, ChunkScale judges none of it, the flows' waits for
    /// tokens and turns count from the end of it, and latency operations that start
    /// before then do not judge SafeUtil.
    pub(crate) fn held_by_unpaced(&mut self, now: u64) {
        self.bucket.restart(now);
        self.scale.restart(now);
        self.drain.held(now);
    }

    /// Pacing's start, and an AIMD step when due (`AimdControl::run`).
    pub(crate) fn control(&mut self, now: u64) {
        let at = self.control_input(now);
        let w = &mut *self.windows;
        let samples = StepSamples {
            window: &mut w.control,
            scratch: &mut w.scratch,
        };
        self.aimd_control.run(at, samples, &mut self.bucket);
    }

    /// An operation of `class` took `ns`, ending at `now`: a sample of its latency
    /// statistics, and of AIMD's window when it is the latency class's and did not
    /// start behind the unpaced drain (and of the class's p99 alone when nothing
    /// else of this node's was in progress).
    pub(crate) fn sample(&mut self, class: u32, ns: u64, now: u64) {
        let class = class.min(LITE_NR_CLASSES - 1);
        self.windows.stats[class as usize].add(ns);
        if class == LITE_CLASS_LATENCY {
            if self.drain.judges(now.saturating_sub(ns)) {
                self.windows.control.add(ns);
            }
            self.last_latency_ns = now;
            if self.others_idle_since(now.saturating_sub(ns)) {
                let w = &mut *self.windows;
                w.alone.add(ns, &mut w.scratch);
            }
        } else {
            self.others_ended_ns = now;
        }
    }

    /// The device had delivered `count` by `now` while a transfer is backlogged: a
    /// faster link found changes the ceiling and chunks.
    pub(crate) fn delivered(&mut self, now: u64, count: Delivered) {
        if self.delivery.progress(now, count) && self.link_rate == 0 {
            self.reconfigure(now);
        }
    }

    /// A backlogged transfer ended (see `delivered`).
    pub(crate) fn backlog_ends(&mut self, now: u64, count: Delivered) {
        if self.delivery.backlog_ends(now, count) && self.link_rate == 0 {
            self.reconfigure(now);
        }
    }

    pub(crate) fn class_of(&self, who: &Who) -> (u32, Source) {
        classes::effective_class(
            &self.rules,
            self.choices.iter().map(|c| (c.pid, c.class)),
            &who.lineage(),
        )
    }
}
