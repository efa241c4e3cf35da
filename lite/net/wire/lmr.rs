// SPDX-License-Identifier: GPL-2.0
//! LMR request and answer bodies, lists of LMR ids, and extents.

use super::message::{Body, Reader, Writer};
use super::slots::BODY_MAX;

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

/// `WordAtomic` op: add `operand` to the word.
pub(crate) const ATOMIC_FETCH_ADD: u32 = 1;
/// `WordAtomic` op: the word becomes `swap` if it is `operand`.
pub(crate) const ATOMIC_COMPARE_SWAP: u32 = 2;

/// `WordAtomic`: an `ATOMIC_*` op on the 8-byte word at `addr`, held for LMR
/// (`master`, `id`), executed by the holder's CPU (`atomics=holder`); answered with
/// the word's old value, 8 bytes little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordAtomic {
    pub(crate) master: u32,
    pub(crate) op: u32,
    pub(crate) id: u64,
    pub(crate) addr: u64,
    pub(crate) operand: u64,
    pub(crate) swap: u64,
}

/// `Copy`: `len` bytes at `src_addr` held for (`src_master`, `src_id`) go to
/// `dst_addr` of node `dst_node` (under `dst_rkey`), held there for
/// (`dst_master`, `dst_id`).
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
    pub(crate) dst_rkey: u32,
}

/// `Grant`: node `node` (or every node) may map LMR `id` with `perm` from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) id: u64,
    pub(crate) node: u32,
    pub(crate) perm: u32,
}

/// Bytes of a name in messages.
pub(crate) const NAME_LEN: usize = 64;
/// Bytes of one extent in an `Extents` answer.
pub(crate) const EXTENT_LEN: usize = 24;
/// Extents that fit one answer.
pub(crate) const EXTENTS_PER_MSG: usize = (BODY_MAX - 8) / EXTENT_LEN;

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

impl Body for WordAtomic {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.master)?
            .u32(self.op)?
            .u64(self.id)?
            .u64(self.addr)?
            .u64(self.operand)?
            .u64(self.swap)
            .map(drop)
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(WordAtomic {
            master: r.u32()?,
            op: r.u32()?,
            id: r.u64()?,
            addr: r.u64()?,
            operand: r.u64()?,
            swap: r.u64()?,
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
            .u32(self.dst_rkey)
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
            dst_rkey: r.u32()?,
        };
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

/// One extent in an `Extents` answer: `len` bytes at `addr` of node `node`, which
/// peers reach with `rkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WireExtent {
    pub(crate) node: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

/// Encodes `extents` as an `Extents` answer into `buf`; returns the body length.
/// At most `EXTENTS_PER_MSG` fit.
pub(crate) fn encode_extents(buf: &mut [u8], extents: &[WireExtent]) -> Option<usize> {
    let mut w = Writer::new(buf);
    w.u32(u32::try_from(extents.len()).ok()?)?.u32(0)?;
    for e in extents {
        w.u32(e.node)?.u32(e.rkey)?.u64(e.addr)?.u64(e.len)?;
    }
    Some(w.len())
}

/// Decodes an `Extents` answer, each extent passed to `each`.
pub(crate) fn decode_extents(
    body: &[u8],
    mut each: impl FnMut(WireExtent) -> Option<()>,
) -> Option<usize> {
    let mut r = Reader::new(body);
    let count = r.u32()? as usize;
    r.u32()?;
    if count > EXTENTS_PER_MSG {
        return None;
    }
    for _ in 0..count {
        each(WireExtent {
            node: r.u32()?,
            rkey: r.u32()?,
            addr: r.u64()?,
            len: r.u64()?,
        })?;
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::super::lock::{LockReq, LockWake, LOCK_OP_RELEASE};
    use super::super::round_trip::round_trip;
    use super::*;

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
        round_trip(WordAtomic {
            master: 1,
            op: ATOMIC_COMPARE_SWAP,
            id: 3,
            addr: 0xffff_8880_0000_1008,
            operand: u64::MAX,
            swap: 1 << 63,
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
            dst_rkey: 0x1234_5678,
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
    fn extents_fill_one_message_and_bound_their_count() {
        let many: [WireExtent; EXTENTS_PER_MSG] = core::array::from_fn(|i| WireExtent {
            node: i as u32 % 3,
            rkey: 0x100 * i as u32 + 7,
            addr: i as u64 * 4096,
            len: 4096,
        });
        let mut buf = [0u8; BODY_MAX];
        let len = encode_extents(&mut buf, &many).unwrap();
        assert!(len <= BODY_MAX);
        let mut seen = 0;
        assert_eq!(
            decode_extents(&buf[..len], |extent| {
                assert_eq!(extent, many[seen]);
                seen += 1;
                Some(())
            }),
            Some(EXTENTS_PER_MSG)
        );
        let too_many = [WireExtent::default(); EXTENTS_PER_MSG + 1];
        assert_eq!(
            encode_extents(&mut buf, &too_many),
            None,
            "does not fit a slot"
        );
        buf[0..4].copy_from_slice(&(EXTENTS_PER_MSG as u32 + 1).to_le_bytes());
        assert_eq!(decode_extents(&buf, |_| Some(())), None, "forged count");
        assert_eq!(
            decode_extents(&buf[..len - 1], |_| Some(())),
            None,
            "truncated"
        );
    }
}
