// SPDX-License-Identifier: GPL-2.0
//! Helpers for `KVec` (6.12's has no removal; `compat` gives it `pop` and
//! `truncate`): element removal, byte truncation and a FIFO. Generic; no LITE state.

use crate::compat::{kvec_pop, kvec_truncate};
use kernel::alloc::flags::__GFP_NOWARN;
use kernel::alloc::Flags;
use kernel::prelude::*;

/// Removes and returns element `index`, moving the last element into its place.
pub(crate) fn swap_remove<T>(vec: &mut KVec<T>, index: usize) -> T {
    let last = vec.len() - 1;
    vec.as_mut_slice().swap(index, last);
    match kvec_pop(vec) {
        Some(item) => item,
        // `index < len` (the swap above checked it), so the vector is not empty.
        None => unreachable!(),
    }
}

/// Removes element `i`, keeping the order of the rest (FIFO queues).
pub(crate) fn remove_at<T>(vec: &mut KVec<T>, i: usize) -> T {
    vec.as_mut_slice()[i..].rotate_left(1);
    swap_remove(vec, vec.len() - 1)
}

/// Keeps the elements for which `keep` holds, in order.
pub(crate) fn retain<T>(vec: &mut KVec<T>, keep: impl Fn(&T) -> bool) {
    let mut i = 0;
    while i < vec.len() {
        if keep(&vec[i]) {
            i += 1;
        } else {
            drop(remove_at(vec, i));
        }
    }
}

/// Allocation flags for a vector whose length a user or a peer chose (bytes of a
/// call, pages or extents of a region): one block of up to several MiB. On a
/// node whose memory is fragmented it fails and the call returns ENOMEM; without
/// `__GFP_NOWARN` the allocator would also log a warning and a stack trace, which
/// any user could repeat into the kernel log.
pub(crate) fn caller_sized() -> Flags {
    GFP_KERNEL | __GFP_NOWARN
}

/// Shortens a byte vector (bytes need no drop).
pub(crate) fn truncate(bytes: &mut KVec<u8>, len: usize) {
    kvec_truncate(bytes, len);
}

/// A FIFO over a vector.
pub(crate) struct Fifo<T> {
    items: KVec<Option<T>>,
    head: usize,
}

impl<T> Fifo<T> {
    pub(crate) fn new() -> Self {
        Fifo {
            items: KVec::new(),
            head: 0,
        }
    }

    /// Appends `item`; hands it back when there is no memory.
    pub(crate) fn push(&mut self, item: T, flags: Flags) -> core::result::Result<(), T> {
        if self.items.reserve(1, flags).is_err() {
            return Err(item);
        }
        // Within the capacity just reserved: cannot fail.
        let _ = self.items.push(Some(item), flags);
        Ok(())
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.items.get(self.head).and_then(|i| i.as_ref())
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        let item = self.items.get_mut(self.head)?.take();
        self.head += 1;
        if self.head == self.items.len() || (self.head >= 64 && self.head * 2 >= self.items.len()) {
            let len = self.items.len();
            self.items.as_mut_slice().rotate_left(self.head);
            // The last `head` elements are `None` (taken).
            kvec_truncate(&mut self.items, len - self.head);
            self.head = 0;
        }
        item
    }

    /// Puts an item back at the front (a receive that could not deliver it).
    pub(crate) fn push_front(&mut self, item: T) -> Result {
        if self.head > 0 {
            self.head -= 1;
            self.items[self.head] = Some(item);
        } else {
            self.items.push(Some(item), GFP_KERNEL)?;
            self.items.as_mut_slice().rotate_right(1);
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len() - self.head
    }

    /// Every item, in order.
    pub(crate) fn drain(&mut self) -> KVec<Option<T>> {
        let items = core::mem::take(&mut self.items);
        self.head = 0;
        items
    }
}
