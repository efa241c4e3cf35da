//! LITE memory regions from C: register, malloc, map, unmap, free and grant, and
//! the one-sided read, write, memset and memcpy (memmove).

use super::{with_lite, LiteHandle, EINVAL};
use std::ffi::{c_char, c_int, c_void, CStr};

/// Turns `len` bytes at `buf` of this process into an LMR held by this node, named
/// `name` in namespace `ns`, mappable by any node with `perm`; stores the master
/// handle in `*lh`. The pages stay pinned until the LMR is freed or the process
/// exits. Returns 0 or a negative errno (-EFAULT: not writable memory of the process,
/// -ENOMEM: more than `LITE_REGISTER_MAX_SIZE`).
///
/// # Safety
/// `lite` is a live handle; `name` is a NUL-terminated string; `lh` is writable; the
/// buffer stays mapped while the LMR exists and is shared with the cluster.
#[no_mangle]
pub unsafe extern "C" fn lite_register(
    lite: *const LiteHandle,
    buf: *mut c_void,
    len: u64,
    perm: u32,
    ns: u32,
    name: *const c_char,
    lh: *mut u64,
) -> c_int {
    if name.is_null() || lh.is_null() {
        return EINVAL;
    }
    // SAFETY: a NUL-terminated string, guaranteed by the caller.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    // SAFETY: forwarded from the caller.
    unsafe {
        with_lite(lite, |l| {
            let handle = l.lmr_register(buf as u64, len, perm, ns, name)?;
            // SAFETY: checked non-NULL; the caller guarantees it is writable.
            *lh = handle;
            Ok(())
        })
    }
}

/// Allocates an LMR of `size` bytes named `name` (1-63 bytes) in namespace `ns`, spread
/// evenly over the nodes in `nodes_mask` (bit n: node n; 0: this node). Any node may
/// map it with `perm` (`LITE_PERM_*`). Stores the master handle in `*lh`.
/// Returns 0 or a negative errno (-EEXIST: name taken, -ENOMEM: too big).
///
/// # Safety
/// `lite` is a live handle; `name` is a NUL-terminated string; `lh` is writable.
#[no_mangle]
pub unsafe extern "C" fn lite_malloc(
    lite: *const LiteHandle,
    size: u64,
    nodes_mask: u32,
    perm: u32,
    ns: u32,
    name: *const c_char,
    lh: *mut u64,
) -> c_int {
    if name.is_null() || lh.is_null() {
        return EINVAL;
    }
    // SAFETY: a NUL-terminated string, guaranteed by the caller.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    // SAFETY: forwarded from the caller.
    unsafe {
        with_lite(lite, |l| {
            let handle = l.lmr_malloc(size, nodes_mask, perm, ns, name)?;
            // SAFETY: checked non-NULL; the caller guarantees it is writable.
            *lh = handle;
            Ok(())
        })
    }
}

/// Maps the LMR `name` in namespace `ns` with `perm`: stores a new handle in `*lh` and,
/// if `size` is not NULL, its size in `*size`. Returns 0 or a negative errno
/// (-ENOENT: no such name, -EACCES: the master refuses `perm`).
///
/// # Safety
/// `lite` is a live handle; `name` is a NUL-terminated string; `lh` is writable;
/// `size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lite_map(
    lite: *const LiteHandle,
    name: *const c_char,
    perm: u32,
    ns: u32,
    lh: *mut u64,
    size: *mut u64,
) -> c_int {
    if name.is_null() || lh.is_null() {
        return EINVAL;
    }
    // SAFETY: a NUL-terminated string, guaranteed by the caller.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    // SAFETY: forwarded from the caller.
    unsafe {
        with_lite(lite, |l| {
            let (handle, bytes) = l.lmr_map(name, perm, ns)?;
            // SAFETY: `lh` checked non-NULL, `size` checked below; both writable per the caller.
            *lh = handle;
            if !size.is_null() {
                *size = bytes;
            }
            Ok(())
        })
    }
}

/// Releases the handle `lh` (the LMR lives on). Returns 0 or a negative errno.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_unmap(lite: *const LiteHandle, lh: u64) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_unmap(lh)) }
}

/// Master only: frees the LMR everywhere and releases `lh`; other handles on it then
/// fail with -EIDRM. Returns 0 or a negative errno (-EPERM: not the master).
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_free(lite: *const LiteHandle, lh: u64) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_free(lh)) }
}

/// Master only: from now on `node` (or every node, `LITE_NODE_ANY`) may map the LMR
/// with `perm`; existing handles keep theirs. Returns 0 or a negative errno.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_grant(lite: *const LiteHandle, lh: u64, node: u32, perm: u32) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_grant(lh, node, perm)) }
}

/// Reads `len` bytes of the LMR at `offset` into `buf` (zero-copy). Returns 0 or a
/// negative errno (-ERANGE: beyond the LMR, -EFAULT: bad buffer).
///
/// # Safety
/// `lite` is a live handle. `buf` is checked by the kernel, not dereferenced here.
#[no_mangle]
pub unsafe extern "C" fn lite_read(lite: *const LiteHandle, lh: u64, offset: u64, buf: *mut c_void, len: u64) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_rw(false, lh, offset, buf as u64, len, None)) }
}

/// Writes `len` bytes from `buf` into the LMR at `offset`; returns once they are at
/// the holders. Returns 0 or a negative errno.
///
/// # Safety
/// `lite` is a live handle. `buf` is checked by the kernel, not dereferenced here.
#[no_mangle]
pub unsafe extern "C" fn lite_write(
    lite: *const LiteHandle,
    lh: u64,
    offset: u64,
    buf: *const c_void,
    len: u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_rw(true, lh, offset, buf as u64, len, None)) }
}

/// Sets `len` bytes of the LMR at `offset` to `value` (0-255), at the holders.
/// Returns 0 or a negative errno.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_memset(lite: *const LiteHandle, lh: u64, offset: u64, len: u64, value: c_int) -> c_int {
    let value = u32::try_from(value).unwrap_or(u32::MAX);
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_memset(lh, offset, len, value, None)) }
}

/// Copies `len` bytes from LMR `src_lh` at `src_offset` to `dst_lh` at `dst_offset`,
/// at the holders. The two may be the same LMR and the ranges may overlap (memmove
/// semantics). Needs read on `src_lh` and write on `dst_lh`. Returns 0 or a negative errno.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_memcpy(
    lite: *const LiteHandle,
    dst_lh: u64,
    dst_offset: u64,
    src_lh: u64,
    src_offset: u64,
    len: u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { with_lite(lite, |l| l.lmr_memcpy((dst_lh, dst_offset, None), (src_lh, src_offset, None), len)) }
}

/// `lite_memcpy` under the name C programmers look for when the ranges overlap
/// (both have memmove semantics).
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_memmove(
    lite: *const LiteHandle,
    dst_lh: u64,
    dst_offset: u64,
    src_lh: u64,
    src_offset: u64,
    len: u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { lite_memcpy(lite, dst_lh, dst_offset, src_lh, src_offset, len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_arguments_are_einval() {
        let mut lh = 0u64;
        // SAFETY: NULL handles and names are what is being tested; nothing is dereferenced.
        unsafe {
            assert_eq!(lite_malloc(std::ptr::null(), 1, 0, 3, 0, c"n".as_ptr(), &mut lh), EINVAL);
            assert_eq!(lite_malloc(std::ptr::null(), 1, 0, 3, 0, std::ptr::null(), &mut lh), EINVAL);
            assert_eq!(
                lite_map(std::ptr::null(), c"n".as_ptr(), 1, 0, std::ptr::null_mut(), std::ptr::null_mut()),
                EINVAL
            );
            assert_eq!(lite_read(std::ptr::null(), 1, 0, std::ptr::null_mut(), 1), EINVAL);
            assert_eq!(lite_memmove(std::ptr::null(), 1, 0, 1, 8, 8), EINVAL);
        }
    }
}
