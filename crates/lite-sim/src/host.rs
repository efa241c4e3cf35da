//! The sending host: its tasks (latency-class operations, bulk transfers) and the
//! module's SW-Pri state they go through.
//!
//! A bulk transfer follows net/transfer.rs's `transfer` and `post_rdma`, and its
//! admission qos/admission.rs's `Ticket::admit` (through
//! `lite_kernel_logic::sw_pri`, which runs the module's own pacer files): gather a
//! work request of up to the ticket's limit, admit it (WF²Q+ turn, tokens), wait
//! until the transfer's work requests in flight leave room for it, take one of the
//! device's paced places, post it, and once all are posted wait for the last
//! completion; then the ticket's end (its latency sample, its flow's leave). A
//! task that waits sleeps: on its flow's turn, on an hrtimer for tokens (which
//! fires `Slack` after its expiry), on its completions or on a place, and runs
//! again `wakeup_ns` after it is woken. Latency-class operations poll.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lite_kernel_logic::sw_pri::{Class, NodeQos, Pass, Ticket, TransferInFlight, INFLIGHT_BYTES, WR_BYTES};
use lite_stats::Rng;
use nexosim::model::{schedulable, BuildContext, Context, Model, ProtoModel};
use nexosim::ports::Output;
use serde::{Deserialize, Serialize};

use crate::net::{now_ns, Post};
use crate::record::{lock, Recorder};
use crate::scenario::{LatencyFlow, Scenario};

/// The module's clock counts from boot, and 0 means "never" in its state: the
/// run starts a second after boot.
const BOOT_NS: u64 = 1_000_000_000;
/// qos/admission.rs's `UNPACED_POLL_NS`: how often the flow picked rechecks
/// whether unpaced bytes still hold paced work requests back.
const UNPACED_POLL_NS: u64 = 2_000_000;
/// verbs.c's `LITE_UNPACED_STALL_NS`: unpaced bytes hold paced work requests back
/// for at most this long after they last moved.
const UNPACED_STALL_NS: u64 = 500_000_000;
/// qos/mod.rs's `TURN_WAIT_MS`: a waiter not picked rechecks this often.
const TURN_WAIT_NS: u64 = 200_000_000;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Latency(LatencyFlow),
    Bulk,
}

/// Where a task goes on when it runs.
#[derive(Clone, Copy, Debug)]
enum Step {
    Begin,
    Admit,
    /// `bytes` admitted: wait for room in flight, then post.
    Post {
        bytes: u64,
        next: u64,
    },
    /// And a place among the device's paced work requests (at most `places`).
    Place {
        bytes: u64,
        next: u64,
        places: u32,
    },
    /// All posted: wait for the completions, then end the ticket.
    Drain,
}

/// What a task sleeps on, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocked {
    No,
    Turn(usize),
    Timer,
    InFlight(u32),
    Place,
    Completions,
}

struct Task {
    kind: Kind,
    step: Step,
    blocked: Blocked,
    /// The run of this task scheduled last; an earlier one that arrives is stale.
    generation: u64,
    ticket: Option<Ticket>,
    inflight: TransferInFlight,
    /// Bytes of the transfer not yet admitted, of the work request being
    /// admitted, and the most the next work request may gather.
    left: u64,
    piece: u64,
    wr_limit: u64,
    outstanding: u32,
}

struct WrInfo {
    task: usize,
    bytes: u64,
    paced: bool,
    unpaced_bulk: bool,
    posted_ns: u64,
}

/// The device's paced places and unpaced bytes (verbs/verbs.c, verbs/paced.rs).
#[derive(Default)]
struct Device {
    paced: u32,
    place_waiters: VecDeque<usize>,
    held_ns: u64,
    paced_wrs: u64,
    unpaced_bytes: u64,
}

/// What the host's shell does for the logic: post a work request at a time, or
/// run a task at a time.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Post { at: u64, wr: Post },
    Run { task: usize, generation: u64, at: u64 },
}

/// The host's state: the module's node and the tasks.
pub struct HostLogic {
    node: NodeQos,
    tasks: Vec<Task>,
    wrs: HashMap<u64, WrInfo>,
    next_wr: u64,
    spread: usize,
    device: Device,
    scenario: Scenario,
    rng: Rng,
    ready: VecDeque<usize>,
    recorder: Arc<Mutex<Recorder>>,
}

impl HostLogic {
    pub fn new(scenario: &Scenario, recorder: Arc<Mutex<Recorder>>) -> HostLogic {
        let latency = scenario.latency_flows.iter().map(|&f| Kind::Latency(f));
        let bulk = std::iter::repeat_n(Kind::Bulk, scenario.bulk_flows);
        let tasks = latency
            .chain(bulk)
            .map(|kind| Task {
                kind,
                step: Step::Begin,
                blocked: Blocked::No,
                generation: 0,
                ticket: None,
                inflight: TransferInFlight::new(0),
                left: 0,
                piece: 0,
                wr_limit: 0,
                outstanding: 0,
            })
            .collect();
        HostLogic {
            node: NodeQos::new(scenario.mode, scenario.link_rate, BOOT_NS),
            tasks,
            wrs: HashMap::new(),
            next_wr: 1,
            spread: 0,
            device: Device::default(),
            scenario: scenario.clone(),
            rng: Rng::new(scenario.seed),
            ready: VecDeque::new(),
            recorder,
        }
    }

    /// The run starts: the latency flows at once, the bulk flows once the phase
    /// alone is over.
    pub fn start(&mut self, now: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        for task in 0..self.tasks.len() {
            match self.tasks[task].kind {
                Kind::Latency(_) => self.ready.push_back(task),
                Kind::Bulk => self.schedule(task, now.max(self.scenario.phases.alone_ns), &mut actions),
            }
        }
        self.run_ready(now, &mut actions);
        actions
    }

    /// A scheduled run of `task` came due; ignored if a later one replaced it.
    pub fn run_scheduled(&mut self, task: usize, generation: u64, now: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.tasks.get(task).is_some_and(|t| t.generation == generation) {
            self.tasks[task].blocked = Blocked::No;
            self.ready.push_back(task);
            self.run_ready(now, &mut actions);
        }
        actions
    }

    /// Work request `wr` completed (its CQE) at `now`.
    pub fn completed(&mut self, wr: u64, now: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(info) = self.wrs.remove(&wr) else {
            return actions;
        };
        let bulk = matches!(self.tasks[info.task].kind, Kind::Bulk);
        lock(&self.recorder).completed(now, info.bytes, bulk);
        let wakeup = self.scenario.host.wakeup_ns;
        if info.paced {
            self.device.paced -= 1;
            self.device.held_ns += now - info.posted_ns;
            self.device.paced_wrs += 1;
            // `lite_paced_leave`: one waiter woken, exclusively.
            if let Some(waiter) = self.device.place_waiters.pop_front() {
                self.wake(waiter, now + wakeup, now, &mut actions);
            }
        }
        if info.unpaced_bulk {
            self.device.unpaced_bytes -= info.bytes;
        }
        let task = &mut self.tasks[info.task];
        task.outstanding -= 1;
        let due = match task.blocked {
            Blocked::InFlight(remain) => task.outstanding <= remain,
            Blocked::Completions => task.outstanding == 0,
            _ => false,
        };
        if due {
            let at = match task.kind {
                Kind::Latency(_) => now,
                Kind::Bulk => now + wakeup,
            };
            self.wake(info.task, at, now, &mut actions);
        }
        self.run_ready(now, &mut actions);
        actions
    }

    fn schedule(&mut self, task: usize, at: u64, actions: &mut Vec<Action>) {
        let t = &mut self.tasks[task];
        t.generation += 1;
        actions.push(Action::Run { task, generation: t.generation, at });
    }

    /// A sleeping `task` is woken, to run at `at`.
    fn wake(&mut self, task: usize, at: u64, now: u64, actions: &mut Vec<Action>) {
        self.tasks[task].blocked = Blocked::No;
        if at <= now {
            self.tasks[task].generation += 1;
            self.ready.push_back(task);
        } else {
            self.schedule(task, at, actions);
        }
    }

    /// The task waiting for `flow`'s turn, woken (`notify_all` on its turn).
    fn wake_flow(&mut self, flow: Option<usize>, now: u64, actions: &mut Vec<Action>) {
        let Some(flow) = flow else { return };
        if let Some(task) = self.tasks.iter().position(|t| t.blocked == Blocked::Turn(flow)) {
            self.wake(task, now + self.scenario.host.wakeup_ns, now, actions);
        }
    }

    fn run_ready(&mut self, now: u64, actions: &mut Vec<Action>) {
        while let Some(task) = self.ready.pop_front() {
            self.run(task, now, actions);
        }
    }

    /// Runs `task` at `now` until it sleeps or its CPU time moves on.
    fn run(&mut self, id: usize, now: u64, actions: &mut Vec<Action>) {
        loop {
            match self.tasks[id].step {
                Step::Begin => {
                    if self.begin(id, now, actions) {
                        return;
                    }
                }
                Step::Admit => {
                    if self.admit(id, now, actions) {
                        return;
                    }
                }
                Step::Post { bytes, next } => {
                    let task = &mut self.tasks[id];
                    let remain = task.inflight.may_remain(bytes);
                    if task.outstanding > remain {
                        task.blocked = Blocked::InFlight(remain);
                        return;
                    }
                    task.inflight.posted(bytes);
                    match task.ticket.as_ref().and_then(Ticket::paced_places) {
                        Some(places) => task.step = Step::Place { bytes, next, places },
                        None => {
                            self.post(id, bytes, next, false, now, actions);
                            return;
                        }
                    }
                }
                Step::Place { bytes, next, places } => {
                    if self.device.paced >= places {
                        self.tasks[id].blocked = Blocked::Place;
                        self.device.place_waiters.push_back(id);
                        return;
                    }
                    self.device.paced += 1;
                    // Room left over is the next waiter's (`lite_paced_enter`).
                    if self.device.paced < places {
                        if let Some(waiter) = self.device.place_waiters.pop_front() {
                            self.wake(waiter, now + self.scenario.host.wakeup_ns, now, actions);
                        }
                    }
                    self.post(id, bytes, next, true, now, actions);
                    return;
                }
                Step::Drain => {
                    if self.end(id, now, actions) {
                        return;
                    }
                }
            }
        }
    }

    /// A new operation or transfer; true when the task then waits (a latency
    /// operation's host time before its post).
    fn begin(&mut self, id: usize, now: u64, actions: &mut Vec<Action>) -> bool {
        let (class, bytes) = match self.tasks[id].kind {
            Kind::Latency(flow) => (Class::Latency, flow.bytes),
            Kind::Bulk => (Class::Bulk, self.scenario.bulk_bytes),
        };
        let ticket = self.node.begin(class, BOOT_NS + now, self.scenario.qps, self.spread);
        self.spread = self.spread.wrapping_add(1);
        let task = &mut self.tasks[id];
        task.left = bytes.max(1);
        task.piece = 0;
        task.wr_limit = ticket.first_wr_limit(WR_BYTES);
        task.inflight = TransferInFlight::new(ticket.inflight_limit(INFLIGHT_BYTES));
        task.ticket = Some(ticket);
        task.step = Step::Admit;
        let mean = self.scenario.host.jitter_mean_ns;
        if class == Class::Latency && mean > 0 {
            let spread = -(mean as f64) * (1.0 - self.rng.unit()).ln();
            let at = now + spread as u64;
            if at > now {
                self.schedule(id, at, actions);
                return true;
            }
        }
        false
    }

    /// One pass of the admission loop; true when the task then waits.
    fn admit(&mut self, id: usize, now: u64, actions: &mut Vec<Action>) -> bool {
        let hold = if self.device.unpaced_bytes > 0 { UNPACED_STALL_NS } else { 0 };
        let totals = (self.device.held_ns, self.device.paced_wrs);
        let task = &mut self.tasks[id];
        if task.piece == 0 {
            task.piece = task.left.min(task.wr_limit.max(1));
        }
        let Some(ticket) = task.ticket.as_mut() else {
            task.step = Step::Begin;
            return false;
        };
        let pass = self.node.admit_pass(ticket, task.piece, BOOT_NS + now, hold, UNPACED_POLL_NS, || totals);
        match pass {
            Pass::Go { bytes, next, wake } => {
                task.step = Step::Post { bytes, next };
                self.wake_flow(wake, now, actions);
                false
            }
            Pass::Sleep(until) => {
                let until = until.saturating_sub(BOOT_NS).max(now);
                let fires = until + self.scenario.host.slack.late_ns(until - now);
                task.blocked = Blocked::Timer;
                self.schedule(id, fires + self.scenario.host.wakeup_ns, actions);
                true
            }
            Pass::Wait { flow, wake } => {
                task.blocked = Blocked::Turn(flow);
                self.schedule(id, now + TURN_WAIT_NS, actions);
                self.wake_flow(wake, now, actions);
                true
            }
        }
    }

    /// Posts `bytes` of the task's transfer; the post takes the task's CPU for
    /// `post_ns`, after which it goes on.
    fn post(&mut self, id: usize, bytes: u64, next: u64, paced: bool, now: u64, actions: &mut Vec<Action>) {
        let wr = self.next_wr;
        self.next_wr += 1;
        let task = &mut self.tasks[id];
        let bulk = matches!(task.kind, Kind::Bulk);
        let unpaced_bulk = bulk && !paced;
        self.wrs.insert(wr, WrInfo { task: id, bytes, paced, unpaced_bulk, posted_ns: now });
        if unpaced_bulk {
            self.device.unpaced_bytes += bytes;
        }
        lock(&self.recorder).posted(bytes);
        task.outstanding += 1;
        let qp = task.ticket.as_ref().map_or(0, Ticket::qp);
        task.piece -= bytes.min(task.piece);
        task.left -= bytes.min(task.left);
        if task.piece == 0 {
            task.wr_limit = next.min(WR_BYTES);
            if let Some(ticket) = task.ticket.as_ref() {
                task.inflight.set_budget(ticket.inflight_limit(INFLIGHT_BYTES));
            }
        }
        task.step = if task.left == 0 { Step::Drain } else { Step::Admit };
        let at = now + self.scenario.host.post_ns;
        actions.push(Action::Post { at, wr: Post { id: wr, qp, bytes } });
        if at > now {
            self.schedule(id, at, actions);
        } else {
            self.ready.push_back(id);
        }
    }

    /// The transfer waits for its completions, then its ticket ends; true when
    /// the task then waits.
    fn end(&mut self, id: usize, now: u64, actions: &mut Vec<Action>) -> bool {
        let task = &mut self.tasks[id];
        if task.outstanding > 0 {
            task.blocked = Blocked::Completions;
            return true;
        }
        task.step = Step::Begin;
        let Some(ticket) = task.ticket.take() else {
            return false;
        };
        let start = ticket.start_ns().saturating_sub(BOOT_NS);
        let kind = task.kind;
        let wake = self.node.end(ticket, BOOT_NS + now);
        self.wake_flow(wake, now, actions);
        match kind {
            Kind::Latency(flow) => {
                let mut rec = lock(&self.recorder);
                rec.latency(start, now);
                rec.control = self.node.control_state();
                rec.node_alone_p99_ns = self.node.alone_p99_ns();
                drop(rec);
                if flow.think_ns > 0 {
                    self.schedule(id, now + flow.think_ns, actions);
                    return true;
                }
                false
            }
            Kind::Bulk => false,
        }
    }
}

/// The host in the simulation: it turns the logic's actions into events.
#[derive(Serialize, Deserialize)]
pub struct Host {
    pub posts: Output<Post>,
}

#[Model(type Env = HostLogic)]
impl Host {
    #[nexosim(init)]
    async fn init(&mut self, cx: &Context<Self>, logic: &mut HostLogic) {
        let actions = logic.start(now_ns(cx));
        self.apply(actions, cx).await;
    }

    #[nexosim(schedulable)]
    async fn run_task(&mut self, run: (usize, u64), cx: &Context<Self>, logic: &mut HostLogic) {
        let actions = logic.run_scheduled(run.0, run.1, now_ns(cx));
        self.apply(actions, cx).await;
    }

    #[nexosim(schedulable)]
    async fn doorbell(&mut self, wr: Post) {
        self.posts.send(wr).await;
    }

    /// The RNIC reports a work request's completion.
    pub async fn completion(&mut self, wr: u64, cx: &Context<Self>, logic: &mut HostLogic) {
        let actions = logic.completed(wr, now_ns(cx));
        self.apply(actions, cx).await;
    }

    async fn apply(&mut self, actions: Vec<Action>, cx: &Context<Self>) {
        let now = now_ns(cx);
        for action in actions {
            match action {
                Action::Post { at, wr } if at <= now => self.posts.send(wr).await,
                Action::Post { at, wr } => {
                    let _ = cx.schedule_event(Duration::from_nanos(at - now), schedulable!(Self::doorbell), wr);
                }
                Action::Run { task, generation, at } => {
                    // The logic runs a task due now at once, so `at` is later.
                    let _ = cx.schedule_event(
                        Duration::from_nanos(at.saturating_sub(now).max(1)),
                        schedulable!(Self::run_task),
                        (task, generation),
                    );
                }
            }
        }
    }
}

/// Builds the `Host` with its logic as the environment (the module's state is
/// not serializable, which nexosim asks of a model's own fields).
pub struct ProtoHost {
    pub posts: Output<Post>,
    pub logic: HostLogic,
}

impl ProtoModel for ProtoHost {
    type Model = Host;

    fn build(self, _: &mut BuildContext<Self>) -> (Host, HostLogic) {
        (Host { posts: self.posts }, self.logic)
    }
}
