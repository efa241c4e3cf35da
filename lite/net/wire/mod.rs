// SPDX-License-Identifier: GPL-2.0
//! The wire format between LITE-RS kernels: the 32-bit immediate of every
//! write-with-immediate, and the header of kernel messages in mailbox slots.
//!
//! Pure logic (core only): compiled into the module and unit-tested on the host.
//! Everything here is decoded from what a peer wrote, so decoding trusts nothing.
//!
//! Immediate: bits 31..28 kind, bits 27..0 kind-specific payload.
//! Mailbox: per peer, `SLOTS` request slots then `SLOTS` response slots of
//! `SLOT_SIZE` bytes. A request in slot `s` is answered in response slot `s` of the
//! requester, so a requester that reserved `s` always has room for the answer and
//! a responder never waits for credit in completion context. Then `CALL_SLOTS`
//! RPC completion records: the reply to a call in call slot `c` ends with a
//! write-with-immediate of its [`RpcDone`] record into record `c` of the caller's
//! mailbox, followed by the reply's bytes when they fit in the record's slot
//! (larger replies went straight into the caller's buffer before it).
//!
//! RPC immediates: a request names the server's binding (ring) and the record's
//! offset in it in `RECORD_ALIGN` units (see rpc/ring/); a head report names
//! the binding and the ring offset the server has consumed up to.
//!
//! - `imm`: the immediate and the RPC ring immediate.
//! - `slots`: the mailbox's slots and records, and the message header.
//! - `message`: `MsgKind`, `Writer`, `Reader` and the `Body` trait.
//! - `lmr`, `lock`, `rpc`: each family's bodies, with their `Body` impls.
//! - `round_trip` (tests only): encodes, decodes and truncates a body.
//!
//! Everything is re-exported here: users name `wire::Header`, `wire::encode_imm`.

mod imm;
mod lmr;
mod lock;
mod message;
#[cfg(test)]
mod round_trip;
mod rpc;
mod slots;

pub(crate) use imm::*;
pub(crate) use lmr::*;
pub(crate) use lock::*;
pub(crate) use message::*;
pub(crate) use rpc::*;
pub(crate) use slots::*;
