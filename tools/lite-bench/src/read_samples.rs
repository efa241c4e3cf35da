//! The kernel's phases of LT_reads taken one read at a time (`lat --per-read`):
//! each phase's median over the reads, where the node's sums give only means.

use lite::ReadPhases;
use lite_stats::Summary;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The phases' names in the order of `phase_spans`.
pub(crate) const PHASES: [&str; 6] = ["pin_ns", "prepare_ns", "post_ns", "wire_ns", "notice_ns", "finish_ns"];

/// The time (ns) the reads between two snapshots of the node's sums spent in each
/// phase, in the order of `PHASES`.
pub(crate) fn phase_spans(before: &ReadPhases, after: &ReadPhases) -> [u64; 6] {
    let span = |now: Duration, was: Duration| now.saturating_sub(was).as_nanos() as u64;
    [
        span(after.pin, before.pin),
        span(after.prepare, before.prepare),
        span(after.post, before.post),
        span(after.wire, before.wire),
        span(after.notice, before.notice),
        span(after.finish, before.finish),
    ]
}

/// One read: its phases (ns), whether its reader slept, and its time as the reader
/// timed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadSample {
    phases: [u64; 6],
    slept: bool,
    timed_ns: u64,
}

impl ReadSample {
    /// The read between two snapshots of the node's sums, or None unless exactly one
    /// read was counted between them (another process read as well).
    pub(crate) fn between(before: &ReadPhases, after: &ReadPhases, timed_ns: u64) -> Option<Self> {
        if after.reads.checked_sub(before.reads)? != 1 {
            return None;
        }
        Some(ReadSample { phases: phase_spans(before, after), slept: after.slept > before.slept, timed_ns })
    }

    /// What the kernel did not see of it: the crossing, the argument copy.
    fn outside_ns(&self) -> u64 {
        self.timed_ns.saturating_sub(self.phases.iter().sum())
    }

    /// The provider's share: its post, and on to the completion's handler.
    fn provider_ns(&self) -> u64 {
        self.phases[2] + self.phases[3]
    }
}

/// Each phase's median over `samples` (ns), with the provider's share, the part
/// outside the stamps, the reads as timed, the share of reads that slept and their
/// count; Null without samples.
pub(crate) fn medians_json(samples: &[ReadSample]) -> Value {
    let median = |f: &dyn Fn(&ReadSample) -> u64| {
        let mut v: Vec<u64> = samples.iter().map(f).collect();
        Summary::of(&mut v).map(|s| s.median_ns)
    };
    let Some(timed) = median(&|s| s.timed_ns) else {
        return Value::Null;
    };
    let mut out = Map::new();
    for (i, name) in PHASES.iter().enumerate() {
        out.insert((*name).into(), json!(median(&|s| s.phases[i])));
    }
    out.insert("provider_ns".into(), json!(median(&|s| s.provider_ns())));
    out.insert("outside_ns".into(), json!(median(&|s| s.outside_ns())));
    out.insert("timed_ns".into(), json!(timed));
    let slept = samples.iter().filter(|s| s.slept).count();
    out.insert("slept_share".into(), json!(slept as f64 / samples.len() as f64));
    out.insert("reads".into(), json!(samples.len()));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(reads: u64, us: u64, slept: u64) -> ReadPhases {
        let d = Duration::from_micros(us);
        ReadPhases { reads, pin: d, prepare: d * 2, post: d * 3, wire: d * 100, notice: d, finish: d, slept }
    }

    #[test]
    fn a_sample_is_one_read_between_two_snapshots() {
        let s = ReadSample::between(&sums(4, 10, 1), &sums(5, 20, 2), 1_200_000).expect("one read");
        assert_eq!(s.phases, [10_000, 20_000, 30_000, 1_000_000, 10_000, 10_000]);
        assert!(s.slept);
        assert_eq!((s.provider_ns(), s.outside_ns()), (1_030_000, 120_000));
        assert_eq!(ReadSample::between(&sums(4, 10, 1), &sums(6, 20, 1), 1), None, "two reads counted");
        assert_eq!(ReadSample::between(&sums(4, 10, 1), &sums(4, 10, 1), 1), None, "none counted");
        assert_eq!(ReadSample::between(&sums(5, 10, 1), &sums(4, 10, 1), 1), None, "counters went back");
    }

    #[test]
    fn each_phase_has_its_own_median() {
        let one = |wire: u64, slept| ReadSample { phases: [1, 2, 3, wire, 5, 6], slept, timed_ns: wire + 100 };
        let v = medians_json(&[one(900, false), one(500, true), one(700, false)]);
        assert_eq!(v["wire_ns"], 700);
        assert_eq!(v["provider_ns"], 703);
        assert_eq!(v["outside_ns"], 83);
        assert_eq!(v["timed_ns"], 800);
        assert_eq!(v["reads"], 3);
        assert!((v["slept_share"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(medians_json(&[]), Value::Null);
    }
}
