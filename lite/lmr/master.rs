// SPDX-License-Identifier: GPL-2.0
//! Master side: the LMRs this node allocated (name, extents, permissions, grants,
//! mappers), the lookups, chunk queries, grants and frees peers ask of it, and the
//! revocation that precedes every free.

use crate::compat::cursor_lower_bound_mut;
use crate::errno::EIDRM;
use crate::kvec::truncate;
use crate::net::wire::{self, MsgKind, BODY_MAX};
use crate::uapi::*;
use kernel::prelude::*;

use super::layout::{self, Extent, NAME_LEN, PERM_MASTER};
use super::registry::NameKey;
use super::LmrNode;
use super::{copy_extents, name_key};

/// Per-node grant value meaning "no grant; the public permissions apply".
pub(crate) const NO_GRANT: u8 = 0xFF;

/// An LMR as its master knows it.
pub(crate) struct MasterLmr {
    pub(crate) name: NameKey,
    pub(crate) size: u64,
    pub(crate) extents: KVec<Extent>,
    /// What any node may map with.
    pub(crate) public: u32,
    /// Per-node override of `public` (`NO_GRANT`: none).
    pub(crate) grants: [u8; LITE_MAX_NODES as usize],
    /// Nodes that mapped the LMR: told when it is freed.
    pub(crate) mappers: u32,
}

impl MasterLmr {
    fn allowed(&self, node: u32) -> u32 {
        match self.grants.get(node as usize) {
            Some(&grant) if grant != NO_GRANT => u32::from(grant),
            _ => self.public,
        }
    }

    pub(super) fn holders(&self) -> u32 {
        self.extents.iter().fold(0, |mask, e| mask | 1 << e.node)
    }
}

impl LmrNode {
    /// A node asks for `name` with `perm` (0: only whether it exists).
    pub(crate) fn master_lookup(
        &self,
        node: u32,
        namespace: u32,
        name: &[u8; NAME_LEN],
        perm: u32,
    ) -> Result<wire::Found> {
        let key = name_key(namespace, name)?;
        let mut mem = self.mem.lock();
        let id = *mem.names.get(&key).ok_or(ENOENT)?;
        if id == 0 {
            // Being allocated: taken, not mappable yet.
            return if perm == 0 {
                Ok(wire::Found {
                    id: 0,
                    size: 0,
                    extents: 0,
                })
            } else {
                Err(ENOENT)
            };
        }
        let lmr = mem.lmrs.get_mut(&id).ok_or(ENOENT)?;
        if !layout::perm_allows(lmr.allowed(node), perm) {
            return Err(EACCES);
        }
        if perm != 0 {
            lmr.mappers |= 1 << node;
        }
        Ok(wire::Found {
            id,
            size: lmr.size,
            extents: lmr.extents.len() as u32,
        })
    }

    pub(crate) fn master_extents(&self, id: u64) -> Result<KVec<Extent>> {
        let mem = self.mem.lock();
        copy_extents(&mem.lmrs.get(&id).ok_or(ENOENT)?.extents)
    }

    /// Extents of LMR `id` from `first` on, for a node that mapped it.
    pub(crate) fn master_chunks(&self, node: u32, query: &wire::ChunksQuery) -> Result<KVec<u8>> {
        let mem = self.mem.lock();
        let lmr = mem.lmrs.get(&query.id).ok_or(ENOENT)?;
        if lmr.mappers & (1 << node) == 0 {
            return Err(EACCES);
        }
        let from = (query.first as usize).min(lmr.extents.len());
        let to = (from + wire::EXTENTS_PER_MSG).min(lmr.extents.len());
        let mut list = KVec::with_capacity(to - from, GFP_KERNEL)?;
        for e in &lmr.extents[from..to] {
            list.push(
                wire::WireExtent {
                    node: e.node,
                    rkey: e.rkey,
                    addr: e.addr,
                    len: e.len,
                },
                GFP_KERNEL,
            )?;
        }
        let mut body = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
        let len = wire::encode_extents(&mut body, &list).ok_or(EINVAL)?;
        truncate(&mut body, len);
        Ok(body)
    }

    /// `node` (with master permission) sets what `target` may map LMR `id` with.
    pub(crate) fn master_grant(&self, node: u32, grant: &wire::Grant) -> Result {
        if !layout::perm_known(grant.perm)
            || (grant.node != LITE_NODE_ANY && grant.node >= LITE_MAX_NODES)
        {
            return Err(EINVAL);
        }
        let me = self.net.me()?;
        let mut mem = self.mem.lock();
        let lmr = mem.lmrs.get_mut(&grant.id).ok_or_else(EIDRM)?;
        if node != me && !layout::perm_allows(lmr.allowed(node), PERM_MASTER) {
            return Err(EPERM);
        }
        match grant.node {
            LITE_NODE_ANY => {
                lmr.public = grant.perm;
                lmr.grants = [NO_GRANT; LITE_MAX_NODES as usize];
            }
            target => lmr.grants[target as usize] = grant.perm as u8,
        }
        Ok(())
    }

    /// Frees LMR `id` of this master: forget it, revoke every mapping, release the
    /// memory. Returns ENOENT when it is not (or no longer) registered.
    pub(crate) fn free_lmr(&self, id: u64) -> Result {
        let me = self.net.me()?;
        let holders = self.retire_lmr(me, id)?;
        self.unwind_allocation(me, id, holders);
        Ok(())
    }

    /// Forgets LMR `id` of this master and revokes every mapping of it; returns the
    /// holders, whose memory is the caller's to release. ENOENT when it is not (or no
    /// longer) registered.
    fn retire_lmr(&self, me: u32, id: u64) -> Result<u32> {
        let lmr = {
            let mut mem = self.mem.lock();
            let lmr = mem.lmrs.remove(&id).ok_or(ENOENT)?;
            mem.names.remove(&lmr.name);
            lmr
        };
        for node in (0..LITE_MAX_NODES).filter(|n| lmr.mappers & (1 << n) != 0) {
            if node == me {
                self.revoke_local(me, id);
            } else if let Ok(peer) = self.net.peer(node) {
                // A mapper that cannot be told is fenced off before the memory goes.
                let _ = peer.confirm(MsgKind::Revoke, &wire::LmrId { id });
            }
        }
        Ok(lmr.holders())
    }

    /// Node `node` is gone, and its mappings with it: no free of an LMR of this
    /// master waits for it (its next incarnation, maybe connecting by then, never
    /// mapped them).
    pub(crate) fn forget_mapper(&self, node: u32) {
        let mut mem = self.mem.lock();
        for (_, lmr) in mem.lmrs.iter_mut() {
            lmr.mappers &= !(1 << node);
        }
    }

    /// Node `node`, which held memory of LMRs this node masters, is gone: those
    /// LMRs lost part of their memory, and the extents peers would look up point
    /// at addresses the node's next incarnation may reuse. Each is freed: retired
    /// (every mapping revoked) and its memory released at the holders left.
    pub(crate) fn retire_held_by(&self, node: u32) {
        let Ok(me) = self.net.me() else { return };
        let mut from = 0;
        while let Some(id) = self.next_held_by(node, from) {
            from = id + 1;
            if let Ok(holders) = self.retire_lmr(me, id) {
                self.unwind_allocation(me, id, holders & !(1 << node));
            }
        }
    }

    /// The first LMR of this master from id `from` on with memory on `node`.
    fn next_held_by(&self, node: u32, from: u64) -> Option<u64> {
        let mut mem = self.mem.lock();
        let mut cursor = cursor_lower_bound_mut(&mut mem.lmrs, &from);
        while let Some(c) = cursor {
            let (&id, lmr) = c.current();
            if lmr.holders() & (1 << node) != 0 {
                return Some(id);
            }
            cursor = c.move_next();
        }
        None
    }

    /// Frees LMRs `ids` of this master, as `free_lmr` each (ids freed already are
    /// skipped), but tells each remote holder in lists of up to `IDS_PER_MSG`: a
    /// process that exits with 100 000 LMRs costs hundreds of round trips, not
    /// 100 000.
    pub(crate) fn free_lmrs(&self, ids: &[u64]) {
        let Ok(me) = self.net.me() else { return };
        // (holder, id) for the remote holders, and a message body.
        let (Ok(mut remote), Ok(mut body)) = (
            KVec::with_capacity(ids.len(), GFP_KERNEL),
            KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL),
        ) else {
            // No memory for the lists: a round trip per LMR.
            for &id in ids {
                let _ = self.free_lmr(id);
            }
            return;
        };
        for &id in ids {
            let Ok(holders) = self.retire_lmr(me, id) else {
                continue;
            };
            for node in (0..LITE_MAX_NODES).filter(|n| holders & (1 << n) != 0) {
                if node == me {
                    self.release(me, id);
                } else {
                    // Within the capacity reserved above: cannot fail.
                    let _ = remote.push((node, id), GFP_KERNEL);
                }
            }
        }
        for node in 0..LITE_MAX_NODES {
            let Ok(peer) = self.net.peer(node) else {
                continue;
            };
            let mut held = remote
                .iter()
                .filter(|(holder, _)| *holder == node)
                .map(|(_, id)| *id)
                .peekable();
            while held.peek().is_some() {
                let Some(len) = wire::encode_ids(&mut body, &mut held) else {
                    break;
                };
                // A signal must not leave the memory held: a holder that cannot be
                // told is fenced off, and frees everything it held for us.
                let _ = peer.confirm_bytes(MsgKind::ReleaseMany, &body[..len]);
            }
        }
    }

    /// `node` (with master permission) frees LMR `id` of this master.
    pub(crate) fn master_free(&self, node: u32, id: u64) -> Result {
        {
            let mem = self.mem.lock();
            let lmr = mem.lmrs.get(&id).ok_or_else(EIDRM)?;
            if !layout::perm_allows(lmr.allowed(node), PERM_MASTER) {
                return Err(EPERM);
            }
        }
        self.free_lmr(id).map_err(|_| EIDRM())
    }

    /// Mappings of (`master`, `id`) on this node fail from now on with EIDRM.
    pub(crate) fn revoke_local(&self, master: u32, id: u64) {
        let maps = self.mem.lock().take_maps(master, Some(id));
        for mapping in maps.iter() {
            mapping.revoke(EIDRM());
        }
    }
}
