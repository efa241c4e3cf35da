// SPDX-License-Identifier: GPL-2.0
//! The network: RDMA verbs, the message format, and each peer with its K RC QPs,
//! mailbox and request slots, the one-sided data path, and membership.
//!
//! - `verbs`: devices, QPs, CQ, DMA buffers, pinned user pages (the C helpers' side).
//! - `wire`: immediates, mailbox layout and header, message bodies by family
//!   (pure, host-tested).
//! - `peer`: a peer's setup, connection, failure and teardown; it holds what the
//!   services above keep per peer (`node::PeerServices`) without importing them.
//! - `mailbox`: posting messages, request slots, serving a peer's requests.
//! - `request`: typed control requests on top of the mailbox.
//! - `transfer`: one-sided RDMA reads, writes and atomics.
//! - `polling`, `inflight`: completion polling budget and the in-flight window (pure).
//! - `deadline`: how long a one-sided operation may take (pure).
//! - `gather`: a work request's gather list cut where the pacer's grant ends (pure).
//! - `membership`: identity, peers, the loopback peer, ping.
//! - `ioctl`: the cluster family of /dev/lite ioctls, which chardev hands on.
//!
//! Locking: `Lite::state` (mutex) serializes every membership change and is never
//! taken by completion callbacks. Each peer's `link` spinlock guards its QPs and
//! mailbox for posting; shutting a peer down takes them out under it, so once
//! `shutdown` returns nothing can post to them and their drain has reaped every
//! completion. A peer's `calls` spinlock guards its request slots; it is never
//! held together with `link`.

pub(crate) mod deadline;
pub(crate) mod gather;
pub(crate) mod inflight;
mod ioctl;
mod mailbox;
mod membership;
mod peer;
pub(crate) mod polling;
mod request;
mod transfer;
pub(crate) mod verbs;
pub(crate) mod wire;

pub(crate) use ioctl::ioctl;
pub(crate) use mailbox::CONTROL_TIMEOUT_MS;
pub(crate) use membership::State;
pub(crate) use peer::Peer;
pub(crate) use request::encode;
