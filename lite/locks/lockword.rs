// SPDX-License-Identifier: GPL-2.0
//! Lock words and barrier counters (LT_lock, LT_barrier) as pure functions.
//!
//! A lock is an 8-byte word of an LMR. 0 means free; otherwise it names the
//! holder (node and a per-node token) so that the word's holder node, the
//! "owner", can release it for a holder that died. Taking a free lock and
//! releasing one nobody waits for are single compare-and-swaps by the caller's
//! node. A caller that finds the lock taken queues at the owner, which sets
//! [`WAITERS`]: from then on the holder's compare-and-swap back to 0 fails and it
//! asks the owner to pass the lock on, so the word never becomes free while
//! someone waits (FIFO, no barging).
//!
//! A barrier is an 8-byte counter of arrivals: with `participants` callers per
//! round, round `g` ends when the counter reaches `(g + 1) * participants`, so a
//! fast caller's next arrival counts towards the next round, never this one.

/// Set by the owner while waiters are queued.
pub(crate) const WAITERS: u64 = 1 << 63;

/// The word of a lock held by `token` on `node`. Never 0.
pub(crate) fn holder_word(node: u32, token: u32) -> u64 {
    ((u64::from(node) + 1) << 32) | u64::from(token)
}

/// The node holding a lock word, `None` when free.
pub(crate) fn holder_node(word: u64) -> Option<u32> {
    let node = (word & !WAITERS) >> 32;
    if node == 0 {
        None
    } else {
        u32::try_from(node - 1).ok()
    }
}

/// What the owner does for a caller that wants the lock, given the word's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitStep {
    /// Swap the word to `new`: the caller holds the lock (`holder_died`: taken over
    /// from a holder whose node is gone).
    Take { new: u64, holder_died: bool },
    /// Swap the word to `new` (waiters bit set) and queue the caller.
    Queue { new: u64 },
    /// The waiters bit is set: queue the caller, the word stays.
    QueueOnly,
    /// The holder's node is gone and others wait: pass the lock on first.
    PassOn,
}

/// `caller` is the caller's holder word; `queued` whether anyone waits already.
pub(crate) fn wait_step(
    current: u64,
    caller: u64,
    queued: bool,
    holder_alive: impl Fn(u32) -> bool,
) -> WaitStep {
    match holder_node(current) {
        None => WaitStep::Take {
            new: caller | if queued { WAITERS } else { 0 },
            holder_died: false,
        },
        Some(node) if !holder_alive(node) => {
            if queued {
                WaitStep::PassOn
            } else {
                WaitStep::Take {
                    new: caller,
                    holder_died: true,
                }
            }
        }
        Some(_) if current & WAITERS != 0 => WaitStep::QueueOnly,
        Some(_) => WaitStep::Queue {
            new: current | WAITERS,
        },
    }
}

/// The word after the owner passes the lock to `next` (0 when nobody waits).
pub(crate) fn passed_word(next: Option<u64>, more_waiting: bool) -> u64 {
    match next {
        Some(word) if more_waiting => word | WAITERS,
        Some(word) => word,
        None => 0,
    }
}

/// An arrival that found `old` arrivals before it, at a barrier of
/// `participants`: the count that ends its round, and whether it is the last.
pub(crate) fn barrier_arrival(old: u64, participants: u32) -> Option<(u64, bool)> {
    let p = u64::from(participants);
    if p == 0 {
        return None;
    }
    let target = (old / p).checked_add(1)?.checked_mul(p)?;
    Some((target, old + 1 == target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_words_name_their_node_and_are_never_free() {
        for node in [0, 1, 63, 1000] {
            for token in [0, 1, u32::MAX] {
                let w = holder_word(node, token);
                assert_ne!(w, 0);
                assert_eq!(w & WAITERS, 0);
                assert_eq!(holder_node(w), Some(node));
                assert_eq!(holder_node(w | WAITERS), Some(node));
            }
        }
        assert_eq!(holder_node(0), None);
    }

    #[test]
    fn a_free_lock_is_taken_and_a_held_one_queues_once_flagged() {
        let me = holder_word(2, 7);
        let other = holder_word(1, 3);
        let alive = |_| true;
        assert_eq!(
            wait_step(0, me, false, alive),
            WaitStep::Take {
                new: me,
                holder_died: false
            }
        );
        // Freed between the caller's failed swap and its request: taken, flagged if others wait.
        assert_eq!(
            wait_step(0, me, true, alive),
            WaitStep::Take {
                new: me | WAITERS,
                holder_died: false
            }
        );
        assert_eq!(
            wait_step(other, me, false, alive),
            WaitStep::Queue {
                new: other | WAITERS
            }
        );
        assert_eq!(
            wait_step(other | WAITERS, me, true, alive),
            WaitStep::QueueOnly
        );
    }

    #[test]
    fn a_dead_holder_is_taken_over_or_passed_on() {
        let me = holder_word(2, 7);
        let dead = holder_word(1, 3);
        let alive = |n| n != 1;
        assert_eq!(
            wait_step(dead, me, false, alive),
            WaitStep::Take {
                new: me,
                holder_died: true
            }
        );
        assert_eq!(wait_step(dead | WAITERS, me, true, alive), WaitStep::PassOn);
    }

    #[test]
    fn passing_keeps_the_waiters_bit_while_anyone_is_left() {
        let next = holder_word(0, 9);
        assert_eq!(passed_word(Some(next), true), next | WAITERS);
        assert_eq!(passed_word(Some(next), false), next);
        assert_eq!(passed_word(None, false), 0);
    }

    #[test]
    fn barrier_rounds_do_not_mix() {
        // Three participants, two rounds back to back: arrivals 0..6.
        let got: Vec<_> = (0..6).map(|old| barrier_arrival(old, 3).unwrap()).collect();
        assert_eq!(
            got,
            [
                (3, false),
                (3, false),
                (3, true),
                (6, false),
                (6, false),
                (6, true)
            ]
        );
        assert_eq!(barrier_arrival(0, 1), Some((1, true)));
        assert_eq!(barrier_arrival(5, 0), None);
        assert_eq!(
            barrier_arrival(u64::MAX - 1, 2),
            None,
            "overflow is refused"
        );
    }
}
