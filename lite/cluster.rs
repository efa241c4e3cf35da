// SPDX-License-Identifier: GPL-2.0
//! This node's view of the cluster: identity, RDMA devices, peers with their K RC
//! QPs, and the ping that proves the data path.
//!
//! Locking: `Lite::state` (mutex) serializes every membership change and is never
//! taken by completion callbacks. Each peer's `link` spinlock guards its QPs for
//! posting; shutting a peer down takes the QPs out under it, so once `shutdown`
//! returns nothing can post to them and their drain has reaped every completion.

use crate::errno::{EHOSTDOWN, ENETDOWN, ENOTCONN, ETIMEDOUT};
use crate::imm::{self, ImmKind};
use crate::uapi::*;
use crate::verbs::{Device, Qp, RemoteQp, PORT_ACTIVE};
use core::ffi::c_void;
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, new_spinlock, Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLock};
use kernel::time::{msecs_to_jiffies, Ktime};
use kernel::uaccess::UserSliceWriter;

/// Receives kept posted on every QP (each write-with-immediate consumes one).
const RECV_DEPTH: u32 = 128;

/// `IB_MTU_256` ..= `IB_MTU_4096`.
const MTU_CODES: core::ops::RangeInclusive<u32> = 1..=5;

/// Removes and returns element `index`, moving the last element into its place.
fn swap_remove<T>(vec: &mut KVec<T>, index: usize) -> T {
    let last = vec.len() - 1;
    vec.as_mut_slice().swap(index, last);
    // SAFETY: `last < len`, so the element at `last` is initialized; after `set_len(last)`
    // the vector no longer owns it, so reading it out moves ownership to the caller once.
    unsafe {
        vec.set_len(last);
        core::ptr::read(vec.as_ptr().add(last))
    }
}

/// Starting PSN of a QP: any 24-bit value works; deriving it from the QPN keeps both
/// sides' view reproducible without storing it.
fn psn_for(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9E37_79B1) & 0x00FF_FFFF
}

struct Identity {
    id: u32,
    epoch: u64,
}

/// A peer the manager declared down, kept so that status can show it.
struct DownPeer {
    id: u32,
    epoch: u64,
}

struct State {
    node: Option<Identity>,
    devices: KVec<Arc<Device>>,
    peers: KVec<Arc<Peer>>,
    down: KVec<DownPeer>,
}

impl State {
    fn peer_index(&self, id: u32) -> Option<usize> {
        self.peers.iter().position(|p| p.id == id)
    }

    fn forget_down(&mut self, id: u32) {
        if let Some(i) = self.down.iter().position(|d| d.id == id) {
            swap_remove(&mut self.down, i);
        }
    }

    /// Tears the peer at `index` down and records it as down.
    fn remove_peer(&mut self, index: usize) -> Result {
        let peer = swap_remove(&mut self.peers, index);
        peer.shutdown();
        self.forget_down(peer.id);
        self.down.push(DownPeer { id: peer.id, epoch: peer.epoch }, GFP_KERNEL)?;
        Ok(())
    }
}

struct Link {
    state: u32,
    qps: KVec<Arc<Qp>>,
    remote: Option<LiteConnInfo>,
}

/// Another node, one incarnation of it (`epoch`), reached over K RC QPs.
#[pin_data(PinnedDrop)]
pub(crate) struct Peer {
    id: u32,
    epoch: u64,
    /// Identifies the device the QPs live on; its verbs are only used while it is registered.
    dev: Arc<Device>,
    sgid_index: i32,
    gid: [u8; 16],
    mtu: u32,
    #[pin]
    link: SpinLock<Link>,
}

impl Peer {
    fn new(dev: &Arc<Device>, id: u32, epoch: u64, nr_qps: u32) -> Result<Arc<Peer>> {
        let (port_state, mtu) = dev.query_port()?;
        if port_state != PORT_ACTIVE {
            return Err(ENETDOWN());
        }
        let (gid, sgid_index) = dev.roce_gid()?;
        let peer = Arc::pin_init(
            pin_init!(Peer {
                id,
                epoch,
                dev: dev.clone(),
                sgid_index,
                gid,
                mtu,
                link <- new_spinlock!(
                    Link { state: LITE_PEER_PREPARED, qps: KVec::new(), remote: None },
                    "lite:peer.link"
                ),
            }),
            GFP_KERNEL,
        )?;
        // The QPs call back with the peer's address, so they are created once it is final.
        let mut qps = KVec::with_capacity(nr_qps as usize, GFP_KERNEL)?;
        for index in 0..nr_qps {
            let qp = dev.create_qp(&*peer as *const Peer as *const c_void, index, RECV_DEPTH)?;
            qps.push(Arc::new(qp, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        peer.link.lock().qps = qps;
        Ok(peer)
    }

    /// What the peer needs to connect its QPs to ours.
    fn local_info(&self) -> LiteConnInfo {
        let link = self.link.lock();
        let mut info = LiteConnInfo { gid: self.gid, mtu: self.mtu, ..Default::default() };
        info.nr_qps = link.qps.len() as u32;
        for (i, qp) in link.qps.iter().enumerate() {
            info.qpn[i] = qp.num();
            info.psn[i] = psn_for(info.qpn[i]);
        }
        info
    }

    /// Connects every QP to the peer's published side. Idempotent for the same info.
    /// Caller holds `Lite::state`, so the QPs cannot be shut down meanwhile.
    fn connect(&self, remote: &LiteConnInfo) -> Result {
        let mut qps = KVec::with_capacity(LITE_MAX_QPS_PER_PEER as usize, GFP_KERNEL)?;
        {
            let link = self.link.lock();
            match &link.remote {
                Some(known) if known == remote => return Ok(()),
                Some(_) => return Err(EEXIST),
                None => {}
            }
            if remote.nr_qps as usize != link.qps.len() {
                return Err(EINVAL);
            }
            for qp in link.qps.iter() {
                qps.push(qp.clone(), GFP_ATOMIC)?;
            }
        }
        let mtu = self.mtu.min(remote.mtu);
        for (i, qp) in qps.iter().enumerate() {
            let far = RemoteQp { gid: &remote.gid, qpn: remote.qpn[i], psn: remote.psn[i] };
            if let Err(e) = qp.connect(&far, self.sgid_index, psn_for(qp.num()), mtu) {
                self.link.lock().state = LITE_PEER_ERROR;
                return Err(e);
            }
        }
        let mut link = self.link.lock();
        link.remote = Some(*remote);
        if link.state == LITE_PEER_PREPARED {
            link.state = LITE_PEER_CONNECTED;
        }
        Ok(())
    }

    /// Posts a write-with-immediate on QP `index % K`.
    fn post_write_imm(&self, index: u32, imm: u32) -> Result {
        let link = self.link.lock();
        if link.state != LITE_PEER_CONNECTED {
            return Err(EHOSTDOWN());
        }
        let qp = link.qps.get(index as usize % link.qps.len().max(1)).ok_or_else(EHOSTDOWN)?;
        qp.post_write_imm(imm)
    }

    fn failed(&self) -> bool {
        self.link.lock().state != LITE_PEER_CONNECTED
    }

    /// A send failed for good (retries exhausted): the peer is unreachable.
    fn mark_failed(&self) {
        let mut link = self.link.lock();
        if link.state == LITE_PEER_CONNECTED || link.state == LITE_PEER_PREPARED {
            link.state = LITE_PEER_ERROR;
        }
    }

    /// Stops all traffic and destroys the QPs (draining reaps every completion).
    fn shutdown(&self) {
        let qps = {
            let mut link = self.link.lock();
            link.state = LITE_PEER_DOWN;
            core::mem::replace(&mut link.qps, KVec::new())
        };
        drop(qps);
    }

    fn status(&self) -> LitePeerStatus {
        let (state, remote, qps) = {
            let link = self.link.lock();
            let mut qps: [Option<Arc<Qp>>; LITE_MAX_QPS_PER_PEER as usize] = Default::default();
            for (slot, qp) in qps.iter_mut().zip(link.qps.iter()) {
                *slot = Some(qp.clone());
            }
            (link.state, link.remote, qps)
        };
        let mut st = LitePeerStatus {
            id: self.id,
            state,
            epoch: self.epoch,
            qp_state: [LITE_QPS_NONE; 8],
            ..Default::default()
        };
        for (i, qp) in qps.iter().enumerate() {
            let Some(qp) = qp else { break };
            st.nr_qps += 1;
            st.local_qpn[i] = qp.num();
            st.qp_state[i] = qp.state().unwrap_or(LITE_QPS_NONE);
        }
        if let Some(remote) = remote {
            st.mtu = self.mtu.min(remote.mtu);
            st.remote_qpn = remote.qpn;
            st.remote_gid = remote.gid;
        }
        st
    }
}

#[pinned_drop]
impl PinnedDrop for Peer {
    fn drop(self: Pin<&mut Self>) {
        self.shutdown();
    }
}

/// Outstanding pings: tokens travel in the IMM, so a reply can only complete a
/// token we handed out and have not yet given up on.
struct PingTable {
    next_token: u32,
    waiting: KVec<(u32, bool)>,
}

impl PingTable {
    fn start(&mut self) -> Result<u32> {
        let token = self.next_token;
        self.next_token = if token >= imm::PAYLOAD_MAX { 0 } else { token + 1 };
        self.waiting.push((token, false), GFP_ATOMIC)?;
        Ok(token)
    }

    fn answered(&self, token: u32) -> bool {
        self.waiting.iter().any(|&(t, done)| t == token && done)
    }

    fn answer(&mut self, token: u32) -> bool {
        match self.waiting.iter_mut().find(|(t, _)| *t == token) {
            Some(entry) => {
                entry.1 = true;
                true
            }
            None => false,
        }
    }

    fn finish(&mut self, token: u32) {
        if let Some(i) = self.waiting.iter().position(|&(t, _)| t == token) {
            swap_remove(&mut self.waiting, i);
        }
    }
}

/// The module's global state.
#[pin_data]
pub(crate) struct Lite {
    #[pin]
    state: Mutex<State>,
    #[pin]
    pings: SpinLock<PingTable>,
    #[pin]
    ping_answered: CondVar,
    pub(crate) qps_per_peer: u32,
}

impl Lite {
    pub(crate) fn new(qps_per_peer: u32) -> Result<Arc<Lite>> {
        Arc::pin_init(
            pin_init!(Lite {
                state <- new_mutex!(
                    State { node: None, devices: KVec::new(), peers: KVec::new(), down: KVec::new() },
                    "lite:state"
                ),
                pings <- new_spinlock!(PingTable { next_token: 0, waiting: KVec::new() }, "lite:pings"),
                ping_answered <- new_condvar!("lite:ping_answered"),
                qps_per_peer,
            }),
            GFP_KERNEL,
        )
    }

    // ---- devices (ib_client callbacks) ----

    pub(crate) fn device_added(&self, dev: Arc<Device>) -> Result {
        self.state.lock().devices.push(dev, GFP_KERNEL)?;
        Ok(())
    }

    /// Shuts down every peer reached through `dev`; they show as down until rejoined.
    pub(crate) fn device_removing(&self, dev: &Arc<Device>) {
        let mut st = self.state.lock();
        if let Some(i) = st.devices.iter().position(|d| Arc::ptr_eq(d, dev)) {
            swap_remove(&mut st.devices, i);
        }
        while let Some(i) = st.peers.iter().position(|p| Arc::ptr_eq(&p.dev, dev)) {
            if st.remove_peer(i).is_err() {
                pr_warn!("out of memory recording a peer as down\n");
            }
        }
    }

    // ---- membership (driven by the user-space agent) ----

    pub(crate) fn info(&self) -> LiteInfo {
        let st = self.state.lock();
        let mut info = LiteInfo {
            abi_version: LITE_ABI_VERSION,
            qps_per_peer: self.qps_per_peer,
            nr_peers: st.peers.len() as u32,
            ..Default::default()
        };
        if let Some(node) = &st.node {
            info.node_id = node.id;
            info.epoch = node.epoch;
        }
        if let Some(dev) = st.devices.first() {
            info.device = *dev.name();
            info.port = dev.port();
            if let Ok((state, mtu)) = dev.query_port() {
                info.port_state = state;
                info.active_mtu = mtu;
            }
            if let Ok((gid, _)) = dev.roce_gid() {
                info.gid = gid;
            }
        }
        info
    }

    pub(crate) fn join(&self, id: u32, epoch: u64) -> Result {
        if id >= LITE_MAX_NODES {
            return Err(EINVAL);
        }
        let mut st = self.state.lock();
        match &st.node {
            Some(node) if node.id != id => Err(EBUSY),
            _ => {
                st.node = Some(Identity { id, epoch });
                Ok(())
            }
        }
    }

    pub(crate) fn leave(&self) {
        let mut st = self.state.lock();
        let peers = core::mem::replace(&mut st.peers, KVec::new());
        for peer in peers.iter() {
            peer.shutdown();
        }
        st.down = KVec::new();
        st.node = None;
    }

    /// Returns this node's side for `peer_id`'s incarnation `epoch`, creating QPs if
    /// the peer is new or came back with a newer epoch. The bool is true when created.
    pub(crate) fn prepare_peer(&self, peer_id: u32, epoch: u64) -> Result<(LiteConnInfo, bool)> {
        let mut st = self.state.lock();
        let me = st.node.as_ref().ok_or_else(ENOTCONN)?.id;
        if peer_id == me || peer_id >= LITE_MAX_NODES {
            return Err(EINVAL);
        }
        if let Some(i) = st.peer_index(peer_id) {
            let known = st.peers[i].epoch;
            if known == epoch {
                return Ok((st.peers[i].local_info(), false));
            }
            if known > epoch {
                return Err(ENOENT);
            }
            st.remove_peer(i)?;
        }
        let dev = st.devices.first().ok_or(ENODEV)?.clone();
        let peer = Peer::new(&dev, peer_id, epoch, self.qps_per_peer)?;
        let info = peer.local_info();
        st.peers.push(peer, GFP_KERNEL)?;
        st.forget_down(peer_id);
        Ok((info, true))
    }

    pub(crate) fn connect_peer(&self, peer_id: u32, epoch: u64, remote: &LiteConnInfo) -> Result {
        if remote.nr_qps != self.qps_per_peer || !MTU_CODES.contains(&remote.mtu) {
            return Err(EINVAL);
        }
        let st = self.state.lock();
        let peer = st.peer_index(peer_id).map(|i| &st.peers[i]).ok_or(ENOENT)?;
        if peer.epoch != epoch {
            return Err(ENOENT);
        }
        peer.connect(remote)
    }

    pub(crate) fn peer_down(&self, peer_id: u32) -> Result {
        let mut st = self.state.lock();
        let i = st.peer_index(peer_id).ok_or(ENOENT)?;
        st.remove_peer(i)
    }

    /// Status of every peer, down ones included.
    pub(crate) fn peers(&self) -> Result<KVec<LitePeerStatus>> {
        let st = self.state.lock();
        let mut out = KVec::with_capacity(st.peers.len() + st.down.len(), GFP_KERNEL)?;
        for peer in st.peers.iter() {
            out.push(peer.status(), GFP_KERNEL)?;
        }
        for down in st.down.iter() {
            let status = LitePeerStatus {
                id: down.id,
                state: LITE_PEER_DOWN,
                epoch: down.epoch,
                qp_state: [LITE_QPS_NONE; 8],
                ..Default::default()
            };
            out.push(status, GFP_KERNEL)?;
        }
        Ok(out)
    }

    fn peer(&self, id: u32) -> Result<Arc<Peer>> {
        let st = self.state.lock();
        if st.node.is_none() {
            return Err(ENOTCONN());
        }
        match st.peer_index(id) {
            Some(i) => Ok(st.peers[i].clone()),
            None if st.down.iter().any(|d| d.id == id) => Err(EHOSTDOWN()),
            None => Err(ENOENT),
        }
    }

    // ---- data path ----

    /// `count` round trips to `node`, writing each RTT in nanoseconds to `out`.
    pub(crate) fn ping(&self, node: u32, count: u32, timeout_ms: u32, mut out: UserSliceWriter) -> Result {
        let peer = self.peer(node)?;
        for i in 0..count {
            let token = self.pings.lock().start()?;
            let start = Ktime::ktime_get();
            let result = imm::encode(ImmKind::Ping, token)
                .ok_or(EINVAL)
                .and_then(|imm| peer.post_write_imm(i, imm))
                .and_then(|()| self.wait_pong(&peer, token, timeout_ms));
            self.pings.lock().finish(token);
            result?;
            let rtt = (Ktime::ktime_get() - start).to_ns();
            out.write(&(rtt as u64))?;
        }
        Ok(())
    }

    fn wait_pong(&self, peer: &Peer, token: u32, timeout_ms: u32) -> Result {
        let mut left = msecs_to_jiffies(timeout_ms);
        let mut table = self.pings.lock();
        loop {
            if table.answered(token) {
                return Ok(());
            }
            if peer.failed() {
                return Err(EHOSTDOWN());
            }
            match self.ping_answered.wait_interruptible_timeout(&mut table, left) {
                CondVarTimeoutResult::Timeout => return Err(ETIMEDOUT()),
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                CondVarTimeoutResult::Woken { jiffies } => left = jiffies,
            }
        }
    }

    /// A write-with-immediate from `peer` arrived on QP `index` (completion context).
    pub(crate) fn on_recv(&self, peer: &Peer, index: u32, imm: u32) {
        match imm::decode(imm) {
            Some((ImmKind::Ping, token)) => {
                // Answered on the QP it came in on; a peer going away just loses the pong.
                if let Some(pong) = imm::encode(ImmKind::Pong, token) {
                    let _ = peer.post_write_imm(index, pong);
                }
            }
            Some((ImmKind::Pong, token)) => {
                if self.pings.lock().answer(token) {
                    self.ping_answered.notify_all();
                }
            }
            // A peer speaking a kind we do not know: ignore it, never trust it.
            None => {}
        }
    }

    /// A send to `peer` failed (completion context): fail its waiters now.
    pub(crate) fn on_send_error(&self, peer: &Peer, status: i32) {
        if !peer.failed() {
            pr_warn!("send to node {} failed (wc status {}); marking it failed\n", peer.id, status);
        }
        peer.mark_failed();
        let _guard = self.pings.lock();
        self.ping_answered.notify_all();
    }
}
