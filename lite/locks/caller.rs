// SPDX-License-Identifier: GPL-2.0
//! The caller's side: LT_lock, LT_unlock and LT_barrier by this node's
//! processes, their fast paths on the word, and their waits for its owner.

use super::lockword::{self, WAITERS};
use super::LockNode;
use super::{outcome_code, FileLocks, HeldLock, Waiter, LOCKS_PER_FILE, OWNER_CHECK_MS};
use crate::errno::{EDEADLK, EHOSTDOWN, ENOLCK, EOWNERDEAD, ETIMEDOUT};
use crate::kvec::swap_remove;
use crate::lmr::{FileLmrs, Word, WordRef};
use crate::net::wire::{
    LockReq, LockWake, MsgKind, BARRIER_OP_DONE, BARRIER_OP_WAIT, BARRIER_PASSED, LOCK_DONE,
    LOCK_OP_RELEASE, LOCK_OP_WAIT, LOCK_QUEUED, LOCK_TAKEN, LOCK_TAKEN_HOLDER_DIED,
};
use crate::verbs::Atomic;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_spinlock, Arc, CondVarTimeoutResult, Mutex};
use kernel::time::msecs_to_jiffies;

impl LockNode {
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
        let word = self.lmr.lmr_word(lmrs, lh, offset)?;
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
        let value = lockword::holder_word(self.net.me()?, token);
        self.take_turn(&word)?;
        let holder_died = match self.acquire_word(&word, value, token) {
            Ok(holder_died) => holder_died,
            Err(e) => {
                self.pass_turn(&word.word);
                return Err(e);
            }
        };
        let mut held = locks.lock();
        if held.held.reserve(1, GFP_KERNEL).is_err() {
            drop(held);
            let _ = self.release_word(&word, value);
            self.pass_turn(&word.word);
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

    /// Takes `word` as `value` (token `token`), at once when it is free, else
    /// through its owner; true when taken over from a holder whose node died.
    fn acquire_word(&self, word: &WordRef, value: u64, token: u32) -> Result<bool> {
        let old = self.lmr.word_atomic(
            word,
            Atomic::CompareSwap {
                expected: 0,
                new: value,
            },
        )?;
        let outcome = if old == 0 {
            LOCK_TAKEN
        } else {
            self.wait_for_owner(word, LOCK_OP_WAIT, value, token, None)?
        };
        match outcome {
            LOCK_TAKEN => Ok(false),
            LOCK_TAKEN_HOLDER_DIED => Ok(true),
            _ => Err(EIO),
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
        self.release(&held)
    }

    /// Lets `lock` go: the word, then this node's turn at it.
    fn release(&self, lock: &HeldLock) -> Result {
        let released = self.release_word(&lock.word, lock.value);
        self.pass_turn(&lock.word.word);
        released
    }

    /// Whether the file holds a lock through handle `lh` (which must then stay
    /// mapped, or the lock could never be released).
    pub(crate) fn held_through(&self, locks: &Mutex<FileLocks>, lh: u64) -> bool {
        locks.lock().held.iter().any(|h| h.lh == lh)
    }

    /// The file closes: the locks it holds go to their next waiters.
    pub(crate) fn release_file(&self, locks: &Mutex<FileLocks>) {
        let held = core::mem::take(&mut locks.lock().held);
        for lock in held.iter() {
            // A freed LMR or a dead owner took the lock with it.
            let _ = self.release(lock);
        }
    }

    fn release_word(&self, word: &WordRef, value: u64) -> Result {
        let old = self.lmr.word_atomic(
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
        let word = self.lmr.lmr_word(lmrs, lh, offset)?;
        let old = self.lmr.word_atomic(&word, Atomic::FetchAdd(1))?;
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
            let token = self.next_token.fetch_add(1, Ordering::Relaxed);
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
        self.waiters.lock().push(waiter.clone(), GFP_KERNEL)?;
        let answer = match self.owner_request(&word.word, op, value, token) {
            Ok(LOCK_QUEUED) => self.sleep_until_woken(&waiter, timeout_ms),
            other => other,
        };
        // Once off the list, a late wake finds nobody (ENOENT) and the owner
        // passes the lock on; an answer that came first stands.
        {
            let mut waiters = self.waiters.lock();
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
        let me = self.net.me()?;
        if word.holder == me {
            return self.serve_lock(me, &req);
        }
        let mut answer = [0u8; 4];
        match self
            .net
            .peer(word.holder)?
            .request(MsgKind::Lock, &req, &mut answer)?
        {
            4 => Ok(u32::from_le_bytes(answer)),
            _ => Err(EIO),
        }
    }

    /// The owner's outcome for waiter `wake.token` of this node (from node `owner`).
    pub(crate) fn lock_woken(&self, owner: u32, wake: &LockWake) -> Result {
        let waiters = self.waiters.lock();
        let waiter = waiters
            .iter()
            .find(|w| w.token == wake.token && w.owner == owner)
            .ok_or(ENOENT)?;
        *waiter.outcome.lock() = Some(wake.outcome);
        waiter.woken.notify_one();
        Ok(())
    }

    pub(crate) fn node_alive(&self, node: u32) -> bool {
        self.net.me().is_ok_and(|me| me == node)
            || self
                .net
                .peer(node)
                .is_ok_and(|p| p.ensure_connected().is_ok())
    }
}
