//! lite-admin: operate LITE-RS nodes.

mod agent;
mod config;
mod link_failures;
mod manager;
mod membership;
mod peer_downs;
mod qos;
mod reserved_port;
mod stats;

use clap::{Args, Parser, Subcommand};
use lite::{gid_to_string, qp_state_name, Lite, PeerState};
use lite_stats::Summary;
use nix::sys::signal::SigHandler;
use serde::Serialize;
use std::io::IsTerminal;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const DEFAULT_PIDFILE: &str = "/run/lite-agent.pid";
const DEFAULT_MANAGER_PIDFILE: &str = "/run/lite-manager.pid";
const DEFAULT_HEARTBEAT_MS: u64 = 1000;
const DEFAULT_DEAD_AFTER_MS: u64 = 6000;
/// Exit status for a configuration that cannot work (EX_CONFIG of sysexits.h): the
/// units' RestartPreventExitStatus= names it, as restarting cannot mend a file.
const EXIT_CONFIG: u8 = 78;

#[derive(Parser)]
#[command(
    name = "lite-admin",
    version,
    about = "Operate LITE-RS nodes: cluster membership, status, ping and priority classes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show this node, its RDMA device and every peer with its QP states.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure kernel-to-kernel round trips to NODE (a write-with-immediate request
    /// into its mailbox and one back), optionally carrying a payload that is checked.
    Ping {
        /// Node id to ping.
        node: u32,
        /// Number of round trips.
        #[arg(short, long, default_value_t = 100)]
        count: u32,
        /// Bytes carried each way (0-4080).
        #[arg(short, long, default_value_t = 0)]
        size: u32,
        /// Give up on a round trip after this many milliseconds.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Wait until this node sees the given peers connected and/or down (for scripts).
    Wait {
        /// Node ids that must be connected, comma-separated.
        #[arg(long, value_delimiter = ',')]
        connected: Vec<u32>,
        /// Node ids that must be down, comma-separated.
        #[arg(long, value_delimiter = ',')]
        down: Vec<u32>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
    },
    /// Run the cluster manager (one per cluster, usually on node 0).
    ///
    /// Under systemd: lite-manager.service, which this tells when it listens.
    Manager(ManagerArgs),
    /// Join this node to the cluster run by MANAGER and keep it connected (runs until
    /// stopped with `lite-admin leave`, SIGTERM or Ctrl-C).
    ///
    /// Stopped, it leaves the cluster: every peer is torn down. Under systemd:
    /// lite-agent.service, which this tells when the node has joined.
    Join(JoinArgs),
    /// Leave the cluster: stop this node's agent, which tears down every peer.
    Leave {
        /// The agent's pid file [config: LITE_AGENT_PIDFILE; default: /run/lite-agent.pid].
        #[arg(long, value_name = "PATH")]
        pidfile: Option<PathBuf>,
        #[command(flatten)]
        config: ConfigFile,
    },
    /// Show or set how this node enforces priority classes: none (account only),
    /// hw-sep (QPs reserved per class) or sw-pri (pace the other classes while
    /// latency-class traffic is active; the default).
    Mode {
        /// none, hw-sep or sw-pri.
        mode: Option<lite::QosMode>,
    },
    /// Priority classes of processes, users and cgroups (latency, default, bulk).
    Class {
        #[command(subcommand)]
        command: ClassCommand,
    },
    /// Show or set the zeroed reserve: memory this node zeroes ahead of time, so that
    /// LMRs allocated here do not wait for zeroing (refilled in the background).
    Reserve {
        /// Bytes to keep ready (K, M, G suffixes; rounded up to 4 MiB chunks); 0 releases it.
        #[arg(value_parser = lite::parse_size)]
        size: Option<u64>,
        /// Wait until the reserve is full, showing progress.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show or set Target99: the latency class's p99 that sw-pri steers to.
    Target {
        /// In microseconds.
        #[arg(long)]
        us: Option<u64>,
        /// Relative to the latency class's p99 alone (its recent operations while
        /// none of the node's other classes' transfers was in progress), such as
        /// 1.4 (1.01 to 10; 0: off; 1.5 by default). Until that p99 is known, --us
        /// applies.
        #[arg(long)]
        ratio: Option<f64>,
    },
    /// Show or set the classes' weights, the link rate SafeUtil is bounded by, and
    /// the size of paced chunks.
    Weights {
        /// Weights of latency, default and bulk, such as 8,4,1.
        #[arg(long, value_delimiter = ',')]
        set: Option<Vec<u32>>,
        /// Link rate in MB/s, overriding the one the node finds (0: use the found one).
        #[arg(long)]
        link_mbps: Option<u64>,
        /// Bytes per work request of paced transfers, in KiB (1 to 32; 0, the
        /// default: sized to the link): what a latency-class operation may wait behind.
        #[arg(long)]
        chunk_kib: Option<u32>,
    },
    /// Per-class bytes/s, ops/s, p50/p99 latency, SafeUtil, tokens and queues, over
    /// an interval.
    Stats {
        /// Measure over this many milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A live view of `stats`, refreshed every interval.
    Top {
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many refreshes (0: run until interrupted).
        #[arg(long, default_value_t = 0)]
        count: u32,
        /// One JSON line per refresh instead of a screen.
        #[arg(long)]
        json: bool,
    },
}

/// Where join, leave and manager find the settings their command line does not give.
#[derive(Args)]
struct ConfigFile {
    /// Settings file, KEY=value lines that the shipped /etc/lite/lite.conf explains;
    /// the command line wins over it [default: /etc/lite/lite.conf, if it exists].
    #[arg(long = "config", env = "LITE_CONFIG", value_name = "PATH")]
    path: Option<PathBuf>,
}

impl ConfigFile {
    fn load(&self) -> Result<config::Config, Failure> {
        config::load(self.path.as_deref()).map_err(|e| Failure::Config(e.to_string()))
    }
}

#[derive(Args)]
struct ManagerArgs {
    /// Address to listen on [config: LITE_LISTEN; default: 0.0.0.0:18500].
    #[arg(long, value_name = "ADDRESS:PORT", value_parser = config::parse_listen)]
    listen: Option<SocketAddr>,
    /// Heartbeat interval in milliseconds [config: LITE_HEARTBEAT_MS; default: 1000].
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Declare a node down after this many milliseconds without a heartbeat
    /// [config: LITE_DEAD_AFTER_MS; default: 6000].
    #[arg(long)]
    dead_after_ms: Option<u64>,
    /// Where to record the manager's pid [config: LITE_MANAGER_PIDFILE; default:
    /// /run/lite-manager.pid].
    #[arg(long, value_name = "PATH")]
    pidfile: Option<PathBuf>,
    /// Accept agents from any source port (for testing outside the cluster). By
    /// default only connections from a reserved port (below 1024, which only root
    /// can bind) are accepted: agents run as root, other users must not act as one.
    #[arg(long)]
    allow_any_port: bool,
    #[command(flatten)]
    config: ConfigFile,
}

#[derive(Args)]
struct JoinArgs {
    /// Manager address, HOST[:PORT] or [IPV6]:PORT, port 18500 by default [config:
    /// LITE_MANAGER].
    #[arg(value_parser = config::parse_manager)]
    manager: Option<String>,
    /// Ask for this node id (the manager assigns the lowest free one otherwise)
    /// [config: LITE_NODE_ID].
    #[arg(long, value_parser = config::parse_node_id)]
    id: Option<u32>,
    /// Where to record the agent's pid for `lite-admin leave` [config:
    /// LITE_AGENT_PIDFILE; default: /run/lite-agent.pid].
    #[arg(long, value_name = "PATH")]
    pidfile: Option<PathBuf>,
    #[command(flatten)]
    config: ConfigFile,
}

#[derive(Subcommand)]
enum ClassCommand {
    /// Put a process (and its future children), a user or a cgroup in CLASS.
    Set {
        #[command(flatten)]
        target: qos::Target,
        /// latency, default or bulk.
        class: lite::Class,
    },
    /// Remove the rule for a process, user or cgroup.
    Unset {
        #[command(flatten)]
        target: qos::Target,
    },
    /// List the rules.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show this process's class, or lower it and run COMMAND in the lower class.
    Show {
        /// Lower the class first (a process may lower its class, never raise it).
        #[arg(long)]
        lower: Option<lite::Class>,
        /// Command to run in the class.
        #[arg(trailing_var_arg = true)]
        command: Vec<String>,
    },
}

/// Why lite-admin failed: the configuration (so no retry can help) or the work.
#[derive(Debug)]
enum Failure {
    Config(String),
    Run(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Manager(_) | Command::Join(_)) {
        stop_quietly_on_closed_stdout();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(e)) => {
            eprintln!("lite-admin: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(Failure::Run(e)) => {
            eprintln!("lite-admin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `lite-admin status | head -1`: a reader that goes away ends a report the way it
/// ends any Unix tool, by SIGPIPE, instead of a panic in `println!` (Rust ignores
/// SIGPIPE). Not for the manager and the agent, whose sockets must see EPIPE.
fn stop_quietly_on_closed_stdout() {
    // SAFETY: SIG_DFL installs no handler, so nothing runs in signal context; this
    // runs before any thread is started.
    if let Err(e) = unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, SigHandler::SigDfl) } {
        eprintln!("lite-admin: cannot restore SIGPIPE: {e}");
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    let result = match cli.command {
        Command::Status { json } => status(json),
        Command::Ping { node, count, size, timeout_ms, json } => {
            ping(node, count, size, Duration::from_millis(timeout_ms), json)
        }
        Command::Wait { connected, down, timeout_s } => wait(&connected, &down, Duration::from_secs(timeout_s)),
        Command::Manager(args) => {
            let config = args.config.load()?;
            manager::run(manager_options(args, &config))
        }
        Command::Join(args) => {
            let config = args.config.load()?;
            agent::run(join_options(args, &config)?)
        }
        Command::Leave { pidfile, config } => {
            leave(&pidfile.or(config.load()?.agent_pidfile).unwrap_or(DEFAULT_PIDFILE.into()))
        }
        Command::Mode { mode } => qos::mode(mode),
        Command::Class { command } => match command {
            ClassCommand::Set { target, class } => qos::class_set(&target, class),
            ClassCommand::Unset { target } => qos::class_unset(&target),
            ClassCommand::List { json } => qos::class_list(json),
            ClassCommand::Show { lower, command } => qos::class_show(lower, &command),
        },
        Command::Reserve { size, wait, timeout_s, json } => reserve(size, wait, Duration::from_secs(timeout_s), json),
        Command::Target { us, ratio } => qos::target(us.map(Duration::from_micros), ratio),
        Command::Weights { set, link_mbps, chunk_kib } => {
            let link_rate = link_mbps.map(|m| m.saturating_mul(1_000_000));
            let chunk_bytes = chunk_kib.map(|k| k.saturating_mul(1024));
            match set.as_deref() {
                Some(&[latency, default, bulk]) => qos::weights(Some([latency, default, bulk]), link_rate, chunk_bytes),
                Some(other) => Err(format!("--set takes 3 weights (latency,default,bulk), not {}", other.len())),
                None => qos::weights(None, link_rate, chunk_bytes),
            }
        }
        Command::Stats { interval_ms, json } => qos::stats(Duration::from_millis(interval_ms.max(10)), json),
        Command::Top { interval_ms, count, json } => qos::top(Duration::from_millis(interval_ms.max(100)), count, json),
    };
    result.map_err(Failure::Run)
}

/// The manager's options: the command line's, else the file's, else the defaults.
fn manager_options(args: ManagerArgs, config: &config::Config) -> manager::Options {
    let heartbeat_ms = args.heartbeat_ms.or(config.heartbeat_ms).unwrap_or(DEFAULT_HEARTBEAT_MS).max(10);
    let dead_after_ms = args.dead_after_ms.or(config.dead_after_ms).unwrap_or(DEFAULT_DEAD_AFTER_MS);
    manager::Options {
        listen: args
            .listen
            .or(config.listen)
            .unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, membership::DEFAULT_PORT))),
        heartbeat: Duration::from_millis(heartbeat_ms),
        dead_after: Duration::from_millis(dead_after_ms.max(heartbeat_ms.saturating_mul(2))),
        pidfile: args.pidfile.or(config.manager_pidfile.clone()).unwrap_or(DEFAULT_MANAGER_PIDFILE.into()),
        allow_any_port: args.allow_any_port,
    }
}

/// The agent's options, likewise; the manager has no default.
fn join_options(args: JoinArgs, config: &config::Config) -> Result<agent::Options, Failure> {
    let manager = args.manager.or(config.manager.clone()).ok_or_else(|| {
        Failure::Config(format!(
            "no manager to join: give it (`lite-admin join HOST`) or set LITE_MANAGER in {}",
            config.path.display()
        ))
    })?;
    Ok(agent::Options {
        manager,
        want_id: args.id.or(config.node_id),
        pidfile: args.pidfile.or(config.agent_pidfile.clone()).unwrap_or(DEFAULT_PIDFILE.into()),
    })
}

fn open() -> Result<Lite, String> {
    Lite::open().map_err(|e| e.to_string())
}

#[derive(Serialize)]
struct QpJson {
    local_qpn: u32,
    remote_qpn: u32,
    state: &'static str,
}

#[derive(Serialize)]
struct PeerJson {
    id: u32,
    epoch: u64,
    state: &'static str,
    qps: Vec<QpJson>,
    /// Its requests this node's NIC refused (the first fences it off).
    access_errors: u64,
}

#[derive(Serialize)]
struct StatusJson {
    node_id: Option<u32>,
    epoch: u64,
    device: Option<String>,
    port: u32,
    port_active: bool,
    gid: Option<String>,
    qps_per_peer: u32,
    /// What peers' keys reach: "chunks" (each LMR chunk, mailbox and ring alone,
    /// revoked at free) or "global" (all of the node's memory).
    remote_access: &'static str,
    /// What the device can do (none without a device).
    device_caps: Option<DeviceCapsJson>,
    peers: Vec<PeerJson>,
    memory: MemoryJson,
    rpc: RpcJson,
}

#[derive(Serialize)]
struct DeviceCapsJson {
    /// "infiniband", "roce" or "iwarp".
    transport: &'static str,
    write_imm: bool,
    atomics: bool,
    cm_connect: bool,
    max_send_sge: u32,
    max_sge_rd: u32,
    /// "none", "hca" or "global".
    atomic_cap: &'static str,
    max_qp_rd_atom: u32,
    /// The paths chosen: "write-with-immediate" or "write+send"; "nic" or "holder".
    messages: &'static str,
    atomics_by: &'static str,
}

#[derive(Serialize)]
struct RpcJson {
    /// Ids served on this node.
    servers: u32,
    /// Rings this node keeps for other nodes' calls, and their bytes.
    rings: u32,
    ring_bytes: u64,
    /// This node's bindings to other nodes' ids.
    bindings: u32,
    /// Calls from this node waiting for a reply.
    calls: u32,
    /// Requests received here and not yet answered.
    requests: u32,
}

#[derive(Serialize)]
struct MemoryJson {
    mastered: u32,
    mappings: u32,
    held_bytes: u64,
    held_limit: u64,
    lock_queued: u32,
    barrier_queued: u32,
    /// Zeroed bytes ready for allocations, and what the reserve is refilled to.
    reserve_bytes: u64,
    reserve_target: u64,
    /// Bytes allocations took from the reserve since the module was loaded.
    reserve_used: u64,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

#[derive(Serialize)]
struct ReserveJson {
    reserve_bytes: u64,
    reserve_target: u64,
    reserve_used: u64,
    held_bytes: u64,
    held_limit: u64,
    waited_s: f64,
}

fn reserve(size: Option<u64>, wait: bool, timeout: Duration, json: bool) -> Result<(), String> {
    let lite = open()?;
    if let Some(bytes) = size {
        lite.set_reserve(bytes).map_err(|e| format!("reserve: {e}"))?;
    }
    let start = std::time::Instant::now();
    let progress = !json && std::io::stderr().is_terminal();
    let mut mem = lite.mem_stat().map_err(|e| e.to_string())?;
    while wait && mem.reserve_bytes < mem.reserve_target {
        if start.elapsed() >= timeout {
            return Err(format!(
                "the reserve holds {:.0} of {:.0} MiB after {} s: this node holds {:.0} of its {:.0} MiB for LMRs, or is short of free memory",
                mib(mem.reserve_bytes),
                mib(mem.reserve_target),
                timeout.as_secs(),
                mib(mem.held_bytes),
                mib(mem.held_limit)
            ));
        }
        if progress {
            eprint!("\rzeroing: {:.0} of {:.0} MiB", mib(mem.reserve_bytes), mib(mem.reserve_target));
        }
        std::thread::sleep(Duration::from_millis(50));
        mem = lite.mem_stat().map_err(|e| e.to_string())?;
    }
    if progress && wait {
        eprintln!();
    }
    let waited_s = start.elapsed().as_secs_f64();
    if json {
        let report = ReserveJson {
            reserve_bytes: mem.reserve_bytes,
            reserve_target: mem.reserve_target,
            reserve_used: mem.reserve_used,
            held_bytes: mem.held_bytes,
            held_limit: mem.held_limit,
            waited_s,
        };
        println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        println!(
            "reserve: {:.0} of {:.0} MiB zeroed and ready{}",
            mib(mem.reserve_bytes),
            mib(mem.reserve_target),
            if wait { format!(" (waited {waited_s:.1} s)") } else { String::new() }
        );
    }
    Ok(())
}

fn status(json: bool) -> Result<(), String> {
    let lite = open()?;
    let info = lite.info().map_err(|e| e.to_string())?;
    let peers = lite.peers().map_err(|e| e.to_string())?;
    let mem = lite.mem_stat().map_err(|e| e.to_string())?;
    let rpc = lite.rpc_stat().map_err(|e| e.to_string())?;
    let caps = match lite.device_caps() {
        Ok(caps) => Some(caps),
        Err(e) if e.errno() == nix::errno::Errno::ENODEV => None,
        Err(e) => return Err(e.to_string()),
    };
    let report = StatusJson {
        node_id: info.node_id,
        epoch: info.epoch,
        device: info.device.clone(),
        port: info.port,
        port_active: info.port_active,
        gid: info.gid.as_ref().map(gid_to_string),
        qps_per_peer: info.qps_per_peer,
        remote_access: if info.remote_chunks { "chunks" } else { "global" },
        device_caps: caps.map(|c| DeviceCapsJson {
            transport: c.transport,
            write_imm: c.write_imm,
            atomics: c.atomics,
            cm_connect: c.cm_connect,
            max_send_sge: c.max_send_sge,
            max_sge_rd: c.max_sge_rd,
            atomic_cap: c.atomic_cap,
            max_qp_rd_atom: c.max_qp_rd_atom,
            messages: c.messages,
            atomics_by: c.atomics_by,
        }),
        peers: peers
            .iter()
            .map(|p| PeerJson {
                id: p.id,
                epoch: p.epoch,
                state: p.state.as_str(),
                qps: p
                    .qps
                    .iter()
                    .map(|q| QpJson { local_qpn: q.local_qpn, remote_qpn: q.remote_qpn, state: qp_state_name(q.state) })
                    .collect(),
                access_errors: p.access_errors,
            })
            .collect(),
        memory: MemoryJson {
            mastered: mem.mastered,
            mappings: mem.mappings,
            held_bytes: mem.held_bytes,
            held_limit: mem.held_limit,
            lock_queued: mem.lock_queued,
            barrier_queued: mem.barrier_queued,
            reserve_bytes: mem.reserve_bytes,
            reserve_target: mem.reserve_target,
            reserve_used: mem.reserve_used,
        },
        rpc: RpcJson {
            servers: rpc.servers,
            rings: rpc.rings,
            ring_bytes: rpc.ring_bytes,
            bindings: rpc.bindings,
            calls: rpc.calls,
            requests: rpc.requests,
        },
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
        return Ok(());
    }
    match report.node_id {
        Some(id) => println!("node {id} (epoch {})", report.epoch),
        None => println!("not joined (run `lite-admin join MANAGER`)"),
    }
    match &report.device {
        Some(dev) => println!(
            "device {dev} port {} {}, gid {}, {} QPs per peer, peers reach {}",
            report.port,
            if report.port_active { "ACTIVE" } else { "DOWN" },
            report.gid.as_deref().unwrap_or("none (no address)"),
            report.qps_per_peer,
            if report.remote_access == "chunks" { "only what they were given" } else { "all memory (global rkey)" }
        ),
        None => println!("no RDMA device (create one: rdma link add rxe0 type rxe netdev eth0)"),
    }
    if let Some(c) = &report.device_caps {
        println!(
            "device can: {}, {}, {}, {} SGE(s) per send and {} per READ, {} READ(s) in flight per QP",
            c.transport,
            if c.write_imm { "write with immediate" } else { "no write with immediate" },
            if c.atomics { format!("atomics ({})", c.atomic_cap) } else { "no atomics".into() },
            c.max_send_sge,
            c.max_sge_rd,
            c.max_qp_rd_atom
        );
        println!(
            "device uses: {} for messages and RPC, atomics by the {}",
            c.messages,
            if c.atomics_by == "holder" { "holder's kernel" } else { "holder's NIC" }
        );
    }
    println!(
        "memory: master of {} LMR(s), {} handle(s), {:.1} MiB held of {:.0} MiB, reserve {:.0} of {:.0} MiB zeroed",
        report.memory.mastered,
        report.memory.mappings,
        mib(report.memory.held_bytes),
        mib(report.memory.held_limit),
        mib(report.memory.reserve_bytes),
        mib(report.memory.reserve_target)
    );
    println!(
        "sync: {} caller(s) waiting for locks (queued here, or for this node's turn), {} waiting at barriers held here",
        report.memory.lock_queued, report.memory.barrier_queued
    );
    println!(
        "rpc: {} id(s) served, {} ring(s) ({:.1} MiB) for callers, {} binding(s), {} call(s) in flight, {} request(s) queued",
        report.rpc.servers,
        report.rpc.rings,
        mib(report.rpc.ring_bytes),
        report.rpc.bindings,
        report.rpc.calls,
        report.rpc.requests
    );
    if report.peers.is_empty() {
        println!("no peers");
        return Ok(());
    }
    println!("{:<6}{:<11}{:<7}{:<8}QPs (local->remote state)", "PEER", "STATE", "EPOCH", "REFUSED");
    for p in &report.peers {
        let qps: Vec<String> = p.qps.iter().map(|q| format!("{}->{} {}", q.local_qpn, q.remote_qpn, q.state)).collect();
        let qps = if qps.is_empty() { "-".to_string() } else { qps.join(", ") };
        println!("{:<6}{:<11}{:<7}{:<8}{}", p.id, p.state, p.epoch, p.access_errors, qps);
    }
    if report.peers.iter().any(|p| p.access_errors > 0) {
        println!("REFUSED: requests this node's NIC refused (a key, address or access the peer was not given)");
    }
    Ok(())
}

fn wait(connected: &[u32], down: &[u32], timeout: Duration) -> Result<(), String> {
    let lite = open()?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let peers = lite.peers().map_err(|e| e.to_string())?;
        let state = |id: u32| peers.iter().find(|p| p.id == id).map(|p| p.state);
        let missing: Vec<String> = connected
            .iter()
            .filter(|&&id| state(id) != Some(PeerState::Connected))
            .map(|id| format!("{id} connected"))
            .chain(down.iter().filter(|&&id| state(id) != Some(PeerState::Down)).map(|id| format!("{id} down")))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("still waiting after {} s for: {}", timeout.as_secs(), missing.join(", ")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[derive(Serialize)]
struct PingJson {
    node: u32,
    size: u32,
    count: usize,
    min_ns: u64,
    median_ns: u64,
    p99_ns: u64,
    max_ns: u64,
}

fn ping(node: u32, count: u32, size: u32, timeout: Duration, json: bool) -> Result<(), String> {
    let lite = open()?;
    if count == 0 {
        return Err("--count must be at least 1".into());
    }
    // Batches keep each ioctl short and let a terminal show progress.
    const BATCH: u32 = 1000;
    let progress = !json && count > BATCH && std::io::stderr().is_terminal();
    let mut rtts = Vec::with_capacity(count as usize);
    while (rtts.len() as u32) < count {
        let n = (count - rtts.len() as u32).min(BATCH);
        rtts.extend(lite.ping(node, n, size, timeout).map_err(|e| format!("ping node {node}: {e}"))?);
        if progress {
            eprint!("\r{} / {count} round trips", rtts.len());
        }
    }
    if progress {
        eprintln!();
    }
    let mut ns: Vec<u64> = rtts.iter().map(|d| d.as_nanos() as u64).collect();
    let summary = Summary::of(&mut ns).ok_or("no samples")?;
    if json {
        let Summary { count, min_ns, median_ns, p99_ns, max_ns, .. } = summary;
        let line = PingJson { node, size, count, min_ns, median_ns, p99_ns, max_ns };
        println!("{}", serde_json::to_string(&line).map_err(|e| e.to_string())?);
    } else {
        println!(
            "node {node}: {} round trips of {size} B, min {}, median {}, p99 {}, max {}",
            summary.count,
            stats::human(summary.min_ns),
            stats::human(summary.median_ns),
            stats::human(summary.p99_ns),
            stats::human(summary.max_ns)
        );
    }
    Ok(())
}

fn leave(pidfile: &PathBuf) -> Result<(), String> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let pid = match std::fs::read_to_string(pidfile) {
        Ok(text) => text.trim().parse::<i32>().map_err(|_| format!("{} does not hold a pid", pidfile.display()))?,
        Err(_) => {
            // No agent: make the kernel leave directly.
            return open()?.leave().map_err(|e| e.to_string());
        }
    };
    let pid = Pid::from_raw(pid);
    kill(pid, Signal::SIGTERM).map_err(|e| format!("cannot stop the agent (pid {pid}): {e}"))?;
    // Tearing every peer down drains their QPs: allow for slow (emulated, debug) kernels.
    for _ in 0..300 {
        if kill(pid, None).is_err() {
            let node_left = open()?.info().map_err(|e| e.to_string())?.node_id.is_none();
            return if node_left { Ok(()) } else { Err("the agent exited but the node is still joined".into()) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("the agent (pid {pid}) did not exit within 30 s"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const FILE: &str = "LITE_MANAGER=node0\n\
                        LITE_NODE_ID=5\n\
                        LITE_AGENT_PIDFILE=/run/lite/agent.pid\n\
                        LITE_LISTEN=10.0.0.1:7000\n\
                        LITE_HEARTBEAT_MS=200\n\
                        LITE_DEAD_AFTER_MS=3000\n\
                        LITE_MANAGER_PIDFILE=/run/lite/manager.pid\n";

    fn file(text: &str) -> config::Config {
        config::parse(text, Path::new("/etc/lite/lite.conf")).expect("valid settings")
    }

    fn command(argv: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("lite-admin").chain(argv.iter().copied()))
            .expect("valid command line")
            .command
    }

    fn join(argv: &[&str], text: &str) -> Result<agent::Options, Failure> {
        match command(&[&["join"], argv].concat()) {
            Command::Join(args) => join_options(args, &file(text)),
            _ => Err(Failure::Run("not a join".into())),
        }
    }

    fn manager(argv: &[&str], text: &str) -> Option<manager::Options> {
        match command(&[&["manager"], argv].concat()) {
            Command::Manager(args) => Some(manager_options(args, &file(text))),
            _ => None,
        }
    }

    #[test]
    fn the_command_line_wins_over_the_file() {
        let opts = join(&["node1:7000", "--id", "2", "--pidfile", "/tmp/agent.pid"], FILE).expect("join options");
        assert_eq!((opts.manager.as_str(), opts.want_id), ("node1:7000", Some(2)));
        assert_eq!(opts.pidfile, Path::new("/tmp/agent.pid"));

        let opts = manager(&["--listen", "127.0.0.1:9000", "--heartbeat-ms", "100", "--pidfile", "/tmp/m.pid"], FILE)
            .expect("manager options");
        assert_eq!(opts.listen, "127.0.0.1:9000".parse().expect("address"));
        assert_eq!(opts.heartbeat, Duration::from_millis(100));
        assert_eq!(opts.dead_after, Duration::from_millis(3000), "from the file");
        assert_eq!(opts.pidfile, Path::new("/tmp/m.pid"));
    }

    #[test]
    fn the_file_fills_in_what_the_command_line_leaves_out() {
        let opts = join(&[], FILE).expect("join options");
        assert_eq!((opts.manager.as_str(), opts.want_id), ("node0:18500", Some(5)));
        assert_eq!(opts.pidfile, Path::new("/run/lite/agent.pid"));

        let opts = manager(&[], FILE).expect("manager options");
        assert_eq!(opts.listen, "10.0.0.1:7000".parse().expect("address"));
        assert_eq!((opts.heartbeat, opts.dead_after), (Duration::from_millis(200), Duration::from_millis(3000)));
        assert_eq!(opts.pidfile, Path::new("/run/lite/manager.pid"));
    }

    #[test]
    fn without_either_the_defaults_apply() {
        let opts = join(&["node2"], "").expect("join options");
        assert_eq!((opts.manager.as_str(), opts.want_id), ("node2:18500", None));
        assert_eq!(opts.pidfile, Path::new(DEFAULT_PIDFILE));

        let opts = manager(&[], "").expect("manager options");
        assert_eq!(opts.listen, "0.0.0.0:18500".parse().expect("address"));
        assert_eq!((opts.heartbeat, opts.dead_after), (Duration::from_millis(1000), Duration::from_millis(6000)));
        assert_eq!(opts.pidfile, Path::new(DEFAULT_MANAGER_PIDFILE));
        assert!(!opts.allow_any_port);
        // A node is given at least two heartbeats, however the two are set.
        let opts = manager(&["--heartbeat-ms", "4000"], "LITE_DEAD_AFTER_MS=1000\n").expect("manager options");
        assert_eq!(opts.dead_after, Duration::from_millis(8000));
    }

    #[test]
    fn no_manager_anywhere_is_a_configuration_error_naming_the_file() {
        match join(&[], "LITE_NODE_ID=1\n") {
            Err(Failure::Config(e)) => assert!(e.contains("set LITE_MANAGER in /etc/lite/lite.conf"), "{e}"),
            Err(Failure::Run(e)) => panic!("expected a configuration error, got {e}"),
            Ok(opts) => panic!("joined {} without a manager", opts.manager),
        }
    }

    #[test]
    fn bad_command_line_values_are_refused_as_the_file_refuses_them() {
        for argv in [&["join", "node0:0"][..], &["join", "node0", "--id", "16"], &["manager", "--listen", "18500"]] {
            assert!(
                Cli::try_parse_from(std::iter::once("lite-admin").chain(argv.iter().copied())).is_err(),
                "{argv:?}"
            );
        }
        match command(&["leave", "--config", "/tmp/other.conf"]) {
            Command::Leave { config, .. } => assert_eq!(config.path.as_deref(), Some(Path::new("/tmp/other.conf"))),
            _ => panic!("not a leave"),
        }
    }
}
