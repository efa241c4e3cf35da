// SPDX-License-Identifier: GPL-2.0
//! RPC rings, the pure part: how a client kernel reserves room in the ring a
//! server kernel keeps for it, how the server tracks what it has consumed, the
//! record header written into the ring, and how a reply is cut to fit the
//! caller's output buffer.
//!
//! Pure logic (core only): compiled into the module and unit-tested on the host.
//!
//! Positions are *logical*: a u64 that only grows; a position's place in the ring
//! is `pos % size`. A record never wraps the end of the ring: when it does not
//! fit before the end, the client skips to the next lap and says so in the
//! record's `pad`, so the server knows the skipped bytes are free. Records may
//! arrive and be consumed out of order (several client threads, K QPs); the
//! server's head only passes a record once everything before it is consumed.
//!
//! Record layout (64-byte aligned): [`RecordHeader`] (64 bytes), then `nruns`
//! runs of the caller's output buffer (16 bytes each: DMA address, length), then
//! the payload.

/// Alignment and granule of records (the IMM carries offsets in these units).
pub(crate) const RECORD_ALIGN: u64 = 64;
/// Bytes of a record header.
pub(crate) const HEADER_LEN: usize = 64;
/// Bytes of one output run in a record.
pub(crate) const RUN_LEN: usize = 16;
/// Largest payload of a request or reply (`LITE_RPC_MAX_MSG`).
pub(crate) const MAX_MSG: u64 = 4 << 20;
/// Most runs an output buffer of `MAX_MSG` bytes can take (one per page, plus
/// one for a buffer that does not start on a page boundary).
pub(crate) const MAX_RUNS: u32 = (MAX_MSG / 4096) as u32 + 1;
/// Bytes of every ring: room for two records of the largest size, so that an
/// empty ring always takes the largest record wherever its tail is.
pub(crate) const RING_BYTES: u64 = 8 << 20 | 64 << 10;
/// A head report is pushed to the client once this much was consumed unreported.
pub(crate) const REPORT_EVERY: u64 = RING_BYTES / 4;
/// Magic of a record header ("RPC1").
pub(crate) const RECORD_MAGIC: u32 = 0x5250_4331;
/// `RecordHeader::flags`: a one-way message, nobody waits for a reply.
pub(crate) const FLAG_ONEWAY: u32 = 1;

const _: () = assert!(2 * MAX_RECORD <= RING_BYTES - RECORD_ALIGN);
const _: () = assert!(RING_BYTES.is_multiple_of(RECORD_ALIGN));

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
        let oneway = header.flags == FLAG_ONEWAY;
        let sane = (header.flags == 0 || oneway)
            && header.len <= MAX_MSG
            && header.nruns <= MAX_RUNS
            && header.out_cap <= MAX_MSG
            && (!oneway || (header.nruns == 0 && header.out_cap == 0))
            && header.start.is_multiple_of(RECORD_ALIGN)
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

/// Encodes an output run (DMA address, length) of a record.
pub(crate) fn encode_run(addr: u64, len: u32) -> [u8; RUN_LEN] {
    let mut out = [0u8; RUN_LEN];
    out[..8].copy_from_slice(&addr.to_le_bytes());
    out[8..12].copy_from_slice(&len.to_le_bytes());
    out
}

/// Decodes an output run; `None` for an empty one.
pub(crate) fn decode_run(raw: &[u8; RUN_LEN]) -> Option<(u64, u32)> {
    let mut addr = [0u8; 8];
    addr.copy_from_slice(&raw[..8]);
    let len = u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]);
    (len > 0).then_some((u64::from_le_bytes(addr), len))
}

/// Where a reserved record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Logical position of the record.
    pub(crate) start: u64,
    /// Bytes skipped before it.
    pub(crate) pad: u64,
}

/// The client's view of its ring at a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientRing {
    size: u64,
    /// Next free logical position.
    tail: u64,
    /// Everything before this was consumed by the server (as far as we know).
    head: u64,
}

impl ClientRing {
    /// A ring of `size` bytes (a multiple of `RECORD_ALIGN`) whose server reports
    /// `head` consumed.
    pub(crate) fn new(size: u64, head: u64) -> ClientRing {
        ClientRing {
            size,
            tail: head,
            head,
        }
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Reserves `len` bytes (a record length); `None` when there is no room until
    /// the server consumes more. The ring never fills completely, so a reported
    /// head is never ambiguous.
    pub(crate) fn reserve(&mut self, len: u64) -> Option<Reservation> {
        if len == 0 || !len.is_multiple_of(RECORD_ALIGN) || len > self.size {
            return None;
        }
        let at = ring_offset(self.tail, self.size);
        let pad = if at + len > self.size {
            self.size - at
        } else {
            0
        };
        let end = self.tail.checked_add(pad)?.checked_add(len)?;
        if end - self.head > self.size - RECORD_ALIGN {
            return None;
        }
        let start = self.tail + pad;
        self.tail = end;
        Some(Reservation { start, pad })
    }

    /// True when nothing reserved is unconsumed (as far as the client knows).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// The server reports everything before logical `head` consumed. Reports
    /// arrive out of order and from peers: only a forward move within what was
    /// reserved is taken.
    pub(crate) fn set_head(&mut self, head: u64) -> bool {
        if head > self.head && head <= self.tail {
            self.head = head;
            true
        } else {
            false
        }
    }

    /// The logical head a report of ring offset `offset` stands for: the one
    /// position at or after our head, at most our tail, with that offset.
    pub(crate) fn head_from_offset(&self, offset: u64) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let base = self.head - ring_offset(self.head, self.size);
        let mut head = base + offset;
        if head < self.head {
            head += self.size;
        }
        (head <= self.tail).then_some(head)
    }
}

/// Records consumed past the head that cannot be passed yet; more than this many
/// gaps means a peer broke the protocol (a client has at most its call slots of
/// records in flight).
pub(crate) const MAX_GAPS: usize = 128;

/// The server's consumption of one ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerRing {
    size: u64,
    /// Everything before this is consumed.
    head: u64,
    /// What the client was last told.
    reported: u64,
    /// Consumed ranges past `head`, unordered, merged when adjacent.
    done: [(u64, u64); MAX_GAPS],
    count: usize,
}

/// Why a record is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingError {
    /// The record does not lie where the immediate said, or outside the window
    /// the client may use.
    Misplaced,
    /// Too many records consumed out of order.
    TooManyGaps,
}

impl ServerRing {
    pub(crate) fn new(size: u64) -> ServerRing {
        ServerRing {
            size,
            head: 0,
            reported: 0,
            done: [(0, 0); MAX_GAPS],
            count: 0,
        }
    }

    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Checks that record `header`, announced at ring offset `offset`, lies inside
    /// the ring and the window the client may have reserved.
    pub(crate) fn check(&self, offset: u64, header: &RecordHeader) -> Result<(), RingError> {
        let len = header.record_len();
        let from = header
            .start
            .checked_sub(header.pad)
            .ok_or(RingError::Misplaced)?;
        let end = header.start.checked_add(len).ok_or(RingError::Misplaced)?;
        let placed = ring_offset(header.start, self.size) == offset && offset + len <= self.size;
        let in_window = from >= self.head && end - self.head <= self.size;
        if placed && in_window {
            Ok(())
        } else {
            Err(RingError::Misplaced)
        }
    }

    /// Marks record `header` (checked) consumed, padding included; moves the head
    /// over everything consumed in a row.
    pub(crate) fn consume(&mut self, header: &RecordHeader) -> Result<(), RingError> {
        let from = header.start - header.pad;
        let end = header.start + header.record_len();
        if from == self.head {
            self.head = end;
        } else {
            self.insert(from, end)?;
        }
        while let Some(i) = self.done[..self.count]
            .iter()
            .position(|&(f, _)| f == self.head)
        {
            self.head = self.done[i].1;
            self.count -= 1;
            self.done[i] = self.done[self.count];
        }
        Ok(())
    }

    fn insert(&mut self, from: u64, end: u64) -> Result<(), RingError> {
        for range in self.done[..self.count].iter_mut() {
            if range.1 == from {
                range.1 = end;
                return Ok(());
            }
            if range.0 == end {
                range.0 = from;
                return Ok(());
            }
        }
        if self.count == MAX_GAPS {
            return Err(RingError::TooManyGaps);
        }
        self.done[self.count] = (from, end);
        self.count += 1;
        Ok(())
    }

    /// The head to push to the client, once enough was consumed since the last
    /// report (replies carry the head anyway: see `reported`).
    pub(crate) fn report_due(&mut self) -> Option<u64> {
        (self.head - self.reported >= REPORT_EVERY).then(|| {
            self.reported = self.head;
            self.head
        })
    }

    /// The client learnt `head` (piggybacked on a reply).
    pub(crate) fn reported(&mut self, head: u64) {
        self.reported = self.reported.max(head);
    }
}

/// Walks local DMA runs in order, handing out pieces that fit remote runs.
pub(crate) struct RunCursor<'a> {
    runs: &'a [(u64, usize)],
    index: usize,
    offset: usize,
}

impl<'a> RunCursor<'a> {
    pub(crate) fn new(runs: &'a [(u64, usize)]) -> Self {
        RunCursor {
            runs,
            index: 0,
            offset: 0,
        }
    }

    /// The next contiguous piece of at most `max` bytes; `None` when the runs are
    /// exhausted or `max` is 0.
    pub(crate) fn next_piece(&mut self, max: usize) -> Option<(u64, usize)> {
        while let Some(&(addr, len)) = self.runs.get(self.index) {
            if self.offset < len {
                if max == 0 {
                    return None;
                }
                let take = (len - self.offset).min(max);
                let piece = (addr + self.offset as u64, take);
                self.offset += take;
                return Some(piece);
            }
            self.index += 1;
            self.offset = 0;
        }
        None
    }
}

/// Pairs `len` bytes of local runs with the remote runs they go to, in order:
/// yields (local address, bytes, remote address) pieces, each contiguous on both
/// sides. Stops early when either side runs out.
pub(crate) fn zip_runs<'a>(
    local: &'a [(u64, usize)],
    remote: &'a [(u64, u32)],
    len: usize,
) -> impl Iterator<Item = (u64, usize, u64)> + 'a {
    let mut cursor = RunCursor::new(local);
    let mut remote = remote.iter();
    let mut current = (0u64, 0usize);
    let mut left = len;
    core::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        if current.1 == 0 {
            let &(addr, run) = remote.next()?;
            current = (addr, run as usize);
        }
        let (local_addr, n) = cursor.next_piece(current.1.min(left))?;
        let piece = (local_addr, n, current.0);
        current = (current.0 + n as u64, current.1 - n);
        left -= n;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(start: u64, pad: u64, nruns: u32, len: u64) -> RecordHeader {
        RecordHeader {
            start,
            pad,
            nruns,
            len,
            out_cap: nruns as u64 * 4096,
            ..Default::default()
        }
    }

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
            RecordHeader { flags: 2, ..h },
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
        assert!(2 * MAX_RECORD < RING_BYTES);
        assert_eq!(RING_BYTES / RECORD_ALIGN, 132_096);
    }

    #[test]
    fn runs_round_trip() {
        assert_eq!(
            decode_run(&encode_run(0xffff_8880_1234_5000, 4096)),
            Some((0xffff_8880_1234_5000, 4096))
        );
        assert_eq!(decode_run(&encode_run(1, 0)), None);
    }

    #[test]
    fn client_pads_to_the_next_lap_instead_of_wrapping() {
        let mut ring = ClientRing::new(1024, 0);
        assert_eq!(ring.reserve(640), Some(Reservation { start: 0, pad: 0 }));
        ring.set_head(640);
        // 384 bytes are left before the end: a 512-byte record starts the next lap.
        assert_eq!(
            ring.reserve(512),
            Some(Reservation {
                start: 1024,
                pad: 384
            })
        );
        assert!(ring.set_head(1536));
        assert!(ring.is_empty());
    }

    #[test]
    fn client_never_fills_the_ring_completely() {
        let mut ring = ClientRing::new(1024, 0);
        assert_eq!(ring.reserve(960), Some(Reservation { start: 0, pad: 0 }));
        assert_eq!(ring.reserve(64), None, "would make head == tail ambiguous");
        assert!(ring.set_head(64));
        assert_eq!(ring.reserve(64), Some(Reservation { start: 960, pad: 0 }));
    }

    #[test]
    fn client_refuses_bad_lengths_and_bad_heads() {
        let mut ring = ClientRing::new(1024, 0);
        assert_eq!(ring.reserve(0), None);
        assert_eq!(ring.reserve(100), None);
        assert_eq!(ring.reserve(2048), None);
        ring.reserve(128).unwrap();
        assert!(!ring.set_head(256), "beyond what was reserved");
        assert!(!ring.set_head(0), "backwards");
        assert!(ring.set_head(128));
    }

    #[test]
    fn head_offsets_map_to_the_one_logical_head_in_the_window() {
        let ring = ClientRing {
            size: 1024,
            head: 1536,
            tail: 2496,
        };
        assert_eq!(ring.head_from_offset(512), Some(1536));
        assert_eq!(ring.head_from_offset(1000), Some(2024));
        assert_eq!(ring.head_from_offset(0), Some(2048));
        assert_eq!(ring.head_from_offset(448), Some(2496));
        assert_eq!(ring.head_from_offset(500), None, "past the tail");
        assert_eq!(ring.head_from_offset(1024), None);
    }

    #[test]
    fn server_head_passes_records_consumed_out_of_order() {
        let mut ring = ServerRing::new(1024);
        let a = header(0, 0, 0, 64 - 64);
        let b = header(64, 0, 1, 32);
        let c = header(192, 0, 0, 100);
        for (h, offset) in [(&a, 0), (&b, 64), (&c, 192)] {
            ring.check(offset, h).unwrap();
        }
        ring.consume(&c).unwrap();
        assert_eq!(ring.head(), 0);
        ring.consume(&b).unwrap();
        assert_eq!(ring.head(), 0);
        ring.consume(&a).unwrap();
        assert_eq!(ring.head(), 192 + c.record_len());
    }

    #[test]
    fn server_frees_the_padding_of_a_wrapped_record() {
        let mut ring = ServerRing::new(1024);
        let first = header(0, 0, 0, 704 - 64);
        ring.consume(&first).unwrap();
        let wrapped = header(1024, 320, 0, 64);
        ring.check(0, &wrapped).unwrap();
        ring.consume(&wrapped).unwrap();
        assert_eq!(ring.head(), 1024 + 128);
    }

    #[test]
    fn server_refuses_misplaced_records() {
        let mut ring = ServerRing::new(1024);
        let h = header(128, 0, 0, 64);
        assert_eq!(
            ring.check(64, &h),
            Err(RingError::Misplaced),
            "not where the immediate said"
        );
        assert_eq!(ring.check(1024 + 128, &h), Err(RingError::Misplaced));
        let across_end = header(960, 0, 0, 128);
        assert_eq!(
            ring.check(960, &across_end),
            Err(RingError::Misplaced),
            "runs over the ring's end"
        );
        let ahead = header(2048, 0, 0, 0);
        assert_eq!(
            ring.check(0, &ahead),
            Err(RingError::Misplaced),
            "beyond the client's window"
        );
        ring.consume(&header(0, 0, 0, 960)).unwrap();
        assert_eq!(
            ring.check(0, &header(0, 0, 0, 0)),
            Err(RingError::Misplaced),
            "behind the head"
        );
        let bad_pad = RecordHeader {
            pad: 2048,
            ..header(1024, 0, 0, 0)
        };
        assert_eq!(ring.check(0, &bad_pad), Err(RingError::Misplaced));
    }

    #[test]
    fn server_bounds_its_gaps() {
        let mut ring = ServerRing::new(1 << 20);
        // Every other record consumed: each is a gap of its own.
        for i in 0..MAX_GAPS as u64 {
            ring.consume(&header(128 + i * 256, 0, 0, 0)).unwrap();
        }
        assert_eq!(
            ring.consume(&header(128 + MAX_GAPS as u64 * 256, 0, 0, 0)),
            Err(RingError::TooManyGaps)
        );
        // Adjacent ones merge and never count twice.
        let mut ring = ServerRing::new(1 << 20);
        for i in 1..10_000u64 {
            ring.consume(&header(i * 64, 0, 0, 0)).unwrap();
        }
        ring.consume(&header(0, 0, 0, 0)).unwrap();
        assert_eq!(ring.head(), 10_000 * 64);
    }

    #[test]
    fn simulated_clients_and_server_agree_over_many_laps() {
        // A deterministic interleaving: a client reserves records of varied sizes,
        // the server consumes them in a shuffled order, reports flow back.
        let size = 64 * 1024;
        let mut client = ClientRing::new(size, 0);
        let mut server = ServerRing::new(size);
        let mut inflight: Vec<RecordHeader> = Vec::new();
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let mut total = 0u64;
        for _ in 0..20_000 {
            let len = next() % 8000;
            let rec = record_len(0, len);
            match client.reserve(rec) {
                Some(r) => {
                    let h = header(r.start, r.pad, 0, len);
                    server.check(r.start % size, &h).unwrap();
                    inflight.push(h);
                    total += rec + r.pad;
                }
                None if inflight.is_empty() => {
                    // What a blocked client does: ask the server for its head.
                    client.set_head(server.head());
                    let r = client.reserve(rec).expect("an empty ring takes any record");
                    let h = header(r.start, r.pad, 0, len);
                    server.check(r.start % size, &h).unwrap();
                    inflight.push(h);
                    total += rec + r.pad;
                }
                None => {}
            }
            if !inflight.is_empty() && (next() % 3 == 0 || inflight.len() > 20) {
                let i = (next() as usize) % inflight.len().min(4);
                let h = inflight.remove(i);
                server.consume(&h).unwrap();
                if next() % 2 == 0 {
                    let head = server.head();
                    assert_eq!(client.head_from_offset(head % size), Some(head));
                    client.set_head(head);
                    server.reported(head);
                }
            }
        }
        for h in inflight.drain(..) {
            server.consume(&h).unwrap();
        }
        assert_eq!(server.head(), total);
        assert!(client.set_head(server.head()) || client.is_empty());
        assert!(client.is_empty());
        assert!(total > 20 * size, "wrapped many times");
    }

    #[test]
    fn reports_are_pushed_every_quarter_ring() {
        let mut ring = ServerRing::new(RING_BYTES);
        let big = header(0, 0, 0, REPORT_EVERY - 64);
        ring.consume(&big).unwrap();
        assert_eq!(ring.report_due(), Some(REPORT_EVERY));
        assert_eq!(ring.report_due(), None);
        let small = header(REPORT_EVERY, 0, 0, 0);
        ring.consume(&small).unwrap();
        ring.reported(REPORT_EVERY + 64);
        assert_eq!(ring.report_due(), None);
    }

    #[test]
    fn zipped_runs_cover_both_sides_in_order() {
        let local = [(1000u64, 6000usize), (20_000, 3000)];
        let remote = [(0x10_000u64, 4096u32), (0x50_000, 4096), (0x90_000, 4096)];
        let pieces: Vec<_> = zip_runs(&local, &remote, 9000).collect();
        assert_eq!(
            pieces,
            vec![
                (1000, 4096, 0x10_000),
                (5096, 1904, 0x50_000),
                (20_000, 2192, 0x50_000 + 1904),
                (22_192, 808, 0x90_000)
            ]
        );
        assert_eq!(pieces.iter().map(|p| p.1).sum::<usize>(), 9000);
        assert_eq!(zip_runs(&local, &remote, 0).count(), 0);
        let short: Vec<_> = zip_runs(&local, &remote[..1], 9000).collect();
        assert_eq!(
            short,
            vec![(1000, 4096, 0x10_000)],
            "stops where the remote runs end"
        );
    }

    #[test]
    fn cursor_cuts_local_runs_to_remote_runs() {
        let local = [(1000u64, 100usize), (5000, 50), (9000, 10)];
        let mut cursor = RunCursor::new(&local);
        assert_eq!(cursor.next_piece(30), Some((1000, 30)));
        assert_eq!(cursor.next_piece(100), Some((1030, 70)));
        assert_eq!(cursor.next_piece(0), None);
        assert_eq!(cursor.next_piece(100), Some((5000, 50)));
        assert_eq!(cursor.next_piece(4), Some((9000, 4)));
        assert_eq!(cursor.next_piece(100), Some((9004, 6)));
        assert_eq!(cursor.next_piece(100), None);
    }
}
