// SPDX-License-Identifier: GPL-2.0
//! LT_lock / LT_unlock and LT_barrier on 8-byte LMR words (protocol in lockword.rs).
//!
//! Uncontended, a lock or unlock is one RDMA compare-and-swap by the caller's
//! node and a barrier arrival one fetch-and-add. Everything else goes to the
//! word's holder node, the owner: it queues waiters in FIFO order, passes the
//! lock on, and wakes each waiter alone with a `LockWake` message to its node.
//! The owner changes the word only with RDMA atomics through its loopback QP, so
//! its changes are atomic against the other nodes'.
//!
//! - `lockword`: the word's encoding and each step of the protocol (pure, host-tested).
//! - `caller`: LT_lock, LT_unlock and LT_barrier, and the waits for an owner.
//! - `turns`: this node's turn at a word, which one of its LT_lock callers at a
//!   time has; the others wait for it here, not at the owner.
//! - `owner`: the owner's queues, passing a lock on, ending a barrier's round.
//! - here: the state, per open file (`FileLocks`) and per node (`LockNode`).
//!
//! Locking: `LockNode::waiters` is taken before a `Waiter::outcome`, and
//! `LockNode::turns` before a `TurnWaiter::granted`.
//! `LockNode::queues` is held across the owner's atomics on a word and its
//! check that this node still holds the word's memory (under `LmrNode::mem`), so
//! the memory cannot be freed meanwhile. An open file's `FileLocks` mutex is
//! never held while waiting for an owner.

mod caller;
pub(crate) mod lockword;
mod owner;
mod turns;

use crate::lmr::{LmrEvents, LmrNode, Word, WordRef};
use crate::net::Network;
use core::sync::atomic::AtomicU32;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, CondVar, Mutex, SpinLock};

/// Most callers queued at one word; more get EAGAIN.
const MAX_QUEUED: usize = 4096;
/// Most callers queued at all the words this node holds: a barrier waiter that
/// timed out stays queued until its round ends, so a caller looping on short
/// timeouts over many words must stop somewhere too.
const NODE_MAX_QUEUED: usize = 65536;
/// Locks one open file may hold; past it, ENOLCK.
const LOCKS_PER_FILE: usize = 1024;
/// A waiter checks this often that the owner's node is still there.
const OWNER_CHECK_MS: u32 = 1000;
/// Compare-and-swap retries of the owner racing other nodes' fast paths.
const OWNER_RETRIES: usize = 1000;

/// A lock a thread of an open file holds.
struct HeldLock {
    /// The holding thread: another thread of the process waits like any caller.
    thread: i32,
    lh: u64,
    offset: u64,
    word: WordRef,
    /// The word's value while this file holds it (its holder word).
    value: u64,
}

/// Locks of one open file of /dev/lite, released when it closes.
pub(crate) struct FileLocks {
    held: KVec<HeldLock>,
}

impl FileLocks {
    pub(crate) fn new() -> Self {
        FileLocks { held: KVec::new() }
    }
}

/// A caller of this node waiting for the owner (node `owner`) of a word.
#[pin_data]
pub(crate) struct Waiter {
    token: u32,
    owner: u32,
    /// The owner's answer: a `LOCK_*` outcome, or a negative errno.
    #[pin]
    outcome: SpinLock<Option<i32>>,
    #[pin]
    woken: CondVar,
}

/// A caller queued at this node, the owner of its word.
#[derive(Clone, Copy)]
struct Queued {
    node: u32,
    token: u32,
    /// Its holder word (locks) or the count that ends its round (barriers).
    value: u64,
}

/// Callers queued at one word this node holds.
struct WordQueue {
    word: Word,
    lock: KVec<Queued>,
    barrier: KVec<Queued>,
}

/// This node's side of locks and barriers.
#[pin_data]
pub(crate) struct LockNode {
    net: Arc<Network>,
    /// The LMRs whose words the locks and barriers are.
    lmr: Arc<LmrNode>,
    next_token: AtomicU32,
    /// This node's callers waiting for an owner.
    #[pin]
    waiters: Mutex<KVec<Arc<Waiter>>>,
    /// Words this node owns that have callers queued. Held across the owner's
    /// atomics on them, so the memory cannot be freed meanwhile.
    #[pin]
    queues: Mutex<KVec<WordQueue>>,
    /// Words at which one of this node's callers has the turn (`turns.rs`).
    #[pin]
    turns: Mutex<KVec<turns::WordTurn>>,
}

impl LockNode {
    pub(crate) fn new(net: Arc<Network>, lmr: Arc<LmrNode>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(LockNode {
                net,
                lmr,
                next_token: AtomicU32::new(1),
                waiters <- new_mutex!(KVec::new(), "lite:lock.waiters"),
                queues <- new_mutex!(KVec::new(), "lite:lock.queues"),
                turns <- new_mutex!(KVec::new(), "lite:lock.turns"),
            }),
            GFP_KERNEL,
        )
    }
}

fn outcome_code(outcome: i32) -> Result<u32> {
    if outcome < 0 {
        Err(Error::from_errno(outcome))
    } else {
        Ok(outcome as u32)
    }
}

/// Memory held here was released: queued callers at its words fail with EIDRM.
impl LmrEvents for LockNode {
    fn released(&self, master: u32, id: u64) {
        self.forget_lmr(master, id);
    }
}

impl LockNode {
    /// Callers waiting here: (for locks, at barriers). For locks, those queued at
    /// words this node owns and this node's callers waiting for their turn.
    pub(crate) fn queued(&self) -> (u32, u32) {
        let (locks, barriers) = {
            let queues = self.queues.lock();
            // Each queue holds at most MAX_QUEUED callers, so the lengths fit in u32.
            queues.iter().fold((0u32, 0u32), |(locks, barriers), q| {
                (
                    locks.saturating_add(q.lock.len() as u32),
                    barriers.saturating_add(q.barrier.len() as u32),
                )
            })
        };
        (locks.saturating_add(self.waiting_for_turns()), barriers)
    }
}
