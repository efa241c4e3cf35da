// SPDX-License-Identifier: GPL-2.0
//! LT_lock / LT_unlock and LT_barrier on 8-byte LMR words (protocol in lockword.rs).
//!
//! Uncontended, a lock or unlock is one RDMA compare-and-swap by the caller's
//! node and a barrier arrival one fetch-and-add. Everything else goes to the
//! word's holder node, the owner: it queues waiters in FIFO order, passes the
//! lock on, and wakes each waiter alone with a `LockWake` message to its node.
//! The owner changes the word only with RDMA atomics through its loopback QP, so
//! its changes are atomic against the other nodes'.

use crate::errno::{EDEADLK, EHOSTDOWN, EIDRM, ENOLCK, EOWNERDEAD, ETIMEDOUT};
use crate::kvec::{remove_at, retain, swap_remove};
use crate::lmr::{FileLmrs, Word, WordRef};
use crate::lockword::{self, WaitStep, WAITERS};
use crate::net::verbs::Atomic;
use crate::net::wire::{
    LockReq, LockWake, MsgKind, BARRIER_OP_DONE, BARRIER_OP_WAIT, BARRIER_PASSED, LOCK_DONE,
    LOCK_OP_RELEASE, LOCK_OP_WAIT, LOCK_QUEUED, LOCK_TAKEN, LOCK_TAKEN_HOLDER_DIED,
};
use crate::node::Lite;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::sync::{
    new_condvar, new_mutex, new_spinlock, Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLock,
};
use kernel::time::msecs_to_jiffies;

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
    next_token: AtomicU32,
    /// This node's callers waiting for an owner.
    #[pin]
    waiters: Mutex<KVec<Arc<Waiter>>>,
    /// Words this node owns that have callers queued. Held across the owner's
    /// atomics on them, so the memory cannot be freed meanwhile.
    #[pin]
    queues: Mutex<KVec<WordQueue>>,
}

impl LockNode {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(LockNode {
            next_token: AtomicU32::new(1),
            waiters <- new_mutex!(KVec::new(), "lite:lock.waiters"),
            queues <- new_mutex!(KVec::new(), "lite:lock.queues"),
        })
    }
}

fn outcome_code(outcome: i32) -> Result<u32> {
    if outcome < 0 {
        Err(Error::from_errno(outcome))
    } else {
        Ok(outcome as u32)
    }
}

impl Lite {
    /// Callers queued at words this node owns: (for locks, at barriers).
    pub(crate) fn sync_queued(&self) -> (u32, u32) {
        let queues = self.locks.queues.lock();
        // Each queue holds at most MAX_QUEUED callers, so the lengths fit in u32.
        queues.iter().fold((0u32, 0u32), |(locks, barriers), q| {
            (
                locks.saturating_add(q.lock.len() as u32),
                barriers.saturating_add(q.barrier.len() as u32),
            )
        })
    }

    // ---- caller side ----

    /// LT_lock: returns once this file holds the lock at `offset` of `lh`; EOWNERDEAD
    /// (holding it) when taken over from a holder whose node died.
    pub(crate) fn lock_acquire(
        &self,
        lmrs: &Mutex<FileLmrs>,
        locks: &Mutex<FileLocks>,
        lh: u64,
        offset: u64,
    ) -> Result {
        let thread = kernel::current!().pid();
        let word = self.lmr_word(lmrs, lh, offset)?;
        {
            let held = locks.lock();
            // The same word through any handle of the LMR: the thread would wait for itself.
            if held
                .held
                .iter()
                .any(|h| h.thread == thread && h.word.word == word.word)
            {
                return Err(EDEADLK());
            }
            if held.held.len() >= LOCKS_PER_FILE {
                return Err(ENOLCK());
            }
        }
        let token = self.lock_token();
        let value = lockword::holder_word(self.me()?, token);
        let old = self.word_atomic(
            &word,
            Atomic::CompareSwap {
                expected: 0,
                new: value,
            },
        )?;
        let outcome = if old == 0 {
            LOCK_TAKEN
        } else {
            self.wait_for_owner(&word, LOCK_OP_WAIT, value, token, None)?
        };
        let holder_died = match outcome {
            LOCK_TAKEN => false,
            LOCK_TAKEN_HOLDER_DIED => true,
            _ => return Err(EIO),
        };
        let mut held = locks.lock();
        if held.held.reserve(1, GFP_KERNEL).is_err() {
            drop(held);
            let _ = self.release_word(&word, value);
            return Err(ENOMEM);
        }
        // Within the capacity reserved above.
        let _ = held.held.push(
            HeldLock {
                thread,
                lh,
                offset,
                word,
                value,
            },
            GFP_KERNEL,
        );
        if holder_died {
            Err(EOWNERDEAD())
        } else {
            Ok(())
        }
    }

    /// LT_unlock, by the thread that locked.
    pub(crate) fn lock_release(&self, locks: &Mutex<FileLocks>, lh: u64, offset: u64) -> Result {
        let thread = kernel::current!().pid();
        let held = {
            let mut locks = locks.lock();
            let i = locks
                .held
                .iter()
                .position(|h| h.thread == thread && h.lh == lh && h.offset == offset)
                .ok_or(EPERM)?;
            swap_remove(&mut locks.held, i)
        };
        self.release_word(&held.word, held.value)
    }

    /// Whether the file holds a lock through handle `lh` (which must then stay
    /// mapped, or the lock could never be released).
    pub(crate) fn locks_held_through(&self, locks: &Mutex<FileLocks>, lh: u64) -> bool {
        locks.lock().held.iter().any(|h| h.lh == lh)
    }

    /// The file closes: the locks it holds go to their next waiters.
    pub(crate) fn locks_release_file(&self, locks: &Mutex<FileLocks>) {
        let held = core::mem::replace(&mut locks.lock().held, KVec::new());
        for lock in held.iter() {
            // A freed LMR or a dead owner took the lock with it.
            let _ = self.release_word(&lock.word, lock.value);
        }
    }

    fn release_word(&self, word: &WordRef, value: u64) -> Result {
        let old = self.word_atomic(
            word,
            Atomic::CompareSwap {
                expected: value,
                new: 0,
            },
        )?;
        if old == value {
            Ok(())
        } else if old == value | WAITERS {
            self.owner_request(&word.word, LOCK_OP_RELEASE, value, 0)
                .map(drop)
        } else {
            Err(ENOLCK())
        }
    }

    /// LT_barrier: returns once `participants` callers arrived in this round.
    pub(crate) fn barrier(
        &self,
        lmrs: &Mutex<FileLmrs>,
        lh: u64,
        offset: u64,
        participants: u32,
        timeout_ms: u32,
    ) -> Result {
        let word = self.lmr_word(lmrs, lh, offset)?;
        let old = self.word_atomic(&word, Atomic::FetchAdd(1))?;
        let (target, last) = lockword::barrier_arrival(old, participants).ok_or(EINVAL)?;
        let outcome = if last {
            self.owner_request(&word.word, BARRIER_OP_DONE, target, 0)?
        } else {
            self.wait_for_owner(
                &word,
                BARRIER_OP_WAIT,
                target,
                self.lock_token(),
                Some(timeout_ms),
            )?
        };
        match outcome {
            BARRIER_PASSED | LOCK_DONE => Ok(()),
            _ => Err(EIO),
        }
    }

    fn lock_token(&self) -> u32 {
        loop {
            let token = self.locks.next_token.fetch_add(1, Ordering::Relaxed);
            if token != 0 {
                return token;
            }
        }
    }

    /// Asks the owner of `word` for `op` and, when queued, sleeps until it answers.
    fn wait_for_owner(
        &self,
        word: &WordRef,
        op: u32,
        value: u64,
        token: u32,
        timeout_ms: Option<u32>,
    ) -> Result<u32> {
        let waiter = Arc::pin_init(
            pin_init!(Waiter {
                token,
                owner: word.word.holder,
                outcome <- new_spinlock!(None, "lite:lock.outcome"),
                woken <- new_condvar!("lite:lock.woken"),
            }),
            GFP_KERNEL,
        )?;
        self.locks.waiters.lock().push(waiter.clone(), GFP_KERNEL)?;
        let answer = match self.owner_request(&word.word, op, value, token) {
            Ok(LOCK_QUEUED) => self.sleep_until_woken(&waiter, timeout_ms),
            other => other,
        };
        // Once off the list, a late wake finds nobody (ENOENT) and the owner
        // passes the lock on; an answer that came first stands.
        {
            let mut waiters = self.locks.waiters.lock();
            if let Some(i) = waiters.iter().position(|w| Arc::ptr_eq(w, &waiter)) {
                swap_remove(&mut waiters, i);
            }
        }
        let late = *waiter.outcome.lock();
        match late {
            Some(outcome) => outcome_code(outcome),
            None => answer,
        }
    }

    fn sleep_until_woken(&self, waiter: &Waiter, timeout_ms: Option<u32>) -> Result<u32> {
        let mut left = timeout_ms.map(msecs_to_jiffies);
        let check = msecs_to_jiffies(OWNER_CHECK_MS);
        loop {
            let slice = left.map_or(check, |l| l.min(check));
            {
                let mut outcome = waiter.outcome.lock();
                if let Some(outcome) = *outcome {
                    return outcome_code(outcome);
                }
                match waiter.woken.wait_interruptible_timeout(&mut outcome, slice) {
                    CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                    CondVarTimeoutResult::Woken { .. } => continue,
                    CondVarTimeoutResult::Timeout => {}
                }
            }
            if let Some(l) = left.as_mut() {
                *l = l.saturating_sub(slice);
                if *l == 0 {
                    return Err(ETIMEDOUT());
                }
            }
            if !self.node_alive(waiter.owner) {
                return Err(EHOSTDOWN());
            }
        }
    }

    /// A request to the owner of `word`, served in place when this node is the owner.
    fn owner_request(&self, word: &Word, op: u32, value: u64, token: u32) -> Result<u32> {
        let req = LockReq {
            master: word.master,
            op,
            id: word.id,
            addr: word.addr,
            value,
            token,
        };
        let me = self.me()?;
        if word.holder == me {
            return self.serve_lock(me, &req);
        }
        let mut answer = [0u8; 4];
        match self
            .peer(word.holder)?
            .request(MsgKind::Lock, &req, &mut answer)?
        {
            4 => Ok(u32::from_le_bytes(answer)),
            _ => Err(EIO),
        }
    }

    /// The owner's outcome for waiter `wake.token` of this node (from node `owner`).
    pub(crate) fn lock_woken(&self, owner: u32, wake: &LockWake) -> Result {
        let waiters = self.locks.waiters.lock();
        let waiter = waiters
            .iter()
            .find(|w| w.token == wake.token && w.owner == owner)
            .ok_or(ENOENT)?;
        *waiter.outcome.lock() = Some(wake.outcome);
        waiter.woken.notify_one();
        Ok(())
    }

    fn node_alive(&self, node: u32) -> bool {
        self.me().is_ok_and(|me| me == node)
            || self.peer(node).is_ok_and(|p| p.ensure_connected().is_ok())
    }

    // ---- owner side ----

    /// Serves a lock or barrier request from node `from` for a word this node holds.
    pub(crate) fn serve_lock(&self, from: u32, req: &LockReq) -> Result<u32> {
        let word = Word {
            holder: self.me()?,
            master: req.master,
            id: req.id,
            addr: req.addr,
        };
        let mut queues = self.locks.queues.lock();
        // Checked under `queues`: the LMR's memory is freed only after its queues go.
        self.check_held_word(&word)?;
        match req.op {
            LOCK_OP_WAIT | LOCK_OP_RELEASE if lockword::holder_node(req.value) != Some(from) => {
                Err(EINVAL)
            }
            LOCK_OP_WAIT => self.owner_wait(
                &mut queues,
                &word,
                Queued {
                    node: from,
                    token: req.token,
                    value: req.value,
                },
            ),
            LOCK_OP_RELEASE => {
                self.pass_on(&mut queues, &word, req.value | WAITERS, LOCK_TAKEN)?;
                Ok(LOCK_DONE)
            }
            BARRIER_OP_WAIT => {
                let count = self.held_word_atomic(&word, Atomic::FetchAdd(0))?;
                if count >= req.value {
                    return Ok(BARRIER_PASSED);
                }
                node_room(&queues)?;
                let queue = queue_for(&mut queues, &word)?;
                if queue.barrier.len() >= MAX_QUEUED {
                    return Err(EAGAIN);
                }
                queue.barrier.push(
                    Queued {
                        node: from,
                        token: req.token,
                        value: req.value,
                    },
                    GFP_KERNEL,
                )?;
                Ok(LOCK_QUEUED)
            }
            BARRIER_OP_DONE => {
                let count = self.held_word_atomic(&word, Atomic::FetchAdd(0))?;
                let mut done = KVec::new();
                if let Some(i) = queues.iter().position(|q| q.word == word) {
                    let queue = &mut queues[i];
                    let mut j = 0;
                    while j < queue.barrier.len() {
                        if queue.barrier[j].value <= count {
                            done.push(swap_remove(&mut queue.barrier, j), GFP_KERNEL)?;
                        } else {
                            j += 1;
                        }
                    }
                    if queue.lock.is_empty() && queue.barrier.is_empty() {
                        swap_remove(&mut queues, i);
                    }
                }
                for waiter in done.iter() {
                    // A waiter that gave up (timeout, signal) is simply gone.
                    let _ = self.wake(waiter, BARRIER_PASSED as i32);
                }
                Ok(LOCK_DONE)
            }
            _ => Err(EINVAL),
        }
    }

    fn owner_wait(&self, queues: &mut KVec<WordQueue>, word: &Word, caller: Queued) -> Result<u32> {
        for _ in 0..OWNER_RETRIES {
            let queued = queues.iter().any(|q| q.word == *word && !q.lock.is_empty());
            let current = self.held_word_atomic(word, Atomic::FetchAdd(0))?;
            let swap = |new| {
                self.held_word_atomic(
                    word,
                    Atomic::CompareSwap {
                        expected: current,
                        new,
                    },
                )
            };
            match lockword::wait_step(current, caller.value, queued, |node| self.node_alive(node)) {
                WaitStep::Take { new, holder_died } => {
                    if swap(new)? == current {
                        return Ok(if holder_died {
                            LOCK_TAKEN_HOLDER_DIED
                        } else {
                            LOCK_TAKEN
                        });
                    }
                }
                WaitStep::Queue { new } => {
                    if swap(new)? == current {
                        return enqueue(queues, word, caller);
                    }
                }
                WaitStep::QueueOnly => return enqueue(queues, word, caller),
                WaitStep::PassOn => self.pass_on(queues, word, current, LOCK_TAKEN_HOLDER_DIED)?,
            }
        }
        Err(EAGAIN)
    }

    /// Passes the lock whose word is `current` to the first waiter that is still
    /// there (`outcome` tells it how it got it), or frees it.
    fn pass_on(
        &self,
        queues: &mut KVec<WordQueue>,
        word: &Word,
        mut current: u64,
        mut outcome: u32,
    ) -> Result {
        loop {
            let index = queues.iter().position(|q| q.word == *word);
            let next = match index {
                Some(i) if !queues[i].lock.is_empty() => Some(remove_at(&mut queues[i].lock, 0)),
                _ => None,
            };
            let more = index.is_some_and(|i| !queues[i].lock.is_empty());
            let new = lockword::passed_word(next.map(|n| n.value), more);
            let old = self.held_word_atomic(
                word,
                Atomic::CompareSwap {
                    expected: current,
                    new,
                },
            )?;
            if let Some(i) = index {
                if old != current {
                    // Not the state the releaser saw: leave the queue as it was.
                    if let Some(next) = next {
                        // Its slot is still allocated: this does not fail.
                        let lock = &mut queues[i].lock;
                        let _ = lock.push(next, GFP_KERNEL);
                        lock.as_mut_slice().rotate_right(1);
                    }
                    return Err(ENOLCK());
                }
                if queues[i].lock.is_empty() && queues[i].barrier.is_empty() {
                    swap_remove(queues, i);
                }
            }
            let Some(next) = next else { return Ok(()) };
            if self.wake(&next, outcome as i32).is_ok() {
                return Ok(());
            }
            // That waiter gave up or its node is gone: pass on for it.
            current = new;
            outcome = LOCK_TAKEN;
        }
    }

    fn wake(&self, waiter: &Queued, outcome: i32) -> Result {
        let me = self.me()?;
        let wake = LockWake {
            token: waiter.token,
            outcome,
        };
        if waiter.node == me {
            self.lock_woken(me, &wake)
        } else {
            self.peer(waiter.node)?
                .request(MsgKind::LockWake, &wake, &mut [])
                .map(drop)
        }
    }

    /// LMR (`master`, `id`) is freed here: its queued callers fail with EIDRM.
    pub(crate) fn locks_forget_lmr(&self, master: u32, id: u64) {
        self.drop_queues(|w| w.master == master && w.id == id, EIDRM());
    }

    /// Node `node` is gone: its callers leave every queue, locks it held pass on,
    /// queues at words held for it go (EHOSTDOWN), and this node's callers waiting
    /// for it as an owner fail.
    pub(crate) fn locks_forget_node(&self, node: u32) {
        self.drop_queues(|w| w.master == node, EHOSTDOWN());
        {
            let mut queues = self.locks.queues.lock();
            let mut i = 0;
            while i < queues.len() {
                retain(&mut queues[i].lock, |q| q.node != node);
                retain(&mut queues[i].barrier, |q| q.node != node);
                let word = queues[i].word;
                if queues[i].lock.is_empty() && queues[i].barrier.is_empty() {
                    swap_remove(&mut queues, i);
                    continue;
                }
                i += 1;
                if let Ok(current) = self.held_word_atomic(&word, Atomic::FetchAdd(0)) {
                    if lockword::holder_node(current) == Some(node) {
                        let _ = self.pass_on(&mut queues, &word, current, LOCK_TAKEN_HOLDER_DIED);
                        // The queues may have shrunk: look at everything again next time.
                        i = 0;
                    }
                }
            }
        }
        let waiters = self.locks.waiters.lock();
        for waiter in waiters.iter().filter(|w| w.owner == node) {
            *waiter.outcome.lock() = Some(EHOSTDOWN().to_errno());
            waiter.woken.notify_one();
        }
    }

    fn drop_queues(&self, gone: impl Fn(&Word) -> bool, err: Error) {
        let mut queues = self.locks.queues.lock();
        let mut i = 0;
        while i < queues.len() {
            if gone(&queues[i].word) {
                let queue = swap_remove(&mut queues, i);
                for waiter in Iterator::chain(queue.lock.iter(), queue.barrier.iter()) {
                    let _ = self.wake(waiter, err.to_errno());
                }
            } else {
                i += 1;
            }
        }
    }
}

/// EAGAIN once the node's words have `NODE_MAX_QUEUED` callers queued.
fn node_room(queues: &[WordQueue]) -> Result {
    let queued: usize = queues.iter().map(|q| q.lock.len() + q.barrier.len()).sum();
    if queued >= NODE_MAX_QUEUED {
        return Err(EAGAIN);
    }
    Ok(())
}

fn queue_for<'a>(queues: &'a mut KVec<WordQueue>, word: &Word) -> Result<&'a mut WordQueue> {
    let i = match queues.iter().position(|q| q.word == *word) {
        Some(i) => i,
        None => {
            queues.push(
                WordQueue {
                    word: *word,
                    lock: KVec::new(),
                    barrier: KVec::new(),
                },
                GFP_KERNEL,
            )?;
            queues.len() - 1
        }
    };
    Ok(&mut queues[i])
}

fn enqueue(queues: &mut KVec<WordQueue>, word: &Word, caller: Queued) -> Result<u32> {
    node_room(queues)?;
    let queue = queue_for(queues, word)?;
    if queue.lock.len() >= MAX_QUEUED {
        return Err(EAGAIN);
    }
    queue.lock.push(caller, GFP_KERNEL)?;
    Ok(LOCK_QUEUED)
}
