// SPDX-License-Identifier: GPL-2.0
//! LT_malloc and LT_register: a new LMR's name checked free cluster-wide, its
//! memory allocated at its holders (or the caller's buffer pinned), registered here.

use crate::errno::EHOSTDOWN;
use crate::kvec::caller_sized;
use crate::net::wire::{self, MsgKind, BODY_MAX};
use crate::net::Peer;
use crate::uapi::*;
use crate::verbs::{DmaBuf, PAGE_SIZE};
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

use super::handles::FileLmrs;
use super::holder::{hold_limit, Held, LMR_ACCESS};
use super::layout::{self, Extent, NAME_LEN, PERM_ALL};
use super::mapping::Mapping;
use super::master::{MasterLmr, NO_GRANT};
use super::registry::NameKey;
use super::LmrNode;
use super::{copy_extents, name_key};

/// What a Lookup answer says about whether a name is free elsewhere.
fn name_answer(answer: Result<usize>) -> Result {
    match answer {
        Ok(_) => Err(EEXIST),
        Err(e) if e == ENOENT => Ok(()),
        // A node we cannot ask cannot hand the name out either.
        Err(e) if e == EHOSTDOWN() || e == crate::errno::ETIMEDOUT() => Ok(()),
        // EINTR, ENOMEM, ...: the name's state is unknown, and not EEXIST.
        Err(e) => Err(e),
    }
}

/// One holder's part of a new LMR while it is being allocated.
struct Share {
    pub(crate) node: u32,
    /// Bytes not allocated yet.
    pub(crate) left: u64,
    /// The chunks allocated so far, in LMR order.
    pub(crate) got: KVec<wire::WireExtent>,
}

impl Share {
    /// Adds the chunks a holder handed out; a holder that hands out nothing is out
    /// of memory, one that hands out more than asked is broken.
    pub(crate) fn take(&mut self, chunks: impl Iterator<Item = wire::WireExtent>) -> Result {
        let before = self.left;
        for chunk in chunks {
            if chunk.len > self.left {
                return Err(EIO);
            }
            self.got.push(chunk, GFP_KERNEL)?;
            self.left -= chunk.len;
        }
        if self.left == before {
            return Err(ENOMEM);
        }
        Ok(())
    }
}

/// Where a new LMR's memory comes from.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    /// Allocated at these holder nodes (bitmask; 0: this node).
    Holders(u32),
    /// The caller's buffer at this address (LT_register).
    User(usize),
}

/// Arguments of LT_malloc and LT_register, checked by the caller for reserved fields.
pub(crate) struct MallocArgs {
    pub(crate) size: u64,
    pub(crate) nodes: u32,
    pub(crate) perm: u32,
    pub(crate) namespace: u32,
    pub(crate) name: [u8; NAME_LEN],
}

impl LmrNode {
    /// LT_malloc: allocates the LMR at its holders and returns the master handle.
    pub(crate) fn malloc(&self, file: &Mutex<FileLmrs>, args: &MallocArgs) -> Result<u64> {
        if args.nodes >> LITE_MAX_NODES != 0 {
            return Err(EINVAL);
        }
        if args.size > LITE_LMR_MAX_SIZE {
            return Err(ENOMEM);
        }
        self.create_lmr(file, args, Source::Holders(args.nodes))
    }

    /// LT_register: the caller's buffer `[buf, buf + size)` becomes an LMR held by
    /// this node; returns the master handle.
    pub(crate) fn register(
        &self,
        file: &Mutex<FileLmrs>,
        buf: usize,
        args: &MallocArgs,
    ) -> Result<u64> {
        if args.size > LITE_REGISTER_MAX_SIZE {
            return Err(ENOMEM);
        }
        self.create_lmr(file, args, Source::User(buf))
    }

    /// Registers a new LMR of this master, its memory from `source`, and its handle.
    fn create_lmr(&self, file: &Mutex<FileLmrs>, args: &MallocArgs, source: Source) -> Result<u64> {
        if args.size == 0 || !layout::perm_known(args.perm) {
            return Err(EINVAL);
        }
        let name = name_key(args.namespace, &args.name)?;
        file.lock().room()?;
        let me = self.net.me()?;
        let holders = match source {
            Source::Holders(nodes) if nodes != 0 => nodes,
            _ => 1 << me,
        };
        for node in (0..LITE_MAX_NODES).filter(|n| holders & (1 << n) != 0 && *n != me) {
            self.net.peer(node)?.ensure_connected()?;
        }
        let id = {
            let mut mem = self.mem.lock();
            if mem.names.get(&name).is_some() {
                return Err(EEXIST);
            }
            mem.names.try_create_and_insert(name, 0, GFP_KERNEL)?;
            mem.next_id += 1;
            mem.next_id
        };
        let result = self.name_free_elsewhere(&name).and_then(|()| match source {
            Source::Holders(_) => self.allocate(me, id, args.size, holders),
            Source::User(buf) => self.hold_user(me, id, buf, args.size),
        });
        let extents = match result {
            Ok(extents) => extents,
            Err(e) => {
                self.mem.lock().names.remove(&name);
                return Err(e);
            }
        };
        let lmr = MasterLmr {
            name,
            size: args.size,
            extents: copy_extents(&extents)?,
            public: args.perm,
            grants: [NO_GRANT; LITE_MAX_NODES as usize],
            mappers: 1 << me,
        };
        let lh = self.new_handle();
        let registered = (|| -> Result {
            let mut files = file.lock();
            let mut mem = self.mem.lock();
            let local = mem.local_memory(me, id)?;
            let mapping = Mapping::new(me, id, args.size, extents, local)?;
            let node = kernel::rbtree::RBTreeNode::new(id, lmr, GFP_KERNEL)?;
            files.owned.push(id, GFP_KERNEL)?;
            mem.add_mapping(&mut files, lh, mapping, PERM_ALL)?;
            mem.lmrs.insert(node);
            mem.names.try_create_and_insert(name, id, GFP_KERNEL)?;
            Ok(())
        })();
        if let Err(e) = registered {
            let _ = self.free_lmr(id);
            self.unwind_allocation(me, id, holders);
            self.mem.lock().names.remove(&name);
            file.lock().remove(lh);
            return Err(e);
        }
        Ok(lh)
    }

    /// Fails with EEXIST when another node masters (or is allocating) `name`. Every
    /// connected node is asked at once.
    fn name_free_elsewhere(&self, name: &NameKey) -> Result {
        let probe = wire::Lookup {
            namespace: name.0,
            perm: 0,
            name: name.1,
        };
        let peers = self.net.connected_peers()?;
        let mut asked = KVec::with_capacity(peers.len(), GFP_KERNEL)?;
        let mut reply = [0u8; 64];
        let mut free = Ok(());
        for peer in peers.into_iter() {
            match Peer::start_request(peer, MsgKind::Lookup, &probe) {
                Ok(pending) => asked.push(pending, GFP_KERNEL)?,
                Err(e) => free = free.and(name_answer(Err(e))),
            }
        }
        for pending in asked.into_iter() {
            free = free.and(name_answer(pending.answer(&mut reply)));
        }
        free
    }

    /// Allocates `size` bytes spread over `holders` for LMR `id`; on failure nothing
    /// stays allocated.
    fn allocate(&self, me: u32, id: u64, size: u64, holders: u32) -> Result<KVec<Extent>> {
        self.allocate_shares(me, id, size, holders)
            .inspect_err(|_| self.unwind_allocation(me, id, holders))
    }

    /// The remote holders are asked at once and allocate (and zero) their shares in
    /// parallel while this node holds its own; a holder hands out at most
    /// `EXTENTS_PER_MSG` chunks per request, so larger shares take more rounds.
    fn allocate_shares(&self, me: u32, id: u64, size: u64, holders: u32) -> Result<KVec<Extent>> {
        // Per holder, in LMR order: bytes still owed, and (addr, len) of the chunks got.
        let mut shares = KVec::new();
        for (node, bytes) in layout::shares(size, holders) {
            shares.push(
                Share {
                    node,
                    left: bytes,
                    got: KVec::new(),
                },
                GFP_KERNEL,
            )?;
        }
        let mut reply = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
        while shares.iter().any(|share| share.left > 0) {
            let mut asked = KVec::with_capacity(shares.len(), GFP_KERNEL)?;
            let mut result = Ok(());
            for (i, share) in shares
                .iter()
                .enumerate()
                .filter(|(_, share)| share.left > 0 && share.node != me)
            {
                let alloc = wire::Alloc {
                    id,
                    bytes: share.left,
                };
                match self
                    .net
                    .peer(share.node)
                    .and_then(|peer| Peer::start_request(peer, MsgKind::Alloc, &alloc))
                {
                    // Within the capacity reserved above: does not allocate.
                    Ok(pending) => asked.push((i, pending), GFP_KERNEL)?,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if let (Ok(()), Some(share)) = (
                &result,
                shares
                    .iter_mut()
                    .find(|share| share.node == me && share.left > 0),
            ) {
                result = self
                    .hold(me, id, share.left, wire::EXTENTS_PER_MSG)
                    .and_then(|got| share.take(got.into_iter()));
            }
            // Every answer is awaited, even after a failure or a signal: the
            // unwinding must not overtake an allocation still running at a holder.
            for (i, pending) in asked.into_iter() {
                let answered = pending.answer_to_the_end(&mut reply).and_then(|len| {
                    let mut got = KVec::new();
                    wire::decode_extents(&reply[..len], |extent| got.push(extent, GFP_KERNEL).ok())
                        .ok_or(EIO)?;
                    shares[i].take(got.into_iter())
                });
                result = result.and(answered);
            }
            result?;
        }
        let mut extents = KVec::new();
        let mut start = 0;
        for share in shares.iter() {
            for chunk in share.got.iter() {
                extents.push(
                    Extent {
                        node: share.node,
                        start,
                        addr: chunk.addr,
                        len: chunk.len,
                        rkey: chunk.rkey,
                    },
                    GFP_KERNEL,
                )?;
                start += chunk.len;
            }
        }
        Ok(extents)
    }

    /// Pins the pages of `[buf, buf + len)` of the calling process as this node's
    /// memory of LMR (`me`, `id`): one extent per page.
    fn hold_user(&self, me: u32, id: u64, buf: usize, len: u64) -> Result<KVec<Extent>> {
        let len = usize::try_from(len).map_err(|_| ENOMEM)?;
        buf.checked_add(len).ok_or(EFAULT)?;
        let _serial = self.alloc_lock.lock();
        let dev = self.net.device()?;
        let head = buf % PAGE_SIZE;
        let count = (head + len).div_ceil(PAGE_SIZE);
        let mut chunks = KVec::with_capacity(count, caller_sized())?;
        let mut extents = KVec::with_capacity(count, caller_sized())?;
        let mut start = 0;
        for i in 0..count {
            let mut page = DmaBuf::pin_user_page(&dev, buf - head + i * PAGE_SIZE)?;
            let skip = if i == 0 { head } else { 0 };
            let bytes = (PAGE_SIZE - skip).min(len - start);
            // Only the registered bytes: the rest of the page is not the LMR's.
            let rkey = page.expose(skip, bytes, LMR_ACCESS)?;
            extents.push(
                Extent {
                    node: me,
                    start: start as u64,
                    addr: page.dma() + skip as u64,
                    len: bytes as u64,
                    rkey,
                },
                GFP_KERNEL,
            )?;
            chunks.push(page, GFP_KERNEL)?;
            start += bytes;
        }
        // Pinned memory is counted against the node's hold limit like LMR memory,
        // so that registering cannot pin the node's RAM away.
        let held = Arc::new(
            Held {
                chunks,
                bytes: len as u64,
            },
            GFP_KERNEL,
        )?;
        let mut mem = self.mem.lock();
        if len as u64 > hold_limit().saturating_sub(mem.held_bytes) {
            return Err(ENOMEM);
        }
        let seq = mem.seq();
        mem.held
            .try_create_and_insert((me, id, seq), held, GFP_KERNEL)?;
        mem.held_bytes += len as u64;
        Ok(extents)
    }

    /// Frees LMR `id`'s memory at each of `holders`. A signal does not stop it half
    /// way; a holder that does not confirm is fenced off (and frees what it held for
    /// this node when it sees it gone).
    pub(crate) fn unwind_allocation(&self, me: u32, id: u64, holders: u32) {
        for node in (0..LITE_MAX_NODES).filter(|n| holders & (1 << n) != 0) {
            if node == me {
                self.release(me, id);
            } else if let Ok(peer) = self.net.peer(node) {
                let _ = peer.confirm(MsgKind::Release, &wire::LmrId { id });
            }
        }
    }
}
