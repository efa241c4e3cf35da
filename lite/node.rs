// SPDX-License-Identifier: GPL-2.0
//! The node: `Lite`, the module's global state. It owns the layers below it (the
//! network and the services: LMRs, locks, RPC), wires them together, and is the
//! `Dispatch` through which net hands peers' requests and departures up to the
//! services without importing them.

use crate::lmr::{LmrEvents, LmrNode};
use crate::locks::LockNode;
use crate::net::wire::{self, ImmKind, LockReq, LockWake, MsgKind, SLOTS};
use crate::net::{Dispatch, Network, Peer, PeerServices};
use crate::qos::Qos;
use crate::rpc::{RpcNode, RpcPeer};
use crate::uapi::LITE_MAX_NODES;
use crate::verbs::Device;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};

/// The module's global state.
pub(crate) struct Lite {
    /// Devices, identity, peers, and the priority classes (`net.qos`).
    pub(crate) net: Arc<Network>,
    /// LMRs: their registries and what serializes allocating their memory.
    pub(crate) lmr: Arc<LmrNode>,
    /// Lock and barrier waiters of this node and queued at it.
    pub(crate) locks: Arc<LockNode>,
    /// RPC servers of this node and the rings its clients write to.
    pub(crate) rpc: Arc<RpcNode>,
}

impl Lite {
    /// The module's `Lite` from the C glue's context pointer (`lite_ctx`), for the
    /// callbacks of `lite_main.rs` and the kernel API's entry points (`kapi.rs`).
    ///
    /// # Safety
    /// `ctx` is the pointer passed to `lite_glue_init`, and the call runs before
    /// `lite_glue_exit` returns (a module calling the kernel API holds `lite.ko`
    /// loaded, so this holds for all of its calls).
    pub(crate) unsafe fn from_ctx<'a>(ctx: *mut core::ffi::c_void) -> &'a Lite {
        // SAFETY: guaranteed by the caller.
        unsafe { &*(ctx as *const Lite) }
    }

    pub(crate) fn new(qps_per_peer: u32) -> Result<Arc<Lite>> {
        let qos = Qos::new()?;
        let net = Network::new(qps_per_peer, qos)?;
        let lmr = LmrNode::new(net.clone())?;
        let locks = LockNode::new(net.clone(), lmr.clone())?;
        let rpc = RpcNode::new(net.clone())?;
        let events: Arc<dyn LmrEvents> = locks.clone();
        lmr.set_events(Some(events));
        Ok(Arc::new(
            Lite {
                net,
                lmr,
                locks,
                rpc,
            },
            GFP_KERNEL,
        )?)
    }

    /// Undoes what `new` wired (the locks listening to lmr, a reference cycle),
    /// once nothing can call into the module any more.
    pub(crate) fn unwire(&self) {
        self.lmr.set_events(None);
    }

    pub(crate) fn device_removing(&self, dev: &Arc<Device>) {
        self.net.device_removing(self, dev);
    }

    /// A write-with-immediate from `peer` arrived on QP `index` (completion context).
    pub(crate) fn on_recv(
        this: ArcBorrow<'_, Self>,
        peer: ArcBorrow<'_, Peer>,
        index: u32,
        imm: u32,
    ) {
        match wire::decode_imm(imm) {
            Some((ImmKind::Request, slot)) if (slot as usize) < SLOTS => {
                let dispatch: Arc<dyn Dispatch> = Arc::from(this);
                Peer::serve_request(peer, dispatch, index as usize, slot as usize)
            }
            Some((ImmKind::Response, slot)) if (slot as usize) < SLOTS => {
                peer.answer_arrived(slot as usize)
            }
            Some((ImmKind::RpcRequest, payload)) => this.rpc.on_rpc_request(&peer.into(), payload),
            Some((ImmKind::RpcReply, slot)) => this.rpc.on_rpc_reply(&peer, slot as usize),
            Some((ImmKind::RpcHead, payload)) => this.rpc.on_rpc_head(&peer, payload),
            // A peer speaking a kind or slot we do not know: ignore it, never trust it.
            _ => {}
        }
    }

    fn serve_lock(&self, from: u32, body: &[u8]) -> Result<KVec<u8>> {
        let req: LockReq = crate::lmr::decode(body)?;
        let answer = self.locks.serve_lock(from, &req)?;
        let mut out = KVec::new();
        out.extend_from_slice(&answer.to_le_bytes(), GFP_KERNEL)?;
        Ok(out)
    }
}

/// Net's way up: each peer request goes to the service of its kind, and a node's
/// departure reaches every service, LMRs first (their memory goes before the
/// queues and calls that referred to it).
impl Dispatch for Lite {
    fn serve(&self, peer: &Arc<Peer>, kind: MsgKind, body: &[u8]) -> Result<KVec<u8>> {
        match kind {
            MsgKind::RpcBind | MsgKind::RpcUnbind | MsgKind::RpcHead => {
                self.rpc.serve_rpc_request(peer, kind, body)
            }
            MsgKind::Lock => self.serve_lock(peer.id, body),
            MsgKind::LockWake => {
                let wake: LockWake = crate::lmr::decode(body)?;
                self.locks.lock_woken(peer.id, &wake).map(|()| KVec::new())
            }
            _ => self.lmr.serve_lmr_request(peer, kind, body),
        }
    }

    fn peer_services(&self) -> Result<Arc<dyn PeerServices>> {
        let rpc: Arc<RpcPeer> = Arc::pin_init(RpcPeer::new(), GFP_KERNEL)?;
        Ok(rpc)
    }

    fn node_gone(&self, node: u32) {
        self.lmr.forget_node(node);
        self.locks.forget_node(node);
        self.rpc.forget_node(node);
    }

    fn all_gone(&self) {
        self.lmr.forget_all();
        for node in 0..LITE_MAX_NODES {
            self.locks.forget_node(node);
            self.rpc.forget_node(node);
        }
    }

    fn device_gone(&self) {
        self.all_gone();
        self.lmr.drop_reserve();
    }
}
