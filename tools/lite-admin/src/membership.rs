//! Cluster membership: the messages between manager and agents, and the manager's
//! registry of nodes. Pure logic (no sockets, time passed in) so it is unit-tested.
//!
//! Why a manual QP exchange through the manager rather than rdma_cm: the manager
//! connection already exists to assign ids and spread membership, so carrying each
//! side's QPNs, PSNs and GID on it costs nothing, keeps every QP state transition
//! in the module's own code (one place to reason about teardown), and needs no
//! listener or per-connection CM callbacks in the kernel. LITE did the same.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Default TCP port of the manager (LITE used 18500 too).
pub const DEFAULT_PORT: u16 = 18500;

/// One side of the K QPs between two nodes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Conn {
    pub gid: [u8; 16],
    pub mtu: u32,
    pub qpn: Vec<u32>,
    pub psn: Vec<u32>,
    pub mailbox_addr: u64,
    pub mailbox_rkey: u32,
    pub mailbox_slots: u32,
    /// `LITE_TRANSPORT_*` and `LITE_PATH_*` bits the two sides must agree on.
    #[serde(default)]
    pub transport: u32,
    #[serde(default)]
    pub paths: u32,
}

impl Conn {
    pub fn from_abi(info: &lite::ConnInfo) -> Conn {
        let n = (info.nr_qps as usize).min(info.qpn.len());
        Conn {
            gid: info.gid,
            mtu: info.mtu,
            qpn: info.qpn[..n].to_vec(),
            psn: info.psn[..n].to_vec(),
            mailbox_addr: info.mailbox_addr,
            mailbox_rkey: info.mailbox_rkey,
            mailbox_slots: info.mailbox_slots,
            transport: info.transport,
            paths: info.paths,
        }
    }

    /// `None` if the peer sent more QPs than the ABI can hold or mismatched lists.
    pub fn to_abi(&self) -> Option<lite::ConnInfo> {
        let mut info = lite::ConnInfo {
            gid: self.gid,
            mtu: self.mtu,
            mailbox_addr: self.mailbox_addr,
            mailbox_rkey: self.mailbox_rkey,
            mailbox_slots: self.mailbox_slots,
            transport: self.transport,
            paths: self.paths,
            ..Default::default()
        };
        if self.qpn.len() != self.psn.len() || self.qpn.len() > info.qpn.len() {
            return None;
        }
        info.nr_qps = self.qpn.len() as u32;
        info.qpn[..self.qpn.len()].copy_from_slice(&self.qpn);
        info.psn[..self.psn.len()].copy_from_slice(&self.psn);
        Some(info)
    }
}

/// A peer an agent's kernel is connected to (reported so a restarted manager can rebuild).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub id: u32,
    pub epoch: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToManager {
    /// First message. `node` is the identity the kernel already has (after a manager
    /// restart); `want_id` asks for a specific id on a first join.
    Hello {
        node: Option<Known>,
        want_id: Option<u32>,
        hostname: String,
        peers: Vec<Known>,
        /// The node's device, when it has one (agents before it sent none).
        #[serde(default)]
        fabric: Option<Fabric>,
    },
    /// Forward our side to node `to` (incarnation `to_epoch`).
    Conn {
        to: u32,
        to_epoch: u64,
        info: Conn,
    },
    /// Our kernel marked incarnation `to` failed (its RC retries ran out, or a QP
    /// went to error) although the manager still counts it up. `refused`: our NIC
    /// refused requests of `to` (a key, address or access it was never given), so
    /// `to` is the one that broke the link.
    LinkFailed {
        to: Known,
        #[serde(default)]
        refused: bool,
    },
    Heartbeat,
    Leave,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToAgent {
    /// `silence_ms`: the agent ends a session that brought nothing for this long (a
    /// partition) and connects again; by then the manager has declared its node
    /// down, so it comes back as a new incarnation (0 from older managers: the
    /// agent's default).
    Welcome {
        id: u32,
        epoch: u64,
        #[serde(default)]
        silence_ms: u64,
    },
    Refused {
        reason: String,
    },
    Members {
        members: Vec<Member>,
    },
    Conn {
        from: u32,
        from_epoch: u64,
        to_epoch: u64,
        info: Conn,
    },
    Heartbeat,
}

/// What every node of one cluster must share: RDMA does not cross between
/// transports, and a word updated both by a NIC and by a CPU is not atomic.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Fabric {
    /// "infiniband", "roce" or "iwarp".
    pub transport: String,
    /// Who executes atomics: "nic" or "holder" (the holder's kernel).
    pub atomics_by: String,
}

impl Fabric {
    /// Why a node with `self` cannot join node `id`, which has `other`.
    fn mismatch(&self, id: u32, other: &Fabric) -> Option<String> {
        if self.transport != other.transport {
            return Some(format!(
                "this node's RDMA device speaks {} and node {id}'s speaks {}: RDMA does not cross between \
                 transports (give every node of a cluster a device of one transport)",
                self.transport, other.transport
            ));
        }
        (self.atomics_by != other.atomics_by).then(|| {
            format!(
                "this node's atomics are executed by the {} and node {id}'s by the {}: a word updated by a NIC \
                 and a CPU at once is not atomic (load lite.ko with one atomics= on every node)",
                holder_or_nic(&self.atomics_by),
                holder_or_nic(&other.atomics_by)
            )
        })
    }
}

fn holder_or_nic(atomics_by: &str) -> &'static str {
    if atomics_by == "holder" {
        "holder's kernel"
    } else {
        "holder's NIC"
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u32,
    pub epoch: u64,
    pub up: bool,
    pub hostname: String,
}

struct Entry {
    member: Member,
    last_seen: Instant,
    fabric: Option<Fabric>,
}

/// The manager's view of the cluster.
pub struct Registry {
    max_nodes: u32,
    nodes: BTreeMap<u32, Entry>,
    next_epoch: u64,
}

impl Registry {
    pub fn new(max_nodes: u32) -> Registry {
        Registry { max_nodes, nodes: BTreeMap::new(), next_epoch: 1 }
    }

    fn is_up(&self, id: u32) -> bool {
        self.nodes.get(&id).is_some_and(|e| e.member.up)
    }

    fn put(&mut self, id: u32, epoch: u64, hostname: &str, now: Instant) {
        self.next_epoch = self.next_epoch.max(epoch + 1);
        let member = Member { id, epoch, up: true, hostname: hostname.to_string() };
        self.nodes.insert(id, Entry { member, last_seen: now, fabric: None });
    }

    /// Whether a node with `fabric` can talk to every live node whose fabric is known.
    pub fn fits(&self, fabric: &Fabric) -> Result<(), String> {
        for (id, entry) in self.nodes.iter().filter(|(_, e)| e.member.up) {
            if let Some(reason) = entry.fabric.as_ref().and_then(|theirs| fabric.mismatch(*id, theirs)) {
                return Err(reason);
            }
        }
        Ok(())
    }

    /// Records what node `id` (just admitted) has.
    pub fn set_fabric(&mut self, id: u32, fabric: Fabric) {
        if let Some(entry) = self.nodes.get_mut(&id) {
            entry.fabric = Some(fabric);
        }
    }

    /// Admits a node; returns its id and epoch.
    pub fn admit(
        &mut self,
        node: Option<Known>,
        want_id: Option<u32>,
        hostname: &str,
        now: Instant,
    ) -> Result<(u32, u64), String> {
        // A node that kept its identity keeps it when the manager restarted (it does
        // not know the id) or the agent merely reconnected (same live incarnation).
        // Declared down meanwhile, it needs a new epoch: its peers dropped its QPs.
        if let Some(k) = node {
            let adopt = match self.nodes.get(&k.id) {
                None => k.id < self.max_nodes,
                Some(e) => e.member.up && e.member.epoch == k.epoch,
            };
            if adopt {
                self.put(k.id, k.epoch, hostname, now);
                return Ok((k.id, k.epoch));
            }
        }
        let want_id = want_id.or(node.map(|k| k.id).filter(|&id| id < self.max_nodes && !self.is_up(id)));
        let id = match want_id {
            Some(id) if id >= self.max_nodes => {
                return Err(format!("node id {id} is out of range 0..{}", self.max_nodes))
            }
            Some(id) if self.is_up(id) => return Err(format!("node id {id} is already taken by a live node")),
            Some(id) => id,
            None => (0..self.max_nodes)
                .find(|&id| !self.is_up(id))
                .ok_or_else(|| format!("the cluster is full ({} nodes)", self.max_nodes))?,
        };
        let epoch = self.next_epoch;
        self.put(id, epoch, hostname, now);
        Ok((id, epoch))
    }

    /// Records peers that a reconnecting node says it is connected to, so that a
    /// restarted manager learns of nodes before (or without) them reconnecting. If
    /// they do not show up within the dead-node timeout, they are declared down.
    pub fn remember(&mut self, known: &[Known], now: Instant) -> bool {
        let mut changed = false;
        for k in known {
            if k.id < self.max_nodes && !self.nodes.contains_key(&k.id) {
                self.put(k.id, k.epoch, "", now);
                changed = true;
            }
        }
        changed
    }

    pub fn seen(&mut self, id: u32, epoch: u64, now: Instant) {
        if let Some(e) = self.nodes.get_mut(&id) {
            if e.member.epoch == epoch {
                e.last_seen = now;
            }
        }
    }

    /// Marks incarnation `epoch` of `id` down; false if it was not up.
    pub fn mark_down(&mut self, id: u32, epoch: u64) -> bool {
        match self.nodes.get_mut(&id) {
            Some(e) if e.member.epoch == epoch && e.member.up => {
                e.member.up = false;
                true
            }
            _ => false,
        }
    }

    /// The manager itself did not run for `stall` until `now` (its process or its
    /// machine was descheduled): the heartbeats of that time may be sitting unread
    /// in its sockets, so that silence is not held against the nodes.
    pub fn excuse(&mut self, stall: Duration, now: Instant) {
        for e in self.nodes.values_mut().filter(|e| e.member.up) {
            e.last_seen = (e.last_seen + stall).min(now);
        }
    }

    /// Up nodes not heard from for `dead_after`: to be declared down.
    pub fn expired(&self, dead_after: Duration, now: Instant) -> Vec<Known> {
        self.nodes
            .values()
            .filter(|e| e.member.up && now.duration_since(e.last_seen) > dead_after)
            .map(|e| Known { id: e.member.id, epoch: e.member.epoch })
            .collect()
    }

    pub fn epoch_of(&self, id: u32) -> Option<u64> {
        self.nodes.get(&id).filter(|e| e.member.up).map(|e| e.member.epoch)
    }

    /// Whether incarnation `k` is the one up now.
    pub fn is_current(&self, k: Known) -> bool {
        self.epoch_of(k.id) == Some(k.epoch)
    }

    pub fn members(&self) -> Vec<Member> {
        self.nodes.values().map(|e| e.member.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn assigns_lowest_free_ids_and_fresh_epochs() {
        let mut r = Registry::new(4);
        let now = t0();
        assert_eq!(r.admit(None, None, "a", now), Ok((0, 1)));
        assert_eq!(r.admit(None, None, "b", now), Ok((1, 2)));
        assert!(r.mark_down(0, 1));
        assert_eq!(r.admit(None, None, "c", now), Ok((0, 3)), "a freed id is reused with a new epoch");
    }

    #[test]
    fn a_stalled_manager_does_not_hold_its_own_silence_against_the_nodes() {
        let mut r = Registry::new(4);
        let start = t0();
        r.admit(None, None, "a", start).unwrap();
        r.admit(None, None, "b", start).unwrap();
        let dead_after = Duration::from_secs(8);
        // Node 1 was last heard 1 s in; then the manager did not run for 9 s.
        r.seen(1, 2, start + Duration::from_secs(1));
        let now = start + Duration::from_secs(10);
        assert_eq!(r.expired(dead_after, now).len(), 2);
        r.excuse(Duration::from_secs(9), now);
        assert!(r.expired(dead_after, now).is_empty());
        // The excuse never dates a node's last message past now, and a node silent
        // for dead_after after the stall is still declared down.
        assert_eq!(r.expired(dead_after, now + Duration::from_secs(9)).len(), 2);
        r.excuse(Duration::from_secs(3600), now);
        assert!(r.expired(dead_after, now + Duration::from_secs(8)).is_empty());
        assert_eq!(r.expired(dead_after, now + Duration::from_secs(9)).len(), 2);
    }

    #[test]
    fn wanted_ids_are_granted_only_when_free() {
        let mut r = Registry::new(4);
        let now = t0();
        assert_eq!(r.admit(None, Some(2), "a", now), Ok((2, 1)));
        assert!(r.admit(None, Some(2), "b", now).unwrap_err().contains("taken"));
        assert!(r.admit(None, Some(9), "b", now).unwrap_err().contains("out of range"));
    }

    #[test]
    fn full_cluster_is_refused() {
        let mut r = Registry::new(2);
        let now = t0();
        r.admit(None, None, "a", now).unwrap();
        r.admit(None, None, "b", now).unwrap();
        assert!(r.admit(None, None, "c", now).unwrap_err().contains("full"));
    }

    #[test]
    fn restarted_manager_adopts_identities_and_never_reuses_epochs() {
        let mut r = Registry::new(8);
        let now = t0();
        assert_eq!(r.admit(Some(Known { id: 3, epoch: 41 }), None, "x", now), Ok((3, 41)));
        assert!(r.remember(&[Known { id: 5, epoch: 40 }], now));
        assert_eq!(r.epoch_of(5), Some(40));
        assert_eq!(r.admit(Some(Known { id: 5, epoch: 40 }), None, "y", now), Ok((5, 40)));
        assert_eq!(r.admit(None, None, "z", now), Ok((0, 42)));
    }

    #[test]
    fn stale_identity_gets_a_new_one() {
        let mut r = Registry::new(8);
        let now = t0();
        r.admit(None, Some(1), "new", now).unwrap(); // id 1 epoch 1
        let old = Known { id: 1, epoch: 0 };
        assert_eq!(r.admit(Some(old), None, "old", now), Ok((0, 2)));
    }

    #[test]
    fn node_declared_down_returns_with_a_new_epoch() {
        let mut r = Registry::new(8);
        let now = t0();
        let (id, epoch) = r.admit(None, None, "a", now).unwrap();
        assert!(r.mark_down(id, epoch));
        let (id2, epoch2) = r.admit(Some(Known { id, epoch }), None, "a", now).unwrap();
        assert_eq!(id2, id, "keeps its id when free");
        assert!(epoch2 > epoch);
        assert_eq!(r.admit(Some(Known { id, epoch: epoch2 }), None, "a", now), Ok((id, epoch2)), "plain reconnect");
    }

    #[test]
    fn silent_nodes_expire_and_down_is_per_incarnation() {
        let mut r = Registry::new(8);
        let now = t0();
        r.admit(None, None, "a", now).unwrap();
        r.admit(None, None, "b", now).unwrap();
        let later = now + Duration::from_secs(10);
        r.seen(1, 2, later);
        assert_eq!(r.expired(Duration::from_secs(5), later), vec![Known { id: 0, epoch: 1 }]);
        assert!(!r.mark_down(0, 99), "another incarnation is not affected");
        assert!(r.mark_down(0, 1));
        assert!(!r.mark_down(0, 1));
        assert!(r.expired(Duration::from_secs(5), later).is_empty());
    }

    #[test]
    fn a_node_joins_only_nodes_of_its_transport_and_atomics() {
        let now = Instant::now();
        let mut r = Registry::new(8);
        let fabric =
            |transport: &str, atomics_by: &str| Fabric { transport: transport.into(), atomics_by: atomics_by.into() };
        let rxe = fabric("roce", "nic");
        assert_eq!(r.fits(&rxe), Ok(()), "the first node sets the fabric");
        let (id, _) = r.admit(None, None, "a", now).unwrap();
        r.set_fabric(id, rxe.clone());
        assert_eq!(r.fits(&rxe), Ok(()));
        let siw = r.fits(&fabric("iwarp", "holder")).unwrap_err();
        assert!(siw.contains("speaks iwarp and node 0's speaks roce"), "{siw}");
        let holder = r.fits(&fabric("roce", "holder")).unwrap_err();
        assert!(holder.contains("by the holder's kernel and node 0's by the holder's NIC"), "{holder}");
        assert!(r.mark_down(id, 1));
        assert_eq!(r.fits(&fabric("iwarp", "holder")), Ok(()), "only live nodes count");
    }

    #[test]
    fn conn_round_trips_and_rejects_oversized_lists() {
        let mut info = lite::ConnInfo {
            nr_qps: 2,
            mtu: 3,
            mailbox_addr: 1 << 40,
            mailbox_rkey: 9,
            mailbox_slots: 32,
            transport: 2,
            paths: 1 << 9,
            ..Default::default()
        };
        info.qpn[..2].copy_from_slice(&[17, 18]);
        info.psn[..2].copy_from_slice(&[5, 6]);
        let conn = Conn::from_abi(&info);
        assert_eq!(conn.to_abi(), Some(info));
        let bad = Conn { qpn: vec![1; 9], psn: vec![1; 9], ..conn.clone() };
        assert_eq!(bad.to_abi(), None);
        let uneven = Conn { qpn: vec![1, 2], psn: vec![1], ..conn };
        assert_eq!(uneven.to_abi(), None);
    }

    #[test]
    fn messages_are_json_lines() {
        let info = Conn {
            gid: [0; 16],
            mtu: 3,
            qpn: vec![1],
            psn: vec![2],
            mailbox_addr: 4096,
            mailbox_rkey: 5,
            mailbox_slots: 32,
            transport: 3,
            paths: 0,
        };
        let m = ToManager::Conn { to: 2, to_epoch: 7, info };
        let line = serde_json::to_string(&m).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<ToManager>(&line).unwrap(), m);
    }
}
