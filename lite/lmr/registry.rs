// SPDX-License-Identifier: GPL-2.0
//! The registries of this node (`Memory`, under `LmrNode::mem`): the LMRs it masters
//! and their names, the memory it holds, every mapping, the revocation log, and
//! the zeroed reserve's chunks.

use crate::compat::{cursor_lower_bound_mut, now_ns};
use crate::errno::EHOSTDOWN;
use crate::kvec::swap_remove;
use crate::net::Network;
use crate::uapi::LiteReadPhases;
use crate::verbs::DmaBuf;
use core::sync::atomic::AtomicU64;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{
    new_condvar, new_mutex, new_spinlock, Arc, ArcBorrow, CondVar, Mutex, SpinLock,
};

use super::events::LmrEvents;
use super::handles::{FileLmrs, Handle};
use super::holder::{Held, LocalMemory};
use super::layout::{Extent, NAME_LEN};
use super::mapping::Mapping;
use super::master::MasterLmr;

/// Revocations remembered for maps whose lookup is in flight (see `Memory::revoked_since`).
pub(crate) const REVOCATION_LOG: usize = 64;

/// Name of an LMR within its application namespace.
pub(crate) type NameKey = (u32, [u8; NAME_LEN]);

/// Key of a mapping or of held memory: the LMR (master node, id) and a sequence number.
pub(crate) type Key = (u32, u64, u64);

/// What one revocation covered (see `Memory::revoked_since`).
#[derive(Clone, Copy)]
pub(crate) enum Revoked {
    /// LMR (master, id).
    Lmr(u32, u64),
    /// Every LMR of a master.
    Master(u32),
    /// Every LMR with memory on a holder node.
    Holder(u32),
}

impl Revoked {
    fn covers(self, master: u32, id: u64, extents: &[Extent]) -> bool {
        match self {
            Revoked::Lmr(m, i) => (m, i) == (master, id),
            Revoked::Master(m) => m == master,
            Revoked::Holder(node) => extents.iter().any(|e| e.node == node),
        }
    }
}

/// Removes every entry of `tree` whose key starts with (`master`, `id`) (`id`
/// `None`: any LMR of `master`), handing each value to `each`.
pub(crate) fn take_prefix<V>(
    tree: &mut RBTree<Key, V>,
    master: u32,
    id: Option<u64>,
    mut each: impl FnMut(V),
) {
    let mut cursor = cursor_lower_bound_mut(tree, &(master, id.unwrap_or(0), 0));
    while let Some(c) = cursor {
        let &(m, i, _) = c.current().0;
        if m != master || id.is_some_and(|id| id != i) {
            break;
        }
        let (next, node) = c.remove_current();
        each(node.to_key_value().1);
        cursor = next;
    }
}

/// This node's LMR state (`Lite::lmr`, an `Arc` of its own): the registries, and what serializes
/// allocating their memory.
#[pin_data]
pub(crate) struct LmrNode {
    /// The network LMR traffic goes over.
    pub(crate) net: Arc<Network>,
    /// Who hears that memory held here was released (node installs the locks
    /// service, whose queues at its words must go).
    #[pin]
    pub(crate) events: SpinLock<Option<Arc<dyn LmrEvents>>>,
    /// The registries; taken after `Network::state`, never before it.
    #[pin]
    pub(crate) mem: Mutex<Memory>,
    /// Serializes allocation of LMR memory with device removal.
    #[pin]
    pub(crate) alloc_lock: Mutex<()>,
    /// The reserve's refill sleeps here, releasing `mem`, until allocations pause
    /// (a timed wait: nothing signals it).
    #[pin]
    pub(crate) reserve_quiet: CondVar,
    /// Next LMR handle: unique across processes, so another process's handle is
    /// never valid by accident.
    pub(crate) next_handle: AtomicU64,
    /// Small user-space reads' phases, summed (`LiteMemStat::read_phases`).
    #[pin]
    pub(crate) read_phases: SpinLock<LiteReadPhases>,
}

impl LmrNode {
    pub(crate) fn new(net: Arc<Network>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(LmrNode {
                net,
                events <- new_spinlock!(None, "lite:lmr.events"),
                mem <- new_mutex!(Memory::new(), "lite:mem"),
                alloc_lock <- new_mutex!((), "lite:alloc"),
                reserve_quiet <- new_condvar!("lite:reserve_quiet"),
                next_handle: AtomicU64::new(0x1000),
                read_phases <- new_spinlock!(LiteReadPhases::default(), "lite:lmr.read_phases"),
            }),
            GFP_KERNEL,
        )
    }

    /// The `Arc` this `LmrNode` lives in, for work queued beyond the caller.
    pub(crate) fn arc(&self) -> Arc<LmrNode> {
        // SAFETY: `LmrNode::new` (the only constructor) puts it in an `Arc`, which
        // `&self` borrows from, so the count is not zero while `&self` lives.
        unsafe { ArcBorrow::from_raw(self as *const LmrNode) }.into()
    }
}

/// The registries (under `LmrNode::mem`).
pub(crate) struct Memory {
    pub(crate) next_id: u64,
    pub(crate) next_seq: u64,
    /// LMRs this node is master of.
    pub(crate) lmrs: RBTree<u64, MasterLmr>,
    /// Names of those LMRs, and names being allocated (id 0).
    pub(crate) names: RBTree<NameKey, u64>,
    /// Memory held here, by (master node, LMR id, allocation).
    pub(crate) held: RBTree<Key, Arc<Held>>,
    pub(crate) held_bytes: u64,
    /// Every mapping on this node.
    pub(crate) maps: RBTree<Key, Arc<Mapping>>,
    /// Revocations (`take_maps` calls) since the module was loaded.
    pub(crate) revocations: u64,
    /// The last `REVOCATION_LOG` of them, at index `revocation % REVOCATION_LOG`.
    pub(crate) revoked: [Revoked; REVOCATION_LOG],
    /// Zeroed chunks of `CHUNK_MAX` bytes ready for `hold` (`LITE_IOC_RESERVE`).
    pub(crate) reserve: KVec<DmaBuf>,
    /// Chunks the reserve is refilled to.
    pub(crate) reserve_target: usize,
    /// Chunks taken from the reserve since the module was loaded.
    pub(crate) reserve_used: u64,
    /// When the last one was taken.
    pub(crate) reserve_taken_at: u64,
    /// A refill job is queued or running.
    pub(crate) refilling: bool,
}

impl Memory {
    pub(crate) fn new() -> Self {
        Memory {
            next_id: 1,
            next_seq: 1,
            lmrs: RBTree::new(),
            names: RBTree::new(),
            held: RBTree::new(),
            held_bytes: 0,
            maps: RBTree::new(),
            revocations: 0,
            // Only entries below `revocations` are ever read.
            revoked: [Revoked::Master(0); REVOCATION_LOG],
            reserve: KVec::new(),
            reserve_target: 0,
            reserve_used: 0,
            reserve_taken_at: now_ns(),
            refilling: false,
        }
    }

    pub(crate) fn take_reserved(&mut self) -> Option<DmaBuf> {
        let len = self.reserve.len();
        (len > 0).then(|| {
            self.reserve_used += 1;
            self.reserve_taken_at = now_ns();
            swap_remove(&mut self.reserve, len - 1)
        })
    }

    /// Frees the reserved chunks beyond the target.
    pub(crate) fn shrink_reserve(&mut self) {
        while self.reserve.len() > self.reserve_target {
            let last = self.reserve.len() - 1;
            drop(swap_remove(&mut self.reserve, last));
        }
    }

    pub(crate) fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    fn log_revocation(&mut self, what: Revoked) {
        self.revoked[(self.revocations % REVOCATION_LOG as u64) as usize] = what;
        self.revocations += 1;
    }

    /// Removes the mappings of (`master`, `id`) and returns them, to be revoked
    /// without `mem` held.
    pub(crate) fn take_maps(&mut self, master: u32, id: Option<u64>) -> KVec<Arc<Mapping>> {
        self.log_revocation(match id {
            Some(id) => Revoked::Lmr(master, id),
            None => Revoked::Master(master),
        });
        let mut out = KVec::new();
        take_prefix(&mut self.maps, master, id, |mapping| {
            defer_revoke(&mut out, mapping)
        });
        out
    }

    /// Removes every mapping with memory on node `holder` and returns them, to be
    /// revoked without `mem` held: that incarnation of the holder is gone, and its
    /// addresses may be reused memory in the next one.
    pub(crate) fn take_maps_reaching(&mut self, holder: u32) -> KVec<Arc<Mapping>> {
        self.log_revocation(Revoked::Holder(holder));
        let mut out = KVec::new();
        let mut cursor = cursor_lower_bound_mut(&mut self.maps, &(0, 0, 0));
        while let Some(c) = cursor {
            if c.current().1.extents.iter().any(|e| e.node == holder) {
                let (next, node) = c.remove_current();
                defer_revoke(&mut out, node.to_key_value().1);
                cursor = next;
            } else {
                cursor = c.move_next();
            }
        }
        out
    }

    pub(crate) fn release_held(&mut self, master: u32, id: Option<u64>) {
        let mut freed = 0;
        take_prefix(&mut self.held, master, id, |held| freed += held.bytes);
        self.held_bytes -= freed;
    }

    /// Whether (`master`, `id`), with memory at `extents`, may have been revoked
    /// since `revocations` read `since`: a mapping made from a lookup that started
    /// then must not be added, or it would escape the revocation. True also when the
    /// log no longer reaches back that far.
    pub(crate) fn revoked_since(
        &self,
        since: u64,
        master: u32,
        id: u64,
        extents: &[Extent],
    ) -> bool {
        if self.revocations - since > REVOCATION_LOG as u64 {
            return true;
        }
        (since..self.revocations)
            .any(|n| self.revoked[(n % REVOCATION_LOG as u64) as usize].covers(master, id, extents))
    }

    /// This node's memory of (`master`, `id`), if it holds any.
    pub(crate) fn local_memory(
        &mut self,
        master: u32,
        id: u64,
    ) -> Result<Option<Arc<LocalMemory>>> {
        let mut parts = KVec::new();
        let mut cursor = cursor_lower_bound_mut(&mut self.held, &(master, id, 0));
        while let Some(c) = cursor {
            let (&(m, i, _), held) = c.current();
            if (m, i) != (master, id) {
                break;
            }
            parts.push(held.clone(), GFP_KERNEL)?;
            cursor = c.move_next();
        }
        if parts.is_empty() {
            return Ok(None);
        }
        Ok(Some(Arc::new(LocalMemory { parts }, GFP_KERNEL)?))
    }

    /// Registers a new mapping of an LMR and the handle for it in `file`.
    pub(crate) fn add_mapping(
        &mut self,
        file: &mut FileLmrs,
        lh: u64,
        mapping: Arc<Mapping>,
        perm: u32,
    ) -> Result {
        let key = (mapping.master, mapping.id, self.seq());
        let node = kernel::rbtree::RBTreeNode::new(key, mapping.clone(), GFP_KERNEL)?;
        file.handles
            .try_create_and_insert(lh, Handle { mapping, perm, key }, GFP_KERNEL)?;
        file.nr_handles += 1;
        self.maps.insert(node);
        Ok(())
    }
}

/// Adds `mapping` to `out`, or revokes it at once when there is no room in `out`
/// (operations on a mapping never wait for `mem`, so that is safe under it).
fn defer_revoke(out: &mut KVec<Arc<Mapping>>, mapping: Arc<Mapping>) {
    if out.push(mapping.clone(), GFP_KERNEL).is_err() {
        mapping.revoke(EHOSTDOWN());
    }
}
