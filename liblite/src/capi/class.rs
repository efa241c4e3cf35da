//! The priority class of this process's operations from C: which one it is in,
//! and lowering it.

use super::{code, handle, LiteHandle, EINVAL};
use std::ffi::c_int;

/// The priority class of this process's operations: 0 latency, 1 default, 2 bulk;
/// or a negative errno.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_class(lite: *const LiteHandle) -> c_int {
    // SAFETY: forwarded from the caller.
    let lite = match unsafe { handle(lite) } {
        Ok(l) => l,
        Err(e) => return e,
    };
    match lite.my_class() {
        Ok((class, _)) => class.to_abi() as c_int,
        Err(e) => code(&e),
    }
}

/// Lowers this process (and the children it starts) to `class` (0 latency,
/// 1 default, 2 bulk) while `lite` stays open. Returns the class now in effect, or
/// -EPERM when `class` is higher than the current one, -EINVAL for an unknown one.
///
/// # Safety
/// `lite` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn lite_lower_class(lite: *const LiteHandle, class: u32) -> c_int {
    // SAFETY: forwarded from the caller.
    let lite = match unsafe { handle(lite) } {
        Ok(l) => l,
        Err(e) => return e,
    };
    let Some(class) = crate::Class::from_abi(class) else { return EINVAL };
    match lite.lower_my_class(class) {
        Ok((class, _)) => class.to_abi() as c_int,
        Err(e) => code(&e),
    }
}
