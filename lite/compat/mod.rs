// SPDX-License-Identifier: GPL-2.0
//! What differs between the kernel lines the module builds for, behind one set of
//! names: `v6_12.rs` for 6.12 LTS, `v7.rs` for 7.x (Debian's stock kernel). Kbuild
//! sets `--cfg lite_kernel_7` from the kernel's version; nothing outside this folder
//! knows which kernel it is built for.
//!
//! Both sides provide:
//! - `module!`: the kernel's `module!` with `authors: [..]` (6.12 takes one `author`);
//! - `FromBytes`, `AsBytes`: the kernel's traits for user copies (not zerocopy's);
//! - `Zeroable`, `init_zeroed()`: an all-zero initializer for `KBox::init`;
//! - `now_ns()`: the monotonic clock (`ktime_get`) in nanoseconds;
//! - `user_slice(addr, len)`: a `UserSlice` of user memory at address `addr`;
//! - `kvec_pop`, `kvec_truncate`: removal from a `KVec`;
//! - `cursor_lower_bound_mut`: a cursor that can move and remove, at the first key
//!   not below the given one.

#[cfg(not(lite_kernel_7))]
mod v6_12;
#[cfg(not(lite_kernel_7))]
pub(crate) use v6_12::*;

#[cfg(lite_kernel_7)]
mod v7;
#[cfg(lite_kernel_7)]
pub(crate) use v7::*;
