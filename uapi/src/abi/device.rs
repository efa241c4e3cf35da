// SPDX-License-Identifier: GPL-2.0 OR MIT
//! What the node's RDMA device can do, as LITE-RS read it when it attached the
//! device (`LITE_IOC_DEV_CAPS`): LITE-RS picks its transport by capability, not
//! by provider name.

/// The port speaks InfiniBand.
pub const LITE_TRANSPORT_IB: u32 = 1;
/// RoCE (Soft-RoCE, `rdma_rxe`, among others).
pub const LITE_TRANSPORT_ROCE: u32 = 2;
/// iWARP (Soft-iWARP, `siw`, among others).
pub const LITE_TRANSPORT_IWARP: u32 = 3;

/// RDMA WRITE with immediate (InfiniBand and RoCE; not iWARP), which LITE-RS's
/// kernel messages and RPC ride on.
pub const LITE_CAP_WRITE_IMM: u32 = 1 << 0;
/// The NIC performs remote atomics (`atomic_cap` other than `IB_ATOMIC_NONE`).
pub const LITE_CAP_ATOMICS: u32 = 1 << 1;
/// QPs reach RTS only through the connection manager (iWARP), not by hand.
pub const LITE_CAP_CM_CONNECT: u32 = 1 << 2;
/// Chosen path (module parameter `messages=`): kernel messages and RPC go as an
/// RDMA WRITE followed by a SEND of the value an immediate would carry.
pub const LITE_PATH_SEND_MESSAGES: u32 = 1 << 8;
/// Chosen path (module parameter `atomics=`): atomics, locks and barriers are
/// executed by the holder's kernel, asked by a message, not by its RNIC.
pub const LITE_PATH_HOLDER_ATOMICS: u32 = 1 << 9;

/// The device's capabilities (`LITE_IOC_DEV_CAPS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteDevCaps {
    /// `LITE_TRANSPORT_*` of the port LITE-RS uses.
    pub transport: u32,
    /// `LITE_CAP_*` bits, and the `LITE_PATH_*` bits of what LITE-RS chose.
    pub flags: u32,
    /// Scatter-gather entries a send or RDMA WRITE work request may have.
    pub max_send_sge: u32,
    /// Those an RDMA READ may have (iWARP devices often allow one).
    pub max_sge_rd: u32,
    /// The NIC's `ib_atomic_cap`: 0 none, 1 within the HCA, 2 global.
    pub atomic_cap: u32,
    /// RDMA READs and atomics one QP may have outstanding as a target.
    pub max_qp_rd_atom: u32,
}

/// `_IOR('L', 42, LiteDevCaps)`: ENODEV when no device is attached.
pub const LITE_IOC_DEV_CAPS: u32 = 0x8018_4C2A;
