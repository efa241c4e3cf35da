// SPDX-License-Identifier: GPL-2.0
//! Operator and process settings: the mode, weights, Target99 and link rate,
//! the class rules, a process's own choice of a lower class, and the statistics.

use super::classes::{self, Rule, Source, MAX_RULES, MAX_SELF_CHOICES};
use super::pacer;
use super::state::{Choice, Who};
use super::{now_ns, Qos};
use crate::kvec::{remove_at, retain};
use crate::uapi::*;
use crate::verbs::PacedStat;
use kernel::prelude::*;

impl Qos {
    pub(crate) fn get(&self) -> LiteQos {
        let st = self.state.lock();
        LiteQos {
            set: 0,
            mode: st.mode,
            target99_ns: st.target_ns,
            weights: st.weights,
            chunk_bytes: st.chunk_bytes,
            link_rate: st.link_rate,
            target99_ratio_pct: st.target_ratio_pct,
            reserved: 0,
        }
    }

    pub(crate) fn set(&self, req: &LiteQos) -> Result {
        let known = LITE_QOS_SET_MODE
            | LITE_QOS_SET_TARGET
            | LITE_QOS_SET_WEIGHTS
            | LITE_QOS_SET_LINK_RATE
            | LITE_QOS_SET_CHUNK
            | LITE_QOS_SET_TARGET_RATIO;
        if req.set & !known != 0 || req.reserved != 0 {
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
        if req.set & LITE_QOS_SET_TARGET_RATIO != 0
            && req.target99_ratio_pct != 0
            && !(LITE_QOS_TARGET_RATIO_MIN..=LITE_QOS_TARGET_RATIO_MAX)
                .contains(&req.target99_ratio_pct)
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
            if req.set & LITE_QOS_SET_TARGET_RATIO != 0 {
                st.target_ratio_pct = req.target99_ratio_pct;
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
            // Every waiter rechecks: pacing may be off now, or the weights moved the turn.
            for turn in st.turns.iter() {
                turn.notify_all();
            }
        }
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

    /// The statistics, with the places (the devices count those) filled in.
    pub(crate) fn stat(&self, places: PacedStat) -> LiteQosStat {
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
            decreases: st.aimd_control.decreases,
            increases: st.aimd_control.increases,
            target99_ns: st.target99(),
            alone_p99_ns: st.windows.alone.p99_ns().unwrap_or(0),
            alone_samples: st.windows.alone.samples(),
            classes: [LiteClassStat::default(); 3],
            latency_phases: st.latency_phases,
            paced_in_flight: places.in_flight,
            paced_places: st.paced_places(),
            pacing: LitePacing {
                offered_bytes: st.bucket.offered(now),
                paced_bytes: st.paced_bytes,
                token_wait_ns: st
                    .classes
                    .iter()
                    .fold(0, |sum: u64, c| sum.wrapping_add(c.paced_ns)),
                place_wait_ns: places.wait_ns,
                place_held_ns: places.held_ns,
                place_wrs: places.wrs,
            },
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
