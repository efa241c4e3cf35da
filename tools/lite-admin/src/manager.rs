//! `lite-admin manager`: assigns node ids and epochs, spreads membership, relays
//! each node's QP information to its peers, and declares silent nodes down. Only
//! agents may talk to it: connections not from a reserved port (so not from root
//! on a cluster node, see reserved_port.rs) are refused before they are read.

use crate::agent::{tell_systemd, STALL_REPORT};
use crate::link_failures::LinkFailures;
use crate::membership::{Known, Registry, ToAgent, ToManager};
use crate::reserved_port::from_reserved_port;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub struct Options {
    pub listen: SocketAddr,
    pub heartbeat: Duration,
    pub dead_after: Duration,
    pub pidfile: std::path::PathBuf,
    /// Accept connections from any source port (testing outside the cluster).
    pub allow_any_port: bool,
}

/// The connection through which a node incarnation is reached.
struct Link {
    epoch: u64,
    /// Which accepted connection this is: a reconnecting agent's old connection
    /// closing must not take down the new one.
    conn: u64,
    stream: TcpStream,
}

struct Shared {
    registry: Registry,
    /// Keyed by node id.
    links: BTreeMap<u32, Link>,
    link_failures: LinkFailures,
}

/// How long reports of failed links are gathered before one node is taken down
/// for them, in heartbeats: long enough for every node that lost the same one to
/// report it (an agent looks at its kernel's peers once a heartbeat), and for a
/// node whose NIC refused a peer's requests to say so (its kernel fences the peer
/// a quarter second after the request, the requester reports at once).
const LINK_VERDICT_HEARTBEATS: u32 = 4;

type State = Arc<Mutex<Shared>>;

fn send(stream: &mut TcpStream, msg: &ToAgent) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}

impl Shared {
    fn broadcast(&mut self, msg: &ToAgent) {
        for link in self.links.values_mut() {
            // A write failure means the node is going away; its reader notices.
            let _ = send(&mut link.stream, msg);
        }
    }

    fn broadcast_members(&mut self) {
        let members = self.registry.members();
        self.broadcast(&ToAgent::Members { members });
    }

    fn declare_down(&mut self, id: u32, epoch: u64, why: &str) {
        if self.registry.mark_down(id, epoch) {
            eprintln!("manager: node {id} (epoch {epoch}) is down: {why}");
            if self.links.get(&id).is_some_and(|l| l.epoch == epoch) {
                if let Some(link) = self.links.remove(&id) {
                    let _ = link.stream.shutdown(std::net::Shutdown::Both);
                }
            }
            self.broadcast_members();
        }
    }
}

pub fn run(opts: Options) -> Result<(), String> {
    let listener = TcpListener::bind(opts.listen).map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
    std::fs::write(&opts.pidfile, format!("{}\n", std::process::id()))
        .map_err(|e| format!("cannot write {}: {e}", opts.pidfile.display()))?;
    // The bound address: port 0 in --listen means the kernel chose one.
    let listening = listener.local_addr().unwrap_or(opts.listen);
    eprintln!("manager: listening on {listening}");
    // Agents can connect from here on: lite-agent.service, ordered after
    // lite-manager.service, starts behind this on the manager's own node.
    tell_systemd(
        "manager",
        &[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&format!("listening on {listening}"))],
    );
    if opts.allow_any_port {
        eprintln!("manager: warning: --allow-any-port: accepting agents that do not run as root");
    }
    let state: State = Arc::new(Mutex::new(Shared {
        registry: Registry::new(lite::uapi::LITE_MAX_NODES),
        links: BTreeMap::new(),
        link_failures: LinkFailures::default(),
    }));

    let reaper = state.clone();
    let mut last_tick = Instant::now();
    thread::spawn(move || loop {
        thread::sleep(opts.heartbeat);
        let mut st = reaper.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        // A tick this late means the manager did not run (on emulated guests under
        // load, for up to 20 s): the nodes' heartbeats of that time are still unread.
        let stall = now.duration_since(last_tick).saturating_sub(opts.heartbeat);
        last_tick = now;
        if stall > opts.heartbeat {
            if stall > STALL_REPORT {
                eprintln!(
                    "manager: did not run for {:.1} s; that silence is not held against the nodes",
                    stall.as_secs_f64()
                );
            }
            st.registry.excuse(stall, now);
        }
        for k in st.registry.expired(opts.dead_after, now) {
            st.declare_down(k.id, k.epoch, "no heartbeat");
        }
        let Shared { registry, link_failures, .. } = &mut *st;
        let up = |k: Known| registry.is_current(k);
        if let Some((k, peers)) = link_failures.verdict(opts.heartbeat * LINK_VERDICT_HEARTBEATS, now, up) {
            st.declare_down(
                k.id,
                k.epoch,
                &format!("its links to nodes {peers:?} failed; it rejoins as a new incarnation"),
            );
        }
        st.broadcast(&ToAgent::Heartbeat);
    });

    for (conn, accepted) in (1u64..).zip(listener.incoming()) {
        match accepted {
            Ok(stream) => {
                let state = state.clone();
                let timing = Timing { heartbeat: opts.heartbeat, dead_after: opts.dead_after };
                let allow_any_port = opts.allow_any_port;
                thread::spawn(move || accept(state, stream, conn, timing, allow_any_port));
            }
            Err(e) => eprintln!("manager: accept failed: {e}"),
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Timing {
    heartbeat: Duration,
    dead_after: Duration,
}

impl Timing {
    /// How long an agent waits for a word before it connects again: past the time
    /// at which this manager declares its node down, by two heartbeats.
    fn silence_ms(&self) -> u64 {
        (self.dead_after + 2 * self.heartbeat).as_millis() as u64
    }
}

fn accept(state: State, mut stream: TcpStream, conn: u64, timing: Timing, allow_any_port: bool) {
    if allow_any_port || admissible(&mut stream) {
        serve(state, stream, conn, timing)
    }
}

const NOT_RESERVED: &str = "not from a reserved port (agents run as root)";

/// Whether `stream` comes from a reserved port; if not, tells the peer why it is
/// refused and closes it, without reading it.
fn admissible(stream: &mut TcpStream) -> bool {
    let peer = match stream.peer_addr() {
        Ok(peer) if from_reserved_port(&peer) => return true,
        Ok(peer) => peer.to_string(),
        Err(e) => format!("a peer ({e})"),
    };
    eprintln!("manager: refused {peer}: {NOT_RESERVED}");
    let timeout = Some(Duration::from_secs(1));
    let _ = stream.set_write_timeout(timeout);
    let _ = send(stream, &ToAgent::Refused { reason: NOT_RESERVED.into() });
    // Closing with unread input would send a reset, which may discard the reply
    // before the peer reads it: end our side, then discard what it sends (bounded).
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(timeout);
    let _ = std::io::copy(&mut (&*stream).take(64 << 10), &mut std::io::sink());
    false
}

fn serve(state: State, stream: TcpStream, conn: u64, timing: Timing) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(timing.heartbeat * 2));
    let Ok(writer) = stream.try_clone() else { return };
    let mut me: Option<Known> = None;
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        let msg: ToManager = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("manager: {peer}: bad message ({e}); closing");
                break;
            }
        };
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        match (msg, me) {
            (ToManager::Hello { node, want_id, hostname, peers, fabric }, None) => {
                let now = Instant::now();
                st.registry.remember(&peers, now);
                let fits = fabric.as_ref().map_or(Ok(()), |f| st.registry.fits(f));
                match fits.and_then(|()| st.registry.admit(node, want_id, &hostname, now)) {
                    Ok((id, epoch)) => {
                        if let Some(fabric) = fabric {
                            st.registry.set_fabric(id, fabric);
                        }
                        eprintln!("manager: node {id} (epoch {epoch}) joined from {peer} ({hostname})");
                        let Ok(mut w) = writer.try_clone() else { break };
                        if send(&mut w, &ToAgent::Welcome { id, epoch, silence_ms: timing.silence_ms() }).is_err() {
                            break;
                        }
                        if let Some(old) = st.links.insert(id, Link { epoch, conn, stream: w }) {
                            let _ = old.stream.shutdown(std::net::Shutdown::Both);
                        }
                        me = Some(Known { id, epoch });
                        st.broadcast_members();
                    }
                    Err(reason) => {
                        eprintln!("manager: refused {peer}: {reason}");
                        let Ok(mut w) = writer.try_clone() else { break };
                        let _ = send(&mut w, &ToAgent::Refused { reason });
                        break;
                    }
                }
            }
            (ToManager::Conn { to, to_epoch, info }, Some(from)) => {
                st.registry.seen(from.id, from.epoch, Instant::now());
                if st.registry.is_current(Known { id: to, epoch: to_epoch }) {
                    if let Some(link) = st.links.get_mut(&to) {
                        let _ = send(
                            &mut link.stream,
                            &ToAgent::Conn { from: from.id, from_epoch: from.epoch, to_epoch, info },
                        );
                    }
                }
            }
            (ToManager::LinkFailed { to, refused }, Some(from)) => {
                let both_up = st.registry.is_current(from) && st.registry.is_current(to);
                if both_up && st.link_failures.report(from, to, refused, Instant::now()) {
                    eprintln!(
                        "manager: node {} reports its link to node {} failed{}",
                        from.id,
                        to.id,
                        if refused { " (its NIC refused requests of that node)" } else { "" }
                    );
                }
            }
            (ToManager::Heartbeat, Some(from)) => st.registry.seen(from.id, from.epoch, Instant::now()),
            (ToManager::Leave, Some(from)) => {
                st.declare_down(from.id, from.epoch, "left");
                return;
            }
            (_, _) => {
                eprintln!("manager: {peer}: message out of order; closing");
                break;
            }
        }
    }
    if let Some(k) = me {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        if st.links.get(&k.id).is_some_and(|l| l.conn == conn) {
            st.declare_down(k.id, k.epoch, "connection closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reserved_port;

    fn new_state() -> State {
        Arc::new(Mutex::new(Shared {
            registry: Registry::new(lite::uapi::LITE_MAX_NODES),
            links: BTreeMap::new(),
            link_failures: LinkFailures::default(),
        }))
    }

    /// Serves one connection made by `connect` on loopback; returns what the manager
    /// answered to a Hello asking for node 8, and the registry's members afterwards.
    fn hello_from(connect: impl FnOnce(SocketAddr) -> TcpStream, allow_any_port: bool) -> (ToAgent, usize) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen on loopback");
        let addr = listener.local_addr().expect("listener address");
        let state = new_state();
        let served = {
            let state = state.clone();
            thread::spawn(move || {
                let (stream, _) = listener.accept().expect("accept");
                let timing = Timing { heartbeat: Duration::from_secs(1), dead_after: Duration::from_secs(8) };
                accept(state, stream, 1, timing, allow_any_port);
            })
        };
        let mut client = connect(addr);
        let hello =
            ToManager::Hello { node: None, want_id: Some(8), hostname: "test".into(), peers: vec![], fabric: None };
        let mut line = serde_json::to_vec(&hello).expect("encode");
        line.push(b'\n');
        client.write_all(&line).expect("send hello");
        let mut reader = BufReader::new(client.try_clone().expect("clone"));
        let mut reply = String::new();
        reader.read_line(&mut reply).expect("read reply");
        let reply: ToAgent = serde_json::from_str(&reply).expect("decode reply");
        let members = state.lock().expect("state").registry.members().len();
        let _ = client.shutdown(std::net::Shutdown::Both);
        served.join().expect("manager thread");
        (reply, members)
    }

    #[test]
    fn refuses_connections_not_from_a_reserved_port() {
        let (reply, members) = hello_from(|a| TcpStream::connect(a).expect("connect"), false);
        assert_eq!(reply, ToAgent::Refused { reason: NOT_RESERVED.into() });
        assert_eq!(members, 0, "a refused connection must not touch the registry");
    }

    #[test]
    fn allow_any_port_admits_them() {
        let (reply, members) = hello_from(|a| TcpStream::connect(a).expect("connect"), true);
        assert_eq!(reply, ToAgent::Welcome { id: 8, epoch: 1, silence_ms: 10_000 });
        assert_eq!(members, 1);
    }

    #[test]
    fn admits_agents_from_a_reserved_port() {
        if !reserved_port::tests::may_bind_reserved_ports() {
            eprintln!("skipped: binding a reserved port needs root");
            return;
        }
        let connect = |a: SocketAddr| reserved_port::connect_from_reserved_port(a).expect("connect");
        let (reply, members) = hello_from(connect, false);
        assert_eq!(reply, ToAgent::Welcome { id: 8, epoch: 1, silence_ms: 10_000 });
        assert_eq!(members, 1);
    }
}
