// SPDX-License-Identifier: GPL-2.0
//! `compat` for the 7.x kernels (see `mod.rs`).

use kernel::prelude::*;
use kernel::rbtree::{CursorMut, RBTree};
use kernel::uaccess::{UserPtr, UserSlice};

// The prelude's `FromBytes` is zerocopy's; user copies take the kernel's.
pub(crate) use kernel::transmute::{AsBytes, FromBytes};
pub(crate) use pin_init::{init_zeroed, Zeroable};

pub(crate) use ::kernel::prelude::module;

/// `ktime_get()`, as 6.12's `Ktime` reads it (7.x's `Instant` keeps the value private).
pub(crate) fn now_ns() -> u64 {
    // SAFETY: `ktime_get()` may be called from any context but NMI, as
    // `Instant::<Monotonic>::now()` does.
    unsafe { kernel::bindings::ktime_get() as u64 }
}

pub(crate) fn user_slice(addr: usize, len: usize) -> UserSlice {
    UserSlice::new(UserPtr::from_addr(addr), len)
}

pub(crate) fn kvec_pop<T>(vec: &mut KVec<T>) -> Option<T> {
    vec.pop()
}

pub(crate) fn kvec_truncate<T>(vec: &mut KVec<T>, len: usize) {
    vec.truncate(len);
}

/// A cursor at the first key not below `key` that can move and remove.
pub(crate) fn cursor_lower_bound_mut<'a, K: Ord, V>(
    tree: &'a mut RBTree<K, V>,
    key: &K,
) -> Option<CursorMut<'a, K, V>> {
    tree.cursor_lower_bound_mut(key)
}
