// SPDX-License-Identifier: GPL-2.0
//! Lock and barrier request bodies and their outcomes.

use super::message::{Body, Reader, Writer};

/// `LockReq::op`: queue the caller (`value`: its holder word) for the lock.
pub(crate) const LOCK_OP_WAIT: u32 = 1;
/// `LockReq::op`: the holder (`value`) releases a lock others wait for.
pub(crate) const LOCK_OP_RELEASE: u32 = 2;
/// `LockReq::op`: wake the caller once the barrier counter reaches `value`.
pub(crate) const BARRIER_OP_WAIT: u32 = 3;
/// `LockReq::op`: the counter reached `value`: wake that round's waiters.
pub(crate) const BARRIER_OP_DONE: u32 = 4;

/// Outcomes of a [`LockReq`] and in a [`LockWake`] (negative: an errno).
pub(crate) const LOCK_QUEUED: u32 = 0;
pub(crate) const LOCK_TAKEN: u32 = 1;
/// Taken over from a holder whose node died.
pub(crate) const LOCK_TAKEN_HOLDER_DIED: u32 = 2;
pub(crate) const BARRIER_PASSED: u32 = 3;
/// A release or barrier-done request was carried out.
pub(crate) const LOCK_DONE: u32 = 4;

/// `LockReq`: operation `op` on the word at `addr` held for LMR (`master`, `id`);
/// `token` names the waiting caller at the sending node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LockReq {
    pub(crate) master: u32,
    pub(crate) op: u32,
    pub(crate) id: u64,
    pub(crate) addr: u64,
    pub(crate) value: u64,
    pub(crate) token: u32,
}

/// `LockWake`: the outcome (a `LOCK_*` outcome or a negative errno) for the
/// receiving node's waiter `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LockWake {
    pub(crate) token: u32,
    pub(crate) outcome: i32,
}

impl Body for LockReq {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.master)?
            .u32(self.op)?
            .u64(self.id)?
            .u64(self.addr)?
            .u64(self.value)?
            .u32(self.token)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(LockReq {
            master: r.u32()?,
            op: r.u32()?,
            id: r.u64()?,
            addr: r.u64()?,
            value: r.u64()?,
            token: r.u32()?,
        })
    }
}

impl Body for LockWake {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.token)?.u32(self.outcome as u32).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(LockWake {
            token: r.u32()?,
            outcome: r.u32()? as i32,
        })
    }
}
