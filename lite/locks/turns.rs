// SPDX-License-Identifier: GPL-2.0
//! This node's turn at a lock word. Of this node's LT_lock callers on one word,
//! one at a time contends for it, at the word and, when it is taken, at the
//! owner; the others wait here in arrival order, and the turn passes to the
//! first of them when its holder lets the lock go (or fails to get it).
//!
//! Without turns, every waiting thread queued at the owner, and each handover
//! between two threads of one node took the holder's failed compare-and-swap, a
//! request to the owner, the owner's own compare-and-swap and a wake message:
//! locked increments from two threads of one node ran at 0.40-0.51 of one
//! thread's rate. With them, the next thread of the node finds the word free,
//! and the owner's queue holds at most one caller per node, so nodes take turns
//! with one another in the owner's FIFO order, and threads within a node in
//! theirs.

use super::{LockNode, MAX_QUEUED, OWNER_CHECK_MS};
use crate::kvec::{remove_at, swap_remove};
use crate::lmr::{Word, WordRef};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_spinlock, Arc, CondVar, CondVarTimeoutResult, SpinLock};
use kernel::time::msecs_to_jiffies;

/// A word whose turn a caller of this node has, and the callers waiting for it.
pub(super) struct WordTurn {
    word: Word,
    waiting: KVec<Arc<TurnWaiter>>,
}

/// A caller waiting for its turn.
#[pin_data]
pub(super) struct TurnWaiter {
    /// Set, under `LockNode::turns`, when the turn passed to it.
    #[pin]
    granted: SpinLock<bool>,
    #[pin]
    woken: CondVar,
}

impl LockNode {
    /// Waits until the calling thread has this node's turn at `word`: at once when
    /// nobody of this node has it. EINTR when interrupted, EIDRM (or the
    /// revocation's errno) once the LMR is gone, without the turn.
    pub(super) fn take_turn(&self, word: &WordRef) -> Result {
        let waiter = {
            let mut turns = self.turns.lock();
            let Some(turn) = turns.iter_mut().find(|t| t.word == word.word) else {
                let turn = WordTurn {
                    word: word.word,
                    waiting: KVec::new(),
                };
                return turns.push(turn, GFP_KERNEL).map_err(Into::into);
            };
            // As many as may queue at one word's owner; more get EAGAIN.
            if turn.waiting.len() >= MAX_QUEUED {
                return Err(EAGAIN);
            }
            let waiter = Arc::pin_init(
                pin_init!(TurnWaiter {
                    granted <- new_spinlock!(false, "lite:lock.turn_granted"),
                    woken <- new_condvar!("lite:lock.turn_woken"),
                }),
                GFP_KERNEL,
            )?;
            turn.waiting.push(waiter.clone(), GFP_KERNEL)?;
            waiter
        };
        let Err(gave_up) = self.wait_for_turn(&waiter, word) else {
            return Ok(());
        };
        // Leaving without the turn: off the queue, unless it passed here meanwhile.
        let mut turns = self.turns.lock();
        if *waiter.granted.lock() {
            drop(turns);
            self.pass_turn(&word.word);
            return Err(gave_up);
        }
        if let Some(turn) = turns.iter_mut().find(|t| t.word == word.word) {
            if let Some(i) = turn.waiting.iter().position(|w| Arc::ptr_eq(w, &waiter)) {
                remove_at(&mut turn.waiting, i);
            }
        }
        Err(gave_up)
    }

    /// Sleeps until the turn passes to `waiter`, or the caller gives up: EINTR,
    /// or the errno of the LMR's revocation.
    fn wait_for_turn(&self, waiter: &TurnWaiter, word: &WordRef) -> Result {
        let check = msecs_to_jiffies(OWNER_CHECK_MS);
        loop {
            {
                let mut granted = waiter.granted.lock();
                if *granted {
                    return Ok(());
                }
                match waiter.woken.wait_interruptible_timeout(&mut granted, check) {
                    CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                    CondVarTimeoutResult::Woken { .. } => continue,
                    CondVarTimeoutResult::Timeout => {}
                }
            }
            // The turn's holder may wait long (for a lock held elsewhere); a freed
            // LMR ends the wait here too, as it does at the owner.
            drop(word.mapping.begin()?);
        }
    }

    /// The caller that had this node's turn at `word` lets it go: to the first
    /// caller waiting for it, if any.
    pub(super) fn pass_turn(&self, word: &Word) {
        let mut turns = self.turns.lock();
        let Some(i) = turns.iter().position(|t| t.word == *word) else {
            return;
        };
        if turns[i].waiting.is_empty() {
            swap_remove(&mut turns, i);
            return;
        }
        let next = remove_at(&mut turns[i].waiting, 0);
        *next.granted.lock() = true;
        next.woken.notify_one();
    }

    /// Callers of this node waiting for their turn at a word.
    pub(super) fn waiting_for_turns(&self) -> u32 {
        self.turns
            .lock()
            .iter()
            .fold(0u32, |n, t| n.saturating_add(t.waiting.len() as u32))
    }
}
