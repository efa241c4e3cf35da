// SPDX-License-Identifier: GPL-2.0
//! LMR requests from peers, served on the module's workqueue.

use crate::kvec::truncate;
use crate::net::wire::{self, MsgKind, BODY_MAX};
use crate::net::{encode, Peer};
use crate::verbs::Atomic;
use kernel::prelude::*;

use super::decode;
use super::LmrNode;

impl LmrNode {
    /// Serves an LMR request of `peer`; returns the answer's body.
    pub(crate) fn serve_lmr_request(
        &self,
        peer: &Peer,
        kind: MsgKind,
        body: &[u8],
    ) -> Result<KVec<u8>> {
        let from = peer.id;
        let empty = KVec::new();
        match kind {
            MsgKind::Alloc => {
                let req: wire::Alloc = decode(body)?;
                let extents = self.hold(from, req.id, req.bytes, wire::EXTENTS_PER_MSG)?;
                let mut out = KVec::from_elem(0u8, BODY_MAX, GFP_KERNEL)?;
                let len = wire::encode_extents(&mut out, &extents).ok_or(EINVAL)?;
                truncate(&mut out, len);
                Ok(out)
            }
            MsgKind::Release => {
                let req: wire::LmrId = decode(body)?;
                self.release(from, req.id);
                Ok(empty)
            }
            MsgKind::ReleaseMany => {
                wire::decode_ids(body, |id| self.release(from, id)).ok_or(EINVAL)?;
                Ok(empty)
            }
            MsgKind::Lookup => {
                let req: wire::Lookup = decode(body)?;
                let found = self.master_lookup(from, req.namespace, &req.name, req.perm)?;
                let (buf, len) = encode(&found)?;
                let mut out = KVec::new();
                out.extend_from_slice(&buf[..len], GFP_KERNEL)?;
                Ok(out)
            }
            MsgKind::Chunks => self.master_chunks(from, &decode(body)?),
            MsgKind::Revoke => {
                let req: wire::LmrId = decode(body)?;
                self.revoke_local(from, req.id);
                Ok(empty)
            }
            MsgKind::Memset => self.holder_memset(&decode(body)?).map(|()| empty),
            MsgKind::Copy => self.holder_copy(&decode(body)?).map(|()| empty),
            MsgKind::Atomic => {
                let req: wire::WordAtomic = decode(body)?;
                let atomic = match req.op {
                    wire::ATOMIC_FETCH_ADD => Atomic::FetchAdd(req.operand),
                    wire::ATOMIC_COMPARE_SWAP => Atomic::CompareSwap {
                        expected: req.operand,
                        new: req.swap,
                    },
                    _ => return Err(EINVAL),
                };
                let old = self.serve_atomic(req.master, req.id, req.addr, atomic)?;
                let mut out = KVec::new();
                out.extend_from_slice(&old.to_le_bytes(), GFP_KERNEL)?;
                Ok(out)
            }
            MsgKind::Grant => self.master_grant(from, &decode(body)?).map(|()| empty),
            MsgKind::Free => {
                let req: wire::LmrId = decode(body)?;
                self.master_free(from, req.id).map(|()| empty)
            }
            MsgKind::Forget => {
                let req: wire::LmrId = decode(body)?;
                self.revoke_master(u32::try_from(req.id).map_err(|_| EINVAL)?);
                Ok(empty)
            }
            // Other services' requests (node dispatches them there).
            MsgKind::Lock
            | MsgKind::LockWake
            | MsgKind::Echo
            | MsgKind::RpcBind
            | MsgKind::RpcUnbind
            | MsgKind::RpcHead => Err(EINVAL),
        }
    }
}
