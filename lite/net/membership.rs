// SPDX-License-Identifier: GPL-2.0
//! Membership, driven by the user-space agent: this node's identity, its peers
//! (and the ones declared down), the loopback peer, and the ping over them.

use crate::compat::now_ns;
use crate::errno::{EHOSTDOWN, ENOTCONN};
use crate::kvec::swap_remove;
use crate::net::verbs::{Device, RemoteAccess};
use crate::net::wire::{MsgKind, SLOTS};
use crate::node::Lite;
use crate::uapi::*;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::uaccess::UserSliceWriter;

use super::peer::MTU_CODES;
use super::Peer;

pub(crate) struct Identity {
    pub(crate) id: u32,
    pub(crate) epoch: u64,
}

/// A peer the manager declared down, kept so that status can show it.
pub(crate) struct DownPeer {
    pub(crate) id: u32,
    pub(crate) epoch: u64,
}

pub(crate) struct State {
    pub(crate) node: Option<Identity>,
    pub(crate) devices: KVec<Arc<Device>>,
    pub(crate) peers: KVec<Arc<Peer>>,
    pub(crate) down: KVec<DownPeer>,
    /// One QP connected to itself, for atomics on memory this node holds.
    pub(crate) loopback: Option<Arc<Peer>>,
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
    pub(crate) fn remove_peer(&mut self, index: usize) -> Result {
        let peer = swap_remove(&mut self.peers, index);
        peer.shutdown();
        self.forget_down(peer.id);
        self.down.push(
            DownPeer {
                id: peer.id,
                epoch: peer.epoch,
            },
            GFP_KERNEL,
        )?;
        Ok(())
    }

    pub(crate) fn drop_loopback(&mut self) {
        if let Some(peer) = self.loopback.take() {
            peer.shutdown();
        }
    }
}

impl Lite {
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
            if let Ok((gid, _)) = dev.roce_gid() {
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

    pub(crate) fn leave(&self) {
        {
            let mut st = self.state.lock();
            let peers = core::mem::replace(&mut st.peers, KVec::new());
            for peer in peers.iter() {
                peer.shutdown();
            }
            st.down = KVec::new();
            st.drop_loopback();
            st.node = None;
        }
        self.forget_all();
    }

    /// Returns this node's side for `peer_id`'s incarnation `epoch`, creating QPs if
    /// the peer is new or came back with a newer epoch. The bool is true when created.
    pub(crate) fn prepare_peer(&self, peer_id: u32, epoch: u64) -> Result<(LiteConnInfo, bool)> {
        let mut replaced = false;
        let result = self.prepare_peer_locked(peer_id, epoch, &mut replaced);
        if replaced {
            // What the previous incarnation mastered died with it.
            self.forget_node(peer_id);
        }
        result
    }

    fn prepare_peer_locked(
        &self,
        peer_id: u32,
        epoch: u64,
        replaced: &mut bool,
    ) -> Result<(LiteConnInfo, bool)> {
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
            *replaced = true;
        }
        let dev = st.devices.first().ok_or(ENODEV)?.clone();
        let peer = Peer::new(&dev, peer_id, epoch, self.qps_per_peer, self.qos.clone())?;
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
        peer.connect(remote)
    }

    pub(crate) fn peer_down(&self, peer_id: u32) -> Result {
        {
            let mut st = self.state.lock();
            let i = st.peer_index(peer_id).ok_or(ENOENT)?;
            st.remove_peer(i)?;
        }
        self.forget_node(peer_id);
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

    /// The `Arc` this `Lite` lives in, for work queued beyond the caller.
    pub(crate) fn arc(&self) -> Arc<Lite> {
        // SAFETY: `Lite::new` (the only constructor) puts it in an `Arc` the module keeps
        // until every callback and file is gone, so the count is not zero while `&self` lives.
        unsafe { ArcBorrow::from_raw(self as *const Lite) }.into()
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
        let peer = Peer::new(&dev, id, epoch, 1, self.qos.clone())?;
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
