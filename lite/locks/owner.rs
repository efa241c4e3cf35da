// SPDX-License-Identifier: GPL-2.0
//! The owner's side: the node holding a word queues its waiters in FIFO order,
//! passes the lock on, releases a barrier's round, and forgets the waiters of
//! an LMR or a node that is gone.

use super::lockword::{self, WaitStep, WAITERS};
use super::LockNode;
use super::{Queued, WordQueue, MAX_QUEUED, NODE_MAX_QUEUED, OWNER_RETRIES};
use crate::errno::{EHOSTDOWN, EIDRM, ENOLCK};
use crate::kvec::{remove_at, retain, swap_remove};
use crate::lmr::{HeldWord, Word};
use crate::net::wire::{
    LockReq, LockWake, MsgKind, BARRIER_OP_DONE, BARRIER_OP_WAIT, BARRIER_PASSED, LOCK_DONE,
    LOCK_OP_RELEASE, LOCK_OP_WAIT, LOCK_QUEUED, LOCK_TAKEN, LOCK_TAKEN_HOLDER_DIED,
};
use crate::verbs::Atomic;
use kernel::prelude::*;

impl LockNode {
    /// Serves a lock or barrier request from node `from` for a word this node holds.
    pub(crate) fn serve_lock(&self, from: u32, req: &LockReq) -> Result<u32> {
        let word = Word {
            holder: self.net.me()?,
            master: req.master,
            id: req.id,
            addr: req.addr,
        };
        let mut queues = self.queues.lock();
        // Under `queues`: a free of the LMR takes its memory out of the registry
        // first, then its queues (waiting for `queues`), so no queue is made for a
        // word whose memory is gone, and `held` keeps it while this works on it.
        let held = self.lmr.held_word(&word)?;
        match req.op {
            LOCK_OP_WAIT | LOCK_OP_RELEASE if lockword::holder_node(req.value) != Some(from) => {
                Err(EINVAL)
            }
            LOCK_OP_WAIT => self.owner_wait(
                &mut queues,
                &held,
                Queued {
                    node: from,
                    token: req.token,
                    value: req.value,
                },
            ),
            LOCK_OP_RELEASE => {
                self.pass_on(&mut queues, &held, req.value | WAITERS, LOCK_TAKEN)?;
                Ok(LOCK_DONE)
            }
            BARRIER_OP_WAIT => {
                let count = self.lmr.held_word_atomic(&held, Atomic::FetchAdd(0))?;
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
                let count = self.lmr.held_word_atomic(&held, Atomic::FetchAdd(0))?;
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

    fn owner_wait(
        &self,
        queues: &mut KVec<WordQueue>,
        held: &HeldWord,
        caller: Queued,
    ) -> Result<u32> {
        let word = &held.word;
        for _ in 0..OWNER_RETRIES {
            let queued = queues.iter().any(|q| q.word == *word && !q.lock.is_empty());
            let current = self.lmr.held_word_atomic(held, Atomic::FetchAdd(0))?;
            let swap = |new| {
                self.lmr.held_word_atomic(
                    held,
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
                WaitStep::PassOn => self.pass_on(queues, held, current, LOCK_TAKEN_HOLDER_DIED)?,
            }
        }
        Err(EAGAIN)
    }

    /// Passes the lock whose word is `current` to the first waiter that is still
    /// there (`outcome` tells it how it got it), or frees it.
    fn pass_on(
        &self,
        queues: &mut KVec<WordQueue>,
        held: &HeldWord,
        mut current: u64,
        mut outcome: u32,
    ) -> Result {
        let word = &held.word;
        loop {
            let index = queues.iter().position(|q| q.word == *word);
            let next = match index {
                Some(i) if !queues[i].lock.is_empty() => Some(remove_at(&mut queues[i].lock, 0)),
                _ => None,
            };
            let more = index.is_some_and(|i| !queues[i].lock.is_empty());
            let new = lockword::passed_word(next.map(|n| n.value), more);
            let old = self.lmr.held_word_atomic(
                held,
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
        let me = self.net.me()?;
        let wake = LockWake {
            token: waiter.token,
            outcome,
        };
        if waiter.node == me {
            self.lock_woken(me, &wake)
        } else {
            self.net
                .peer(waiter.node)?
                .request(MsgKind::LockWake, &wake, &mut [])
                .map(drop)
        }
    }

    /// LMR (`master`, `id`) is freed here: its queued callers fail with EIDRM.
    pub(crate) fn forget_lmr(&self, master: u32, id: u64) {
        self.drop_queues(|w| w.master == master && w.id == id, EIDRM());
    }

    /// Node `node` is gone: its callers leave every queue, locks it held pass on,
    /// queues at words held for it go (EHOSTDOWN), and this node's callers waiting
    /// for it as an owner fail.
    pub(crate) fn forget_node(&self, node: u32) {
        self.drop_queues(|w| w.master == node, EHOSTDOWN());
        {
            let mut queues = self.queues.lock();
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
                // A word whose LMR is being freed: its queue is about to go.
                let Ok(held) = self.lmr.held_word(&word) else {
                    continue;
                };
                if let Ok(current) = self.lmr.held_word_atomic(&held, Atomic::FetchAdd(0)) {
                    if lockword::holder_node(current) == Some(node) {
                        let _ = self.pass_on(&mut queues, &held, current, LOCK_TAKEN_HOLDER_DIED);
                        // The queues may have shrunk: look at everything again next time.
                        i = 0;
                    }
                }
            }
        }
        let waiters = self.waiters.lock();
        for waiter in waiters.iter().filter(|w| w.owner == node) {
            *waiter.outcome.lock() = Some(EHOSTDOWN().to_errno());
            waiter.woken.notify_one();
        }
    }

    fn drop_queues(&self, gone: impl Fn(&Word) -> bool, err: Error) {
        let mut queues = self.queues.lock();
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
