//! Links between two live nodes that failed: a kernel whose RC retries to a peer ran
//! out (or whose QP went to error otherwise) marks that peer failed, and its agent
//! reports the link. Both nodes still heartbeat, so nothing else would ever
//! reconnect them. The manager takes one of the two down, as if it had died: it
//! comes back at once as a new incarnation, and every pair gets fresh QPs. The
//! incarnation must change, not only the QPs: the peers forget the memory they held
//! for each other, and an extent of the old incarnation must never reach memory
//! the new one reused.
//!
//! Which one: a node whose requests a peer's NIC refused (a key, address or access
//! it was never given: it broke the link, and must not get its victim taken down
//! by reporting first); else the node in the most failed links reported within a
//! short wait (a node behind a bad wire fails its links to everyone, and everyone
//! reports it), else the one the first report named.

use crate::membership::Known;
use std::time::{Duration, Instant};

struct Report {
    from: Known,
    to: Known,
    /// `from`'s NIC refused requests of `to`.
    refused: bool,
    at: Instant,
}

#[derive(Default)]
pub struct LinkFailures {
    reports: Vec<Report>,
}

impl LinkFailures {
    /// `from` reports its link to `to` failed (`refused`: after its NIC refused
    /// requests of `to`); false when that link was reported already, and nothing
    /// new was said of it.
    pub fn report(&mut self, from: Known, to: Known, refused: bool, now: Instant) -> bool {
        let same = |r: &Report| (r.from == from && r.to == to) || (r.from == to && r.to == from);
        match self.reports.iter_mut().find(|r| same(r)) {
            Some(r) if refused && !r.refused => {
                (r.from, r.to, r.refused) = (from, to, true);
                true
            }
            Some(_) => false,
            None => {
                self.reports.push(Report { from, to, refused, at: now });
                true
            }
        }
    }

    /// Once the first report is `wait` old, the node to take down, and the nodes it
    /// failed to reach; forgets every report that involves it. Reports about
    /// incarnations that are no longer `up` are dropped first.
    pub fn verdict(&mut self, wait: Duration, now: Instant, up: impl Fn(Known) -> bool) -> Option<(Known, Vec<u32>)> {
        self.reports.retain(|r| up(r.from) && up(r.to));
        let first = self.reports.first()?;
        if now.duration_since(first.at) < wait {
            return None;
        }
        let involved = |k: Known| self.reports.iter().filter(|r| r.from == k || r.to == k).count();
        let mut victim = first.to;
        for r in &self.reports {
            for k in [r.to, r.from] {
                if involved(k) > involved(victim) {
                    victim = k;
                }
            }
        }
        if let Some(r) = self.reports.iter().find(|r| r.refused) {
            victim = r.to;
        }
        let peers = self
            .reports
            .iter()
            .filter_map(|r| match (r.from == victim, r.to == victim) {
                (true, _) => Some(r.to.id),
                (_, true) => Some(r.from.id),
                _ => None,
            })
            .collect();
        self.reports.retain(|r| r.from != victim && r.to != victim);
        Some((victim, peers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32) -> Known {
        Known { id, epoch: 10 + u64::from(id) }
    }

    const WAIT: Duration = Duration::from_secs(2);

    #[test]
    fn waits_for_the_other_reports_first() {
        let (mut f, t) = (LinkFailures::default(), Instant::now());
        assert!(f.report(node(0), node(2), false, t));
        assert_eq!(f.verdict(WAIT, t + Duration::from_secs(1), |_| true), None);
        assert_eq!(f.verdict(WAIT, t + WAIT, |_| true), Some((node(2), vec![0])));
        assert_eq!(f.verdict(WAIT, t + WAIT, |_| true), None, "reports about it are forgotten");
    }

    #[test]
    fn the_node_everyone_lost_goes_down_whoever_reported_first() {
        let (mut f, t) = (LinkFailures::default(), Instant::now());
        f.report(node(2), node(0), false, t);
        f.report(node(1), node(2), false, t);
        assert!(!f.report(node(0), node(2), false, t), "the same link, seen from its other end");
        assert_eq!(f.verdict(WAIT, t + WAIT, |_| true), Some((node(2), vec![0, 1])));
    }

    #[test]
    fn one_failed_link_takes_down_the_node_first_named() {
        let (mut f, t) = (LinkFailures::default(), Instant::now());
        f.report(node(0), node(1), false, t);
        f.report(node(1), node(0), false, t);
        assert_eq!(f.verdict(WAIT, t + WAIT, |_| true), Some((node(1), vec![0])));
    }

    #[test]
    fn the_node_whose_requests_a_nic_refused_goes_down_whoever_reported_first() {
        let (mut f, t) = (LinkFailures::default(), Instant::now());
        // Node 0 made requests node 1's NIC refused; its own report comes first.
        assert!(f.report(node(0), node(1), false, t));
        assert!(f.report(node(1), node(0), true, t), "the refusal is news");
        assert!(!f.report(node(1), node(0), true, t));
        assert_eq!(f.verdict(WAIT, t + WAIT, |_| true), Some((node(0), vec![1])));
    }

    #[test]
    fn reports_about_gone_incarnations_are_dropped() {
        let (mut f, t) = (LinkFailures::default(), Instant::now());
        f.report(node(0), node(2), false, t);
        f.report(node(1), node(2), false, t);
        // Node 2 was declared down meanwhile (no heartbeat): nothing left to do.
        assert_eq!(f.verdict(WAIT, t + WAIT, |k| k.id != 2), None);
        f.report(node(0), node(1), false, t + WAIT);
        assert_eq!(f.verdict(WAIT, t + 2 * WAIT, |_| true), Some((node(1), vec![0])));
    }
}
