// SPDX-License-Identifier: GPL-2.0
//! RPC and one-way messages (LITE §5): rings written with write-with-immediate,
//! replies written straight into the caller's buffer, and the shared-page slots
//! through which a process learns that its call completed.
//!
//! Client side (per peer, `RpcPeer`): a *binding* per RPC id called there, with
//! the client's view of its ring at the server; `CALL_SLOTS` call slots, each
//! holding what a call in flight owns (pinned output pages, staged header) until
//! its completion record arrives. Server side (node-wide, `RpcNode`): the
//! registered servers with their queues of received requests, and the bindings
//! (client node, id) with their rings.
//!
//! A request: the client reserves room in the ring, writes the payload (zero-copy
//! from the caller's pages, or staged when small), then the record header and the
//! caller's output runs with a write-with-immediate naming (binding, offset). The
//! server queues it; a server process receives it (payload copied to its buffer,
//! the ring space consumed) and replies: RDMA WRITEs into the caller's output
//! runs, then a write-with-immediate of a completion record into the caller's
//! mailbox, which also reports how far the ring is consumed. Nothing waits for
//! credit in completion context; a client without ring room waits (and asks the
//! server for its head), so nothing is dropped or overwritten.
//!
//! Locking: every lock here is a spinlock taken alone or in this order:
//! `RpcNode::servers` -> `Server::queue`; `RpcNode::bindings`,
//! `ServerBinding::ring`, `RpcPeer::calls`, `RpcPeer::bindings`,
//! `ClientBinding::state` and `FileRpc::slots` are leaves. Messages to peers and
//! pinning happen with none held.

use crate::errno::{ECONNREFUSED, ECONNRESET, EHOSTDOWN, EMSGSIZE, EOVERFLOW, ETIMEDOUT};
use crate::ffi;
use crate::kvec::{truncate, Fifo};
use crate::lmr::layout::{self, Extent};
use crate::net::verbs::{DmaBuf, UserPages};
use crate::net::wire::{
    self, Body, Bound, MsgKind, Reader, RpcBind, RpcDone, RpcUnbind, Writer, BINDINGS, CALL_SLOTS,
    RING_CHUNKS,
};
use crate::net::{Peer, CONTROL_TIMEOUT_MS};
use crate::node::Lite;
use crate::rpc_ring::{
    self, ClientRing, RecordHeader, Reservation, ServerRing, FLAG_ONEWAY, MAX_MSG, RING_BYTES,
    RUN_LEN,
};
use crate::uapi::*;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::rbtree::{RBTree, RBTreeNode, RBTreeNodeReservation};
use kernel::sync::{
    new_condvar, new_mutex, new_spinlock, Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLock,
};
use kernel::time::{msecs_to_jiffies, Ktime};
use kernel::uaccess::UserSlice;

/// Requests up to this size (record header, output runs and payload) are staged
/// in one buffer and posted as one write-with-immediate; larger payloads go
/// zero-copy from the caller's pages first.
const INLINE_MAX: usize = 4096;
/// A client without ring room asks the server for its head this often.
const HEAD_POLL_MS: u32 = 10;
/// Smallest ring chunk tried when memory is fragmented.
const RING_CHUNK_MIN: u64 = 64 << 10;

const SLOTS: usize = LITE_SLOTS as usize;
/// Calls one open file may have in flight to one peer, of the node's `CALL_SLOTS`:
/// a quarter stays for the node's other processes.
const CALLS_PER_FILE: usize = CALL_SLOTS * 3 / 4;
/// Requests one server's queue holds; past it, EAGAIN (a message from another
/// node is refused with it).
const QUEUE_MAX: usize = 4096;
/// RPC ids one open file, and the whole node, may serve.
const IDS_PER_FILE: usize = 256;
const IDS_PER_NODE: usize = 4096;

/// Kernel memory that requests from processes on this node may hold in servers'
/// queues until received: per sending file as much as one remote client's ring
/// (which bounds a remote sender), and for the whole node. Past either, EAGAIN.
const LOCAL_FILE_MAX: u64 = RING_BYTES;
const LOCAL_NODE_MAX: u64 = 64 << 20;
/// What a queued local request costs beyond its payload (the request, its queue entry).
const LOCAL_REQUEST_COST: u64 = 256;
/// Bytes queued in local requests on this node.
static LOCAL_QUEUED: AtomicU64 = AtomicU64::new(0);

/// Adds `bytes` to `counter` unless that takes it past `max`.
fn charge(counter: &AtomicU64, bytes: u64, max: u64) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            queued.checked_add(bytes).filter(|&n| n <= max)
        })
        .is_ok()
}
const _: () = assert!(MAX_MSG == LITE_RPC_MAX_MSG && FLAG_ONEWAY == LITE_RPC_ONEWAY);
const _: () = assert!(core::mem::size_of::<LiteSharedPage>() == 4096);

/// An error as a completion status (a positive errno).
fn status_of(err: Error) -> u32 {
    err.to_errno().unsigned_abs()
}

fn error_of(status: u32) -> Error {
    Error::from_errno(-(status.min(4095) as i32))
}

/// Nanoseconds of the monotonic clock.
fn now_ns() -> u64 {
    Ktime::ktime_get().to_ns() as u64
}

/// Jiffies left until `deadline` (ns), at least one; `None` once it passed.
fn jiffies_until(deadline: u64) -> Option<kernel::time::Jiffies> {
    let now = now_ns();
    if now >= deadline {
        return None;
    }
    let ms = ((deadline - now) / 1_000_000).min(u32::MAX as u64) as u32;
    Some(msecs_to_jiffies(ms.max(1)))
}

fn wait_result(result: CondVarTimeoutResult) -> Result {
    match result {
        CondVarTimeoutResult::Signal { .. } => Err(EINTR),
        _ => Ok(()),
    }
}

// ---- the shared page ----

/// The page a process maps from /dev/lite: its crossing counter and the slots
/// where the results of its asynchronous calls appear. Written by the kernel
/// through atomics only: the process may scribble on it at any time.
struct SharedPage {
    page: NonNull<LiteSharedPage>,
}

// SAFETY: the page is only accessed through atomics (or before it is shared).
unsafe impl Send for SharedPage {}
// SAFETY: see `Send`.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    fn new() -> Result<SharedPage> {
        // SAFETY: plain page allocation; NULL on failure.
        let page = NonNull::new(unsafe { ffi::lite_shared_page_alloc() }.cast::<LiteSharedPage>())
            .ok_or(ENOMEM)?;
        // SAFETY: a fresh zeroed page, not yet visible to user space.
        unsafe {
            (*page.as_ptr()).magic = LITE_SHARED_MAGIC;
            (*page.as_ptr()).abi_version = LITE_ABI_VERSION;
        }
        Ok(SharedPage { page })
    }

    fn u64_at(&self, field: *mut u64) -> &AtomicU64 {
        // SAFETY: `field` points into the page, which lives as long as `self`, and is
        // 8-byte aligned (asserted layout of the ABI structs).
        unsafe { AtomicU64::from_ptr(field) }
    }

    fn u32_at(&self, field: *mut u32) -> &AtomicU32 {
        // SAFETY: as in `u64_at`, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(field) }
    }

    fn count_crossing(&self) {
        // SAFETY: a field of the page.
        let count =
            self.u64_at(unsafe { core::ptr::addr_of_mut!((*self.page.as_ptr()).ioctl_count) });
        count.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes `slot`'s state; the result fields are written before `state`.
    fn publish(&self, slot: usize, state: u32, status: u32, len: u64, seq: u64) {
        if slot >= SLOTS {
            return;
        }
        // SAFETY: `slot` is in bounds, so the pointer stays inside the page.
        let s = unsafe { core::ptr::addr_of_mut!((*self.page.as_ptr()).slots[slot]) };
        // SAFETY: fields of a slot inside the page.
        unsafe {
            self.u32_at(core::ptr::addr_of_mut!((*s).error))
                .store(status, Ordering::Relaxed);
            self.u64_at(core::ptr::addr_of_mut!((*s).len))
                .store(len, Ordering::Relaxed);
            self.u64_at(core::ptr::addr_of_mut!((*s).seq))
                .store(seq, Ordering::Relaxed);
            self.u32_at(core::ptr::addr_of_mut!((*s).state))
                .store(state, Ordering::Release);
        }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; a process still mapping it holds its own reference.
        unsafe { ffi::lite_shared_page_free(self.page.as_ptr().cast()) };
    }
}

// ---- per open file ----

/// What the kernel knows of a shared-page slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotUse {
    Idle,
    /// A call is in flight on it until `deadline` (ns).
    Pending {
        seq: u64,
        deadline: u64,
    },
}

/// A local request's share of the sender's and the node's queue bounds, given
/// back when the request is received or dropped.
struct LocalCharge {
    sender: Arc<FileRpc>,
    bytes: u64,
}

impl LocalCharge {
    fn new(sender: &Arc<FileRpc>, payload: usize) -> Result<LocalCharge> {
        let bytes = payload as u64 + LOCAL_REQUEST_COST;
        if !charge(&sender.local_queued, bytes, LOCAL_FILE_MAX) {
            return Err(EAGAIN);
        }
        if !charge(&LOCAL_QUEUED, bytes, LOCAL_NODE_MAX) {
            sender.local_queued.fetch_sub(bytes, Ordering::AcqRel);
            return Err(EAGAIN);
        }
        Ok(LocalCharge {
            sender: sender.clone(),
            bytes,
        })
    }
}

impl Drop for LocalCharge {
    fn drop(&mut self) {
        self.sender
            .local_queued
            .fetch_sub(self.bytes, Ordering::AcqRel);
        LOCAL_QUEUED.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A caller on this node waiting in its shared-page slot (a local call).
struct LocalCaller {
    id: u32,
    waiter: Arc<FileRpc>,
    user_slot: usize,
    seq: u64,
    output: Output,
    capacity: u64,
}

impl LocalCaller {
    fn complete(self, result: Result<u64>) {
        self.waiter.complete(self.user_slot, self.seq, result);
    }
}

/// A request received by a server process and not yet answered.
enum Owed {
    Remote {
        peer: Arc<Peer>,
        binding: Arc<ServerBinding>,
        slot: u32,
        seq: u64,
        /// The caller's output buffer.
        runs: KVec<(u64, u32)>,
        capacity: u64,
    },
    Local(LocalCaller),
}

impl Owed {
    fn id(&self) -> u32 {
        match self {
            Owed::Remote { binding, .. } => binding.id,
            Owed::Local(caller) => caller.id,
        }
    }

    /// The server will not answer: its caller fails with `err`.
    fn fail(self, err: Error) {
        match self {
            Owed::Remote {
                peer,
                binding,
                slot,
                seq,
                ..
            } => {
                let _ = answer(&peer, &binding, slot, seq, Err(err));
            }
            Owed::Local(caller) => caller.complete(Err(err)),
        }
    }
}

/// RPC state of one open file of /dev/lite (one process, normally).
#[pin_data]
pub(crate) struct FileRpc {
    page: SharedPage,
    #[pin]
    slots: SpinLock<[SlotUse; SLOTS]>,
    #[pin]
    slot_done: CondVar,
    /// Requests received and owed a reply, by token.
    #[pin]
    owed: Mutex<RBTree<u64, Owed>>,
    /// Ids this file serves.
    #[pin]
    ids: Mutex<KVec<u32>>,
    /// Bytes of this file's requests queued at servers on this node (`LocalCharge`).
    local_queued: AtomicU64,
}

impl FileRpc {
    pub(crate) fn new() -> Result<Arc<FileRpc>> {
        let page = SharedPage::new()?;
        Arc::pin_init(
            pin_init!(FileRpc {
                page,
                slots <- new_spinlock!([SlotUse::Idle; SLOTS], "lite:file.slots"),
                slot_done <- new_condvar!("lite:file.slot_done"),
                owed <- new_mutex!(RBTree::new(), "lite:file.owed"),
                ids <- new_mutex!(KVec::new(), "lite:file.ids"),
                local_queued: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// Kernel address of the shared page, for mmap.
    pub(crate) fn shared_page(&self) -> *mut core::ffi::c_void {
        self.page.page.as_ptr().cast()
    }

    pub(crate) fn count_crossing(&self) {
        self.page.count_crossing();
    }

    /// Claims `slot` for a call until `deadline`; EBUSY while another call uses it.
    fn claim(&self, slot: usize, seq: u64, deadline: u64) -> Result {
        let mut slots = self.slots.lock();
        let now = now_ns();
        match slots.get(slot) {
            // A call abandoned past its deadline (its late result is ignored by seq).
            Some(SlotUse::Idle) | Some(SlotUse::Pending { deadline: _, .. })
                if Self::expired(&slots[slot], now) =>
            {
                slots[slot] = SlotUse::Pending { seq, deadline };
                self.page.publish(slot, LITE_SLOT_PENDING, 0, 0, seq);
                Ok(())
            }
            Some(_) => Err(EBUSY),
            None => Err(EINVAL),
        }
    }

    fn expired(slot: &SlotUse, now: u64) -> bool {
        match slot {
            SlotUse::Idle => true,
            SlotUse::Pending { deadline, .. } => now >= *deadline,
        }
    }

    /// The call `seq` on `slot` ended: publish its result and wake the waiter.
    /// A call abandoned at its deadline finds its slot reused or idle: ignored.
    fn complete(&self, slot: usize, seq: u64, result: Result<u64>) {
        let mut slots = self.slots.lock();
        match slots.get(slot) {
            Some(&SlotUse::Pending { seq: pending, .. }) if pending == seq => {}
            _ => return,
        }
        slots[slot] = SlotUse::Idle;
        let (status, len) = match result {
            Ok(len) => (0, len),
            Err(e) => (status_of(e), 0),
        };
        self.page.publish(slot, LITE_SLOT_DONE, status, len, seq);
        drop(slots);
        self.slot_done.notify_all();
    }

    /// Like `complete` for an EOVERFLOW whose true size the caller learns.
    fn complete_overflow(&self, slot: usize, seq: u64, len: u64) {
        let mut slots = self.slots.lock();
        if !matches!(slots.get(slot), Some(&SlotUse::Pending { seq: pending, .. }) if pending == seq)
        {
            return;
        }
        slots[slot] = SlotUse::Idle;
        self.page
            .publish(slot, LITE_SLOT_DONE, status_of(EOVERFLOW()), len, seq);
        drop(slots);
        self.slot_done.notify_all();
    }

    /// LITE_IOC_WAIT: sleeps until the call on `slot` is done; at its deadline the
    /// call completes with ETIMEDOUT (its late reply, if any, is ignored).
    pub(crate) fn wait(&self, slot: usize) -> Result {
        let mut slots = self.slots.lock();
        loop {
            let (seq, deadline) = match slots.get(slot) {
                None => return Err(EINVAL),
                Some(SlotUse::Idle) => return Ok(()),
                Some(&SlotUse::Pending { seq, deadline }) => (seq, deadline),
            };
            let Some(left) = jiffies_until(deadline) else {
                slots[slot] = SlotUse::Idle;
                self.page
                    .publish(slot, LITE_SLOT_DONE, status_of(ETIMEDOUT()), 0, seq);
                return Ok(());
            };
            wait_result(self.slot_done.wait_interruptible_timeout(&mut slots, left))?;
        }
    }
}

// ---- client side, per peer ----

/// This node's binding to one RPC id at a peer: its view of the ring there.
#[pin_data]
struct ClientBinding {
    id: u32,
    /// The binding's index at the server (in every immediate).
    index: u32,
    /// The ring's chunks in ring order (`start` is the ring offset).
    extents: KVec<Extent>,
    #[pin]
    state: SpinLock<ClientState>,
    #[pin]
    changed: CondVar,
}

struct ClientState {
    ring: ClientRing,
    /// Records reserved whose call has not ended.
    users: u32,
    /// The server unbound it, or a post failed: new calls bind anew.
    dead: bool,
}

impl ClientBinding {
    /// Reserves `len` bytes of ring, waiting for room (and asking the server how
    /// far it consumed) until `deadline`.
    fn reserve(&self, peer: &Peer, len: u64, deadline: u64) -> Result<Reservation> {
        loop {
            {
                let mut st = self.state.lock();
                if st.dead {
                    return Err(EAGAIN);
                }
                if let Some(r) = st.ring.reserve(len) {
                    st.users += 1;
                    return Ok(r);
                }
                let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
                let poll = msecs_to_jiffies(HEAD_POLL_MS);
                if let CondVarTimeoutResult::Signal { .. } = self
                    .changed
                    .wait_interruptible_timeout(&mut st, if left < poll { left } else { poll })
                {
                    return Err(EINTR);
                }
            }
            let query = RpcUnbind {
                binding: self.index,
                id: self.id,
            };
            let mut answer = [0u8; 8];
            if peer.request(MsgKind::RpcHead, &query, &mut answer).is_ok() {
                self.head_reported(u64::from_le_bytes(answer));
            }
        }
    }

    fn head_reported(&self, head: u64) {
        if self.state.lock().ring.set_head(head) {
            self.changed.notify_all();
        }
    }

    fn head_offset_reported(&self, offset: u64) {
        let head = self.state.lock().ring.head_from_offset(offset);
        if let Some(head) = head {
            self.head_reported(head);
        }
    }

    /// A call that reserved ring room ended.
    fn put_user(&self) {
        let mut st = self.state.lock();
        st.users = st.users.saturating_sub(1);
        drop(st);
        self.changed.notify_all();
    }

    fn kill(&self) {
        self.state.lock().dead = true;
        self.changed.notify_all();
    }

    fn is_dead(&self) -> bool {
        self.state.lock().dead
    }
}

/// Where a reply goes.
enum Output {
    None,
    /// The caller's pages, pinned until the call ends.
    User(UserPages),
    /// A kernel caller's buffer.
    Kernel(Arc<DmaBuf>),
}

/// What a call in flight owns until its completion record arrives.
struct Call {
    seq: u64,
    waiter: Arc<FileRpc>,
    user_slot: usize,
    binding: Arc<ClientBinding>,
    /// Kept mapped until the reply: the RNIC writes it.
    _output: Output,
    /// The posted header (and payload): the RNIC reads it until the request lands.
    _stage: Arc<DmaBuf>,
}

enum CallSlot {
    Free,
    /// Reserved by a call being posted.
    Claimed,
    Active(KBox<Call>),
}

struct CallTable {
    slots: [CallSlot; CALL_SLOTS],
    next_seq: u64,
    failed: bool,
}

/// RPC state this node keeps per peer, as a client.
#[pin_data]
pub(crate) struct RpcPeer {
    #[pin]
    calls: SpinLock<CallTable>,
    #[pin]
    call_freed: CondVar,
    #[pin]
    bindings: SpinLock<KVec<Arc<ClientBinding>>>,
    /// Serializes binding to an id, so that two callers do not both bind.
    #[pin]
    bind_lock: Mutex<()>,
}

impl RpcPeer {
    pub(crate) fn new() -> impl PinInit<RpcPeer> {
        pin_init!(RpcPeer {
            calls <- new_spinlock!(
                CallTable { slots: core::array::from_fn(|_| CallSlot::Free), next_seq: 1, failed: false },
                "lite:rpc.calls"
            ),
            call_freed <- new_condvar!("lite:rpc.call_freed"),
            bindings <- new_spinlock!(KVec::new(), "lite:rpc.bindings"),
            bind_lock <- new_mutex!((), "lite:rpc.bind"),
        })
    }

    fn find(&self, id: u32) -> Option<Arc<ClientBinding>> {
        self.bindings
            .lock()
            .iter()
            .find(|b| b.id == id && !b.is_dead())
            .cloned()
    }

    fn by_index(&self, index: u32) -> Option<Arc<ClientBinding>> {
        self.bindings
            .lock()
            .iter()
            .find(|b| b.index == index)
            .cloned()
    }

    /// The live binding to `id` at `peer`, binding first if needed.
    fn binding(&self, peer: &Peer, id: u32) -> Result<Arc<ClientBinding>> {
        if let Some(b) = self.find(id) {
            return Ok(b);
        }
        let _bind = self.bind_lock.lock();
        if let Some(b) = self.find(id) {
            return Ok(b);
        }
        let mut answer = KVec::from_elem(0u8, wire::BODY_MAX, GFP_KERNEL)?;
        let len = peer.request(MsgKind::RpcBind, &RpcBind { id }, &mut answer)?;
        let bound = Bound::decode(&mut Reader::new(&answer[..len])).ok_or(EIO)?;
        let mut extents = KVec::with_capacity(bound.count as usize, GFP_KERNEL)?;
        let mut size = 0u64;
        for &(addr, len) in bound.chunks.get(..bound.count as usize).ok_or(EIO)? {
            if len == 0 || len % rpc_ring::RECORD_ALIGN != 0 {
                return Err(EIO);
            }
            extents.push(
                Extent {
                    node: peer.id,
                    start: size,
                    addr,
                    len,
                },
                GFP_KERNEL,
            )?;
            size = size.checked_add(len).ok_or(EIO)?;
        }
        if bound.binding as usize >= BINDINGS
            || size < rpc_ring::MAX_RECORD * 2
            || size > 2 * RING_BYTES
        {
            return Err(EIO);
        }
        let binding = Arc::pin_init(
            pin_init!(ClientBinding {
                id,
                index: bound.binding,
                extents,
                state <- new_spinlock!(
                    ClientState { ring: ClientRing::new(size, bound.head), users: 0, dead: false },
                    "lite:rpc.binding"
                ),
                changed <- new_condvar!("lite:rpc.binding.changed"),
            }),
            GFP_KERNEL,
        )?;
        let mut list = self.bindings.lock();
        // Dead bindings whose calls all ended are forgotten here.
        let mut i = 0;
        while i < list.len() {
            let done = {
                let st = list[i].state.lock();
                st.dead && st.users == 0
            };
            if done {
                crate::kvec::swap_remove(&mut list, i);
            } else {
                i += 1;
            }
        }
        list.push(binding.clone(), GFP_ATOMIC)?;
        Ok(binding)
    }

    /// Claims a call slot, waiting for one until `deadline`. A call outlives its
    /// caller's timeout until the server answers: `caller` (none for a message)
    /// gets EAGAIN while it has `CALLS_PER_FILE` calls there, so that no process
    /// can take every slot to this peer from the others.
    fn claim(&self, deadline: u64, caller: Option<&FileRpc>) -> Result<(usize, u64)> {
        let mut table = self.calls.lock();
        loop {
            if table.failed {
                return Err(EHOSTDOWN());
            }
            if let Some(file) = caller {
                let mine = table.slots.iter().filter(
                    |s| matches!(s, CallSlot::Active(c) if core::ptr::eq(&*c.waiter, file)),
                );
                if mine.count() >= CALLS_PER_FILE {
                    return Err(EAGAIN);
                }
            }
            if let Some(slot) = table.slots.iter().position(|s| matches!(s, CallSlot::Free)) {
                let seq = table.next_seq;
                table.next_seq += 1;
                table.slots[slot] = CallSlot::Claimed;
                return Ok((slot, seq));
            }
            let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
            wait_result(self.call_freed.wait_interruptible_timeout(&mut table, left))?;
        }
    }

    fn unclaim(&self, slot: usize) {
        self.calls.lock().slots[slot] = CallSlot::Free;
        self.call_freed.notify_all();
    }

    /// Makes a claimed slot active; false when the peer failed meanwhile.
    fn activate(&self, slot: usize, call: KBox<Call>) -> core::result::Result<(), KBox<Call>> {
        let mut table = self.calls.lock();
        if table.failed {
            return Err(call);
        }
        table.slots[slot] = CallSlot::Active(call);
        Ok(())
    }

    /// Takes the call in `slot` if it is `seq` (any when `None`), freeing the slot.
    fn take(&self, slot: usize, seq: Option<u64>) -> Option<KBox<Call>> {
        let mut table = self.calls.lock();
        let matches = match table.slots.get(slot)? {
            CallSlot::Active(call) => seq.map_or(true, |s| s == call.seq),
            _ => false,
        };
        if !matches {
            return None;
        }
        let CallSlot::Active(call) = core::mem::replace(&mut table.slots[slot], CallSlot::Free)
        else {
            return None;
        };
        drop(table);
        self.call_freed.notify_all();
        Some(call)
    }

    /// The peer is unreachable: every call fails, every binding dies. Its QPs are
    /// in error or gone, so nothing writes into the callers' buffers any more.
    pub(crate) fn fail_all(&self) {
        self.calls.lock().failed = true;
        for slot in 0..CALL_SLOTS {
            if let Some(call) = self.take(slot, None) {
                end_call(call, Err(EHOSTDOWN()));
            }
        }
        let list = core::mem::replace(&mut *self.bindings.lock(), KVec::new());
        for b in list.iter() {
            b.kill();
        }
        self.call_freed.notify_all();
    }

    /// Calls in flight (abandoned ones included) and live bindings.
    fn counts(&self) -> (u32, u32) {
        let calls = self
            .calls
            .lock()
            .slots
            .iter()
            .filter(|s| !matches!(s, CallSlot::Free))
            .count() as u32;
        let bindings = self.bindings.lock().iter().filter(|b| !b.is_dead()).count() as u32;
        (calls, bindings)
    }
}

/// Ends a call taken out of its slot: the ring room is released, the caller told.
fn end_call(call: KBox<Call>, result: Result<u64>) {
    call.binding.put_user();
    call.waiter.complete(call.user_slot, call.seq, result);
}

// ---- server side, node-wide ----

/// A request in a server's queue.
enum Request {
    /// In the ring of `binding`, from another node.
    Remote {
        peer: Arc<Peer>,
        binding: Arc<ServerBinding>,
        header: RecordHeader,
    },
    /// From a process on this node; `caller` is `None` for a message.
    Local {
        node: u32,
        payload: KVec<u8>,
        caller: Option<LocalCaller>,
        charge: LocalCharge,
    },
}

impl Request {
    fn len(&self) -> u64 {
        match self {
            Request::Remote { header, .. } => header.len,
            Request::Local { payload, .. } => payload.len() as u64,
        }
    }

    fn node(&self) -> u32 {
        match self {
            Request::Remote { peer, .. } => peer.id,
            Request::Local { node, .. } => *node,
        }
    }

    /// The server is gone: the caller fails with `err`, the ring room is freed.
    fn refuse(self, err: Error) {
        match self {
            Request::Remote {
                peer,
                binding,
                header,
            } => {
                if header.flags & FLAG_ONEWAY == 0 {
                    let _ = answer(&peer, &binding, header.slot, header.seq, Err(err));
                }
                binding.consume(&header);
            }
            Request::Local { caller, .. } => {
                if let Some(caller) = caller {
                    caller.complete(Err(err));
                }
            }
        }
    }
}

struct Queue {
    requests: Fifo<Request>,
    closed: bool,
}

/// A registered RPC id and the requests waiting for its server process.
#[pin_data]
struct Server {
    id: u32,
    /// The serving open file (identity only).
    owner: usize,
    #[pin]
    queue: SpinLock<Queue>,
    #[pin]
    arrived: CondVar,
}

/// A ring this node keeps for one client node's calls to one id.
#[pin_data]
struct ServerBinding {
    index: usize,
    id: u32,
    /// The client, in the incarnation that bound.
    peer: Arc<Peer>,
    chunks: KVec<DmaBuf>,
    extents: KVec<Extent>,
    #[pin]
    ring: SpinLock<ServerRing>,
}

impl ServerBinding {
    fn size(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }

    /// Copies `out.len()` ring bytes from ring offset `offset` (within the ring).
    fn read(&self, offset: u64, out: &mut [u8]) -> Result {
        for piece in layout::pieces(&self.extents, offset, out.len() as u64) {
            let chunk = self.chunks.get(piece.extent).ok_or(EINVAL)?;
            let at = (piece.addr - self.extents[piece.extent].addr) as usize;
            let pos = piece.pos as usize;
            chunk.read(at, &mut out[pos..pos + piece.len as usize])?;
        }
        Ok(())
    }

    /// Copies `len` ring bytes at `offset` to user memory at `addr`.
    fn copy_to_user(&self, offset: u64, addr: usize, len: usize) -> Result {
        for piece in layout::pieces(&self.extents, offset, len as u64) {
            let chunk = self.chunks.get(piece.extent).ok_or(EINVAL)?;
            let at = (piece.addr - self.extents[piece.extent].addr) as usize;
            let size = piece.len as usize;
            let mut writer = UserSlice::new(addr + piece.pos as usize, size).writer();
            chunk.copy_to_user(at, &mut writer, size)?;
        }
        Ok(())
    }

    /// The header and output runs of the record at ring offset `offset`.
    fn record(&self, offset: u64) -> Option<RecordHeader> {
        let mut raw = [0u8; rpc_ring::HEADER_LEN];
        self.read(offset, &mut raw).ok()?;
        let header = RecordHeader::decode(&raw)?;
        self.ring.lock().check(offset, &header).ok()?;
        Some(header)
    }

    /// Marks `header`'s record consumed; pushes the head to the client when a
    /// quarter of the ring went by unreported.
    fn consume(&self, header: &RecordHeader) {
        let (consumed, report) = {
            let mut ring = self.ring.lock();
            let consumed = ring.consume(header);
            (consumed, ring.report_due())
        };
        if consumed.is_err() {
            pr_warn!(
                "node {} broke the RPC ring protocol; its calls to id {} will stall\n",
                self.peer.id,
                self.id
            );
        }
        if let Some(head) = report {
            let size = self.size();
            if let Some(payload) =
                wire::encode_ring_imm(self.index, rpc_ring::ring_offset(head, size))
            {
                let _ = self
                    .peer
                    .post_imm(self.index, wire::ImmKind::RpcHead, payload);
            }
        }
    }

    /// The head, as reported to the client along with a reply.
    fn head_for_reply(&self) -> u64 {
        let mut ring = self.ring.lock();
        let head = ring.head();
        ring.reported(head);
        head
    }
}

/// RPC state of this node: registered servers and the rings they are called through.
#[pin_data]
pub(crate) struct RpcNode {
    #[pin]
    servers: SpinLock<RBTree<u32, Arc<Server>>>,
    #[pin]
    bindings: SpinLock<KVec<Option<Arc<ServerBinding>>>>,
    /// Serializes making bindings, so that each gets a table index of its own.
    #[pin]
    bind_lock: Mutex<()>,
    next_token: AtomicU64,
}

/// What a receive found.
pub(crate) struct Received {
    pub(crate) len: u64,
    pub(crate) token: u64,
    pub(crate) node: u32,
    pub(crate) flags: u32,
    pub(crate) capacity: u64,
}

/// Sends the completion record of a call that gets no data (an error, or an
/// empty reply) to the caller.
fn answer(
    req_peer: &Peer,
    binding: &ServerBinding,
    slot: u32,
    seq: u64,
    result: Result<u64>,
) -> Result {
    let (status, len) = match result {
        Ok(len) => (0, len),
        Err(e) => (status_of(e), 0),
    };
    let done = RpcDone {
        seq,
        len,
        status,
        binding: binding.index as u32,
        head: binding.head_for_reply(),
    };
    req_peer.post_done(slot as usize, &done)
}

impl RpcNode {
    pub(crate) fn new() -> impl PinInit<RpcNode> {
        pin_init!(RpcNode {
            servers <- new_spinlock!(RBTree::new(), "lite:rpc.servers"),
            bindings <- new_spinlock!(KVec::new(), "lite:rpc.server_bindings"),
            bind_lock <- new_mutex!((), "lite:rpc.bind_serial"),
            next_token: AtomicU64::new(1),
        })
    }

    fn server(&self, id: u32) -> Option<Arc<Server>> {
        self.servers.lock().get(&id).cloned()
    }

    fn binding(&self, index: usize) -> Option<Arc<ServerBinding>> {
        self.bindings.lock().get(index).and_then(|b| b.clone())
    }

    /// Bindings matching `keep` taken out of the table.
    fn take_bindings(
        &self,
        mut matches: impl FnMut(&ServerBinding) -> bool,
    ) -> KVec<Arc<ServerBinding>> {
        let mut out = KVec::new();
        let mut table = self.bindings.lock();
        for entry in table.iter_mut() {
            if entry.as_ref().is_some_and(|b| matches(b)) {
                if let Some(b) = entry.take() {
                    // Only fails without memory; the binding is then freed at once,
                    // which is safe for a dead peer and leaves a gap otherwise.
                    let _ = out.push(b, GFP_ATOMIC);
                }
            }
        }
        out
    }
}

impl Lite {
    // ---- servers (process context) ----

    /// LT_regRPC: `file` serves `id` on this node.
    pub(crate) fn rpc_register(&self, file: &FileRpc, id: u32) -> Result {
        if id == 0 {
            return Err(EINVAL);
        }
        let server = Arc::pin_init(
            pin_init!(Server {
                id,
                owner: file as *const FileRpc as usize,
                queue <- new_spinlock!(Queue { requests: Fifo::new(), closed: false }, "lite:rpc.queue"),
                arrived <- new_condvar!("lite:rpc.arrived"),
            }),
            GFP_KERNEL,
        )?;
        let node = RBTreeNode::new(id, server, GFP_KERNEL)?;
        let mut ids = file.ids.lock();
        if ids.len() >= IDS_PER_FILE {
            return Err(ENOSPC);
        }
        ids.reserve(1, GFP_KERNEL)?;
        {
            let mut servers = self.rpc.servers.lock();
            if servers.get(&id).is_some() {
                return Err(EEXIST);
            }
            if servers.iter().count() >= IDS_PER_NODE {
                return Err(ENOSPC);
            }
            servers.insert(node);
        }
        ids.push(id, GFP_KERNEL)?;
        Ok(())
    }

    /// Stops serving `id`: queued requests fail with ECONNRESET, the clients
    /// bound to it are told to stop writing, then their rings are freed.
    pub(crate) fn rpc_unregister(&self, file: &FileRpc, id: u32) -> Result {
        {
            let mut ids = file.ids.lock();
            let i = ids.iter().position(|&x| x == id).ok_or(ENOENT)?;
            crate::kvec::swap_remove(&mut ids, i);
        }
        let server = {
            let mut servers = self.rpc.servers.lock();
            match servers.get(&id) {
                Some(s) if s.owner == file as *const FileRpc as usize => servers.remove(&id),
                _ => None,
            }
        };
        let Some(server) = server else { return Ok(()) };
        let requests = {
            let mut q = server.queue.lock();
            q.closed = true;
            q.requests.drain()
        };
        server.arrived.notify_all();
        for req in requests.into_iter().flatten() {
            req.refuse(ECONNRESET());
        }
        // Replies this file owes for the id.
        let owed = {
            let mut owed = file.owed.lock();
            let mut tokens = KVec::new();
            for (token, o) in owed.iter() {
                if o.id() == id {
                    tokens.push(*token, GFP_KERNEL)?;
                }
            }
            let mut taken = KVec::new();
            for token in tokens.iter() {
                if let Some(o) = owed.remove(token) {
                    taken.push(o, GFP_KERNEL)?;
                }
            }
            taken
        };
        for o in owed.into_iter() {
            o.fail(ECONNRESET());
        }
        // Calls still arriving find no server and are refused through the binding,
        // which stays in the table until its client stopped writing to it.
        let bindings = {
            let table = self.rpc.bindings.lock();
            let mut out = KVec::new();
            for b in table.iter().flatten().filter(|b| b.id == id) {
                out.push(b.clone(), GFP_ATOMIC)?;
            }
            out
        };
        for b in bindings.iter() {
            let msg = RpcUnbind {
                binding: b.index as u32,
                id,
            };
            // A client that does not confirm is fenced off before the ring goes.
            let _ = b.peer.confirm(MsgKind::RpcUnbind, &msg);
            drop(self.rpc.take_bindings(|x| core::ptr::eq(x, &**b)));
        }
        Ok(())
    }

    /// Last close of a file: everything it serves goes.
    pub(crate) fn rpc_release(&self, file: &FileRpc) {
        loop {
            let id = file.ids.lock().first().copied();
            let Some(id) = id else { break };
            let _ = self.rpc_unregister(file, id);
        }
        let mut owed = core::mem::replace(&mut *file.owed.lock(), RBTree::new());
        loop {
            let next = owed.keys().next().copied();
            let Some(o) = next.and_then(|token| owed.remove(&token)) else {
                break;
            };
            o.fail(ECONNRESET());
        }
    }

    /// LT_recvRPC: the next request or message for `id`, payload copied to `buf`.
    /// `Err(EOVERFLOW)` leaves it queued; `Ok` with `len` tells its size then.
    pub(crate) fn rpc_recv(
        &self,
        file: &FileRpc,
        id: u32,
        buf: usize,
        buf_len: u64,
        timeout_ms: u32,
    ) -> Result<(Received, bool)> {
        let server = self
            .rpc
            .server(id)
            .filter(|s| s.owner == file as *const FileRpc as usize)
            .ok_or(ENOENT)?;
        let deadline = now_ns() + u64::from(timeout_ms) * 1_000_000;
        loop {
            let req = {
                let mut q = server.queue.lock();
                loop {
                    if let Some(front) = q.requests.front() {
                        if front.len() > buf_len {
                            let r = Received {
                                len: front.len(),
                                token: 0,
                                node: front.node(),
                                flags: 0,
                                capacity: 0,
                            };
                            return Ok((r, false));
                        }
                        break q.requests.pop().ok_or(EINVAL)?;
                    }
                    if q.closed {
                        return Err(ECONNRESET());
                    }
                    let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
                    wait_result(server.arrived.wait_interruptible_timeout(&mut q, left))?;
                }
            };
            match self.deliver(file, req, buf) {
                Ok(Some(received)) => return Ok((received, true)),
                // A malformed record was answered with an error; take the next one.
                Ok(None) => continue,
                Err((e, req)) => {
                    let _ = server.queue.lock().requests.push_front(req);
                    return Err(e);
                }
            }
        }
    }

    /// Hands a dequeued request to the server process: payload to `buf`, what the
    /// reply needs kept under a new token, ring room consumed. `Ok(None)`: the
    /// request was malformed and its caller told so. On `Err` the request is
    /// handed back untouched.
    fn deliver(
        &self,
        file: &FileRpc,
        req: Request,
        buf: usize,
    ) -> core::result::Result<Option<Received>, (Error, Request)> {
        let len = req.len() as usize;
        if buf.checked_add(len).is_none() {
            return Err((EFAULT, req));
        }
        // Taken before the request is consumed: remembering it cannot fail later.
        let reservation = match RBTreeNodeReservation::new(GFP_KERNEL) {
            Ok(r) => r,
            Err(e) => return Err((e.into(), req)),
        };
        let node = req.node();
        let owed = match req {
            Request::Remote {
                peer,
                binding,
                header,
            } => {
                let offset = rpc_ring::ring_offset(header.start, binding.size());
                if len > 0 {
                    if let Err(e) = binding.copy_to_user(offset + header.payload_offset(), buf, len)
                    {
                        return Err((
                            e,
                            Request::Remote {
                                peer,
                                binding,
                                header,
                            },
                        ));
                    }
                }
                let owed = if header.flags & FLAG_ONEWAY != 0 {
                    None
                } else {
                    match self.read_runs(&binding, offset, &header) {
                        Ok(runs) => Some(Owed::Remote {
                            peer,
                            binding: binding.clone(),
                            slot: header.slot,
                            seq: header.seq,
                            runs,
                            capacity: header.out_cap,
                        }),
                        Err(_) => {
                            let _ = answer(&peer, &binding, header.slot, header.seq, Err(EIO));
                            binding.consume(&header);
                            return Ok(None);
                        }
                    }
                };
                binding.consume(&header);
                owed
            }
            Request::Local {
                node,
                payload,
                caller,
                charge,
            } => {
                if let Err(e) = UserSlice::new(buf, len).writer().write_slice(&payload) {
                    return Err((
                        e,
                        Request::Local {
                            node,
                            payload,
                            caller,
                            charge,
                        },
                    ));
                }
                caller.map(Owed::Local)
            }
        };
        let (mut token, mut flags, mut capacity) = (0, LITE_RPC_ONEWAY, 0);
        if let Some(owed) = owed {
            token = self.rpc.next_token.fetch_add(1, Ordering::Relaxed);
            flags = 0;
            capacity = match &owed {
                Owed::Remote { capacity, .. } => *capacity,
                Owed::Local(caller) => caller.capacity,
            };
            file.owed.lock().insert(reservation.into_node(token, owed));
        }
        Ok(Some(Received {
            len: len as u64,
            token,
            node,
            flags,
            capacity,
        }))
    }

    fn read_runs(
        &self,
        binding: &ServerBinding,
        offset: u64,
        h: &RecordHeader,
    ) -> Result<KVec<(u64, u32)>> {
        let bytes = h.nruns as usize * RUN_LEN;
        let mut raw = KVec::from_elem(0u8, bytes, GFP_KERNEL)?;
        binding.read(offset + rpc_ring::HEADER_LEN as u64, &mut raw)?;
        let mut runs = KVec::with_capacity(h.nruns as usize, GFP_KERNEL)?;
        let mut total = 0u64;
        for raw_run in raw.chunks_exact(RUN_LEN) {
            let raw_run: &[u8; RUN_LEN] = raw_run.try_into().map_err(|_| EIO)?;
            let run = rpc_ring::decode_run(raw_run).ok_or(EIO)?;
            total += u64::from(run.1);
            runs.push(run, GFP_KERNEL)?;
        }
        if total != h.out_cap {
            return Err(EIO);
        }
        Ok(runs)
    }

    /// LT_replyRPC: writes `len` bytes at `buf` into the caller's output buffer,
    /// then completes its call. A reply larger than that buffer completes the call
    /// with EOVERFLOW and the reply's size.
    pub(crate) fn rpc_reply(&self, file: &FileRpc, token: u64, buf: usize, len: u64) -> Result {
        if len > MAX_MSG {
            return Err(EMSGSIZE());
        }
        let owed = file.owed.lock().remove(&token).ok_or(EBADF)?;
        let (peer, binding, slot, seq, runs, capacity) = match owed {
            Owed::Local(caller) => return self.reply_local(file, token, caller, buf, len),
            Owed::Remote {
                peer,
                binding,
                slot,
                seq,
                runs,
                capacity,
            } => (peer, binding, slot, seq, runs, capacity),
        };
        if len > capacity {
            let done = RpcDone {
                seq,
                len,
                status: status_of(EOVERFLOW()),
                binding: binding.index as u32,
                head: binding.head_for_reply(),
            };
            return peer.post_done(slot as usize, &done);
        }
        if len > 0 {
            let dev = match self.device() {
                Ok(dev) => dev,
                Err(e) => {
                    let _ = answer(&peer, &binding, slot, seq, Err(e));
                    return Err(e);
                }
            };
            let pages = match UserPages::pin(&dev, buf, len as usize, false) {
                Ok(pages) => pages,
                Err(e) => {
                    // The server may retry with a valid buffer.
                    let owed = Owed::Remote {
                        peer,
                        binding,
                        slot,
                        seq,
                        runs,
                        capacity,
                    };
                    if let Ok(node) = RBTreeNode::new(token, owed, GFP_KERNEL) {
                        file.owed.lock().insert(node);
                    }
                    return Err(e);
                }
            };
            let mut local = KVec::new();
            let written = pages
                .runs()
                .try_for_each(|run| local.push(run, GFP_KERNEL))
                .map_err(Error::from)
                .and_then(|()| peer.write_pieces(rpc_ring::zip_runs(&local, &runs, len as usize)));
            if let Err(e) = written {
                // The caller must not wait for a reply that will not come.
                let _ = answer(&peer, &binding, slot, seq, Err(e));
                return Err(e);
            }
        }
        answer(&peer, &binding, slot, seq, Ok(len))
    }

    /// A request was received but its token could not be told to the server
    /// process: its caller fails with `err` now instead of at its deadline.
    pub(crate) fn rpc_abandon(&self, file: &FileRpc, token: u64, err: Error) {
        let owed = file.owed.lock().remove(&token);
        if let Some(owed) = owed {
            owed.fail(err);
        }
    }

    /// A reply to a caller on this node: copied into its pinned output buffer.
    fn reply_local(
        &self,
        file: &FileRpc,
        token: u64,
        caller: LocalCaller,
        buf: usize,
        len: u64,
    ) -> Result {
        if len > caller.capacity {
            caller
                .waiter
                .complete_overflow(caller.user_slot, caller.seq, len);
            return Ok(());
        }
        let mut reader = UserSlice::new(buf, len as usize).reader();
        let copied = match &caller.output {
            Output::None => Ok(()),
            Output::User(pages) => pages.copy_from_user(&mut reader, len as usize),
            Output::Kernel(out) => out.copy_from_user(0, &mut reader, len as usize),
        };
        match copied {
            Ok(()) => {
                caller.complete(Ok(len));
                Ok(())
            }
            Err(e) => {
                if let Ok(node) = RBTreeNode::new(token, Owed::Local(caller), GFP_KERNEL) {
                    file.owed.lock().insert(node);
                }
                Err(e)
            }
        }
    }

    // ---- clients (process context) ----

    /// LT_RPC / LT_send: posts a call (or message) to `id` at `node`. A call
    /// completes later in `file`'s shared-page slot; a message returns once it is
    /// in the server's ring.
    pub(crate) fn rpc_call(&self, file: &Arc<FileRpc>, req: &LiteRpcCall) -> Result<u64> {
        let oneway = req.flags == LITE_RPC_ONEWAY;
        if (req.flags != 0 && !oneway) || req.reserved != 0 || req.id == 0 {
            return Err(EINVAL);
        }
        if req.timeout_ms == 0 || req.timeout_ms > LITE_RPC_MAX_TIMEOUT_MS {
            return Err(EINVAL);
        }
        if req.input_len > MAX_MSG || req.output_len > MAX_MSG {
            return Err(EMSGSIZE());
        }
        if oneway && (req.output_len != 0) {
            return Err(EINVAL);
        }
        if !oneway && req.slot >= LITE_SLOTS {
            return Err(EINVAL);
        }
        let input = Input::User {
            addr: usize::try_from(req.input).map_err(|_| EFAULT)?,
            len: req.input_len as usize,
        };
        let output = if oneway || req.output_len == 0 {
            OutputSpec::None
        } else {
            OutputSpec::User {
                addr: usize::try_from(req.output).map_err(|_| EFAULT)?,
                len: req.output_len as usize,
            }
        };
        let sender = Sender {
            file,
            slot: (!oneway).then_some(req.slot as usize),
        };
        self.post_call(req.node, req.id, input, output, sender, req.timeout_ms)
    }

    /// Builds and posts one request; see `rpc_call`.
    fn post_call(
        &self,
        node: u32,
        id: u32,
        input: Input<'_>,
        output: OutputSpec,
        sender: Sender<'_>,
        timeout_ms: u32,
    ) -> Result<u64> {
        let dev = self.device()?;
        let deadline = now_ns() + u64::from(timeout_ms) * 1_000_000;
        let me = self.me()?;
        if node == me {
            return self.local_call(me, id, input, output, sender, deadline);
        }
        let waiter = sender.slot.map(|slot| (sender.file.clone(), slot));
        let peer = self.peer(node)?;
        let out = match output {
            OutputSpec::None => Output::None,
            OutputSpec::User { addr, len } => Output::User(UserPages::pin(&dev, addr, len, true)?),
            OutputSpec::Kernel(buf) => Output::Kernel(buf),
        };
        let mut runs = KVec::new();
        match &out {
            Output::None => {}
            Output::User(pages) => {
                for run in pages.runs() {
                    runs.push(run, GFP_KERNEL)?;
                }
            }
            Output::Kernel(buf) => runs.push((buf.dma(), buf.size()), GFP_KERNEL)?,
        }
        let out_cap: u64 = runs.iter().map(|r| r.1 as u64).sum();
        let nruns = runs.len() as u32;
        let head_len = rpc_ring::HEADER_LEN + runs.len() * RUN_LEN;
        let in_len = input.len();
        let inline = head_len + in_len <= INLINE_MAX || in_len == 0;
        let stage = Arc::new(
            DmaBuf::new(&dev, if inline { head_len + in_len } else { head_len })?,
            GFP_KERNEL,
        )?;
        for (i, &(addr, len)) in runs.iter().enumerate() {
            stage.write_bytes(
                rpc_ring::HEADER_LEN + i * RUN_LEN,
                &rpc_ring::encode_run(addr, len as u32),
            )?;
        }
        // Everything that can fail on the caller's input happens before ring room is
        // reserved: a reserved record must always be posted.
        let payload = if inline {
            input.copy_into(&stage, head_len)?;
            Payload::Staged
        } else {
            input.prepare(&dev)?
        };
        let record = rpc_ring::record_len(nruns, in_len as u64);
        let (slot, seq) = peer
            .rpc
            .claim(deadline, waiter.as_ref().map(|(file, _)| &**file))?;
        if let Some((file, user_slot)) = &waiter {
            if let Err(e) = file.claim(*user_slot, seq, deadline) {
                peer.rpc.unclaim(slot);
                return Err(e);
            }
        }
        let fail = |e: Error| {
            peer.rpc.unclaim(slot);
            if let Some((file, user_slot)) = &waiter {
                file.complete(*user_slot, seq, Err(e));
            }
            e
        };
        let mut out = Some(out);
        let (binding, at, call) = loop {
            let binding = peer.rpc.binding(&peer, id).map_err(fail)?;
            // Allocated before ring room is reserved: a reserved record must be posted.
            let call = match &waiter {
                Some((file, user_slot)) => {
                    let call = Call {
                        seq,
                        waiter: file.clone(),
                        user_slot: *user_slot,
                        binding: binding.clone(),
                        _output: out.take().unwrap_or(Output::None),
                        _stage: stage.clone(),
                    };
                    Some(KBox::new(call, GFP_KERNEL).map_err(|e| fail(e.into()))?)
                }
                None => None,
            };
            match binding.reserve(&peer, record, deadline) {
                Ok(at) => break (binding, at, call),
                Err(e) if e == EAGAIN => {
                    out = call.map(|c| KBox::into_inner(c)._output);
                    continue;
                }
                Err(e) => return Err(fail(e)),
            }
        };
        let header = RecordHeader {
            flags: if call.is_none() { FLAG_ONEWAY } else { 0 },
            slot: slot as u32,
            start: at.start,
            pad: at.pad,
            nruns,
            reserved: 0,
            len: in_len as u64,
            seq,
            out_cap,
        };
        let _ = stage.write_bytes(0, &header.encode());
        let offset = rpc_ring::ring_offset(at.start, binding.state.lock().ring.size());
        let Some(call) = call else {
            let posted = self.post_record(
                &peer, &binding, &stage, &payload, offset, &header, slot, true,
            );
            binding.put_user();
            peer.rpc.unclaim(slot);
            return posted.map(|()| seq);
        };
        // Active before the immediate goes out: the reply may come at once.
        if let Err(call) = peer.rpc.activate(slot, call) {
            end_call(call, Err(EHOSTDOWN()));
            return Ok(seq);
        }
        if let Err(e) = self.post_record(
            &peer, &binding, &stage, &payload, offset, &header, slot, false,
        ) {
            // The record may not have landed: the ring has a hole, bind anew next time.
            binding.kill();
            if let Some(call) = peer.rpc.take(slot, Some(seq)) {
                end_call(call, Err(e));
            }
        }
        Ok(seq)
    }

    /// A call to a server on this node: queued directly, answered by a copy into
    /// the caller's pinned output buffer.
    fn local_call(
        &self,
        me: u32,
        id: u32,
        input: Input<'_>,
        output: OutputSpec,
        sender: Sender<'_>,
        deadline: u64,
    ) -> Result<u64> {
        let server = self.rpc.server(id).ok_or_else(ECONNREFUSED)?;
        let charge = LocalCharge::new(sender.file, input.len())?;
        let mut payload = KVec::from_elem(0u8, input.len(), GFP_KERNEL)?;
        match input {
            Input::User { addr, len } => UserSlice::new(addr, len)
                .reader()
                .read_slice(&mut payload)?,
            Input::Kernel(bytes) => payload.copy_from_slice(bytes),
        }
        let dev = self.device()?;
        let seq = self.rpc.next_token.fetch_add(1, Ordering::Relaxed);
        let caller = match sender.slot {
            None => None,
            Some(user_slot) => {
                let waiter = sender.file.clone();
                let (output, capacity) = match output {
                    OutputSpec::None => (Output::None, 0),
                    OutputSpec::User { addr, len } => (
                        Output::User(UserPages::pin(&dev, addr, len, true)?),
                        len as u64,
                    ),
                    OutputSpec::Kernel(buf) => {
                        let size = buf.size() as u64;
                        (Output::Kernel(buf), size)
                    }
                };
                waiter.claim(user_slot, seq, deadline)?;
                Some(LocalCaller {
                    id,
                    waiter,
                    user_slot,
                    seq,
                    output,
                    capacity,
                })
            }
        };
        let request = Request::Local {
            node: me,
            payload,
            caller,
            charge,
        };
        let queued = {
            let mut q = server.queue.lock();
            if q.closed {
                Err((ECONNREFUSED(), request))
            } else if q.requests.len() >= QUEUE_MAX {
                Err((EAGAIN, request))
            } else {
                q.requests
                    .push(request, GFP_ATOMIC)
                    .map_err(|request| (ENOMEM, request))
            }
        };
        match queued {
            Ok(()) => {
                server.arrived.notify_all();
                Ok(seq)
            }
            Err((e, request)) => {
                request.refuse(e);
                Err(e)
            }
        }
    }

    /// Writes a reserved record at ring `offset`: the payload (zero-copy) first,
    /// then the staged part, whose first piece carries the immediate that
    /// announces the record. `sync`: wait until the immediate's write landed.
    #[allow(clippy::too_many_arguments)]
    fn post_record(
        &self,
        peer: &Peer,
        binding: &ClientBinding,
        stage: &DmaBuf,
        payload: &Payload,
        offset: u64,
        header: &RecordHeader,
        slot: usize,
        sync: bool,
    ) -> Result {
        let at = offset + header.payload_offset();
        let len = header.len as usize;
        let mut ring = KVec::new();
        for piece in layout::pieces(&binding.extents, at, len as u64) {
            ring.push((piece.addr, piece.len as u32), GFP_KERNEL)?;
        }
        match payload {
            Payload::Staged => {}
            Payload::Pages(pages) => {
                let mut local = KVec::new();
                for run in pages.runs() {
                    local.push(run, GFP_KERNEL)?;
                }
                peer.write_pieces(rpc_ring::zip_runs(&local, &ring, len))?;
            }
            Payload::Buf(buf) => {
                let local = [(buf.dma(), len)];
                peer.write_pieces(rpc_ring::zip_runs(&local, &ring, len))?;
            }
        }
        let mut first = None;
        for piece in layout::pieces(&binding.extents, offset, stage.size() as u64) {
            if piece.pos == 0 {
                first = Some(piece);
            } else {
                peer.rdma_write_kernel(stage, piece.pos as usize, piece.len as usize, piece.addr)?;
            }
        }
        let first = first.ok_or(EINVAL)?;
        let imm = wire::encode_ring_imm(binding.index as usize, offset).ok_or(EINVAL)?;
        peer.post_write_imm(
            slot,
            wire::ImmKind::RpcRequest,
            imm,
            stage,
            first.len as usize,
            first.addr,
            sync,
        )
    }
}

/// Who makes a call: the caller's open file, and the shared-page slot the call
/// completes in (`None`: a one-way message).
struct Sender<'a> {
    file: &'a Arc<FileRpc>,
    slot: Option<usize>,
}

/// A request's input.
enum Input<'a> {
    User { addr: usize, len: usize },
    Kernel(&'a [u8]),
}

/// A request's output buffer, before it is pinned.
enum OutputSpec {
    None,
    User { addr: usize, len: usize },
    Kernel(Arc<DmaBuf>),
}

/// Where a large payload is written from.
enum Payload {
    Staged,
    Pages(UserPages),
    Buf(DmaBuf),
}

impl Input<'_> {
    fn len(&self) -> usize {
        match self {
            Input::User { len, .. } => *len,
            Input::Kernel(bytes) => bytes.len(),
        }
    }

    fn copy_into(&self, stage: &DmaBuf, at: usize) -> Result {
        match self {
            Input::User { addr, len } => {
                stage.copy_from_user(at, &mut UserSlice::new(*addr, *len).reader(), *len)
            }
            Input::Kernel(bytes) => stage.write_bytes(at, bytes),
        }
    }

    fn prepare(&self, dev: &Arc<crate::net::verbs::Device>) -> Result<Payload> {
        match self {
            Input::User { addr, len } => {
                Ok(Payload::Pages(UserPages::pin(dev, *addr, *len, false)?))
            }
            Input::Kernel(bytes) => {
                let buf = DmaBuf::new(dev, bytes.len())?;
                buf.write_bytes(0, bytes)?;
                Ok(Payload::Buf(buf))
            }
        }
    }
}

impl Lite {
    // ---- completion context ----

    /// An RPC record from `peer` landed in one of our rings.
    pub(crate) fn on_rpc_request(&self, peer: &Arc<Peer>, payload: u32) {
        let (index, offset) = wire::decode_ring_imm(payload);
        let Some(binding) = self
            .rpc
            .binding(index)
            .filter(|b| Arc::ptr_eq(&b.peer, peer))
        else {
            return;
        };
        // A record that is malformed or out of place cannot even be answered.
        let Some(header) = binding.record(offset) else {
            pr_warn!("node {} wrote a malformed RPC record; ignored\n", peer.id);
            return;
        };
        let refuse = |err: Error| {
            if header.flags & FLAG_ONEWAY == 0 {
                let _ = answer(peer, &binding, header.slot, header.seq, Err(err));
            }
            binding.consume(&header);
        };
        let Some(server) = self.rpc.server(binding.id) else {
            return refuse(ECONNREFUSED());
        };
        let request = Request::Remote {
            peer: peer.clone(),
            binding: binding.clone(),
            header,
        };
        let queued = {
            let mut q = server.queue.lock();
            if q.closed {
                Err(ECONNREFUSED())
            } else if q.requests.len() >= QUEUE_MAX {
                Err(EAGAIN)
            } else {
                q.requests.push(request, GFP_ATOMIC).map_err(|_| ENOMEM)
            }
        };
        match queued {
            Ok(()) => server.arrived.notify_all(),
            Err(e) => refuse(e),
        }
    }

    /// The completion record of our call in `slot` to `peer` landed.
    pub(crate) fn on_rpc_reply(&self, peer: &Peer, slot: usize) {
        let Some(done) = peer.read_done(slot) else {
            return;
        };
        let Some(call) = peer.rpc.take(slot, Some(done.seq)) else {
            return;
        };
        if call.binding.index == done.binding {
            call.binding.head_reported(done.head);
        }
        let result = match done.status {
            0 => Ok(done.len),
            status if error_of(status) == EOVERFLOW() => {
                call.binding.put_user();
                call.waiter
                    .complete_overflow(call.user_slot, call.seq, done.len);
                return;
            }
            status => Err(error_of(status)),
        };
        end_call(call, result);
    }

    /// A server reports how far it consumed one of our rings.
    pub(crate) fn on_rpc_head(&self, peer: &Peer, payload: u32) {
        let (index, offset) = wire::decode_ring_imm(payload);
        if let Some(binding) = peer.rpc.by_index(index as u32) {
            binding.head_offset_reported(offset);
        }
    }

    // ---- requests from peers (module workqueue) ----

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
                    .rpc
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
        if self.rpc.server(id).is_none() {
            return Err(ECONNREFUSED());
        }
        let existing = {
            let table = self.rpc.bindings.lock();
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
            chunks: [(0, 0); RING_CHUNKS],
        };
        for (slot, e) in bound.chunks.iter_mut().zip(binding.extents.iter()) {
            *slot = (e.addr, e.len);
            bound.count += 1;
        }
        Ok(bound)
    }

    fn new_binding(&self, peer: &Arc<Peer>, id: u32) -> Result<Arc<ServerBinding>> {
        let dev = self.device()?;
        let me = self.me()?;
        let (mut chunks, mut extents) = (KVec::new(), KVec::new());
        let mut at = 0u64;
        let mut try_len = layout::CHUNK_MAX;
        while at < RING_BYTES {
            if chunks.len() == RING_CHUNKS {
                return Err(ENOMEM);
            }
            let len = try_len.min(RING_BYTES - at);
            match DmaBuf::try_new(&dev, len as usize) {
                Ok(chunk) => {
                    extents.push(
                        Extent {
                            node: me,
                            start: at,
                            addr: chunk.dma(),
                            len,
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
        let _serial = self.rpc.bind_lock.lock();
        let index = {
            let mut bindings = self.rpc.bindings.lock();
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
        let mut bindings = self.rpc.bindings.lock();
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
        let Some(binding) = peer.rpc.by_index(index) else {
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
    pub(crate) fn rpc_forget_node(&self, node: u32) {
        drop(self.rpc.take_bindings(|b| b.peer.id == node));
    }

    /// LITE_IOC_RPC_STAT.
    pub(crate) fn rpc_stat(&self) -> Result<LiteRpcStat> {
        let mut stat = LiteRpcStat::default();
        stat.servers = self.rpc.servers.lock().iter().count() as u32;
        {
            let table = self.rpc.bindings.lock();
            for b in table.iter().flatten() {
                stat.rings += 1;
                stat.ring_bytes += b.size();
            }
        }
        for peer in self.connected_peers()?.iter() {
            let (calls, bindings) = peer.rpc.counts();
            stat.calls += calls;
            stat.bindings += bindings;
        }
        let servers = {
            let servers = self.rpc.servers.lock();
            let mut out = KVec::new();
            for (_, s) in servers.iter() {
                out.push(s.clone(), GFP_ATOMIC)?;
            }
            out
        };
        for s in servers.iter() {
            stat.requests += s.queue.lock().requests.len() as u32;
        }
        Ok(stat)
    }

    // ---- the in-kernel caller ----

    /// One RPC from kernel code: `input` to `id` at `node`, the reply (at most
    /// `out.len()` bytes) copied to `out`. Returns the reply's length.
    pub(crate) fn kernel_rpc(
        &self,
        waiter: &Arc<FileRpc>,
        node: u32,
        id: u32,
        input: &[u8],
        reply: Option<&Arc<DmaBuf>>,
        timeout_ms: u32,
    ) -> Result<u64> {
        let output = reply.map_or(OutputSpec::None, |buf| OutputSpec::Kernel(buf.clone()));
        let seq = self.post_call(
            node,
            id,
            Input::Kernel(input),
            output,
            Sender {
                file: waiter,
                slot: Some(0),
            },
            timeout_ms,
        )?;
        waiter.wait(0)?;
        let (status, len, done_seq) = waiter.page.result(0);
        if done_seq != seq {
            return Err(EIO);
        }
        match status {
            0 => Ok(len),
            status => Err(error_of(status)),
        }
    }

    /// LITE_IOC_RPC_BENCH: `count` kernel-issued calls, each one's time to `out`.
    pub(crate) fn rpc_bench(
        &self,
        req: &LiteRpcBench,
        mut out: kernel::uaccess::UserSliceWriter,
    ) -> Result<u64> {
        if req.request_len > MAX_MSG || req.reply_capacity > MAX_MSG {
            return Err(EMSGSIZE());
        }
        let waiter = FileRpc::new()?;
        let input = KVec::from_elem(0x5Au8, req.request_len as usize, GFP_KERNEL)?;
        let dev = self.device()?;
        // No reply buffer for a capacity of 0: the call expects an empty reply.
        let reply = match req.reply_capacity {
            0 => None,
            capacity => Some(Arc::new(DmaBuf::new(&dev, capacity as usize)?, GFP_KERNEL)?),
        };
        let mut last = 0;
        for _ in 0..req.count {
            let start = Ktime::ktime_get();
            last = self.kernel_rpc(
                &waiter,
                req.node,
                req.id,
                &input,
                reply.as_ref(),
                req.timeout_ms,
            )?;
            out.write(&((Ktime::ktime_get() - start).to_ns() as u64))?;
        }
        Ok(last)
    }
}

impl SharedPage {
    /// (error, len, seq) of a DONE slot.
    fn result(&self, slot: usize) -> (u32, u64, u64) {
        // SAFETY: `slot` is 0 here (checked by callers), inside the page.
        let s =
            unsafe { core::ptr::addr_of_mut!((*self.page.as_ptr()).slots[slot.min(SLOTS - 1)]) };
        // SAFETY: fields of a slot inside the page.
        unsafe {
            (
                self.u32_at(core::ptr::addr_of_mut!((*s).error))
                    .load(Ordering::Acquire),
                self.u64_at(core::ptr::addr_of_mut!((*s).len))
                    .load(Ordering::Relaxed),
                self.u64_at(core::ptr::addr_of_mut!((*s).seq))
                    .load(Ordering::Relaxed),
            )
        }
    }
}
