//! `lite-admin manager`: assigns node ids and epochs, spreads membership, relays
//! each node's QP information to its peers, and declares silent nodes down.

use crate::membership::{Known, Registry, ToAgent, ToManager};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub struct Options {
    pub listen: SocketAddr,
    pub heartbeat: Duration,
    pub dead_after: Duration,
    pub pidfile: std::path::PathBuf,
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
}

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
    eprintln!("manager: listening on {}", opts.listen);
    let state: State = Arc::new(Mutex::new(Shared {
        registry: Registry::new(lite::uapi::LITE_MAX_NODES),
        links: BTreeMap::new(),
    }));

    let reaper = state.clone();
    thread::spawn(move || loop {
        thread::sleep(opts.heartbeat);
        let mut st = reaper.lock().unwrap_or_else(|p| p.into_inner());
        for k in st.registry.expired(opts.dead_after, Instant::now()) {
            st.declare_down(k.id, k.epoch, "no heartbeat");
        }
        st.broadcast(&ToAgent::Heartbeat);
    });

    for (conn, accepted) in (1u64..).zip(listener.incoming()) {
        match accepted {
            Ok(stream) => {
                let state = state.clone();
                thread::spawn(move || serve(state, stream, conn, opts.heartbeat));
            }
            Err(e) => eprintln!("manager: accept failed: {e}"),
        }
    }
    Ok(())
}

fn serve(state: State, stream: TcpStream, conn: u64, heartbeat: Duration) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(heartbeat * 2));
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
            (ToManager::Hello { node, want_id, hostname, peers }, None) => {
                let now = Instant::now();
                st.registry.remember(&peers, now);
                match st.registry.admit(node, want_id, &hostname, now) {
                    Ok((id, epoch)) => {
                        eprintln!("manager: node {id} (epoch {epoch}) joined from {peer} ({hostname})");
                        let Ok(mut w) = writer.try_clone() else { break };
                        if send(&mut w, &ToAgent::Welcome { id, epoch }).is_err() {
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
                if st.registry.epoch_of(to) == Some(to_epoch) {
                    if let Some(link) = st.links.get_mut(&to) {
                        let _ = send(&mut link.stream, &ToAgent::Conn { from: from.id, from_epoch: from.epoch, to_epoch, info });
                    }
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
