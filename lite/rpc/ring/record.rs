// SPDX-License-Identifier: GPL-2.0
//! The record written into a ring: the layout's constants, [`RecordHeader`], the
//! output runs that follow it, and a record's length and place in the ring.

// The ring's size and granule are part of the wire format: a ring immediate
// carries a record's offset in granules.
pub(crate) use crate::net::wire::{RECORD_ALIGN, RING_BYTES};

/// Bytes of a record header.
pub(crate) const HEADER_LEN: usize = 64;
/// Bytes of one output run in a record.
pub(crate) const RUN_LEN: usize = 16;
/// Largest payload of a request or reply (`LITE_RPC_MAX_MSG`).
pub(crate) const MAX_MSG: u64 = 4 << 20;
/// Most runs an output buffer of `MAX_MSG` bytes can take (one per page, plus
/// one for a buffer that does not start on a page boundary).
pub(crate) const MAX_RUNS: u32 = (MAX_MSG / 4096) as u32 + 1;

/// Magic of a record header ("RPC1").
pub(crate) const RECORD_MAGIC: u32 = 0x5250_4331;
/// `RecordHeader::flags`: a one-way message, nobody waits for a reply.
pub(crate) const FLAG_ONEWAY: u32 = 1;
/// `RecordHeader::flags`: the client could not write the record's payload (its
/// caller was killed meanwhile): the server consumes the room and serves nothing,
/// so that the ring's positions stay the same on both sides.
pub(crate) const FLAG_ABANDONED: u32 = 2;

const _: () = assert!(2 * MAX_RECORD <= RING_BYTES - RECORD_ALIGN);
const _: () = assert!(RING_BYTES % RECORD_ALIGN == 0);

/// Place of logical position `pos` in a ring of `size` bytes (never 0 in use).
pub(crate) fn ring_offset(pos: u64, size: u64) -> u64 {
    pos.checked_rem(size).unwrap_or(0)
}

/// Bytes a record of `nruns` output runs and `len` payload bytes takes in the ring.
pub(crate) const fn record_len(nruns: u32, len: u64) -> u64 {
    let raw = HEADER_LEN as u64 + nruns as u64 * RUN_LEN as u64 + len;
    raw.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// The largest record.
pub(crate) const MAX_RECORD: u64 = record_len(MAX_RUNS, MAX_MSG);

/// Header of a record in the ring (little endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub(crate) flags: u32,
    /// Client call slot the reply completes (requests only).
    pub(crate) slot: u32,
    /// Logical position of this record.
    pub(crate) start: u64,
    /// Bytes skipped before `start` (to the end of the previous lap).
    pub(crate) pad: u64,
    /// Output runs that follow the header.
    pub(crate) nruns: u32,
    pub(crate) reserved: u32,
    /// Payload bytes.
    pub(crate) len: u64,
    /// Client's call sequence, echoed in the reply.
    pub(crate) seq: u64,
    /// Sum of the output runs: the most reply bytes the caller takes.
    pub(crate) out_cap: u64,
}

impl RecordHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let fields: [(usize, &[u8]); 10] = [
            (0, &RECORD_MAGIC.to_le_bytes()),
            (4, &self.flags.to_le_bytes()),
            (8, &self.slot.to_le_bytes()),
            (12, &self.nruns.to_le_bytes()),
            (16, &self.start.to_le_bytes()),
            (24, &self.pad.to_le_bytes()),
            (32, &self.len.to_le_bytes()),
            (40, &self.seq.to_le_bytes()),
            (48, &self.out_cap.to_le_bytes()),
            (56, &self.reserved.to_le_bytes()),
        ];
        for (at, bytes) in fields {
            out[at..at + bytes.len()].copy_from_slice(bytes);
        }
        out
    }

    /// Decodes a header a peer wrote; `None` unless it is well-formed: magic,
    /// sizes within the limits, runs only for requests that expect a reply.
    pub(crate) fn decode(raw: &[u8; HEADER_LEN]) -> Option<RecordHeader> {
        let u32_at =
            |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[at..at + 8]);
            u64::from_le_bytes(b)
        };
        if u32_at(0) != RECORD_MAGIC {
            return None;
        }
        let header = RecordHeader {
            flags: u32_at(4),
            slot: u32_at(8),
            nruns: u32_at(12),
            start: u64_at(16),
            pad: u64_at(24),
            len: u64_at(32),
            seq: u64_at(40),
            out_cap: u64_at(48),
            reserved: u32_at(56),
        };
        let oneway = header.flags & FLAG_ONEWAY != 0;
        let sane = header.flags & !(FLAG_ONEWAY | FLAG_ABANDONED) == 0
            && header.len <= MAX_MSG
            && header.nruns <= MAX_RUNS
            && header.out_cap <= MAX_MSG
            && (!oneway || (header.nruns == 0 && header.out_cap == 0))
            && header.start % RECORD_ALIGN == 0
            && header.pad < RING_BYTES;
        sane.then_some(header)
    }

    /// Bytes of the whole record.
    pub(crate) fn record_len(&self) -> u64 {
        record_len(self.nruns, self.len)
    }

    /// Offset of the payload in the record.
    pub(crate) fn payload_offset(&self) -> u64 {
        HEADER_LEN as u64 + self.nruns as u64 * RUN_LEN as u64
    }
}

/// Encodes an output run of a record: `len` bytes at `addr` of the caller,
/// which the server reaches with `rkey`.
pub(crate) fn encode_run(addr: u64, len: u32, rkey: u32) -> [u8; RUN_LEN] {
    let mut out = [0u8; RUN_LEN];
    out[..8].copy_from_slice(&addr.to_le_bytes());
    out[8..12].copy_from_slice(&len.to_le_bytes());
    out[12..].copy_from_slice(&rkey.to_le_bytes());
    out
}

/// Decodes an output run (address, length, rkey); `None` for an empty one.
pub(crate) fn decode_run(raw: &[u8; RUN_LEN]) -> Option<(u64, u32, u32)> {
    let mut addr = [0u8; 8];
    addr.copy_from_slice(&raw[..8]);
    let len = u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]);
    let rkey = u32::from_le_bytes([raw[12], raw[13], raw[14], raw[15]]);
    (len > 0).then_some((u64::from_le_bytes(addr), len, rkey))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_forgeries() {
        let h = RecordHeader {
            flags: 0,
            slot: 63,
            start: 1 << 40,
            pad: 4096,
            nruns: MAX_RUNS,
            reserved: 0,
            len: MAX_MSG,
            seq: 9,
            out_cap: MAX_MSG,
        };
        assert_eq!(RecordHeader::decode(&h.encode()), Some(h));
        let oneway = RecordHeader {
            flags: FLAG_ONEWAY,
            nruns: 0,
            out_cap: 0,
            ..h
        };
        assert_eq!(RecordHeader::decode(&oneway.encode()), Some(oneway));
        for flags in [FLAG_ABANDONED, FLAG_ABANDONED | FLAG_ONEWAY] {
            let abandoned = RecordHeader { flags, ..oneway };
            assert_eq!(RecordHeader::decode(&abandoned.encode()), Some(abandoned));
        }
        for bad in [
            RecordHeader {
                len: MAX_MSG + 1,
                ..h
            },
            RecordHeader {
                nruns: MAX_RUNS + 1,
                ..h
            },
            RecordHeader {
                out_cap: MAX_MSG + 1,
                ..h
            },
            RecordHeader { flags: 4, ..h },
            RecordHeader {
                flags: FLAG_ONEWAY,
                ..h
            },
            RecordHeader { start: 65, ..h },
            RecordHeader {
                pad: RING_BYTES,
                ..h
            },
        ] {
            assert_eq!(RecordHeader::decode(&bad.encode()), None, "{bad:?}");
        }
        let mut raw = h.encode();
        raw[0] ^= 1;
        assert_eq!(RecordHeader::decode(&raw), None, "magic");
    }

    #[test]
    fn records_are_aligned_and_the_largest_fits_twice() {
        assert_eq!(record_len(0, 0), 64);
        assert_eq!(record_len(0, 1), 128);
        assert_eq!(record_len(1, 8), 128);
        assert_eq!(record_len(2, 4096) % RECORD_ALIGN, 0);
        assert_eq!(RING_BYTES / RECORD_ALIGN, 132_096);
    }

    #[test]
    fn runs_round_trip() {
        assert_eq!(
            decode_run(&encode_run(0xffff_8880_1234_5000, 4096, 0xabcd_ef12)),
            Some((0xffff_8880_1234_5000, 4096, 0xabcd_ef12))
        );
        assert_eq!(decode_run(&encode_run(1, 0, 2)), None);
    }
}
