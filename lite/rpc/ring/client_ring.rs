// SPDX-License-Identifier: GPL-2.0
//! The client side: its view of its ring at a server ([`ClientRing`]), where it
//! reserves room for a record ([`Reservation`]) and learns how far the server
//! consumed.

use super::{ring_offset, RECORD_ALIGN};

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
        if len == 0 || len % RECORD_ALIGN != 0 || len > self.size {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
