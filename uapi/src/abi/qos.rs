// SPDX-License-Identifier: GPL-2.0 OR MIT
//! Priority classes and their enforcement: the classes, the node's QoS settings,
//! operator rules, a process's own class, the engine's statistics and their ioctls.

// ---- Priority classes and their enforcement (SW-Pri, HW-Sep) ----
//
// Every operation of a process (read, write, atomics, RPC, messages) is accounted
// to the process's class. The operator assigns classes by process (inherited by
// its descendants), user or cgroup; a process may lower its own class, never raise
// it. In `LITE_QOS_SW_PRI` mode, while latency-class traffic is active, other
// classes' transfers go in 5 KiB work requests paced by tokens at
// SafeUtil, shared by weight (WF2Q+); SafeUtil follows AIMD on the latency class's
// p99 against Target99; the latency class keeps QPs 1..K-1 to itself and paced
// transfers use QP 0. `LITE_QOS_HW_SEP` reserves QP 0 for the other classes and
// QPs 1..K-1 for the latency class, without pacing. `LITE_QOS_NONE` only accounts.

/// Highest priority: never chunked, never delayed.
pub const LITE_CLASS_LATENCY: u32 = 0;
/// Processes no rule names.
pub const LITE_CLASS_DEFAULT: u32 = 1;
/// Lowest priority.
pub const LITE_CLASS_BULK: u32 = 2;
pub const LITE_NR_CLASSES: u32 = 3;

pub const LITE_QOS_NONE: u32 = 0;
pub const LITE_QOS_HW_SEP: u32 = 1;
/// The default mode (it only acts while latency-class traffic is active).
pub const LITE_QOS_SW_PRI: u32 = 2;

/// Largest weight of a class.
pub const LITE_QOS_MAX_WEIGHT: u32 = 1000;

/// `LiteQos::set` bits: which fields `LITE_IOC_QOS_SET` changes.
pub const LITE_QOS_SET_MODE: u32 = 1;
pub const LITE_QOS_SET_TARGET: u32 = 2;
pub const LITE_QOS_SET_WEIGHTS: u32 = 4;
pub const LITE_QOS_SET_LINK_RATE: u32 = 8;
pub const LITE_QOS_SET_CHUNK: u32 = 16;
pub const LITE_QOS_SET_TARGET_RATIO: u32 = 32;

/// Bounds of `LiteQos::target99_ratio_pct` when set (0 turns it off).
pub const LITE_QOS_TARGET_RATIO_MIN: u32 = 101;
pub const LITE_QOS_TARGET_RATIO_MAX: u32 = 1000;

/// Bounds of `LiteQos::chunk_bytes`: from one 1 KiB MTU to the largest work request
/// of a transfer.
pub const LITE_QOS_CHUNK_MIN: u32 = 1024;
pub const LITE_QOS_CHUNK_MAX: u32 = 32 << 10;
/// `LiteQos::chunk_bytes` sized to the link (the default): four packet times on
/// the wire, or 25 us of it on links where that is more, up to `LITE_QOS_CHUNK_MAX`.
pub const LITE_QOS_CHUNK_AUTO: u32 = 0;

/// The node's enforcement settings (`LITE_IOC_QOS_GET`, `LITE_IOC_QOS_SET`; setting
/// needs CAP_NET_ADMIN).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteQos {
    /// In (set only): `LITE_QOS_SET_*` bits.
    pub set: u32,
    /// `LITE_QOS_*`.
    pub mode: u32,
    /// Target99: the latency class's p99 that SafeUtil steers to (ns, > 0), unless
    /// `target99_ratio_pct` is set and the class's p99 alone is known.
    pub target99_ns: u64,
    /// Weights of the classes (1 to `LITE_QOS_MAX_WEIGHT`); the latency class's
    /// weight sets the other classes' floor: their share of the link.
    pub weights: [u32; 3],
    /// Bytes per work request of paced transfers (`LITE_QOS_CHUNK_MIN` to
    /// `LITE_QOS_CHUNK_MAX`, or `LITE_QOS_CHUNK_AUTO`): what a latency-class
    /// operation may wait behind.
    pub chunk_bytes: u32,
    /// The link's rate in bytes/s (SafeUtil stays 1/16 below it); 0: found (the
    /// best rate at which this node's transfers were acknowledged over 2 s).
    pub link_rate: u64,
    /// Target99 relative to the latency class's p99 alone, in percent
    /// (`LITE_QOS_TARGET_RATIO_MIN` to `..._MAX`, 150 by default; 0: off): the p99 of
    /// the class's recent operations that ran while no other class's transfer of
    /// this node was in progress, times this. `target99_ns` applies until it is known.
    pub target99_ratio_pct: u32,
    /// 0.
    pub reserved: u32,
}

/// `LiteClassRule::kind`: `id` is a process id (the rule covers its descendants).
pub const LITE_RULE_PID: u32 = 1;
/// `id` is a user id.
pub const LITE_RULE_UID: u32 = 2;
/// `id` is a cgroup (v2) id: the inode number of its directory.
pub const LITE_RULE_CGROUP: u32 = 3;
/// Rules a node keeps at most (ENOSPC beyond).
pub const LITE_MAX_RULES: u32 = 64;

/// An operator rule (`LITE_IOC_CLASS_RULE_ADD`, `..._DEL`; CAP_NET_ADMIN). Adding
/// a rule for a kind and id that has one replaces its class; deleting an unknown
/// rule is ENOENT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassRule {
    /// `LITE_RULE_*`.
    pub kind: u32,
    /// `LITE_CLASS_*` (ignored by delete).
    pub class: u32,
    pub id: u64,
}

/// List the rules (`LITE_IOC_CLASS_RULES`): fills up to `capacity` at `entries`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassRules {
    /// User pointer to `capacity` `LiteClassRule`.
    pub entries: u64,
    pub capacity: u32,
    /// Out: number of rules.
    pub count: u32,
}

/// `LiteClassSelf::class` to only ask for the caller's class.
pub const LITE_CLASS_QUERY: u32 = u32::MAX;
/// `LiteClassSelf::source`: no rule applies.
pub const LITE_CLASS_FROM_DEFAULT: u32 = 0;
pub const LITE_CLASS_FROM_PID: u32 = 1;
pub const LITE_CLASS_FROM_CGROUP: u32 = 2;
pub const LITE_CLASS_FROM_UID: u32 = 3;
/// The process (or an ancestor) lowered its own class.
pub const LITE_CLASS_FROM_SELF: u32 = 4;

/// The calling process's class (`LITE_IOC_CLASS_SELF`): with `class` other than
/// `LITE_CLASS_QUERY`, the process first lowers itself (and its descendants) to
/// it, for as long as its file of /dev/lite is open. EPERM: that would raise it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassSelf {
    /// In: `LITE_CLASS_*` or `LITE_CLASS_QUERY`; out: the effective class.
    pub class: u32,
    /// Out: `LITE_CLASS_FROM_*`.
    pub source: u32,
}

/// One class's traffic since the module loaded, and its recent latency.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassStat {
    pub bytes: u64,
    pub ops: u64,
    /// Median and 99th percentile of the class's last 1024 operations' latencies
    /// (issue to completion, ns; 0 without samples).
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Transfers of the class in progress now.
    pub active: u32,
    /// Of them, those waiting for tokens or their turn.
    pub queued: u32,
    /// Chunks delayed by pacing, and the time they waited (ns).
    pub paced_chunks: u64,
    pub paced_ns: u64,
}

/// The enforcement engine's state (`LITE_IOC_QOS_STAT`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteQosStat {
    pub mode: u32,
    /// 1 while latency-class traffic is active (pacing applies).
    pub latency_active: u32,
    /// Rate the paced classes may use now (bytes/s); 0: unlimited.
    pub safe_util: u64,
    /// The link rate SafeUtil is bounded by (bytes/s; set, or else found).
    pub link_rate: u64,
    /// The link rate this node found (bytes/s; 0: none yet), whether set or not.
    pub found_rate: u64,
    /// Bytes per paced work request now.
    pub chunk_bytes: u64,
    /// Bytes of tokens banked now.
    pub tokens: u64,
    /// Latency-class reference probes sent, and the last one's round trip (ns).
    pub probes: u64,
    pub last_probe_ns: u64,
    /// AIMD steps that decreased and that increased SafeUtil.
    pub decreases: u64,
    pub increases: u64,
    /// The Target99 AIMD steers to now (ns), and the latency class's p99 alone it
    /// comes from with a relative target (ns; 0: not known yet).
    pub target99_ns: u64,
    pub alone_p99_ns: u64,
    /// The latency class's operations counted alone since the module loaded.
    pub alone_samples: u64,
    pub classes: [LiteClassStat; 3],
    /// Where the latency class's LT_writes (`[0]`) and LT_reads (`[1]`) spent their
    /// time in this kernel since it loaded.
    pub latency_phases: [LitePhases; 2],
    /// Paced work requests in flight from this node, and how many it allows: the
    /// node's paced window in chunks, whichever transfers they belong to.
    pub paced_in_flight: u32,
    pub paced_places: u32,
    /// Whether pacing delivers the SafeUtil it is given, and what holds it back.
    pub pacing: LitePacing,
}

/// SW-Pri's pacing since the module loaded: differences of two snapshots give the
/// rates and means between them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePacing {
    /// Bytes SafeUtil offered the paced classes while pacing (its rate over time).
    pub offered_bytes: u64,
    /// Bytes of paced work requests let through.
    pub paced_bytes: u64,
    /// Time paced work requests waited for tokens or their turn, summed (ns).
    pub token_wait_ns: u64,
    /// Time paced work requests waited for a place among the node's paced work
    /// requests in flight, summed (ns).
    pub place_wait_ns: u64,
    /// Places held, summed over time (ns): its growth over an interval is the mean
    /// number of places in use times the interval.
    pub place_held_ns: u64,
    /// Places given back: paced work requests completed (or never posted).
    pub place_wrs: u64,
}

/// The time one-sided operations spent in each phase, summed (ns): differences of
/// two snapshots give the means over the time between them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePhases {
    /// Operations summed.
    pub ops: u64,
    /// From the start of the transfer until its last work request was posted:
    /// credits, admission and pacing, locks.
    pub before_post_ns: u64,
    /// From then until its last completion ran: the NICs, the network and the peer.
    pub in_network_ns: u64,
    /// From then until the caller ran again.
    pub wakeup_ns: u64,
}

/// `_IOR('L', 33, LiteQos)`
pub const LITE_IOC_QOS_GET: u32 = 0x8030_4C21;
/// `_IOW('L', 34, LiteQos)`
pub const LITE_IOC_QOS_SET: u32 = 0x4030_4C22;
/// `_IOW('L', 35, LiteClassRule)`
pub const LITE_IOC_CLASS_RULE_ADD: u32 = 0x4010_4C23;
/// `_IOW('L', 36, LiteClassRule)`
pub const LITE_IOC_CLASS_RULE_DEL: u32 = 0x4010_4C24;
/// `_IOWR('L', 37, LiteClassRules)`
pub const LITE_IOC_CLASS_RULES: u32 = 0xC010_4C25;
/// `_IOWR('L', 38, LiteClassSelf)`
pub const LITE_IOC_CLASS_SELF: u32 = 0xC008_4C26;
/// `_IOR('L', 39, LiteQosStat)`
pub const LITE_IOC_QOS_STAT: u32 = 0x8188_4C27;
