//! Priority classes: which class a process's operations count to, the operator's
//! rules, the enforcement mode (none, HW-Sep, SW-Pri) and its live statistics.

use crate::{Error, Lite, Result};
use lite_uapi::*;
use nix::errno::Errno;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A priority class. `Latency` is the highest priority, `Bulk` the lowest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Latency,
    Default,
    Bulk,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Latency, Class::Default, Class::Bulk];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Latency => "latency",
            Class::Default => "default",
            Class::Bulk => "bulk",
        }
    }

    pub fn to_abi(self) -> u32 {
        match self {
            Class::Latency => LITE_CLASS_LATENCY,
            Class::Default => LITE_CLASS_DEFAULT,
            Class::Bulk => LITE_CLASS_BULK,
        }
    }

    pub fn from_abi(class: u32) -> Option<Class> {
        match class {
            LITE_CLASS_LATENCY => Some(Class::Latency),
            LITE_CLASS_DEFAULT => Some(Class::Default),
            LITE_CLASS_BULK => Some(Class::Bulk),
            _ => None,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Class {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Class, String> {
        Class::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown class {s:?}: use latency, default or bulk"))
    }
}

/// How the node enforces classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosMode {
    /// Classes are only accounted.
    None,
    /// QP 0 for the other classes, QPs 1..K-1 for the latency class (K >= 2).
    HwSep,
    /// Chunking and token pacing of the other classes while latency traffic is active.
    SwPri,
}

impl QosMode {
    pub fn as_str(self) -> &'static str {
        match self {
            QosMode::None => "none",
            QosMode::HwSep => "hw-sep",
            QosMode::SwPri => "sw-pri",
        }
    }

    fn to_abi(self) -> u32 {
        match self {
            QosMode::None => LITE_QOS_NONE,
            QosMode::HwSep => LITE_QOS_HW_SEP,
            QosMode::SwPri => LITE_QOS_SW_PRI,
        }
    }

    fn from_abi(mode: u32) -> QosMode {
        match mode {
            LITE_QOS_NONE => QosMode::None,
            LITE_QOS_HW_SEP => QosMode::HwSep,
            _ => QosMode::SwPri,
        }
    }
}

impl FromStr for QosMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<QosMode, String> {
        [QosMode::None, QosMode::HwSep, QosMode::SwPri]
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown mode {s:?}: use none, hw-sep or sw-pri"))
    }
}

/// The node's enforcement settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QosSettings {
    pub mode: QosMode,
    /// The latency class's p99 that SW-Pri steers to, unless `target99_ratio_pct`
    /// is set and the class's p99 alone is known.
    pub target99: Duration,
    /// Target99 as a percentage of the latency class's p99 alone (its recent
    /// operations while none of the node's other classes' transfers was in
    /// progress; 150 by default); `None`: off.
    pub target99_ratio_pct: Option<u32>,
    /// Weights of latency, default and bulk.
    pub weights: [u32; 3],
    /// The link rate in bytes/s; `None`: found by the node.
    pub link_rate: Option<u64>,
    /// Bytes per work request of paced transfers: what a latency-class operation
    /// may wait behind; `None`: sized to the link.
    pub chunk_bytes: Option<u32>,
}

/// Changes to the settings; `None` fields stay as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QosChange {
    pub mode: Option<QosMode>,
    pub target99: Option<Duration>,
    /// `LITE_QOS_TARGET_RATIO_MIN` to `..._MAX` percent (101 to 1000), or `Some(0)`:
    /// off (`target99` applies).
    pub target99_ratio_pct: Option<u32>,
    pub weights: Option<[u32; 3]>,
    /// `Some(0)`: use the link rate the node finds.
    pub link_rate: Option<u64>,
    /// `LITE_QOS_CHUNK_MIN` to `LITE_QOS_CHUNK_MAX` bytes (1 to 32 KiB), or
    /// `LITE_QOS_CHUNK_AUTO` (0): sized to the link.
    pub chunk_bytes: Option<u32>,
}

/// Whom a rule covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleTarget {
    /// A process and its descendants.
    Pid(u32),
    Uid(u32),
    /// A cgroup (v2) by id: the inode number of its directory.
    Cgroup(u64),
}

impl fmt::Display for RuleTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleTarget::Pid(pid) => write!(f, "pid {pid}"),
            RuleTarget::Uid(uid) => write!(f, "uid {uid}"),
            RuleTarget::Cgroup(id) => write!(f, "cgroup {id}"),
        }
    }
}

impl RuleTarget {
    fn to_abi(self) -> (u32, u64) {
        match self {
            RuleTarget::Pid(pid) => (LITE_RULE_PID, u64::from(pid)),
            RuleTarget::Uid(uid) => (LITE_RULE_UID, u64::from(uid)),
            RuleTarget::Cgroup(id) => (LITE_RULE_CGROUP, id),
        }
    }

    fn from_abi(kind: u32, id: u64) -> Option<RuleTarget> {
        match kind {
            LITE_RULE_PID => u32::try_from(id).ok().map(RuleTarget::Pid),
            LITE_RULE_UID => u32::try_from(id).ok().map(RuleTarget::Uid),
            LITE_RULE_CGROUP => Some(RuleTarget::Cgroup(id)),
            _ => None,
        }
    }
}

/// An operator rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassRule {
    pub target: RuleTarget,
    pub class: Class,
}

/// Where a process's class comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassSource {
    Default,
    Pid,
    Cgroup,
    Uid,
    /// The process or an ancestor lowered its own class.
    Itself,
}

impl ClassSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ClassSource::Default => "no rule",
            ClassSource::Pid => "a process rule",
            ClassSource::Cgroup => "a cgroup rule",
            ClassSource::Uid => "a user rule",
            ClassSource::Itself => "the process's own choice",
        }
    }

    fn from_abi(source: u32) -> ClassSource {
        match source {
            LITE_CLASS_FROM_PID => ClassSource::Pid,
            LITE_CLASS_FROM_CGROUP => ClassSource::Cgroup,
            LITE_CLASS_FROM_UID => ClassSource::Uid,
            LITE_CLASS_FROM_SELF => ClassSource::Itself,
            _ => ClassSource::Default,
        }
    }
}

/// One class's traffic and recent latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStat {
    pub bytes: u64,
    pub ops: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub active: u32,
    pub queued: u32,
    pub paced_chunks: u64,
    pub paced: Duration,
}

/// The enforcement engine's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QosStat {
    pub mode: QosMode,
    pub latency_active: bool,
    /// Bytes/s the paced classes may use now; `None`: unlimited.
    pub safe_util: Option<u64>,
    /// The link rate SafeUtil is bounded by: set, or else found.
    pub link_rate: u64,
    /// The link rate the node found (whether set or not); `None`: none yet.
    pub found_rate: Option<u64>,
    /// Bytes per paced work request now.
    pub chunk_bytes: u64,
    pub tokens: u64,
    pub probes: u64,
    pub last_probe: Duration,
    pub decreases: u64,
    pub increases: u64,
    /// The Target99 AIMD steers to now.
    pub target99: Duration,
    /// The latency class's p99 alone, which a relative Target99 multiplies;
    /// `None`: not known yet.
    pub alone_p99: Option<Duration>,
    /// The latency class's operations counted alone since the module loaded.
    pub alone_samples: u64,
    /// Latency, default, bulk.
    pub classes: [ClassStat; 3],
    /// Where the latency class's LT_writes (`[0]`) and LT_reads (`[1]`) spent
    /// their time in the kernel, summed since the module loaded.
    pub latency_phases: [Phases; 2],
    /// Paced work requests in flight from the node, and the most it allows.
    pub paced_in_flight: u32,
    pub paced_places: u32,
    /// Pacing's totals since the module loaded.
    pub pacing: Pacing,
}

/// SW-Pri's pacing, summed since the module loaded: the difference of two
/// snapshots says whether pacing delivered the SafeUtil it was given between
/// them, and what held it back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacing {
    /// Bytes SafeUtil offered the paced classes (its rate over time).
    pub offered_bytes: u64,
    /// Bytes of paced work requests let through.
    pub paced_bytes: u64,
    /// Time paced work requests waited for tokens or their turn, summed.
    pub token_wait: Duration,
    /// Time paced work requests waited for a place among the node's paced work
    /// requests in flight, summed.
    pub place_wait: Duration,
    /// Places held over time: its growth over an interval, divided by the
    /// interval, is the mean number of places in use.
    pub place_held: Duration,
    /// Places given back: paced work requests completed (or never posted).
    pub place_wrs: u64,
}

/// Time one-sided operations spent in each phase in the kernel, summed: the
/// difference of two snapshots gives the means between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    pub ops: u64,
    /// Until the last work request was posted: credits, admission, pacing, locks.
    pub before_post: Duration,
    /// From then until the last completion ran: the NICs, the network, the peer.
    pub in_network: Duration,
    /// From then until the caller ran again.
    pub wakeup: Duration,
}

impl Lite {
    /// The node's enforcement settings.
    pub fn qos(&self) -> Result<QosSettings> {
        let mut arg = LiteQos::default();
        self.ioctl("read the QoS settings", None, LITE_IOC_QOS_GET, &mut arg)?;
        Ok(QosSettings {
            mode: QosMode::from_abi(arg.mode),
            target99: Duration::from_nanos(arg.target99_ns),
            target99_ratio_pct: (arg.target99_ratio_pct != 0).then_some(arg.target99_ratio_pct),
            weights: arg.weights,
            link_rate: (arg.link_rate != 0).then_some(arg.link_rate),
            chunk_bytes: (arg.chunk_bytes != LITE_QOS_CHUNK_AUTO).then_some(arg.chunk_bytes),
        })
    }

    /// Changes the node's enforcement settings (CAP_NET_ADMIN).
    pub fn set_qos(&self, change: &QosChange) -> Result<()> {
        let mut arg = LiteQos::default();
        if let Some(mode) = change.mode {
            arg.set |= LITE_QOS_SET_MODE;
            arg.mode = mode.to_abi();
        }
        if let Some(target) = change.target99 {
            let ns = u64::try_from(target.as_nanos()).unwrap_or(u64::MAX);
            if ns == 0 || ns > 10_000_000_000 {
                return Err(Error::InvalidArgument(format!(
                    "Target99 must be above 0 and at most 10 s, not {target:?}"
                )));
            }
            arg.set |= LITE_QOS_SET_TARGET;
            arg.target99_ns = ns;
        }
        if let Some(pct) = change.target99_ratio_pct {
            if pct != 0 && !(LITE_QOS_TARGET_RATIO_MIN..=LITE_QOS_TARGET_RATIO_MAX).contains(&pct) {
                return Err(Error::InvalidArgument(format!(
                    "the relative Target99 must be {LITE_QOS_TARGET_RATIO_MIN} to {LITE_QOS_TARGET_RATIO_MAX} % of the p99 alone, or 0 (off), not {pct} %"
                )));
            }
            arg.set |= LITE_QOS_SET_TARGET_RATIO;
            arg.target99_ratio_pct = pct;
        }
        if let Some(weights) = change.weights {
            if weights.iter().any(|w| !(1..=LITE_QOS_MAX_WEIGHT).contains(w)) {
                return Err(Error::InvalidArgument(format!(
                    "weights must be 1..={LITE_QOS_MAX_WEIGHT}, not {weights:?}"
                )));
            }
            arg.set |= LITE_QOS_SET_WEIGHTS;
            arg.weights = weights;
        }
        if let Some(rate) = change.link_rate {
            arg.set |= LITE_QOS_SET_LINK_RATE;
            arg.link_rate = rate;
        }
        if let Some(bytes) = change.chunk_bytes {
            if bytes != LITE_QOS_CHUNK_AUTO && !(LITE_QOS_CHUNK_MIN..=LITE_QOS_CHUNK_MAX).contains(&bytes) {
                return Err(Error::InvalidArgument(format!(
                    "the chunk size must be {LITE_QOS_CHUNK_MIN} to {LITE_QOS_CHUNK_MAX} bytes, or 0 (sized to the link), not {bytes}"
                )));
            }
            arg.set |= LITE_QOS_SET_CHUNK;
            arg.chunk_bytes = bytes;
        }
        self.ioctl("change the QoS settings", None, LITE_IOC_QOS_SET, &mut arg)
    }

    /// Adds (or changes the class of) an operator rule (CAP_NET_ADMIN).
    pub fn add_class_rule(&self, rule: ClassRule) -> Result<()> {
        let (kind, id) = rule.target.to_abi();
        let mut arg = LiteClassRule { kind, class: rule.class.to_abi(), id };
        self.sys_ioctl(LITE_IOC_CLASS_RULE_ADD, &mut arg).map_err(|errno| match errno {
            Errno::ENOSPC => Error::InvalidArgument(format!("the node keeps at most {LITE_MAX_RULES} class rules")),
            Errno::EINVAL => Error::InvalidArgument(format!("invalid rule for {}", rule.target)),
            _ => Error::from_ioctl("add a class rule", None, errno),
        })
    }

    /// Removes the operator rule for `target` (CAP_NET_ADMIN).
    pub fn remove_class_rule(&self, target: RuleTarget) -> Result<()> {
        let (kind, id) = target.to_abi();
        let mut arg = LiteClassRule { kind, class: 0, id };
        self.sys_ioctl(LITE_IOC_CLASS_RULE_DEL, &mut arg).map_err(|errno| match errno {
            Errno::ENOENT => Error::InvalidArgument(format!("no class rule for {target}")),
            _ => Error::from_ioctl("remove a class rule", None, errno),
        })
    }

    /// The operator's rules, oldest first.
    pub fn class_rules(&self) -> Result<Vec<ClassRule>> {
        let mut entries = vec![LiteClassRule::default(); LITE_MAX_RULES as usize];
        let mut list =
            LiteClassRules { entries: entries.as_mut_ptr() as u64, capacity: entries.len() as u32, count: 0 };
        self.ioctl("list class rules", None, LITE_IOC_CLASS_RULES, &mut list)?;
        entries.truncate((list.count as usize).min(entries.len()));
        Ok(entries
            .iter()
            .filter_map(|r| {
                Some(ClassRule { target: RuleTarget::from_abi(r.kind, r.id)?, class: Class::from_abi(r.class)? })
            })
            .collect())
    }

    /// The class this process's operations count to, and why.
    pub fn my_class(&self) -> Result<(Class, ClassSource)> {
        self.class_self(LITE_CLASS_QUERY)
    }

    /// Lowers this process (and the children it starts) to `class` while this
    /// handle is open. A higher class than the current one is refused.
    pub fn lower_my_class(&self, class: Class) -> Result<(Class, ClassSource)> {
        self.class_self(class.to_abi()).map_err(|e| match e {
            Error::PermissionDenied { .. } => Error::ClassRaise {
                current: self.my_class().map_or("unknown", |(c, _)| c.as_str()),
                wanted: class.as_str(),
            },
            e => e,
        })
    }

    fn class_self(&self, class: u32) -> Result<(Class, ClassSource)> {
        let mut arg = LiteClassSelf { class, source: 0 };
        self.ioctl("choose a class", None, LITE_IOC_CLASS_SELF, &mut arg)?;
        let class = Class::from_abi(arg.class).ok_or(Error::Sys { op: "choose a class", errno: Errno::EPROTO })?;
        Ok((class, ClassSource::from_abi(arg.source)))
    }

    /// The enforcement engine's counters and state.
    pub fn qos_stat(&self) -> Result<QosStat> {
        let mut arg = LiteQosStat::default();
        self.ioctl("read QoS statistics", None, LITE_IOC_QOS_STAT, &mut arg)?;
        let class = |c: &LiteClassStat| ClassStat {
            bytes: c.bytes,
            ops: c.ops,
            p50: Duration::from_nanos(c.p50_ns),
            p99: Duration::from_nanos(c.p99_ns),
            active: c.active,
            queued: c.queued,
            paced_chunks: c.paced_chunks,
            paced: Duration::from_nanos(c.paced_ns),
        };
        Ok(QosStat {
            mode: QosMode::from_abi(arg.mode),
            latency_active: arg.latency_active != 0,
            safe_util: (arg.safe_util != 0).then_some(arg.safe_util),
            link_rate: arg.link_rate,
            found_rate: (arg.found_rate != 0).then_some(arg.found_rate),
            chunk_bytes: arg.chunk_bytes,
            tokens: arg.tokens,
            probes: arg.probes,
            last_probe: Duration::from_nanos(arg.last_probe_ns),
            decreases: arg.decreases,
            increases: arg.increases,
            target99: Duration::from_nanos(arg.target99_ns),
            alone_p99: (arg.alone_p99_ns != 0).then(|| Duration::from_nanos(arg.alone_p99_ns)),
            alone_samples: arg.alone_samples,
            classes: [class(&arg.classes[0]), class(&arg.classes[1]), class(&arg.classes[2])],
            latency_phases: arg.latency_phases.map(|p| Phases {
                ops: p.ops,
                before_post: Duration::from_nanos(p.before_post_ns),
                in_network: Duration::from_nanos(p.in_network_ns),
                wakeup: Duration::from_nanos(p.wakeup_ns),
            }),
            paced_in_flight: arg.paced_in_flight,
            paced_places: arg.paced_places,
            pacing: Pacing {
                offered_bytes: arg.pacing.offered_bytes,
                paced_bytes: arg.pacing.paced_bytes,
                token_wait: Duration::from_nanos(arg.pacing.token_wait_ns),
                place_wait: Duration::from_nanos(arg.pacing.place_wait_ns),
                place_held: Duration::from_nanos(arg.pacing.place_held_ns),
                place_wrs: arg.pacing.place_wrs,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Class::ALL {
            assert_eq!(c.as_str().parse::<Class>(), Ok(c));
            assert_eq!(Class::from_abi(c.to_abi()), Some(c));
        }
        assert!("urgent".parse::<Class>().is_err());
        for m in [QosMode::None, QosMode::HwSep, QosMode::SwPri] {
            assert_eq!(m.as_str().parse::<QosMode>(), Ok(m));
            assert_eq!(QosMode::from_abi(m.to_abi()), m);
        }
        for t in [RuleTarget::Pid(7), RuleTarget::Uid(0), RuleTarget::Cgroup(1 << 40)] {
            let (kind, id) = t.to_abi();
            assert_eq!(RuleTarget::from_abi(kind, id), Some(t));
        }
        assert_eq!(RuleTarget::from_abi(LITE_RULE_PID, 1 << 40), None);
    }

    #[test]
    fn classes_order_by_priority() {
        assert!(Class::Latency < Class::Default && Class::Default < Class::Bulk);
    }
}
