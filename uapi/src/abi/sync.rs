// SPDX-License-Identifier: GPL-2.0 OR MIT
//! Atomics and synchronization on an LMR's 8-byte words: fetch-and-add,
//! compare-and-swap, the distributed lock and the barrier.

/// `LiteAtomic::op`: add `operand` to the word; `old` is its value before.
pub const LITE_ATOMIC_FETCH_ADD: u32 = 1;
/// `LiteAtomic::op`: store `swap` if the word equals `operand`; `old` is its value
/// before (equal to `operand` when the swap happened).
pub const LITE_ATOMIC_COMPARE_SWAP: u32 = 2;

/// An RDMA atomic on the 8-byte word at `offset` of an LMR (`LITE_IOC_ATOMIC`),
/// performed by the holder's RNIC (through loopback when this node holds it), so it
/// is atomic against every node's LT atomics on the word, but not against plain
/// LT_write/memset/memcpy of it. Needs read and write permission; `offset` must be a
/// multiple of 8 (EINVAL otherwise).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteAtomic {
    pub lh: u64,
    pub offset: u64,
    /// `LITE_ATOMIC_*`.
    pub op: u32,
    pub reserved: u32,
    /// Value to add, or the expected value.
    pub operand: u64,
    /// New value of a compare-and-swap (0 for fetch-add).
    pub swap: u64,
    /// Out: the word's value before the operation.
    pub old: u64,
}

/// `_IOWR('L', 30, LiteAtomic)`
pub const LITE_IOC_ATOMIC: u32 = 0xC030_4C1E;

/// `LiteLock::op`: wait until this thread holds the lock (other threads of the
/// process wait like any caller).
pub const LITE_LOCK_ACQUIRE: u32 = 1;
/// `LiteLock::op`: release a lock this thread holds.
pub const LITE_LOCK_RELEASE: u32 = 2;

/// A distributed lock on the 8-byte word at `offset` of an LMR (`LITE_IOC_LOCK`).
/// The word must start at 0 and is then only touched by lock operations: free,
/// it is taken with one RDMA compare-and-swap; taken, the caller queues at the
/// word's holder node and is woken alone, in FIFO order. Locks a process holds are
/// released when it exits. Needs read and write permission.
///
/// Acquire fails with EOWNERDEAD when the previous holder's node died while it
/// held the lock: the caller holds the lock all the same (as with a robust
/// pthread mutex) and should check what the lock protects. EDEADLK: this thread
/// holds it already. Release fails with EPERM when this thread does not hold it,
/// ENOLCK when the lock was taken from it (its node was taken for dead).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteLock {
    pub lh: u64,
    pub offset: u64,
    /// `LITE_LOCK_*`.
    pub op: u32,
    pub reserved: u32,
}

/// `_IOW('L', 31, LiteLock)`
pub const LITE_IOC_LOCK: u32 = 0x4018_4C1F;

/// A barrier on the 8-byte counter at `offset` of an LMR (`LITE_IOC_BARRIER`):
/// returns once `participants` callers (any processes on any nodes, all passing
/// the same number) arrived in this round. Rounds follow each other on the same
/// counter, which must start at 0 and is only touched by barrier calls. ETIMEDOUT
/// after `timeout_ms` (the arrival still counts, so the counter's rounds are off
/// by one from then on: start a new counter). Needs read and write permission.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteBarrier {
    pub lh: u64,
    pub offset: u64,
    /// 1 to `LITE_BARRIER_MAX_PARTICIPANTS`.
    pub participants: u32,
    /// 1 to `LITE_BARRIER_MAX_TIMEOUT_MS`.
    pub timeout_ms: u32,
}

/// Most participants of one barrier.
pub const LITE_BARRIER_MAX_PARTICIPANTS: u32 = 4096;
/// Longest barrier wait a caller may ask for (one hour).
pub const LITE_BARRIER_MAX_TIMEOUT_MS: u32 = 3_600_000;

/// `_IOW('L', 32, LiteBarrier)`
pub const LITE_IOC_BARRIER: u32 = 0x4018_4C20;
