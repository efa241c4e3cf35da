// SPDX-License-Identifier: GPL-2.0
//! Per open file: the RPC state of one process, its shared-page slots, the
//! requests it received and owes a reply, and its share of the local queue bounds.

use super::client::Output;
use super::page::SharedPage;
use super::server::{answer, ServerBinding};
use super::{
    charge, jiffies_until, now_ns, status_of, wait_result, LOCAL_FILE_MAX, LOCAL_NODE_MAX,
    LOCAL_QUEUED, LOCAL_REQUEST_COST, SLOTS,
};
use crate::errno::{EOVERFLOW, ETIMEDOUT};
use crate::net::Peer;
use crate::uapi::*;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{new_condvar, new_mutex, new_spinlock, Arc, CondVar, Mutex, SpinLock};

/// What the kernel knows of a shared-page slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotUse {
    /// No call in flight. `answered`: when the last call on it, to another node,
    /// got its result (ns), for its waiter's wake-up; 0 for none.
    Idle { answered: u64 },
    /// A call is in flight on it until `deadline` (ns); `remote`: to another node.
    Pending {
        seq: u64,
        deadline: u64,
        remote: bool,
    },
}

const IDLE: SlotUse = SlotUse::Idle { answered: 0 };

/// A local request's share of the sender's and the node's queue bounds, given
/// back when the request is received or dropped.
pub(crate) struct LocalCharge {
    sender: Arc<FileRpc>,
    bytes: u64,
}

impl LocalCharge {
    pub(crate) fn new(sender: &Arc<FileRpc>, payload: usize) -> Result<LocalCharge> {
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
pub(crate) struct LocalCaller {
    pub(crate) id: u32,
    pub(crate) waiter: Arc<FileRpc>,
    pub(crate) user_slot: usize,
    pub(crate) seq: u64,
    pub(crate) output: Output,
    pub(crate) capacity: u64,
}

impl LocalCaller {
    pub(crate) fn complete(self, result: Result<u64>) {
        self.waiter.complete(self.user_slot, self.seq, result);
    }
}

/// A request received by a server process and not yet answered.
pub(crate) enum Owed {
    Remote {
        peer: Arc<Peer>,
        binding: Arc<ServerBinding>,
        slot: u32,
        seq: u64,
        /// The caller's output buffer.
        runs: KVec<(u64, u32, u32)>,
        capacity: u64,
    },
    Local(LocalCaller),
}

impl Owed {
    pub(crate) fn id(&self) -> u32 {
        match self {
            Owed::Remote { binding, .. } => binding.id,
            Owed::Local(caller) => caller.id,
        }
    }

    /// The server will not answer: its caller fails with `err`.
    pub(crate) fn fail(self, err: Error) {
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
    pub(crate) page: SharedPage,
    #[pin]
    slots: SpinLock<[SlotUse; SLOTS]>,
    #[pin]
    slot_done: CondVar,
    /// Requests received and owed a reply, by token.
    #[pin]
    pub(crate) owed: Mutex<RBTree<u64, Owed>>,
    /// Ids this file serves.
    #[pin]
    pub(crate) ids: Mutex<KVec<u32>>,
    /// Bytes of this file's requests queued at servers on this node (`LocalCharge`).
    local_queued: AtomicU64,
}

impl FileRpc {
    pub(crate) fn new() -> Result<Arc<FileRpc>> {
        let page = SharedPage::new()?;
        Arc::pin_init(
            pin_init!(FileRpc {
                page,
                slots <- new_spinlock!([IDLE; SLOTS], "lite:file.slots"),
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

    /// Claims `slot` for a call (`remote`: to another node) until `deadline`;
    /// EBUSY while another call uses it.
    pub(crate) fn claim(&self, slot: usize, seq: u64, deadline: u64, remote: bool) -> Result {
        let mut slots = self.slots.lock();
        let now = now_ns();
        match slots.get(slot) {
            // A call abandoned past its deadline (its late result is ignored by seq).
            Some(SlotUse::Idle { .. }) | Some(SlotUse::Pending { deadline: _, .. })
                if Self::expired(&slots[slot], now) =>
            {
                slots[slot] = SlotUse::Pending {
                    seq,
                    deadline,
                    remote,
                };
                self.page.publish(slot, LITE_SLOT_PENDING, 0, 0, seq);
                Ok(())
            }
            Some(_) => Err(EBUSY),
            None => Err(EINVAL),
        }
    }

    fn expired(slot: &SlotUse, now: u64) -> bool {
        match slot {
            SlotUse::Idle { .. } => true,
            SlotUse::Pending { deadline, .. } => now >= *deadline,
        }
    }

    /// The call `seq` on `slot` ended: publish its result and wake the waiter.
    /// A call abandoned at its deadline finds its slot reused or idle: ignored.
    /// Returns when the result was there for the caller to see (ns).
    pub(crate) fn complete(&self, slot: usize, seq: u64, result: Result<u64>) -> u64 {
        let mut slots = self.slots.lock();
        let now = now_ns();
        let remote = match slots.get(slot) {
            Some(&SlotUse::Pending {
                seq: pending,
                remote,
                ..
            }) if pending == seq => remote,
            _ => return now,
        };
        slots[slot] = SlotUse::Idle {
            answered: if remote { now } else { 0 },
        };
        let (status, len) = match result {
            Ok(len) => (0, len),
            Err(e) => (status_of(e), 0),
        };
        self.page.publish(slot, LITE_SLOT_DONE, status, len, seq);
        drop(slots);
        self.slot_done.notify_all();
        now
    }

    /// Like `complete` for an EOVERFLOW whose true size the caller learns.
    pub(crate) fn complete_overflow(&self, slot: usize, seq: u64, len: u64) {
        let mut slots = self.slots.lock();
        if !matches!(slots.get(slot), Some(&SlotUse::Pending { seq: pending, .. }) if pending == seq)
        {
            return;
        }
        slots[slot] = IDLE;
        self.page
            .publish(slot, LITE_SLOT_DONE, status_of(EOVERFLOW()), len, seq);
        drop(slots);
        self.slot_done.notify_all();
    }

    /// LITE_IOC_WAIT: sleeps until the call on `slot` is done; at its deadline the
    /// call completes with ETIMEDOUT (its late reply, if any, is ignored).
    /// Returns how long after its call to another node got its result the caller
    /// ran again, when it slept.
    pub(crate) fn wait(&self, slot: usize) -> Result<Option<u64>> {
        let mut slots = self.slots.lock();
        let mut slept = false;
        loop {
            let (seq, deadline) = match slots.get(slot) {
                None => return Err(EINVAL),
                Some(&SlotUse::Idle { answered }) => {
                    let woke = (slept && answered != 0).then(|| now_ns().saturating_sub(answered));
                    return Ok(woke);
                }
                Some(&SlotUse::Pending { seq, deadline, .. }) => (seq, deadline),
            };
            let Some(left) = jiffies_until(deadline) else {
                slots[slot] = IDLE;
                self.page
                    .publish(slot, LITE_SLOT_DONE, status_of(ETIMEDOUT()), 0, seq);
                return Ok(None);
            };
            wait_result(self.slot_done.wait_interruptible_timeout(&mut slots, left))?;
            slept = true;
        }
    }
}
