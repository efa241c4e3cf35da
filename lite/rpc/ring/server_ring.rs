// SPDX-License-Identifier: GPL-2.0
//! The server side: its consumption of one ring ([`ServerRing`]), the records it
//! refuses ([`RingError`]), the gaps left by records consumed out of order, and
//! when it reports its head to the client.

use super::{ring_offset, RecordHeader, RING_BYTES};

/// A head report is pushed to the client once this much was consumed unreported.
pub(crate) const REPORT_EVERY: u64 = RING_BYTES / 4;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::ring::{record_len, ClientRing};

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
}
