// SPDX-License-Identifier: GPL-2.0
//! The 32-bit immediate of a write-with-immediate: its kind and payload, and the
//! RPC ring immediate's binding and offset.

/// Bits available to the payload of every immediate kind.
pub(crate) const PAYLOAD_BITS: u32 = 28;
/// Largest immediate payload value.
pub(crate) const PAYLOAD_MAX: u32 = (1 << PAYLOAD_BITS) - 1;

/// Alignment and granule of RPC ring records (the IMM carries offsets in these
/// units).
pub(crate) const RECORD_ALIGN: u64 = 64;
/// Bytes of every RPC ring: room for two records of the largest size, so that an
/// empty ring always takes the largest record wherever its tail is.
pub(crate) const RING_BYTES: u64 = 8 << 20 | 64 << 10;

/// Bindings (client node, RPC id) a node serves at once: the immediate's bits.
pub(crate) const BINDINGS: usize = 1 << BINDING_BITS;
const BINDING_BITS: u32 = 10;
const OFFSET_BITS: u32 = PAYLOAD_BITS - BINDING_BITS;
const _: () = assert!((RING_BYTES / RECORD_ALIGN) < 1 << OFFSET_BITS);

/// What a write-with-immediate means to the receiving kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImmKind {
    /// A request landed in request slot `payload`.
    Request = 1,
    /// The answer to our request in slot `payload` landed in our response slot.
    Response = 2,
    /// An RPC record landed in one of our rings (`decode_ring_imm`).
    RpcRequest = 3,
    /// The reply to our call in call slot `payload` is complete.
    RpcReply = 4,
    /// A server consumed one of our rings up to an offset (`decode_ring_imm`).
    RpcHead = 5,
    // 15 is no kind: RDMA CM connections' hellos carry it (verbs/cm.c), and one
    // repeated after its answer arrives as an unknown kind, ignored.
}

impl ImmKind {
    fn from_bits(bits: u32) -> Option<ImmKind> {
        match bits {
            1 => Some(ImmKind::Request),
            2 => Some(ImmKind::Response),
            3 => Some(ImmKind::RpcRequest),
            4 => Some(ImmKind::RpcReply),
            5 => Some(ImmKind::RpcHead),
            _ => None,
        }
    }
}

/// Packs `kind` and `payload`; `None` if the payload does not fit in 28 bits.
pub(crate) fn encode_imm(kind: ImmKind, payload: u32) -> Option<u32> {
    (payload <= PAYLOAD_MAX).then_some(((kind as u32) << PAYLOAD_BITS) | payload)
}

/// Splits an immediate received from a peer; `None` for a kind we do not know.
pub(crate) fn decode_imm(imm: u32) -> Option<(ImmKind, u32)> {
    ImmKind::from_bits(imm >> PAYLOAD_BITS).map(|kind| (kind, imm & PAYLOAD_MAX))
}

/// Payload of a ring immediate: `binding` and a record-aligned ring `offset`.
pub(crate) fn encode_ring_imm(binding: usize, offset: u64) -> Option<u32> {
    let align = RECORD_ALIGN;
    let units = offset / align;
    let fits = binding < BINDINGS && offset % align == 0 && units < 1 << OFFSET_BITS;
    fits.then_some(((binding as u32) << OFFSET_BITS) | units as u32)
}

/// Splits a ring immediate's payload into (binding, ring offset).
pub(crate) fn decode_ring_imm(payload: u32) -> (usize, u64) {
    let binding = (payload >> OFFSET_BITS) as usize;
    let units = u64::from(payload & ((1 << OFFSET_BITS) - 1));
    (binding, units * RECORD_ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_round_trips_every_kind_at_payload_edges() {
        for kind in [
            ImmKind::Request,
            ImmKind::Response,
            ImmKind::RpcRequest,
            ImmKind::RpcReply,
            ImmKind::RpcHead,
        ] {
            for payload in [0, 1, 0x0123_4567, PAYLOAD_MAX] {
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
        assert_eq!(decode_imm(6 << PAYLOAD_BITS), None);
        assert_eq!(decode_imm(0xfc4d_0001), None, "verbs/cm.c's LITE_CM_HELLO");
    }

    #[test]
    fn ring_immediates_carry_binding_and_offset() {
        let last = RING_BYTES - RECORD_ALIGN;
        for (binding, offset) in [(0, 0), (BINDINGS - 1, last), (5, 64 * 1000)] {
            let payload = encode_ring_imm(binding, offset).unwrap();
            assert!(payload <= PAYLOAD_MAX);
            assert_eq!(decode_ring_imm(payload), (binding, offset));
        }
        assert_eq!(encode_ring_imm(BINDINGS, 0), None);
        assert_eq!(encode_ring_imm(0, 65), None, "unaligned");
        assert_eq!(encode_ring_imm(0, 64 << OFFSET_BITS), None);
    }
}
