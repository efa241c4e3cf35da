// SPDX-License-Identifier: GPL-2.0 OR MIT
//! The LITE-RS user/kernel ABI, defined once.
//!
//! This module is compiled three ways: as the `lite_uapi` crate used by liblite, as a
//! module of the kernel crate (`#[path]`), and through cbindgen into `lite_uapi.h`.
//! So it uses `core` only, every struct is `#[repr(C)]` with explicit padding (the
//! kernel copies them to user space byte for byte), and ioctl numbers are literals
//! whose `_IOC` encoding is checked by this crate's tests.
//!
//! This file holds the node's limits, peers and membership, the shared page, the
//! membership ioctls and the list of the errors ioctls return; `lmr`, `rpc`, `sync` and
//! `qos` hold each service's constants, argument structs and ioctls, `device` the
//! device's capabilities. All of it is
//! re-exported here, so every item keeps its path `abi::X`.

// In ioctl-number order (this file has 1 to 8): cbindgen writes their constants to
// lite_uapi.h in this order.
// LMRs: 9 to 20, and 40.
mod lmr;
// RPC and messages: 21 to 29.
mod rpc;
// Atomics, the lock and the barrier: 30 to 32.
mod sync;
// Priority classes and QoS: 33 to 39.
mod qos;
// What the NIC lets a peer reach (tests only): 41.
mod reach;
// What the device can do: 42.
mod device;

pub use device::*;
pub use lmr::*;
pub use qos::*;
pub use reach::*;
pub use rpc::*;
pub use sync::*;

/// Version of this ABI; the shared page and `LiteInfo` report it.
pub const LITE_ABI_VERSION: u32 = 12;
/// Maximum nodes in one cluster (LITE used 16).
pub const LITE_MAX_NODES: u32 = 16;
/// Maximum RC QPs between two nodes (module parameter `qps_per_peer`).
pub const LITE_MAX_QPS_PER_PEER: u32 = 8;
/// `node_id` value meaning "this node has not joined a cluster".
pub const LITE_NODE_NONE: u32 = 0xFFFF_FFFF;
/// Largest `count` accepted by `LITE_IOC_PING`.
pub const LITE_PING_MAX_COUNT: u32 = 1_000_000;
/// Largest `payload` accepted by `LITE_IOC_PING` (one kernel message slot).
pub const LITE_PING_MAX_PAYLOAD: u32 = 4080;
/// First word of the shared page ("LITE").
pub const LITE_SHARED_MAGIC: u32 = 0x4C49_5445;

// Peer states reported in `LitePeerStatus::state`:
/// QPs created for the peer, waiting for its connection info.
pub const LITE_PEER_PREPARED: u32 = 1;
/// QPs in RTS: operations to this peer are possible.
pub const LITE_PEER_CONNECTED: u32 = 2;
/// A send to the peer failed (retries exhausted): it is probably dead.
pub const LITE_PEER_ERROR: u32 = 3;
/// The cluster manager declared the peer gone; its QPs are destroyed.
pub const LITE_PEER_DOWN: u32 = 4;

/// QP state value for a QP that does not exist (otherwise `IB_QPS_*`: 0 RESET … 6 ERR).
pub const LITE_QPS_NONE: u32 = 0xFFFF_FFFF;

/// Local node and device description (`LITE_IOC_INFO`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiteInfo {
    pub abi_version: u32,
    /// This node's id, or `LITE_NODE_NONE`.
    pub node_id: u32,
    /// Incarnation of this node's membership, assigned by the manager at join.
    pub epoch: u64,
    /// NUL-terminated RDMA device name; empty when no device is present.
    pub device: [u8; 64],
    pub port: u32,
    /// `IB_PORT_*` (4 = ACTIVE).
    pub port_state: u32,
    /// RoCE v2 GID of the port (IPv4-mapped), zero when the port has no address.
    pub gid: [u8; 16],
    pub qps_per_peer: u32,
    /// Peers in any state but down.
    pub nr_peers: u32,
    /// `IB_MTU_*` code of the port (1 = 256 … 5 = 4096).
    pub active_mtu: u32,
    /// What peers' keys reach (`LITE_REMOTE_ACCESS_*`, the module's `remote_access`).
    pub remote_access: u32,
}

/// `LiteInfo::remote_access`: one MR per LMR chunk, mailbox and ring, revoked at free.
pub const LITE_REMOTE_ACCESS_CHUNKS: u32 = 1;
/// `LiteInfo::remote_access`: LITE's one global MR over all memory.
pub const LITE_REMOTE_ACCESS_GLOBAL: u32 = 0;

impl Default for LiteInfo {
    fn default() -> Self {
        LiteInfo {
            abi_version: 0,
            node_id: LITE_NODE_NONE,
            epoch: 0,
            device: [0; 64],
            port: 0,
            port_state: 0,
            gid: [0; 16],
            qps_per_peer: 0,
            nr_peers: 0,
            active_mtu: 0,
            remote_access: LITE_REMOTE_ACCESS_CHUNKS,
        }
    }
}

/// Become node `node_id` of a cluster (`LITE_IOC_JOIN`; CAP_NET_ADMIN).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteJoin {
    pub node_id: u32,
    pub reserved: u32,
    pub epoch: u64,
}

/// What one side publishes so the other side can connect its QPs to it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteConnInfo {
    pub gid: [u8; 16],
    pub nr_qps: u32,
    /// `IB_MTU_*` code; both sides use the smaller one.
    pub mtu: u32,
    pub qpn: [u32; 8],
    pub psn: [u32; 8],
    /// Where the peer writes kernel messages to this node (DMA address), and its key.
    pub mailbox_addr: u64,
    pub mailbox_rkey: u32,
    /// Request slots; the mailbox holds as many response slots after them.
    pub mailbox_slots: u32,
    /// `LITE_TRANSPORT_*` of the device: RDMA does not cross between transports.
    pub transport: u32,
    /// `LITE_PATH_HOLDER_ATOMICS` when atomics are served by the holder's kernel,
    /// which every node of a cluster must agree on.
    pub paths: u32,
}

/// Create (or return the existing) QPs for a peer incarnation (`LITE_IOC_PEER_PREPARE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePeerPrepare {
    pub peer_id: u32,
    pub reserved: u32,
    pub peer_epoch: u64,
    /// Out: this node's side, to be sent to the peer.
    pub local: LiteConnInfo,
    /// Out: 1 when new QPs were created (the peer must be sent `local` again).
    pub created: u32,
    pub reserved2: u32,
}

/// Connect the prepared QPs of a peer to its published side (`LITE_IOC_PEER_CONNECT`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePeerConnect {
    pub peer_id: u32,
    pub reserved: u32,
    pub peer_epoch: u64,
    pub remote: LiteConnInfo,
}

/// Tear down everything to a peer and show it as down (`LITE_IOC_PEER_DOWN`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePeerDown {
    pub peer_id: u32,
    pub reserved: u32,
}

/// One peer as seen from this node.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePeerStatus {
    pub id: u32,
    /// `LITE_PEER_*`.
    pub state: u32,
    pub epoch: u64,
    pub nr_qps: u32,
    pub mtu: u32,
    /// `IB_QPS_*` per QP, `LITE_QPS_NONE` past `nr_qps`.
    pub qp_state: [u32; 8],
    pub local_qpn: [u32; 8],
    pub remote_qpn: [u32; 8],
    pub remote_gid: [u8; 16],
    /// Requests from this peer that our NIC refused (a key, address or access its
    /// MRs do not allow), counted since the module loaded; the first fences it.
    pub access_errors: u64,
}

/// List peers (`LITE_IOC_PEERS`): fills up to `capacity` entries at `entries`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePeerList {
    /// User pointer to `capacity` `LitePeerStatus`.
    pub entries: u64,
    pub capacity: u32,
    /// Out: number of peers (may exceed `capacity`; only `capacity` are written).
    pub count: u32,
}

/// Kernel-to-kernel echo round trips to a node (`LITE_IOC_PING`): each one is a
/// write-with-immediate request and one back, carrying `payload` bytes both ways.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePing {
    pub node: u32,
    /// 1 ..= `LITE_PING_MAX_COUNT`.
    pub count: u32,
    /// Per round trip.
    pub timeout_ms: u32,
    /// Bytes echoed (0 ..= `LITE_PING_MAX_PAYLOAD`), checked on return.
    pub payload: u32,
    /// User pointer to `count` u64: the round-trip times in nanoseconds.
    pub rtt_ns: u64,
}

/// Completion slots in the shared page: calls of one process in flight at once.
pub const LITE_SLOTS: u32 = 63;
/// `LiteSlot::state`: no call uses the slot (the library's own bookkeeping).
pub const LITE_SLOT_FREE: u32 = 0;
/// The kernel accepted a call on the slot; its result is not there yet.
pub const LITE_SLOT_PENDING: u32 = 1;
/// The result is in `error` and `len` (written before `state`).
pub const LITE_SLOT_DONE: u32 = 2;

/// Where the kernel reports the result of an asynchronous call (LT_RPC): the
/// library spins on `state`, then sleeps in `LITE_IOC_WAIT` until it is DONE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteSlot {
    /// `LITE_SLOT_*`, written by the kernel (release order after the fields below).
    pub state: u32,
    /// 0, or the positive errno the call failed with.
    pub error: u32,
    /// Bytes of the reply; its true size when it did not fit (`EOVERFLOW`).
    pub len: u64,
    /// The call's sequence number, as `LITE_IOC_RPC_CALL` returned it.
    pub seq: u64,
    pub reserved: [u64; 5],
}

/// The page a process maps from /dev/lite (offset 0, one page).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiteSharedPage {
    /// `LITE_SHARED_MAGIC`.
    pub magic: u32,
    pub abi_version: u32,
    /// ioctls this open file has made: each one is a user/kernel crossing.
    pub ioctl_count: u64,
    pub reserved: [u64; 6],
    /// Results of asynchronous calls, one per call in flight.
    pub slots: [LiteSlot; 63],
}

impl Default for LiteSharedPage {
    fn default() -> Self {
        LiteSharedPage { magic: 0, abi_version: 0, ioctl_count: 0, reserved: [0; 6], slots: [LiteSlot::default(); 63] }
    }
}

/// Ioctl type byte ('L').
pub const LITE_IOC_MAGIC: u32 = 0x4C;
/// `_IOR('L', 1, LiteInfo)`
pub const LITE_IOC_INFO: u32 = 0x8078_4C01;
/// `_IOW('L', 2, LiteJoin)`
pub const LITE_IOC_JOIN: u32 = 0x4010_4C02;
/// `_IO('L', 3)`: leave the cluster, tear down every peer.
pub const LITE_IOC_LEAVE: u32 = 0x0000_4C03;
/// `_IOWR('L', 4, LitePeerPrepare)`
pub const LITE_IOC_PEER_PREPARE: u32 = 0xC088_4C04;
/// `_IOW('L', 5, LitePeerConnect)`
pub const LITE_IOC_PEER_CONNECT: u32 = 0x4080_4C05;
/// `_IOW('L', 6, LitePeerDown)`
pub const LITE_IOC_PEER_DOWN: u32 = 0x4008_4C06;
/// `_IOWR('L', 7, LitePeerList)`
pub const LITE_IOC_PEERS: u32 = 0xC010_4C07;
/// `_IOWR('L', 8, LitePing)`
pub const LITE_IOC_PING: u32 = 0xC018_4C08;

// Errors: every ioctl returns 0 or -1 with errno set:
//   ENOTTY unknown ioctl; EFAULT bad user pointer; EINVAL malformed argument
//   (reserved fields must be 0, counts and ids in range); EPERM the caller lacks
//   CAP_NET_ADMIN for a membership ioctl or LITE_IOC_RESERVE; ENODEV no RDMA device; EADDRNOTAVAIL the
//   port has no RoCE address yet; ENOTCONN this node has not joined; EBUSY joined
//   already under another id; ENOENT unknown peer or stale epoch; EHOSTDOWN peer
//   down or failed; ETIMEDOUT no answer in time; EINTR interrupted by a signal;
//   EIO a peer's answer was corrupt.
// LMR ioctls also: EBADF unknown handle, or one of another process; EACCES the
//   handle (or the master, at map) lacks the permission; EPERM grant/free without
//   master permission; ERANGE offset or offset+len beyond the LMR (or overflowing);
//   EEXIST name taken in the namespace; ENOENT no LMR of that name; EIDRM the master
//   freed the LMR; EHOSTDOWN a holder or the master is down; ENOMEM the holders lack
//   the memory (nothing stays allocated); EINVAL zero length or size, bad name,
//   unknown permission bits or nodes.
// RPC ioctls also: ECONNREFUSED no server registered for the id at that node;
//   ECONNRESET the server process exited before it replied; EMSGSIZE a request or
//   reply beyond `LITE_RPC_MAX_MSG`; EOVERFLOW the reply does not fit the output
//   buffer (the slot's `len` tells its size), or a request does not fit the receive
//   buffer (`len`, request kept); ETIMEDOUT no reply within the timeout; EBUSY the
//   slot is in use; EEXIST the id has a server on this node; EBADF unknown reply
//   token (answered already, or another process's); EHOSTDOWN the node is down.
// LITE_IOC_ATOMIC also: EINVAL offset not a multiple of 8 (or a registered LMR's
//   word not 8-aligned in memory), unknown op, or nonzero swap for fetch-add.
// Class and QoS ioctls also: EPERM setting without CAP_NET_ADMIN, or a process
//   raising its own class; EINVAL unknown mode, class, rule kind or bits, a weight
//   or target out of range; ENOSPC `LITE_MAX_RULES` rules exist; ENOENT no such rule.
// LITE_IOC_LOCK and LITE_IOC_BARRIER also: EINVAL offset not a multiple of 8,
//   unknown op, participants or timeout out of range; EAGAIN too many waiters at
//   one word; EIDRM the LMR was freed while waiting; EHOSTDOWN the word's holder
//   node is down.
