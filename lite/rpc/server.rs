// SPDX-License-Identifier: GPL-2.0
//! The server side, node-wide (`RpcNode`): the registered servers with their
//! queues of received requests, and the bindings (client node, id) with the
//! rings this node keeps for them.

use super::file::{LocalCaller, LocalCharge};
use super::ring::{self, RecordHeader, ServerRing, FLAG_ONEWAY};
use super::status_of;
use crate::compat::user_slice;
use crate::kvec::Fifo;
use crate::lmr::layout::{self, Extent};
use crate::net::wire::{self, RpcDone};
use crate::net::{Network, Peer};
use crate::uapi::LiteCallPhases;
use crate::verbs::DmaBuf;
use core::sync::atomic::AtomicU64;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{new_mutex, new_spinlock, Arc, CondVar, Mutex, SpinLock};

/// A request in a server's queue.
pub(crate) enum Request {
    /// In the ring of `binding`, from another node.
    Remote {
        peer: Arc<Peer>,
        binding: Arc<ServerBinding>,
        header: RecordHeader,
    },
    /// From a process on this node; `caller` is `None` for a message.
    Local {
        node: u32,
        payload: KVec<u8>,
        caller: Option<LocalCaller>,
        charge: LocalCharge,
    },
}

impl Request {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Request::Remote { header, .. } => header.len,
            Request::Local { payload, .. } => payload.len() as u64,
        }
    }

    pub(crate) fn node(&self) -> u32 {
        match self {
            Request::Remote { peer, .. } => peer.id,
            Request::Local { node, .. } => *node,
        }
    }

    /// The server is gone: the caller fails with `err`, the ring room is freed.
    pub(crate) fn refuse(self, err: Error) {
        match self {
            Request::Remote {
                peer,
                binding,
                header,
            } => {
                if header.flags & FLAG_ONEWAY == 0 {
                    let _ = answer(&peer, &binding, header.slot, header.seq, Err(err));
                }
                binding.consume(&header);
            }
            Request::Local { caller, .. } => {
                if let Some(caller) = caller {
                    caller.complete(Err(err));
                }
            }
        }
    }
}

pub(crate) struct Queue {
    pub(crate) requests: Fifo<Request>,
    pub(crate) closed: bool,
}

/// A registered RPC id and the requests waiting for its server process.
#[pin_data]
pub(crate) struct Server {
    pub(crate) id: u32,
    /// The serving open file (identity only).
    pub(crate) owner: usize,
    #[pin]
    pub(crate) queue: SpinLock<Queue>,
    #[pin]
    pub(crate) arrived: CondVar,
}

/// A ring this node keeps for one client node's calls to one id.
#[pin_data]
pub(crate) struct ServerBinding {
    pub(crate) index: usize,
    pub(crate) id: u32,
    /// The client, in the incarnation that bound.
    pub(crate) peer: Arc<Peer>,
    pub(crate) chunks: KVec<DmaBuf>,
    pub(crate) extents: KVec<Extent>,
    #[pin]
    pub(crate) ring: SpinLock<ServerRing>,
}

impl ServerBinding {
    pub(crate) fn size(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }

    /// Copies `out.len()` ring bytes from ring offset `offset` (within the ring).
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) -> Result {
        for piece in layout::pieces(&self.extents, offset, out.len() as u64) {
            let chunk = self.chunks.get(piece.extent).ok_or(EINVAL)?;
            let at = (piece.addr - self.extents[piece.extent].addr) as usize;
            let pos = piece.pos as usize;
            chunk.read(at, &mut out[pos..pos + piece.len as usize])?;
        }
        Ok(())
    }

    /// Copies `len` ring bytes at `offset` to user memory at `addr`.
    pub(crate) fn copy_to_user(&self, offset: u64, addr: usize, len: usize) -> Result {
        for piece in layout::pieces(&self.extents, offset, len as u64) {
            let chunk = self.chunks.get(piece.extent).ok_or(EINVAL)?;
            let at = (piece.addr - self.extents[piece.extent].addr) as usize;
            let size = piece.len as usize;
            let mut writer = user_slice(addr + piece.pos as usize, size).writer();
            chunk.copy_to_user(at, &mut writer, size)?;
        }
        Ok(())
    }

    /// The header and output runs of the record at ring offset `offset`.
    pub(crate) fn record(&self, offset: u64) -> Option<RecordHeader> {
        let mut raw = [0u8; ring::HEADER_LEN];
        self.read(offset, &mut raw).ok()?;
        let header = RecordHeader::decode(&raw)?;
        self.ring.lock().check(offset, &header).ok()?;
        Some(header)
    }

    /// Marks `header`'s record consumed; pushes the head to the client when a
    /// quarter of the ring went by unreported.
    pub(crate) fn consume(&self, header: &RecordHeader) {
        let (consumed, report) = {
            let mut ring = self.ring.lock();
            let consumed = ring.consume(header);
            (consumed, ring.report_due())
        };
        if consumed.is_err() {
            pr_warn!(
                "node {} broke the RPC ring protocol; its calls to id {} will stall\n",
                self.peer.id,
                self.id
            );
        }
        if let Some(head) = report {
            let size = self.size();
            if let Some(payload) = wire::encode_ring_imm(self.index, ring::ring_offset(head, size))
            {
                let _ = self
                    .peer
                    .post_imm(self.index, wire::ImmKind::RpcHead, payload);
            }
        }
    }

    /// The head, as reported to the client along with a reply.
    pub(crate) fn head_for_reply(&self) -> u64 {
        let mut ring = self.ring.lock();
        let head = ring.head();
        ring.reported(head);
        head
    }
}

/// RPC state of this node: registered servers and the rings they are called through.
#[pin_data]
pub(crate) struct RpcNode {
    /// The network calls and replies go over.
    pub(crate) net: Arc<Network>,
    #[pin]
    pub(crate) servers: SpinLock<RBTree<u32, Arc<Server>>>,
    #[pin]
    pub(crate) bindings: SpinLock<KVec<Option<Arc<ServerBinding>>>>,
    /// Serializes making bindings, so that each gets a table index of its own.
    #[pin]
    pub(crate) bind_lock: Mutex<()>,
    pub(crate) next_token: AtomicU64,
    /// Calls' phases, summed by caller (`LiteRpcStat::call_phases`).
    #[pin]
    pub(crate) call_phases: SpinLock<[LiteCallPhases; 2]>,
}

/// What a receive found.
pub(crate) struct Received {
    pub(crate) len: u64,
    pub(crate) token: u64,
    pub(crate) node: u32,
    pub(crate) flags: u32,
    pub(crate) capacity: u64,
}

/// Sends the completion record of a call to the caller: an error, or a reply of
/// `len` bytes already written into its buffer.
pub(crate) fn answer(
    req_peer: &Peer,
    binding: &ServerBinding,
    slot: u32,
    seq: u64,
    result: Result<u64>,
) -> Result {
    let (status, len) = match result {
        Ok(len) => (0, len),
        Err(e) => (status_of(e), 0),
    };
    post_answer(
        req_peer,
        binding,
        slot,
        slot as usize,
        seq,
        status,
        len,
        &[],
    )
}

/// Sends the completion record of a call with its reply (at most
/// `REPLY_INLINE_MAX` bytes) in the same write-with-immediate, on QP `qp`.
pub(crate) fn answer_inline(
    req_peer: &Peer,
    binding: &ServerBinding,
    slot: u32,
    qp: usize,
    seq: u64,
    reply: &[u8],
) -> Result {
    post_answer(
        req_peer,
        binding,
        slot,
        qp,
        seq,
        0,
        reply.len() as u64,
        reply,
    )
}

/// Sends a completion record with `status` and `len`, followed by `inline`, on QP
/// `qp`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn post_answer(
    req_peer: &Peer,
    binding: &ServerBinding,
    slot: u32,
    qp: usize,
    seq: u64,
    status: u32,
    len: u64,
    inline: &[u8],
) -> Result {
    let done = RpcDone {
        seq,
        len,
        status,
        binding: binding.index as u32,
        head: binding.head_for_reply(),
    };
    req_peer.post_done(slot as usize, qp, &done, inline)
}

impl RpcNode {
    pub(crate) fn new(net: Arc<Network>) -> Result<Arc<RpcNode>> {
        Arc::pin_init(
            pin_init!(RpcNode {
                net,
                servers <- new_spinlock!(RBTree::new(), "lite:rpc.servers"),
                bindings <- new_spinlock!(KVec::new(), "lite:rpc.server_bindings"),
                bind_lock <- new_mutex!((), "lite:rpc.bind_serial"),
                next_token: AtomicU64::new(1),
                call_phases <- new_spinlock!([LiteCallPhases::default(); 2], "lite:rpc.call_phases"),
            }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn server(&self, id: u32) -> Option<Arc<Server>> {
        self.servers.lock().get(&id).cloned()
    }

    pub(crate) fn binding(&self, index: usize) -> Option<Arc<ServerBinding>> {
        self.bindings.lock().get(index).and_then(|b| b.clone())
    }

    /// Bindings matching `keep` taken out of the table.
    pub(crate) fn take_bindings(
        &self,
        mut matches: impl FnMut(&ServerBinding) -> bool,
    ) -> KVec<Arc<ServerBinding>> {
        let mut out = KVec::new();
        let mut table = self.bindings.lock();
        for entry in table.iter_mut() {
            if entry.as_ref().is_some_and(|b| matches(b)) {
                if let Some(b) = entry.take() {
                    // Only fails without memory; the binding is then freed at once,
                    // which is safe for a dead peer and leaves a gap otherwise.
                    let _ = out.push(b, GFP_ATOMIC);
                }
            }
        }
        out
    }
}
