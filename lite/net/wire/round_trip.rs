// SPDX-License-Identifier: GPL-2.0
//! Tests only: a body decodes to itself and rejects every truncation.

use super::{Body, Reader, Writer, BODY_MAX};

pub(super) fn round_trip<T: Body + core::fmt::Debug + PartialEq>(value: T) {
    let mut buf = [0u8; BODY_MAX];
    let mut w = Writer::new(&mut buf);
    value.encode(&mut w).unwrap();
    let len = w.len();
    assert_eq!(T::decode(&mut Reader::new(&buf[..len])), Some(value));
    for short in 0..len {
        assert_eq!(
            T::decode(&mut Reader::new(&buf[..short])),
            None,
            "truncated to {short}"
        );
    }
}
