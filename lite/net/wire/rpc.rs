// SPDX-License-Identifier: GPL-2.0
//! RPC binding bodies and the completion record a reply ends with.

use super::message::{Body, Reader, Writer};

/// `RpcBind`: the caller wants to call RPC `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RpcBind {
    pub(crate) id: u32,
}

/// Most chunks a ring is made of.
pub(crate) const RING_CHUNKS: usize = 16;

/// Answer to `RpcBind`: the binding's index at the server and its ring, as
/// physically contiguous chunks (DMA address, bytes, rkey) in ring order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub(crate) binding: u32,
    pub(crate) head: u64,
    pub(crate) count: u32,
    pub(crate) chunks: [(u64, u64, u32); RING_CHUNKS],
}

/// `RpcUnbind` (and `RpcHead`'s question): binding `binding` of the sender, for RPC `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RpcUnbind {
    pub(crate) binding: u32,
    pub(crate) id: u32,
}

/// A successful reply of at most this many bytes follows its completion record
/// in the same write-with-immediate; a larger one is written into the caller's
/// buffer first. The server then waits for nothing, and the reply crosses the
/// network once (a separate write's acknowledgement would cross it again).
pub(crate) const REPLY_INLINE_MAX: usize = super::DONE_SIZE - RpcDone::LEN;

/// An RPC completion record, written into the caller's mailbox after the reply
/// (or with it, when it is at most `REPLY_INLINE_MAX` bytes).
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
        for &(addr, len, rkey) in self.chunks.get(..self.count as usize)? {
            w.u64(addr)?.u32(u32::try_from(len).ok()?)?.u32(rkey)?;
        }
        Some(())
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let mut bound = Bound {
            binding: r.u32()?,
            count: r.u32()?,
            head: r.u64()?,
            chunks: [(0, 0, 0); RING_CHUNKS],
        };
        for chunk in bound.chunks.get_mut(..bound.count as usize)? {
            *chunk = (r.u64()?, r.u32()?.into(), r.u32()?);
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

#[cfg(test)]
mod tests {
    use super::super::round_trip::round_trip;
    use super::*;

    #[test]
    fn rpc_bodies_round_trip_and_reject_forged_counts() {
        round_trip(RpcBind { id: u32::MAX });
        round_trip(RpcUnbind {
            binding: 1023,
            id: 7,
        });
        let mut chunks = [(0, 0, 0); RING_CHUNKS];
        chunks[0] = (0xffff_8880_0040_0000, 4 << 20, 0x1234_56ab);
        chunks[1] = (0xffff_8880_0080_0000, 4 << 20, 0x1234_57cd);
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
            chunks: [(1, 2, 3); RING_CHUNKS],
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
}
