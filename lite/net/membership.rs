// SPDX-License-Identifier: GPL-2.0
//! The membership table (`Network::state`): this node's identity, its devices,
//! its peers and the ones declared down, and the loopback peer.

use crate::kvec::swap_remove;
use crate::verbs::Device;
use kernel::prelude::*;
use kernel::sync::Arc;

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
    pub(super) fn peer_index(&self, id: u32) -> Option<usize> {
        self.peers.iter().position(|p| p.id == id)
    }

    pub(super) fn forget_down(&mut self, id: u32) {
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
