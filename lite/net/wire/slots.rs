// SPDX-License-Identifier: GPL-2.0
//! The mailbox: request and response slots, RPC completion records, and the
//! header of a message in a slot.

use super::message::MsgKind;

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
/// Bytes of an RPC completion record slot: the 32-byte record, then a reply of
/// up to a page that rides in it (`REPLY_INLINE_MAX`). A larger reply needs a
/// key to the caller's buffer, registered for that call alone, which costs more
/// than the copy of a page.
pub(crate) const DONE_SIZE: usize = 32 + 4096;
/// Bytes of one mailbox (request and response slots, RPC completion records).
pub(crate) const MAILBOX_SIZE: usize = 2 * SLOTS * SLOT_SIZE + CALL_SLOTS * DONE_SIZE;

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
    use super::super::{RpcDone, PAYLOAD_MAX, REPLY_INLINE_MAX};
    use super::*;

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
        assert_eq!(Header { kind: 18, ..h }.msg_kind(), Some(MsgKind::Atomic));
        assert_eq!(Header { kind: 19, ..h }.msg_kind(), None);
    }

    #[test]
    fn completion_records_follow_the_slots() {
        assert_eq!(done_offset(0), response_offset(SLOTS - 1) + SLOT_SIZE);
        assert_eq!(done_offset(CALL_SLOTS - 1) + DONE_SIZE, MAILBOX_SIZE);
        assert_eq!(RpcDone::LEN + REPLY_INLINE_MAX, DONE_SIZE);
        assert_eq!(REPLY_INLINE_MAX, 4096);
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
