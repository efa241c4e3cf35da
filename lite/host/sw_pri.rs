//! SW-Pri's node state and a transfer's admission, for the simulator
//! (`crates/lite-sim`, docs/measurements/simulation.md).
//!
//! `NodeQos` mirrors `QosState` (qos/state.rs) and `Ticket` mirrors the module's
//! `Ticket` (qos/admission.rs): those files need kernel types (mutexes, condition
//! variables, the device), so their control flow is copied here, in their order,
//! while every decision in it is made by the module's own pacer files (pacer/):
//! WF²Q+, the token bucket, the chunk and its scale, AIMD, the p99 alone, the
//! drain, the place hold and the paced window. What is left out, and why:
//! - the link's rate is set, as with `lite-admin weights --link-mbps`, so
//!   `DeliveryRate` (2 s intervals) does not run;
//! - reference probes: the simulated latency flows are never sparse;
//! - the statistics only `lite-admin stats` shows (per-class counters, phases).
//!
//! The waits themselves (condition variables, hrtimers, the device's places) are
//! the caller's: `admit_pass` says which one a pass ends in.

use crate::classes::qp_for;
use crate::inflight::InFlight;
use crate::pacer::{
    bulk_floor, chunk_len, headroom, link_chunk, paced_places, paced_window, transfer_share, Aimd,
    AimdControl, AloneP99, ChunkScale, ControlInput, Flow, LatencyWindow, PlaceHold, StepSamples,
    TokenBucket, UnpacedDrain, Wf2q, ACTIVE_NS, CHUNK_MAX, DEFAULT_TARGET_NS,
    DEFAULT_TARGET_RATIO_PCT, DEFAULT_WEIGHTS, MIN_INFLIGHT, UNPACED_WINDOW_NS, WINDOW,
};
use crate::uapi::{
    LITE_CLASS_BULK, LITE_CLASS_DEFAULT, LITE_CLASS_LATENCY, LITE_NR_CLASSES, LITE_QOS_NONE,
    LITE_QOS_SW_PRI,
};

// net/transfer.rs's: a work request's bytes at most, and a transfer's in flight.
pub const WR_BYTES: u64 = 32 << 10;
pub const INFLIGHT_BYTES: u64 = 4 * WR_BYTES;

/// The simulated device: the module keys the place hold by it.
const DEVICE: usize = 1;

/// Which of the module's modes the node runs (`lite-admin mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    None,
    SwPri,
}

impl Mode {
    fn abi(self) -> u32 {
        match self {
            Mode::None => LITE_QOS_NONE,
            Mode::SwPri => LITE_QOS_SW_PRI,
        }
    }
}

/// A transfer's class, as `lite-admin class` sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Latency,
    Bulk,
}

impl Class {
    fn abi(self) -> u32 {
        match self {
            Class::Latency => LITE_CLASS_LATENCY,
            Class::Bulk => LITE_CLASS_BULK,
        }
    }
}

/// The chunk paced work requests carry on a link of `link_rate` bytes/s before
/// any scaling (pacer/chunk.rs), and SafeUtil's ceiling there (pacer/aimd.rs).
pub fn chunk_and_ceiling(link_rate: u64) -> (u64, u64) {
    (link_chunk(link_rate), headroom(link_rate))
}

/// A zeroed latency window: the module allocates `Windows` zeroed.
fn empty_window() -> LatencyWindow {
    // SAFETY: `LatencyWindow` is an array of u32 and two usizes, all valid as zeros
    // (the module relies on the same, `Zeroable`).
    unsafe { core::mem::zeroed() }
}

/// As `empty_window`, for the p99 alone.
fn empty_alone() -> AloneP99 {
    // SAFETY: a `LatencyWindow` and three integers, all valid as zeros.
    unsafe { core::mem::zeroed() }
}

#[derive(Default, Clone, Copy)]
struct ClassCounters {
    active: u32,
}

/// The node's SW-Pri state, as `QosState` keeps it (qos/state.rs).
pub struct NodeQos {
    mode: u32,
    weights: [u32; 3],
    target_ns: u64,
    target_ratio_pct: u32,
    others_ended_ns: u64,
    link_rate: u64,
    scale: ChunkScale,
    hold: PlaceHold,
    classes: [ClassCounters; 3],
    control_window: LatencyWindow,
    alone: AloneP99,
    scratch: Box<[u32; WINDOW]>,
    bucket: TokenBucket,
    aimd_control: AimdControl,
    wf: Wf2q,
    flows: Vec<Flow>,
    used: Vec<bool>,
    transfers: u64,
    last_latency_ns: u64,
    drain: UnpacedDrain,
    paced_bytes: u64,
}

/// What one pass of `Ticket::admit`'s loop came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Pass {
    /// `bytes` go now; the transfer may post its next work request of up to `next`
    /// bytes. `wake`: the paced flow to signal (its turn came).
    Go {
        bytes: u64,
        next: u64,
        wake: Option<usize>,
    },
    /// The flow picked sleeps on an hrtimer until this time (tokens, or a recheck
    /// of the unpaced bytes holding paced work requests back).
    Sleep(u64),
    /// Another flow's turn: this transfer waits on its own turn (`flow`) after
    /// signalling the flow picked (`wake`).
    Wait { flow: usize, wake: Option<usize> },
}

/// What the node knows of one transfer (qos/admission.rs `Ticket`).
pub struct Ticket {
    class: Class,
    qp: usize,
    paced: bool,
    chunk: u64,
    inflight: u64,
    flow: Option<usize>,
    places: Option<u32>,
    start_ns: u64,
    waited_from: Option<u64>,
}

impl Ticket {
    /// The QP (of the node's K to the peer) its work requests go on.
    pub fn qp(&self) -> usize {
        self.qp
    }

    /// Largest first work request (at most `most`): a chunk while paced.
    pub fn first_wr_limit(&self, most: u64) -> u64 {
        if self.paced {
            chunk_len(most, Some(self.chunk))
        } else {
            self.inflight.min(most)
        }
    }

    /// Bytes of work requests the transfer may have in flight (at most `most`).
    pub fn inflight_limit(&self, most: u64) -> u64 {
        self.inflight.min(most)
    }

    /// While its last admitted work request was paced, the node's places for paced
    /// work requests in flight, one of which it must hold.
    pub fn paced_places(&self) -> Option<u32> {
        self.places
    }

    pub fn class(&self) -> Class {
        self.class
    }

    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }
}

/// A transfer's work requests in flight (net/inflight.rs), which it waits on
/// before posting more (`Op::wait_below`).
pub struct TransferInFlight(InFlight);

impl TransferInFlight {
    pub fn new(budget: u64) -> TransferInFlight {
        TransferInFlight(InFlight::new(usize::try_from(budget).unwrap_or(usize::MAX)))
    }

    /// How many of its newest work requests may still be in flight when one of
    /// `bytes` is posted: the transfer waits for the older ones' completions.
    pub fn may_remain(&self, bytes: u64) -> u32 {
        self.0
            .may_remain(usize::try_from(bytes).unwrap_or(usize::MAX))
    }

    pub fn posted(&mut self, bytes: u64) {
        self.0.posted(usize::try_from(bytes).unwrap_or(usize::MAX));
    }

    pub fn set_budget(&mut self, budget: u64) {
        self.0
            .set_budget(usize::try_from(budget).unwrap_or(usize::MAX));
    }
}

/// SafeUtil, Target99 and the AIMD steps taken, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Control {
    pub safe_util: u64,
    pub target99_ns: u64,
    pub decreases: u64,
    pub increases: u64,
    pub paced_bytes: u64,
}

impl NodeQos {
    /// A node in `mode` whose link runs at `link_rate` bytes/s (set by the
    /// operator), with the module's default weights and Target99, at `now`.
    pub fn new(mode: Mode, link_rate: u64, now: u64) -> NodeQos {
        let ceiling = headroom(link_rate);
        let mut node = NodeQos {
            mode: mode.abi(),
            weights: DEFAULT_WEIGHTS,
            target_ns: DEFAULT_TARGET_NS,
            target_ratio_pct: DEFAULT_TARGET_RATIO_PCT,
            others_ended_ns: 0,
            link_rate,
            scale: ChunkScale::new(now),
            hold: PlaceHold::new(),
            classes: [ClassCounters::default(); 3],
            control_window: empty_window(),
            alone: empty_alone(),
            scratch: Box::new([0; WINDOW]),
            bucket: TokenBucket::new(0, now),
            aimd_control: AimdControl::new(Aimd::new(ceiling, 0, DEFAULT_TARGET_NS)),
            wf: Wf2q::default(),
            flows: Vec::new(),
            used: Vec::new(),
            transfers: 0,
            last_latency_ns: 0,
            drain: UnpacedDrain::default(),
            paced_bytes: 0,
        };
        node.reconfigure(now);
        node
    }

    /// The module's `Qos::new` then `lite-admin weights --link-mbps`: AIMD's bounds
    /// and the bucket's chunk (`QosState::reconfigure`).
    fn reconfigure(&mut self, now: u64) {
        let ceiling = headroom(self.link_rate);
        let paced_weight =
            self.weights[LITE_CLASS_DEFAULT as usize].max(self.weights[LITE_CLASS_BULK as usize]);
        let floor = bulk_floor(
            ceiling,
            paced_weight,
            self.weights[LITE_CLASS_LATENCY as usize],
        );
        let at = self.control_input(now);
        self.aimd_control
            .reconfigure(at, ceiling, floor, &mut self.bucket);
        self.bucket.set_chunk(self.chunk(), now);
    }

    /// `QosState::control_input`.
    fn control_input(&self, now: u64) -> ControlInput {
        ControlInput {
            now,
            sw_pri: self.mode == LITE_QOS_SW_PRI,
            latency_active: self.latency_active(now),
            target_ns: self.target99(),
        }
    }

    fn latency_active(&self, now: u64) -> bool {
        self.classes[LITE_CLASS_LATENCY as usize].active > 0
            || (self.last_latency_ns != 0 && now.saturating_sub(self.last_latency_ns) < ACTIVE_NS)
    }

    fn pacing(&self, now: u64) -> bool {
        self.mode == LITE_QOS_SW_PRI && self.latency_active(now)
    }

    /// Bytes per paced work request (`QosState::chunk`, chunk sized automatically).
    pub fn chunk(&self) -> u64 {
        (link_chunk(self.link_rate) * self.scale.scale()).min(CHUNK_MAX)
    }

    fn paced_window(&self) -> u64 {
        let chunk = self.chunk();
        paced_window(self.bucket.rate(), chunk, self.hold.hold_ns(chunk))
    }

    fn inflight_budget(&self) -> u64 {
        transfer_share(self.paced_window(), self.transfers, self.chunk())
    }

    fn node_paced_places(&self) -> u32 {
        paced_places(self.paced_window(), self.chunk())
    }

    fn unpaced_budget(&self, class: u32) -> u64 {
        if self.mode != LITE_QOS_SW_PRI || class == LITE_CLASS_LATENCY {
            return u64::MAX;
        }
        let transfers = u64::from(
            self.classes[LITE_CLASS_DEFAULT as usize].active
                + self.classes[LITE_CLASS_BULK as usize].active,
        )
        .max(1);
        (crate::pacer::bytes_in(self.link_rate, UNPACED_WINDOW_NS) / transfers).max(MIN_INFLIGHT)
    }

    fn target99(&self) -> u64 {
        self.alone.target_ns(self.target_ratio_pct, self.target_ns)
    }

    /// The first flow WF²Q+ would serve now, if any waits.
    fn next_turn(&self) -> Option<usize> {
        self.wf.pick()
    }

    fn others_idle_since(&self, since: u64) -> bool {
        self.classes[LITE_CLASS_DEFAULT as usize].active == 0
            && self.classes[LITE_CLASS_BULK as usize].active == 0
            && self.others_ended_ns.saturating_add(UNPACED_WINDOW_NS) <= since
    }

    /// `QosState::control`: pacing's start, and an AIMD step when due.
    fn control(&mut self, now: u64) {
        let at = self.control_input(now);
        let samples = StepSamples {
            window: &mut self.control_window,
            scratch: &mut self.scratch,
        };
        self.aimd_control.run(at, samples, &mut self.bucket);
    }

    /// `QosState::sample`: an operation of `class` took `ns`, ending at `now`.
    fn sample(&mut self, class: u32, ns: u64, now: u64) {
        if class == LITE_CLASS_LATENCY {
            if self.drain.judges(now.saturating_sub(ns)) {
                self.control_window.add(ns);
            }
            self.last_latency_ns = now;
            if self.others_idle_since(now.saturating_sub(ns)) {
                self.alone.add(ns, &mut self.scratch);
            }
        } else {
            self.others_ended_ns = now;
        }
    }

    /// `Qos::begin`: a transfer of `class` starts at `now` over `nr_qps` QPs
    /// (`spread` rotates them).
    pub fn begin(&mut self, class: Class, now: u64, nr_qps: usize, spread: usize) -> Ticket {
        let abi = class.abi().min(LITE_NR_CLASSES - 1);
        self.classes[abi as usize].active += 1;
        let paced = abi != LITE_CLASS_LATENCY && self.pacing(now);
        Ticket {
            class,
            qp: qp_for(self.mode, abi, paced, nr_qps, spread),
            paced,
            chunk: self.chunk(),
            inflight: if paced {
                self.inflight_budget()
            } else {
                self.unpaced_budget(abi)
            },
            flow: None,
            places: None,
            start_ns: now,
            waited_from: None,
        }
    }

    /// One pass of `Ticket::admit`'s loop at `now` for a work request of `bytes`;
    /// `unpaced_hold_ns` is the device's `unpaced_hold_ns` (the time unpaced bulk
    /// bytes still hold paced work requests back, 0: none) and `poll_ns` the
    /// module's `UNPACED_POLL_NS`. `device_totals` reads the device's paced places
    /// held over time and given back, for the place hold.
    pub fn admit_pass(
        &mut self,
        ticket: &mut Ticket,
        bytes: u64,
        now: u64,
        unpaced_hold_ns: u64,
        poll_ns: u64,
        device_totals: impl FnOnce() -> (u64, u64),
    ) -> Pass {
        let class = ticket.class.abi();
        if class == LITE_CLASS_LATENCY {
            return Pass::Go {
                bytes,
                next: u64::MAX,
                wake: None,
            };
        }
        self.control(now);
        if !self.pacing(now) {
            let wake = self.leave_flow(ticket);
            ticket.places = None;
            ticket.waited_from = None;
            ticket.inflight = self.unpaced_budget(class);
            return Pass::Go {
                bytes,
                next: ticket.inflight,
                wake,
            };
        }
        let index = match ticket.flow {
            Some(i) => i,
            None => {
                let weight = self.weights[class as usize];
                let i = match self.used.iter().position(|used| !used) {
                    Some(i) => i,
                    None => {
                        self.flows.push(Flow::new(weight));
                        self.used.push(false);
                        self.flows.len() - 1
                    }
                };
                self.flows[i].renew(weight);
                self.used[i] = true;
                self.transfers += 1;
                ticket.flow = Some(i);
                i
            }
        };
        let grant = bytes.min(self.chunk().max(1));
        self.wf.arrive(&mut self.flows, index, grant);
        if self.wf.pick() != Some(index) {
            ticket.waited_from.get_or_insert(now);
            return Pass::Wait {
                flow: index,
                wake: self.next_turn(),
            };
        }
        let taken = if unpaced_hold_ns > 0 {
            self.bucket.restart(now);
            self.scale.restart(now);
            self.drain.held(now);
            Err(now + unpaced_hold_ns.min(poll_ns))
        } else {
            self.bucket.take(grant, now)
        };
        if let Err(wake_ns) = taken {
            ticket.waited_from.get_or_insert(now);
            return Pass::Sleep(wake_ns);
        }
        self.wf.served(&mut self.flows, index, 0);
        let waited = ticket
            .waited_from
            .take()
            .map_or(0, |from| self.drain.token_wait(from, now));
        self.paced_bytes = self.paced_bytes.wrapping_add(grant);
        let chunk = self.chunk();
        self.hold.sample(DEVICE, chunk, now, device_totals);
        let rate = self.bucket.rate();
        self.scale.admitted(grant, waited, rate);
        if self.scale.judge(rate, now) {
            let chunk = self.chunk();
            self.bucket.set_chunk(chunk, now);
        }
        ticket.chunk = self.chunk();
        ticket.inflight = self.inflight_budget();
        ticket.places = Some(self.node_paced_places());
        Pass::Go {
            bytes: grant,
            next: chunk_len(u64::MAX, Some(ticket.chunk)),
            wake: self.next_turn(),
        }
    }

    /// The transfer no longer paced leaves the schedule; returns the flow to wake.
    fn leave_flow(&mut self, ticket: &mut Ticket) -> Option<usize> {
        let i = ticket.flow.take()?;
        self.wf.leave(&mut self.flows, i);
        if let Some(used) = self.used.get_mut(i).filter(|used| **used) {
            *used = false;
            self.transfers -= 1;
        }
        self.next_turn()
    }

    /// The transfer ended at `now` (the `Ticket`'s drop): its latency sample and
    /// its flow's leave; returns the paced flow to wake, if its turn moved.
    pub fn end(&mut self, mut ticket: Ticket, now: u64) -> Option<usize> {
        let wake = self.leave_flow(&mut ticket);
        let class = ticket.class.abi();
        self.classes[class as usize].active -= 1;
        self.sample(class, now.saturating_sub(ticket.start_ns), now);
        wake
    }

    /// The latency class's p99 alone as the node measured it, if known.
    pub fn alone_p99_ns(&self) -> Option<u64> {
        self.alone.p99_ns()
    }

    pub fn control_state(&self) -> Control {
        Control {
            safe_util: self.aimd_control.aimd.safe_util(),
            target99_ns: self.target99(),
            decreases: self.aimd_control.decreases,
            increases: self.aimd_control.increases,
            paced_bytes: self.paced_bytes,
        }
    }

    /// The bucket's rate now (0: nothing paced).
    pub fn pacing_rate(&self) -> u64 {
        self.bucket.rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants copied from net/transfer.rs still read the same there.
    #[test]
    fn the_copied_constants_match_the_module() {
        let transfer = include_str!("../net/transfer.rs");
        for line in [
            "const WR_BYTES: usize = 32 << 10;",
            "const INFLIGHT_BYTES: usize = 4 * WR_BYTES;",
        ] {
            assert!(
                transfer.contains(line),
                "net/transfer.rs no longer has `{line}`"
            );
        }
    }

    #[test]
    fn bulk_beside_latency_is_paced_in_chunks_on_qp_0() {
        let link = 12_500_000_000;
        let mut node = NodeQos::new(Mode::SwPri, link, 1_000_000_000);
        let latency = node.begin(Class::Latency, 1_000_000_000, 4, 0);
        assert_ne!(latency.qp(), 0);
        let mut bulk = node.begin(Class::Bulk, 1_000_000_100, 4, 3);
        assert_eq!(bulk.qp(), 0);
        assert_eq!(bulk.first_wr_limit(32 << 10), node.chunk());
        // The bucket starts empty: the flow picked sleeps until a chunk's tokens.
        let now = 1_000_000_200;
        let Pass::Sleep(until) = node.admit_pass(&mut bulk, 32 << 10, now, 0, 2_000_000, || (0, 0))
        else {
            panic!("tokens before any were earned");
        };
        let safe_util = headroom(link) - headroom(link) / 8;
        assert_eq!(node.pacing_rate(), safe_util, "one step below the ceiling");
        assert_eq!(
            until - now,
            (node.chunk() * 1_000_000_000).div_ceil(safe_util)
        );
        let pass = node.admit_pass(&mut bulk, 32 << 10, until, 0, 2_000_000, || (0, 0));
        assert!(matches!(pass, Pass::Go { bytes, .. } if bytes == node.chunk()));
        assert!(bulk.paced_places().is_some());
        assert_eq!(node.end(bulk, until + 1), None, "no other flow waits");
    }
}
