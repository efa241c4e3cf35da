//! The pure paths every LITE operation crosses, public for the criterion benches
//! (`benches/per_op.rs`, docs/measurements/host-cost.md).
//!
//! Each fixture holds the state the module keeps for one path, built with the
//! module's own code, and each method runs one operation of that path through the
//! same functions, in the order the module calls them. What the kernel adds
//! around them is not here: the mutexes they run under, wakeups, hrtimers, pinning
//! and the NIC.

use crate::classes::{effective_class, qp_for, Lineage, Rule, MAX_LINEAGE, MAX_RULES};
use crate::layout::{self, Extent, CHUNK_MAX, PERM_READ, PERM_WRITE};
use crate::net::wire::{decode_ring_imm, encode_ring_imm, RING_BYTES};
use crate::pacer::{
    headroom, link_chunk, paced_places, paced_window, transfer_share, Aimd, AloneP99, ChunkScale,
    Flow, LatencyWindow, PlaceHold, TokenBucket, UnpacedDrain, Wf2q, WINDOW,
};
use crate::rpc::ring::{record_len, ring_offset, ClientRing, RecordHeader, ServerRing, HEADER_LEN};
use crate::uapi::{
    LITE_CLASS_BULK, LITE_CLASS_LATENCY, LITE_QOS_SW_PRI, LITE_RULE_CGROUP, LITE_RULE_PID,
    LITE_RULE_UID,
};

const NS_PER_S: u64 = 1_000_000_000;

/// A small xorshift generator: the benches' offsets, handles and latencies vary
/// from one operation to the next (as they do in use), reproducibly.
pub struct Xorshift(u64);

impl Xorshift {
    pub fn new(seed: u64) -> Self {
        Xorshift(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
}

/// An LMR's extents as LT_malloc lays them out: an even share per holder, each in
/// chunks of up to 4 MiB (lmr/create.rs with lmr/layout.rs).
pub struct Lmr {
    size: u64,
    extents: Vec<Extent>,
}

impl Lmr {
    /// `size` bytes over the nodes of the bitmask `holders`, every chunk allocated
    /// at the first try.
    pub fn allocated(size: u64, holders: u32) -> Lmr {
        let mut extents = Vec::new();
        let mut start = 0;
        for (node, share) in layout::shares(size, holders) {
            let mut left = share;
            while let Some(len) = layout::next_chunk_len(left, CHUNK_MAX) {
                extents.push(Extent {
                    node,
                    start,
                    addr: 0x1_0000_0000 + start,
                    len,
                    rkey: 0x100 + extents.len() as u32,
                });
                start += len;
                left = left.saturating_sub(len);
            }
        }
        Lmr {
            size: start,
            extents,
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn extents(&self) -> usize {
        self.extents.len()
    }

    /// What LT_read or LT_write does with a range once the handle is found
    /// (`LmrNode::rw`): the permission, the bounds, and the cut into one piece per
    /// extent. Returns a digest of the pieces (so that none of the work is left
    /// out), or `None` where the module refuses the access.
    pub fn access(&self, perm: u32, write: bool, offset: u64, len: u64) -> Option<u64> {
        let want = if write { PERM_WRITE } else { PERM_READ };
        if !layout::perm_allows(perm, want) {
            return None;
        }
        layout::check_range(self.size, offset, len).ok()?;
        let digest = layout::pieces(&self.extents, offset, len).fold(0, |digest, piece| {
            let node = self.extents[piece.extent].node;
            digest ^ piece.addr ^ piece.len ^ u64::from(piece.rkey ^ node) ^ piece.pos
        });
        Some(digest)
    }

    /// What an atomic does with its offset once the handle is found
    /// (`LmrNode::lmr_word`): the holder's address of the 8-byte word.
    pub fn atomic_word(&self, perm: u32, offset: u64) -> Option<u64> {
        if !layout::perm_allows(perm, PERM_READ | PERM_WRITE) {
            return None;
        }
        let (extent, addr) = layout::atomic_word(&self.extents, self.size, offset).ok()?;
        Some(addr ^ u64::from(self.extents[extent].rkey))
    }
}

/// One RPC binding's ring, seen from both ends: the client's room reservation and
/// the server's consumption (rpc/ring/, with the ring immediate of net/wire/).
pub struct RpcRing {
    client: ClientRing,
    server: ServerRing,
    binding: usize,
    next_seq: u64,
}

/// A record with its room claimed: the ring immediate that announces it and the
/// header written at its offset.
pub struct Claimed {
    imm_payload: u32,
    header: [u8; HEADER_LEN],
}

impl RpcRing {
    pub fn new() -> RpcRing {
        RpcRing {
            client: ClientRing::new(RING_BYTES, 0),
            server: ServerRing::new(RING_BYTES),
            binding: 7,
            next_seq: 1,
        }
    }

    /// The caller's side of an LT_RPC (rpc/call.rs): room for a record of
    /// `payload` bytes and `nruns` output runs, its header, and the immediate
    /// that names its offset. `None` when the ring is full.
    pub fn claim(&mut self, payload: u64, nruns: u32, slot: u32) -> Option<Claimed> {
        let at = self.client.reserve(record_len(nruns, payload))?;
        let header = RecordHeader {
            flags: 0,
            slot,
            start: at.start,
            pad: at.pad,
            nruns,
            reserved: 0,
            len: payload,
            seq: self.next_seq,
            out_cap: 64 * u64::from(nruns),
        };
        self.next_seq += 1;
        let offset = ring_offset(at.start, self.client.size());
        Some(Claimed {
            imm_payload: encode_ring_imm(self.binding, offset)?,
            header: header.encode(),
        })
    }

    /// The release of a claimed record: the server's side (rpc/completion.rs,
    /// rpc/server.rs: the immediate decoded, the header decoded and checked
    /// against the ring, the room consumed, a head report when due, the head
    /// that rides with the reply), then the caller's node learning that head
    /// (rpc/client.rs). False where the module would refuse the record.
    pub fn release(&mut self, claimed: &Claimed) -> bool {
        let (binding, offset) = decode_ring_imm(claimed.imm_payload);
        let Some(header) = RecordHeader::decode(&claimed.header) else {
            return false;
        };
        if binding != self.binding || self.server.check(offset, &header).is_err() {
            return false;
        }
        if self.server.consume(&header).is_err() {
            return false;
        }
        // A head report due goes to the client as an immediate of its own; the
        // head rides with the reply anyway (`head_for_reply`).
        core::hint::black_box(self.server.report_due());
        let head = self.server.head();
        self.server.reported(head);
        self.client.set_head(head);
        true
    }
}

impl Default for RpcRing {
    fn default() -> Self {
        RpcRing::new()
    }
}

/// Which class the calling task's operation is in, and its QP: what every
/// operation asks first (qos/classes.rs, as `Qos::begin` and `Qos::classify`).
pub struct Classifier {
    rules: Vec<Rule>,
    tgids: Vec<u32>,
}

impl Classifier {
    /// A task `ancestors` deep (at most `MAX_LINEAGE` are looked at) on a node with
    /// `rules` operator rules (at most `MAX_RULES`), none of which is the task's:
    /// every rule is compared with every ancestor, the most work a lookup does.
    pub fn new(rules: usize, ancestors: usize) -> Classifier {
        let kinds = [LITE_RULE_PID, LITE_RULE_CGROUP, LITE_RULE_UID];
        let rules = (0..rules.min(MAX_RULES))
            .map(|i| Rule {
                kind: kinds[i % kinds.len()],
                id: 1_000_000 + i as u64,
                class: LITE_CLASS_BULK,
            })
            .collect();
        Classifier {
            rules,
            tgids: (0..ancestors.clamp(1, MAX_LINEAGE) as u32)
                .map(|depth| 5000 - depth)
                .collect(),
        }
    }

    /// The class and the QP (of 4) of the task's next operation; no process
    /// lowered its own class.
    pub fn classify(&self, spread: usize) -> (u32, usize) {
        let who = Lineage {
            tgids: &self.tgids,
            uid: 1000,
            cgroup: 42,
        };
        let (class, _) = effective_class(&self.rules, core::iter::empty(), &who);
        let qp = qp_for(
            LITE_QOS_SW_PRI,
            class,
            class != LITE_CLASS_LATENCY,
            4,
            spread,
        );
        (class, qp)
    }
}

/// An empty latency window, as the module has it: `Windows` is allocated zeroed
/// (qos/state.rs), and an all-zero window is an empty one.
fn empty_window() -> LatencyWindow {
    // SAFETY: `LatencyWindow` is an array of u32 and two usizes, for which all
    // zeros are valid values (the module relies on the same, `Zeroable`).
    unsafe { core::mem::zeroed() }
}

/// As `empty_window`, for the latency class's p99 alone.
fn empty_alone() -> AloneP99 {
    // SAFETY: `AloneP99` is a `LatencyWindow` and three integers, all valid as
    // zeros; the module allocates it zeroed with the other windows.
    unsafe { core::mem::zeroed() }
}

/// The latency class's samples and SafeUtil's AIMD (qos/state.rs `sample` and
/// `control`, with pacer/aimd.rs and pacer/alone.rs).
pub struct Control {
    stats: LatencyWindow,
    control: LatencyWindow,
    alone: AloneP99,
    scratch: Box<[u32; WINDOW]>,
    drain: UnpacedDrain,
    aimd: Aimd,
    now_ns: u64,
}

impl Control {
    /// AIMD on a link of `link_rate` bytes/s, with `samples` latency samples
    /// (at most `WINDOW`) in the control window.
    pub fn new(link_rate: u64, samples: usize, rng: &mut Xorshift) -> Control {
        let ceiling = headroom(link_rate);
        let mut control = Control {
            stats: empty_window(),
            control: empty_window(),
            alone: empty_alone(),
            scratch: Box::new([0; WINDOW]),
            drain: UnpacedDrain::default(),
            aimd: Aimd::new(ceiling, ceiling / 3, 20_000),
            now_ns: 1,
        };
        for _ in 0..samples.min(WINDOW) {
            control.control.add(5_000 + rng.below(20_000));
        }
        control
    }

    /// A latency-class operation ended after `ns` (`QosState::sample`, from a
    /// ticket's drop): its statistics, AIMD's window, and the p99 alone.
    pub fn sample(&mut self, ns: u64) {
        self.now_ns += ns;
        self.stats.add(ns);
        if self.drain.judges(self.now_ns.saturating_sub(ns)) {
            self.control.add(ns);
        }
        self.alone.add(ns, &mut self.scratch);
    }

    /// One AIMD step on the window's p99 (`QosState::control` when a step is
    /// due). The window is kept, unlike the module's, so that each step sees the
    /// same number of samples. Returns SafeUtil.
    pub fn step(&mut self) -> u64 {
        let p99 = self.control.quantile(990, &mut self.scratch);
        self.aimd.update(p99)
    }
}

/// The device whose places the pacer's hold samples read.
const DEVICE: usize = 1;

/// What one pass of a transfer through `Ticket::admit`'s loop came to.
enum Pass {
    /// Its chunk went.
    Admitted,
    /// Its turn, but the tokens come at this time: it sleeps on an hrtimer.
    Tokens(u64),
    /// Another flow's turn, which it wakes before it waits.
    NotItsTurn(usize),
}

/// SW-Pri's pacer with every paced transfer backlogged (qos/admission.rs over
/// pacer/): WF²Q+ among the flows, the token bucket at SafeUtil, the chunk scale,
/// the place hold and the paced window. The clock is the bucket's: a pass that
/// finds no tokens moves time on to when they come, as the hrtimer would.
pub struct Pacer {
    flows: Vec<Flow>,
    /// The paced transfers (`QosState::transfers`).
    transfers: u64,
    waited_from: Vec<Option<u64>>,
    wf: Wf2q,
    bucket: TokenBucket,
    scale: ChunkScale,
    hold: PlaceHold,
    drain: UnpacedDrain,
    chunk: u64,
    now_ns: u64,
    /// The transfer whose chunk went last, which comes back for its next.
    returning: usize,
    /// The device's paced work requests completed, and their places' time held.
    completed_wrs: u64,
    held_ns: u64,
}

impl Pacer {
    /// `flows` bulk transfers (at least one), all backlogged, paced with the chunk
    /// the design uses on a link of `link_rate` bytes/s, at SafeUtil's ceiling.
    pub fn new(flows: usize, link_rate: u64) -> Pacer {
        let chunk = link_chunk(link_rate);
        let mut bucket = TokenBucket::new(headroom(link_rate), 0);
        bucket.set_chunk(chunk, 0);
        let mut pacer = Pacer {
            flows: vec![Flow::new(1); flows.max(1)],
            transfers: flows.max(1) as u64,
            waited_from: vec![None; flows.max(1)],
            wf: Wf2q::default(),
            bucket,
            scale: ChunkScale::new(0),
            hold: PlaceHold::new(),
            drain: UnpacedDrain::default(),
            chunk,
            now_ns: 0,
            returning: 0,
            completed_wrs: 0,
            held_ns: 0,
        };
        for i in 0..pacer.flows.len() {
            pacer.wf.arrive(&mut pacer.flows, i, chunk);
        }
        pacer
    }

    /// One paced chunk admitted, with every pass of the transfers' tasks it takes:
    /// the transfer whose chunk went last comes back for its next one (its WF²Q+
    /// arrival; not its turn, so it wakes the flow picked and waits), and the flow
    /// picked takes its turn, sleeping until the bucket has its tokens. Returns
    /// the flow whose chunk went.
    pub fn admit_chunk(&mut self) -> usize {
        let mut task = self.returning;
        loop {
            match self.pass(task) {
                Pass::Admitted => {
                    self.returning = task;
                    return task;
                }
                Pass::Tokens(at) => self.now_ns = at,
                Pass::NotItsTurn(pick) => task = pick,
            }
        }
    }

    /// One pass of `Ticket::admit`'s loop for the transfer of `flow`, asking for
    /// a chunk, in the module's order (`QosState::control`, mostly a few
    /// comparisons, and the AIMD step it sometimes takes are measured apart).
    fn pass(&mut self, flow: usize) -> Pass {
        let now = self.now_ns;
        let grant = self.chunk;
        self.wf.arrive(&mut self.flows, flow, grant);
        if self.wf.pick() != Some(flow) {
            self.waited_from[flow].get_or_insert(now);
            // `QosState::next_turn`: the flow picked now is woken.
            return Pass::NotItsTurn(self.wf.pick().unwrap_or(flow));
        }
        if let Err(at) = self.bucket.take(grant, now) {
            self.waited_from[flow].get_or_insert(now);
            return Pass::Tokens(at);
        }
        self.wf.served(&mut self.flows, flow, 0);
        let waited = self.waited_from[flow]
            .take()
            .map_or(0, |from| self.drain.token_wait(from, now));
        // The device's totals: every chunk held its place for its time on the wire.
        self.completed_wrs += 1;
        self.held_ns += grant * NS_PER_S / self.bucket.rate().max(1);
        let totals = (self.held_ns, self.completed_wrs);
        self.hold.sample(DEVICE, self.chunk, now, || totals);
        let rate = self.bucket.rate();
        self.scale.admitted(grant, waited, rate);
        if self.scale.judge(rate, now) {
            self.bucket.set_chunk(self.chunk, now);
        }
        // `QosState::inflight_budget`, then `paced_places`: each takes the window.
        let window = paced_window(rate, self.chunk, self.hold.hold_ns(self.chunk));
        let share = transfer_share(window, self.transfers, self.chunk);
        let window = paced_window(rate, self.chunk, self.hold.hold_ns(self.chunk));
        core::hint::black_box((share, paced_places(window, self.chunk)));
        // `QosState::next_turn`.
        core::hint::black_box(self.wf.pick());
        Pass::Admitted
    }
}

/// WF²Q+ alone with every flow backlogged (pacer/wf2q.rs): the selection of the
/// flow that sends next and its virtual times' update.
pub struct Schedule {
    flows: Vec<Flow>,
    wf: Wf2q,
    chunk: u64,
}

impl Schedule {
    /// `flows` flows (at least one) of weights 8, 4 and 1 in turn (the classes'
    /// defaults), with the chunks of a link of `link_rate` bytes/s.
    pub fn new(flows: usize, link_rate: u64) -> Schedule {
        let weights = [8, 4, 1];
        let mut schedule = Schedule {
            flows: (0..flows.max(1))
                .map(|i| Flow::new(weights[i % weights.len()]))
                .collect(),
            wf: Wf2q::default(),
            chunk: link_chunk(link_rate),
        };
        for i in 0..schedule.flows.len() {
            schedule.wf.arrive(&mut schedule.flows, i, schedule.chunk);
        }
        schedule
    }

    /// Picks the flow that sends next and serves its chunk; it stays backlogged.
    pub fn select(&mut self) -> usize {
        let picked = self.wf.pick().unwrap_or(0);
        self.wf.served(&mut self.flows, picked, self.chunk);
        picked
    }
}

/// The token bucket alone at SafeUtil (pacer/bucket.rs), taken from at the rate
/// it fills, as a pacer that keeps up does.
pub struct Bucket {
    bucket: TokenBucket,
    chunk: u64,
    chunk_ns: u64,
    now_ns: u64,
}

impl Bucket {
    /// The bucket of a link of `link_rate` bytes/s (at least 1) at its ceiling,
    /// with that link's chunk.
    pub fn new(link_rate: u64) -> Bucket {
        let rate = headroom(link_rate.max(1));
        let chunk = link_chunk(link_rate);
        let mut bucket = TokenBucket::new(rate, 0);
        bucket.set_chunk(chunk, 0);
        Bucket {
            bucket,
            chunk,
            chunk_ns: (chunk * NS_PER_S).div_ceil(rate.max(1)),
            now_ns: 0,
        }
    }

    /// A chunk's time later, a chunk taken; returns when it went (or when the
    /// tokens would have come, had rounding left them short).
    pub fn take(&mut self) -> u64 {
        self.now_ns += self.chunk_ns;
        match self.bucket.take(self.chunk, self.now_ns) {
            Ok(()) => self.now_ns,
            Err(at) => at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK_100G: u64 = 100_000_000_000 / 8;

    #[test]
    fn the_pacer_shares_chunks_evenly_at_safe_util() {
        let mut pacer = Pacer::new(100, LINK_100G);
        let mut chunks = [0u32; 100];
        for _ in 0..10_000 {
            chunks[pacer.admit_chunk()] += 1;
        }
        assert!(
            chunks.iter().all(|&n| (99..=101).contains(&n)),
            "{chunks:?}"
        );
        let rate = (10_000 * pacer.chunk * NS_PER_S) as f64 / pacer.now_ns as f64;
        let safe_util = headroom(LINK_100G) as f64;
        assert!((rate / safe_util - 1.0).abs() < 0.01, "{rate:.0} B/s");
    }

    #[test]
    fn the_ring_claims_and_releases_lap_after_lap_in_any_order() {
        let mut ring = RpcRing::new();
        let laps = 3 * RING_BYTES / record_len(1, 4096);
        for round in 0..laps / 64 {
            let claimed: Vec<_> = (0..64)
                .filter_map(|slot| ring.claim(4096, 1, slot))
                .collect();
            assert_eq!(claimed.len(), 64);
            if round % 2 == 0 {
                assert!(claimed.iter().rev().all(|record| ring.release(record)));
            } else {
                assert!(claimed.iter().all(|record| ring.release(record)));
            }
        }
        assert!(ring.server.head() > 2 * RING_BYTES);
    }

    #[test]
    fn an_lmr_is_cut_into_pieces_per_chunk() {
        let lmr = Lmr::allocated(1 << 30, 0b110);
        assert_eq!((lmr.size(), lmr.extents()), (1 << 30, 256));
        assert!(lmr.access(PERM_READ, false, 0, 8).is_some());
        assert!(
            lmr.access(PERM_READ, true, 0, 8).is_none(),
            "no write permission"
        );
        assert!(lmr
            .access(PERM_READ | PERM_WRITE, true, (1 << 30) - 4, 8)
            .is_none());
        assert!(lmr.atomic_word(PERM_READ | PERM_WRITE, 4 << 20).is_some());
        assert!(
            lmr.atomic_word(PERM_READ | PERM_WRITE, 4).is_none(),
            "misaligned"
        );
    }

    #[test]
    fn the_worst_classification_finds_no_rule_and_the_default_class() {
        let worst = Classifier::new(64, 16);
        assert_eq!((worst.rules.len(), worst.tgids.len()), (64, 16));
        assert_eq!(worst.classify(1), (crate::uapi::LITE_CLASS_DEFAULT, 0));
    }
}
