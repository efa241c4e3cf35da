// SPDX-License-Identifier: GPL-2.0
//! Requests from peers (module workqueue): binding a client to a ring,
//! reporting a ring's head, and unbinding; forgetting a node that is gone.

use super::ring::{ServerRing, RING_BYTES};
use super::server::ServerBinding;
use super::RpcNode;
use super::RpcPeer;
use super::{jiffies_until, now_ns, RING_CHUNK_MIN};
use crate::errno::{ECONNREFUSED, ETIMEDOUT};
use crate::kvec::truncate;
use crate::lmr::layout::{self, Extent};
use crate::net::wire::{
    self, Body, Bound, MsgKind, Reader, RpcBind, RpcUnbind, Writer, BINDINGS, RING_CHUNKS,
};
use crate::net::{Peer, CONTROL_TIMEOUT_MS};
use crate::verbs::{DmaBuf, REMOTE_WRITE};
use kernel::prelude::*;
use kernel::sync::{new_spinlock, Arc};

impl RpcNode {
    /// Serves `RpcBind`, `RpcUnbind` and `RpcHead`; returns the answer's body.
    pub(crate) fn serve_rpc_request(
        &self,
        peer: &Arc<Peer>,
        kind: MsgKind,
        body: &[u8],
    ) -> Result<KVec<u8>> {
        let mut out = KVec::from_elem(0u8, wire::BODY_MAX, GFP_KERNEL)?;
        let len = match kind {
            MsgKind::RpcBind => {
                let req = RpcBind::decode(&mut Reader::new(body)).ok_or(EINVAL)?;
                let bound = self.bind_client(peer, req.id)?;
                let mut w = Writer::new(&mut out);
                bound.encode(&mut w).ok_or(EINVAL)?;
                w.len()
            }
            MsgKind::RpcHead => {
                let req = RpcUnbind::decode(&mut Reader::new(body)).ok_or(EINVAL)?;
                let binding = self
                    .binding(req.binding as usize)
                    .filter(|b| Arc::ptr_eq(&b.peer, peer) && b.id == req.id)
                    .ok_or(ENOENT)?;
                let head = binding.head_for_reply();
                out[..8].copy_from_slice(&head.to_le_bytes());
                8
            }
            MsgKind::RpcUnbind => {
                let req = RpcUnbind::decode(&mut Reader::new(body)).ok_or(EINVAL)?;
                self.unbind_from(peer, req.binding)?;
                0
            }
            _ => return Err(EINVAL),
        };
        truncate(&mut out, len);
        Ok(out)
    }

    /// The ring for `peer`'s calls to `id`, made on its first call.
    fn bind_client(&self, peer: &Arc<Peer>, id: u32) -> Result<Bound> {
        if self.server(id).is_none() {
            return Err(ECONNREFUSED());
        }
        let existing = {
            let table = self.bindings.lock();
            table
                .iter()
                .flatten()
                .find(|b| Arc::ptr_eq(&b.peer, peer) && b.id == id)
                .cloned()
        };
        let binding = match existing {
            Some(b) => b,
            None => self.new_binding(peer, id)?,
        };
        let mut bound = Bound {
            binding: binding.index as u32,
            head: binding.head_for_reply(),
            count: 0,
            chunks: [(0, 0, 0); RING_CHUNKS],
        };
        for (slot, e) in bound.chunks.iter_mut().zip(binding.extents.iter()) {
            *slot = (e.addr, e.len, e.rkey);
            bound.count += 1;
        }
        Ok(bound)
    }

    fn new_binding(&self, peer: &Arc<Peer>, id: u32) -> Result<Arc<ServerBinding>> {
        let dev = self.net.device()?;
        let me = self.net.me()?;
        let (mut chunks, mut extents) = (KVec::new(), KVec::new());
        let mut at = 0u64;
        let mut try_len = layout::CHUNK_MAX;
        while at < RING_BYTES {
            if chunks.len() == RING_CHUNKS {
                return Err(ENOMEM);
            }
            let len = try_len.min(RING_BYTES - at);
            match DmaBuf::try_new(&dev, len as usize) {
                Ok(mut chunk) => {
                    // The client writes its records; nothing else reaches the ring.
                    let rkey = chunk.expose(0, len as usize, REMOTE_WRITE)?;
                    extents.push(
                        Extent {
                            node: me,
                            start: at,
                            addr: chunk.dma(),
                            len,
                            rkey,
                        },
                        GFP_KERNEL,
                    )?;
                    chunks.push(chunk, GFP_KERNEL)?;
                    at += len;
                }
                Err(_) if len > RING_CHUNK_MIN => try_len = len / 2,
                Err(e) => return Err(e),
            }
        }
        let _serial = self.bind_lock.lock();
        let index = {
            let mut bindings = self.bindings.lock();
            match bindings.iter().position(|b| b.is_none()) {
                Some(i) => i,
                None if bindings.len() < BINDINGS => {
                    bindings.push(None, GFP_ATOMIC)?;
                    bindings.len() - 1
                }
                None => return Err(ENOSPC),
            }
        };
        let binding = Arc::pin_init(
            pin_init!(ServerBinding {
                index,
                id,
                peer: peer.clone(),
                chunks,
                extents,
                ring <- new_spinlock!(ServerRing::new(RING_BYTES), "lite:rpc.ring"),
            }),
            GFP_KERNEL,
        )?;
        let mut bindings = self.bindings.lock();
        // Under the table's lock, which an unregister takes only after it removed the
        // server: it either finds this ring or removed the server before this check.
        // A ring made for a server gone meanwhile would be freed by nobody.
        if self.server(id).is_none() {
            return Err(ECONNREFUSED());
        }
        match bindings.get_mut(index) {
            Some(entry @ None) => *entry = Some(binding.clone()),
            _ => return Err(EBUSY),
        }
        Ok(binding)
    }

    /// The server of `peer` unbound our binding `index`: no new call uses it, and
    /// the answer goes once every call that reserved room in it has ended.
    /// ETIMEDOUT while writers still use the ring at the deadline: the server
    /// must not free it then.
    fn unbind_from(&self, peer: &Peer, index: u32) -> Result {
        let Some(binding) = RpcPeer::of(peer)?.by_index(index) else {
            return Ok(());
        };
        binding.kill();
        let deadline = now_ns() + u64::from(CONTROL_TIMEOUT_MS) * 1_000_000;
        let mut st = binding.state.lock();
        while st.users > 0 {
            let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
            let _ = binding.changed.wait_interruptible_timeout(&mut st, left);
        }
        Ok(())
    }

    /// Node `node` is gone: the rings its calls came through are freed (its QPs
    /// are destroyed, so nothing writes into them any more).
    pub(crate) fn forget_node(&self, node: u32) {
        drop(self.take_bindings(|b| b.peer.id == node));
    }
}
