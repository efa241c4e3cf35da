//! Atomics and synchronization on an LMR's 8-byte words from C: fetch-and-add,
//! compare-and-swap, the distributed lock and the barrier.

use super::{with_lite, LiteHandle};
use crate::{uapi, Lite};
use std::ffi::c_int;

/// Adds `value` to the 8-byte word at `offset` (a multiple of 8) of the LMR with one
/// RDMA atomic and stores its old value in `*old`. Needs read and write permission.
/// Returns 0 or a negative errno (-EINVAL: misaligned, -EACCES, -ERANGE).
///
/// # Safety
/// `lite` is a live handle; `old` is NULL or points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn lite_fetch_add(
    lite: *const LiteHandle,
    lh: u64,
    offset: u64,
    value: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { atomic_result(lite, old, |l| l.lmr_atomic(lh, offset, uapi::LITE_ATOMIC_FETCH_ADD, value, 0, None)) }
}

/// Stores `new` in the 8-byte word at `offset` of the LMR if it holds `expected`, with
/// one RDMA atomic; `*old` gets the previous value (equal to `expected` iff swapped).
/// Returns 0 or a negative errno, like `lite_fetch_add`.
///
/// # Safety
/// `lite` is a live handle; `old` is NULL or points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn lite_compare_swap(
    lite: *const LiteHandle,
    lh: u64,
    offset: u64,
    expected: u64,
    new: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        atomic_result(lite, old, |l| l.lmr_atomic(lh, offset, uapi::LITE_ATOMIC_COMPARE_SWAP, expected, new, None))
    }
}

/// Takes the distributed lock whose 8-byte word is at `offset` of the LMR (the word
/// starts at 0; only lock calls touch it), waiting in FIFO order while another
/// process holds it. Returns 0, or -EOWNERDEAD when the previous holder's node died
/// holding it (the caller holds the lock all the same), or a negative errno
/// (-EDEADLK: held by this thread already). Released by `lite_unlock` or when the
/// process exits.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_lock(lite: *const LiteHandle, lh: u64, offset: u64) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        let mut holder_died = false;
        let rc = with_lite(lite, |l| {
            holder_died = l.lmr_lock(lh, offset, uapi::LITE_LOCK_ACQUIRE, None)?;
            Ok(())
        });
        if rc == 0 && holder_died {
            -libc::EOWNERDEAD
        } else {
            rc
        }
    }
}

/// Releases a lock taken with `lite_lock`. Returns 0 or a negative errno (-EPERM:
/// not held by this thread; -ENOLCK: taken from it, its node was taken for dead).
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_unlock(lite: *const LiteHandle, lh: u64, offset: u64) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_lock(lh, offset, uapi::LITE_LOCK_RELEASE, None).map(drop)) }
}

/// Waits until `participants` callers (all passing the same number) reached the
/// barrier whose 8-byte counter is at `offset` of the LMR (starts at 0; only barrier
/// calls touch it). Returns 0, -ETIMEDOUT after `timeout_ms`, or a negative errno.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_barrier(
    lite: *const LiteHandle,
    lh: u64,
    offset: u64,
    participants: u32,
    timeout_ms: u32,
) -> c_int {
    let timeout = std::time::Duration::from_millis(timeout_ms.into());
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_barrier(lh, offset, participants, timeout, None)) }
}

/// Runs an atomic and stores the old value at `old` (if not NULL).
///
/// # Safety
/// As for `lite_fetch_add`.
unsafe fn atomic_result(lite: *const LiteHandle, old: *mut u64, f: impl FnOnce(&Lite) -> crate::Result<u64>) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        with_lite(lite, |l| {
            let value = f(l)?;
            if !old.is_null() {
                // SAFETY: the caller passes writable memory or NULL.
                *old = value;
            }
            Ok(())
        })
    }
}
