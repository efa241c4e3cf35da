//! `lite-admin join`: the per-node agent. Keeps a connection to the manager, makes
//! this node's kernel join, and drives QP setup and teardown for every peer. The
//! data path never goes through here: if the manager dies, RDMA traffic continues
//! and the agent reconnects (so a restarted manager can rebuild its state). It
//! connects from a reserved port, which proves to the manager that it runs as root
//! (see reserved_port.rs). Under systemd (lite-agent.service, Type=notify) it says
//! READY=1 once the node has joined, and what it is doing in STATUS= lines.

use crate::membership::{Conn, Fabric, Known, Member, ToAgent, ToManager};
use crate::peer_downs::{Deferred, PeerDowns};
use crate::reserved_port::{self, RESERVED_BELOW};
use lite::{Lite, Peer, PeerState};
use sd_notify::NotifyState;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A session that brings nothing for this long ends and the agent connects again,
/// until the manager's welcome says how long its own patience is.
const DEFAULT_SILENCE: Duration = Duration::from_secs(12);
/// A gap this long between the manager's messages (it heartbeats twice a second),
/// or a peer listing this slow, is logged: when the manager declares this node
/// down for silence, the log then says whether the whole node was late or its
/// kernel held the agent up.
pub(crate) const STALL_REPORT: Duration = Duration::from_secs(2);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: std::ffi::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub struct Options {
    pub manager: String,
    pub want_id: Option<u32>,
    pub pidfile: std::path::PathBuf,
}

/// Tells systemd how this service (agent or manager) is: READY=1 ends its start,
/// `systemctl status` shows the STATUS= line. Without NOTIFY_SOCKET, outside a
/// Type=notify unit, this does nothing.
pub(crate) fn tell_systemd(who: &str, state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        eprintln!("{who}: cannot notify systemd: {e}");
    }
}

/// The unit's STATUS= line, sent when it changes (heartbeats would repeat it).
#[derive(Default)]
struct Status {
    said: String,
}

impl Status {
    fn set(&mut self, text: String) {
        if text != self.said {
            tell_systemd("agent", &[NotifyState::Status(&text)]);
            self.said = text;
        }
    }

    /// Start-up is over: systemd orders units after lite-agent.service behind this.
    fn ready(&mut self, text: String) {
        tell_systemd("agent", &[NotifyState::Ready, NotifyState::Status(&text)]);
        self.said = text;
    }
}

fn install_signal_handlers() -> Result<(), String> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    // No SA_RESTART: a blocked read must return so the loop sees STOP.
    let action = SigAction::new(SigHandler::Handler(on_stop_signal), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }.map_err(|e| format!("sigaction: {e}"))?;
    }
    Ok(())
}

pub fn run(opts: Options) -> Result<(), String> {
    let lite = Lite::open().map_err(|e| e.to_string())?;
    install_signal_handlers()?;
    std::fs::write(&opts.pidfile, format!("{}\n", std::process::id()))
        .map_err(|e| format!("cannot write {}: {e}", opts.pidfile.display()))?;
    if let Some(start) = reserved_port::unprivileged_port_start().filter(|&p| p < RESERVED_BELOW) {
        eprintln!(
            "agent: warning: net.ipv4.ip_unprivileged_port_start is {start} here, so users of this node \
             can connect to the manager as if they were agents"
        );
    }
    let mut waiting_said = false;
    let mut status = Status::default();
    let mut downs = PeerDowns::default();
    while !STOP.load(Ordering::Relaxed) {
        match reserved_port::connect_to(&opts.manager) {
            Ok(stream) => {
                waiting_said = false;
                match session(&lite, &opts, stream, &mut status, &mut downs) {
                    Ok(Outcome::Stopped) => break,
                    Ok(Outcome::Refused(reason)) => {
                        let _ = lite.leave();
                        return Err(format!("the manager refused this node: {reason}"));
                    }
                    Err(e) => {
                        eprintln!("agent: {e}; reconnecting");
                        status.set(format!("{e}; reconnecting (RDMA traffic goes on)"));
                    }
                }
            }
            Err(reserved_port::Error::NotPermitted(e)) => {
                let _ = lite.leave();
                return Err(format!("cannot connect to the manager {}: {e}", opts.manager));
            }
            Err(reserved_port::Error::Connect(e)) => {
                if !waiting_said && !STOP.load(Ordering::Relaxed) {
                    eprintln!("agent: waiting for manager {}: {e}", opts.manager);
                    status.set(format!("waiting for manager {}: {e}", opts.manager));
                    waiting_said = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    tell_systemd("agent", &[NotifyState::Stopping, NotifyState::Status("leaving the cluster")]);
    if let Err(e) = lite.leave() {
        eprintln!("agent: leave: {e}");
    }
    let _ = std::fs::remove_file(&opts.pidfile);
    eprintln!("agent: left the cluster");
    Ok(())
}

/// The peers our kernel sees in `state`.
fn peers_in(lite: &Lite, state: PeerState) -> Result<Vec<Known>, String> {
    let peers = lite.peers().map_err(|e| e.to_string())?;
    Ok(peers.iter().filter(|p| p.state == state).map(|p| Known { id: p.id, epoch: p.epoch }).collect())
}

struct Session<'a> {
    lite: &'a Lite,
    out: TcpStream,
    me: Known,
    /// Failed peers already reported to the manager.
    reported: Vec<Known>,
    /// Per node, the requests of it our NIC refused, as last reported.
    refused: HashMap<u32, u64>,
    /// Kept across sessions: a teardown may outlast the session that began it.
    downs: &'a mut PeerDowns,
}

impl Session<'_> {
    fn send(&mut self, msg: &ToManager) -> Result<(), String> {
        let mut line = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.out.write_all(&line).map_err(|e| format!("lost the manager: {e}"))
    }

    /// Makes sure QPs exist for `peer` and that it has our side, unless we are connected.
    fn offer(&mut self, peer: u32, epoch: u64) -> Result<(), String> {
        let (info, _) = match self.lite.prepare_peer(peer, epoch) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("agent: cannot prepare QPs for node {peer}: {e}");
                return Ok(());
            }
        };
        self.send(&ToManager::Conn { to: peer, to_epoch: epoch, info: Conn::from_abi(&info) })
    }

    fn on_members(&mut self, members: &[Member]) -> Result<(), String> {
        let peers = self.lite.peers().map_err(|e| e.to_string())?;
        let me = self.me.id;
        for m in members.iter().filter(|m| m.id != me) {
            if !m.up {
                // Unless our kernel already shows it down (or never knew it).
                if peers.iter().any(|p| p.id == m.id && p.state != PeerState::Down) {
                    self.downs.start(m.id)?;
                }
            } else if !peers.iter().any(|p| p.id == m.id && p.epoch == m.epoch && p.state == PeerState::Connected) {
                if self.downs.is_going_down(m.id) {
                    self.downs.defer(Deferred::Offer { peer: m.id, epoch: m.epoch });
                } else {
                    self.offer(m.id, m.epoch)?;
                }
            }
        }
        Ok(())
    }

    /// Does what waited for a peer's teardown, once it is over.
    fn run_deferred(&mut self) -> Result<(), String> {
        for action in self.downs.ready() {
            match action {
                Deferred::Offer { peer, epoch } => self.offer(peer, epoch)?,
                Deferred::Conn { from, from_epoch, to_epoch, info } => {
                    self.on_conn(from, from_epoch, to_epoch, &info)?
                }
            }
        }
        Ok(())
    }

    /// Reports each peer our kernel marked failed (its RC retries ran out) to the
    /// manager, once: it still counts the peer up, and only it can make the two
    /// reconnect (link_failures.rs).
    fn report_failed_links(&mut self, peers: &[Peer]) -> Result<(), String> {
        let failed: Vec<_> = peers.iter().filter(|p| p.state == PeerState::Failed).collect();
        self.reported.retain(|k| failed.iter().any(|p| p.id == k.id && p.epoch == k.epoch));
        for p in failed {
            let k = Known { id: p.id, epoch: p.epoch };
            if !self.reported.contains(&k) {
                let before = self.refused.insert(p.id, p.access_errors).unwrap_or(0);
                let refused = p.access_errors > before;
                eprintln!(
                    "agent: the link to node {} (epoch {}) failed{}; reporting it",
                    k.id,
                    k.epoch,
                    if refused { " after it made requests our NIC refused" } else { "" }
                );
                self.send(&ToManager::LinkFailed { to: k, refused })?;
                self.reported.push(k);
            }
        }
        Ok(())
    }

    fn on_conn(&mut self, from: u32, from_epoch: u64, to_epoch: u64, info: &Conn) -> Result<(), String> {
        if to_epoch != self.me.epoch {
            return Ok(()); // meant for an earlier incarnation of this node
        }
        if self.downs.is_going_down(from) {
            self.downs.defer(Deferred::Conn { from, from_epoch, to_epoch, info: info.clone() });
            return Ok(());
        }
        let Some(remote) = info.to_abi() else {
            eprintln!("agent: node {from} sent malformed QP information; ignored");
            return Ok(());
        };
        match self.lite.prepare_peer(from, from_epoch) {
            Ok((local, true)) => {
                self.send(&ToManager::Conn { to: from, to_epoch: from_epoch, info: Conn::from_abi(&local) })?
            }
            Ok((_, false)) => {}
            Err(e) => {
                eprintln!("agent: cannot prepare QPs for node {from}: {e}");
                return Ok(());
            }
        }
        match self.lite.connect_peer(from, from_epoch, &remote) {
            Ok(true) => eprintln!("agent: connected to node {from} (epoch {from_epoch})"),
            Ok(false) => eprintln!("agent: connecting to node {from} (epoch {from_epoch}) through the RDMA CM"),
            Err(e) => eprintln!("agent: connecting to node {from}: {e}"),
        }
        Ok(())
    }
}

enum Outcome {
    Stopped,
    Refused(String),
}

/// One connection to the manager, until a stop signal, a refusal or an error.
fn session(
    lite: &Lite,
    opts: &Options,
    stream: TcpStream,
    status: &mut Status,
    downs: &mut PeerDowns,
) -> Result<Outcome, String> {
    downs.drop_deferred();
    let _ = stream.set_nodelay(true);
    stream.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| e.to_string())?;
    let out = stream.try_clone().map_err(|e| e.to_string())?;
    let info = lite.info().map_err(|e| e.to_string())?;
    let node = info.node_id.map(|id| Known { id, epoch: info.epoch });
    let peers = peers_in(lite, PeerState::Connected)?;
    let hostname = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let mut s = Session {
        lite,
        out,
        me: Known { id: u32::MAX, epoch: 0 },
        reported: Vec::new(),
        refused: HashMap::new(),
        downs,
    };
    let fabric = lite
        .device_caps()
        .ok()
        .map(|caps| Fabric { transport: caps.transport.into(), atomics_by: caps.atomics_by.into() });
    s.send(&ToManager::Hello { node, want_id: opts.want_id, hostname, peers, fabric })?;

    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // The manager heartbeats every agent: silence means the link to it is cut (its
    // FIN may never arrive), and the manager declares this node down meanwhile. A
    // new session after that makes it a new incarnation, with fresh QPs to every
    // peer, which is how a partition heals without an operator.
    let (mut silence, mut heard) = (DEFAULT_SILENCE, Instant::now());
    loop {
        if STOP.load(Ordering::Relaxed) {
            let _ = s.send(&ToManager::Leave);
            return Ok(Outcome::Stopped);
        }
        s.run_deferred()?;
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return Err("the manager closed the connection".into()),
            Ok(_) => {
                let gap = heard.elapsed();
                if gap > STALL_REPORT {
                    eprintln!("agent: {:.1} s since the manager's last message", gap.as_secs_f64());
                }
                heard = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if heard.elapsed() > silence {
                    return Err(format!("no word from the manager for {} s", silence.as_secs()));
                }
                continue;
            }
            Err(e) => return Err(format!("lost the manager: {e}")),
        }
        let msg: ToAgent = serde_json::from_str(&line).map_err(|e| format!("bad message from manager: {e}"))?;
        match msg {
            ToAgent::Welcome { id, epoch, silence_ms } => {
                if silence_ms > 0 {
                    silence = Duration::from_millis(silence_ms);
                }
                let current = lite.info().map_err(|e| e.to_string())?;
                if current.node_id.is_some() && (current.node_id != Some(id) || current.epoch != epoch) {
                    lite.leave().map_err(|e| e.to_string())?; // a new incarnation starts clean
                }
                lite.join(id, epoch).map_err(|e| e.to_string())?;
                s.me = Known { id, epoch };
                eprintln!("agent: joined as node {id} (epoch {epoch})");
                status.ready(format!("joined as node {id} (epoch {epoch}) through manager {}", opts.manager));
            }
            ToAgent::Refused { reason } => return Ok(Outcome::Refused(reason)),
            ToAgent::Members { members } => s.on_members(&members)?,
            ToAgent::Conn { from, from_epoch, to_epoch, info } => s.on_conn(from, from_epoch, to_epoch, &info)?,
            ToAgent::Heartbeat => {
                s.send(&ToManager::Heartbeat)?;
                let listing = Instant::now();
                let peers = lite.peers().map_err(|e| e.to_string())?;
                let took = listing.elapsed();
                if took > STALL_REPORT {
                    eprintln!("agent: listing the kernel's peers took {:.1} s", took.as_secs_f64());
                }
                s.report_failed_links(&peers)?;
                let connected = peers.iter().filter(|p| p.state == PeerState::Connected).count();
                status.set(format!(
                    "node {} (epoch {}), {connected} peer(s) connected, manager {}",
                    s.me.id, s.me.epoch, opts.manager
                ));
            }
        }
    }
}
