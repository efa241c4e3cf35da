// SPDX-License-Identifier: GPL-2.0 OR MIT
//! What a peer's NIC lets it reach (`LITE_IOC_REACH`): a test-only ioctl that the
//! module answers only when built for the debug test suite (`lite_test_hooks`);
//! elsewhere it is ENOTTY. It posts raw RDMA to a peer with any address and key,
//! past every check of the module, so that the tests see what the NIC enforces.

/// `LiteReach::op`: describe extent `index` of the LMR behind `lh` (out: `node`,
/// `addr`, `rkey`, `len`).
pub const LITE_REACH_EXTENT: u32 = 1;
/// `LiteReach::op`: a page outside every LMR, filled with `LITE_REACH_CANARY_BYTE`
/// and kept until the file is closed (out: `addr`, `len`).
pub const LITE_REACH_CANARY: u32 = 2;
/// `LiteReach::op`: RDMA READ of `len` bytes (at most `LITE_REACH_DATA`) at `addr`
/// of `node` under `rkey`, into `data`.
pub const LITE_REACH_READ: u32 = 3;
/// `LiteReach::op`: RDMA WRITE of `len` bytes of `data` there.
pub const LITE_REACH_WRITE: u32 = 4;
/// `LiteReach::op`: RDMA fetch-and-add of 1 on the 8 bytes there; the old value
/// lands in the first 8 bytes of `data`.
pub const LITE_REACH_ATOMIC: u32 = 5;
/// `LiteReach::op`: this node's kernel holds each RPC reply it handles for `len`
/// ms once the call's slot is free again (0: no more), so that the next call on
/// that slot can be answered meanwhile; node-wide.
pub const LITE_REACH_HOLD_REPLIES: u32 = 6;
/// Bytes a canary page is filled with.
pub const LITE_REACH_CANARY_BYTE: u8 = 0xC5;
/// Bytes of `LiteReach::data` (its array length, written out for the ABI checks).
pub const LITE_REACH_DATA: usize = 64;

/// Argument of `LITE_IOC_REACH`; the operation's NIC error comes back as the
/// ioctl's errno (EACCES: the peer's NIC refused the key, address or access).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiteReach {
    /// `LITE_REACH_*`.
    pub op: u32,
    pub node: u32,
    pub addr: u64,
    pub rkey: u32,
    pub len: u32,
    pub lh: u64,
    pub index: u32,
    pub reserved: u32,
    pub data: [u8; 64],
}

impl Default for LiteReach {
    fn default() -> Self {
        LiteReach { op: 0, node: 0, addr: 0, rkey: 0, len: 0, lh: 0, index: 0, reserved: 0, data: [0; 64] }
    }
}

/// `_IOWR('L', 41, LiteReach)`
pub const LITE_IOC_REACH: u32 = 0xC068_4C29;
