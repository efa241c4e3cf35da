//! Peers being taken down, each on a thread of its own. Taking a peer down revokes
//! every mapping that reaches it, which waits for the operations on it to end: for
//! as long as their work requests take to be flushed, and forever on a NIC that
//! never flushes them (stock kernels' siw, docs/reliability.md). The agent must go
//! on answering the manager's heartbeats meanwhile, or the manager declares this
//! node down too. What the agent would do for a peer while it is being taken down
//! (offer it QPs, connect to it) waits until that is over: the kernel must not meet
//! the peer's next incarnation while it still forgets the last one.

use crate::membership::Conn;
use lite::{Error, Lite};
use std::collections::HashMap;
use std::thread::JoinHandle;

/// What waits for a peer's teardown to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Deferred {
    /// Offer QPs to this incarnation of the peer.
    Offer { peer: u32, epoch: u64 },
    /// Connect to the QPs the peer sent.
    Conn { from: u32, from_epoch: u64, to_epoch: u64, info: Conn },
}

impl Deferred {
    fn peer(&self) -> u32 {
        match self {
            Deferred::Offer { peer, .. } => *peer,
            Deferred::Conn { from, .. } => *from,
        }
    }
}

#[derive(Default)]
pub(crate) struct PeerDowns {
    running: HashMap<u32, JoinHandle<()>>,
    deferred: Vec<Deferred>,
}

impl PeerDowns {
    /// Starts taking `peer` down, unless that is already under way.
    pub(crate) fn start(&mut self, peer: u32) -> Result<(), String> {
        if self.running.contains_key(&peer) {
            return Ok(());
        }
        let thread = std::thread::Builder::new()
            .name(format!("peer-down-{peer}"))
            .spawn(move || take_down(peer))
            .map_err(|e| format!("cannot start taking node {peer} down: {e}"))?;
        self.running.insert(peer, thread);
        Ok(())
    }

    pub(crate) fn is_going_down(&self, peer: u32) -> bool {
        self.running.contains_key(&peer)
    }

    /// Keeps `action` until its peer is down; an offer replaces an earlier one.
    pub(crate) fn defer(&mut self, action: Deferred) {
        if let Deferred::Offer { peer, .. } = action {
            self.deferred.retain(|d| !matches!(d, Deferred::Offer { peer: p, .. } if *p == peer));
        }
        self.deferred.push(action);
    }

    /// Drops what waited: it was for a session with the manager that ended, and
    /// the next one's messages say again what is to be done.
    pub(crate) fn drop_deferred(&mut self) {
        self.deferred.clear();
    }

    /// The actions whose peers are down by now, in the order they came; forgets
    /// the teardowns that ended.
    pub(crate) fn ready(&mut self) -> Vec<Deferred> {
        self.running.retain(|_, thread| !thread.is_finished());
        let (ready, waiting) =
            std::mem::take(&mut self.deferred).into_iter().partition(|d| !self.running.contains_key(&d.peer()));
        self.deferred = waiting;
        ready
    }
}

/// Marks `peer` down in the kernel through a handle of this thread's own.
fn take_down(peer: u32) {
    let result = Lite::open().and_then(|lite| lite.peer_down(peer));
    match result {
        Ok(()) => eprintln!("agent: node {peer} is down; its QPs are torn down"),
        Err(Error::UnknownNode(_)) => {}
        Err(e) => eprintln!("agent: marking node {peer} down: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn conn(from: u32) -> Deferred {
        let info = Conn::from_abi(&lite::ConnInfo { nr_qps: 1, ..Default::default() });
        Deferred::Conn { from, from_epoch: 2, to_epoch: 1, info }
    }

    #[test]
    fn actions_wait_for_their_peer_only() {
        let mut downs = PeerDowns::default();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // A teardown of node 3 that ends when the test says so.
        downs.running.insert(3, std::thread::spawn(move || rx.recv().unwrap_or(())));
        downs.defer(Deferred::Offer { peer: 3, epoch: 5 });
        downs.defer(conn(3));
        downs.defer(Deferred::Offer { peer: 4, epoch: 1 });
        downs.defer(Deferred::Offer { peer: 3, epoch: 6 });
        assert!(downs.is_going_down(3));
        assert_eq!(downs.ready(), vec![Deferred::Offer { peer: 4, epoch: 1 }]);
        assert!(downs.ready().is_empty());
        tx.send(()).unwrap();
        let mut ready = Vec::new();
        for _ in 0..5000 {
            ready = downs.ready();
            if !ready.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The later offer replaced the earlier one; the order is kept.
        assert_eq!(ready, vec![conn(3), Deferred::Offer { peer: 3, epoch: 6 }]);
        assert!(!downs.is_going_down(3));
    }
}
