// SPDX-License-Identifier: GPL-2.0
//! The locks family of /dev/lite ioctls: LT_lock, LT_unlock and LT_barrier.

use crate::lmr::FileLmrs;
use crate::locks::FileLocks;
use crate::node::Lite;
use crate::uapi::*;
use crate::uarg::{read_in, reserved_zero};
use kernel::prelude::*;
use kernel::sync::Mutex;

/// Serves the locks ioctl `cmd` with its argument at `arg`; ENOTTY for any other.
pub(super) fn ioctl(
    lite: &Lite,
    lmrs: &Mutex<FileLmrs>,
    locks: &Mutex<FileLocks>,
    cmd: u32,
    arg: usize,
) -> Result {
    match cmd {
        LITE_IOC_LOCK => {
            let req: LiteLock = read_in(arg)?;
            reserved_zero(&[req.reserved])?;
            match req.op {
                LITE_LOCK_ACQUIRE => lite.locks.lock_acquire(lmrs, locks, req.lh, req.offset),
                LITE_LOCK_RELEASE => lite.locks.lock_release(locks, req.lh, req.offset),
                _ => Err(EINVAL),
            }
        }
        LITE_IOC_BARRIER => {
            let req: LiteBarrier = read_in(arg)?;
            if !(1..=LITE_BARRIER_MAX_PARTICIPANTS).contains(&req.participants)
                || !(1..=LITE_BARRIER_MAX_TIMEOUT_MS).contains(&req.timeout_ms)
            {
                return Err(EINVAL);
            }
            lite.locks
                .barrier(lmrs, req.lh, req.offset, req.participants, req.timeout_ms)
        }
        _ => Err(ENOTTY),
    }
}
