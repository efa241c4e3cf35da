// SPDX-License-Identifier: GPL-2.0
//! The network of this node: its RDMA devices, its identity and peers (membership,
//! driven by the user-space agent), the loopback peer, ping, and what completions
//! report about peers. The services above reach peers through it; what net needs
//! from them comes through the `Dispatch` that node hands in.

use crate::compat::now_ns;
use crate::errno::{EHOSTDOWN, ENOTCONN};
use crate::kvec::swap_remove;
use crate::net::wire::{MsgKind, SLOTS};
use crate::qos::Qos;
use crate::uapi::*;
use crate::verbs::{Device, PacedStat, RemoteAccess};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::uaccess::UserSliceWriter;

use super::membership::{Identity, State};
use super::peer::MTU_CODES;
use super::{Dispatch, Peer};

/// This node's network: devices, identity, peers.
#[pin_data]
pub(crate) struct Network {
    /// Serializes every membership change; never taken by completion callbacks.
    #[pin]
    pub(crate) state: Mutex<State>,
    pub(crate) qps_per_peer: u32,
    /// Priority classes, their rules and SW-Pri pacing of this node's traffic.
    pub(crate) qos: Arc<Qos>,
    /// Per node: its requests our NIC refused (`on_peer_violation`).
    access_errors: [AtomicU64; LITE_MAX_NODES as usize],
}

impl Network {
    pub(crate) fn new(qps_per_peer: u32, qos: Arc<Qos>) -> Result<Arc<Network>> {
        Arc::pin_init(
            pin_init!(Network {
                state <- new_mutex!(
                    State { node: None, devices: KVec::new(), peers: KVec::new(), down: KVec::new(), loopback: None },
                    "lite:state"
                ),
                qps_per_peer,
                qos,
                access_errors: core::array::from_fn(|_| AtomicU64::new(0)),
            }),
            GFP_KERNEL,
        )
    }

    // ---- devices (ib_client callbacks) ----

    /// A device to use. Its QPs connect by hand (InfiniBand and RoCE) or through
    /// the RDMA CM (iWARP); the first device is the one peers are reached on.
    pub(crate) fn device_added(&self, dev: Arc<Device>) -> Result {
        let mut st = self.state.lock();
        if !st.devices.is_empty() {
            pr_info!(
                "{}: not used; peers are reached on the first RDMA device\n",
                dev.display_name()
            );
        } else if dev.connects_through_cm() {
            pr_info!(
                "{}: its QPs connect through the RDMA CM\n",
                dev.display_name()
            );
        }
        st.devices.push(dev, GFP_KERNEL)?;
        Ok(())
    }

    /// Paced work requests in flight from this node's devices, and their places
    /// over time.
    pub(crate) fn paced_stat(&self) -> PacedStat {
        let st = self.state.lock();
        st.devices
            .iter()
            .fold(PacedStat::default(), |sum, dev| sum + dev.paced_stat())
    }

    /// Shuts down every peer reached through `dev`; they show as down until
    /// rejoined, and (`dispatch`) the services let go of everything of theirs.
    pub(crate) fn device_removing(&self, dispatch: &dyn Dispatch, dev: &Arc<Device>) {
        {
            let mut st = self.state.lock();
            if let Some(i) = st.devices.iter().position(|d| Arc::ptr_eq(d, dev)) {
                swap_remove(&mut st.devices, i);
            }
            while let Some(i) = st.peers.iter().position(|p| Arc::ptr_eq(&p.dev, dev)) {
                if st.remove_peer(i).is_err() {
                    pr_warn!("out of memory recording a peer as down\n");
                }
            }
            st.drop_loopback();
        }
        // One device carries all LMR traffic and memory.
        dispatch.device_gone();
    }

    // ---- what completions report about peers ----

    /// A send to `peer` failed (completion context): fail its waiters now.
    pub(crate) fn on_send_error(&self, peer: &Peer, status: i32) {
        if !peer.failed.load(Ordering::Acquire) {
            pr_warn!(
                "send to node {} failed (wc status {}); marking it failed\n",
                peer.id,
                status
            );
        }
        peer.mark_failed();
    }

    /// `peer`'s QP went to error without a failed send of ours (workqueue): the
    /// NIC refused a request of the peer, which only a key, address or access that
    /// its MRs do not allow causes, or a malformed request. Either way the peer
    /// broke the protocol: it is fenced off at once (and reconnects through the
    /// manager, as after any failure).
    pub(crate) fn on_peer_violation(&self, peer: &Peer) {
        if let Some(count) = self.access_errors.get(peer.id as usize) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        peer.fence("made a request our NIC refused (key, address or access)");
    }

    // ---- membership ----

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
            if let Ok(port) = dev.query_port() {
                info.port_state = port.state;
                info.active_mtu = port.mtu;
            }
            if let Ok((gid, _)) = dev.ip_gid() {
                info.gid = gid;
            }
            info.remote_access = match dev.remote_access() {
                RemoteAccess::Chunks => LITE_REMOTE_ACCESS_CHUNKS,
                RemoteAccess::Global => LITE_REMOTE_ACCESS_GLOBAL,
            };
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

    /// This node leaves the cluster: every peer goes, and with them (`dispatch`)
    /// everything the services kept of them.
    pub(crate) fn leave(&self, dispatch: &dyn Dispatch) {
        {
            let mut st = self.state.lock();
            let peers = core::mem::take(&mut st.peers);
            for peer in peers.iter() {
                peer.shutdown();
            }
            st.down = KVec::new();
            st.drop_loopback();
            st.node = None;
        }
        dispatch.all_gone();
    }

    /// Returns this node's side for `peer_id`'s incarnation `epoch`, creating QPs if
    /// the peer is new or came back with a newer epoch. The bool is true when created.
    pub(crate) fn prepare_peer(
        &self,
        dispatch: &dyn Dispatch,
        peer_id: u32,
        epoch: u64,
    ) -> Result<(LiteConnInfo, bool)> {
        let mut replaced = false;
        let result = self.prepare_peer_locked(dispatch, peer_id, epoch, &mut replaced);
        if replaced {
            // What the previous incarnation mastered died with it.
            dispatch.node_gone(peer_id);
        }
        result
    }

    fn prepare_peer_locked(
        &self,
        dispatch: &dyn Dispatch,
        peer_id: u32,
        epoch: u64,
        replaced: &mut bool,
    ) -> Result<(LiteConnInfo, bool)> {
        let mut st = self.state.lock();
        let me = st
            .node
            .as_ref()
            .map(|n| (n.id, n.epoch))
            .ok_or_else(ENOTCONN)?;
        if peer_id == me.0 || peer_id >= LITE_MAX_NODES {
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
            *replaced = true;
        }
        let dev = st.devices.first().ok_or(ENODEV)?.clone();
        let services = Some(dispatch.peer_services()?);
        let peer = Peer::new(
            &dev,
            me,
            peer_id,
            epoch,
            self.qps_per_peer,
            self.qos.clone(),
            services,
        )?;
        let info = peer.local_info();
        st.peers.push(peer, GFP_KERNEL)?;
        st.forget_down(peer_id);
        Ok((info, true))
    }

    pub(crate) fn connect_peer(&self, peer_id: u32, epoch: u64, remote: &LiteConnInfo) -> Result {
        if remote.nr_qps != self.qps_per_peer
            || !MTU_CODES.contains(&remote.mtu)
            || remote.mailbox_slots != SLOTS as u32
            || remote.mailbox_addr == 0
        {
            return Err(EINVAL);
        }
        let st = self.state.lock();
        let peer = st.peer_index(peer_id).map(|i| &st.peers[i]).ok_or(ENOENT)?;
        if peer.epoch != epoch {
            return Err(ENOENT);
        }
        let caps = peer.dev.caps();
        if remote.transport != caps.transport {
            pr_warn!(
                "node {}'s device speaks transport {}, {} speaks {}: RDMA cannot cross between them\n",
                peer_id,
                remote.transport,
                peer.dev.display_name(),
                caps.transport
            );
            return Err(crate::errno::EPROTONOSUPPORT());
        }
        if (remote.paths ^ caps.flags) & LITE_PATH_HOLDER_ATOMICS != 0 {
            pr_warn!(
                "node {} and this node disagree on who executes atomics (atomics=nic or holder); a word updated by a NIC and a CPU at once is not atomic\n",
                peer_id
            );
            return Err(crate::errno::EPROTO());
        }
        peer.connect(remote)
    }

    pub(crate) fn peer_down(&self, dispatch: &dyn Dispatch, peer_id: u32) -> Result {
        {
            let mut st = self.state.lock();
            let i = st.peer_index(peer_id).ok_or(ENOENT)?;
            st.remove_peer(i)?;
        }
        dispatch.node_gone(peer_id);
        Ok(())
    }

    /// Status of every peer, down ones included.
    pub(crate) fn peers(&self) -> Result<KVec<LitePeerStatus>> {
        let st = self.state.lock();
        let mut out = KVec::with_capacity(st.peers.len() + st.down.len(), GFP_KERNEL)?;
        let errors = |id: u32| {
            self.access_errors
                .get(id as usize)
                .map_or(0, |count| count.load(Ordering::Relaxed))
        };
        for peer in st.peers.iter() {
            let status = LitePeerStatus {
                access_errors: errors(peer.id),
                ..peer.status()
            };
            out.push(status, GFP_KERNEL)?;
        }
        for down in st.down.iter() {
            let status = LitePeerStatus {
                id: down.id,
                state: LITE_PEER_DOWN,
                epoch: down.epoch,
                qp_state: [LITE_QPS_NONE; 8],
                access_errors: errors(down.id),
                ..Default::default()
            };
            out.push(status, GFP_KERNEL)?;
        }
        Ok(out)
    }

    /// This node's id; ENOTCONN before it joined.
    pub(crate) fn me(&self) -> Result<u32> {
        self.state
            .lock()
            .node
            .as_ref()
            .map(|n| n.id)
            .ok_or_else(ENOTCONN)
    }

    /// A peer whose one QP is connected to itself: atomics on memory this node holds
    /// go through it, because RNIC atomics are atomic only against each other
    /// (IB_ATOMIC_HCA), not against the CPU's. Created at first use, again after
    /// a failure, without the membership lock: every peer lookup and listing takes
    /// that, and a QP's set-up and a failed peer's shutdown can take seconds.
    pub(crate) fn loopback(&self) -> Result<Arc<Peer>> {
        let (id, epoch, dev) = {
            let st = self.state.lock();
            let (id, epoch) = st
                .node
                .as_ref()
                .map(|n| (n.id, n.epoch))
                .ok_or_else(ENOTCONN)?;
            if let Some(peer) = &st.loopback {
                if peer.ensure_connected().is_ok() {
                    return Ok(peer.clone());
                }
            }
            (id, epoch, st.devices.first().ok_or(ENODEV)?.clone())
        };
        let peer = Peer::new(&dev, (id, epoch), id, epoch, 1, self.qos.clone(), None)?;
        peer.connect(&peer.local_info())?;
        let (chosen, unused) = {
            let mut st = self.state.lock();
            let same_node = st.node.as_ref().map(|n| (n.id, n.epoch)) == Some((id, epoch));
            let same_device = st.devices.first().is_some_and(|d| Arc::ptr_eq(d, &dev));
            if !same_node || !same_device {
                // The node left, or its device went, meanwhile.
                drop(st);
                peer.shutdown();
                return Err(ENOTCONN());
            }
            match &st.loopback {
                // Another caller replaced a failed one meanwhile.
                Some(current) if current.ensure_connected().is_ok() => {
                    (current.clone(), Some(peer))
                }
                _ => (peer.clone(), st.loopback.replace(peer)),
            }
        };
        if let Some(unused) = unused {
            unused.shutdown();
        }
        Ok(chosen)
    }

    /// The RDMA device LMR memory lives on.
    pub(crate) fn device(&self) -> Result<Arc<Device>> {
        self.state.lock().devices.first().cloned().ok_or(ENODEV)
    }

    /// Every peer whose QPs are connected.
    pub(crate) fn connected_peers(&self) -> Result<KVec<Arc<Peer>>> {
        let peers = {
            let st = self.state.lock();
            let mut peers = KVec::with_capacity(st.peers.len(), GFP_KERNEL)?;
            for peer in st.peers.iter() {
                peers.push(peer.clone(), GFP_KERNEL)?;
            }
            peers
        };
        let mut connected = KVec::with_capacity(peers.len(), GFP_KERNEL)?;
        for peer in peers.into_iter() {
            if peer.ensure_connected().is_ok() {
                connected.push(peer, GFP_KERNEL)?;
            }
        }
        Ok(connected)
    }

    pub(crate) fn peer(&self, id: u32) -> Result<Arc<Peer>> {
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

    /// `count` echo round trips of `payload` bytes to `node`, writing each RTT in
    /// nanoseconds to `out`. A reply that differs from what was sent is EIO.
    pub(crate) fn ping(
        &self,
        node: u32,
        count: u32,
        timeout_ms: u32,
        payload: usize,
        mut out: UserSliceWriter,
    ) -> Result {
        let peer = self.peer(node)?;
        let mut body = KVec::from_elem(0u8, payload, GFP_KERNEL)?;
        let mut reply = KVec::from_elem(0u8, payload, GFP_KERNEL)?;
        for round in 0..count as usize {
            for (i, byte) in body.iter_mut().enumerate() {
                *byte = (round.wrapping_mul(31) ^ i) as u8;
            }
            let start = now_ns();
            let len = peer.call(MsgKind::Echo, &body, &mut reply, timeout_ms)?;
            let rtt = now_ns() - start;
            if len != payload || reply[..] != body[..] {
                return Err(EIO);
            }
            out.write(&rtt)?;
        }
        Ok(())
    }
}
