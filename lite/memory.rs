// SPDX-License-Identifier: GPL-2.0
//! LITE memory regions (LMRs): the master's registry, the holders' memory, the
//! mappings behind handles, and the one-sided operations on them.
//!
//! Roles, per LMR: the *master* node (where it was allocated) keeps its name,
//! extents, permissions and the nodes that mapped it; *holders* keep its memory as
//! physically contiguous chunks in the global MR; *mappers* keep a copy of the
//! extents in a `Mapping` per handle and reach the memory with RDMA directly. Users
//! only ever see handles.
//!
//! Freeing: the master forgets the LMR, revokes every mapping of it (each mapper
//! fails new operations and waits for running ones), and only then tells the
//! holders to release the memory, so no RDMA can land in freed memory.
//!
//! Locking: `Lite::mem` guards the registries; it is taken after `Lite::state`
//! (never the other way), and never held across a message to a peer or while
//! waiting for a mapping's users. Operations on a mapping never take it.

use crate::net::{encode, Peer, CONTROL_TIMEOUT_MS};
use crate::node::{module_queue, Lite};
use crate::kvec::{swap_remove, truncate};
use crate::errno::{EHOSTDOWN, EIDRM};
use crate::net::polling::Wait;
use crate::region::{self, AtomicError, Extent, RangeError, CHUNK_MAX, NAME_LEN, PERM_ALL, PERM_MASTER, PERM_READ, PERM_WRITE};
use crate::uapi::*;
use crate::net::verbs::{Atomic, Device, DmaBuf, PAGE_SIZE};
use crate::net::wire::{self, Body, MsgKind, Reader, BODY_MAX};
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::{msecs_to_jiffies, Ktime};
use kernel::uaccess::UserSlice;

const _: () = assert!(PERM_READ == LITE_PERM_READ && PERM_WRITE == LITE_PERM_WRITE && PERM_MASTER == LITE_PERM_MASTER);
const _: () = assert!(NAME_LEN == LITE_NAME_MAX as usize && CHUNK_MAX == LITE_CHUNK_SIZE);


/// `-ERANGE`: an access beyond the LMR.
fn erange() -> Error {
    Error::from_errno(-(kernel::bindings::ERANGE as i32))
}

fn range_error(err: RangeError) -> Error {
    match err {
        RangeError::Empty => EINVAL,
        RangeError::OutOfBounds => erange(),
    }
}

/// A peer may not make this node hold more than this share of its RAM.
const HOLD_SHARE_NUM: u64 = 3;
const HOLD_SHARE_DEN: u64 = 4;

/// Milliseconds without allocations from the reserve before it is refilled.
const RESERVE_QUIET_MS: i64 = 100;

/// Revocations remembered for maps whose lookup is in flight (see `Memory::revoked_since`).
const REVOCATION_LOG: usize = 64;

/// Lookups a map retries when revocations it cannot see past raced it.
const MAP_ATTEMPTS: u32 = 4;

/// Bytes of LMR memory this node may hold.
fn hold_limit() -> u64 {
    // SAFETY: reads a global counter.
    let ram = unsafe { crate::ffi::lite_total_ram() };
    ram / HOLD_SHARE_DEN * HOLD_SHARE_NUM
}

/// Name of an LMR within its application namespace.
type NameKey = (u32, [u8; NAME_LEN]);

/// Per-node grant value meaning "no grant; the public permissions apply".
const NO_GRANT: u8 = 0xFF;

/// An LMR as its master knows it.
struct MasterLmr {
    name: NameKey,
    size: u64,
    extents: KVec<Extent>,
    /// What any node may map with.
    public: u32,
    /// Per-node override of `public` (`NO_GRANT`: none).
    grants: [u8; LITE_MAX_NODES as usize],
    /// Nodes that mapped the LMR: told when it is freed.
    mappers: u32,
}

impl MasterLmr {
    fn allowed(&self, node: u32) -> u32 {
        match self.grants.get(node as usize) {
            Some(&grant) if grant != NO_GRANT => u32::from(grant),
            _ => self.public,
        }
    }

    fn holders(&self) -> u32 {
        self.extents.iter().fold(0, |mask, e| mask | 1 << e.node)
    }
}

/// Memory this node holds for one LMR, from one allocation request.
pub(crate) struct Held {
    chunks: KVec<DmaBuf>,
    bytes: u64,
}

/// Everything this node holds for one LMR, as seen by a mapping.
struct LocalMemory {
    parts: KVec<Arc<Held>>,
}

impl LocalMemory {
    /// The chunk holding DMA range `[addr, addr + len)` and the offset in it.
    fn find(&self, addr: u64, len: u64) -> Result<(&DmaBuf, usize)> {
        self.parts
            .iter()
            .flat_map(|part| part.chunks.iter())
            .find_map(|c| c.offset_of(addr, len).map(|off| (c, off)))
            .ok_or(EINVAL)
    }
}

struct MapState {
    /// Why the mapping is dead (a negative errno), once it is.
    revoked: Option<i32>,
    /// Operations running on the mapping.
    users: u32,
    /// This node's memory of the LMR, if it holds some.
    local: Option<Arc<LocalMemory>>,
}

/// What one handle reaches: a copy of the LMR's extents, taken at map time.
#[pin_data]
pub(crate) struct Mapping {
    master: u32,
    id: u64,
    size: u64,
    extents: KVec<Extent>,
    #[pin]
    state: Mutex<MapState>,
    #[pin]
    idle: CondVar,
}

/// An 8-byte word of an LMR: held by node `holder` at DMA address `addr`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) holder: u32,
    pub(crate) master: u32,
    pub(crate) id: u64,
    pub(crate) addr: u64,
}

/// A word reached through a handle: its mapping says whether the LMR still exists.
pub(crate) struct WordRef {
    mapping: Arc<Mapping>,
    pub(crate) word: Word,
}

/// An operation in progress on a mapping; ends when dropped.
struct Use<'a> {
    mapping: &'a Mapping,
    local: Option<Arc<LocalMemory>>,
}

impl Drop for Use<'_> {
    fn drop(&mut self) {
        let mut st = self.mapping.state.lock();
        st.users -= 1;
        if st.users == 0 {
            self.mapping.idle.notify_all();
        }
    }
}

impl Use<'_> {
    fn local(&self) -> Result<&LocalMemory> {
        self.local.as_deref().ok_or(EINVAL)
    }

    /// Fails once the mapping is being revoked: long operations stop early.
    fn check(&self) -> Result {
        match self.mapping.state.lock().revoked {
            Some(errno) => Err(Error::from_errno(errno)),
            None => Ok(()),
        }
    }
}

impl Mapping {
    fn new(master: u32, id: u64, size: u64, extents: KVec<Extent>, local: Option<Arc<LocalMemory>>) -> Result<Arc<Mapping>> {
        Arc::pin_init(
            pin_init!(Mapping {
                master,
                id,
                size,
                extents,
                state <- new_mutex!(MapState { revoked: None, users: 0, local }, "lite:mapping.state"),
                idle <- new_condvar!("lite:mapping.idle"),
            }),
            GFP_KERNEL,
        )
    }

    fn begin(&self) -> Result<Use<'_>> {
        let mut st = self.state.lock();
        if let Some(errno) = st.revoked {
            return Err(Error::from_errno(errno));
        }
        st.users += 1;
        Ok(Use { mapping: self, local: st.local.clone() })
    }

    /// Fails new operations with `err`, waits for the running ones to end, and lets
    /// go of this node's memory of the LMR.
    fn revoke(&self, err: Error) {
        let mut st = self.state.lock();
        if st.revoked.is_none() {
            st.revoked = Some(err.to_errno());
        }
        while st.users > 0 {
            self.idle.wait(&mut st);
        }
        st.local = None;
    }
}

/// Key of a mapping or of held memory: the LMR (master node, id) and a sequence number.
type Key = (u32, u64, u64);

/// Removes every entry of `tree` whose key starts with (`master`, `id`) (`id`
/// `None`: any LMR of `master`), handing each value to `each`.
fn take_prefix<V>(tree: &mut RBTree<Key, V>, master: u32, id: Option<u64>, mut each: impl FnMut(V)) {
    let mut cursor = tree.cursor_lower_bound(&(master, id.unwrap_or(0), 0));
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

/// A handle of one open file.
struct Handle {
    mapping: Arc<Mapping>,
    perm: u32,
    key: Key,
}

/// Handles one open file may hold, and LMRs it may master; past either, EMFILE.
const HANDLES_PER_FILE: usize = 65536;

/// LMR state of one open file of /dev/lite.
pub(crate) struct FileLmrs {
    handles: RBTree<u64, Handle>,
    /// Entries in `handles`.
    nr_handles: usize,
    /// LMRs this file allocated (some may have been freed since by another
    /// file with master permission).
    owned: KVec<u64>,
}

impl FileLmrs {
    pub(crate) fn new() -> Self {
        FileLmrs { handles: RBTree::new(), nr_handles: 0, owned: KVec::new() }
    }

    /// EMFILE when a new LMR or handle would take the file past its bounds.
    fn room(&self) -> Result {
        if self.nr_handles >= HANDLES_PER_FILE || self.owned.len() >= HANDLES_PER_FILE {
            return Err(EMFILE);
        }
        Ok(())
    }

    fn remove(&mut self, lh: u64) -> Option<Handle> {
        let handle = self.handles.remove(&lh)?;
        self.nr_handles -= 1;
        Some(handle)
    }

    fn get(&self, lh: u64) -> Result<(Arc<Mapping>, u32)> {
        let handle = self.handles.get(&lh).ok_or(EBADF)?;
        Ok((handle.mapping.clone(), handle.perm))
    }
}

/// The registries (under `Lite::mem`).
pub(crate) struct Memory {
    next_id: u64,
    next_seq: u64,
    /// LMRs this node is master of.
    lmrs: RBTree<u64, MasterLmr>,
    /// Names of those LMRs, and names being allocated (id 0).
    names: RBTree<NameKey, u64>,
    /// Memory held here, by (master node, LMR id, allocation).
    held: RBTree<Key, Arc<Held>>,
    held_bytes: u64,
    /// Every mapping on this node.
    maps: RBTree<Key, Arc<Mapping>>,
    /// Revocations (`take_maps` calls) since the module was loaded.
    revocations: u64,
    /// The last `REVOCATION_LOG` of them: (master, LMR id or `None` for all of
    /// the master's), at index `revocation % REVOCATION_LOG`.
    revoked: [(u32, Option<u64>); REVOCATION_LOG],
    /// Zeroed chunks of `CHUNK_MAX` bytes ready for `hold` (`LITE_IOC_RESERVE`).
    reserve: KVec<DmaBuf>,
    /// Chunks the reserve is refilled to.
    reserve_target: usize,
    /// Chunks taken from the reserve since the module was loaded.
    reserve_used: u64,
    /// When the last one was taken.
    reserve_taken_at: Ktime,
    /// A refill job is queued or running.
    refilling: bool,
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
            revoked: [(0, None); REVOCATION_LOG],
            reserve: KVec::new(),
            reserve_target: 0,
            reserve_used: 0,
            reserve_taken_at: Ktime::ktime_get(),
            refilling: false,
        }
    }

    fn take_reserved(&mut self) -> Option<DmaBuf> {
        let len = self.reserve.len();
        (len > 0).then(|| {
            self.reserve_used += 1;
            self.reserve_taken_at = Ktime::ktime_get();
            swap_remove(&mut self.reserve, len - 1)
        })
    }

    /// Frees the reserved chunks beyond the target.
    fn shrink_reserve(&mut self) {
        while self.reserve.len() > self.reserve_target {
            let last = self.reserve.len() - 1;
            drop(swap_remove(&mut self.reserve, last));
        }
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Removes the mappings of (`master`, `id`) and returns them, to be revoked
    /// without `mem` held.
    fn take_maps(&mut self, master: u32, id: Option<u64>) -> KVec<Arc<Mapping>> {
        self.revoked[(self.revocations % REVOCATION_LOG as u64) as usize] = (master, id);
        self.revocations += 1;
        let mut out = KVec::new();
        take_prefix(&mut self.maps, master, id, |mapping| {
            if out.push(mapping.clone(), GFP_KERNEL).is_err() {
                // No room to defer it: revoke here (operations never wait for `mem`).
                mapping.revoke(EHOSTDOWN());
            }
        });
        out
    }

    fn release_held(&mut self, master: u32, id: Option<u64>) {
        let mut freed = 0;
        take_prefix(&mut self.held, master, id, |held| freed += held.bytes);
        self.held_bytes -= freed;
    }

    /// Whether (`master`, `id`) may have been revoked since `revocations` read
    /// `since`: a mapping made from a lookup that started then must not be added,
    /// or it would escape the revocation. True also when the log no longer reaches
    /// back that far.
    fn revoked_since(&self, since: u64, master: u32, id: u64) -> bool {
        if self.revocations - since > REVOCATION_LOG as u64 {
            return true;
        }
        (since..self.revocations).any(|n| match self.revoked[(n % REVOCATION_LOG as u64) as usize] {
            (m, None) => m == master,
            (m, Some(i)) => (m, i) == (master, id),
        })
    }

    /// This node's memory of (`master`, `id`), if it holds any.
    fn local_memory(&mut self, master: u32, id: u64) -> Result<Option<Arc<LocalMemory>>> {
        let mut parts = KVec::new();
        let mut cursor = self.held.cursor_lower_bound(&(master, id, 0));
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
    fn add_mapping(&mut self, file: &mut FileLmrs, lh: u64, mapping: Arc<Mapping>, perm: u32) -> Result {
        let key = (mapping.master, mapping.id, self.seq());
        let node = kernel::rbtree::RBTreeNode::new(key, mapping.clone(), GFP_KERNEL)?;
        file.handles.try_create_and_insert(lh, Handle { mapping, perm, key }, GFP_KERNEL)?;
        file.nr_handles += 1;
        self.maps.insert(node);
        Ok(())
    }
}

/// A name as a registry key: 1..=63 bytes, NUL-padded.
fn name_key(namespace: u32, name: &[u8; NAME_LEN]) -> Result<NameKey> {
    match region::name_len(name) {
        Some(1..) => Ok((namespace, *name)),
        _ => Err(EINVAL),
    }
}

fn decode<B: Body>(bytes: &[u8]) -> Result<B> {
    B::decode(&mut Reader::new(bytes)).ok_or(EINVAL)
}

/// Chunks being zeroed by helpers on the module's workqueue.
#[pin_data]
struct Zeroing {
    #[pin]
    state: Mutex<ZeroingState>,
    #[pin]
    finished: CondVar,
}

struct ZeroingState {
    chunks: KVec<DmaBuf>,
    /// Helpers not finished yet.
    running: usize,
}

/// Allocates up to `count` zeroed chunks of `CHUNK_MAX` bytes, with the caller and
/// one helper per other online CPU each zeroing a share: zeroing is most of what a
/// large allocation costs. Fewer come back when memory runs short.
fn zero_chunks(dev: &Arc<Device>, count: usize) -> KVec<DmaBuf> {
    let mut mine = KVec::new();
    // SAFETY: reads a global counter.
    let cpus = unsafe { crate::ffi::lite_online_cpus() } as usize;
    let helpers = cpus.min(count).saturating_sub(1);
    let zeroing = (helpers > 0).then(|| {
        Arc::pin_init(
            pin_init!(Zeroing {
                state <- new_mutex!(ZeroingState { chunks: KVec::new(), running: 0 }, "lite:zeroing.state"),
                finished <- new_condvar!("lite:zeroing.finished"),
            }),
            GFP_KERNEL,
        )
    });
    let Some(Ok(zeroing)) = zeroing else {
        zero_into(dev, count, &mut mine);
        return mine;
    };
    let share = count / (helpers + 1);
    let mut handed_out = 0;
    for _ in 0..helpers {
        let (helper, dev) = (zeroing.clone(), dev.clone());
        zeroing.state.lock().running += 1;
        let spawned = module_queue().try_spawn(GFP_KERNEL, move || {
            let mut got = KVec::new();
            zero_into(&dev, share, &mut got);
            let mut state = helper.state.lock();
            for chunk in got.into_iter() {
                // A chunk that does not fit in the list is freed; the caller makes another.
                if state.chunks.push(chunk, GFP_KERNEL).is_err() {
                    break;
                }
            }
            state.running -= 1;
            helper.finished.notify_all();
        });
        match spawned {
            Ok(()) => handed_out += share,
            Err(_) => zeroing.state.lock().running -= 1,
        }
    }
    zero_into(dev, count - handed_out, &mut mine);
    let mut state = zeroing.state.lock();
    while state.running > 0 {
        zeroing.finished.wait(&mut state);
    }
    for chunk in core::mem::take(&mut state.chunks).into_iter() {
        if mine.push(chunk, GFP_KERNEL).is_err() {
            break;
        }
    }
    mine
}

/// Appends up to `count` zeroed chunks of `CHUNK_MAX` bytes to `chunks`; stops at the
/// first that cannot be had.
fn zero_into(dev: &Arc<Device>, count: usize, chunks: &mut KVec<DmaBuf>) {
    for _ in 0..count {
        let Ok(chunk) = DmaBuf::try_new(dev, CHUNK_MAX as usize) else { return };
        if chunks.push(chunk, GFP_KERNEL).is_err() {
            return;
        }
    }
}

/// What a Lookup answer says about whether a name is free elsewhere.
fn name_answer(answer: Result<usize>) -> Result {
    match answer {
        Err(e) if e == ENOENT => Ok(()),
        // A node we cannot ask cannot hand the name out either.
        Err(e) if e == EHOSTDOWN() || e == crate::errno::ETIMEDOUT() => Ok(()),
        _ => Err(EEXIST),
    }
}

/// One holder's part of a new LMR while it is being allocated.
struct Share {
    node: u32,
    /// Bytes not allocated yet.
    left: u64,
    /// (DMA address, bytes) of the chunks allocated so far, in LMR order.
    got: KVec<(u64, u64)>,
}

impl Share {
    /// Adds the chunks a holder handed out; a holder that hands out nothing is out
    /// of memory, one that hands out more than asked is broken.
    fn take(&mut self, chunks: impl Iterator<Item = (u64, u64)>) -> Result {
        let before = self.left;
        for (addr, len) in chunks {
            if len > self.left {
                return Err(EIO);
            }
            self.got.push((addr, len), GFP_KERNEL)?;
            self.left -= len;
        }
        if self.left == before {
            return Err(ENOMEM);
        }
        Ok(())
    }
}

/// Where a new LMR's memory comes from.
#[derive(Clone, Copy)]
enum Source {
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

impl Lite {
    // ---- holder side ----

    /// Allocates up to `bytes` (at most `max_extents` chunks) for LMR (`master`, `id`)
    /// and returns the new extents (node, addr, len). Never fewer than one chunk.
    fn hold(&self, master: u32, id: u64, bytes: u64, max_extents: usize) -> Result<KVec<(u32, u64, u64)>> {
        let me = self.me()?;
        // Serialized with device removal, which frees what is held on the device.
        let _serial = self.alloc_lock.lock();
        let dev = self.device()?;
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
        let mut ready = KVec::with_capacity(whole, GFP_KERNEL)?;
        {
            let mut mem = self.mem.lock();
            while ready.len() < whole {
                let Some(chunk) = mem.take_reserved() else { break };
                // Within the capacity reserved above: does not allocate.
                ready.push(chunk, GFP_KERNEL)?;
            }
        }
        let missing = whole - ready.len();
        let mut ready = Iterator::chain(ready.into_iter(), zero_chunks(&dev, missing));
        while left > 0 && extents.len() < max_extents {
            let Some(len) = region::next_chunk_len(left, limit) else {
                result = Err(ENOMEM);
                break;
            };
            let prepared = if len == CHUNK_MAX { ready.next() } else { None };
            match prepared.map_or_else(|| DmaBuf::try_new(&dev, len as usize), Ok) {
                Ok(chunk) => {
                    let used = len.min(left);
                    let pushed = extents.push((me, chunk.dma(), used), GFP_KERNEL);
                    if let Err(e) = pushed.and_then(|()| chunks.push(chunk, GFP_KERNEL)) {
                        result = Err(e.into());
                        break;
                    }
                    left -= used;
                }
                Err(_) => limit = len / 2,
            }
        }
        let got = want - left;
        self.refill_reserve_later();
        let mut mem = self.mem.lock();
        mem.held_bytes -= left;
        let held = result.and_then(|()| Ok(Arc::new(Held { chunks, bytes: got }, GFP_KERNEL)?));
        let inserted = held.and_then(|held| {
            let seq = mem.seq();
            mem.held.try_create_and_insert((master, id, seq), held, GFP_KERNEL)?;
            Ok(())
        });
        if let Err(e) = inserted {
            mem.held_bytes -= got;
            return Err(e);
        }
        Ok(extents)
    }

    /// Frees what this node holds for (`master`, `id`).
    fn release(&self, master: u32, id: u64) {
        self.locks_forget_lmr(master, id);
        self.mem.lock().release_held(master, Some(id));
        // A reserve that stopped at the hold limit may grow again.
        self.refill_reserve_later();
    }

    /// Keeps `bytes` (rounded up to whole chunks) of zeroed memory ready for `hold`,
    /// so that allocating does not wait for zeroing; 0 releases the reserve.
    pub(crate) fn set_reserve(&self, bytes: u64) -> Result {
        let chunks = bytes.div_ceil(CHUNK_MAX);
        if chunks > hold_limit() / CHUNK_MAX {
            return Err(EINVAL);
        }
        self.device()?;
        {
            let mut mem = self.mem.lock();
            mem.reserve_target = chunks as usize;
            mem.shrink_reserve();
        }
        self.refill_reserve_later();
        Ok(())
    }

    /// Queues a refill of the reserve unless it is full or one is queued already.
    fn refill_reserve_later(&self) {
        {
            let mut mem = self.mem.lock();
            if mem.refilling || mem.reserve.len() >= mem.reserve_target {
                return;
            }
            mem.refilling = true;
        }
        let lite = self.arc();
        if module_queue().try_spawn(GFP_KERNEL, move || while lite.refill_reserve_chunk() {}).is_err() {
            self.mem.lock().refilling = false;
        }
    }

    /// Adds one zeroed chunk to the reserve; false once it is full, the node holds
    /// its limit (LMR memory and reserve together), or memory or the device is gone.
    /// One chunk per call, so that `hold` waits for at most one chunk's zeroing.
    fn refill_reserve_chunk(&self) -> bool {
        // Zeroing competes for the CPU with an allocation still taking chunks (and its
        // requests to other holders): start once takes have paused.
        {
            let mut mem = self.mem.lock();
            while (Ktime::ktime_get() - mem.reserve_taken_at).to_ms() < RESERVE_QUIET_MS {
                let _ = self.reserve_quiet.wait_interruptible_timeout(&mut mem, msecs_to_jiffies(RESERVE_QUIET_MS as u32));
            }
        }
        // Serialized with device removal, which empties the reserve.
        let _serial = self.alloc_lock.lock();
        let dev = self.device();
        {
            let mut mem = self.mem.lock();
            let bytes = mem.held_bytes + (mem.reserve.len() as u64 + 1) * CHUNK_MAX;
            mem.refilling = dev.is_ok() && mem.reserve.len() < mem.reserve_target && bytes <= hold_limit();
            if !mem.refilling {
                return false;
            }
        }
        let chunk = dev.and_then(|dev| DmaBuf::try_new(&dev, CHUNK_MAX as usize));
        let mut mem = self.mem.lock();
        let added = chunk.and_then(|chunk| Ok(mem.reserve.push(chunk, GFP_KERNEL)?));
        mem.refilling = added.is_ok();
        mem.refilling
    }

    /// The device is going away: its reserved chunks are freed and the target is
    /// forgotten (an operator sets it again for the next device).
    pub(crate) fn drop_reserve(&self) {
        let _serial = self.alloc_lock.lock();
        let mut mem = self.mem.lock();
        mem.reserve_target = 0;
        mem.shrink_reserve();
    }

    /// Node `node` is gone (or this node left): what it mastered is unreachable, so
    /// its mappings fail and the memory held for it is freed.
    ///
    /// Other nodes may still map memory held here for `node` and write to it, so
    /// they are told to fail those mappings (and wait for their operations) before
    /// the memory is freed. A node that cannot be told cannot reach us either: its
    /// QPs to us are in error or destroyed.
    pub(crate) fn forget_node(&self, node: u32) {
        self.revoke_master(node);
        let holds = {
            let mut mem = self.mem.lock();
            mem.held.cursor_lower_bound(&(node, 0, 0)).is_some_and(|c| c.current().0 .0 == node)
        };
        if holds {
            if let Ok(peers) = self.connected_peers() {
                for peer in peers.iter().filter(|p| p.id != node) {
                    let _ = peer.confirm(MsgKind::Forget, &wire::LmrId { id: node.into() });
                }
            }
        }
        self.locks_forget_node(node);
        self.mem.lock().release_held(node, None);
        self.rpc_forget_node(node);
    }

    /// Mappings of every LMR of `master` on this node fail from now on.
    fn revoke_master(&self, master: u32) {
        let maps = self.mem.lock().take_maps(master, None);
        for mapping in maps.iter() {
            mapping.revoke(EHOSTDOWN());
        }
    }

    /// The device went away or this node left: revoke every mapping, free all memory held.
    pub(crate) fn forget_all(&self) {
        let _serial = self.alloc_lock.lock();
        for node in 0..LITE_MAX_NODES {
            self.forget_node(node);
        }
    }

    /// What this node holds for (`master`, `id`); EIDRM when nothing (any more):
    /// a request racing the LMR's free.
    fn held_memory(&self, master: u32, id: u64) -> Result<Arc<LocalMemory>> {
        self.mem.lock().local_memory(master, id)?.ok_or_else(EIDRM)
    }

    fn holder_memset(&self, req: &wire::Memset) -> Result {
        let value = u8::try_from(req.value).map_err(|_| EINVAL)?;
        let local = self.held_memory(req.master, req.id)?;
        let (chunk, off) = local.find(req.addr, req.len)?;
        chunk.fill(off, req.len as usize, value)
    }

    fn holder_copy(&self, req: &wire::Copy) -> Result {
        let me = self.me()?;
        let src = self.held_memory(req.src_master, req.src_id)?;
        let (chunk, off) = src.find(req.src_addr, req.len)?;
        if req.dst_node == me {
            let dst = self.held_memory(req.dst_master, req.dst_id)?;
            let (to, to_off) = dst.find(req.dst_addr, req.len)?;
            to.move_from(to_off, chunk, off, req.len as usize)
        } else {
            // The destination node checks nothing here: peers are kernels of the same
            // cluster sharing one global MR, as in LITE.
            self.peer(req.dst_node)?.rdma_write_kernel(chunk, off, req.len as usize, req.dst_addr)
        }
    }

    // ---- master side ----

    /// LT_malloc: allocates the LMR at its holders and returns the master handle.
    pub(crate) fn lmr_malloc(&self, file: &Mutex<FileLmrs>, args: &MallocArgs) -> Result<u64> {
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
    pub(crate) fn lmr_register(&self, file: &Mutex<FileLmrs>, buf: usize, args: &MallocArgs) -> Result<u64> {
        if args.size > LITE_REGISTER_MAX_SIZE {
            return Err(ENOMEM);
        }
        self.create_lmr(file, args, Source::User(buf))
    }

    /// Registers a new LMR of this master, its memory from `source`, and its handle.
    fn create_lmr(&self, file: &Mutex<FileLmrs>, args: &MallocArgs, source: Source) -> Result<u64> {
        if args.size == 0 || !region::perm_known(args.perm) {
            return Err(EINVAL);
        }
        let name = name_key(args.namespace, &args.name)?;
        file.lock().room()?;
        let me = self.me()?;
        let holders = match source {
            Source::Holders(nodes) if nodes != 0 => nodes,
            _ => 1 << me,
        };
        for node in (0..LITE_MAX_NODES).filter(|n| holders & (1 << n) != 0 && *n != me) {
            self.peer(node)?.ensure_connected()?;
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
        let probe = wire::Lookup { namespace: name.0, perm: 0, name: name.1 };
        let peers = self.connected_peers()?;
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
        self.allocate_shares(me, id, size, holders).inspect_err(|_| self.unwind_allocation(me, id, holders))
    }

    /// The remote holders are asked at once and allocate (and zero) their shares in
    /// parallel while this node holds its own; a holder hands out at most
    /// `EXTENTS_PER_MSG` chunks per request, so larger shares take more rounds.
    fn allocate_shares(&self, me: u32, id: u64, size: u64, holders: u32) -> Result<KVec<Extent>> {
        // Per holder, in LMR order: bytes still owed, and (addr, len) of the chunks got.
        let mut shares = KVec::new();
        for (node, bytes) in region::shares(size, holders) {
            shares.push(Share { node, left: bytes, got: KVec::new() }, GFP_KERNEL)?;
        }
        let mut reply = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
        while shares.iter().any(|share| share.left > 0) {
            let mut asked = KVec::with_capacity(shares.len(), GFP_KERNEL)?;
            let mut result = Ok(());
            for (i, share) in shares.iter().enumerate().filter(|(_, share)| share.left > 0 && share.node != me) {
                let alloc = wire::Alloc { id, bytes: share.left };
                match self.peer(share.node).and_then(|peer| Peer::start_request(peer, MsgKind::Alloc, &alloc)) {
                    // Within the capacity reserved above: does not allocate.
                    Ok(pending) => asked.push((i, pending), GFP_KERNEL)?,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if let (Ok(()), Some(share)) = (&result, shares.iter_mut().find(|share| share.node == me && share.left > 0)) {
                result = self.hold(me, id, share.left, wire::EXTENTS_PER_MSG).and_then(|got| share.take(got.iter().map(|&(_, addr, len)| (addr, len))));
            }
            // Every answer is awaited, even after a failure: the unwinding must not
            // overtake an allocation still running at a holder.
            for (i, pending) in asked.into_iter() {
                let answered = pending.answer(&mut reply).and_then(|len| {
                    let mut got = KVec::new();
                    wire::decode_extents(&reply[..len], |_, addr, len| got.push((addr, len), GFP_KERNEL).ok()).ok_or(EIO)?;
                    shares[i].take(got.into_iter())
                });
                result = result.and(answered);
            }
            result?;
        }
        let mut extents = KVec::new();
        let mut start = 0;
        for share in shares.iter() {
            for &(addr, len) in share.got.iter() {
                extents.push(Extent { node: share.node, start, addr, len }, GFP_KERNEL)?;
                start += len;
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
        let dev = self.device()?;
        let head = buf % PAGE_SIZE;
        let count = (head + len).div_ceil(PAGE_SIZE);
        let mut chunks = KVec::with_capacity(count, GFP_KERNEL)?;
        let mut extents = KVec::with_capacity(count, GFP_KERNEL)?;
        let mut start = 0;
        for i in 0..count {
            let page = DmaBuf::pin_user_page(&dev, buf - head + i * PAGE_SIZE)?;
            let skip = if i == 0 { head } else { 0 };
            let bytes = (PAGE_SIZE - skip).min(len - start);
            extents.push(Extent { node: me, start: start as u64, addr: page.dma() + skip as u64, len: bytes as u64 }, GFP_KERNEL)?;
            chunks.push(page, GFP_KERNEL)?;
            start += bytes;
        }
        // Pinned memory is counted against the node's hold limit like LMR memory,
        // so that registering cannot pin the node's RAM away.
        let held = Arc::new(Held { chunks, bytes: len as u64 }, GFP_KERNEL)?;
        let mut mem = self.mem.lock();
        if len as u64 > hold_limit().saturating_sub(mem.held_bytes) {
            return Err(ENOMEM);
        }
        let seq = mem.seq();
        mem.held.try_create_and_insert((me, id, seq), held, GFP_KERNEL)?;
        mem.held_bytes += len as u64;
        Ok(extents)
    }

    fn unwind_allocation(&self, me: u32, id: u64, holders: u32) {
        for node in (0..LITE_MAX_NODES).filter(|n| holders & (1 << n) != 0) {
            if node == me {
                self.release(me, id);
            } else if let Ok(peer) = self.peer(node) {
                let _ = peer.request(MsgKind::Release, &wire::LmrId { id }, &mut []);
            }
        }
    }

    fn new_handle(&self) -> u64 {
        self.next_handle.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
    }

    /// LT_map: asks the master of `name` for `perm` and returns a new handle and the size.
    ///
    /// The LMR may be freed between the lookup and the new mapping's registration,
    /// and its revocation would then miss the mapping: the registration checks,
    /// under `mem`, that no revocation of the LMR ran since the lookup began.
    pub(crate) fn lmr_map(&self, file: &Mutex<FileLmrs>, namespace: u32, name: &[u8; NAME_LEN], perm: u32) -> Result<(u64, u64)> {
        if perm == 0 || !region::perm_known(perm) {
            return Err(EINVAL);
        }
        name_key(namespace, name)?;
        file.lock().room()?;
        let me = self.me()?;
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
            if mem.revoked_since(since, master, id) {
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
    fn remote_lookup(&self, namespace: u32, name: &[u8; NAME_LEN], perm: u32) -> Result<(u32, u64, u64, KVec<Extent>)> {
        let query = wire::Lookup { namespace, perm, name: *name };
        let mut reply = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
        for peer in self.connected_peers()?.iter() {
            let found = match peer.request(MsgKind::Lookup, &query, &mut reply) {
                Ok(len) => decode::<wire::Found>(&reply[..len])?,
                Err(e) if e == EACCES => return Err(EACCES),
                Err(_) => continue,
            };
            let mut extents = KVec::with_capacity(found.extents as usize, GFP_KERNEL)?;
            let mut start = 0u64;
            while extents.len() < found.extents as usize {
                let first = extents.len() as u32;
                let len = peer.request(MsgKind::Chunks, &wire::ChunksQuery { id: found.id, first }, &mut reply)?;
                let count = wire::decode_extents(&reply[..len], |node, addr, len| {
                    extents.push(Extent { node, start, addr, len }, GFP_KERNEL).ok()?;
                    start = start.checked_add(len)?;
                    Some(())
                })
                .ok_or(EIO)?;
                if count == 0 {
                    return Err(EIO);
                }
            }
            // A forged or racing answer must not let accesses run past the extents.
            if start != found.size || extents.len() != found.extents as usize || extents.iter().any(|e| e.node >= LITE_MAX_NODES) {
                return Err(EIO);
            }
            return Ok((peer.id, found.id, found.size, extents));
        }
        Err(ENOENT)
    }

    /// A node asks for `name` with `perm` (0: only whether it exists).
    fn master_lookup(&self, node: u32, namespace: u32, name: &[u8; NAME_LEN], perm: u32) -> Result<wire::Found> {
        let key = name_key(namespace, name)?;
        let mut mem = self.mem.lock();
        let id = *mem.names.get(&key).ok_or(ENOENT)?;
        if id == 0 {
            // Being allocated: taken, not mappable yet.
            return if perm == 0 { Ok(wire::Found { id: 0, size: 0, extents: 0 }) } else { Err(ENOENT) };
        }
        let lmr = mem.lmrs.get_mut(&id).ok_or(ENOENT)?;
        if !region::perm_allows(lmr.allowed(node), perm) {
            return Err(EACCES);
        }
        if perm != 0 {
            lmr.mappers |= 1 << node;
        }
        Ok(wire::Found { id, size: lmr.size, extents: lmr.extents.len() as u32 })
    }

    fn master_extents(&self, id: u64) -> Result<KVec<Extent>> {
        let mem = self.mem.lock();
        copy_extents(&mem.lmrs.get(&id).ok_or(ENOENT)?.extents)
    }

    /// Extents of LMR `id` from `first` on, for a node that mapped it.
    fn master_chunks(&self, node: u32, query: &wire::ChunksQuery) -> Result<KVec<u8>> {
        let mem = self.mem.lock();
        let lmr = mem.lmrs.get(&query.id).ok_or(ENOENT)?;
        if lmr.mappers & (1 << node) == 0 {
            return Err(EACCES);
        }
        let from = (query.first as usize).min(lmr.extents.len());
        let to = (from + wire::EXTENTS_PER_MSG).min(lmr.extents.len());
        let mut list = KVec::with_capacity(to - from, GFP_KERNEL)?;
        for e in &lmr.extents[from..to] {
            list.push((e.node, e.addr, e.len), GFP_KERNEL)?;
        }
        let mut body = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
        let len = wire::encode_extents(&mut body, &list).ok_or(EINVAL)?;
        truncate(&mut body, len);
        Ok(body)
    }

    /// `node` (with master permission) sets what `target` may map LMR `id` with.
    fn master_grant(&self, node: u32, grant: &wire::Grant) -> Result {
        if !region::perm_known(grant.perm) || (grant.node != LITE_NODE_ANY && grant.node >= LITE_MAX_NODES) {
            return Err(EINVAL);
        }
        let me = self.me()?;
        let mut mem = self.mem.lock();
        let lmr = mem.lmrs.get_mut(&grant.id).ok_or_else(EIDRM)?;
        if node != me && !region::perm_allows(lmr.allowed(node), PERM_MASTER) {
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
    fn free_lmr(&self, id: u64) -> Result {
        let me = self.me()?;
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
            } else if let Ok(peer) = self.peer(node) {
                // A mapper that cannot be told is fenced off before the memory goes.
                let _ = peer.confirm(MsgKind::Revoke, &wire::LmrId { id });
            }
        }
        Ok(lmr.holders())
    }

    /// Frees LMRs `ids` of this master, as `free_lmr` each (ids freed already are
    /// skipped), but tells each remote holder in lists of up to `IDS_PER_MSG`: a
    /// process that exits with 100 000 LMRs costs hundreds of round trips, not
    /// 100 000.
    fn free_lmrs(&self, ids: &[u64]) {
        let Ok(me) = self.me() else { return };
        // (holder, id) for the remote holders, and a message body.
        let (Ok(mut remote), Ok(mut body)) =
            (KVec::with_capacity(ids.len(), GFP_KERNEL), KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL))
        else {
            // No memory for the lists: a round trip per LMR.
            for &id in ids {
                let _ = self.free_lmr(id);
            }
            return;
        };
        for &id in ids {
            let Ok(holders) = self.retire_lmr(me, id) else { continue };
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
            let Ok(peer) = self.peer(node) else { continue };
            let mut held = remote.iter().filter(|(holder, _)| *holder == node).map(|(_, id)| *id).peekable();
            while held.peek().is_some() {
                let Some(len) = wire::encode_ids(&mut body, &mut held) else { break };
                // A holder that cannot be told is dead and frees everything it held for us.
                let _ = peer.call(MsgKind::ReleaseMany, &body[..len], &mut [], CONTROL_TIMEOUT_MS);
            }
        }
    }

    /// `node` (with master permission) frees LMR `id` of this master.
    fn master_free(&self, node: u32, id: u64) -> Result {
        {
            let mem = self.mem.lock();
            let lmr = mem.lmrs.get(&id).ok_or_else(EIDRM)?;
            if !region::perm_allows(lmr.allowed(node), PERM_MASTER) {
                return Err(EPERM);
            }
        }
        self.free_lmr(id).map_err(|_| EIDRM())
    }

    /// Mappings of (`master`, `id`) on this node fail from now on with EIDRM.
    fn revoke_local(&self, master: u32, id: u64) {
        let maps = self.mem.lock().take_maps(master, Some(id));
        for mapping in maps.iter() {
            mapping.revoke(EIDRM());
        }
    }

    /// LT_grant through a handle with master permission.
    pub(crate) fn lmr_grant(&self, file: &Mutex<FileLmrs>, lh: u64, node: u32, perm: u32) -> Result {
        let (mapping, have) = file.lock().get(lh)?;
        if !region::perm_allows(have, PERM_MASTER) {
            return Err(EPERM);
        }
        let _use = mapping.begin()?;
        let grant = wire::Grant { id: mapping.id, node, perm };
        if mapping.master == self.me()? {
            self.master_grant(mapping.master, &grant)
        } else {
            self.peer(mapping.master)?.request(MsgKind::Grant, &grant, &mut []).map(drop)
        }
    }

    /// LT_free through a handle with master permission; the handle is released.
    pub(crate) fn lmr_free(&self, file: &Mutex<FileLmrs>, lh: u64) -> Result {
        let (mapping, have) = file.lock().get(lh)?;
        if !region::perm_allows(have, PERM_MASTER) {
            return Err(EPERM);
        }
        mapping.begin().map(drop)?;
        if mapping.master == self.me()? {
            self.free_lmr(mapping.id).map_err(|_| EIDRM())?;
            let mut files = file.lock();
            if let Some(i) = files.owned.iter().position(|&id| id == mapping.id) {
                swap_remove(&mut files.owned, i);
            }
        } else {
            self.peer(mapping.master)?.request(MsgKind::Free, &wire::LmrId { id: mapping.id }, &mut [])?;
        }
        self.lmr_unmap(file, lh)
    }

    /// LT_unmap: releases the handle; the LMR lives on. Operations still running
    /// through the handle are waited for: once the mapping is out of `maps`, a
    /// free of the LMR no longer reaches it.
    pub(crate) fn lmr_unmap(&self, file: &Mutex<FileLmrs>, lh: u64) -> Result {
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
            (core::mem::replace(&mut files.handles, RBTree::new()), core::mem::replace(&mut files.owned, KVec::new()))
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

    // ---- one-sided operations ----

    /// LT_read (`write` false) or LT_write of `len` bytes at `offset` of the LMR,
    /// from or to user memory at `buf`.
    pub(crate) fn lmr_rw(&self, file: &Mutex<FileLmrs>, lh: u64, offset: u64, buf: usize, len: u64, write: bool) -> Result {
        let (mapping, perm) = file.lock().get(lh)?;
        if !region::perm_allows(perm, if write { PERM_WRITE } else { PERM_READ }) {
            return Err(EACCES);
        }
        region::check_range(mapping.size, offset, len).map_err(range_error)?;
        let len = usize::try_from(len).map_err(|_| erange())?;
        buf.checked_add(len).ok_or(EFAULT)?;
        let using = mapping.begin()?;
        let me = self.me()?;
        for piece in region::pieces(&mapping.extents, offset, len as u64) {
            using.check()?;
            let node = mapping.extents[piece.extent].node;
            let at = buf + piece.pos as usize;
            let size = piece.len as usize;
            if node == me {
                let (chunk, off) = using.local()?.find(piece.addr, piece.len)?;
                if write {
                    chunk.copy_from_user(off, &mut UserSlice::new(at, size).reader(), size)?;
                } else {
                    chunk.copy_to_user(off, &mut UserSlice::new(at, size).writer(), size)?;
                }
            } else {
                self.peer(node)?.rdma_user(write, at, size, piece.addr, &|| using.check())?;
            }
        }
        Ok(())
    }

    /// The 8-byte word at `offset` of the LMR behind `lh`, for atomics, locks and
    /// barriers: needs read and write permission and 8-byte alignment.
    pub(crate) fn lmr_word(&self, file: &Mutex<FileLmrs>, lh: u64, offset: u64) -> Result<WordRef> {
        let (mapping, perm) = file.lock().get(lh)?;
        if !region::perm_allows(perm, PERM_READ | PERM_WRITE) {
            return Err(EACCES);
        }
        let (extent, addr) = region::atomic_word(&mapping.extents, mapping.size, offset).map_err(|e| match e {
            AtomicError::Misaligned => EINVAL,
            AtomicError::OutOfBounds => erange(),
        })?;
        let word = Word { holder: mapping.extents[extent].node, master: mapping.master, id: mapping.id, addr };
        Ok(WordRef { mapping, word })
    }

    /// An RDMA atomic on `word` by its holder's RNIC, so that it is atomic against
    /// every node's; fails once the LMR is freed. Returns the old value.
    pub(crate) fn word_atomic(&self, word: &WordRef, atomic: Atomic) -> Result<u64> {
        let _using = word.mapping.begin()?;
        self.atomic_on(&word.word, atomic, Wait::PollFirst)
    }

    /// As [`Self::word_atomic`], for the kernel's own work on a word whose memory the
    /// caller keeps alive.
    pub(crate) fn held_word_atomic(&self, word: &Word, atomic: Atomic) -> Result<u64> {
        self.atomic_on(word, atomic, Wait::Sleep)
    }

    /// `atomic` on `word` through its holder's RNIC (loopback when this node holds it).
    fn atomic_on(&self, word: &Word, atomic: Atomic, wait: Wait) -> Result<u64> {
        let peer = if word.holder == self.me()? { self.loopback()? } else { self.peer(word.holder)? };
        peer.atomic(atomic, word.addr, wait)
    }

    /// LT_fetch_add / LT_compare_swap on the 8-byte word at `offset`. Returns the old value.
    pub(crate) fn lmr_atomic(&self, file: &Mutex<FileLmrs>, lh: u64, offset: u64, atomic: Atomic) -> Result<u64> {
        let word = self.lmr_word(file, lh, offset)?;
        self.word_atomic(&word, atomic)
    }

    /// EINVAL unless `word` (from a peer) is 8 bytes this node holds for its LMR;
    /// EIDRM once the LMR is freed.
    pub(crate) fn check_held_word(&self, word: &Word) -> Result {
        self.held_memory(word.master, word.id)?.find(word.addr, 8).map(drop)
    }

    /// LT_memset, executed by the holders.
    pub(crate) fn lmr_memset(&self, file: &Mutex<FileLmrs>, lh: u64, offset: u64, len: u64, value: u32) -> Result {
        let (mapping, perm) = file.lock().get(lh)?;
        if value > 0xFF {
            return Err(EINVAL);
        }
        if !region::perm_allows(perm, PERM_WRITE) {
            return Err(EACCES);
        }
        region::check_range(mapping.size, offset, len).map_err(range_error)?;
        let using = mapping.begin()?;
        let me = self.me()?;
        for piece in region::pieces(&mapping.extents, offset, len) {
            using.check()?;
            let node = mapping.extents[piece.extent].node;
            if node == me {
                let (chunk, off) = using.local()?.find(piece.addr, piece.len)?;
                chunk.fill(off, piece.len as usize, value as u8)?;
            } else {
                let req = wire::Memset { master: mapping.master, value, id: mapping.id, addr: piece.addr, len: piece.len };
                self.peer(node)?.request(MsgKind::Memset, &req, &mut [])?;
            }
        }
        Ok(())
    }

    /// LT_memcpy / LT_memmove, executed by the holders of the source.
    pub(crate) fn lmr_memcpy(&self, file: &Mutex<FileLmrs>, dst_lh: u64, dst_off: u64, src_lh: u64, src_off: u64, len: u64) -> Result {
        let ((dst, dst_perm), (src, src_perm)) = {
            let files = file.lock();
            (files.get(dst_lh)?, files.get(src_lh)?)
        };
        if !region::perm_allows(dst_perm, PERM_WRITE) || !region::perm_allows(src_perm, PERM_READ) {
            return Err(EACCES);
        }
        region::check_range(dst.size, dst_off, len).map_err(range_error)?;
        region::check_range(src.size, src_off, len).map_err(range_error)?;
        let dst_use = dst.begin()?;
        let src_use = src.begin()?;
        // Pieces that each stay inside one source and one destination chunk.
        let mut steps = KVec::new();
        for s in region::pieces(&src.extents, src_off, len) {
            for d in region::pieces(&dst.extents, dst_off + s.pos, s.len) {
                steps.push((s.extent, s.addr + d.pos, d.extent, d.addr, d.len), GFP_KERNEL)?;
            }
        }
        // Copying towards higher offsets of the same LMR goes backwards, so an
        // overlapping move never reads bytes it already overwrote.
        let same = dst.master == src.master && dst.id == src.id;
        if same && dst_off > src_off {
            steps.reverse();
        }
        let me = self.me()?;
        for &(s_ext, s_addr, d_ext, d_addr, n) in steps.iter() {
            dst_use.check()?;
            src_use.check()?;
            let s_node = src.extents[s_ext].node;
            let d_node = dst.extents[d_ext].node;
            if s_node == me {
                let (from, from_off) = src_use.local()?.find(s_addr, n)?;
                if d_node == me {
                    let (to, to_off) = dst_use.local()?.find(d_addr, n)?;
                    to.move_from(to_off, from, from_off, n as usize)?;
                } else {
                    self.peer(d_node)?.rdma_write_kernel(from, from_off, n as usize, d_addr)?;
                }
            } else {
                let req = wire::Copy {
                    src_master: src.master,
                    dst_master: dst.master,
                    src_id: src.id,
                    src_addr: s_addr,
                    dst_id: dst.id,
                    dst_addr: d_addr,
                    len: n,
                    dst_node: d_node,
                };
                self.peer(s_node)?.request(MsgKind::Copy, &req, &mut [])?;
            }
        }
        Ok(())
    }

    /// Describes the LMR behind `lh`.
    pub(crate) fn lmr_stat(&self, file: &Mutex<FileLmrs>, lh: u64) -> Result<LiteLmrStat> {
        let (mapping, perm) = file.lock().get(lh)?;
        drop(mapping.begin()?);
        Ok(LiteLmrStat {
            lh,
            size: mapping.size,
            perm,
            master_node: mapping.master,
            nr_chunks: mapping.extents.len() as u32,
            holders: mapping.extents.iter().fold(0, |mask, e| mask | 1 << e.node),
        })
    }

    /// Counts of this node's LMR bookkeeping, with the lock and barrier queues.
    pub(crate) fn mem_stat(&self) -> LiteMemStat {
        let (lock_queued, barrier_queued) = self.sync_queued();
        let mem = self.mem.lock();
        LiteMemStat {
            mastered: mem.lmrs.iter().count() as u32,
            mappings: mem.maps.iter().count() as u32,
            held_bytes: mem.held_bytes,
            held_limit: hold_limit(),
            lock_queued,
            barrier_queued,
            reserve_bytes: mem.reserve.len() as u64 * CHUNK_MAX,
            reserve_target: mem.reserve_target as u64 * CHUNK_MAX,
            reserve_used: mem.reserve_used * CHUNK_MAX,
        }
    }

    // ---- requests from peers (process context, on the module's workqueue) ----

    /// Serves an LMR request of `peer`; returns the answer's body.
    pub(crate) fn serve_lmr_request(&self, peer: &Peer, kind: MsgKind, body: &[u8]) -> Result<KVec<u8>> {
        let from = peer.id;
        let empty = KVec::new();
        match kind {
            MsgKind::Alloc => {
                let req: wire::Alloc = decode(body)?;
                let extents = self.hold(from, req.id, req.bytes, wire::EXTENTS_PER_MSG)?;
                let mut out = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
                let len = wire::encode_extents(&mut out, &extents).ok_or(EINVAL)?;
                truncate(&mut out, len);
                Ok(out)
            }
            MsgKind::Release => {
                let req: wire::LmrId = decode(body)?;
                self.release(from, req.id);
                Ok(empty)
            }
            MsgKind::ReleaseMany => {
                wire::decode_ids(body, |id| self.release(from, id)).ok_or(EINVAL)?;
                Ok(empty)
            }
            MsgKind::Lookup => {
                let req: wire::Lookup = decode(body)?;
                let found = self.master_lookup(from, req.namespace, &req.name, req.perm)?;
                let (buf, len) = encode(&found)?;
                let mut out = KVec::new();
                out.extend_from_slice(&buf[..len], GFP_KERNEL)?;
                Ok(out)
            }
            MsgKind::Chunks => self.master_chunks(from, &decode(body)?),
            MsgKind::Revoke => {
                let req: wire::LmrId = decode(body)?;
                self.revoke_local(from, req.id);
                Ok(empty)
            }
            MsgKind::Memset => self.holder_memset(&decode(body)?).map(|()| empty),
            MsgKind::Copy => self.holder_copy(&decode(body)?).map(|()| empty),
            MsgKind::Grant => self.master_grant(from, &decode(body)?).map(|()| empty),
            MsgKind::Free => {
                let req: wire::LmrId = decode(body)?;
                self.master_free(from, req.id).map(|()| empty)
            }
            MsgKind::Forget => {
                let req: wire::LmrId = decode(body)?;
                self.revoke_master(u32::try_from(req.id).map_err(|_| EINVAL)?);
                Ok(empty)
            }
            MsgKind::Lock => {
                let answer = self.serve_lock(from, &decode(body)?)?;
                let mut out = KVec::new();
                out.extend_from_slice(&answer.to_le_bytes(), GFP_KERNEL)?;
                Ok(out)
            }
            MsgKind::LockWake => self.lock_woken(from, &decode(body)?).map(|()| empty),
            MsgKind::Echo | MsgKind::RpcBind | MsgKind::RpcUnbind | MsgKind::RpcHead => Err(EINVAL),
        }
    }
}

fn copy_extents(extents: &[Extent]) -> Result<KVec<Extent>> {
    let mut out = KVec::with_capacity(extents.len(), GFP_KERNEL)?;
    for e in extents {
        out.push(*e, GFP_KERNEL)?;
    }
    Ok(out)
}
