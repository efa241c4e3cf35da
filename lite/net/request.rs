// SPDX-License-Identifier: GPL-2.0
//! Control requests with a typed body (`wire::Body`), the way lmr, rpc and sync
//! ask a peer: encoded into a small buffer and sent through the mailbox.

use crate::net::wire::{Body, MsgKind, Writer};
use kernel::prelude::*;
use kernel::sync::Arc;

use super::mailbox::{PendingCall, CONTROL_TIMEOUT_MS};
use super::Peer;

/// Encodes a request body into a small buffer.
pub(crate) fn encode<B: Body>(body: &B) -> Result<([u8; 128], usize)> {
    let mut buf = [0u8; 128];
    let mut w = Writer::new(&mut buf);
    body.encode(&mut w).ok_or(EINVAL)?;
    let len = w.len();
    Ok((buf, len))
}

impl Peer {
    /// A control request with a small body; the answer lands in `reply`.
    pub(crate) fn request<B: Body>(
        &self,
        kind: MsgKind,
        body: &B,
        reply: &mut [u8],
    ) -> Result<usize> {
        let (buf, len) = encode(body)?;
        self.call(kind, &buf[..len], reply, CONTROL_TIMEOUT_MS)
    }

    /// As [`Self::request`], waiting for the answer whatever signals come (a dying
    /// process releasing its locks still has its atomics executed), for a request
    /// that must be answered once: the atomics the holder's kernel executes. A
    /// holder that does not answer in time may have executed it or not, so it is
    /// fenced off (`Peer::fence`), as an RDMA atomic past its deadline fails its peer.
    pub(crate) fn request_to_the_end<B: Body>(
        &self,
        kind: MsgKind,
        body: &B,
        reply: &mut [u8],
    ) -> Result<usize> {
        let (buf, len) = encode(body)?;
        self.call_to_the_end(kind, &buf[..len], reply, CONTROL_TIMEOUT_MS)
            .inspect_err(|e| {
                if *e == crate::errno::ETIMEDOUT() {
                    self.fence("did not answer an atomic in time");
                }
            })
    }

    /// Sends teardown message `kind` and waits for its answer whatever signals
    /// come: memory the peer may write is freed once this returns. A peer that
    /// does not answer in time is fenced off (`Peer::fence`) first.
    pub(crate) fn confirm<B: Body>(&self, kind: MsgKind, body: &B) -> Result {
        let (buf, len) = encode(body)?;
        self.confirm_bytes(kind, &buf[..len])
    }

    /// As [`Self::confirm`], with a body encoded by the caller.
    pub(crate) fn confirm_bytes(&self, kind: MsgKind, body: &[u8]) -> Result {
        self.call_until_done(kind, body)
            .inspect_err(|_| self.fence("did not confirm a teardown"))
    }

    /// As [`Self::request`], without waiting: the answer is collected later
    /// (`PendingCall::answer`), so that several nodes can be asked at once.
    pub(crate) fn start_request<B: Body>(
        peer: Arc<Peer>,
        kind: MsgKind,
        body: &B,
    ) -> Result<PendingCall> {
        let (buf, len) = encode(body)?;
        Peer::start_call(peer, kind, &buf[..len], CONTROL_TIMEOUT_MS)
    }
}
