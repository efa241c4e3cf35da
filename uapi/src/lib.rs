// SPDX-License-Identifier: GPL-2.0 OR MIT
//! LITE-RS ABI shared by the kernel module (which includes `abi/mod.rs` directly) and liblite.
#![no_std]

mod abi;
pub use abi::*;
