// SPDX-License-Identifier: GPL-2.0 OR MIT
//! LITE memory regions (LMRs): permissions and limits, the argument structs of the
//! LMR ioctls (allocate, register, map, grant, read, write, memset, memcpy, stat,
//! the zeroed reserve) and their numbers.

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
    /// Callers waiting for locks: those (of any node) queued at words this node
    /// holds, and this node's callers waiting for its turn at a word.
    pub lock_queued: u32,
    /// Callers (of any node) waiting at barriers whose counters this node holds.
    pub barrier_queued: u32,
    /// Bytes of zeroed memory ready for allocations (`LITE_IOC_RESERVE`).
    pub reserve_bytes: u64,
    /// Bytes the reserve is refilled to.
    pub reserve_target: u64,
    /// Bytes allocations took from the reserve since the module was loaded.
    pub reserve_used: u64,
    /// Where user-space LT_reads of at most 4 KiB from another node spent their
    /// time (it only grows).
    pub read_phases: LiteReadPhases,
}

/// The time user-space LT_reads of at most 4 KiB (the size that may poll first), from
/// memory one other node holds, spent in each phase, summed (ns), from the
/// module's entry to its return: differences of two snapshots give the means over
/// the reads between them. What the reader measures beyond their sum is its kernel
/// crossing and the ioctl's argument copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteReadPhases {
    /// Reads summed.
    pub reads: u64,
    /// From the entry until the buffer was ready: the handle, the permission and
    /// the range checked, a staging page taken (or, when all were taken, the
    /// reader's pages pinned and mapped).
    pub pin_ns: u64,
    /// From then until the work request went to the provider: the QoS ticket, send
    /// credits, room in flight.
    pub prepare_ns: u64,
    /// The provider's post (`ib_post_send`).
    pub post_ns: u64,
    /// From then until the completion's handler ran: the NICs, the wire and the
    /// peer, the provider's share.
    pub wire_ns: u64,
    /// From then until the reader ran again: its poll noticed, or it was woken.
    pub notice_ns: u64,
    /// From then until the return: the bytes copied out of the staging page (or
    /// the pages unpinned and unmapped).
    pub finish_ns: u64,
    /// Reads whose reader slept before the completion came.
    pub slept: u64,
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
pub const LITE_IOC_MEM_STAT: u32 = 0x8078_4C13;

/// `_IOWR('L', 20, LiteRegister)`
pub const LITE_IOC_REGISTER: u32 = 0xC060_4C14;

/// `_IOW('L', 40, LiteReserve)`
pub const LITE_IOC_RESERVE: u32 = 0x4008_4C28;
