// SPDX-License-Identifier: GPL-2.0
//! Codec for the 32-bit immediate of LITE-RS write-with-immediate messages.
//!
//! Pure logic (core only): compiled into the module and unit-tested on the host.
//! Layout: bits 31..28 message kind, bits 27..0 kind-specific payload. The IMM
//! comes from a peer, so decoding never trusts it: unknown kinds are rejected.

/// Bits available to the payload of every kind.
pub(crate) const PAYLOAD_BITS: u32 = 28;
/// Largest payload value.
pub(crate) const PAYLOAD_MAX: u32 = (1 << PAYLOAD_BITS) - 1;

/// What a write-with-immediate means to the receiving kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImmKind {
    /// Echo request; payload is the sender's wait token.
    Ping = 1,
    /// Echo reply; payload is the token copied from the ping.
    Pong = 2,
}

impl ImmKind {
    fn from_bits(bits: u32) -> Option<ImmKind> {
        match bits {
            1 => Some(ImmKind::Ping),
            2 => Some(ImmKind::Pong),
            _ => None,
        }
    }
}

/// Packs `kind` and `payload`; `None` if the payload does not fit in 28 bits.
pub(crate) fn encode(kind: ImmKind, payload: u32) -> Option<u32> {
    (payload <= PAYLOAD_MAX).then(|| ((kind as u32) << PAYLOAD_BITS) | payload)
}

/// Splits an immediate received from a peer; `None` for a kind we do not know.
pub(crate) fn decode(imm: u32) -> Option<(ImmKind, u32)> {
    ImmKind::from_bits(imm >> PAYLOAD_BITS).map(|kind| (kind, imm & PAYLOAD_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind_at_payload_edges() {
        for kind in [ImmKind::Ping, ImmKind::Pong] {
            for payload in [0, 1, 0x1234_567, PAYLOAD_MAX] {
                let imm = encode(kind, payload).unwrap();
                assert_eq!(decode(imm), Some((kind, payload)));
            }
        }
    }

    #[test]
    fn rejects_payload_overflow() {
        assert_eq!(encode(ImmKind::Ping, PAYLOAD_MAX + 1), None);
        assert_eq!(encode(ImmKind::Pong, u32::MAX), None);
    }

    #[test]
    fn rejects_unknown_kinds_from_peers() {
        assert_eq!(decode(0), None);
        assert_eq!(decode(0xF000_0000), None);
        assert_eq!(decode(3 << PAYLOAD_BITS), None);
    }
}
