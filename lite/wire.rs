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
//! a responder never waits for credit in completion context.

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
/// Bytes of one mailbox (request and response slots).
pub(crate) const MAILBOX_SIZE: usize = 2 * SLOTS * SLOT_SIZE;

/// What a write-with-immediate means to the receiving kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImmKind {
    /// A request landed in request slot `payload`.
    Request = 1,
    /// The answer to our request in slot `payload` landed in our response slot.
    Response = 2,
}

impl ImmKind {
    fn from_bits(bits: u32) -> Option<ImmKind> {
        match bits {
            1 => Some(ImmKind::Request),
            2 => Some(ImmKind::Response),
            _ => None,
        }
    }
}

/// Packs `kind` and `payload`; `None` if the payload does not fit in 28 bits.
pub(crate) fn encode_imm(kind: ImmKind, payload: u32) -> Option<u32> {
    (payload <= PAYLOAD_MAX).then(|| ((kind as u32) << PAYLOAD_BITS) | payload)
}

/// Splits an immediate received from a peer; `None` for a kind we do not know.
pub(crate) fn decode_imm(imm: u32) -> Option<(ImmKind, u32)> {
    ImmKind::from_bits(imm >> PAYLOAD_BITS).map(|kind| (kind, imm & PAYLOAD_MAX))
}

/// Offset of request slot `slot` in a mailbox.
pub(crate) fn request_offset(slot: usize) -> usize {
    slot * SLOT_SIZE
}

/// Offset of response slot `slot` in a mailbox.
pub(crate) fn response_offset(slot: usize) -> usize {
    (SLOTS + slot) * SLOT_SIZE
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MsgKind {
    /// Send the body back unchanged.
    Echo = 1,
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
            seq: u64::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]]),
        };
        if header.len as usize <= BODY_MAX {
            Ok(header)
        } else {
            Err(header.seq)
        }
    }

    pub(crate) fn msg_kind(&self) -> Option<MsgKind> {
        match self.kind {
            1 => Some(MsgKind::Echo),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_round_trips_every_kind_at_payload_edges() {
        for kind in [ImmKind::Request, ImmKind::Response] {
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
        assert_eq!(decode_imm(3 << PAYLOAD_BITS), None);
    }

    #[test]
    fn slots_tile_the_mailbox() {
        assert_eq!(request_offset(0), 0);
        assert_eq!(response_offset(0), SLOTS * SLOT_SIZE);
        assert_eq!(response_offset(SLOTS - 1) + SLOT_SIZE, MAILBOX_SIZE);
        assert!(request_offset(SLOTS - 1) + SLOT_SIZE <= response_offset(0));
        assert!(SLOTS as u32 <= PAYLOAD_MAX);
    }

    #[test]
    fn header_round_trips() {
        let h = Header { kind: 1, status: 22, len: BODY_MAX as u32, seq: u64::MAX - 3 };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert_eq!(h.msg_kind(), Some(MsgKind::Echo));
        assert_eq!(Header { kind: 9, ..h }.msg_kind(), None);
    }

    #[test]
    fn header_rejects_bodies_larger_than_a_slot() {
        let h = Header { kind: 1, status: 0, len: BODY_MAX as u32 + 1, seq: 77 };
        assert_eq!(Header::decode(&h.encode()), Err(77), "the seq survives to answer with an error");
        let mut bytes = h.encode();
        bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Header::decode(&bytes), Err(77));
    }
}
