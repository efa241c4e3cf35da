// SPDX-License-Identifier: GPL-2.0
//! `compat` for the 6.12 LTS kernels (see `mod.rs`).

use kernel::prelude::*;
use kernel::rbtree::{Cursor, RBTree};
use kernel::time::Ktime;
use kernel::uaccess::UserSlice;

pub(crate) use kernel::init::{zeroed as init_zeroed, Zeroable};
pub(crate) use kernel::types::{AsBytes, FromBytes};

/// `module!` as 7.x spells it: 6.12 takes a single `author`.
macro_rules! module {
    (
        type: $type:tt,
        name: $name:tt,
        authors: [$author:tt $(,)?],
        description: $description:tt,
        license: $license:tt $(,)?
    ) => {
        ::kernel::prelude::module! {
            type: $type,
            name: $name,
            author: $author,
            description: $description,
            license: $license,
        }
    };
}
pub(crate) use module;

pub(crate) fn now_ns() -> u64 {
    Ktime::ktime_get().to_ns() as u64
}

pub(crate) fn user_slice(addr: usize, len: usize) -> UserSlice {
    UserSlice::new(addr, len)
}

/// Removes and returns the last element (the 6.12 `KVec` has no `pop`).
pub(crate) fn kvec_pop<T>(vec: &mut KVec<T>) -> Option<T> {
    let last = vec.len().checked_sub(1)?;
    // SAFETY: `last < len`, so the element at `last` is initialized; after `set_len(last)`
    // the vector no longer owns it, so reading it out moves ownership to the caller once.
    unsafe {
        vec.set_len(last);
        Some(core::ptr::read(vec.as_ptr().add(last)))
    }
}

/// Drops the elements from `len` on (the 6.12 `KVec` has no `truncate`).
pub(crate) fn kvec_truncate<T>(vec: &mut KVec<T>, len: usize) {
    let old = vec.len();
    if len >= old {
        return;
    }
    // SAFETY: `len < old`: the first `len` elements stay initialized; the ones in
    // `len..old` are initialized and, once the vector no longer owns them, dropped once.
    unsafe {
        vec.set_len(len);
        let tail = core::ptr::slice_from_raw_parts_mut(vec.as_mut_ptr().add(len), old - len);
        core::ptr::drop_in_place(tail);
    }
}

/// A cursor at the first key not below `key` (6.12 cursors can always move and remove).
pub(crate) fn cursor_lower_bound_mut<'a, K: Ord, V>(
    tree: &'a mut RBTree<K, V>,
    key: &K,
) -> Option<Cursor<'a, K, V>> {
    tree.cursor_lower_bound(key)
}
