// SPDX-License-Identifier: GPL-2.0
//! The handle table of an open file (`FileLmrs`) and the handle operations:
//! LT_map (a lookup at the master), LT_grant, LT_free, LT_unmap, and release.

use crate::errno::EIDRM;
use crate::kvec::{caller_sized, swap_remove};
use crate::net::wire::{self, MsgKind, BODY_MAX};
use crate::uapi::*;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{Arc, Mutex};

use super::layout::{self, Extent, NAME_LEN, PERM_MASTER};
use super::mapping::Mapping;
use super::registry::Key;
use super::LmrNode;
use super::{decode, name_key};

/// Lookups a map retries when revocations it cannot see past raced it.
const MAP_ATTEMPTS: u32 = 4;

/// A handle of one open file.
pub(crate) struct Handle {
    pub(crate) mapping: Arc<Mapping>,
    pub(crate) perm: u32,
    pub(crate) key: Key,
}

/// Handles one open file may hold, and LMRs it may master; past either, EMFILE.
pub(crate) const HANDLES_PER_FILE: usize = 65536;

/// LMR state of one open file of /dev/lite.
pub(crate) struct FileLmrs {
    pub(crate) handles: RBTree<u64, Handle>,
    /// Entries in `handles`.
    pub(crate) nr_handles: usize,
    /// LMRs this file allocated (some may have been freed since by another
    /// file with master permission).
    pub(crate) owned: KVec<u64>,
}

impl FileLmrs {
    pub(crate) fn new() -> Self {
        FileLmrs {
            handles: RBTree::new(),
            nr_handles: 0,
            owned: KVec::new(),
        }
    }

    /// EMFILE when a new LMR or handle would take the file past its bounds.
    pub(crate) fn room(&self) -> Result {
        if self.nr_handles >= HANDLES_PER_FILE || self.owned.len() >= HANDLES_PER_FILE {
            return Err(EMFILE);
        }
        Ok(())
    }

    pub(crate) fn remove(&mut self, lh: u64) -> Option<Handle> {
        let handle = self.handles.remove(&lh)?;
        self.nr_handles -= 1;
        Some(handle)
    }

    pub(crate) fn get(&self, lh: u64) -> Result<(Arc<Mapping>, u32)> {
        let handle = self.handles.get(&lh).ok_or(EBADF)?;
        Ok((handle.mapping.clone(), handle.perm))
    }
}

impl LmrNode {
    pub(crate) fn new_handle(&self) -> u64 {
        self.next_handle
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
    }

    /// LT_map: asks the master of `name` for `perm` and returns a new handle and the size.
    ///
    /// The LMR may be freed, or a holder of it go, between the lookup and the new
    /// mapping's registration, and its revocation would then miss the mapping: the
    /// registration checks, under `mem`, that no revocation of the LMR or of its
    /// holders ran since the lookup began.
    pub(crate) fn map(
        &self,
        file: &Mutex<FileLmrs>,
        namespace: u32,
        name: &[u8; NAME_LEN],
        perm: u32,
    ) -> Result<(u64, u64)> {
        if perm == 0 || !layout::perm_known(perm) {
            return Err(EINVAL);
        }
        name_key(namespace, name)?;
        file.lock().room()?;
        let me = self.net.me()?;
        for _ in 0..MAP_ATTEMPTS {
            let since = self.mem.lock().revocations;
            let (master, id, size, extents) = match self.master_lookup(me, namespace, name, perm) {
                Ok(found) => (me, found.id, found.size, self.master_extents(found.id)?),
                Err(e) if e == ENOENT => self.remote_lookup(namespace, name, perm)?,
                Err(e) => return Err(e),
            };
            let lh = self.new_handle();
            let mut files = file.lock();
            let mut mem = self.mem.lock();
            if mem.revoked_since(since, master, id, &extents) {
                continue;
            }
            let local = mem.local_memory(master, id)?;
            let mapping = Mapping::new(master, id, size, extents, local)?;
            mem.add_mapping(&mut files, lh, mapping, perm)?;
            return Ok((lh, size));
        }
        // Freed under us each time, or more revocations than the log keeps.
        Err(EAGAIN)
    }

    /// Asks every connected peer for `name`; the master answers.
    fn remote_lookup(
        &self,
        namespace: u32,
        name: &[u8; NAME_LEN],
        perm: u32,
    ) -> Result<(u32, u64, u64, KVec<Extent>)> {
        let query = wire::Lookup {
            namespace,
            perm,
            name: *name,
        };
        let mut reply = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
        for peer in self.net.connected_peers()?.iter() {
            let found = match peer.request(MsgKind::Lookup, &query, &mut reply) {
                Ok(len) => decode::<wire::Found>(&reply[..len])?,
                Err(e) if e == EACCES => return Err(EACCES),
                Err(_) => continue,
            };
            let mut extents = KVec::with_capacity(found.extents as usize, caller_sized())?;
            let mut start = 0u64;
            while extents.len() < found.extents as usize {
                let first = extents.len() as u32;
                let len = peer.request(
                    MsgKind::Chunks,
                    &wire::ChunksQuery {
                        id: found.id,
                        first,
                    },
                    &mut reply,
                )?;
                let count = wire::decode_extents(&reply[..len], |e| {
                    extents
                        .push(
                            Extent {
                                node: e.node,
                                start,
                                addr: e.addr,
                                len: e.len,
                                rkey: e.rkey,
                            },
                            GFP_KERNEL,
                        )
                        .ok()?;
                    start = start.checked_add(e.len)?;
                    Some(())
                })
                .ok_or(EIO)?;
                if count == 0 {
                    return Err(EIO);
                }
            }
            // A forged or racing answer must not let accesses run past the extents.
            if start != found.size
                || extents.len() != found.extents as usize
                || extents.iter().any(|e| e.node >= LITE_MAX_NODES)
            {
                return Err(EIO);
            }
            return Ok((peer.id, found.id, found.size, extents));
        }
        Err(ENOENT)
    }

    /// LT_grant through a handle with master permission.
    pub(crate) fn grant(&self, file: &Mutex<FileLmrs>, lh: u64, node: u32, perm: u32) -> Result {
        let (mapping, have) = file.lock().get(lh)?;
        if !layout::perm_allows(have, PERM_MASTER) {
            return Err(EPERM);
        }
        let _use = mapping.begin()?;
        let grant = wire::Grant {
            id: mapping.id,
            node,
            perm,
        };
        if mapping.master == self.net.me()? {
            self.master_grant(mapping.master, &grant)
        } else {
            self.net
                .peer(mapping.master)?
                .request(MsgKind::Grant, &grant, &mut [])
                .map(drop)
        }
    }

    /// LT_free through a handle with master permission; the handle is released.
    pub(crate) fn free(&self, file: &Mutex<FileLmrs>, lh: u64) -> Result {
        let (mapping, have) = file.lock().get(lh)?;
        if !layout::perm_allows(have, PERM_MASTER) {
            return Err(EPERM);
        }
        mapping.begin().map(drop)?;
        if mapping.master == self.net.me()? {
            self.free_lmr(mapping.id).map_err(|_| EIDRM())?;
            let mut files = file.lock();
            if let Some(i) = files.owned.iter().position(|&id| id == mapping.id) {
                swap_remove(&mut files.owned, i);
            }
        } else {
            self.net.peer(mapping.master)?.request(
                MsgKind::Free,
                &wire::LmrId { id: mapping.id },
                &mut [],
            )?;
        }
        self.unmap(file, lh)
    }

    /// LT_unmap: releases the handle; the LMR lives on. Operations still running
    /// through the handle are waited for: once the mapping is out of `maps`, a
    /// free of the LMR no longer reaches it.
    pub(crate) fn unmap(&self, file: &Mutex<FileLmrs>, lh: u64) -> Result {
        let handle = file.lock().remove(lh).ok_or(EBADF)?;
        self.mem.lock().maps.remove(&handle.key);
        handle.mapping.revoke(EBADF);
        Ok(())
    }

    /// The process closed /dev/lite: release its handles, free the LMRs it mastered.
    pub(crate) fn file_release(&self, file: &Mutex<FileLmrs>) {
        let (handles, owned) = {
            let mut files = file.lock();
            files.nr_handles = 0;
            (
                core::mem::take(&mut files.handles),
                core::mem::take(&mut files.owned),
            )
        };
        {
            let mut mem = self.mem.lock();
            for (_, handle) in handles.iter() {
                mem.maps.remove(&handle.key);
            }
        }
        for (_, handle) in handles.iter() {
            handle.mapping.revoke(EBADF);
        }
        drop(handles);
        self.free_lmrs(&owned);
    }
}
