// SPDX-License-Identifier: GPL-2.0
//! Holder side: memory this node holds for LMRs (physically contiguous chunks,
//! each exposed to peers under its own key), bounded by a share of its RAM, and
//! what a holder does for peers (memset, copy) and when a master goes away.

use crate::compat::cursor_lower_bound_mut;
use crate::errno::{EHOSTDOWN, EIDRM};
use crate::kvec::caller_sized;
use crate::net::wire::{self, MsgKind};
use crate::uapi::*;
use crate::verbs::{DmaBuf, REMOTE_ATOMIC, REMOTE_READ, REMOTE_WRITE};
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::Arc;

use super::layout::{self, CHUNK_MAX, NAME_LEN};
use super::reserve::zero_chunks;
use super::LmrNode;

/// A peer may not make this node hold more than this share of its RAM.
const HOLD_SHARE_NUM: u64 = 3;
const HOLD_SHARE_DEN: u64 = 4;

/// Bytes of LMR memory this node may hold.
pub(crate) fn hold_limit() -> u64 {
    // SAFETY: reads a global counter.
    let ram = unsafe { crate::ffi::lite_total_ram() };
    ram / HOLD_SHARE_DEN * HOLD_SHARE_NUM
}

/// What peers may do to LMR memory through its keys (the master checks each
/// mapper's permissions; the NIC only the range).
pub(crate) const LMR_ACCESS: u32 = REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC;

/// Memory this node holds for one LMR, from one allocation request. Its chunks'
/// keys are revoked when the last user lets go (the registry, a mapping here, a
/// lock's owner working on a word of it).
pub(crate) struct Held {
    pub(crate) chunks: KVec<DmaBuf>,
    pub(crate) bytes: u64,
}

/// Everything this node holds for one LMR, as seen by a mapping.
pub(crate) struct LocalMemory {
    pub(crate) parts: KVec<Arc<Held>>,
}

impl LocalMemory {
    /// The chunk holding DMA range `[addr, addr + len)` and the offset in it.
    pub(crate) fn find(&self, addr: u64, len: u64) -> Result<(&DmaBuf, usize)> {
        self.parts
            .iter()
            .flat_map(|part| part.chunks.iter())
            .find_map(|c| c.offset_of(addr, len).map(|off| (c, off)))
            .ok_or(EINVAL)
    }
}

impl LmrNode {
    /// Allocates up to `bytes` (at most `max_extents` chunks) for LMR (`master`, `id`)
    /// and returns the new extents. Never fewer than one chunk.
    pub(crate) fn hold(
        &self,
        master: u32,
        id: u64,
        bytes: u64,
        max_extents: usize,
    ) -> Result<KVec<wire::WireExtent>> {
        let me = self.net.me()?;
        // Serialized with device removal, which frees what is held on the device.
        let _serial = self.alloc_lock.lock();
        let dev = self.net.device()?;
        let want = bytes.min(max_extents as u64 * CHUNK_MAX);
        {
            let mut mem = self.mem.lock();
            // The whole share must fit, not only this part of it: fail before allocating.
            if bytes > hold_limit().saturating_sub(mem.held_bytes) {
                return Err(ENOMEM);
            }
            mem.held_bytes += want;
        }
        let mut chunks = KVec::new();
        let mut extents = KVec::new();
        let mut left = want;
        let mut limit = CHUNK_MAX;
        let mut result = Ok(());
        // Whole chunks come zeroed from the reserve while it lasts, the others zeroed
        // by all CPUs at once; what that leaves (a tail, or chunks memory was short
        // of) is allocated one by one below.
        let whole = ((want / CHUNK_MAX) as usize).min(max_extents);
        let mut ready = KVec::with_capacity(whole, caller_sized())?;
        {
            let mut mem = self.mem.lock();
            while ready.len() < whole {
                let Some(chunk) = mem.take_reserved() else {
                    break;
                };
                // Within the capacity reserved above: does not allocate.
                ready.push(chunk, GFP_KERNEL)?;
            }
        }
        let missing = whole - ready.len();
        let mut ready = Iterator::chain(ready.into_iter(), zero_chunks(&dev, missing));
        // Each chunk with the bytes of it the LMR uses.
        let mut used = KVec::new();
        while left > 0 && used.len() < max_extents {
            let Some(len) = layout::next_chunk_len(left, limit) else {
                result = Err(ENOMEM);
                break;
            };
            let prepared = if len == CHUNK_MAX { ready.next() } else { None };
            match prepared.map_or_else(|| DmaBuf::try_new(&dev, len as usize), Ok) {
                Ok(chunk) => {
                    let bytes = len.min(left);
                    if let Err(e) = used.push((chunk, bytes as usize), GFP_KERNEL) {
                        result = Err(e.into());
                        break;
                    }
                    left -= bytes;
                }
                Err(_) => limit = len / 2,
            }
        }
        // Peers' keys to all of them at once: each is a registration at the NIC,
        // and waiting for them one by one took most of an allocation from the reserve.
        if result.is_ok() {
            result = DmaBuf::expose_each(&dev, &mut used, LMR_ACCESS).and_then(|rkeys| {
                for ((chunk, bytes), rkey) in used.into_iter().zip(rkeys) {
                    let extent = wire::WireExtent {
                        node: me,
                        rkey,
                        addr: chunk.dma(),
                        len: bytes as u64,
                    };
                    extents.push(extent, GFP_KERNEL)?;
                    chunks.push(chunk, GFP_KERNEL)?;
                }
                Ok(())
            });
        }
        let got = want - left;
        self.refill_reserve_later();
        let mut mem = self.mem.lock();
        mem.held_bytes -= left;
        let held = result.and_then(|()| Ok(Arc::new(Held { chunks, bytes: got }, GFP_KERNEL)?));
        let inserted = held.and_then(|held| {
            let seq = mem.seq();
            mem.held
                .try_create_and_insert((master, id, seq), held, GFP_KERNEL)?;
            Ok(())
        });
        if let Err(e) = inserted {
            mem.held_bytes -= got;
            return Err(e);
        }
        Ok(extents)
    }

    /// Frees what this node holds for (`master`, `id`): out of the registry first,
    /// so that no lock or barrier queue is made for it any more, then its queues
    /// (the memory stays until an owner working on one of its words is done).
    pub(crate) fn release(&self, master: u32, id: u64) {
        {
            // After an allocation for it still running (a master that gave up
            // waiting for it): otherwise that would hold memory nobody releases.
            let _serial = self.alloc_lock.lock();
            self.mem.lock().release_held(master, Some(id));
        }
        self.events_released(master, id);
        // A reserve that stopped at the hold limit may grow again.
        self.refill_reserve_later();
    }

    /// Node `node` is gone (or this node left): what it mastered is unreachable, so
    /// its mappings fail and the memory held for it is freed; and what it held is
    /// gone with it, so every mapping that reaches it fails and the LMRs this node
    /// masters with memory on it are freed (`retire_held_by`). Its next incarnation
    /// may reuse those addresses for anything: no RDMA may reach them again.
    ///
    /// Other nodes may still map memory held here for `node` and write to it, so
    /// they are told to fail those mappings (and wait for their operations) before
    /// the memory is freed. A node that cannot be told is fenced off: its QPs to us
    /// are drained (`Peer::fence`) or destroyed.
    pub(crate) fn forget_node(&self, node: u32) {
        self.revoke_master(node);
        self.revoke_reaching(node);
        self.forget_mapper(node);
        self.retire_held_by(node);
        let holds = {
            let mut mem = self.mem.lock();
            cursor_lower_bound_mut(&mut mem.held, &(node, 0, 0))
                .is_some_and(|c| c.current().0 .0 == node)
        };
        if holds {
            if let Ok(peers) = self.net.connected_peers() {
                for peer in peers.iter().filter(|p| p.id != node) {
                    let _ = peer.confirm(MsgKind::Forget, &wire::LmrId { id: node.into() });
                }
            }
        }
        // As in `release`: the memory out of the registry, then the queues.
        self.mem.lock().release_held(node, None);
    }

    /// Mappings of every LMR of `master` on this node fail from now on.
    pub(crate) fn revoke_master(&self, master: u32) {
        let maps = self.mem.lock().take_maps(master, None);
        for mapping in maps.iter() {
            mapping.revoke(EHOSTDOWN());
        }
    }

    /// Mappings on this node with memory on `holder` fail from now on.
    fn revoke_reaching(&self, holder: u32) {
        let maps = self.mem.lock().take_maps_reaching(holder);
        for mapping in maps.iter() {
            mapping.revoke(EHOSTDOWN());
        }
    }

    /// The device went away or this node left: revoke every mapping, free all memory
    /// held, and forget the LMRs this node mastered, whose memory elsewhere the other
    /// nodes free when they see this incarnation go.
    pub(crate) fn forget_all(&self) {
        let _serial = self.alloc_lock.lock();
        {
            // First, so that `forget_node` finds no LMR of this master to retire.
            let mut mem = self.mem.lock();
            mem.lmrs = RBTree::new();
            // Names being allocated (id 0) stay: their allocation removes them.
            let mut cursor = cursor_lower_bound_mut(&mut mem.names, &(0, [0; NAME_LEN]));
            while let Some(c) = cursor {
                cursor = if *c.current().1 != 0 {
                    c.remove_current().0
                } else {
                    c.move_next()
                };
            }
        }
        for node in 0..LITE_MAX_NODES {
            self.forget_node(node);
        }
    }

    /// What this node holds for (`master`, `id`); EIDRM when nothing (any more):
    /// a request racing the LMR's free.
    pub(crate) fn held_memory(&self, master: u32, id: u64) -> Result<Arc<LocalMemory>> {
        self.mem.lock().local_memory(master, id)?.ok_or_else(EIDRM)
    }

    pub(crate) fn holder_memset(&self, req: &wire::Memset) -> Result {
        let value = u8::try_from(req.value).map_err(|_| EINVAL)?;
        let local = self.held_memory(req.master, req.id)?;
        let (chunk, off) = local.find(req.addr, req.len)?;
        chunk.fill(off, req.len as usize, value)
    }

    pub(crate) fn holder_copy(&self, req: &wire::Copy) -> Result {
        let me = self.net.me()?;
        let src = self.held_memory(req.src_master, req.src_id)?;
        let (chunk, off) = src.find(req.src_addr, req.len)?;
        if req.dst_node == me {
            let dst = self.held_memory(req.dst_master, req.dst_id)?;
            let (to, to_off) = dst.find(req.dst_addr, req.len)?;
            to.move_from(to_off, chunk, off, req.len as usize)
        } else {
            // The destination's NIC checks the key: it reaches only that LMR chunk.
            self.net.peer(req.dst_node)?.rdma_write_kernel(
                chunk,
                off,
                req.len as usize,
                req.dst_addr,
                req.dst_rkey,
            )
        }
    }
}
