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
//! mailbox (the reply's bytes went straight into the caller's buffer before it).
//!
//! RPC immediates: a request names the server's binding (ring) and the record's
//! offset in it in `RECORD_ALIGN` units (see rpc/ring.rs); a head report names
//! the binding and the ring offset the server has consumed up to.

/// Bits available to the payload of every immediate kind.
pub(crate) const PAYLOAD_BITS: u32 = 28;
/// Largest immediate payload value.
pub(crate) const PAYLOAD_MAX: u32 = (1 << PAYLOAD_BITS) - 1;

/// Outstanding requests per direction between two nodes.
pub(crate) const SLOTS: usize = 32;
/// Bytes per mailbox slot, header included.
pub(crate) const SLOT_SIZE: usize = 4096;
/// Bytes of a message header.
pub(crate) const HEADER_LEN: usize = 16;
/// Largest message body.
pub(crate) const BODY_MAX: usize = SLOT_SIZE - HEADER_LEN;
/// RPCs one node may have in flight to another (LITE: 64).
pub(crate) const CALL_SLOTS: usize = 64;
/// Bytes of an RPC completion record slot.
pub(crate) const DONE_SIZE: usize = 64;
/// Bytes of one mailbox (request and response slots, RPC completion records).
pub(crate) const MAILBOX_SIZE: usize = 2 * SLOTS * SLOT_SIZE + CALL_SLOTS * DONE_SIZE;
/// Bindings (client node, RPC id) a node serves at once: the immediate's bits.
pub(crate) const BINDINGS: usize = 1 << BINDING_BITS;
const BINDING_BITS: u32 = 10;
const OFFSET_BITS: u32 = PAYLOAD_BITS - BINDING_BITS;
const _: () =
    assert!((crate::rpc::ring::RING_BYTES / crate::rpc::ring::RECORD_ALIGN) < 1 << OFFSET_BITS);

/// What a write-with-immediate means to the receiving kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImmKind {
    /// A request landed in request slot `payload`.
    Request = 1,
    /// The answer to our request in slot `payload` landed in our response slot.
    Response = 2,
    /// An RPC record landed in one of our rings (`decode_ring_imm`).
    RpcRequest = 3,
    /// The reply to our call in call slot `payload` is complete.
    RpcReply = 4,
    /// A server consumed one of our rings up to an offset (`decode_ring_imm`).
    RpcHead = 5,
}

impl ImmKind {
    fn from_bits(bits: u32) -> Option<ImmKind> {
        match bits {
            1 => Some(ImmKind::Request),
            2 => Some(ImmKind::Response),
            3 => Some(ImmKind::RpcRequest),
            4 => Some(ImmKind::RpcReply),
            5 => Some(ImmKind::RpcHead),
            _ => None,
        }
    }
}

/// Packs `kind` and `payload`; `None` if the payload does not fit in 28 bits.
pub(crate) fn encode_imm(kind: ImmKind, payload: u32) -> Option<u32> {
    (payload <= PAYLOAD_MAX).then_some(((kind as u32) << PAYLOAD_BITS) | payload)
}

/// Splits an immediate received from a peer; `None` for a kind we do not know.
pub(crate) fn decode_imm(imm: u32) -> Option<(ImmKind, u32)> {
    ImmKind::from_bits(imm >> PAYLOAD_BITS).map(|kind| (kind, imm & PAYLOAD_MAX))
}

/// Payload of a ring immediate: `binding` and a record-aligned ring `offset`.
pub(crate) fn encode_ring_imm(binding: usize, offset: u64) -> Option<u32> {
    let align = crate::rpc::ring::RECORD_ALIGN;
    let units = offset / align;
    let fits = binding < BINDINGS && offset.is_multiple_of(align) && units < 1 << OFFSET_BITS;
    fits.then_some(((binding as u32) << OFFSET_BITS) | units as u32)
}

/// Splits a ring immediate's payload into (binding, ring offset).
pub(crate) fn decode_ring_imm(payload: u32) -> (usize, u64) {
    let binding = (payload >> OFFSET_BITS) as usize;
    let units = u64::from(payload & ((1 << OFFSET_BITS) - 1));
    (binding, units * crate::rpc::ring::RECORD_ALIGN)
}

/// Offset of RPC completion record `slot` in a mailbox.
pub(crate) fn done_offset(slot: usize) -> usize {
    2 * SLOTS * SLOT_SIZE + slot * DONE_SIZE
}

/// Offset of request slot `slot` in a mailbox.
pub(crate) fn request_offset(slot: usize) -> usize {
    slot * SLOT_SIZE
}

/// Offset of response slot `slot` in a mailbox.
pub(crate) fn response_offset(slot: usize) -> usize {
    (SLOTS + slot) * SLOT_SIZE
}

/// What a request asks for. LMR requests name an LMR by (master node, id); a
/// requester's own node id is implied by the QP the request came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MsgKind {
    /// Send the body back unchanged.
    Echo = 1,
    /// Master to holder: allocate memory for LMR `id` ([`Alloc`] -> [`Extents`]).
    Alloc = 2,
    /// Master to holder: free everything held for LMR `id` ([`LmrId`]).
    Release = 3,
    /// To a possible master: who has this name ([`Lookup`] -> [`Found`]).
    Lookup = 4,
    /// To the master: the LMR's extents from `first` on ([`ChunksQuery`] -> [`Extents`]).
    Chunks = 5,
    /// Master to mapper: the LMR is gone; fail its handles and wait for their
    /// operations to end ([`LmrId`]).
    Revoke = 6,
    /// To a holder: fill held bytes ([`Memset`]).
    Memset = 7,
    /// To the holder of the source: copy held bytes to a destination ([`Copy`]).
    Copy = 8,
    /// To the master, from a node with master permission ([`Grant`]).
    Grant = 9,
    /// To the master, from a node with master permission ([`LmrId`]).
    Free = 10,
    /// From a holder: node `id` is gone and the holder frees what it held for it,
    /// so fail every mapping of that node's LMRs first ([`LmrId`]).
    Forget = 11,
    /// Client to server: a ring for calls to RPC id ([`RpcBind`] -> [`Bound`]).
    RpcBind = 12,
    /// Server to client: the binding is gone; stop writing to its ring and answer
    /// once nothing is in flight to it ([`RpcUnbind`]).
    RpcUnbind = 13,
    /// Client to server: how far is my ring consumed ([`RpcUnbind`] -> [`LmrId`]
    /// carrying the logical head).
    RpcHead = 14,
    /// To the holder of a lock or barrier word, its owner ([`LockReq`] -> a
    /// `LOCK_*` outcome as a little-endian u32).
    Lock = 15,
    /// Owner to waiter: the outcome for a queued caller ([`LockWake`]); ENOENT
    /// when that caller is gone.
    LockWake = 16,
    /// Master to holder: free everything held for each of a list of LMRs
    /// ([`encode_ids`]); what a process that exits with many LMRs costs in messages.
    ReleaseMany = 17,
}

impl MsgKind {
    fn from_wire(kind: u16) -> Option<MsgKind> {
        Some(match kind {
            1 => MsgKind::Echo,
            2 => MsgKind::Alloc,
            3 => MsgKind::Release,
            4 => MsgKind::Lookup,
            5 => MsgKind::Chunks,
            6 => MsgKind::Revoke,
            7 => MsgKind::Memset,
            8 => MsgKind::Copy,
            9 => MsgKind::Grant,
            10 => MsgKind::Free,
            11 => MsgKind::Forget,
            12 => MsgKind::RpcBind,
            13 => MsgKind::RpcUnbind,
            14 => MsgKind::RpcHead,
            15 => MsgKind::Lock,
            16 => MsgKind::LockWake,
            17 => MsgKind::ReleaseMany,
            _ => return None,
        })
    }
}

/// Little-endian field writer over a message body.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.pos
    }

    pub(crate) fn bytes(&mut self, data: &[u8]) -> Option<&mut Self> {
        let end = self.pos.checked_add(data.len())?;
        self.buf.get_mut(self.pos..end)?.copy_from_slice(data);
        self.pos = end;
        Some(self)
    }

    pub(crate) fn u32(&mut self, v: u32) -> Option<&mut Self> {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> Option<&mut Self> {
        self.bytes(&v.to_le_bytes())
    }
}

/// Little-endian field reader over a body a peer wrote: every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        let out = self.buf.get(self.pos..end)?.try_into().ok()?;
        self.pos = end;
        Some(out)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Names an LMR at its master (`Release`, `Revoke`, `Free`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LmrId {
    pub(crate) id: u64,
}

/// `Alloc`: `bytes` more for LMR `id` (the holder may return fewer; asked again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Alloc {
    pub(crate) id: u64,
    pub(crate) bytes: u64,
}

/// `Lookup`: the LMR called `name` in `namespace`, to be mapped with `perm` (0:
/// only whether the name is taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lookup {
    pub(crate) namespace: u32,
    pub(crate) perm: u32,
    pub(crate) name: [u8; NAME_LEN],
}

/// Answer to `Lookup`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) id: u64,
    pub(crate) size: u64,
    pub(crate) extents: u32,
}

/// `Chunks`: extents of LMR `id` from index `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunksQuery {
    pub(crate) id: u64,
    pub(crate) first: u32,
}

/// `Memset`: `len` bytes at `addr`, held for LMR (`master`, `id`), become `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memset {
    pub(crate) master: u32,
    pub(crate) value: u32,
    pub(crate) id: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

/// `Copy`: `len` bytes at `src_addr` held for (`src_master`, `src_id`) go to
/// `dst_addr` of node `dst_node`, held there for (`dst_master`, `dst_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy {
    pub(crate) src_master: u32,
    pub(crate) dst_master: u32,
    pub(crate) src_id: u64,
    pub(crate) src_addr: u64,
    pub(crate) dst_id: u64,
    pub(crate) dst_addr: u64,
    pub(crate) len: u64,
    pub(crate) dst_node: u32,
}

/// `Grant`: node `node` (or every node) may map LMR `id` with `perm` from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) id: u64,
    pub(crate) node: u32,
    pub(crate) perm: u32,
}

/// `LockReq::op`: queue the caller (`value`: its holder word) for the lock.
pub(crate) const LOCK_OP_WAIT: u32 = 1;
/// `LockReq::op`: the holder (`value`) releases a lock others wait for.
pub(crate) const LOCK_OP_RELEASE: u32 = 2;
/// `LockReq::op`: wake the caller once the barrier counter reaches `value`.
pub(crate) const BARRIER_OP_WAIT: u32 = 3;
/// `LockReq::op`: the counter reached `value`: wake that round's waiters.
pub(crate) const BARRIER_OP_DONE: u32 = 4;

/// Outcomes of a [`LockReq`] and in a [`LockWake`] (negative: an errno).
pub(crate) const LOCK_QUEUED: u32 = 0;
pub(crate) const LOCK_TAKEN: u32 = 1;
/// Taken over from a holder whose node died.
pub(crate) const LOCK_TAKEN_HOLDER_DIED: u32 = 2;
pub(crate) const BARRIER_PASSED: u32 = 3;
/// A release or barrier-done request was carried out.
pub(crate) const LOCK_DONE: u32 = 4;

/// `LockReq`: operation `op` on the word at `addr` held for LMR (`master`, `id`);
/// `token` names the waiting caller at the sending node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LockReq {
    pub(crate) master: u32,
    pub(crate) op: u32,
    pub(crate) id: u64,
    pub(crate) addr: u64,
    pub(crate) value: u64,
    pub(crate) token: u32,
}

/// `LockWake`: the outcome (a `LOCK_*` outcome or a negative errno) for the
/// receiving node's waiter `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LockWake {
    pub(crate) token: u32,
    pub(crate) outcome: i32,
}

/// `RpcBind`: the caller wants to call RPC `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RpcBind {
    pub(crate) id: u32,
}

/// Most chunks a ring is made of.
pub(crate) const RING_CHUNKS: usize = 16;

/// Answer to `RpcBind`: the binding's index at the server and its ring, as
/// physically contiguous chunks (DMA address, bytes) in ring order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub(crate) binding: u32,
    pub(crate) head: u64,
    pub(crate) count: u32,
    pub(crate) chunks: [(u64, u64); RING_CHUNKS],
}

/// `RpcUnbind` (and `RpcHead`'s question): binding `binding` of the sender, for RPC `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RpcUnbind {
    pub(crate) binding: u32,
    pub(crate) id: u32,
}

/// An RPC completion record, written into the caller's mailbox after the reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RpcDone {
    /// The call's sequence (stale records are ignored).
    pub(crate) seq: u64,
    /// Reply bytes written; the reply's true size when status is EOVERFLOW.
    pub(crate) len: u64,
    /// 0, or the errno the call failed with.
    pub(crate) status: u32,
    /// The server's binding the request came through, and how far its ring is
    /// consumed (a head report riding on every reply).
    pub(crate) binding: u32,
    pub(crate) head: u64,
}

impl RpcDone {
    pub(crate) const LEN: usize = 32;

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..20].copy_from_slice(&self.status.to_le_bytes());
        out[20..24].copy_from_slice(&self.binding.to_le_bytes());
        out[24..32].copy_from_slice(&self.head.to_le_bytes());
        out
    }

    pub(crate) fn decode(raw: &[u8; Self::LEN]) -> RpcDone {
        let mut r = Reader::new(raw);
        // A 32-byte array always holds these fields.
        RpcDone {
            seq: r.u64().unwrap_or(0),
            len: r.u64().unwrap_or(0),
            status: r.u32().unwrap_or(0),
            binding: r.u32().unwrap_or(0),
            head: r.u64().unwrap_or(0),
        }
    }
}

/// Bytes of a name in messages.
pub(crate) const NAME_LEN: usize = 64;
/// Bytes of one extent in an `Extents` answer.
pub(crate) const EXTENT_LEN: usize = 24;
/// Extents that fit one answer.
pub(crate) const EXTENTS_PER_MSG: usize = (BODY_MAX - 8) / EXTENT_LEN;

/// A message body: encodes into and decodes from the bytes of a message.
pub(crate) trait Body: Sized {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()>;
    fn decode(r: &mut Reader<'_>) -> Option<Self>;
}

impl Body for LmrId {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u64(self.id).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(LmrId { id: r.u64()? })
    }
}

impl Body for Alloc {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u64(self.id)?.u64(self.bytes).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Alloc {
            id: r.u64()?,
            bytes: r.u64()?,
        })
    }
}

impl Body for Lookup {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.namespace)?
            .u32(self.perm)?
            .bytes(&self.name)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Lookup {
            namespace: r.u32()?,
            perm: r.u32()?,
            name: r.array()?,
        })
    }
}

impl Body for Found {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u64(self.id)?
            .u64(self.size)?
            .u32(self.extents)?
            .u32(0)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let found = Found {
            id: r.u64()?,
            size: r.u64()?,
            extents: r.u32()?,
        };
        r.u32()?;
        Some(found)
    }
}

impl Body for ChunksQuery {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u64(self.id)?.u32(self.first)?.u32(0).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let query = ChunksQuery {
            id: r.u64()?,
            first: r.u32()?,
        };
        r.u32()?;
        Some(query)
    }
}

impl Body for Memset {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.master)?
            .u32(self.value)?
            .u64(self.id)?
            .u64(self.addr)?
            .u64(self.len)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Memset {
            master: r.u32()?,
            value: r.u32()?,
            id: r.u64()?,
            addr: r.u64()?,
            len: r.u64()?,
        })
    }
}

impl Body for Copy {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.src_master)?
            .u32(self.dst_master)?
            .u64(self.src_id)?
            .u64(self.src_addr)?;
        w.u64(self.dst_id)?
            .u64(self.dst_addr)?
            .u64(self.len)?
            .u32(self.dst_node)?
            .u32(0)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let copy = Copy {
            src_master: r.u32()?,
            dst_master: r.u32()?,
            src_id: r.u64()?,
            src_addr: r.u64()?,
            dst_id: r.u64()?,
            dst_addr: r.u64()?,
            len: r.u64()?,
            dst_node: r.u32()?,
        };
        r.u32()?;
        Some(copy)
    }
}

impl Body for Grant {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u64(self.id)?.u32(self.node)?.u32(self.perm).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Grant {
            id: r.u64()?,
            node: r.u32()?,
            perm: r.u32()?,
        })
    }
}

impl Body for LockReq {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.master)?
            .u32(self.op)?
            .u64(self.id)?
            .u64(self.addr)?
            .u64(self.value)?
            .u32(self.token)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(LockReq {
            master: r.u32()?,
            op: r.u32()?,
            id: r.u64()?,
            addr: r.u64()?,
            value: r.u64()?,
            token: r.u32()?,
        })
    }
}

impl Body for LockWake {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.token)?.u32(self.outcome as u32).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(LockWake {
            token: r.u32()?,
            outcome: r.u32()? as i32,
        })
    }
}

impl Body for RpcBind {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.id)?.u32(0).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let bind = RpcBind { id: r.u32()? };
        r.u32()?;
        Some(bind)
    }
}

impl Body for Bound {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.binding)?.u32(self.count)?.u64(self.head)?;
        for &(addr, len) in self.chunks.get(..self.count as usize)? {
            w.u64(addr)?.u64(len)?;
        }
        Some(())
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let mut bound = Bound {
            binding: r.u32()?,
            count: r.u32()?,
            head: r.u64()?,
            chunks: [(0, 0); RING_CHUNKS],
        };
        for chunk in bound.chunks.get_mut(..bound.count as usize)? {
            *chunk = (r.u64()?, r.u64()?);
        }
        Some(bound)
    }
}

impl Body for RpcUnbind {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.binding)?.u32(self.id).map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(RpcUnbind {
            binding: r.u32()?,
            id: r.u32()?,
        })
    }
}

/// LMR ids one `ReleaseMany` message carries at most.
pub(crate) const IDS_PER_MSG: usize = (BODY_MAX - 8) / 8;

/// Encodes up to `IDS_PER_MSG` LMR ids taken from `ids` into `buf` (the rest stay in
/// `ids`); returns the body length, None when `buf` is shorter than `BODY_MAX`.
pub(crate) fn encode_ids(buf: &mut [u8], ids: &mut impl Iterator<Item = u64>) -> Option<usize> {
    let slots = buf.get_mut(8..8 + 8 * IDS_PER_MSG)?;
    let mut count = 0;
    // `zip` asks `ids` for an id only while a slot is free.
    for (slot, id) in slots.chunks_exact_mut(8).zip(ids) {
        slot.copy_from_slice(&id.to_le_bytes());
        count += 1;
    }
    Writer::new(buf).u32(count as u32)?.u32(0)?;
    Some(8 + 8 * count)
}

/// Decodes a list of LMR ids, each passed to `each`; None when malformed (before
/// any id is passed on).
pub(crate) fn decode_ids(body: &[u8], mut each: impl FnMut(u64)) -> Option<usize> {
    let mut r = Reader::new(body);
    let count = r.u32()? as usize;
    r.u32()?;
    if count > IDS_PER_MSG || body.len() != 8 + 8 * count {
        return None;
    }
    for _ in 0..count {
        each(r.u64()?);
    }
    Some(count)
}

/// Encodes `extents` (node, addr, len) as an `Extents` answer into `buf`;
/// returns the body length. At most `EXTENTS_PER_MSG` fit.
pub(crate) fn encode_extents(buf: &mut [u8], extents: &[(u32, u64, u64)]) -> Option<usize> {
    let mut w = Writer::new(buf);
    w.u32(u32::try_from(extents.len()).ok()?)?.u32(0)?;
    for &(node, addr, len) in extents {
        w.u32(node)?.u32(0)?.u64(addr)?.u64(len)?;
    }
    Some(w.len())
}

/// Decodes an `Extents` answer into (node, addr, len) triples passed to `each`.
pub(crate) fn decode_extents(
    body: &[u8],
    mut each: impl FnMut(u32, u64, u64) -> Option<()>,
) -> Option<usize> {
    let mut r = Reader::new(body);
    let count = r.u32()? as usize;
    r.u32()?;
    if count > EXTENTS_PER_MSG {
        return None;
    }
    for _ in 0..count {
        let node = r.u32()?;
        r.u32()?;
        each(node, r.u64()?, r.u64()?)?;
    }
    Some(count)
}

/// Header of a message in a mailbox slot (little endian on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// `MsgKind` of the request (echoed in the response).
    pub(crate) kind: u16,
    /// 0, or the errno the responder failed the request with.
    pub(crate) status: u16,
    /// Body bytes following the header.
    pub(crate) len: u32,
    /// Matches a response to the request it answers.
    pub(crate) seq: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..2].copy_from_slice(&self.kind.to_le_bytes());
        out[2..4].copy_from_slice(&self.status.to_le_bytes());
        out[4..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out
    }

    /// Decodes a header a peer wrote; `Err(seq)` if its body would overflow the slot,
    /// so that the request can still be answered with an error.
    pub(crate) fn decode(bytes: &[u8; HEADER_LEN]) -> core::result::Result<Header, u64> {
        let header = Header {
            kind: u16::from_le_bytes([bytes[0], bytes[1]]),
            status: u16::from_le_bytes([bytes[2], bytes[3]]),
            len: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            seq: u64::from_le_bytes([
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14],
                bytes[15],
            ]),
        };
        if header.len as usize <= BODY_MAX {
            Ok(header)
        } else {
            Err(header.seq)
        }
    }

    pub(crate) fn msg_kind(&self) -> Option<MsgKind> {
        MsgKind::from_wire(self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_round_trips_every_kind_at_payload_edges() {
        for kind in [
            ImmKind::Request,
            ImmKind::Response,
            ImmKind::RpcRequest,
            ImmKind::RpcReply,
            ImmKind::RpcHead,
        ] {
            for payload in [0, 1, 0x1234_567, PAYLOAD_MAX] {
                let imm = encode_imm(kind, payload).unwrap();
                assert_eq!(decode_imm(imm), Some((kind, payload)));
            }
        }
    }

    #[test]
    fn imm_rejects_payload_overflow_and_unknown_kinds() {
        assert_eq!(encode_imm(ImmKind::Request, PAYLOAD_MAX + 1), None);
        assert_eq!(decode_imm(0), None);
        assert_eq!(decode_imm(0xF000_0000), None);
        assert_eq!(decode_imm(6 << PAYLOAD_BITS), None);
    }

    #[test]
    fn slots_tile_the_mailbox() {
        assert_eq!(request_offset(0), 0);
        assert_eq!(response_offset(0), SLOTS * SLOT_SIZE);
        assert_eq!(response_offset(SLOTS - 1) + SLOT_SIZE, done_offset(0));
        assert!(request_offset(SLOTS - 1) + SLOT_SIZE <= response_offset(0));
        assert!(SLOTS as u32 <= PAYLOAD_MAX);
    }

    #[test]
    fn header_round_trips() {
        let h = Header {
            kind: 1,
            status: 22,
            len: BODY_MAX as u32,
            seq: u64::MAX - 3,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert_eq!(h.msg_kind(), Some(MsgKind::Echo));
        assert_eq!(Header { kind: 10, ..h }.msg_kind(), Some(MsgKind::Free));
        assert_eq!(Header { kind: 11, ..h }.msg_kind(), Some(MsgKind::Forget));
        assert_eq!(Header { kind: 14, ..h }.msg_kind(), Some(MsgKind::RpcHead));
        assert_eq!(Header { kind: 16, ..h }.msg_kind(), Some(MsgKind::LockWake));
        assert_eq!(
            Header { kind: 17, ..h }.msg_kind(),
            Some(MsgKind::ReleaseMany)
        );
        assert_eq!(Header { kind: 18, ..h }.msg_kind(), None);
    }

    fn round_trip<T: Body + core::fmt::Debug + PartialEq>(value: T) {
        let mut buf = [0u8; BODY_MAX];
        let mut w = Writer::new(&mut buf);
        value.encode(&mut w).unwrap();
        let len = w.len();
        assert_eq!(T::decode(&mut Reader::new(&buf[..len])), Some(value));
        for short in 0..len {
            assert_eq!(
                T::decode(&mut Reader::new(&buf[..short])),
                None,
                "truncated to {short}"
            );
        }
    }

    #[test]
    fn id_lists_round_trip_and_reject_bad_counts() {
        let ids: Vec<u64> = (0..IDS_PER_MSG as u64 + 2)
            .map(|i| i * 0x1_0000_0001)
            .collect();
        let mut buf = [0u8; BODY_MAX];
        let mut left = ids.iter().copied();
        let len = encode_ids(&mut buf, &mut left).unwrap();
        assert!(len <= BODY_MAX);
        let mut got = Vec::new();
        assert_eq!(
            decode_ids(&buf[..len], |id| got.push(id)),
            Some(IDS_PER_MSG)
        );
        assert_eq!(got, ids[..IDS_PER_MSG]);
        assert_eq!(
            left.collect::<Vec<_>>(),
            ids[IDS_PER_MSG..],
            "more than fit stay for the next message"
        );
        assert_eq!(
            encode_ids(&mut buf[..BODY_MAX - 1], &mut [1u64].into_iter()),
            None,
            "buffer too short"
        );
        let len = encode_ids(&mut buf, &mut [7u64, 8].into_iter()).unwrap();
        assert_eq!(
            decode_ids(&buf[..len - 1], |_| panic!("nothing passed on")),
            None,
            "truncated"
        );
        assert_eq!(
            decode_ids(&buf[..len - 8], |_| panic!("nothing passed on")),
            None,
            "count says 2, 1 present"
        );
        let mut longer = [0u8; 32];
        longer[..len].copy_from_slice(&buf[..len]);
        assert_eq!(
            decode_ids(&longer, |_| panic!("nothing passed on")),
            None,
            "trailing bytes"
        );
        buf[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_ids(&buf, |_| panic!("nothing passed on")),
            None,
            "count beyond the limit"
        );
        assert_eq!(decode_ids(&[], |_| ()), None);
    }

    #[test]
    fn lmr_bodies_round_trip_and_reject_truncation() {
        round_trip(LmrId { id: u64::MAX });
        round_trip(Alloc {
            id: 7,
            bytes: 1 << 40,
        });
        let mut name = [0u8; NAME_LEN];
        name[..4].copy_from_slice(b"kv:0");
        round_trip(Lookup {
            namespace: 3,
            perm: 7,
            name,
        });
        round_trip(Found {
            id: 9,
            size: 12345,
            extents: 256,
        });
        round_trip(ChunksQuery { id: 1, first: 160 });
        round_trip(Memset {
            master: 2,
            value: 0xAB,
            id: 5,
            addr: 0xffff_8880_0000_1000,
            len: 4 << 20,
        });
        round_trip(Copy {
            src_master: 1,
            dst_master: 2,
            src_id: 3,
            src_addr: 4,
            dst_id: 5,
            dst_addr: 6,
            len: 7,
            dst_node: 8,
        });
        round_trip(Grant {
            id: 4,
            node: 0xFFFF_FFFF,
            perm: 1,
        });
        round_trip(LockReq {
            master: 1,
            op: LOCK_OP_RELEASE,
            id: 2,
            addr: 0xffff_8880_0000_1008,
            value: 1 << 63 | 5,
            token: 9,
        });
        round_trip(LockWake {
            token: u32::MAX,
            outcome: -43,
        });
    }

    #[test]
    fn rpc_bodies_round_trip_and_reject_forged_counts() {
        round_trip(RpcBind { id: u32::MAX });
        round_trip(RpcUnbind {
            binding: 1023,
            id: 7,
        });
        let mut chunks = [(0, 0); RING_CHUNKS];
        chunks[0] = (0xffff_8880_0040_0000, 4 << 20);
        chunks[1] = (0xffff_8880_0080_0000, 4 << 20);
        round_trip(Bound {
            binding: 3,
            head: 1 << 33,
            count: 2,
            chunks,
        });
        round_trip(Bound {
            binding: 0,
            head: 0,
            count: RING_CHUNKS as u32,
            chunks: [(1, 2); RING_CHUNKS],
        });
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        w.u32(0)
            .unwrap()
            .u32(RING_CHUNKS as u32 + 1)
            .unwrap()
            .u64(0)
            .unwrap();
        assert_eq!(
            Bound::decode(&mut Reader::new(&buf)),
            None,
            "more chunks than a ring has"
        );
        let done = RpcDone {
            seq: 1 << 50,
            len: 4 << 20,
            status: 75,
            binding: 1023,
            head: 12345 * 64,
        };
        assert_eq!(RpcDone::decode(&done.encode()), done);
    }

    #[test]
    fn ring_immediates_carry_binding_and_offset() {
        let last = crate::rpc::ring::RING_BYTES - crate::rpc::ring::RECORD_ALIGN;
        for (binding, offset) in [(0, 0), (BINDINGS - 1, last), (5, 64 * 1000)] {
            let payload = encode_ring_imm(binding, offset).unwrap();
            assert!(payload <= PAYLOAD_MAX);
            assert_eq!(decode_ring_imm(payload), (binding, offset));
        }
        assert_eq!(encode_ring_imm(BINDINGS, 0), None);
        assert_eq!(encode_ring_imm(0, 65), None, "unaligned");
        assert_eq!(encode_ring_imm(0, 64 << OFFSET_BITS), None);
    }

    #[test]
    fn completion_records_follow_the_slots() {
        assert_eq!(done_offset(0), response_offset(SLOTS - 1) + SLOT_SIZE);
        assert_eq!(done_offset(CALL_SLOTS - 1) + DONE_SIZE, MAILBOX_SIZE);
        assert!(RpcDone::LEN <= DONE_SIZE);
    }

    #[test]
    fn extents_fill_one_message_and_bound_their_count() {
        let many: [(u32, u64, u64); EXTENTS_PER_MSG] =
            core::array::from_fn(|i| (i as u32 % 3, i as u64 * 4096, 4096));
        let mut buf = [0u8; BODY_MAX];
        let len = encode_extents(&mut buf, &many).unwrap();
        assert!(len <= BODY_MAX);
        let mut seen = 0;
        assert_eq!(
            decode_extents(&buf[..len], |node, addr, size| {
                assert_eq!((node, addr, size), many[seen]);
                seen += 1;
                Some(())
            }),
            Some(EXTENTS_PER_MSG)
        );
        let too_many: [(u32, u64, u64); EXTENTS_PER_MSG + 1] = [(0, 0, 0); EXTENTS_PER_MSG + 1];
        assert_eq!(
            encode_extents(&mut buf, &too_many),
            None,
            "does not fit a slot"
        );
        buf[0..4].copy_from_slice(&(EXTENTS_PER_MSG as u32 + 1).to_le_bytes());
        assert_eq!(
            decode_extents(&buf, |_, _, _| Some(())),
            None,
            "forged count"
        );
        assert_eq!(
            decode_extents(&buf[..len - 1], |_, _, _| Some(())),
            None,
            "truncated"
        );
    }

    #[test]
    fn header_rejects_bodies_larger_than_a_slot() {
        let h = Header {
            kind: 1,
            status: 0,
            len: BODY_MAX as u32 + 1,
            seq: 77,
        };
        assert_eq!(
            Header::decode(&h.encode()),
            Err(77),
            "the seq survives to answer with an error"
        );
        let mut bytes = h.encode();
        bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Header::decode(&bytes), Err(77));
    }
}
