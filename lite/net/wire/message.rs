// SPDX-License-Identifier: GPL-2.0
//! What a message asks for (`MsgKind`), its body's little-endian `Writer` and
//! `Reader`, and the `Body` trait every body implements.

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
    /// To a holder, under `atomics=holder`: an atomic on a held word
    /// ([`WordAtomic`] -> the old value).
    Atomic = 18,
}

impl MsgKind {
    pub(super) fn from_wire(kind: u16) -> Option<MsgKind> {
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
            18 => MsgKind::Atomic,
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

/// A message body: encodes into and decodes from the bytes of a message.
pub(crate) trait Body: Sized {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()>;
    fn decode(r: &mut Reader<'_>) -> Option<Self>;
}
