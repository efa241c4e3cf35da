// SPDX-License-Identifier: GPL-2.0
//! The kernel API (`include/lite/kapi.h`): what other modules call, as a
//! `struct lite_client` each, through the exported C thunks of `kapi.c`. A client
//! is what an open file of /dev/lite is without the file: the same services,
//! checks and release, with kernel memory where a process passes addresses.
//!
//! The callers are other kernel modules, so their handles, names, sizes and ids
//! are checked as a process's are; only their buffers' validity is theirs to keep
//! (see each function's Safety).

use crate::client::Client;
use crate::iobuf::{copy_exact, Sink, Source, Transfer};
use crate::lmr::{erange, MallocArgs};
use crate::node::Lite;
use crate::rpc::ring::MAX_MSG;
use crate::uapi::*;
use crate::verbs::DmaBuf;
use core::ffi::{c_char, c_int, c_long, c_void, CStr};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::types::ForeignOwnable;

/// A module's client. Its RPC calls go one at a time: a kernel caller waits on
/// its page's first slot (`RpcNode::kernel_rpc`).
pub(crate) struct KernelClient {
    client: Client,
    one_call: Pin<KBox<Mutex<()>>>,
}

/// # Safety
/// `client` came from `lite_rust_kapi_open` and was not closed.
unsafe fn client<'a>(client: *mut c_void) -> &'a KernelClient {
    // SAFETY: guaranteed by the caller; `close` is the only release.
    unsafe { <KBox<KernelClient> as ForeignOwnable>::borrow(client) }
}

fn errno(result: Result) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// An LMR name from C: NUL-terminated, at most `NAME_LEN - 1` bytes.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn lmr_name(name: *const c_char) -> Result<[u8; 64]> {
    if name.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    let mut out = [0u8; 64];
    if bytes.len() >= out.len() {
        return Err(EINVAL);
    }
    copy_exact(out.get_mut(..bytes.len()).ok_or(EINVAL)?, bytes)?;
    Ok(out)
}

/// `len` bytes at `buf`, NULL allowed when empty.
///
/// # Safety
/// `buf` is valid kernel memory for `len` bytes, not written while the slice lives.
unsafe fn input<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(EINVAL);
    }
    // SAFETY: guaranteed by the caller; not null, and the length is in range.
    Ok(unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// `len` writable bytes at `buf`, NULL allowed when empty.
///
/// # Safety
/// `buf` is valid kernel memory for `len` bytes, not accessed elsewhere while the
/// slice lives.
unsafe fn output<'a>(buf: *mut c_void, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(EINVAL);
    }
    // SAFETY: guaranteed by the caller; not null, and the length is in range.
    Ok(unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) })
}

/// Stores `value` through `out` when the caller asked for it.
///
/// # Safety
/// `out` is NULL or valid for a write of a `T`.
unsafe fn store<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: guaranteed by the caller.
        unsafe { out.write(value) };
    }
}

/// `lite_client_open`.
///
/// # Safety
/// `out` is valid for a write of a pointer.
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_open(out: *mut *mut c_void) -> c_int {
    let made = Client::new().and_then(|client| {
        let one_call = KBox::pin_init(new_mutex!((), "lite:kapi.one_call"), GFP_KERNEL)?;
        Ok(KBox::new(KernelClient { client, one_call }, GFP_KERNEL)?)
    });
    match made {
        Ok(kc) => {
            // SAFETY: guaranteed by the caller.
            unsafe { out.write(kc.into_foreign() as *mut c_void) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `lite_client_close`: everything the client holds is released, as at the last
/// close of a file.
///
/// # Safety
/// `ctx` as in [`Lite::from_ctx`]; `kc` came from `lite_rust_kapi_open` and is not used again.
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_close(ctx: *mut c_void, kc: *mut c_void) {
    // SAFETY: guaranteed by the caller: this is its one release.
    let kc = unsafe { <KBox<KernelClient> as ForeignOwnable>::from_foreign(kc) };
    // SAFETY: see `Lite::from_ctx`.
    kc.client.release(unsafe { Lite::from_ctx(ctx) });
}

/// `lite_node_info`: this node's id, the peers it has and its epoch; -ENOTCONN
/// before it joined.
///
/// # Safety
/// `ctx` as in [`Lite::from_ctx`]; each out pointer is NULL or valid for a write.
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_node_info(
    ctx: *mut c_void,
    node_id: *mut u32,
    nr_peers: *mut u32,
    epoch: *mut u64,
) -> c_int {
    // SAFETY: see `Lite::from_ctx`.
    let info = unsafe { Lite::from_ctx(ctx) }.net.info();
    if info.node_id == LITE_NODE_NONE {
        return crate::errno::ENOTCONN().to_errno();
    }
    // SAFETY: guaranteed by the caller.
    unsafe {
        store(node_id, info.node_id);
        store(nr_peers, info.nr_peers);
        store(epoch, info.epoch);
    }
    0
}

/// `lite_lmr_malloc`.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`]; `name` as in [`lmr_name`]; `lh` is
/// valid for a write.
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_malloc(
    ctx: *mut c_void,
    kc: *mut c_void,
    size: u64,
    nodes: u32,
    perm: u32,
    namespace: u32,
    name: *const c_char,
    lh: *mut u64,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    // SAFETY: guaranteed by the caller.
    errno(unsafe { lmr_name(name) }.and_then(|name| {
        let args = MallocArgs {
            size,
            nodes,
            perm,
            namespace,
            name,
        };
        let made = lite.lmr.malloc(&kc.client.lmrs, &args)?;
        // SAFETY: guaranteed by the caller.
        unsafe { store(lh, made) };
        Ok(())
    }))
}

/// `lite_lmr_map`.
///
/// # Safety
/// As for [`lite_rust_kapi_malloc`]; `size` is NULL or valid for a write.
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_map(
    ctx: *mut c_void,
    kc: *mut c_void,
    namespace: u32,
    name: *const c_char,
    perm: u32,
    lh: *mut u64,
    size: *mut u64,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    // SAFETY: guaranteed by the caller.
    errno(unsafe { lmr_name(name) }.and_then(|name| {
        let (handle, bytes) = lite.lmr.map(&kc.client.lmrs, namespace, &name, perm)?;
        // SAFETY: guaranteed by the caller.
        unsafe {
            store(lh, handle);
            store(size, bytes);
        }
        Ok(())
    }))
}

/// `lite_lmr_unmap` (`free` false) and `lite_lmr_free`.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`].
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_release(
    ctx: *mut c_void,
    kc: *mut c_void,
    lh: u64,
    free: c_int,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    let client = &kc.client;
    errno(if free != 0 {
        lite.lmr.free(&client.lmrs, lh)
    } else if lite.locks.held_through(&client.locks, lh) {
        Err(EBUSY)
    } else {
        lite.lmr.unmap(&client.lmrs, lh)
    })
}

/// `lite_lmr_read` (`write` 0) and `lite_lmr_write`.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`]; `buf` as in [`output`] (and only
/// read when `write`).
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_rw(
    ctx: *mut c_void,
    kc: *mut c_void,
    lh: u64,
    offset: u64,
    buf: *mut c_void,
    len: usize,
    write: c_int,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    let io = if write != 0 {
        // SAFETY: guaranteed by the caller.
        unsafe { input(buf, len) }.map(|data| Transfer::Write(Source::Kernel(data)))
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { output(buf, len) }.map(|out| Transfer::Read(Sink::Kernel(out)))
    };
    errno(io.and_then(|io| lite.lmr.rw(&kc.client.lmrs, lh, offset, io)))
}

/// `lite_lock` (`acquire` 1) and `lite_unlock`: the lock word at `offset`, held
/// by the calling thread.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`].
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_lock(
    ctx: *mut c_void,
    kc: *mut c_void,
    lh: u64,
    offset: u64,
    acquire: c_int,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    let client = &kc.client;
    errno(if acquire != 0 {
        lite.locks
            .lock_acquire(&client.lmrs, &client.locks, lh, offset)
    } else {
        lite.locks.lock_release(&client.locks, lh, offset)
    })
}

/// `lite_barrier`.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`].
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_barrier(
    ctx: *mut c_void,
    kc: *mut c_void,
    lh: u64,
    offset: u64,
    participants: u32,
    timeout_ms: u32,
) -> c_int {
    if !(1..=LITE_BARRIER_MAX_PARTICIPANTS).contains(&participants)
        || !(1..=LITE_BARRIER_MAX_TIMEOUT_MS).contains(&timeout_ms)
    {
        return EINVAL.to_errno();
    }
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    errno(
        lite.locks
            .barrier(&kc.client.lmrs, lh, offset, participants, timeout_ms),
    )
}

/// `lite_rpc_register` (`register` 1) and `lite_rpc_unregister`.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`].
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_rpc_register(
    ctx: *mut c_void,
    kc: *mut c_void,
    id: u32,
    register: c_int,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    errno(if register != 0 {
        lite.rpc.register(&kc.client.rpc, id)
    } else {
        lite.rpc.unregister(&kc.client.rpc, id)
    })
}

fn timeout_ok(timeout_ms: u32) -> Result {
    if (1..=LITE_RPC_MAX_TIMEOUT_MS).contains(&timeout_ms) {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

/// `lite_rpc_call`: the reply's length, or a negative errno.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`]; `input` as in [`input`] for
/// `in_len` bytes, `out` as in [`output`] for `out_cap` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn lite_rust_kapi_rpc_call(
    ctx: *mut c_void,
    kc: *mut c_void,
    node: u32,
    id: u32,
    request: *const c_void,
    in_len: usize,
    out: *mut c_void,
    out_cap: usize,
    timeout_ms: u32,
) -> c_long {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    let call = || -> Result<u64> {
        timeout_ok(timeout_ms)?;
        if in_len as u64 > MAX_MSG || out_cap as u64 > MAX_MSG {
            return Err(crate::errno::EMSGSIZE());
        }
        // SAFETY: guaranteed by the caller.
        let (request, out) = unsafe { (input(request, in_len)?, output(out, out_cap)?) };
        let reply = match out_cap {
            0 => None,
            cap => Some(Arc::new(
                DmaBuf::new(&lite.net.device()?, cap)?,
                GFP_KERNEL,
            )?),
        };
        let _one = kc.one_call.lock();
        let len = lite.rpc.kernel_rpc(
            &kc.client.rpc,
            node,
            id,
            request,
            reply.as_ref(),
            timeout_ms,
        )?;
        if let Some(reply) = &reply {
            let len = usize::try_from(len).map_err(|_| erange())?;
            reply.read(0, out.get_mut(..len).ok_or(EIO)?)?;
        }
        Ok(len)
    };
    match call() {
        Ok(len) => len as c_long,
        Err(e) => e.to_errno() as c_long,
    }
}

/// `lite_rpc_recv`: the request's length, or a negative errno; -EOVERFLOW, with
/// its length stored, leaves a request that does not fit queued.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`]; `buf` as in [`output`]; the out
/// pointers are NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn lite_rust_kapi_rpc_recv(
    ctx: *mut c_void,
    kc: *mut c_void,
    id: u32,
    buf: *mut c_void,
    len: usize,
    timeout_ms: u32,
    token: *mut u64,
    node: *mut u32,
    capacity: *mut u64,
) -> c_long {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    let recv = || -> Result<u64> {
        timeout_ok(timeout_ms)?;
        // SAFETY: guaranteed by the caller.
        let into = Sink::Kernel(unsafe { output(buf, len)? });
        let (got, delivered) = lite.rpc.recv(&kc.client.rpc, id, into, timeout_ms)?;
        // SAFETY: guaranteed by the caller.
        unsafe {
            store(token, got.token);
            store(node, got.node);
            store(capacity, got.capacity);
        }
        if delivered {
            Ok(got.len)
        } else {
            Err(crate::errno::EOVERFLOW())
        }
    };
    match recv() {
        Ok(len) => len as c_long,
        Err(e) => e.to_errno() as c_long,
    }
}

/// `lite_rpc_reply`.
///
/// # Safety
/// `ctx`, `kc` as in [`Lite::from_ctx`] and [`client`]; `buf` as in [`input`].
#[no_mangle]
pub(crate) unsafe extern "C" fn lite_rust_kapi_rpc_reply(
    ctx: *mut c_void,
    kc: *mut c_void,
    token: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let (lite, kc) = unsafe { (Lite::from_ctx(ctx), client(kc)) };
    // SAFETY: guaranteed by the caller.
    errno(
        unsafe { input(buf, len) }
            .and_then(|data| lite.rpc.reply(&kc.client.rpc, token, Source::Kernel(data))),
    )
}
