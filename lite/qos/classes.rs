// SPDX-License-Identifier: GPL-2.0
//! Which priority class a process's operations belong to, as pure functions.
//!
//! The operator sets rules by process, user or cgroup (`lite-admin class set`). A
//! process rule also covers the process's descendants, so children inherit it; the
//! nearest matching ancestor wins. Without a process rule, a cgroup rule applies,
//! then a user rule, then the default class.
//!
//! A process may lower its own class (and so its descendants'), never raise it: its
//! effective class is the lower of the operator's class and its own choice.
//! Classes are ordered by their number: 0 (latency) is the highest priority.

use crate::uapi::{
    LITE_CLASS_DEFAULT, LITE_CLASS_LATENCY, LITE_NR_CLASSES, LITE_QOS_HW_SEP, LITE_QOS_SW_PRI,
    LITE_RULE_CGROUP, LITE_RULE_PID, LITE_RULE_UID,
};

/// Rules a node keeps at most.
pub(crate) const MAX_RULES: usize = 64;
/// Processes that lowered their own class, at most.
pub(crate) const MAX_SELF_CHOICES: usize = 256;
/// Ancestors (the process included) looked at for process rules.
pub(crate) const MAX_LINEAGE: usize = 16;

/// One operator rule: processes whose pid (or an ancestor's), uid or cgroup id is
/// `id` belong to `class`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) kind: u32,
    pub(crate) id: u64,
    pub(crate) class: u32,
}

/// What a task is, as far as rules go.
pub(crate) struct Lineage<'a> {
    /// The task's process id first, then its parent's, and so on up to init.
    pub(crate) tgids: &'a [u32],
    pub(crate) uid: u32,
    pub(crate) cgroup: u64,
}

/// Where a task's class came from (`LITE_CLASS_FROM_*` in the ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Default,
    Pid,
    Cgroup,
    Uid,
    /// The process (or an ancestor) lowered its own class.
    Itself,
}

/// A rule is well formed: a known kind and class, a process id that fits a pid.
pub(crate) fn rule_valid(rule: &Rule) -> bool {
    let id_ok = match rule.kind {
        LITE_RULE_PID => rule.id > 0 && rule.id <= u64::from(i32::MAX as u32),
        LITE_RULE_UID => rule.id <= u64::from(u32::MAX),
        LITE_RULE_CGROUP => rule.id > 0,
        _ => false,
    };
    id_ok && rule.class < LITE_NR_CLASSES
}

/// The operator's class for `who`, and which kind of rule decided it.
pub(crate) fn operator_class(rules: &[Rule], who: &Lineage<'_>) -> (u32, Source) {
    for &tgid in who.tgids {
        if let Some(r) = rules
            .iter()
            .find(|r| r.kind == LITE_RULE_PID && r.id == u64::from(tgid))
        {
            return (r.class, Source::Pid);
        }
    }
    if let Some(r) = rules
        .iter()
        .find(|r| r.kind == LITE_RULE_CGROUP && r.id == who.cgroup)
    {
        return (r.class, Source::Cgroup);
    }
    if let Some(r) = rules
        .iter()
        .find(|r| r.kind == LITE_RULE_UID && r.id == u64::from(who.uid))
    {
        return (r.class, Source::Uid);
    }
    (LITE_CLASS_DEFAULT, Source::Default)
}

/// The lowest class `who` or an ancestor chose for itself (`choices`: pid, class).
pub(crate) fn own_choice(
    choices: impl IntoIterator<Item = (u32, u32)>,
    who: &Lineage<'_>,
) -> Option<u32> {
    choices
        .into_iter()
        .filter(|(pid, _)| who.tgids.contains(pid))
        .map(|(_, class)| class)
        .max()
}

/// The class `who`'s operations are accounted to, and where it came from.
pub(crate) fn effective_class(
    rules: &[Rule],
    choices: impl IntoIterator<Item = (u32, u32)>,
    who: &Lineage<'_>,
) -> (u32, Source) {
    let (class, source) = operator_class(rules, who);
    match own_choice(choices, who) {
        Some(own) if own > class => (own, Source::Itself),
        _ => (class, source),
    }
}

/// A process now in class `current` may choose `wanted` for itself only if that is
/// not a higher priority (a lower number).
pub(crate) fn may_choose(current: u32, wanted: u32) -> bool {
    wanted < LITE_NR_CLASSES && wanted >= current
}

/// The QP (of `nr_qps`) an operation of `class` uses in `mode`; `spread` rotates.
/// The latency class keeps QPs 1.. to itself in HW-Sep, and in SW-Pri too: behind
/// paced chunks in one send queue it would wait however well they are paced. Paced
/// transfers share QP 0; with no latency traffic, everything spreads over all QPs.
pub(crate) fn qp_for(mode: u32, class: u32, paced: bool, nr_qps: usize, spread: usize) -> usize {
    let separate = mode == LITE_QOS_HW_SEP || mode == LITE_QOS_SW_PRI;
    match (separate, nr_qps) {
        (true, 2..) if class == LITE_CLASS_LATENCY => 1 + spread % (nr_qps - 1),
        (true, 2..) if mode == LITE_QOS_HW_SEP || paced => 0,
        _ => spread % nr_qps.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::{LITE_CLASS_BULK, LITE_QOS_NONE};

    fn who<'a>(tgids: &'a [u32], uid: u32, cgroup: u64) -> Lineage<'a> {
        Lineage { tgids, uid, cgroup }
    }

    #[test]
    fn nearest_process_rule_wins_then_cgroup_then_user() {
        let rules = [
            Rule {
                kind: LITE_RULE_UID,
                id: 1000,
                class: LITE_CLASS_BULK,
            },
            Rule {
                kind: LITE_RULE_CGROUP,
                id: 77,
                class: LITE_CLASS_LATENCY,
            },
            Rule {
                kind: LITE_RULE_PID,
                id: 10,
                class: LITE_CLASS_BULK,
            },
            Rule {
                kind: LITE_RULE_PID,
                id: 20,
                class: LITE_CLASS_LATENCY,
            },
        ];
        // 30 is a child of 20, a child of 10: the nearest ancestor's rule counts.
        assert_eq!(
            operator_class(&rules, &who(&[30, 20, 10, 1], 1000, 77)),
            (LITE_CLASS_LATENCY, Source::Pid)
        );
        assert_eq!(
            operator_class(&rules, &who(&[11, 10, 1], 0, 77)),
            (LITE_CLASS_BULK, Source::Pid)
        );
        assert_eq!(
            operator_class(&rules, &who(&[5, 1], 1000, 77)),
            (LITE_CLASS_LATENCY, Source::Cgroup)
        );
        assert_eq!(
            operator_class(&rules, &who(&[5, 1], 1000, 1)),
            (LITE_CLASS_BULK, Source::Uid)
        );
        assert_eq!(
            operator_class(&rules, &who(&[5, 1], 0, 1)),
            (LITE_CLASS_DEFAULT, Source::Default)
        );
    }

    #[test]
    fn a_process_can_lower_but_never_raise_its_class() {
        assert!(may_choose(LITE_CLASS_LATENCY, LITE_CLASS_BULK));
        assert!(may_choose(LITE_CLASS_DEFAULT, LITE_CLASS_DEFAULT));
        assert!(!may_choose(LITE_CLASS_DEFAULT, LITE_CLASS_LATENCY));
        assert!(!may_choose(LITE_CLASS_BULK, LITE_CLASS_DEFAULT));
        assert!(!may_choose(LITE_CLASS_DEFAULT, LITE_NR_CLASSES));
        let rules = [Rule {
            kind: LITE_RULE_PID,
            id: 10,
            class: LITE_CLASS_LATENCY,
        }];
        // Process 10 lowered itself to bulk: it and its children are bulk.
        let choices = [(10, LITE_CLASS_BULK)];
        assert_eq!(
            effective_class(&rules, choices, &who(&[10, 1], 0, 0)),
            (LITE_CLASS_BULK, Source::Itself)
        );
        assert_eq!(
            effective_class(&rules, choices, &who(&[12, 10, 1], 0, 0)),
            (LITE_CLASS_BULK, Source::Itself)
        );
        // A choice above the operator's class changes nothing.
        let rules = [Rule {
            kind: LITE_RULE_UID,
            id: 0,
            class: LITE_CLASS_BULK,
        }];
        let choices = [(10, LITE_CLASS_LATENCY)];
        assert_eq!(
            effective_class(&rules, choices, &who(&[10, 1], 0, 0)),
            (LITE_CLASS_BULK, Source::Uid)
        );
    }

    #[test]
    fn malformed_rules_are_refused() {
        assert!(rule_valid(&Rule {
            kind: LITE_RULE_PID,
            id: 42,
            class: LITE_CLASS_BULK
        }));
        assert!(!rule_valid(&Rule {
            kind: LITE_RULE_PID,
            id: 0,
            class: LITE_CLASS_BULK
        }));
        assert!(!rule_valid(&Rule {
            kind: LITE_RULE_PID,
            id: 1 << 40,
            class: LITE_CLASS_BULK
        }));
        assert!(!rule_valid(&Rule {
            kind: LITE_RULE_UID,
            id: 1 << 40,
            class: LITE_CLASS_BULK
        }));
        assert!(!rule_valid(&Rule {
            kind: 9,
            id: 1,
            class: LITE_CLASS_BULK
        }));
        assert!(!rule_valid(&Rule {
            kind: LITE_RULE_UID,
            id: 0,
            class: LITE_NR_CLASSES
        }));
    }

    #[test]
    fn the_latency_class_keeps_its_qps_to_itself_when_classes_are_enforced() {
        let (lat, bulk) = (LITE_CLASS_LATENCY, LITE_CLASS_BULK);
        for spread in 0..8 {
            for mode in [LITE_QOS_HW_SEP, LITE_QOS_SW_PRI] {
                assert!((1..4).contains(&qp_for(mode, lat, false, 4, spread)));
            }
            assert_eq!(qp_for(LITE_QOS_HW_SEP, bulk, false, 4, spread), 0);
            assert_eq!(qp_for(LITE_QOS_SW_PRI, bulk, true, 4, spread), 0);
            // Unpaced (no latency traffic) and in `none` mode, every class spreads.
            assert_eq!(qp_for(LITE_QOS_SW_PRI, bulk, false, 4, spread), spread % 4);
            assert_eq!(qp_for(LITE_QOS_NONE, lat, false, 4, spread), spread % 4);
            // One QP: nothing to separate.
            assert_eq!(qp_for(LITE_QOS_SW_PRI, lat, false, 1, spread), 0);
            assert_eq!(qp_for(LITE_QOS_HW_SEP, bulk, false, 1, spread), 0);
        }
    }
}
