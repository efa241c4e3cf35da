//! liblite's errors: what went wrong and what to do about it.

use lite_uapi::{LITE_LMR_MAX_SIZE, LITE_NODE_ANY};
use nix::errno::Errno;
use std::ffi::CStr;
use std::fmt;

/// Every failure liblite reports. Messages name the cause and the remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// /dev/lite does not exist: the module is not loaded.
    NotLoaded,
    /// The caller may not do this (operator commands need CAP_NET_ADMIN).
    PermissionDenied { op: &'static str },
    /// The caller may not open /dev/lite: it is root's and group lite's (mode 0660).
    DeviceAccess,
    /// The module and this library were built from different ABI versions.
    AbiMismatch { kernel: u32, library: u32 },
    /// No RDMA device is registered with the module.
    NoDevice,
    /// The RDMA port has no RoCE (IPv4) address yet.
    NoAddress,
    /// This node has not joined a cluster.
    NotJoined,
    /// This node is already a member under another id.
    AlreadyJoined,
    /// No such node in the cluster (or a stale incarnation of it).
    UnknownNode(u32),
    /// The node is down, or its QPs failed.
    NodeDown(u32),
    /// The peer did not answer in time.
    Timeout,
    /// A signal interrupted the call.
    Interrupted,
    /// An argument was rejected before or by the kernel.
    InvalidArgument(String),
    /// The LMR handle is unknown: never valid, unmapped, freed by this process, or
    /// from another open of /dev/lite.
    BadHandle,
    /// The LMR handle lacks the permission `op` needs (or, at map, the master refused it).
    AccessDenied { op: &'static str },
    /// Only the LMR's master may grant or free it.
    NotMaster { op: &'static str },
    /// `[offset, offset + len)` is not inside the LMR (`size` when known) or overflows.
    OutOfRange { offset: u64, len: u64, size: Option<u64> },
    /// An LMR of this name already exists in the namespace.
    NameTaken(String),
    /// No LMR of this name in the namespace.
    NoSuchName(String),
    /// The master freed the LMR behind this handle.
    Freed,
    /// The holders lack the memory for an LMR of `size` bytes (or it exceeds the limit).
    OutOfMemory { size: u64 },
    /// A buffer is not valid user memory.
    BadAddress,
    /// A node holding the LMR, or its master, is down (which one is not known).
    HolderDown { op: &'static str },
    /// No server is registered for RPC `id` at `node`.
    NoServer { node: u32, id: u32 },
    /// The server process exited (or unregistered) before it replied.
    ServerGone { id: u32 },
    /// A request or reply larger than `LITE_RPC_MAX_MSG`.
    MessageTooLarge { size: u64 },
    /// The reply (or a received request) of `size` bytes did not fit the buffer.
    BufferTooSmall { size: u64, capacity: u64 },
    /// The RPC id is already served on this node.
    IdTaken(u32),
    /// This thread holds the lock already (locks are not recursive).
    AlreadyLocked,
    /// Unlock of a lock this thread does not hold.
    NotLocked,
    /// The lock was taken from this process: its node was taken for dead.
    LockLost,
    /// Too many callers wait at one lock or barrier word; try again later.
    TooManyWaiters,
    /// A process asked for a higher priority class than it has.
    ClassRaise { current: &'static str, wanted: &'static str },
    /// Any other system error, with the operation that hit it.
    Sys { op: &'static str, errno: Errno },
}

/// What an LMR ioctl was about: the same errno means different things per call
/// (ENOENT is an unknown name at map but an unknown node at grant).
#[derive(Clone, Copy, Debug)]
pub(crate) enum LmrCall<'a> {
    Malloc {
        name: &'a [u8],
        size: u64,
    },
    Map {
        name: &'a [u8],
    },
    Grant {
        node: u32,
    },
    /// Read, write, memset, memcpy (its destination) of `[offset, offset + len)`.
    Access {
        offset: u64,
        len: u64,
        size: Option<u64>,
    },
    /// Unmap, free, stat.
    Handle,
}

pub type Result<T> = std::result::Result<T, Error>;

/// The errnos liblite returns, each with what it means for a LITE call and what to
/// do about it: the messages of `lite_strerror` and the errno names tools accept.
pub const ERRNO_MESSAGES: [(Errno, &CStr); 23] = [
    (Errno::ENODEV, c"no RDMA device, or /dev/lite missing: load lite.ko and create an RDMA device"),
    (
        Errno::EPERM,
        c"permission denied: operator commands (membership, classes, reserve) need CAP_NET_ADMIN; \
         only an LMR's master may grant or free it",
    ),
    (Errno::EPROTO, c"module and liblite ABI versions differ: rebuild both from one tree"),
    (Errno::EADDRNOTAVAIL, c"the RDMA port has no RoCE address: configure an IPv4 address"),
    (Errno::ENOTCONN, c"this node has not joined a cluster: run `lite-admin join MANAGER`"),
    (Errno::EBUSY, c"already joined under another id: run `lite-admin leave` first"),
    (
        Errno::ENOENT,
        c"no such node in the cluster (see `lite-admin status`), or no LMR of that name \
         in the namespace",
    ),
    (
        Errno::EHOSTDOWN,
        c"node is down or unreachable (for an LMR: a holder or its master): \
         see `lite-admin status`",
    ),
    (Errno::ETIMEDOUT, c"the peer did not answer in time"),
    (Errno::EINTR, c"interrupted by a signal"),
    (
        Errno::EINVAL,
        c"invalid argument (for an LMR: zero length or size, name not 1-63 bytes, \
         unknown permission bits or nodes, atomic offset not a multiple of 8)",
    ),
    (Errno::EIO, c"a peer's answer was corrupt"),
    (Errno::EBADF, c"unknown LMR handle: unmapped, freed, or obtained through another lite_open"),
    (
        Errno::EACCES,
        c"permission denied: to open /dev/lite, be in group lite (usermod -aG lite USER, \
         then log in again); for an LMR, map it with the permission needed or have the \
         master grant it",
    ),
    (Errno::ERANGE, c"offset and length reach beyond the end of the LMR"),
    (Errno::EEXIST, c"the LMR name is taken in the namespace: map that LMR or choose another name"),
    (Errno::EIDRM, c"the LMR was freed by its master: unmap the handle"),
    (
        Errno::ENOMEM,
        c"the holders lack the memory for the LMR, or it exceeds the size limit: \
         ask for less or spread it over more nodes",
    ),
    (Errno::EFAULT, c"a buffer is not valid user memory over its whole length"),
    (Errno::ECONNREFUSED, c"no server for that RPC id on that node: start it there and retry"),
    (Errno::ECONNRESET, c"the RPC server exited before it replied: restart it and retry"),
    (Errno::EMSGSIZE, c"message larger than LITE_RPC_MAX_MSG (4 MiB)"),
    (Errno::EOVERFLOW, c"the message does not fit the buffer: retry with one of the reported size"),
];

impl Error {
    /// The errno that best describes this error (the C ABI returns it negated).
    pub fn errno(&self) -> Errno {
        match self {
            Error::NotLoaded => Errno::ENODEV,
            Error::PermissionDenied { .. } => Errno::EPERM,
            Error::DeviceAccess => Errno::EACCES,
            Error::AbiMismatch { .. } => Errno::EPROTO,
            Error::NoDevice => Errno::ENODEV,
            Error::NoAddress => Errno::EADDRNOTAVAIL,
            Error::NotJoined => Errno::ENOTCONN,
            Error::AlreadyJoined => Errno::EBUSY,
            Error::UnknownNode(_) => Errno::ENOENT,
            Error::NodeDown(_) => Errno::EHOSTDOWN,
            Error::Timeout => Errno::ETIMEDOUT,
            Error::Interrupted => Errno::EINTR,
            Error::InvalidArgument(_) => Errno::EINVAL,
            Error::BadHandle => Errno::EBADF,
            Error::AccessDenied { .. } => Errno::EACCES,
            Error::NotMaster { .. } => Errno::EPERM,
            Error::OutOfRange { .. } => Errno::ERANGE,
            Error::NameTaken(_) => Errno::EEXIST,
            Error::NoSuchName(_) => Errno::ENOENT,
            Error::Freed => Errno::EIDRM,
            Error::OutOfMemory { .. } => Errno::ENOMEM,
            Error::BadAddress => Errno::EFAULT,
            Error::HolderDown { .. } => Errno::EHOSTDOWN,
            Error::NoServer { .. } => Errno::ECONNREFUSED,
            Error::ServerGone { .. } => Errno::ECONNRESET,
            Error::MessageTooLarge { .. } => Errno::EMSGSIZE,
            Error::BufferTooSmall { .. } => Errno::EOVERFLOW,
            Error::IdTaken(_) => Errno::EEXIST,
            Error::AlreadyLocked => Errno::EDEADLK,
            Error::NotLocked => Errno::EPERM,
            Error::LockLost => Errno::ENOLCK,
            Error::TooManyWaiters => Errno::EAGAIN,
            Error::ClassRaise { .. } => Errno::EPERM,
            Error::Sys { errno, .. } => *errno,
        }
    }

    /// Interprets an errno returned by the module for operation `op` on node `node`.
    pub(crate) fn from_ioctl(op: &'static str, node: Option<u32>, errno: Errno) -> Error {
        match (errno, node) {
            (Errno::EPERM | Errno::EACCES, _) => Error::PermissionDenied { op },
            (Errno::ENODEV, _) => Error::NoDevice,
            (Errno::EADDRNOTAVAIL, _) => Error::NoAddress,
            (Errno::ENOTCONN, _) => Error::NotJoined,
            (Errno::EBUSY, None) => Error::AlreadyJoined,
            (Errno::ENOENT, Some(n)) => Error::UnknownNode(n),
            (Errno::EHOSTDOWN, Some(n)) => Error::NodeDown(n),
            (Errno::ETIMEDOUT, _) => Error::Timeout,
            (Errno::EINTR, _) => Error::Interrupted,
            (Errno::EINVAL, _) => Error::InvalidArgument(format!("the module rejected the arguments of {op}")),
            _ => Error::Sys { op, errno },
        }
    }

    /// Interprets an errno returned for an RPC operation `op` on `id` at `node`;
    /// `size`/`capacity` describe an EOVERFLOW.
    pub(crate) fn from_rpc(
        op: &'static str,
        node: Option<u32>,
        id: u32,
        errno: Errno,
        size: u64,
        capacity: u64,
    ) -> Error {
        match errno {
            Errno::ECONNREFUSED => Error::NoServer { node: node.unwrap_or(u32::MAX), id },
            Errno::ECONNRESET => Error::ServerGone { id },
            Errno::EMSGSIZE => Error::MessageTooLarge { size },
            Errno::EOVERFLOW => Error::BufferTooSmall { size, capacity },
            Errno::EEXIST => Error::IdTaken(id),
            Errno::EFAULT => Error::BadAddress,
            Errno::EBADF => Error::InvalidArgument(format!("{op}: unknown reply token (answered already?)")),
            Errno::EBUSY => Error::InvalidArgument(format!("{op}: the completion slot is in use")),
            _ => Error::from_ioctl(op, node, errno),
        }
    }

    /// Interprets an errno returned by the module for LMR operation `op`. EPERM and
    /// EACCES mean master and handle permissions here, not CAP_NET_ADMIN.
    pub(crate) fn from_lmr_ioctl(op: &'static str, call: LmrCall<'_>, errno: Errno) -> Error {
        let name = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
        match (errno, call) {
            (Errno::EBADF, _) => Error::BadHandle,
            (Errno::EACCES, _) => Error::AccessDenied { op },
            (Errno::EPERM, _) => Error::NotMaster { op },
            (Errno::ERANGE, LmrCall::Access { offset, len, size }) => Error::OutOfRange { offset, len, size },
            (Errno::EEXIST, LmrCall::Malloc { name: n, .. }) => Error::NameTaken(name(n)),
            (Errno::ENOENT, LmrCall::Map { name: n }) => Error::NoSuchName(name(n)),
            (Errno::ENOENT, LmrCall::Grant { node }) if node != LITE_NODE_ANY => Error::UnknownNode(node),
            (Errno::EHOSTDOWN, LmrCall::Grant { node }) if node != LITE_NODE_ANY => Error::NodeDown(node),
            (Errno::EHOSTDOWN, _) => Error::HolderDown { op },
            (Errno::EIDRM, _) => Error::Freed,
            (Errno::ENOMEM, LmrCall::Malloc { size, .. }) => Error::OutOfMemory { size },
            (Errno::EFAULT, _) => Error::BadAddress,
            (Errno::EINVAL, _) => Error::InvalidArgument(format!(
                "the module rejected the arguments of {op} (zero length or size, bad name, unknown permission bits or nodes)"
            )),
            (Errno::ENODEV, _) => Error::NoDevice,
            (Errno::ENOTCONN, _) => Error::NotJoined,
            (Errno::ETIMEDOUT, _) => Error::Timeout,
            (Errno::EINTR, _) => Error::Interrupted,
            _ => Error::Sys { op, errno },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotLoaded => write!(f, "/dev/lite not found: load the LITE-RS module first (insmod lite.ko)"),
            Error::PermissionDenied { op } => {
                write!(f, "{op}: permission denied: operator commands need CAP_NET_ADMIN (run as root)")
            }
            Error::DeviceAccess => write!(
                f,
                "open /dev/lite: permission denied: it is for root and group lite; ask an administrator \
                 to add you (usermod -aG lite USER), then log in again"
            ),
            Error::AbiMismatch { kernel, library } => write!(
                f,
                "module ABI version {kernel} does not match liblite's {library}: rebuild liblite and the module from the same tree"
            ),
            Error::NoDevice => write!(
                f,
                "no RDMA device: create one (e.g. `rdma link add rxe0 type rxe netdev eth0`) or check the NIC driver"
            ),
            Error::NoAddress => {
                write!(f, "the RDMA port has no RoCE address: give its network interface an IPv4 address")
            }
            Error::NotJoined => {
                write!(f, "this node has not joined a cluster: run `lite-admin join MANAGER` first")
            }
            Error::AlreadyJoined => {
                write!(f, "this node already belongs to a cluster under another id: run `lite-admin leave` first")
            }
            Error::UnknownNode(n) => {
                write!(f, "node {n} is not in the cluster: `lite-admin status` lists the nodes")
            }
            Error::NodeDown(n) => write!(
                f,
                "node {n} is down or unreachable: check it with `lite-admin status`; it must rejoin"
            ),
            Error::Timeout => write!(f, "the peer did not answer in time: it may be overloaded or dead"),
            Error::Interrupted => write!(f, "interrupted by a signal"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::BadHandle => write!(
                f,
                "unknown LMR handle: it was unmapped or freed, or it belongs to another process or open of /dev/lite \
                 (handles are valid only where they were obtained)"
            ),
            Error::AccessDenied { op } => write!(
                f,
                "{op}: permission denied on the LMR: map it with the permission needed (read or write), \
                 or have its master grant it to this node"
            ),
            Error::NotMaster { op } => {
                write!(f, "{op}: only the LMR's master (the process that allocated it) may grant or free it")
            }
            Error::OutOfRange { offset, len, size } => {
                write!(f, "bytes {offset} + {len} are outside the LMR")?;
                match size {
                    Some(size) => write!(f, " of {size} bytes"),
                    None => write!(f, " (or the end overflows)"),
                }?;
                write!(f, ": keep offset + length within its size")
            }
            Error::NameTaken(name) => write!(
                f,
                "the LMR name {name:?} is taken in this namespace: map that LMR, or choose another name or namespace"
            ),
            Error::NoSuchName(name) => write!(
                f,
                "no LMR named {name:?} in this namespace: check the name and namespace, or allocate it first"
            ),
            Error::Freed => write!(f, "the LMR was freed by its master: drop (unmap) this handle"),
            Error::OutOfMemory { size } => write!(
                f,
                "cannot allocate an LMR of {size} bytes: the holders lack the memory, or it exceeds the limit of \
                 {} GiB; ask for less or spread it over more holder nodes",
                LITE_LMR_MAX_SIZE >> 30
            ),
            Error::BadAddress => {
                write!(f, "a buffer is not valid user memory over its whole length (writable, for a read)")
            }
            Error::HolderDown { op } => write!(
                f,
                "{op}: a node holding the LMR, or its master, is down or unreachable: check `lite-admin status`"
            ),
            Error::NoServer { node, id } => write!(
                f,
                "no server for RPC id {id} on node {node}: start the server there (it registers the id) and retry"
            ),
            Error::ServerGone { id } => {
                write!(f, "the server of RPC id {id} exited before it replied: restart it and retry the call")
            }
            Error::MessageTooLarge { size } => write!(
                f,
                "a message of {size} bytes exceeds the RPC limit of {} bytes: split it or use an LMR",
                lite_uapi::LITE_RPC_MAX_MSG
            ),
            Error::BufferTooSmall { size, capacity } => write!(
                f,
                "the message is {size} bytes but the buffer holds {capacity}: retry with a buffer of at least {size} bytes"
            ),
            Error::IdTaken(id) => write!(f, "RPC id {id} already has a server on this node: pick another id"),
            Error::AlreadyLocked => write!(f, "this thread holds the lock already: locks are not recursive"),
            Error::NotLocked => write!(f, "unlock of a lock this thread does not hold (only the thread that locked may unlock)"),
            Error::LockLost => write!(
                f,
                "the lock was taken from this process because its node was taken for dead: what it protects may have \
                 changed meanwhile"
            ),
            Error::TooManyWaiters => write!(f, "too many callers wait at this lock or barrier word: try again later"),
            Error::ClassRaise { current, wanted } => write!(
                f,
                "a process may lower its priority class, never raise it: it is in class {current}, \
                 {wanted} would be higher (ask the operator: lite-admin class set)"
            ),
            Error::Sys { op, errno } => write!(f, "{op} failed: {}", errno.desc()),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCESS: LmrCall<'static> = LmrCall::Access { offset: 4096, len: 10, size: Some(4100) };

    #[test]
    fn lmr_errnos_become_typed_errors() {
        let lmr = |call, errno| Error::from_lmr_ioctl("write LMR", call, errno);
        assert_eq!(lmr(ACCESS, Errno::EBADF), Error::BadHandle);
        assert_eq!(lmr(ACCESS, Errno::EACCES), Error::AccessDenied { op: "write LMR" });
        assert_eq!(lmr(LmrCall::Handle, Errno::EPERM), Error::NotMaster { op: "write LMR" });
        assert_eq!(lmr(ACCESS, Errno::ERANGE), Error::OutOfRange { offset: 4096, len: 10, size: Some(4100) });
        assert_eq!(lmr(LmrCall::Malloc { name: b"t", size: 1 }, Errno::EEXIST), Error::NameTaken("t".into()));
        assert_eq!(lmr(LmrCall::Map { name: b"t" }, Errno::ENOENT), Error::NoSuchName("t".into()));
        assert_eq!(lmr(LmrCall::Grant { node: 3 }, Errno::ENOENT), Error::UnknownNode(3));
        assert_eq!(lmr(LmrCall::Grant { node: 3 }, Errno::EHOSTDOWN), Error::NodeDown(3));
        assert_eq!(
            lmr(LmrCall::Grant { node: LITE_NODE_ANY }, Errno::EHOSTDOWN),
            Error::HolderDown { op: "write LMR" }
        );
        assert_eq!(lmr(ACCESS, Errno::EIDRM), Error::Freed);
        assert_eq!(
            lmr(LmrCall::Malloc { name: b"t", size: 1 << 36 }, Errno::ENOMEM),
            Error::OutOfMemory { size: 1 << 36 }
        );
        assert_eq!(lmr(ACCESS, Errno::EFAULT), Error::BadAddress);
        assert_eq!(lmr(ACCESS, Errno::EINVAL).errno(), Errno::EINVAL);
        assert_eq!(lmr(ACCESS, Errno::EIO), Error::Sys { op: "write LMR", errno: Errno::EIO });
    }

    #[test]
    fn every_lmr_errno_survives_the_round_trip() {
        let calls = [ACCESS, LmrCall::Handle, LmrCall::Malloc { name: b"t", size: 1 }, LmrCall::Map { name: b"t" }];
        for errno in [
            Errno::EBADF,
            Errno::EACCES,
            Errno::EPERM,
            Errno::ERANGE,
            Errno::EEXIST,
            Errno::ENOENT,
            Errno::EIDRM,
            Errno::EHOSTDOWN,
            Errno::ENOMEM,
            Errno::EINVAL,
            Errno::EFAULT,
            Errno::ENOTCONN,
            Errno::ETIMEDOUT,
            Errno::EINTR,
        ] {
            for call in calls {
                assert_eq!(Error::from_lmr_ioctl("op", call, errno).errno(), errno, "{errno:?} {call:?}");
            }
        }
    }

    #[test]
    fn rpc_errnos_become_typed_errors_and_back() {
        let rpc = |errno| Error::from_rpc("RPC", Some(2), 7, errno, 8192, 4096);
        assert_eq!(rpc(Errno::ECONNREFUSED), Error::NoServer { node: 2, id: 7 });
        assert_eq!(rpc(Errno::ECONNRESET), Error::ServerGone { id: 7 });
        assert_eq!(rpc(Errno::EMSGSIZE), Error::MessageTooLarge { size: 8192 });
        assert_eq!(rpc(Errno::EOVERFLOW), Error::BufferTooSmall { size: 8192, capacity: 4096 });
        assert_eq!(rpc(Errno::EEXIST), Error::IdTaken(7));
        assert_eq!(rpc(Errno::EHOSTDOWN), Error::NodeDown(2));
        assert_eq!(rpc(Errno::ETIMEDOUT), Error::Timeout);
        for errno in
            [Errno::ECONNREFUSED, Errno::ECONNRESET, Errno::EMSGSIZE, Errno::EOVERFLOW, Errno::EEXIST, Errno::EFAULT]
        {
            assert_eq!(rpc(errno).errno(), errno);
        }
        let msg = rpc(Errno::EOVERFLOW).to_string();
        assert!(msg.contains("8192") && msg.contains("4096"), "{msg}");
        assert!(rpc(Errno::ECONNREFUSED).to_string().contains("start the server"));
    }

    #[test]
    fn lmr_messages_say_what_to_do() {
        let says = |e: Error, words: &[&str]| {
            let msg = e.to_string();
            for w in words {
                assert!(msg.contains(w), "{msg:?} lacks {w:?}");
            }
        };
        says(Error::BadHandle, &["unknown LMR handle", "another process"]);
        says(Error::AccessDenied { op: "write LMR" }, &["write LMR", "grant"]);
        says(Error::NotMaster { op: "free LMR" }, &["free LMR", "master"]);
        says(Error::OutOfRange { offset: 5, len: 6, size: Some(8) }, &["5 + 6", "of 8 bytes"]);
        says(Error::OutOfRange { offset: 5, len: u64::MAX, size: None }, &["overflows"]);
        says(Error::NameTaken("t".into()), &["name \"t\" is taken", "another name"]);
        says(Error::NoSuchName("t".into()), &["no LMR named \"t\"", "namespace"]);
        says(Error::Freed, &["freed by its master"]);
        says(Error::OutOfMemory { size: 1 << 36 }, &["68719476736 bytes", "1024 GiB", "more holder"]);
        says(Error::BadAddress, &["buffer"]);
        says(Error::HolderDown { op: "read LMR" }, &["lite-admin status"]);
    }
}
