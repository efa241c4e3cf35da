// SPDX-License-Identifier: GPL-2.0 OR MIT
//! The LITE-RS user/kernel ABI, defined once.
//!
//! This file is compiled three ways: as the `lite_uapi` crate used by liblite, as a
//! module of the kernel crate (`#[path]`), and through cbindgen into `lite_uapi.h`.
//! So it uses `core` only, every struct is `#[repr(C)]` with explicit padding (the
//! kernel copies them to user space byte for byte), and ioctl numbers are literals
//! whose `_IOC` encoding is checked by this crate's tests.

/// Version of this ABI; the shared page and `LiteInfo` report it.
pub const LITE_ABI_VERSION: u32 = 8;
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
    pub reserved: u32,
}

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
            reserved: 0,
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
    /// Where the peer writes kernel messages to this node (DMA address in the global MR).
    pub mailbox_addr: u64,
    pub mailbox_rkey: u32,
    /// Request slots; the mailbox holds as many response slots after them.
    pub mailbox_slots: u32,
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

// ---- LITE memory regions (LMRs) ----
//
// An LMR is memory in one or more nodes' kernels, reached only through a handle
// (`lh`) that is valid in the process (open file) that got it. Users never see
// keys or addresses. The process that allocates an LMR is its master: it may grant
// permissions and free it; freeing notifies every node that mapped it, after which
// their handles fail with EIDRM. A process's handles and the LMRs it mastered are
// released when it closes /dev/lite or exits.

/// Permission to LT_read the LMR.
pub const LITE_PERM_READ: u32 = 1;
/// Permission to LT_write, LT_memset and be the destination of LT_memcpy.
pub const LITE_PERM_WRITE: u32 = 2;
/// Master: may grant permissions to others and free the LMR.
pub const LITE_PERM_MASTER: u32 = 4;
/// Every permission bit.
pub const LITE_PERM_ALL: u32 = 7;
/// Bytes of an LMR name field; names are 1..=63 bytes, NUL-padded, no NUL inside.
pub const LITE_NAME_MAX: u32 = 64;
/// Largest buffer `LITE_IOC_REGISTER` accepts (ENOMEM beyond): its pages are one
/// extent each, and every mapper gets the list.
pub const LITE_REGISTER_MAX_SIZE: u64 = 64 << 20;
/// Largest LMR (bytes); larger requests fail with ENOMEM.
pub const LITE_LMR_MAX_SIZE: u64 = 1 << 40;
/// Memory is allocated at holders in physically contiguous chunks of at most this
/// size (smaller ones when memory is fragmented).
pub const LITE_CHUNK_SIZE: u64 = 4 << 20;
/// `LiteGrant::node` value granting to every node.
pub const LITE_NODE_ANY: u32 = 0xFFFF_FFFF;

/// Allocate an LMR and become its master (`LITE_IOC_MALLOC`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiteMalloc {
    /// Bytes, 1 ..= `LITE_LMR_MAX_SIZE`.
    pub size: u64,
    /// Bit n set: node n holds a share of the memory (split evenly, page aligned, in
    /// node order).
    /// 0: this node holds all of it.
    pub nodes: u32,
    /// Permissions any node may map the LMR with (`LITE_PERM_*`); the master grants more.
    pub perm: u32,
    /// Application namespace: names are unique within it.
    pub namespace: u32,
    pub reserved: u32,
    pub name: [u8; 64],
    /// Out: the master handle (read, write, master).
    pub lh: u64,
}

impl Default for LiteMalloc {
    fn default() -> Self {
        LiteMalloc { size: 0, nodes: 0, perm: 0, namespace: 0, reserved: 0, name: [0; 64], lh: 0 }
    }
}

/// Turn a buffer of the calling process into an LMR held by this node and become
/// its master (`LITE_IOC_REGISTER`). The pages stay pinned until the LMR is freed
/// (explicitly, or when the process exits); the process must keep the buffer mapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiteRegister {
    /// User pointer to `len` writable bytes.
    pub buf: u64,
    /// Bytes, 1 ..= `LITE_REGISTER_MAX_SIZE`.
    pub len: u64,
    /// Permissions any node may map the LMR with (`LITE_PERM_*`).
    pub perm: u32,
    pub namespace: u32,
    pub name: [u8; 64],
    /// Out: the master handle (read, write, master).
    pub lh: u64,
}

impl Default for LiteRegister {
    fn default() -> Self {
        LiteRegister { buf: 0, len: 0, perm: 0, namespace: 0, name: [0; 64], lh: 0 }
    }
}

/// Map an LMR by name (`LITE_IOC_MAP`): its master checks `perm` and the caller gets
/// a new handle every time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiteMap {
    pub namespace: u32,
    /// Wanted permissions (`LITE_PERM_*`, not 0).
    pub perm: u32,
    pub name: [u8; 64],
    /// Out: the new handle.
    pub lh: u64,
    /// Out: size of the LMR in bytes.
    pub size: u64,
}

impl Default for LiteMap {
    fn default() -> Self {
        LiteMap { namespace: 0, perm: 0, name: [0; 64], lh: 0, size: 0 }
    }
}

/// A handle argument (`LITE_IOC_UNMAP`, `LITE_IOC_FREE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteHandle {
    pub lh: u64,
}

/// Master only: set what `node` (or every node, `LITE_NODE_ANY`) may map the LMR
/// with from now on (`LITE_IOC_GRANT`). Existing handles keep their permissions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteGrant {
    pub lh: u64,
    pub node: u32,
    pub perm: u32,
}

/// Zero-copy transfer between user memory and an LMR (`LITE_IOC_READ`,
/// `LITE_IOC_WRITE`); returns once the data is read or written at the holder.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRw {
    pub lh: u64,
    /// Byte offset in the LMR; `offset + len` must not exceed its size.
    pub offset: u64,
    /// User pointer to `len` bytes.
    pub buf: u64,
    /// Bytes, at least 1.
    pub len: u64,
}

/// Fill `len` bytes of an LMR with `value` at its holders (`LITE_IOC_MEMSET`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteMemset {
    pub lh: u64,
    pub offset: u64,
    pub len: u64,
    /// Byte value (0..=255).
    pub value: u32,
    pub reserved: u32,
}

/// Copy `len` bytes between two LMRs (or within one, overlapping allowed: memmove
/// semantics), executed by the holders (`LITE_IOC_MEMCPY`). Needs read on `src_lh`
/// and write on `dst_lh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteMemcpy {
    pub dst_lh: u64,
    pub dst_offset: u64,
    pub src_lh: u64,
    pub src_offset: u64,
    pub len: u64,
}

/// Describe the LMR behind a handle (`LITE_IOC_LMR_STAT`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteLmrStat {
    pub lh: u64,
    /// Out: bytes.
    pub size: u64,
    /// Out: this handle's permissions.
    pub perm: u32,
    /// Out: node of the master.
    pub master_node: u32,
    /// Out: physically contiguous chunks the memory is made of.
    pub nr_chunks: u32,
    /// Out: bit n set when node n holds part of the memory.
    pub holders: u32,
}

/// This node's LMR bookkeeping (`LITE_IOC_MEM_STAT`): what operators and tests
/// check to see that nothing leaked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteMemStat {
    /// LMRs this node is master of.
    pub mastered: u32,
    /// Mappings (handles of every process) on this node.
    pub mappings: u32,
    /// Bytes of LMR memory this node holds for any master.
    pub held_bytes: u64,
    /// Bytes this node may hold at most.
    pub held_limit: u64,
    /// Callers (of any node) queued for locks whose words this node holds.
    pub lock_queued: u32,
    /// Callers (of any node) waiting at barriers whose counters this node holds.
    pub barrier_queued: u32,
    /// Bytes of zeroed memory ready for allocations (`LITE_IOC_RESERVE`).
    pub reserve_bytes: u64,
    /// Bytes the reserve is refilled to.
    pub reserve_target: u64,
    /// Bytes allocations took from the reserve since the module was loaded.
    pub reserve_used: u64,
}

/// Keep `bytes` (rounded up to whole chunks of `LITE_CHUNK_SIZE`) of zeroed memory
/// ready on this node (`LITE_IOC_RESERVE`; CAP_NET_ADMIN). Allocations held here take
/// chunks from the reserve instead of zeroing memory while the caller waits; the
/// module refills it in the background while the node holds less than its limit.
/// 0 releases the reserve. EINVAL beyond `held_limit`, ENODEV without an RDMA device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteReserve {
    pub bytes: u64,
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
pub const LITE_IOC_PEER_PREPARE: u32 = 0xC080_4C04;
/// `_IOW('L', 5, LitePeerConnect)`
pub const LITE_IOC_PEER_CONNECT: u32 = 0x4078_4C05;
/// `_IOW('L', 6, LitePeerDown)`
pub const LITE_IOC_PEER_DOWN: u32 = 0x4008_4C06;
/// `_IOWR('L', 7, LitePeerList)`
pub const LITE_IOC_PEERS: u32 = 0xC010_4C07;
/// `_IOWR('L', 8, LitePing)`
pub const LITE_IOC_PING: u32 = 0xC018_4C08;

/// `_IOWR('L', 9, LiteMalloc)`
pub const LITE_IOC_MALLOC: u32 = 0xC060_4C09;
/// `_IOWR('L', 10, LiteMap)`
pub const LITE_IOC_MAP: u32 = 0xC058_4C0A;
/// `_IOW('L', 11, LiteHandle)`: release a handle (the LMR lives on).
pub const LITE_IOC_UNMAP: u32 = 0x4008_4C0B;
/// `_IOW('L', 12, LiteHandle)`: master only; frees the LMR everywhere.
pub const LITE_IOC_FREE: u32 = 0x4008_4C0C;
/// `_IOW('L', 13, LiteGrant)`
pub const LITE_IOC_GRANT: u32 = 0x4010_4C0D;
/// `_IOW('L', 14, LiteRw)`: LMR -> user memory.
pub const LITE_IOC_READ: u32 = 0x4020_4C0E;
/// `_IOW('L', 15, LiteRw)`: user memory -> LMR.
pub const LITE_IOC_WRITE: u32 = 0x4020_4C0F;
/// `_IOW('L', 16, LiteMemset)`
pub const LITE_IOC_MEMSET: u32 = 0x4020_4C10;
/// `_IOW('L', 17, LiteMemcpy)`
pub const LITE_IOC_MEMCPY: u32 = 0x4028_4C11;
/// `_IOWR('L', 18, LiteLmrStat)`
pub const LITE_IOC_LMR_STAT: u32 = 0xC020_4C12;

/// `_IOR('L', 19, LiteMemStat)`
pub const LITE_IOC_MEM_STAT: u32 = 0x8038_4C13;

/// `_IOWR('L', 20, LiteRegister)`
pub const LITE_IOC_REGISTER: u32 = 0xC060_4C14;

// ---- RPC and messages ----
//
// A server process registers an RPC id on its node; clients on any node call
// (node, id). The first call from a node binds it to the id: the server's kernel
// allocates a ring for that client node, which the client's kernel fills with
// RDMA write-with-immediate; the reply is written by the server's kernel straight
// into the caller's (pinned) output buffer, followed by a write-with-immediate
// that completes the call. LT_RPC returns at once: the result appears in a slot
// of the shared page, where the library spins briefly before it sleeps in
// `LITE_IOC_WAIT` (at most two crossings per call). The wire layout is
// documented in lite/net/wire/ (IMM kinds, ring records) and lite/rpc/ring.rs.

/// Largest request or reply payload (bytes).
pub const LITE_RPC_MAX_MSG: u64 = 4 << 20;
/// Longest timeout a call, receive or wait may ask for.
pub const LITE_RPC_MAX_TIMEOUT_MS: u32 = 600_000;
/// `LiteRpcCall::flags`: a one-way message (LT_send): no reply, no output buffer;
/// the ioctl returns once the message is in the server's ring.
pub const LITE_RPC_ONEWAY: u32 = 1;

/// Register or unregister the calling process as the server of `id` on this node
/// (`LITE_IOC_RPC_REGISTER`, `LITE_IOC_RPC_UNREGISTER`). One server per id and node.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcId {
    /// Any value but 0.
    pub id: u32,
    pub reserved: u32,
}

/// Call `id` at `node` (`LITE_IOC_RPC_CALL`). Returns once the request is posted;
/// the result arrives in shared-page slot `slot` (see `LiteSlot`). With
/// `LITE_RPC_ONEWAY` it is a message: the ioctl returns once it is delivered and
/// `slot` is not used.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcCall {
    pub node: u32,
    pub id: u32,
    /// User pointer to `input_len` bytes (0 ..= `LITE_RPC_MAX_MSG`).
    pub input: u64,
    pub input_len: u64,
    /// User pointer to `output_len` writable bytes (0 ..= `LITE_RPC_MAX_MSG`), the
    /// reply lands here; pinned until the call completes.
    pub output: u64,
    pub output_len: u64,
    /// 1 ..= `LITE_RPC_MAX_TIMEOUT_MS`; past it the call fails with ETIMEDOUT.
    pub timeout_ms: u32,
    /// Shared-page slot for the result (0 .. `LITE_SLOTS`), not in use by another call.
    pub slot: u32,
    /// `LITE_RPC_ONEWAY` or 0.
    pub flags: u32,
    pub reserved: u32,
    /// Out: the call's sequence number (also in the slot).
    pub seq: u64,
}

/// Wait until the call on shared-page `slot` is DONE (`LITE_IOC_WAIT`): returns 0
/// then, with the result in the slot. A call whose timeout passes completes with
/// ETIMEDOUT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteWait {
    pub slot: u32,
    pub reserved: u32,
}

/// Receive the next request or message for `id` (`LITE_IOC_RPC_RECV`): blocks up
/// to `timeout_ms`. The payload is copied to `buf`; when it does not fit the call
/// fails with EOVERFLOW, `len` tells its size, and the request stays queued.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcRecv {
    pub id: u32,
    /// 1 ..= `LITE_RPC_MAX_TIMEOUT_MS`.
    pub timeout_ms: u32,
    /// User pointer to `buf_len` writable bytes.
    pub buf: u64,
    pub buf_len: u64,
    /// Out: payload bytes.
    pub len: u64,
    /// Out: reply descriptor for `LITE_IOC_RPC_REPLY`; 0 for a one-way message.
    pub token: u64,
    /// Out: the caller's node.
    pub node: u32,
    /// Out: `LITE_RPC_ONEWAY` for a message.
    pub flags: u32,
    /// Out: bytes the caller's output buffer holds (a longer reply fails there
    /// with EOVERFLOW and its size).
    pub reply_capacity: u64,
}

/// Reply to a received request (`LITE_IOC_RPC_REPLY`): written into the caller's
/// output buffer; returns once it is there. Each token is answered once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcReply {
    pub token: u64,
    /// User pointer to `len` bytes (0 ..= `LITE_RPC_MAX_MSG`).
    pub buf: u64,
    pub len: u64,
}

/// Reply, then receive the next request, in one crossing (`LITE_IOC_RPC_REPLY_RECV`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcReplyRecv {
    pub reply: LiteRpcReply,
    pub recv: LiteRpcRecv,
}

/// `count` RPCs issued by the kernel itself, with kernel buffers
/// (`LITE_IOC_RPC_BENCH`): the in-kernel caller measured beside a user one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcBench {
    pub node: u32,
    pub id: u32,
    /// 1 ..= `LITE_PING_MAX_COUNT`.
    pub count: u32,
    pub timeout_ms: u32,
    /// Request bytes (0 ..= `LITE_RPC_MAX_MSG`).
    pub request_len: u64,
    /// Output buffer bytes (0 ..= `LITE_RPC_MAX_MSG`).
    pub reply_capacity: u64,
    /// User pointer to `count` u64: each call's time in nanoseconds.
    pub rtt_ns: u64,
    /// Out: bytes of the last reply.
    pub reply_len: u64,
}

/// This node's RPC bookkeeping (`LITE_IOC_RPC_STAT`): tests check it returns to
/// zero after every scenario.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteRpcStat {
    /// Ids with a registered server on this node.
    pub servers: u32,
    /// Client nodes bound to this node's ids (each has a ring here).
    pub rings: u32,
    /// Bytes of those rings.
    pub ring_bytes: u64,
    /// This node's bindings to other nodes' ids.
    pub bindings: u32,
    /// Calls from this node waiting for a reply (abandoned ones included).
    pub calls: u32,
    /// Requests and messages queued for this node's server processes.
    pub requests: u32,
    pub reserved: u32,
}

/// `_IOW('L', 21, LiteRpcId)`
pub const LITE_IOC_RPC_REGISTER: u32 = 0x4008_4C15;
/// `_IOW('L', 22, LiteRpcId)`
pub const LITE_IOC_RPC_UNREGISTER: u32 = 0x4008_4C16;
/// `_IOWR('L', 23, LiteRpcCall)`
pub const LITE_IOC_RPC_CALL: u32 = 0xC040_4C17;
/// `_IOW('L', 24, LiteWait)`
pub const LITE_IOC_WAIT: u32 = 0x4008_4C18;
/// `_IOWR('L', 25, LiteRpcRecv)`
pub const LITE_IOC_RPC_RECV: u32 = 0xC038_4C19;
/// `_IOW('L', 26, LiteRpcReply)`
pub const LITE_IOC_RPC_REPLY: u32 = 0x4018_4C1A;
/// `_IOWR('L', 27, LiteRpcReplyRecv)`
pub const LITE_IOC_RPC_REPLY_RECV: u32 = 0xC050_4C1B;
/// `_IOWR('L', 28, LiteRpcBench)`
pub const LITE_IOC_RPC_BENCH: u32 = 0xC030_4C1C;
/// `_IOR('L', 29, LiteRpcStat)`
pub const LITE_IOC_RPC_STAT: u32 = 0x8020_4C1D;

/// `LiteAtomic::op`: add `operand` to the word; `old` is its value before.
pub const LITE_ATOMIC_FETCH_ADD: u32 = 1;
/// `LiteAtomic::op`: store `swap` if the word equals `operand`; `old` is its value
/// before (equal to `operand` when the swap happened).
pub const LITE_ATOMIC_COMPARE_SWAP: u32 = 2;

/// An RDMA atomic on the 8-byte word at `offset` of an LMR (`LITE_IOC_ATOMIC`),
/// performed by the holder's RNIC (through loopback when this node holds it), so it
/// is atomic against every node's LT atomics on the word, but not against plain
/// LT_write/memset/memcpy of it. Needs read and write permission; `offset` must be a
/// multiple of 8 (EINVAL otherwise).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteAtomic {
    pub lh: u64,
    pub offset: u64,
    /// `LITE_ATOMIC_*`.
    pub op: u32,
    pub reserved: u32,
    /// Value to add, or the expected value.
    pub operand: u64,
    /// New value of a compare-and-swap (0 for fetch-add).
    pub swap: u64,
    /// Out: the word's value before the operation.
    pub old: u64,
}

/// `_IOWR('L', 30, LiteAtomic)`
pub const LITE_IOC_ATOMIC: u32 = 0xC030_4C1E;

/// `LiteLock::op`: wait until this thread holds the lock (other threads of the
/// process wait like any caller).
pub const LITE_LOCK_ACQUIRE: u32 = 1;
/// `LiteLock::op`: release a lock this thread holds.
pub const LITE_LOCK_RELEASE: u32 = 2;

/// A distributed lock on the 8-byte word at `offset` of an LMR (`LITE_IOC_LOCK`).
/// The word must start at 0 and is then only touched by lock operations: free,
/// it is taken with one RDMA compare-and-swap; taken, the caller queues at the
/// word's holder node and is woken alone, in FIFO order. Locks a process holds are
/// released when it exits. Needs read and write permission.
///
/// Acquire fails with EOWNERDEAD when the previous holder's node died while it
/// held the lock: the caller holds the lock all the same (as with a robust
/// pthread mutex) and should check what the lock protects. EDEADLK: this thread
/// holds it already. Release fails with EPERM when this thread does not hold it,
/// ENOLCK when the lock was taken from it (its node was taken for dead).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteLock {
    pub lh: u64,
    pub offset: u64,
    /// `LITE_LOCK_*`.
    pub op: u32,
    pub reserved: u32,
}

/// `_IOW('L', 31, LiteLock)`
pub const LITE_IOC_LOCK: u32 = 0x4018_4C1F;

/// A barrier on the 8-byte counter at `offset` of an LMR (`LITE_IOC_BARRIER`):
/// returns once `participants` callers (any processes on any nodes, all passing
/// the same number) arrived in this round. Rounds follow each other on the same
/// counter, which must start at 0 and is only touched by barrier calls. ETIMEDOUT
/// after `timeout_ms` (the arrival still counts, so the counter's rounds are off
/// by one from then on: start a new counter). Needs read and write permission.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteBarrier {
    pub lh: u64,
    pub offset: u64,
    /// 1 to `LITE_BARRIER_MAX_PARTICIPANTS`.
    pub participants: u32,
    /// 1 to `LITE_BARRIER_MAX_TIMEOUT_MS`.
    pub timeout_ms: u32,
}

/// Most participants of one barrier.
pub const LITE_BARRIER_MAX_PARTICIPANTS: u32 = 4096;
/// Longest barrier wait a caller may ask for (one hour).
pub const LITE_BARRIER_MAX_TIMEOUT_MS: u32 = 3_600_000;

/// `_IOW('L', 32, LiteBarrier)`
pub const LITE_IOC_BARRIER: u32 = 0x4018_4C20;

// ---- Priority classes and their enforcement (SW-Pri, HW-Sep) ----
//
// Every operation of a process (read, write, atomics, RPC, messages) is accounted
// to the process's class. The operator assigns classes by process (inherited by
// its descendants), user or cgroup; a process may lower its own class, never raise
// it. In `LITE_QOS_SW_PRI` mode, while latency-class traffic is active, other
// classes' transfers go in 5 KiB work requests paced by tokens at
// SafeUtil, shared by weight (WF2Q+); SafeUtil follows AIMD on the latency class's
// p99 against Target99; the latency class keeps QPs 1..K-1 to itself and paced
// transfers use QP 0. `LITE_QOS_HW_SEP` reserves QP 0 for the other classes and
// QPs 1..K-1 for the latency class, without pacing. `LITE_QOS_NONE` only accounts.

/// Highest priority: never chunked, never delayed.
pub const LITE_CLASS_LATENCY: u32 = 0;
/// Processes no rule names.
pub const LITE_CLASS_DEFAULT: u32 = 1;
/// Lowest priority.
pub const LITE_CLASS_BULK: u32 = 2;
pub const LITE_NR_CLASSES: u32 = 3;

pub const LITE_QOS_NONE: u32 = 0;
pub const LITE_QOS_HW_SEP: u32 = 1;
/// The default mode (it only acts while latency-class traffic is active).
pub const LITE_QOS_SW_PRI: u32 = 2;

/// Largest weight of a class.
pub const LITE_QOS_MAX_WEIGHT: u32 = 1000;

/// `LiteQos::set` bits: which fields `LITE_IOC_QOS_SET` changes.
pub const LITE_QOS_SET_MODE: u32 = 1;
pub const LITE_QOS_SET_TARGET: u32 = 2;
pub const LITE_QOS_SET_WEIGHTS: u32 = 4;
pub const LITE_QOS_SET_LINK_RATE: u32 = 8;
pub const LITE_QOS_SET_CHUNK: u32 = 16;

/// Bounds of `LiteQos::chunk_bytes`: from one 1 KiB MTU to the largest work request
/// of a transfer.
pub const LITE_QOS_CHUNK_MIN: u32 = 1024;
pub const LITE_QOS_CHUNK_MAX: u32 = 32 << 10;
/// `LiteQos::chunk_bytes` sized to the link (the default): four packet times on
/// the wire, or 25 us of it on links where that is more, up to `LITE_QOS_CHUNK_MAX`.
pub const LITE_QOS_CHUNK_AUTO: u32 = 0;

/// The node's enforcement settings (`LITE_IOC_QOS_GET`, `LITE_IOC_QOS_SET`; setting
/// needs CAP_NET_ADMIN).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteQos {
    /// In (set only): `LITE_QOS_SET_*` bits.
    pub set: u32,
    /// `LITE_QOS_*`.
    pub mode: u32,
    /// Target99: the latency class's p99 that SafeUtil steers to (ns, > 0).
    pub target99_ns: u64,
    /// Weights of the classes (1 to `LITE_QOS_MAX_WEIGHT`); the latency class's
    /// weight sets the other classes' floor: their share of the link.
    pub weights: [u32; 3],
    /// Bytes per work request of paced transfers (`LITE_QOS_CHUNK_MIN` to
    /// `LITE_QOS_CHUNK_MAX`, or `LITE_QOS_CHUNK_AUTO`): what a latency-class
    /// operation may wait behind.
    pub chunk_bytes: u32,
    /// The link's rate in bytes/s (SafeUtil stays 1/16 below it); 0: found (the
    /// best rate at which this node's transfers were acknowledged over 2 s).
    pub link_rate: u64,
}

/// `LiteClassRule::kind`: `id` is a process id (the rule covers its descendants).
pub const LITE_RULE_PID: u32 = 1;
/// `id` is a user id.
pub const LITE_RULE_UID: u32 = 2;
/// `id` is a cgroup (v2) id: the inode number of its directory.
pub const LITE_RULE_CGROUP: u32 = 3;
/// Rules a node keeps at most (ENOSPC beyond).
pub const LITE_MAX_RULES: u32 = 64;

/// An operator rule (`LITE_IOC_CLASS_RULE_ADD`, `..._DEL`; CAP_NET_ADMIN). Adding
/// a rule for a kind and id that has one replaces its class; deleting an unknown
/// rule is ENOENT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassRule {
    /// `LITE_RULE_*`.
    pub kind: u32,
    /// `LITE_CLASS_*` (ignored by delete).
    pub class: u32,
    pub id: u64,
}

/// List the rules (`LITE_IOC_CLASS_RULES`): fills up to `capacity` at `entries`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassRules {
    /// User pointer to `capacity` `LiteClassRule`.
    pub entries: u64,
    pub capacity: u32,
    /// Out: number of rules.
    pub count: u32,
}

/// `LiteClassSelf::class` to only ask for the caller's class.
pub const LITE_CLASS_QUERY: u32 = u32::MAX;
/// `LiteClassSelf::source`: no rule applies.
pub const LITE_CLASS_FROM_DEFAULT: u32 = 0;
pub const LITE_CLASS_FROM_PID: u32 = 1;
pub const LITE_CLASS_FROM_CGROUP: u32 = 2;
pub const LITE_CLASS_FROM_UID: u32 = 3;
/// The process (or an ancestor) lowered its own class.
pub const LITE_CLASS_FROM_SELF: u32 = 4;

/// The calling process's class (`LITE_IOC_CLASS_SELF`): with `class` other than
/// `LITE_CLASS_QUERY`, the process first lowers itself (and its descendants) to
/// it, for as long as its file of /dev/lite is open. EPERM: that would raise it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassSelf {
    /// In: `LITE_CLASS_*` or `LITE_CLASS_QUERY`; out: the effective class.
    pub class: u32,
    /// Out: `LITE_CLASS_FROM_*`.
    pub source: u32,
}

/// One class's traffic since the module loaded, and its recent latency.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteClassStat {
    pub bytes: u64,
    pub ops: u64,
    /// Median and 99th percentile of the class's last 1024 operations' latencies
    /// (issue to completion, ns; 0 without samples).
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Transfers of the class in progress now.
    pub active: u32,
    /// Of them, those waiting for tokens or their turn.
    pub queued: u32,
    /// Chunks delayed by pacing, and the time they waited (ns).
    pub paced_chunks: u64,
    pub paced_ns: u64,
}

/// The enforcement engine's state (`LITE_IOC_QOS_STAT`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteQosStat {
    pub mode: u32,
    /// 1 while latency-class traffic is active (pacing applies).
    pub latency_active: u32,
    /// Rate the paced classes may use now (bytes/s); 0: unlimited.
    pub safe_util: u64,
    /// The link rate SafeUtil is bounded by (bytes/s; set, or else found).
    pub link_rate: u64,
    /// The link rate this node found (bytes/s; 0: none yet), whether set or not.
    pub found_rate: u64,
    /// Bytes per paced work request now.
    pub chunk_bytes: u64,
    /// Bytes of tokens banked now.
    pub tokens: u64,
    /// Latency-class reference probes sent, and the last one's round trip (ns).
    pub probes: u64,
    pub last_probe_ns: u64,
    /// AIMD steps that halved and that increased SafeUtil.
    pub decreases: u64,
    pub increases: u64,
    pub classes: [LiteClassStat; 3],
    /// Where the latency class's LT_writes (`[0]`) and LT_reads (`[1]`) spent their
    /// time in this kernel since it loaded.
    pub latency_phases: [LitePhases; 2],
    /// Paced work requests in flight from this node, and how many it allows: the
    /// node's paced window in chunks, whichever transfers they belong to.
    pub paced_in_flight: u32,
    pub paced_places: u32,
}

/// The time one-sided operations spent in each phase, summed (ns): differences of
/// two snapshots give the means over the time between them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LitePhases {
    /// Operations summed.
    pub ops: u64,
    /// From the start of the transfer until its last work request was posted:
    /// credits, admission and pacing, locks.
    pub before_post_ns: u64,
    /// From then until its last completion ran: the NICs, the network and the peer.
    pub in_network_ns: u64,
    /// From then until the caller ran again.
    pub wakeup_ns: u64,
}

/// `_IOR('L', 33, LiteQos)`
pub const LITE_IOC_QOS_GET: u32 = 0x8028_4C21;
/// `_IOW('L', 34, LiteQos)`
pub const LITE_IOC_QOS_SET: u32 = 0x4028_4C22;
/// `_IOW('L', 35, LiteClassRule)`
pub const LITE_IOC_CLASS_RULE_ADD: u32 = 0x4010_4C23;
/// `_IOW('L', 36, LiteClassRule)`
pub const LITE_IOC_CLASS_RULE_DEL: u32 = 0x4010_4C24;
/// `_IOWR('L', 37, LiteClassRules)`
pub const LITE_IOC_CLASS_RULES: u32 = 0xC010_4C25;
/// `_IOWR('L', 38, LiteClassSelf)`
pub const LITE_IOC_CLASS_SELF: u32 = 0xC008_4C26;
/// `_IOR('L', 39, LiteQosStat)`
pub const LITE_IOC_QOS_STAT: u32 = 0x8140_4C27;
/// `_IOW('L', 40, LiteReserve)`
pub const LITE_IOC_RESERVE: u32 = 0x4008_4C28;

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
