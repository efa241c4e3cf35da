//! liblite's errors: what went wrong and what to do about it.

use nix::errno::Errno;
use std::fmt;

/// Every failure liblite reports. Messages name the cause and the remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// /dev/lite does not exist: the module is not loaded.
    NotLoaded,
    /// The caller may not do this (membership changes need CAP_NET_ADMIN).
    PermissionDenied { op: &'static str },
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
    /// Any other system error, with the operation that hit it.
    Sys { op: &'static str, errno: Errno },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The errno that best describes this error (the C ABI returns it negated).
    pub fn errno(&self) -> Errno {
        match self {
            Error::NotLoaded => Errno::ENODEV,
            Error::PermissionDenied { .. } => Errno::EPERM,
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotLoaded => write!(f, "/dev/lite not found: load the LITE-RS module first (insmod lite.ko)"),
            Error::PermissionDenied { op } => {
                write!(f, "{op}: permission denied: cluster membership changes need CAP_NET_ADMIN (run as root)")
            }
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
            Error::Sys { op, errno } => write!(f, "{op} failed: {}", errno.desc()),
        }
    }
}

impl std::error::Error for Error {}
