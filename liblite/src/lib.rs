//! liblite: the user-space side of LITE-RS.
//!
//! [`Lite`] opens /dev/lite, maps the process's shared page and wraps each ioctl
//! with typed arguments and a typed [`Error`]. LITE memory regions are [`Lmr`]s
//! from [`Lite::malloc`] and [`Lite::map`]. The C ABI in [`capi`] exposes the same
//! calls to C programs (header: `liblite/include/liblite.h`).
//!
//! ```
//! use lite::{Lite, MallocOptions, Perm};
//! use std::time::Duration;
//!
//! fn store_and_ask(lite: &Lite) -> lite::Result<usize> {
//!     // 1 MiB held by nodes 1 and 2, readable and writable by any node that maps it.
//!     let opts = MallocOptions { holders: vec![1, 2], ..Default::default() };
//!     let table = lite.malloc(1 << 20, "doc-table", &opts)?;
//!     table.write(4096, b"hello")?;
//!     let view = lite.map("doc-table", Perm::READ, 0)?;
//!     let mut word = [0u8; 5];
//!     view.read(4096, &mut word)?;
//!     assert_eq!(&word, b"hello");
//!     // An RPC to id 7 served on node 1: the reply's length.
//!     let mut reply = [0u8; 64];
//!     let len = lite.rpc(1, 7, b"key", &mut reply, Duration::from_secs(1))?;
//!     table.free()?;
//!     Ok(len)
//! }
//!
//! // Without the module (as where these docs are tested) opening says what to do.
//! match Lite::open() {
//!     Ok(lite) => println!("reply of {:?} bytes", store_and_ask(&lite)),
//!     Err(e) => println!("{e}"),
//! }
//! ```

pub mod capi;
mod error;
mod lmr;
mod qos;
mod rpc;
mod size;

pub use error::{Error, Result, ERRNO_MESSAGES};
pub use lite_uapi as uapi;
pub use lmr::{Lmr, LmrStat, LockGuard, MallocOptions, Perm};
pub use qos::{
    Class, ClassRule, ClassSource, ClassStat, Pacing, Phases, QosChange, QosMode, QosSettings, QosStat, RuleTarget,
};
pub use rpc::{CallPhases, Incoming, ReplyToken, RpcStat};
pub use size::parse_size;

use lite_uapi::*;
use nix::errno::Errno;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Path of the LITE-RS device.
pub const DEVICE_PATH: &str = "/dev/lite";

/// This node's LMR bookkeeping (see `Lite::mem_stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemStat {
    /// LMRs this node is master of.
    pub mastered: u32,
    /// Handles of every process on this node.
    pub mappings: u32,
    /// Bytes of LMR memory held here for any master.
    pub held_bytes: u64,
    /// Most bytes this node holds for LMRs.
    pub held_limit: u64,
    /// Callers waiting for locks: those of any node queued at words this node
    /// holds, and this node's callers waiting for its turn at a word.
    pub lock_queued: u32,
    /// Callers of any node waiting at barriers whose counters this node holds.
    pub barrier_queued: u32,
    /// Bytes of zeroed memory ready for allocations (`Lite::set_reserve`).
    pub reserve_bytes: u64,
    /// Bytes the reserve is refilled to.
    pub reserve_target: u64,
    /// Bytes allocations took from the reserve since the module was loaded.
    pub reserve_used: u64,
    /// Where this node's small reads spent their time in the kernel.
    pub read_phases: ReadPhases,
}

/// Time user-space LT_reads of at most 4 KiB from one other node spent in each
/// phase in the kernel, summed: the difference of two snapshots gives the means
/// between them. What a reader measures beyond their sum is its kernel crossing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadPhases {
    pub reads: u64,
    /// Until the buffer was ready (handle, permission and range checked, a staging
    /// page taken, or the caller's pages pinned when all were taken).
    pub pin: Duration,
    /// Until the work request went to the provider: QoS ticket, send credits.
    pub prepare: Duration,
    /// The provider's post.
    pub post: Duration,
    /// Until the completion's handler ran: the NICs, the wire, the peer.
    pub wire: Duration,
    /// Until the reader ran again: its poll noticed, or it was woken.
    pub notice: Duration,
    /// Until the return: the bytes copied out (or the pages let go).
    pub finish: Duration,
    /// Reads whose reader slept before the completion came.
    pub slept: u64,
}

/// State of a peer node as this node's kernel sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// QPs created, waiting for the peer's side.
    Prepared,
    /// Connected: operations to the node work.
    Connected,
    /// Sends to the node failed: it is probably dead.
    Failed,
    /// The cluster manager declared the node gone.
    Down,
}

impl PeerState {
    fn from_abi(state: u32) -> PeerState {
        match state {
            LITE_PEER_PREPARED => PeerState::Prepared,
            LITE_PEER_CONNECTED => PeerState::Connected,
            LITE_PEER_ERROR => PeerState::Failed,
            _ => PeerState::Down,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PeerState::Prepared => "prepared",
            PeerState::Connected => "connected",
            PeerState::Failed => "failed",
            PeerState::Down => "down",
        }
    }
}

/// A QP between this node and a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpStatus {
    pub local_qpn: u32,
    pub remote_qpn: u32,
    /// `IB_QPS_*`: 0 RESET, 1 INIT, 2 RTR, 3 RTS, 4 SQD, 5 SQE, 6 ERR.
    pub state: u32,
}

/// Name of an `IB_QPS_*` state.
pub fn qp_state_name(state: u32) -> &'static str {
    match state {
        0 => "RESET",
        1 => "INIT",
        2 => "RTR",
        3 => "RTS",
        4 => "SQD",
        5 => "SQE",
        6 => "ERR",
        _ => "NONE",
    }
}

/// A peer node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: u32,
    pub epoch: u64,
    pub state: PeerState,
    /// `IB_MTU_*` code in use, 0 before connection.
    pub mtu: u32,
    pub qps: Vec<QpStatus>,
    /// Its requests this node's NIC refused (a key, address or access it was not
    /// given); the first one fences it off.
    pub access_errors: u64,
}

/// This node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: Option<u32>,
    pub epoch: u64,
    /// RDMA device name, `None` when the module has no device.
    pub device: Option<String>,
    pub port: u32,
    pub port_active: bool,
    /// RoCE v2 GID (IPv4-mapped), `None` until the port has an address.
    pub gid: Option<[u8; 16]>,
    pub qps_per_peer: u32,
    pub active_mtu: u32,
    /// What peers' keys reach: each LMR chunk, mailbox and ring alone (`true`,
    /// `remote_access=chunks`), or all of the node's memory (`false`, `global`).
    pub remote_chunks: bool,
}

/// What the node's RDMA device can do, as the module read it at attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// "infiniband", "roce" or "iwarp".
    pub transport: &'static str,
    /// RDMA WRITE with immediate, which LITE-RS's messages and RPC ride on.
    pub write_imm: bool,
    /// Remote atomics done by the NIC.
    pub atomics: bool,
    /// QPs connect only through the connection manager (iWARP).
    pub cm_connect: bool,
    /// Scatter-gather entries per send or RDMA WRITE, and per RDMA READ.
    pub max_send_sge: u32,
    pub max_sge_rd: u32,
    /// The NIC's atomic scope: "none", "hca" or "global".
    pub atomic_cap: &'static str,
    /// RDMA READs and atomics one QP may have outstanding as a target.
    pub max_qp_rd_atom: u32,
    /// How LITE-RS carries messages on it: "write-with-immediate" or "write+send".
    pub messages: &'static str,
    /// Who executes atomics, locks and barriers: "nic" or "holder" (its kernel).
    pub atomics_by: &'static str,
}

/// Side of a QP connection, as exchanged through the cluster manager.
pub type ConnInfo = LiteConnInfo;

/// An open handle on /dev/lite with its shared page mapped.
pub struct Lite {
    file: File,
    shared: NonNull<LiteSharedPage>,
    /// Shared-page slots in use by this handle's calls (bit n: slot n).
    slots: AtomicU64,
}

// SAFETY: the shared page is only read through atomics; the fd is thread-safe.
unsafe impl Send for Lite {}
// SAFETY: see Send.
unsafe impl Sync for Lite {}

/// The descriptor of /dev/lite, for `poll`, `mmap` or passing it to another process.
impl AsRawFd for Lite {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Lite {
    /// Opens /dev/lite and maps the shared page.
    pub fn open() -> Result<Lite> {
        Self::open_path(Path::new(DEVICE_PATH))
    }

    /// Opens a LITE-RS device at `path` (tests; normally /dev/lite).
    pub fn open_path(path: &Path) -> Result<Lite> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| {
            match e.raw_os_error().map(Errno::from_raw) {
                Some(Errno::ENOENT | Errno::ENXIO | Errno::ENODEV) => Error::NotLoaded,
                Some(Errno::EACCES | Errno::EPERM) => Error::DeviceAccess,
                Some(errno) => Error::Sys { op: "open /dev/lite", errno },
                None => Error::Sys { op: "open /dev/lite", errno: Errno::EIO },
            }
        })?;
        let page = NonZeroUsize::new(page_size()).ok_or(Error::Sys { op: "sysconf", errno: Errno::EINVAL })?;
        // SAFETY: a fresh shared mapping of the device's one page; nothing else aliases it.
        let addr =
            unsafe { mmap(None, page, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, &file, 0) }
                .map_err(|errno| Error::Sys { op: "mmap /dev/lite", errno })?;
        let lite = Lite { file, shared: addr.cast(), slots: AtomicU64::new(0) };
        let header = lite.shared_header();
        if header.magic != LITE_SHARED_MAGIC || header.abi_version != LITE_ABI_VERSION {
            return Err(Error::AbiMismatch { kernel: header.abi_version, library: LITE_ABI_VERSION });
        }
        Ok(lite)
    }

    fn shared_header(&self) -> LiteSharedPage {
        // SAFETY: the mapping is valid while `self` lives; the kernel only writes
        // `ioctl_count` concurrently, and a torn read of it would only be a statistic.
        unsafe { std::ptr::read_volatile(self.shared.as_ptr()) }
    }

    /// User/kernel crossings (ioctls) this handle has made, counted by the kernel.
    pub fn crossings(&self) -> u64 {
        // SAFETY: `ioctl_count` is an 8-byte aligned u64 inside the mapped page.
        let count = unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.shared.as_ptr()).ioctl_count)) };
        count.load(Ordering::Relaxed)
    }

    fn sys_ioctl<T>(&self, cmd: u32, arg: &mut T) -> std::result::Result<(), Errno> {
        // SAFETY: `cmd` encodes `size_of::<T>()` (checked by uapi tests) and `arg` is a
        // valid, exclusively borrowed `T` for the duration of the call.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), cmd as libc::c_ulong, arg as *mut T as *mut c_void) };
        if rc < 0 {
            Err(Errno::last())
        } else {
            Ok(())
        }
    }

    fn ioctl<T>(&self, op: &'static str, node: Option<u32>, cmd: u32, arg: &mut T) -> Result<()> {
        self.sys_ioctl(cmd, arg).map_err(|errno| Error::from_ioctl(op, node, errno))
    }

    /// This node: id, device, port and GID.
    pub fn info(&self) -> Result<NodeInfo> {
        let mut info = LiteInfo::default();
        self.ioctl("info", None, LITE_IOC_INFO, &mut info)?;
        let name_len = info.device.iter().position(|&b| b == 0).unwrap_or(info.device.len());
        Ok(NodeInfo {
            node_id: (info.node_id != LITE_NODE_NONE).then_some(info.node_id),
            epoch: info.epoch,
            device: (name_len > 0).then(|| String::from_utf8_lossy(&info.device[..name_len]).into_owned()),
            port: info.port,
            port_active: info.port_state == 4,
            gid: (info.gid != [0; 16]).then_some(info.gid),
            qps_per_peer: info.qps_per_peer,
            active_mtu: info.active_mtu,
            remote_chunks: info.remote_access == LITE_REMOTE_ACCESS_CHUNKS,
        })
    }

    /// What the node's RDMA device can do; `ENODEV` without one.
    pub fn device_caps(&self) -> Result<DeviceCaps> {
        let mut caps = LiteDevCaps::default();
        self.ioctl("device capabilities", None, LITE_IOC_DEV_CAPS, &mut caps)?;
        Ok(DeviceCaps {
            transport: match caps.transport {
                LITE_TRANSPORT_IB => "infiniband",
                LITE_TRANSPORT_ROCE => "roce",
                LITE_TRANSPORT_IWARP => "iwarp",
                _ => "unknown",
            },
            write_imm: caps.flags & LITE_CAP_WRITE_IMM != 0,
            atomics: caps.flags & LITE_CAP_ATOMICS != 0,
            cm_connect: caps.flags & LITE_CAP_CM_CONNECT != 0,
            max_send_sge: caps.max_send_sge,
            max_sge_rd: caps.max_sge_rd,
            atomic_cap: match caps.atomic_cap {
                0 => "none",
                1 => "hca",
                _ => "global",
            },
            max_qp_rd_atom: caps.max_qp_rd_atom,
            messages: if caps.flags & LITE_PATH_SEND_MESSAGES != 0 { "write+send" } else { "write-with-immediate" },
            atomics_by: if caps.flags & LITE_PATH_HOLDER_ATOMICS != 0 { "holder" } else { "nic" },
        })
    }

    /// This node's LMR bookkeeping: LMRs mastered, mappings, memory held for LMRs.
    pub fn mem_stat(&self) -> Result<MemStat> {
        let mut stat = LiteMemStat::default();
        self.ioctl("memory status", None, LITE_IOC_MEM_STAT, &mut stat)?;
        Ok(MemStat {
            mastered: stat.mastered,
            mappings: stat.mappings,
            held_bytes: stat.held_bytes,
            held_limit: stat.held_limit,
            lock_queued: stat.lock_queued,
            barrier_queued: stat.barrier_queued,
            reserve_bytes: stat.reserve_bytes,
            reserve_target: stat.reserve_target,
            reserve_used: stat.reserve_used,
            read_phases: ReadPhases {
                reads: stat.read_phases.reads,
                pin: Duration::from_nanos(stat.read_phases.pin_ns),
                prepare: Duration::from_nanos(stat.read_phases.prepare_ns),
                post: Duration::from_nanos(stat.read_phases.post_ns),
                wire: Duration::from_nanos(stat.read_phases.wire_ns),
                notice: Duration::from_nanos(stat.read_phases.notice_ns),
                finish: Duration::from_nanos(stat.read_phases.finish_ns),
                slept: stat.read_phases.slept,
            },
        })
    }

    /// Keeps `bytes` (rounded up to whole chunks of `LITE_CHUNK_SIZE`) of zeroed memory
    /// ready on this node, so that allocations held here do not wait for zeroing; the
    /// module refills it in the background. 0 releases it. Needs CAP_NET_ADMIN.
    pub fn set_reserve(&self, bytes: u64) -> Result<()> {
        let limit = self.mem_stat()?.held_limit;
        let rounded = bytes.div_ceil(LITE_CHUNK_SIZE).saturating_mul(LITE_CHUNK_SIZE);
        if rounded > limit {
            return Err(Error::InvalidArgument(format!(
                "a reserve of {} MiB is beyond this node's LMR memory limit of {} MiB (3/4 of its RAM)",
                rounded >> 20,
                limit >> 20
            )));
        }
        self.ioctl("set the zeroed reserve", None, LITE_IOC_RESERVE, &mut LiteReserve { bytes })
    }

    /// This node's id, or `Error::NotJoined`.
    pub fn node_id(&self) -> Result<u32> {
        self.info()?.node_id.ok_or(Error::NotJoined)
    }

    /// Every peer this node knows, down ones included, sorted by id.
    pub fn peers(&self) -> Result<Vec<Peer>> {
        let mut entries = vec![LitePeerStatus::default(); LITE_MAX_NODES as usize];
        let mut list = LitePeerList { entries: entries.as_mut_ptr() as u64, capacity: entries.len() as u32, count: 0 };
        self.ioctl("list peers", None, LITE_IOC_PEERS, &mut list)?;
        entries.truncate((list.count as usize).min(entries.len()));
        let mut peers: Vec<Peer> = entries
            .iter()
            .map(|e| Peer {
                id: e.id,
                epoch: e.epoch,
                state: PeerState::from_abi(e.state),
                mtu: e.mtu,
                qps: (0..e.nr_qps as usize)
                    .map(|i| QpStatus { local_qpn: e.local_qpn[i], remote_qpn: e.remote_qpn[i], state: e.qp_state[i] })
                    .collect(),
                access_errors: e.access_errors,
            })
            .collect();
        peers.sort_by_key(|p| p.id);
        Ok(peers)
    }

    /// `count` kernel-to-kernel echo round trips to `node` carrying `payload` bytes
    /// each way (checked on return), each bounded by `timeout`.
    pub fn ping(&self, node: u32, count: u32, payload: u32, timeout: Duration) -> Result<Vec<Duration>> {
        if count == 0 || count > LITE_PING_MAX_COUNT {
            return Err(Error::InvalidArgument(format!("ping count must be 1..={LITE_PING_MAX_COUNT}, not {count}")));
        }
        if payload > LITE_PING_MAX_PAYLOAD {
            return Err(Error::InvalidArgument(format!(
                "ping payload must be at most {LITE_PING_MAX_PAYLOAD} bytes, not {payload}"
            )));
        }
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX).clamp(1, 60_000);
        let mut rtts = vec![0u64; count as usize];
        let mut arg = LitePing { node, count, timeout_ms, payload, rtt_ns: rtts.as_mut_ptr() as u64 };
        self.ioctl("ping", Some(node), LITE_IOC_PING, &mut arg)?;
        Ok(rtts.into_iter().map(Duration::from_nanos).collect())
    }

    // ---- membership: used by the cluster agent (lite-admin join), needs CAP_NET_ADMIN ----

    /// Makes this node `node_id` of incarnation `epoch`.
    pub fn join(&self, node_id: u32, epoch: u64) -> Result<()> {
        let mut arg = LiteJoin { node_id, reserved: 0, epoch };
        self.ioctl("join", None, LITE_IOC_JOIN, &mut arg)
    }

    /// Leaves the cluster: every peer is torn down.
    pub fn leave(&self) -> Result<()> {
        self.ioctl("leave", None, LITE_IOC_LEAVE, &mut ())
    }

    /// This node's side for `peer`'s incarnation `epoch`; `true` if QPs were just created.
    pub fn prepare_peer(&self, peer: u32, epoch: u64) -> Result<(ConnInfo, bool)> {
        let mut arg = LitePeerPrepare { peer_id: peer, peer_epoch: epoch, ..Default::default() };
        self.ioctl("prepare peer", Some(peer), LITE_IOC_PEER_PREPARE, &mut arg)?;
        Ok((arg.local, arg.created != 0))
    }

    /// Connects the QPs prepared for `peer` to its side `remote`. `Ok(false)`: the
    /// connection is under way (through the RDMA CM, on iWARP devices) and `peers`
    /// shows the peer connected once it is up.
    pub fn connect_peer(&self, peer: u32, epoch: u64, remote: &ConnInfo) -> Result<bool> {
        let mut arg = LitePeerConnect { peer_id: peer, reserved: 0, peer_epoch: epoch, remote: *remote };
        match self.ioctl("connect peer", Some(peer), LITE_IOC_PEER_CONNECT, &mut arg) {
            Ok(()) => Ok(true),
            Err(Error::Sys { errno: Errno::EINPROGRESS, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Tears down everything to `peer` and shows it as down.
    pub fn peer_down(&self, peer: u32) -> Result<()> {
        let mut arg = LitePeerDown { peer_id: peer, reserved: 0 };
        self.ioctl("mark peer down", Some(peer), LITE_IOC_PEER_DOWN, &mut arg)
    }

    /// Issues a raw ioctl: for tests of the module's argument checking only.
    #[doc(hidden)]
    pub fn raw_ioctl(&self, cmd: u32, arg: usize) -> std::result::Result<i32, Errno> {
        // SAFETY: the caller passes whatever it wants to test; the kernel must cope.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), cmd as libc::c_ulong, arg) };
        if rc < 0 {
            Err(Errno::last())
        } else {
            Ok(rc)
        }
    }
}

impl Drop for Lite {
    fn drop(&mut self) {
        // SAFETY: mapped in `open_path` with this length; no reference to it outlives `self`.
        let _ = unsafe { munmap(self.shared.cast(), page_size()) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Formats a GID as the IPv4 address it maps (RoCE v2), or as hex.
pub fn gid_to_string(gid: &[u8; 16]) -> String {
    if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        format!("::ffff:{}.{}.{}.{}", gid[12], gid[13], gid[14], gid[15])
    } else {
        gid.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_device_says_to_load_the_module() {
        let err = Lite::open_path(Path::new("/nonexistent/lite")).err().unwrap();
        assert_eq!(err, Error::NotLoaded);
        assert!(err.to_string().contains("insmod lite.ko"));
    }

    #[test]
    fn kernel_errnos_become_typed_errors() {
        assert_eq!(Error::from_ioctl("ping", Some(3), Errno::EHOSTDOWN), Error::NodeDown(3));
        assert_eq!(Error::from_ioctl("ping", Some(3), Errno::ENOENT), Error::UnknownNode(3));
        assert_eq!(Error::from_ioctl("join", None, Errno::EBUSY), Error::AlreadyJoined);
        assert_eq!(Error::from_ioctl("join", None, Errno::EPERM), Error::PermissionDenied { op: "join" });
        assert_eq!(Error::from_ioctl("ping", Some(1), Errno::ETIMEDOUT), Error::Timeout);
        assert!(matches!(Error::from_ioctl("x", None, Errno::EIO), Error::Sys { errno: Errno::EIO, .. }));
        for e in [Error::NodeDown(3), Error::Timeout, Error::NotJoined] {
            assert_eq!(Error::from_ioctl("ping", Some(3), e.errno()), e);
        }
    }

    #[test]
    fn gids_print_as_their_ipv4_address() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 77, 0, 2]);
        assert_eq!(gid_to_string(&gid), "::ffff:10.77.0.2");
        assert_eq!(gid_to_string(&[0xfe; 16]), "fefe:fefe:fefe:fefe:fefe:fefe:fefe:fefe");
    }
}
