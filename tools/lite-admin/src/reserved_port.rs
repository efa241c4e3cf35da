//! Who may talk to the manager: only root on a cluster node, proved by a reserved
//! source port (as NFS and rsh do).
//!
//! An unprivileged process cannot bind a port below 1024, so a connection from one
//! was opened by root (CAP_NET_BIND_SERVICE) on some host. The cluster is a private
//! L2 segment where every node's root is trusted, and the agents run as root anyway
//! (the membership ioctls need CAP_NET_ADMIN): agents connect from a reserved port
//! and the manager refuses every other connection. This does not hold on a node
//! whose `net.ipv4.ip_unprivileged_port_start` is below 1024; the agent warns there.

use nix::errno::Errno;
use nix::sys::socket::{
    bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;

/// Ports below this can only be bound by root.
pub const RESERVED_BELOW: u16 = 1024;
/// The agent's source ports, tried from the highest down (below 600 are well-known
/// services, as in `bindresvport`).
pub const HIGHEST: u16 = 1023;
pub const LOWEST: u16 = 600;

/// Whether a peer connected from a port only root can bind.
pub fn from_reserved_port(addr: &SocketAddr) -> bool {
    addr.port() < RESERVED_BELOW
}

#[derive(Debug)]
pub enum Error {
    /// This process may not bind reserved ports: retrying cannot help.
    NotPermitted(String),
    /// The connection failed (no manager there, every reserved port busy, ...).
    Connect(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotPermitted(e) | Error::Connect(e) => f.write_str(e),
        }
    }
}

fn io(e: Errno) -> String {
    std::io::Error::from(e).to_string()
}

/// Like `TcpStream::connect(target)` (every address `target` resolves to, in turn,
/// blocking as long as the kernel's SYN retries), but from a reserved source port.
pub fn connect_to(target: &str) -> Result<TcpStream, Error> {
    let addrs = target.to_socket_addrs().map_err(|e| Error::Connect(e.to_string()))?;
    let mut last = Error::Connect(format!("{target} resolves to no address"));
    for addr in addrs {
        match connect_from_reserved_port(addr) {
            Ok(stream) => return Ok(stream),
            Err(e @ Error::NotPermitted(_)) => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects to `addr` from the highest free port of LOWEST..=HIGHEST. SO_REUSEADDR
/// lets a port whose last connection is in TIME_WAIT be bound; if that connection
/// was to `addr`, connect() says EADDRNOTAVAIL and the next port is tried.
pub fn connect_from_reserved_port(addr: SocketAddr) -> Result<TcpStream, Error> {
    let (family, any) = match addr {
        SocketAddr::V4(_) => (AddressFamily::Inet, SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))),
        SocketAddr::V6(_) => (AddressFamily::Inet6, SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))),
    };
    let remote = SockaddrStorage::from(addr);
    for port in (LOWEST..=HIGHEST).rev() {
        let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|e| Error::Connect(format!("socket: {}", io(e))))?;
        setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(|e| Error::Connect(format!("SO_REUSEADDR: {}", io(e))))?;
        let mut local = any;
        local.set_port(port);
        match bind(fd.as_raw_fd(), &SockaddrStorage::from(local)) {
            Ok(()) => {}
            Err(Errno::EADDRINUSE | Errno::EADDRNOTAVAIL) => continue,
            Err(Errno::EACCES | Errno::EPERM) => {
                return Err(Error::NotPermitted(
                    "binding a reserved port needs root (CAP_NET_BIND_SERVICE): the manager only accepts agents run as root"
                        .into(),
                ))
            }
            Err(e) => return Err(Error::Connect(format!("binding port {port}: {}", io(e)))),
        }
        match connect(fd.as_raw_fd(), &remote) {
            Ok(()) => return Ok(TcpStream::from(fd)),
            Err(Errno::EADDRINUSE | Errno::EADDRNOTAVAIL) => continue,
            Err(e) => return Err(Error::Connect(io(e))),
        }
    }
    Err(Error::Connect(format!("no free reserved port ({LOWEST}-{HIGHEST}) to connect from: all are in use")))
}

/// This node's lowest port unprivileged processes may bind, if the kernel says.
pub fn unprivileged_port_start() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start").ok()?.trim().parse().ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    #[test]
    fn only_ports_below_1024_are_reserved() {
        let at = |s: &str| s.parse::<SocketAddr>().expect("test address");
        assert!(from_reserved_port(&at("10.77.0.2:1023")));
        assert!(from_reserved_port(&at("10.77.0.2:600")));
        assert!(from_reserved_port(&at("10.77.0.2:1")));
        assert!(from_reserved_port(&at("[fe80::1]:1023")));
        assert!(!from_reserved_port(&at("10.77.0.2:1024")));
        assert!(!from_reserved_port(&at("10.77.0.2:18500")));
        assert!(!from_reserved_port(&at("[::1]:40000")));
        assert!(!from_reserved_port(&at("127.0.0.1:65535")));
    }

    /// Whether this process may bind reserved ports (root, or a lowered
    /// ip_unprivileged_port_start), probed on loopback; `None` if every one is busy.
    fn probe_reserved_ports() -> Option<bool> {
        for port in (LOWEST..=HIGHEST).rev() {
            match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                Ok(_) => return Some(true),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Some(false),
                Err(_) => continue,
            }
        }
        None
    }

    pub(crate) fn may_bind_reserved_ports() -> bool {
        probe_reserved_ports() == Some(true)
    }

    /// Non-root only (run the test binary as another user to exercise it).
    #[test]
    fn unprivileged_processes_are_told_they_need_root() {
        if probe_reserved_ports() != Some(false) {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen on loopback");
        let addr = listener.local_addr().expect("listener address");
        match connect_to(&addr.to_string()) {
            Err(Error::NotPermitted(e)) => assert!(e.contains("needs root (CAP_NET_BIND_SERVICE)"), "{e}"),
            other => panic!("expected NotPermitted, got {other:?}"),
        }
    }

    /// Root only (binding a reserved port); on loopback.
    #[test]
    fn root_connects_from_a_reserved_port() {
        if !may_bind_reserved_ports() {
            eprintln!("skipped: binding a reserved port needs root");
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen on loopback");
        let addr = listener.local_addr().expect("listener address");
        // Twice: the first connection, closed by the client, leaves its port in TIME_WAIT.
        for round in 0..2 {
            let mut client = connect_to(&addr.to_string()).expect("connect from a reserved port");
            let (mut server, peer) = listener.accept().expect("accept");
            assert!(from_reserved_port(&peer), "round {round}: connected from {peer}");
            assert!((LOWEST..=HIGHEST).contains(&peer.port()), "round {round}: connected from {peer}");
            assert_eq!(client.local_addr().expect("client address"), peer);
            client.write_all(b"x").expect("write");
            let mut byte = [0u8; 1];
            server.read_exact(&mut byte).expect("read");
            assert_eq!(&byte, b"x");
            drop(client);
        }
    }

    #[test]
    fn connection_refused_is_reported_as_such() {
        if !may_bind_reserved_ports() {
            return;
        }
        // A port nothing listens on: bind one, note it, close it.
        let addr = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port");
        match connect_from_reserved_port(addr) {
            Err(Error::Connect(e)) => assert!(e.contains("refused"), "{e}"),
            other => panic!("expected a refused connection, got {other:?}"),
        }
    }
}
