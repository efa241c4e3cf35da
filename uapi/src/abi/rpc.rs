// SPDX-License-Identifier: GPL-2.0 OR MIT
//! RPC and messages: registering servers, calls with their shared-page slots,
//! receiving and replying, and the RPC ioctls.

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
/// zero after every scenario (all but `call_phases`, which only grows).
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
    /// Where calls from this node to other nodes spent their time: user-space
    /// callers' (`[0]`) and the kernel's own (`[1]`, `LITE_IOC_RPC_BENCH`).
    pub call_phases: [LiteCallPhases; 2],
}

/// The time calls that were answered spent in each phase, summed (ns), from the
/// module's entry to the caller running again: differences of two snapshots give
/// the means over the calls between them. What a user-space caller measures
/// beyond their sum is its two kernel crossings and its own wait on the slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteCallPhases {
    /// Calls summed (every phase but the wake-up).
    pub calls: u64,
    /// From the call's entry until its output buffer was pinned and mapped.
    pub pin_ns: u64,
    /// From then until the server was given a key to it (a reply too large to
    /// ride in the completion record).
    pub register_ns: u64,
    /// From then until the request was ready to post: staging, a call slot, ring room.
    pub stage_ns: u64,
    /// From then until the reply's completion record was handled: the post, the
    /// NICs, the network, the server and its reply.
    pub round_trip_ns: u64,
    /// From then until the result was in the caller's slot: an inline reply copied.
    pub publish_ns: u64,
    /// From then until the completion handler was done with the call: waking
    /// its caller, revoking its key, unpinning its pages (the handler's time,
    /// beside the caller's wake-up).
    pub release_ns: u64,
    /// Calls whose caller was asleep in the kernel when the result came.
    pub woken: u64,
    /// From the result in the slot until those callers ran again.
    pub wakeup_ns: u64,
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
pub const LITE_IOC_RPC_STAT: u32 = 0x80B0_4C1D;
