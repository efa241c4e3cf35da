// SPDX-License-Identifier: GPL-2.0
//! The network, above `verbs` and `qos`: the message format, each peer with its K
//! RC QPs, mailbox and request slots, the one-sided data path, and membership.
//! The services above (lmr, locks, rpc) use it; it reaches them only through the
//! `Dispatch` that node hands in.
//!
//! - `wire`: immediates, mailbox layout and header, message bodies by family
//!   (pure, host-tested).
//! - `network`: `Network`, this node's devices, identity and peers; membership
//!   changes, ping, and what completions report about peers.
//! - `membership`: the table `Network::state` guards.
//! - `dispatch`: `Dispatch` and `PeerServices`, what net needs from above.
//! - `peer`: a peer's setup, connection, failure and teardown; it holds what the
//!   services keep per peer (`PeerServices`) without knowing its type.
//! - `mailbox`: posting messages, request slots, serving a peer's requests.
//! - `request`: typed control requests on top of the mailbox.
//! - `transfer`: one-sided RDMA reads, writes and atomics.
//! - `polling`, `inflight`: completion polling budget and the in-flight window (pure).
//! - `deadline`: how long a one-sided operation may take (pure).
//! - `gather`: a work request's gather list cut where the pacer's grant ends (pure).
//!
//! Locking: `Network::state` (mutex) serializes every membership change and is never
//! taken by completion callbacks. Each peer's `link` spinlock guards its QPs and
//! mailbox for posting; shutting a peer down takes them out under it, so once
//! `shutdown` returns nothing can post to them and their drain has reaped every
//! completion. A peer's `calls` spinlock guards its request slots; it is never
//! held together with `link`.

pub(crate) mod deadline;
mod dispatch;
pub(crate) mod gather;
pub(crate) mod inflight;
mod mailbox;
mod membership;
mod network;
mod peer;
pub(crate) mod polling;
mod request;
mod transfer;
pub(crate) mod wire;

pub(crate) use dispatch::{Dispatch, PeerServices};
pub(crate) use mailbox::CONTROL_TIMEOUT_MS;
pub(crate) use network::Network;
pub(crate) use peer::Peer;
pub(crate) use request::encode;
