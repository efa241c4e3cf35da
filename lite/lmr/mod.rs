// SPDX-License-Identifier: GPL-2.0
//! LITE memory regions (LMRs): the master's registry, the holders' memory, the
//! mappings behind handles, and the one-sided operations on them.
//!
//! Roles, per LMR: the *master* node (where it was allocated) keeps its name,
//! extents, permissions and the nodes that mapped it; *holders* keep its memory as
//! physically contiguous chunks, each under its own key; *mappers* keep a copy of the
//! extents in a `Mapping` per handle and reach the memory with RDMA directly. Users
//! only ever see handles.
//!
//! Freeing: the master forgets the LMR, revokes every mapping of it (each mapper
//! fails new operations and waits for running ones), and only then tells the
//! holders to release the memory, so no RDMA can land in freed memory.
//!
//! - `layout`: extents, ranges, names, permissions (pure, host-tested).
//! - `registry`: this node's registries (`Memory`, under `LmrNode::mem`, `Lite::lmr`).
//! - `handles`: an open file's handle table; map, grant, free, unmap.
//! - `create`: LT_malloc and LT_register.
//! - `master`: what a master answers and the revocation before a free.
//! - `holder`, `reserve`: memory held here, and the zeroed reserve.
//! - `mapping`: a mapping, its users and its revocation.
//! - `ops`: one-sided operations through a handle.
//! - `read_phases`: where small reads spend their time (`LiteMemStat::read_phases`).
//! - `serve`: requests from peers.
//! - `events`: what the services above hear of released memory (node installs it).
//!
//! Locking: `LmrNode::mem` guards the registries; it is taken after `Network::state`
//! (never the other way), and never held across a message to a peer or while
//! waiting for a mapping's users. Operations on a mapping never take it.

mod create;
mod events;
mod handles;
mod holder;
pub(crate) mod layout;
mod mapping;
mod master;
mod ops;
mod read_phases;
mod registry;
mod reserve;
mod serve;

pub(crate) use create::MallocArgs;
pub(crate) use events::LmrEvents;
pub(crate) use handles::FileLmrs;
pub(crate) use mapping::{HeldWord, Word, WordRef};
pub(crate) use registry::LmrNode;

use crate::net::wire::{Body, Reader};
use crate::uapi::*;
use kernel::prelude::*;
use layout::{Extent, RangeError, CHUNK_MAX, NAME_LEN, PERM_MASTER, PERM_READ, PERM_WRITE};
use registry::NameKey;

const _: () = assert!(
    PERM_READ == LITE_PERM_READ && PERM_WRITE == LITE_PERM_WRITE && PERM_MASTER == LITE_PERM_MASTER
);
const _: () = assert!(NAME_LEN == LITE_NAME_MAX as usize && CHUNK_MAX == LITE_CHUNK_SIZE);

/// `-ERANGE`: an access beyond the LMR.
pub(crate) fn erange() -> Error {
    Error::from_errno(-(kernel::bindings::ERANGE as i32))
}

pub(crate) fn range_error(err: RangeError) -> Error {
    match err {
        RangeError::Empty => EINVAL,
        RangeError::OutOfBounds => erange(),
    }
}

/// A name as a registry key: 1..=63 bytes, NUL-padded.
pub(crate) fn name_key(namespace: u32, name: &[u8; NAME_LEN]) -> Result<NameKey> {
    match layout::name_len(name) {
        Some(1..) => Ok((namespace, *name)),
        _ => Err(EINVAL),
    }
}

pub(crate) fn decode<B: Body>(bytes: &[u8]) -> Result<B> {
    B::decode(&mut Reader::new(bytes)).ok_or(EINVAL)
}

pub(crate) fn copy_extents(extents: &[Extent]) -> Result<KVec<Extent>> {
    let mut out = KVec::with_capacity(extents.len(), GFP_KERNEL)?;
    for e in extents {
        out.push(*e, GFP_KERNEL)?;
    }
    Ok(out)
}
