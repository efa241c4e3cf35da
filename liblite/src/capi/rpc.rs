//! RPC and messages from C: calls, multicast calls and one-way messages, and a
//! server's side: register, receive, reply.

use super::{code, handle, with_lite, LiteHandle, EINVAL};
use crate::Error;
use std::ffi::{c_int, c_void};
use std::time::Duration;

/// A request or message received by a server (`lite_recv_rpc`, `lite_reply_recv`).
#[repr(C)]
pub struct LiteIncoming {
    /// Payload bytes, at the start of the receive buffer.
    pub len: u64,
    /// Reply token for `lite_reply_rpc`; 0 for a one-way message.
    pub token: u64,
    /// The caller's node.
    pub node: u32,
    pub reserved: u32,
    /// The most reply bytes the caller takes.
    pub reply_capacity: u64,
}

/// # Safety
/// `ptr` is NULL with `len` 0, or valid for `len` bytes.
unsafe fn bytes<'a>(ptr: *const c_void, len: u64) -> Result<&'a [u8], c_int> {
    match (ptr.is_null(), usize::try_from(len)) {
        (_, Ok(0)) => Ok(&[]),
        // SAFETY: non-NULL and valid for `len` bytes (the caller's contract).
        (false, Ok(len)) => Ok(unsafe { std::slice::from_raw_parts(ptr.cast(), len) }),
        _ => Err(EINVAL),
    }
}

/// # Safety
/// As `bytes`, writable.
unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: u64) -> Result<&'a mut [u8], c_int> {
    match (ptr.is_null(), usize::try_from(len)) {
        (_, Ok(0)) => Ok(&mut []),
        // SAFETY: non-NULL and valid, writable, for `len` bytes (the caller's contract).
        (false, Ok(len)) => Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast(), len) }),
        _ => Err(EINVAL),
    }
}

fn incoming(out: *mut LiteIncoming, got: crate::Incoming) -> c_int {
    if !out.is_null() {
        let value = LiteIncoming {
            len: got.len as u64,
            token: got.reply.map_or(0, |t| t.0),
            node: got.node,
            reserved: 0,
            reply_capacity: got.reply_capacity as u64,
        };
        // SAFETY: checked non-NULL; the caller passes a writable struct.
        unsafe { out.write(value) };
    }
    0
}

/// Calls RPC `id` at `node` with `in_len` bytes at `in`; the reply lands in `out`
/// (`out_cap` bytes) and its length in `*reply_len` (also the true size when it
/// did not fit: -EOVERFLOW). Returns 0 or a negative errno: -ECONNREFUSED no
/// server, -ECONNRESET the server exited, -ETIMEDOUT, -EHOSTDOWN, -EMSGSIZE.
///
/// # Safety
/// `lite` is a live handle; `in`/`out` are valid for their lengths (or NULL with 0);
/// `reply_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lite_rpc(
    lite: *const LiteHandle,
    node: u32,
    id: u32,
    input: *const c_void,
    in_len: u64,
    out: *mut c_void,
    out_cap: u64,
    reply_len: *mut u64,
    timeout_ms: u32,
) -> c_int {
    // SAFETY: forwarded from the caller.
    let (lite, input, out) = match unsafe { (handle(lite), bytes(input, in_len), bytes_mut(out, out_cap)) } {
        (Ok(l), Ok(i), Ok(o)) => (l, i, o),
        _ => return EINVAL,
    };
    let (rc, len) = match lite.rpc(node, id, input, out, Duration::from_millis(timeout_ms.into())) {
        Ok(len) => (0, len as u64),
        Err(e @ Error::BufferTooSmall { size, .. }) => (code(&e), size),
        Err(e) => (code(&e), 0),
    };
    if !reply_len.is_null() {
        // SAFETY: checked non-NULL; the caller passes a writable u64.
        unsafe { *reply_len = len };
    }
    rc
}

/// Multicast RPC: the same request to `count` nodes at once; node i's reply lands
/// in `outs[i]` (`out_cap` bytes each) and `results[i]` is its length or a
/// negative errno. Returns 0, or a negative errno when the arguments are bad.
///
/// # Safety
/// `nodes`, `outs` and `results` hold `count` entries; every `outs[i]` is valid for
/// `out_cap` bytes; `input` for `in_len`.
#[no_mangle]
pub unsafe extern "C" fn lite_multicast_rpc(
    lite: *const LiteHandle,
    nodes: *const u32,
    count: u32,
    id: u32,
    input: *const c_void,
    in_len: u64,
    outs: *const *mut c_void,
    out_cap: u64,
    results: *mut i64,
    timeout_ms: u32,
) -> c_int {
    if nodes.is_null() || outs.is_null() || results.is_null() || count == 0 {
        return EINVAL;
    }
    // SAFETY: forwarded from the caller.
    let (lite, input) = match unsafe { (handle(lite), bytes(input, in_len)) } {
        (Ok(l), Ok(i)) => (l, i),
        _ => return EINVAL,
    };
    // SAFETY: the caller passes `count` node ids and output pointers.
    let (nodes, out_ptrs) = unsafe {
        (std::slice::from_raw_parts(nodes, count as usize), std::slice::from_raw_parts(outs, count as usize))
    };
    let mut buffers: Vec<Vec<u8>> = vec![vec![0u8; out_cap as usize]; count as usize];
    let outcomes = lite.multicast_rpc(nodes, id, input, &mut buffers, Duration::from_millis(timeout_ms.into()));
    for (i, (outcome, buffer)) in outcomes.into_iter().zip(buffers.iter()).enumerate() {
        let result = match outcome {
            Ok(len) => {
                if !out_ptrs[i].is_null() {
                    // SAFETY: the caller's buffer i holds `out_cap >= len` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(buffer.as_ptr(), out_ptrs[i].cast::<u8>(), len) };
                }
                len as i64
            }
            Err(e) => i64::from(code(&e)),
        };
        // SAFETY: `results` holds `count` entries.
        unsafe { *results.add(i) = result };
    }
    0
}

/// Sends a one-way message to RPC `id` at `node`; returns once it is in the
/// server's ring. Returns 0 or a negative errno.
///
/// # Safety
/// `lite` is a live handle; `msg` is valid for `len` bytes (or NULL with 0).
#[no_mangle]
pub unsafe extern "C" fn lite_send(
    lite: *const LiteHandle,
    node: u32,
    id: u32,
    msg: *const c_void,
    len: u64,
    timeout_ms: u32,
) -> c_int {
    // SAFETY: forwarded from the caller.
    let msg = match unsafe { bytes(msg, len) } {
        Ok(m) => m,
        Err(e) => return e,
    };
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.send(node, id, msg, Duration::from_millis(timeout_ms.into()))) }
}

/// This process serves RPC `id` on this node (-EEXIST: it has a server already).
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_register_rpc(lite: *const LiteHandle, id: u32) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.register_rpc(id)) }
}

/// Stops serving `id`; its waiting callers fail with -ECONNRESET.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_unregister_rpc(lite: *const LiteHandle, id: u32) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.unregister_rpc(id)) }
}

/// Receives the next request or message for `id` into `buf` (`cap` bytes),
/// described in `*got`. -EOVERFLOW: it does not fit (`got->len` tells its size; it
/// stays queued). -ETIMEDOUT: nothing within `timeout_ms`.
///
/// # Safety
/// `lite` is a live handle; `buf` is valid for `cap` bytes; `got` is writable.
#[no_mangle]
pub unsafe extern "C" fn lite_recv_rpc(
    lite: *const LiteHandle,
    id: u32,
    buf: *mut c_void,
    cap: u64,
    timeout_ms: u32,
    got: *mut LiteIncoming,
) -> c_int {
    // SAFETY: forwarded from the caller.
    let (lite, buf) = match unsafe { (handle(lite), bytes_mut(buf, cap)) } {
        (Ok(l), Ok(b)) => (l, b),
        _ => return EINVAL,
    };
    match lite.recv_rpc(id, buf, Duration::from_millis(timeout_ms.into())) {
        Ok(i) => incoming(got, i),
        Err(e) => {
            if let (Error::BufferTooSmall { size, .. }, false) = (&e, got.is_null()) {
                // SAFETY: checked non-NULL; writable per the caller.
                unsafe { (*got).len = *size };
            }
            code(&e)
        }
    }
}

/// Answers the request of `token` with `len` bytes at `reply`. Returns 0 or a
/// negative errno (-EBADF: unknown or already answered token).
///
/// # Safety
/// `lite` is a live handle; `reply` is valid for `len` bytes (or NULL with 0).
#[no_mangle]
pub unsafe extern "C" fn lite_reply_rpc(lite: *const LiteHandle, token: u64, reply: *const c_void, len: u64) -> c_int {
    // SAFETY: forwarded from the caller.
    let reply = match unsafe { bytes(reply, len) } {
        Ok(r) => r,
        Err(e) => return e,
    };
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.reply_rpc(crate::ReplyToken(token), reply)) }
}

/// `lite_reply_rpc`, then `lite_recv_rpc`, in one kernel crossing.
///
/// # Safety
/// As for `lite_reply_rpc` and `lite_recv_rpc`.
#[no_mangle]
pub unsafe extern "C" fn lite_reply_recv(
    lite: *const LiteHandle,
    token: u64,
    reply: *const c_void,
    reply_len: u64,
    id: u32,
    buf: *mut c_void,
    cap: u64,
    timeout_ms: u32,
    got: *mut LiteIncoming,
) -> c_int {
    // SAFETY: forwarded from the caller.
    let (lite, reply, buf) = match unsafe { (handle(lite), bytes(reply, reply_len), bytes_mut(buf, cap)) } {
        (Ok(l), Ok(r), Ok(b)) => (l, r, b),
        _ => return EINVAL,
    };
    match lite.reply_and_recv(crate::ReplyToken(token), reply, id, buf, Duration::from_millis(timeout_ms.into())) {
        Ok(i) => incoming(got, i),
        Err(e) => code(&e),
    }
}
