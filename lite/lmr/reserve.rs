// SPDX-License-Identifier: GPL-2.0
//! The zeroed reserve: chunks zeroed ahead of time (`LITE_IOC_RESERVE`) so that an
//! allocation does not wait for zeroing, refilled on the module's workqueue once
//! allocations pause; zeroing itself is spread over the online CPUs.

use crate::compat::now_ns;
use crate::verbs::{Device, DmaBuf};
use crate::workqueue::module_queue;
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::msecs_to_jiffies;

use super::holder::hold_limit;
use super::layout::CHUNK_MAX;
use super::LmrNode;

/// Milliseconds without allocations from the reserve before it is refilled.
pub(crate) const RESERVE_QUIET_MS: u64 = 100;

/// Chunks being zeroed by helpers on the module's workqueue.
#[pin_data]
struct Zeroing {
    #[pin]
    pub(crate) state: Mutex<ZeroingState>,
    #[pin]
    pub(crate) finished: CondVar,
}

struct ZeroingState {
    pub(crate) chunks: KVec<DmaBuf>,
    /// Helpers not finished yet.
    pub(crate) running: usize,
}

/// Allocates up to `count` zeroed chunks of `CHUNK_MAX` bytes, with the caller and
/// one helper per other online CPU each zeroing a share: zeroing is most of what a
/// large allocation costs. Fewer come back when memory runs short.
pub(crate) fn zero_chunks(dev: &Arc<Device>, count: usize) -> KVec<DmaBuf> {
    let mut mine = KVec::new();
    // SAFETY: reads a global counter.
    let cpus = unsafe { crate::ffi::lite_online_cpus() } as usize;
    let helpers = cpus.min(count).saturating_sub(1);
    let zeroing = (helpers > 0).then(|| {
        Arc::pin_init(
            pin_init!(Zeroing {
                state <- new_mutex!(ZeroingState { chunks: KVec::new(), running: 0 }, "lite:zeroing.state"),
                finished <- new_condvar!("lite:zeroing.finished"),
            }),
            GFP_KERNEL,
        )
    });
    let Some(Ok(zeroing)) = zeroing else {
        zero_into(dev, count, &mut mine);
        return mine;
    };
    let share = count / (helpers + 1);
    let mut handed_out = 0;
    for _ in 0..helpers {
        let (helper, dev) = (zeroing.clone(), dev.clone());
        zeroing.state.lock().running += 1;
        let spawned = module_queue().try_spawn(GFP_KERNEL, move || {
            let mut got = KVec::new();
            zero_into(&dev, share, &mut got);
            let mut state = helper.state.lock();
            for chunk in got.into_iter() {
                // A chunk that does not fit in the list is freed; the caller makes another.
                if state.chunks.push(chunk, GFP_KERNEL).is_err() {
                    break;
                }
            }
            state.running -= 1;
            helper.finished.notify_all();
        });
        match spawned {
            Ok(()) => handed_out += share,
            Err(_) => zeroing.state.lock().running -= 1,
        }
    }
    zero_into(dev, count - handed_out, &mut mine);
    let mut state = zeroing.state.lock();
    while state.running > 0 {
        zeroing.finished.wait(&mut state);
    }
    for chunk in core::mem::take(&mut state.chunks).into_iter() {
        if mine.push(chunk, GFP_KERNEL).is_err() {
            break;
        }
    }
    mine
}

/// Appends up to `count` zeroed chunks of `CHUNK_MAX` bytes to `chunks`; stops at the
/// first that cannot be had.
fn zero_into(dev: &Arc<Device>, count: usize, chunks: &mut KVec<DmaBuf>) {
    for _ in 0..count {
        let Ok(chunk) = DmaBuf::try_new(dev, CHUNK_MAX as usize) else {
            return;
        };
        if chunks.push(chunk, GFP_KERNEL).is_err() {
            return;
        }
    }
}

impl LmrNode {
    /// Keeps `bytes` (rounded up to whole chunks) of zeroed memory ready for `hold`,
    /// so that allocating does not wait for zeroing; 0 releases the reserve.
    pub(crate) fn set_reserve(&self, bytes: u64) -> Result {
        let chunks = bytes.div_ceil(CHUNK_MAX);
        if chunks > hold_limit() / CHUNK_MAX {
            return Err(EINVAL);
        }
        self.net.device()?;
        {
            let mut mem = self.mem.lock();
            mem.reserve_target = chunks as usize;
            mem.shrink_reserve();
        }
        self.refill_reserve_later();
        Ok(())
    }

    /// Queues a refill of the reserve unless it is full or one is queued already.
    pub(crate) fn refill_reserve_later(&self) {
        {
            let mut mem = self.mem.lock();
            if mem.refilling || mem.reserve.len() >= mem.reserve_target {
                return;
            }
            mem.refilling = true;
        }
        let lmr = self.arc();
        if module_queue()
            .try_spawn(GFP_KERNEL, move || while lmr.refill_reserve_chunk() {})
            .is_err()
        {
            self.mem.lock().refilling = false;
        }
    }

    /// Adds one zeroed chunk to the reserve; false once it is full, the node holds
    /// its limit (LMR memory and reserve together), or memory or the device is gone.
    /// One chunk per call, so that `hold` waits for at most one chunk's zeroing.
    fn refill_reserve_chunk(&self) -> bool {
        // Zeroing competes for the CPU with an allocation still taking chunks (and its
        // requests to other holders): start once takes have paused.
        {
            let mut mem = self.mem.lock();
            while (now_ns() - mem.reserve_taken_at) / 1_000_000 < RESERVE_QUIET_MS {
                let _ = self.reserve_quiet.wait_interruptible_timeout(
                    &mut mem,
                    msecs_to_jiffies(RESERVE_QUIET_MS as u32),
                );
            }
        }
        // Serialized with device removal, which empties the reserve.
        let _serial = self.alloc_lock.lock();
        let dev = self.net.device();
        {
            let mut mem = self.mem.lock();
            let bytes = mem.held_bytes + (mem.reserve.len() as u64 + 1) * CHUNK_MAX;
            mem.refilling =
                dev.is_ok() && mem.reserve.len() < mem.reserve_target && bytes <= hold_limit();
            if !mem.refilling {
                return false;
            }
        }
        let chunk = dev.and_then(|dev| DmaBuf::try_new(&dev, CHUNK_MAX as usize));
        let mut mem = self.mem.lock();
        let added = chunk.and_then(|chunk| Ok(mem.reserve.push(chunk, GFP_KERNEL)?));
        mem.refilling = added.is_ok();
        mem.refilling
    }

    /// The device is going away: its reserved chunks are freed and the target is
    /// forgotten (an operator sets it again for the next device).
    pub(crate) fn drop_reserve(&self) {
        let _serial = self.alloc_lock.lock();
        let mut mem = self.mem.lock();
        mem.reserve_target = 0;
        mem.shrink_reserve();
    }
}
