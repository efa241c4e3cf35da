// SPDX-License-Identifier: GPL-2.0
//! /dev/lite: per-open state, the shared page and ioctl dispatch. Every argument
//! comes from an untrusted process: sizes, reserved fields and ranges are checked
//! here before anything reaches the cluster code.

use crate::cluster::Lite;
use crate::ffi;
use crate::memory::{FileLmrs, MallocArgs};
use crate::uapi::*;
use core::mem::size_of;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Mutex};
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

macro_rules! plain_abi_types {
    ($($t:ty),*) => {$(
        // SAFETY: `repr(C)` structs of integers and integer arrays with explicit padding
        // (their sizes are asserted in uapi): every bit pattern is valid, no byte is padding.
        unsafe impl FromBytes for $t {}
        // SAFETY: as above, no uninitialized padding can leak to user space.
        unsafe impl AsBytes for $t {}
    )*};
}
plain_abi_types!(LiteInfo, LiteJoin, LiteConnInfo, LitePeerPrepare, LitePeerConnect,
                 LitePeerDown, LitePeerStatus, LitePeerList, LitePing, LiteMalloc, LiteMap,
                 LiteHandle, LiteGrant, LiteRw, LiteMemset, LiteMemcpy, LiteLmrStat, LiteMemStat, LiteRegister);

/// Longest wait for one ping reply that a caller may ask for.
const PING_MAX_TIMEOUT_MS: u32 = 60_000;

/// State of one open file of /dev/lite.
pub(crate) struct OpenFile {
    shared: NonNull<LiteSharedPage>,
    /// Handles of this open file and the LMRs it masters.
    lmrs: Pin<KBox<Mutex<FileLmrs>>>,
}

// SAFETY: the shared page is only accessed through atomics or at creation.
unsafe impl Send for OpenFile {}
// SAFETY: see `Send`.
unsafe impl Sync for OpenFile {}

impl OpenFile {
    pub(crate) fn new() -> Result<KBox<OpenFile>> {
        let lmrs = KBox::pin_init(new_mutex!(FileLmrs::new(), "lite:file.lmrs"), GFP_KERNEL)?;
        // SAFETY: plain page allocation; NULL on failure.
        let page = unsafe { ffi::lite_shared_page_alloc() };
        let shared = NonNull::new(page.cast::<LiteSharedPage>()).ok_or(ENOMEM)?;
        // SAFETY: a fresh zeroed page, not yet visible to user space, large enough for the header.
        unsafe {
            (*shared.as_ptr()).magic = LITE_SHARED_MAGIC;
            (*shared.as_ptr()).abi_version = LITE_ABI_VERSION;
        }
        match KBox::new(OpenFile { shared, lmrs }, GFP_KERNEL) {
            Ok(file) => Ok(file),
            Err(e) => {
                // SAFETY: the page was allocated above and is not mapped anywhere.
                unsafe { ffi::lite_shared_page_free(page) };
                Err(e.into())
            }
        }
    }

    /// Last close: every handle goes, and the LMRs this file mastered are freed.
    pub(crate) fn release(&self, lite: &Lite) {
        lite.file_release(&self.lmrs);
    }

    /// Kernel address of the shared page, for mmap.
    pub(crate) fn shared_page(&self) -> *mut core::ffi::c_void {
        self.shared.as_ptr().cast()
    }

    fn count_crossing(&self) {
        // SAFETY: the page lives as long as `self`; `ioctl_count` is 8-byte aligned at
        // offset 8. The process may scribble on it too: it is only its own statistic.
        let count = unsafe { AtomicU64::from_ptr(core::ptr::addr_of_mut!((*self.shared.as_ptr()).ioctl_count)) };
        count.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn ioctl(&self, lite: &Lite, cmd: u32, arg: usize) -> Result<isize> {
        self.count_crossing();
        match cmd {
            LITE_IOC_INFO => write_out(arg, &lite.info()),
            LITE_IOC_JOIN => {
                require_admin()?;
                let join: LiteJoin = read_in(arg)?;
                reserved_zero(&[join.reserved])?;
                lite.join(join.node_id, join.epoch)
            }
            LITE_IOC_LEAVE => {
                require_admin()?;
                lite.leave();
                Ok(())
            }
            LITE_IOC_PEER_PREPARE => {
                require_admin()?;
                let mut prep: LitePeerPrepare = read_in(arg)?;
                reserved_zero(&[prep.reserved])?;
                let (local, created) = lite.prepare_peer(prep.peer_id, prep.peer_epoch)?;
                prep.local = local;
                prep.created = created as u32;
                write_out(arg, &prep)
            }
            LITE_IOC_PEER_CONNECT => {
                require_admin()?;
                let conn: LitePeerConnect = read_in(arg)?;
                reserved_zero(&[conn.reserved])?;
                lite.connect_peer(conn.peer_id, conn.peer_epoch, &conn.remote)
            }
            LITE_IOC_PEER_DOWN => {
                require_admin()?;
                let down: LitePeerDown = read_in(arg)?;
                reserved_zero(&[down.reserved])?;
                lite.peer_down(down.peer_id)
            }
            LITE_IOC_PEERS => {
                let mut list: LitePeerList = read_in(arg)?;
                let peers = lite.peers()?;
                let shown = peers.len().min(list.capacity as usize);
                let mut out = UserSlice::new(list.entries as usize, shown * size_of::<LitePeerStatus>()).writer();
                for status in &peers[..shown] {
                    out.write(status)?;
                }
                list.count = peers.len() as u32;
                write_out(arg, &list)
            }
            LITE_IOC_PING => {
                let ping: LitePing = read_in(arg)?;
                if ping.payload > LITE_PING_MAX_PAYLOAD {
                    return Err(EINVAL);
                }
                if ping.count == 0 || ping.count > LITE_PING_MAX_COUNT {
                    return Err(EINVAL);
                }
                if ping.timeout_ms == 0 || ping.timeout_ms > PING_MAX_TIMEOUT_MS {
                    return Err(EINVAL);
                }
                let out = UserSlice::new(ping.rtt_ns as usize, ping.count as usize * size_of::<u64>()).writer();
                lite.ping(ping.node, ping.count, ping.timeout_ms, ping.payload as usize, out)
            }
            LITE_IOC_MALLOC => {
                let mut req: LiteMalloc = read_in(arg)?;
                reserved_zero(&[req.reserved])?;
                let args = MallocArgs {
                    size: req.size,
                    nodes: req.nodes,
                    perm: req.perm,
                    namespace: req.namespace,
                    name: req.name,
                };
                req.lh = lite.lmr_malloc(&self.lmrs, &args)?;
                write_out(arg, &req)
            }
            LITE_IOC_REGISTER => {
                let mut req: LiteRegister = read_in(arg)?;
                let buf = usize::try_from(req.buf).map_err(|_| EFAULT)?;
                let args = MallocArgs { size: req.len, nodes: 0, perm: req.perm, namespace: req.namespace, name: req.name };
                req.lh = lite.lmr_register(&self.lmrs, buf, &args)?;
                write_out(arg, &req)
            }
            LITE_IOC_MAP => {
                let mut req: LiteMap = read_in(arg)?;
                (req.lh, req.size) = lite.lmr_map(&self.lmrs, req.namespace, &req.name, req.perm)?;
                write_out(arg, &req)
            }
            LITE_IOC_UNMAP => lite.lmr_unmap(&self.lmrs, read_in::<LiteHandle>(arg)?.lh),
            LITE_IOC_FREE => lite.lmr_free(&self.lmrs, read_in::<LiteHandle>(arg)?.lh),
            LITE_IOC_GRANT => {
                let req: LiteGrant = read_in(arg)?;
                lite.lmr_grant(&self.lmrs, req.lh, req.node, req.perm)
            }
            LITE_IOC_READ | LITE_IOC_WRITE => {
                let req: LiteRw = read_in(arg)?;
                let buf = usize::try_from(req.buf).map_err(|_| EFAULT)?;
                lite.lmr_rw(&self.lmrs, req.lh, req.offset, buf, req.len, cmd == LITE_IOC_WRITE)
            }
            LITE_IOC_MEMSET => {
                let req: LiteMemset = read_in(arg)?;
                reserved_zero(&[req.reserved])?;
                lite.lmr_memset(&self.lmrs, req.lh, req.offset, req.len, req.value)
            }
            LITE_IOC_MEMCPY => {
                let req: LiteMemcpy = read_in(arg)?;
                lite.lmr_memcpy(&self.lmrs, req.dst_lh, req.dst_offset, req.src_lh, req.src_offset, req.len)
            }
            LITE_IOC_MEM_STAT => write_out(arg, &lite.mem_stat()),
            LITE_IOC_LMR_STAT => {
                let req: LiteLmrStat = read_in(arg)?;
                write_out(arg, &lite.lmr_stat(&self.lmrs, req.lh)?)
            }
            _ => Err(ENOTTY),
        }
        .map(|()| 0)
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; a process still mapping it holds its own page reference.
        unsafe { ffi::lite_shared_page_free(self.shared.as_ptr().cast()) };
    }
}

fn read_in<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(arg, size_of::<T>()).reader().read()
}

fn write_out<T: AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(arg, size_of::<T>()).writer().write(value)
}

/// Reserved fields must be zero so that they can gain a meaning later.
fn reserved_zero(fields: &[u32]) -> Result {
    if fields.iter().all(|&f| f == 0) {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

/// Membership changes are for the cluster agent, not for applications.
fn require_admin() -> Result {
    // SAFETY: `capable()` only inspects the current task's credentials.
    if unsafe { ffi::lite_capable_net_admin() } != 0 {
        Ok(())
    } else {
        Err(EPERM)
    }
}
