// SPDX-License-Identifier: GPL-2.0
//! The bottom layer: the module's own RDMA binding. Safe wrappers over the C
//! helpers beside them (`verbs.c`: devices, QPs, CQs, posting and completions;
//! `dma.c`: DMA buffers and pinned user pages; `mr.c`: per-range MRs), which are
//! all that sees inside the kernel's verbs objects.
//!
//! - `device`: an RDMA device (`Device`), which creates the QPs.
//! - `qp`: an RC QP (`Qp`) and what is posted on it (`WriteImm`, `Atomic`).
//! - `paths`: how a device carries messages and atomics (`Paths`).
//! - `op`: waiting for a one-sided operation's completions (`Op`).
//! - `paced`: the device's places for paced work requests in flight (`PacedPlace`).
//! - `user_pages`: a user buffer pinned and mapped for one transfer (`UserPages`).
//! - `dma_buf`: memory mapped for the device, which peers may reach (`DmaBuf`).
//! - `staging`: pages mapped once that small reads and atomics land in (`Staging`),
//!   over `free_slots`, which of them are free (`FreeSlots`).
//! - `remote_key`: the rkey peers reach one range with, revoked at free (`RemoteKey`).
//! - here: the page size and the DMA directions both kinds of memory map with.
//!
//! Everything is re-exported here: users name `verbs::Qp`, `verbs::DmaBuf`.

mod device;
mod dma_buf;
mod free_slots;
mod op;
mod paced;
mod paths;
mod qp;
mod remote_key;
mod staging;
mod user_pages;

pub(crate) use device::*;
pub(crate) use dma_buf::*;
pub(crate) use op::*;
pub(crate) use paced::*;
pub(crate) use paths::*;
pub(crate) use qp::*;
pub(crate) use remote_key::*;
pub(crate) use staging::*;
pub(crate) use user_pages::*;

/// Bytes of a page.
pub(crate) const PAGE_SIZE: usize = 4096;

/// `enum dma_data_direction`.
const DMA_BIDIRECTIONAL: i32 = 0;
const DMA_TO_DEVICE: i32 = 1;
const DMA_FROM_DEVICE: i32 = 2;
