// SPDX-License-Identifier: GPL-2.0
//! Arguments from user space: every ioctl argument is copied in and out of the
//! caller's memory with these, and comes from an untrusted process: sizes,
//! reserved fields and ranges are checked before anything reaches the services.

use crate::compat::{user_slice, AsBytes, FromBytes};
use crate::ffi;
use crate::uapi::*;
use core::mem::size_of;
use kernel::prelude::*;

macro_rules! plain_abi_types {
    ($($t:ty),*) => {$(
        // SAFETY: `repr(C)` structs of integers and integer arrays with explicit padding
        // (their sizes are asserted in uapi): every bit pattern is valid, no byte is padding.
        unsafe impl FromBytes for $t {}
        // SAFETY: as above, no uninitialized padding can leak to user space.
        unsafe impl AsBytes for $t {}
    )*};
}
plain_abi_types!(
    LiteInfo,
    LiteDevCaps,
    LiteJoin,
    LiteConnInfo,
    LitePeerPrepare,
    LitePeerConnect,
    LitePeerDown,
    LitePeerStatus,
    LitePeerList,
    LitePing,
    LiteMalloc,
    LiteMap,
    LiteHandle,
    LiteGrant,
    LiteRw,
    LiteMemset,
    LiteMemcpy,
    LiteLmrStat,
    LiteMemStat,
    LiteRegister,
    LiteReserve,
    LiteRpcId,
    LiteRpcCall,
    LiteWait,
    LiteRpcRecv,
    LiteRpcReply,
    LiteRpcReplyRecv,
    LiteRpcBench,
    LiteRpcStat,
    LiteAtomic,
    LiteLock,
    LiteBarrier,
    LiteQos,
    LiteClassRule,
    LiteClassRules,
    LiteClassSelf,
    LiteClassStat,
    LiteQosStat,
    LiteReach
);

pub(crate) fn read_in<T: FromBytes>(arg: usize) -> Result<T> {
    user_slice(arg, size_of::<T>()).reader().read()
}

pub(crate) fn write_out<T: AsBytes>(arg: usize, value: &T) -> Result {
    user_slice(arg, size_of::<T>()).writer().write(value)
}

/// Reserved fields must be zero so that they can gain a meaning later.
pub(crate) fn reserved_zero(fields: &[u32]) -> Result {
    if fields.iter().all(|&f| f == 0) {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

/// Membership, priority rules and the reserve are for operators, not for applications.
pub(crate) fn require_admin() -> Result {
    // SAFETY: `capable()` only inspects the current task's credentials.
    if unsafe { ffi::lite_capable_net_admin() } != 0 {
        Ok(())
    } else {
        Err(EPERM)
    }
}
