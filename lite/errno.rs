// SPDX-License-Identifier: GPL-2.0
//! Errnos that `kernel::error::code` does not declare in 6.12 (the networking ones).
#![allow(non_snake_case)]

use kernel::error::Error;

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`-", stringify!($name), "`")]
        pub(crate) fn $name() -> Error {
            Error::from_errno(-(kernel::bindings::$name as i32))
        }
    )*};
}

errnos!(
    ENOTCONN,
    EHOSTDOWN,
    ETIMEDOUT,
    ENETDOWN,
    EOPNOTSUPP,
    ECONNREFUSED,
    ECONNRESET,
    EMSGSIZE,
    EOVERFLOW,
    EOWNERDEAD,
    ENOLCK,
    EDEADLK,
    EIDRM,
    EPROTO,
    EPROTONOSUPPORT,
    EINPROGRESS
);
