// SPDX-License-Identifier: GPL-2.0
//! `FreeSlots`: which of up to 64 slots are free, taken and given back without a
//! lock, so that the callers of small operations share a few buffers mapped once.

use core::sync::atomic::{AtomicU64, Ordering};

/// Slots `FreeSlots` can track.
pub(crate) const SLOTS_MAX: usize = 64;

/// A set of free slot indices below `SLOTS_MAX`, one bit each.
pub(crate) struct FreeSlots(AtomicU64);

impl FreeSlots {
    /// `count` slots (at most `SLOTS_MAX`), all free.
    pub(crate) fn new(count: usize) -> Self {
        let bits = match count {
            0 => 0,
            n if n >= SLOTS_MAX => u64::MAX,
            n => (1 << n) - 1,
        };
        FreeSlots(AtomicU64::new(bits))
    }

    /// Takes a free slot, the lowest; `None` when every slot is taken.
    pub(crate) fn take(&self) -> Option<usize> {
        let mut free = self.0.load(Ordering::Relaxed);
        loop {
            if free == 0 {
                return None;
            }
            let slot = free.trailing_zeros() as usize;
            // Acquire: the slot's last user's writes (`give`'s Release) come first.
            match self.0.compare_exchange_weak(
                free,
                free & !(1 << slot),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(slot),
                Err(now) => free = now,
            }
        }
    }

    /// Gives back `slot`, which `take` returned and nobody uses any more.
    pub(crate) fn give(&self, slot: usize) {
        if slot < SLOTS_MAX {
            self.0.fetch_or(1 << slot, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn count(slots: &FreeSlots) -> u32 {
        slots.0.load(Ordering::Relaxed).count_ones()
    }

    #[test]
    fn takes_each_slot_once_then_none() {
        let slots = FreeSlots::new(3);
        let mut taken: Vec<usize> = (0..3).filter_map(|_| slots.take()).collect();
        taken.sort();
        assert_eq!(taken, [0, 1, 2]);
        assert_eq!(slots.take(), None);
        slots.give(1);
        assert_eq!(
            (count(&slots), slots.take(), slots.take()),
            (1, Some(1), None)
        );
    }

    #[test]
    fn no_slots_and_the_most_slots() {
        assert_eq!(FreeSlots::new(0).take(), None);
        let all = FreeSlots::new(SLOTS_MAX + 1);
        assert_eq!(count(&all), SLOTS_MAX as u32);
        // An index it never gave out changes nothing.
        let one = FreeSlots::new(1);
        one.give(SLOTS_MAX);
        assert_eq!(count(&one), 1);
    }

    #[test]
    fn threads_never_hold_one_slot_at_once() {
        let slots = Arc::new(FreeSlots::new(4));
        let holders = Arc::new([(); 4].map(|_| AtomicU64::new(0)));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, holders) = (slots.clone(), holders.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        if let Some(slot) = slots.take() {
                            assert_eq!(holders[slot].fetch_add(1, Ordering::SeqCst), 0);
                            holders[slot].fetch_sub(1, Ordering::SeqCst);
                            slots.give(slot);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(count(&slots), 4);
    }
}
