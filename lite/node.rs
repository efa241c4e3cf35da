// SPDX-License-Identifier: GPL-2.0
//! The node: `Lite`, the module's global state, which every service (net, lmr,
//! rpc, sync, qos) extends with its own `impl Lite` block, its RDMA devices, and
//! the entry from completions into the services.

use crate::ffi;
use crate::kvec::swap_remove;
use crate::lmr::LmrNode;
use crate::net::verbs::{Device, PacedStat};
use crate::net::wire::{self, ImmKind, SLOTS};
use crate::net::{Peer, State};
use crate::qos::Qos;
use crate::rpc::{RpcNode, RpcPeer};
use crate::sync::LockNode;
use crate::uapi::LITE_MAX_NODES;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, ArcBorrow, Mutex};

/// The module's workqueue, for work that may sleep.
pub(crate) fn module_queue() -> &'static kernel::workqueue::Queue {
    // SAFETY: the C glue creates the workqueue before it registers the ib_client and
    // /dev/lite (the only ways into the module) and destroys it after both are gone.
    unsafe { kernel::workqueue::Queue::from_raw(ffi::lite_workqueue().cast()) }
}

/// What each service above net keeps per peer: the peer (net) holds it without
/// knowing the services, which reach it as `peer.services`.
#[pin_data]
pub(crate) struct PeerServices {
    /// Our calls to the peer's RPC servers.
    #[pin]
    pub(crate) rpc: RpcPeer,
}

impl PeerServices {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(PeerServices {
            rpc <- RpcPeer::new(),
        })
    }

    /// The peer failed or was shut down: every service's waiters on it are told.
    pub(crate) fn peer_failed(&self) {
        self.rpc.fail_all();
    }
}

/// The module's global state.
#[pin_data]
pub(crate) struct Lite {
    #[pin]
    pub(crate) state: Mutex<State>,
    /// LMRs: their registries and what serializes allocating their memory.
    #[pin]
    pub(crate) lmr: LmrNode,
    pub(crate) qps_per_peer: u32,
    /// RPC servers of this node and the rings its clients write to.
    #[pin]
    pub(crate) rpc: RpcNode,
    /// Lock and barrier waiters of this node and queued at it.
    #[pin]
    pub(crate) locks: LockNode,
    /// Priority classes, their rules and SW-Pri pacing.
    pub(crate) qos: Arc<Qos>,
    /// Per node: its requests our NIC refused (`on_peer_violation`).
    pub(crate) access_errors: [AtomicU64; LITE_MAX_NODES as usize],
}

impl Lite {
    pub(crate) fn new(qps_per_peer: u32) -> Result<Arc<Lite>> {
        let qos = Qos::new()?;
        Arc::pin_init(
            pin_init!(Lite {
                state <- new_mutex!(
                    State { node: None, devices: KVec::new(), peers: KVec::new(), down: KVec::new(), loopback: None },
                    "lite:state"
                ),
                lmr <- LmrNode::new(),
                qps_per_peer,
                rpc <- RpcNode::new(),
                locks <- LockNode::new(),
                qos,
                access_errors: core::array::from_fn(|_| AtomicU64::new(0)),
            }),
            GFP_KERNEL,
        )
    }

    // ---- devices (ib_client callbacks) ----

    pub(crate) fn device_added(&self, dev: Arc<Device>) -> Result {
        self.state.lock().devices.push(dev, GFP_KERNEL)?;
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

    /// Shuts down every peer reached through `dev`; they show as down until rejoined.
    pub(crate) fn device_removing(&self, dev: &Arc<Device>) {
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
        self.forget_all();
        self.drop_reserve();
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
                Peer::serve_request(peer, this, index as usize, slot as usize)
            }
            Some((ImmKind::Response, slot)) if (slot as usize) < SLOTS => {
                peer.answer_arrived(slot as usize)
            }
            Some((ImmKind::RpcRequest, payload)) => this.on_rpc_request(&peer.into(), payload),
            Some((ImmKind::RpcReply, slot)) => this.on_rpc_reply(&peer, slot as usize),
            Some((ImmKind::RpcHead, payload)) => this.on_rpc_head(&peer, payload),
            // A peer speaking a kind or slot we do not know: ignore it, never trust it.
            _ => {}
        }
    }

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
}
