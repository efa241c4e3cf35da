// SPDX-License-Identifier: GPL-2.0
//! RPC rings, the pure part: how a client kernel reserves room in the ring a
//! server kernel keeps for it, how the server tracks what it has consumed, the
//! record header written into the ring, and how a reply is cut to fit the
//! caller's output buffer.
//!
//! Pure logic (core only): compiled into the module and unit-tested on the host.
//!
//! Positions are *logical*: a u64 that only grows; a position's place in the ring
//! is `pos % size`. A record never wraps the end of the ring: when it does not
//! fit before the end, the client skips to the next lap and says so in the
//! record's `pad`, so the server knows the skipped bytes are free. Records may
//! arrive and be consumed out of order (several client threads, K QPs); the
//! server's head only passes a record once everything before it is consumed.
//!
//! Record layout (64-byte aligned): [`RecordHeader`] (64 bytes), then `nruns`
//! runs of the caller's output buffer (16 bytes each: DMA address, length), then
//! the payload.
//!
//! - `record`: the layout's constants, the record header, output runs, a record's
//!   length and its place in the ring.
//! - `client_ring`: reserving room in the ring (`ClientRing`, `Reservation`).
//! - `server_ring`: consuming records, out of order (`ServerRing`, `RingError`).
//! - `runs`: cutting a reply to the caller's output runs (`RunCursor`, `zip_runs`).
//!
//! Everything is re-exported here: users name `ring::RecordHeader`, `ring::MAX_MSG`.

mod client_ring;
mod record;
mod runs;
mod server_ring;

pub(crate) use client_ring::*;
pub(crate) use record::*;
pub(crate) use runs::*;
pub(crate) use server_ring::*;
