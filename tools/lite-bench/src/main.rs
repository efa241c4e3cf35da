//! lite-bench: runs inside a guest (or on a real node) and measures one thing per
//! invocation through liblite: one JSON object on stdout, progress on stderr.
//! `tools/bench.py` runs it beside perftest on the same cluster and compares.
//!
//!   lite-bench lat --op write|read --holder NODE [--sizes 8,64,512,4096,65536] [--iters N] [--warmup W]
//!       LT_write / LT_read latency per size, each call timed on its own
//!   lite-bench bw --holder NODE [--sizes 64K,256K,1M,4M] [--seconds S] [--iters N] [--threads T]
//!       LT_write throughput: back-to-back writes of each size, T threads with an LMR each
//!   lite-bench malloc --size BYTES [--holders 0,1,2] [--repeat R]
//!       time of LT_malloc of BYTES over the holders plus an LT_map of it by name
//!   lite-bench lmrs --count N --holder NODE [--size 4096] [--iters I] [--threads 8]
//!       LT_write 8 B latency to the first and to random ones of N LMRs (allocated
//!       and freed from T threads)
//!   lite-bench flow --holder NODE --size BYTES --seconds S [--op write|read|rpc] [--reply-size BYTES]
//!                   [--class bulk] [--threads T] [--procs P]
//!       one traffic flow of a priority class: back-to-back LT_write/LT_read to an LMR
//!       on NODE, or LT_RPC calls to `lite-bench serve` on NODE, with throughput and
//!       latency per interval (the priority-class benchmark's flows); from P forked
//!       processes of T threads each with --procs
//!   lite-bench serve [--id N] [--seconds S] [--threads T]
//!       the RPC server of `flow --op rpc`: answers every call with as many bytes as
//!       the caller's reply buffer holds, for S seconds or until killed
//!
//! What the latencies mean: an LT_write is one ioctl that returns once the data is
//! written at the holder, i.e. after the RDMA WRITE *and its acknowledgement*: a full
//! round trip. perftest's `ib_write_lat` reports half of its ping-pong round trip, so
//! LT_write compares with `ib_write_lat` x 2. An LT_read is an RDMA READ, a round trip
//! like the one `ib_read_lat` reports, so LT_read compares with `ib_read_lat` x 1.
//! Bandwidths are in MiB/s (2^20 bytes/s), the unit of perftest's `BW average[MB/sec]`;
//! `mb_s` (10^6 bytes/s) is printed beside it.

mod stats;

use clap::{Parser, Subcommand, ValueEnum};
use lite::uapi::LITE_RPC_MAX_MSG;
use lite::{parse_size, Class, Lite, Lmr, MallocOptions, Perm};
use serde_json::{json, Value};
use lite_stats::{Rng, Summary};
use stats::{parse_nodes, parse_sizes, summary_json, throughput};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "lite-bench",
    about = "LITE-RS benchmark (run on a cluster node): one measurement per invocation, one JSON object on stdout, progress on stderr",
    after_help = "LT_write latency is a full round trip (RDMA write + ack): compare it with ib_write_lat x 2 \
                  (perftest reports half a ping-pong). LT_read compares with ib_read_lat x 1. Bandwidth is in \
                  MiB/s (2^20 B/s), like perftest's BW average[MB/sec]. Sizes take K, M, G suffixes (powers of 1024). \
                  `flow --op rpc` calls `lite-bench serve`, which must run on the flow's --holder node."
)]
struct Cli {
    /// LMR namespace of the benchmark's LMRs (their names are bench-<pid>-...).
    #[arg(long, global = true, default_value_t = 0)]
    namespace: u32,
    /// No progress lines on stderr.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    Write,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
        }
    }
}

/// What a flow does back to back.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FlowOp {
    /// LT_write of SIZE bytes to an LMR on NODE.
    Write,
    /// LT_read of SIZE bytes from an LMR on NODE.
    Read,
    /// LT_RPC to `lite-bench serve` on NODE: SIZE bytes in, REPLY_SIZE bytes out.
    Rpc,
}

impl FlowOp {
    fn name(self) -> &'static str {
        match self {
            FlowOp::Write => "write",
            FlowOp::Read => "read",
            FlowOp::Rpc => "rpc",
        }
    }

    /// The LMR operation, `None` for RPC.
    fn lmr_op(self) -> Option<Op> {
        match self {
            FlowOp::Write => Some(Op::Write),
            FlowOp::Read => Some(Op::Read),
            FlowOp::Rpc => None,
        }
    }
}

/// The RPC id `serve` answers and `flow --op rpc` calls unless told otherwise.
const DEFAULT_RPC_ID: u32 = 32;
/// How long one LT_RPC of a flow may take before the flow fails.
const RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a flow's first (untimed) LT_RPC waits for the server to register.
const SERVER_WAIT: Duration = Duration::from_secs(10);
/// The server's longest sleep in LT_recvRPC: how soon it notices its time is up.
const SERVE_POLL: Duration = Duration::from_secs(1);

#[derive(Subcommand)]
enum Command {
    /// LT_write or LT_read latency per size: an LMR of the largest size (at least 4 KiB)
    /// on NODE, then ITERS timed calls of each size at offset 0.
    Lat {
        /// write: LT_write (compare with ib_write_lat x 2); read: LT_read (with ib_read_lat).
        #[arg(long, value_enum)]
        op: Op,
        /// Node that holds the LMR (a remote node, for RDMA).
        #[arg(long)]
        holder: u32,
        /// Comma-separated transfer sizes.
        #[arg(long, value_parser = parse_sizes, default_value = "8,64,512,4096,65536")]
        sizes: ::std::vec::Vec<u64>,
        /// Timed calls per size.
        #[arg(long, default_value_t = 1000)]
        iters: u32,
        /// Untimed calls before each size.
        #[arg(long, default_value_t = 10)]
        warmup: u32,
    },
    /// LT_write throughput: back-to-back writes of each size from each of THREADS
    /// threads (each with its own open of /dev/lite and its own LMR on NODE).
    Bw {
        /// Node that holds the LMRs (a remote node, for RDMA).
        #[arg(long)]
        holder: u32,
        /// Comma-separated write sizes.
        #[arg(long, value_parser = parse_sizes, default_value = "65536,262144,1048576,4194304")]
        sizes: ::std::vec::Vec<u64>,
        /// Seconds per size (with --iters: a time limit). Default 2 without --iters.
        #[arg(long)]
        seconds: Option<f64>,
        /// Writes per size and thread.
        #[arg(long)]
        iters: Option<u64>,
        /// Writer threads.
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Untimed writes per size and thread.
        #[arg(long, default_value_t = 2)]
        warmup: u32,
    },
    /// Time of LT_malloc of SIZE bytes spread over HOLDERS plus an LT_map of it by name
    /// from this process; the LMR is freed afterwards (not part of the total).
    Malloc {
        /// Bytes (K, M, G suffixes).
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Comma-separated holder nodes (default: this node).
        #[arg(long, value_parser = parse_nodes)]
        holders: Option<::std::vec::Vec<u32>>,
        /// Allocations to time (the top-level numbers are the medians).
        #[arg(long, default_value_t = 1)]
        repeat: u32,
    },
    /// LT_write 8 B latency with COUNT LMRs of SIZE bytes on NODE: ITERS writes to the
    /// first one and ITERS writes each to a random one. Exits without freeing them
    /// (the kernel releases a process's LMRs when it exits; that is faster than
    /// COUNT frees).
    Lmrs {
        /// LMRs to allocate (progress every 1000).
        #[arg(long)]
        count: u32,
        /// Node that holds every LMR.
        #[arg(long)]
        holder: u32,
        /// Bytes per LMR.
        #[arg(long, value_parser = parse_size, default_value = "4096")]
        size: u64,
        /// Timed writes to the first LMR alone (before the others exist), then as many
        /// to it alternating with as many to random ones of all COUNT.
        #[arg(long, default_value_t = 1000)]
        iters: u32,
        /// Untimed writes before each series.
        #[arg(long, default_value_t = 10)]
        warmup: u32,
        /// Seed of the random choice of LMRs (default: from the pid).
        #[arg(long)]
        seed: Option<u64>,
        /// Bytes per timed write.
        #[arg(long, value_parser = parse_size, default_value = "8")]
        write_size: u64,
        /// Threads that allocate and free the LMRs (each LT_malloc waits for round
        /// trips to other nodes, which overlap across threads).
        #[arg(long, default_value_t = 8)]
        threads: u32,
    },
    /// One flow of a priority class: back-to-back LT_write (or LT_read) of SIZE bytes
    /// to an LMR on NODE, or LT_RPC calls to the server of RPC_ID on NODE (SIZE bytes
    /// in, REPLY_SIZE out), from each of THREADS threads for SECONDS, after lowering
    /// this process to CLASS if given; throughput and latency overall and per interval.
    ///
    /// With --procs P the flow forks P processes (after lowering the class, which they
    /// inherit), each with THREADS threads and an LMR per thread; the flow's clock
    /// starts at the fork, and the JSON counts all of them together.
    ///
    /// For --op rpc, NODE must run `lite-bench serve --id RPC_ID` (it answers every
    /// call with as many bytes as the caller's buffer holds); each thread's first call
    /// is untimed and waits up to 10 s for the server to register. Bytes and MB/s of
    /// an RPC flow count both directions (SIZE + REPLY_SIZE per call).
    Flow {
        /// Node that holds the LMRs (for rpc: that runs the server).
        #[arg(long)]
        holder: u32,
        /// Bytes per operation (for rpc: request bytes).
        #[arg(long, value_parser = parse_size, default_value = "16")]
        size: u64,
        #[arg(long, value_enum, default_value = "write")]
        op: FlowOp,
        /// Reply bytes of each LT_RPC (--op rpc): the caller's buffer, which the server fills.
        #[arg(long, value_parser = parse_size, default_value = "64")]
        reply_size: u64,
        /// RPC id served on NODE (--op rpc).
        #[arg(long, default_value_t = DEFAULT_RPC_ID)]
        rpc_id: u32,
        /// How long the flow runs.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Lower this process to this class first (latency, default, bulk).
        #[arg(long)]
        class: Option<Class>,
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Forked processes, each running THREADS threads (1: this process alone).
        #[arg(long, default_value_t = 1)]
        procs: u32,
        /// Width of the timeline's intervals.
        #[arg(long, default_value_t = 250)]
        interval_ms: u64,
    },
    /// The RPC server of `flow --op rpc`: serves RPC ID on this node, answering every
    /// call with as many bytes as the caller's reply buffer holds.
    ///
    /// The caller's --reply-size thus sets the reply. THREADS threads receive and
    /// answer until SECONDS have passed (then a JSON summary: calls, bytes, failed
    /// replies) or until killed (no summary). Prints `serving RPC ID` on stderr once
    /// registered, also with --quiet, for scripts to wait for. Its priority class is
    /// its own or an operator rule's (`lite-admin class set --pid PID latency`).
    Serve {
        /// RPC id to serve (any but 0; one server per id and node).
        #[arg(long, default_value_t = DEFAULT_RPC_ID)]
        id: u32,
        /// Serve this long, then exit with a summary (default: until killed).
        #[arg(long)]
        seconds: Option<f64>,
        /// Threads receiving and answering (each replies and receives in one crossing).
        #[arg(long, default_value_t = 1)]
        threads: u32,
    },
}

type Res<T> = Result<T, String>;

fn err(what: &str) -> impl Fn(lite::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

struct Progress {
    quiet: bool,
    started: Instant,
}

impl Progress {
    fn say(&self, msg: &str) {
        if !self.quiet {
            eprintln!("lite-bench [{:6.1} s] {msg}", self.started.elapsed().as_secs_f64());
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let progress = Progress { quiet: cli.quiet, started: Instant::now() };
    let result = match cli.command {
        Command::Lat { op, holder, ref sizes, iters, warmup } => {
            lat(&progress, cli.namespace, op, holder, sizes, iters, warmup)
        }
        Command::Bw { holder, ref sizes, seconds, iters, threads, warmup } => {
            bw(&progress, cli.namespace, holder, sizes, seconds, iters, threads, warmup)
        }
        Command::Malloc { size, ref holders, repeat } => {
            malloc(&progress, cli.namespace, size, holders.as_deref().unwrap_or(&[]), repeat)
        }
        Command::Flow { holder, size, op, reply_size, rpc_id, seconds, class, threads, procs, interval_ms } => {
            let spec = FlowSpec { holder, size, op, reply_size, rpc_id };
            let workers = Workers { threads, procs };
            flow(&progress, cli.namespace, &spec, seconds, class, workers, interval_ms)
        }
        Command::Serve { id, seconds, threads } => serve(&progress, id, seconds, threads),
        Command::Lmrs { count, holder, size, iters, warmup, seed, write_size, threads } => {
            lmrs(&progress, cli.namespace, count, holder, size, iters, warmup, seed, write_size, threads)
        }
    };
    match result {
        Ok(value) => {
            emit(&value);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lite-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn emit(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// Opens /dev/lite and returns it with this node's id; warns when `holder` is this node.
fn open(progress: &Progress, holder: Option<u32>) -> Res<(Lite, u32)> {
    let lite = Lite::open().map_err(err("open /dev/lite"))?;
    let me = lite.node_id().map_err(err("node id"))?;
    if holder == Some(me) {
        progress.say(&format!("note: holder {me} is this node: this measures local copies, not RDMA"));
    }
    Ok((lite, me))
}

fn opts(holders: Vec<u32>, namespace: u32) -> MallocOptions {
    MallocOptions { holders, perm: Perm::READ | Perm::WRITE, namespace }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A patterned buffer that starts on a page boundary, as perftest's do: an
/// unaligned one spans one more page, which LITE pins and maps on every call.
struct Buffer {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// A user buffer of `len` bytes with every page touched (zero-copy transfers pin it).
fn buffer(len: u64) -> Res<Buffer> {
    const PAGE: usize = 4096;
    let len = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit in memory"))?;
    let total = len.checked_add(PAGE).ok_or_else(|| format!("{len} bytes do not fit in memory"))?;
    let mut bytes: Vec<u8> = (0..total).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
    let start = bytes.as_mut_ptr().align_offset(PAGE);
    Ok(Buffer { bytes, start, len })
}

fn rw(lmr: &Lmr<'_>, op: Op, buf: &mut [u8]) -> lite::Result<()> {
    match op {
        Op::Write => lmr.write(0, buf),
        Op::Read => lmr.read(0, buf),
    }
}

fn lat(progress: &Progress, namespace: u32, op: Op, holder: u32, sizes: &[u64], iters: u32, warmup: u32) -> Res<Value> {
    if iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    let (lite, me) = open(progress, Some(holder))?;
    let lmr_size = sizes.iter().copied().max().unwrap_or(8).max(4096);
    let name = format!("bench-{}-lat", std::process::id());
    let lmr = lite.malloc(lmr_size, &name, &opts(vec![holder], namespace)).map_err(err("LT_malloc"))?;
    let mut buf = buffer(lmr_size)?;
    let mut results = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        progress.say(&format!("LT_{} {size} B to node {holder}: {iters} calls ({}/{})", op.name(), i + 1, sizes.len()));
        let chunk = &mut buf[..size as usize];
        for _ in 0..warmup {
            rw(&lmr, op, chunk).map_err(err("warm-up"))?;
        }
        let mut samples = Vec::with_capacity(iters as usize);
        let crossings = lite.crossings();
        for _ in 0..iters {
            let t = Instant::now();
            rw(&lmr, op, chunk).map_err(err(if op == Op::Write { "LT_write" } else { "LT_read" }))?;
            samples.push(nanos(t.elapsed()));
        }
        let ioctls = lite.crossings().saturating_sub(crossings);
        let s = Summary::of(&mut samples).expect("iters >= 1");
        let mut r = summary_json(s);
        r["size"] = json!(size);
        r["ioctls_per_op"] = json!(ioctls as f64 / f64::from(iters));
        progress.say(&format!(
            "  {size} B: median {:.1} us, p99 {:.1} us",
            s.median_ns as f64 / 1e3,
            s.p99_ns as f64 / 1e3
        ));
        results.push(r);
    }
    lmr.free().map_err(err("LT_free"))?;
    Ok(json!({
        "bench": "lat",
        "op": op.name(),
        "node": me,
        "holder": holder,
        "lmr_size": lmr_size,
        "warmup": warmup,
        "compare_with": if op == Op::Write { "ib_write_lat x 2 (a full round trip)" } else { "ib_read_lat x 1" },
        "results": results,
    }))
}

/// One thread's part of one size.
#[derive(Clone, Copy)]
struct Run {
    start: Instant,
    end: Instant,
    writes: u64,
}

#[allow(clippy::too_many_arguments)]
fn bw(
    progress: &Progress,
    namespace: u32,
    holder: u32,
    sizes: &[u64],
    seconds: Option<f64>,
    iters: Option<u64>,
    threads: u32,
    warmup: u32,
) -> Res<Value> {
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if iters == Some(0) {
        return Err("--iters must be at least 1".into());
    }
    let limit = match (seconds, iters) {
        (Some(s), _) if !(s > 0.0 && s.is_finite()) => return Err("--seconds must be positive".into()),
        (Some(s), _) => Some(Duration::from_secs_f64(s)),
        (None, None) => Some(Duration::from_secs(2)),
        (None, Some(_)) => None,
    };
    let (_, me) = open(progress, Some(holder))?;
    let lmr_size = sizes.iter().copied().max().unwrap_or(8).max(4096);
    let barrier = Barrier::new(threads as usize);
    // runs[size index][thread]
    let runs: Mutex<Vec<Vec<Run>>> = Mutex::new(vec![Vec::new(); sizes.len()]);
    let lats: Mutex<Vec<Vec<u64>>> = Mutex::new(vec![Vec::new(); sizes.len()]);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (barrier, runs, lats, failure) = (&barrier, &runs, &lats, &failure);
            scope.spawn(move || {
                // Every thread passes every barrier, failed or not, so none waits forever.
                let state: Res<(Lite, Buffer)> = Lite::open()
                    .map_err(err("open /dev/lite"))
                    .and_then(|lite| Ok((lite, buffer(lmr_size)?)));
                let name = format!("bench-{}-bw-{t}", std::process::id());
                let lmr = match &state {
                    Ok((lite, _)) => lite.malloc(lmr_size, &name, &opts(vec![holder], namespace)).map_err(err("LT_malloc")),
                    Err(e) => Err(e.clone()),
                };
                for (i, &size) in sizes.iter().enumerate() {
                    if t == 0 {
                        progress.say(&format!(
                            "LT_write {size} B back to back to node {holder}, {threads} thread(s) ({}/{})",
                            i + 1,
                            sizes.len()
                        ));
                    }
                    barrier.wait();
                    let outcome = match (&lmr, &state) {
                        (Ok(lmr), Ok((_, buf))) => {
                            let chunk = &buf[..size as usize];
                            write_loop(lmr, chunk, warmup, barrier, limit, iters)
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            barrier.wait();
                            Err(e.clone())
                        }
                    };
                    match outcome {
                        Ok((run, mut samples)) => {
                            runs.lock().unwrap()[i].push(run);
                            lats.lock().unwrap()[i].append(&mut samples);
                        }
                        Err(e) => {
                            failure.lock().unwrap().get_or_insert(e);
                        }
                    }
                    barrier.wait();
                }
                if let Ok(lmr) = lmr {
                    let _ = lmr.free();
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    let runs = runs.into_inner().unwrap();
    let mut lats = lats.into_inner().unwrap();
    let mut results = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let per = &runs[i];
        let start = per.iter().map(|r| r.start).min().expect("threads >= 1");
        let end = per.iter().map(|r| r.end).max().expect("threads >= 1");
        let writes: u64 = per.iter().map(|r| r.writes).sum();
        let bytes = writes * size;
        let ns = nanos(end - start);
        let (mib_s, mb_s) = throughput(bytes, ns);
        let lat = Summary::of(&mut lats[i]).map(summary_json).unwrap_or(Value::Null);
        progress.say(&format!("  {size} B x {threads} thread(s): {mib_s:.1} MiB/s ({writes} writes in {:.2} s)", ns as f64 / 1e9));
        results.push(json!({
            "size": size,
            "writes": writes,
            "bytes": bytes,
            "seconds": ns as f64 / 1e9,
            "mib_s": mib_s,
            "mb_s": mb_s,
            "write_latency": lat,
        }));
    }
    Ok(json!({
        "bench": "bw",
        "op": "write",
        "node": me,
        "holder": holder,
        "threads": threads,
        "lmr_size": lmr_size,
        "unit": "mib_s = 2^20 bytes/s (perftest's MB/sec); mb_s = 10^6 bytes/s",
        "results": results,
    }))
}

/// Warm-up, a barrier (so all threads start together), then back-to-back writes
/// until `iters` are done or `limit` has passed. Returns the run and per-write times.
fn write_loop(
    lmr: &Lmr<'_>,
    chunk: &[u8],
    warmup: u32,
    barrier: &Barrier,
    limit: Option<Duration>,
    iters: Option<u64>,
) -> Res<(Run, Vec<u64>)> {
    let mut warm = Ok(());
    for _ in 0..warmup {
        warm = lmr.write(0, chunk).map_err(err("warm-up LT_write"));
        if warm.is_err() {
            break;
        }
    }
    barrier.wait();
    warm?;
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut last = start;
    let mut writes = 0u64;
    loop {
        if iters.is_some_and(|n| writes >= n) || limit.is_some_and(|l| last - start >= l) {
            break;
        }
        lmr.write(0, chunk).map_err(err("LT_write"))?;
        let now = Instant::now();
        samples.push(nanos(now - last));
        last = now;
        writes += 1;
    }
    Ok((Run { start, end: last, writes }, samples))
}

/// Completion time (since the flow's start) and latency of every operation.
type Samples = Vec<(u64, u64)>;

/// What one flow does, to which node.
struct FlowSpec {
    holder: u32,
    /// Bytes per operation (for rpc: request bytes).
    size: u64,
    op: FlowOp,
    /// Reply bytes per LT_RPC (rpc only).
    reply_size: u64,
    rpc_id: u32,
}

impl FlowSpec {
    /// Bytes one operation moves: both directions of an RPC.
    fn bytes_per_op(&self) -> u64 {
        match self.op {
            FlowOp::Rpc => self.size + self.reply_size,
            FlowOp::Write | FlowOp::Read => self.size,
        }
    }

    /// The reply buffer's size (0 for LMR operations).
    fn reply_len(&self) -> u64 {
        if self.op == FlowOp::Rpc {
            self.reply_size
        } else {
            0
        }
    }

    /// A reply of `len` bytes must fill the caller's buffer: `lite-bench serve` answers so.
    fn check_reply(&self, len: usize, want: usize) -> Res<()> {
        if len == want {
            return Ok(());
        }
        Err(format!(
            "LT_RPC: a reply of {len} bytes, want {want}: is node {} serving RPC {} with `lite-bench serve`?",
            self.holder, self.rpc_id
        ))
    }
}

/// One timed LT_RPC of a flow.
fn rpc_once(lite: &Lite, spec: &FlowSpec, input: &[u8], output: &mut [u8]) -> Res<()> {
    let len = lite.rpc(spec.holder, spec.rpc_id, input, output, RPC_TIMEOUT).map_err(err("LT_RPC"))?;
    spec.check_reply(len, output.len())
}

/// A thread's first LT_RPC, untimed: waits up to `SERVER_WAIT` for the server to
/// register (a script may start it just before the flow).
fn first_rpc(lite: &Lite, spec: &FlowSpec, input: &[u8], output: &mut [u8]) -> Res<()> {
    let deadline = Instant::now() + SERVER_WAIT;
    loop {
        match lite.rpc(spec.holder, spec.rpc_id, input, output, RPC_TIMEOUT) {
            Ok(len) => return spec.check_reply(len, output.len()),
            Err(lite::Error::NoServer { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(lite::Error::NoServer { .. }) => {
                return Err(format!(
                    "LT_RPC: node {} has no server of RPC {} after {} s: start `lite-bench serve --id {}` there",
                    spec.holder,
                    spec.rpc_id,
                    SERVER_WAIT.as_secs(),
                    spec.rpc_id
                ))
            }
            Err(e) => return Err(format!("first LT_RPC: {e}")),
        }
    }
}

/// Who runs a flow: THREADS threads in each of PROCS processes.
#[derive(Clone, Copy)]
struct Workers {
    threads: u32,
    procs: u32,
}

/// When a flow's clock started, by the monotonic and the wall clock.
type FlowStart = (Instant, std::time::SystemTime);

fn flow(
    progress: &Progress,
    namespace: u32,
    spec: &FlowSpec,
    seconds: f64,
    class: Option<Class>,
    workers: Workers,
    interval_ms: u64,
) -> Res<Value> {
    let (holder, size, op) = (spec.holder, spec.size, spec.op);
    let Workers { threads, procs } = workers;
    if threads == 0 || procs == 0 || size == 0 || interval_ms == 0 {
        return Err("--threads, --procs, --size and --interval-ms must be at least 1".into());
    }
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err("--seconds must be positive".into());
    }
    if op == FlowOp::Rpc {
        if spec.rpc_id == 0 {
            return Err("--rpc-id must not be 0".into());
        }
        if size > LITE_RPC_MAX_MSG || spec.reply_size > LITE_RPC_MAX_MSG {
            return Err(format!("--size and --reply-size of an RPC are at most {LITE_RPC_MAX_MSG} bytes"));
        }
    }
    let (lite, me) = open(progress, Some(holder))?;
    // The class holds while this handle is open: it outlives the threads' handles
    // (and forked processes inherit both).
    if let Some(class) = class {
        lite.lower_my_class(class).map_err(err("lower the class"))?;
    }
    let (class_now, source) = lite.my_class().map_err(err("read the class"))?;
    let what = match op {
        FlowOp::Rpc => format!("rpc {size} B in, {} B out, to RPC {} on node {holder}", spec.reply_size, spec.rpc_id),
        FlowOp::Write | FlowOp::Read => format!("{} {size} B to node {holder}", op.name()),
    };
    let procs_text = if procs > 1 { format!(" in each of {procs} processes") } else { String::new() };
    progress.say(&format!(
        "{} flow: {what}, {threads} thread(s){procs_text}, {seconds} s, class {class_now} (from {})",
        if class_now == Class::Latency { "latency" } else { "paced" },
        source.as_str()
    ));
    let limit = Duration::from_secs_f64(seconds);
    let (start, mut samples) = if procs > 1 {
        flow_procs(namespace, spec, threads, procs, limit)?
    } else {
        flow_threads(namespace, spec, threads, limit, None)?
    };
    let started_unix_ms = start
        .and_then(|(_, wall)| wall.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    samples.sort_unstable();
    let per_op = spec.bytes_per_op();
    let interval = interval_ms * 1_000_000;
    let mut timeline = Vec::new();
    let mut i = 0;
    while i < samples.len() {
        let bucket = samples[i].0 / interval;
        let mut lats = Vec::new();
        while i < samples.len() && samples[i].0 / interval == bucket {
            lats.push(samples[i].1);
            i += 1;
        }
        let ops = lats.len() as u64;
        let summary = Summary::of(&mut lats).expect("a bucket has samples");
        timeline.push(json!({
            "t": (bucket * interval) as f64 / 1e9,
            "ops": ops,
            "mb_s": (ops * per_op) as f64 / (interval as f64 / 1e9) / 1e6,
            "p50_ns": summary.median_ns,
            "p99_ns": summary.p99_ns,
        }));
    }
    let ops = samples.len() as u64;
    let elapsed = samples.last().map_or(0, |s| s.0);
    let mut lats: Vec<u64> = samples.iter().map(|s| s.1).collect();
    let latency = Summary::of(&mut lats).map(summary_json).unwrap_or(Value::Null);
    let (mib_s, mb_s) = throughput(ops * per_op, elapsed.max(1));
    progress.say(&format!("  {ops} ops, {mb_s:.2} MB/s"));
    let mut value = json!({
        "bench": "flow",
        "op": op.name(),
        "node": me,
        "holder": holder,
        "class": class_now.as_str(),
        "size": size,
        "threads": threads,
        "seconds": elapsed as f64 / 1e9,
        "ops": ops,
        "bytes": ops * per_op,
        "mib_s": mib_s,
        "mb_s": mb_s,
        "latency": latency,
        "interval_ms": interval_ms,
        "started_unix_ms": started_unix_ms,
        "timeline": timeline,
    });
    if op == FlowOp::Rpc {
        value["reply_size"] = json!(spec.reply_size);
        value["rpc_id"] = json!(spec.rpc_id);
    }
    if procs > 1 {
        value["procs"] = json!(procs);
    }
    Ok(value)
}

/// A flow's THREADS threads in this process until `limit` has passed since the
/// clock's start: `clock`, or (None) when the first thread has set up. Returns the
/// start and every operation's completion time since it and latency.
fn flow_threads(
    namespace: u32,
    spec: &FlowSpec,
    threads: u32,
    limit: Duration,
    clock: Option<FlowStart>,
) -> Res<(Option<FlowStart>, Samples)> {
    let (holder, size, op) = (spec.holder, spec.size, spec.op);
    let barrier = Barrier::new(threads as usize);
    // When the first thread started, also by the wall clock: flows of several
    // processes are lined up by it.
    let start = Mutex::new(clock);
    let samples: Mutex<Samples> = Mutex::new(Vec::new());
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let op_failed = match op {
        FlowOp::Write => "LT_write",
        FlowOp::Read => "LT_read",
        FlowOp::Rpc => "LT_RPC",
    };
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (barrier, start, samples, failure) = (&barrier, &start, &samples, &failure);
            scope.spawn(move || {
                // Every thread passes the barrier, set up or not, so none waits forever.
                let setup = Lite::open().map_err(err("open /dev/lite"));
                let mut buffers = buffer(size).and_then(|input| Ok((input, buffer(spec.reply_len())?)));
                let name = format!("bench-{}-flow-{t}", std::process::id());
                // Write and read flows: the LMR. RPC flows: none, but a first call,
                // which finds the server.
                let lmr: Res<Option<Lmr<'_>>> = match (&setup, &mut buffers) {
                    (Ok(lite), Ok((input, output))) => match op.lmr_op() {
                        Some(_) => lite
                            .malloc(size, &name, &opts(vec![holder], namespace))
                            .map(Some)
                            .map_err(err("LT_malloc")),
                        None => first_rpc(lite, spec, input, output).map(|()| None),
                    },
                    (Err(e), _) => Err(e.clone()),
                    (_, Err(e)) => Err(e.clone()),
                };
                barrier.wait();
                let outcome = (|| -> Res<Samples> {
                    let lite = setup.as_ref().map_err(|e| e.clone())?;
                    let lmr = lmr.as_ref().map_err(|e| e.clone())?;
                    let (input, output) = buffers.as_mut().map_err(|e| e.clone())?;
                    let t0 = start.lock().unwrap().get_or_insert_with(|| (Instant::now(), std::time::SystemTime::now())).0;
                    let mut mine = Vec::new();
                    let mut last = Instant::now();
                    while last - t0 < limit {
                        match (lmr, op.lmr_op()) {
                            (Some(lmr), Some(lmr_op)) => rw(lmr, lmr_op, input).map_err(err(op_failed))?,
                            _ => rpc_once(lite, spec, input, output)?,
                        }
                        let now = Instant::now();
                        mine.push((nanos(now - t0), nanos(now - last)));
                        last = now;
                    }
                    Ok(mine)
                })();
                match outcome {
                    Ok(mut mine) => samples.lock().unwrap().append(&mut mine),
                    Err(e) => {
                        failure.lock().unwrap().get_or_insert(e);
                    }
                }
                if let Ok(Some(lmr)) = lmr {
                    let _ = lmr.free();
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    Ok((start.into_inner().unwrap(), samples.into_inner().unwrap()))
}

/// The flow of `flow_threads` in PROCS forked processes at once, their clock started
/// at the fork: each sends its samples (or its error) back through a pipe.
fn flow_procs(
    namespace: u32,
    spec: &FlowSpec,
    threads: u32,
    procs: u32,
    limit: Duration,
) -> Res<(Option<FlowStart>, Samples)> {
    use std::io::Read;
    let clock = (Instant::now(), std::time::SystemTime::now());
    let mut children = Vec::new();
    let mut failure = None;
    for p in 0..procs {
        let (reader, mut writer) = match std::io::pipe() {
            Ok(ends) => ends,
            Err(e) => {
                failure = Some(format!("a pipe for process {p}: {e}"));
                break;
            }
        };
        // SAFETY: this process runs no other thread here (the flow's threads run in
        // the children); the child does its part and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            drop(reader);
            let outcome = flow_threads(namespace, spec, threads, limit, Some(clock)).map(|(_, samples)| samples);
            let written = writer.write_all(&encode_outcome(&outcome)).is_ok();
            // SAFETY: leaves the child without running the parent's exit handlers.
            unsafe { libc::_exit(if written { 0 } else { 1 }) };
        }
        drop(writer);
        if pid < 0 {
            failure = Some(format!("fork process {p}: {}", std::io::Error::last_os_error()));
            break;
        }
        children.push((p, pid, reader));
    }
    let mut samples = Samples::new();
    for (p, pid, mut reader) in children {
        let mut bytes = Vec::new();
        let read = reader.read_to_end(&mut bytes);
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let outcome = match read {
            Ok(_) => decode_outcome(&bytes).map_err(|e| format!("process {p} (pid {pid}, wait status {status}): {e}")),
            Err(e) => Err(format!("process {p}'s samples: {e}")),
        };
        match outcome {
            Ok(mut mine) => samples.append(&mut mine),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok((Some(clock), samples)),
    }
}

/// A forked process's outcome as it goes through the pipe: `O` and (completion,
/// latency) pairs as little-endian u64s, or `E` and the error.
fn encode_outcome(outcome: &Res<Samples>) -> Vec<u8> {
    match outcome {
        Ok(samples) => {
            let mut bytes = Vec::with_capacity(1 + 16 * samples.len());
            bytes.push(b'O');
            for &(at, latency) in samples {
                bytes.extend_from_slice(&at.to_le_bytes());
                bytes.extend_from_slice(&latency.to_le_bytes());
            }
            bytes
        }
        Err(e) => [b"E".as_slice(), e.as_bytes()].concat(),
    }
}

fn decode_outcome(bytes: &[u8]) -> Res<Samples> {
    match bytes.split_first() {
        Some((b'O', rest)) if rest.len() % 16 == 0 => Ok(rest
            .chunks_exact(16)
            .map(|pair| {
                let word = |i: usize| u64::from_le_bytes(pair[i..i + 8].try_into().expect("8 bytes"));
                (word(0), word(8))
            })
            .collect()),
        Some((b'E', rest)) => Err(String::from_utf8_lossy(rest).into_owned()),
        None => Err("exited without a result".into()),
        Some(_) => Err(format!("a garbled result of {} bytes", bytes.len())),
    }
}

/// What the serving threads did, together.
#[derive(Default)]
struct Served {
    calls: AtomicU64,
    messages: AtomicU64,
    failed_replies: AtomicU64,
    request_bytes: AtomicU64,
    reply_bytes: AtomicU64,
}

fn serve(progress: &Progress, id: u32, seconds: Option<f64>, threads: u32) -> Res<Value> {
    if id == 0 {
        return Err("--id must not be 0".into());
    }
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    let limit = match seconds {
        Some(s) if !(s > 0.0 && s.is_finite()) => return Err("--seconds must be positive".into()),
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let (lite, me) = open(progress, None)?;
    lite.register_rpc(id).map_err(err("register the RPC server"))?;
    let started = Instant::now();
    let deadline = limit.map(|l| started + l);
    // Also with --quiet: scripts wait for this line.
    eprintln!(
        "lite-bench: serving RPC {id} on node {me}, {threads} thread(s), {}",
        seconds.map_or("until killed".to_string(), |s| format!("for {s} s"))
    );
    let served = Served::default();
    let outcome = in_threads(threads, &|| serve_calls(progress, &lite, id, deadline, &served));
    let _ = lite.unregister_rpc(id);
    outcome?;
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    progress.say(&format!(
        "  {} calls, {} messages, {} failed replies",
        count(&served.calls),
        count(&served.messages),
        count(&served.failed_replies)
    ));
    Ok(json!({
        "bench": "serve",
        "node": me,
        "id": id,
        "threads": threads,
        "seconds": started.elapsed().as_secs_f64(),
        "calls": count(&served.calls),
        "messages": count(&served.messages),
        "failed_replies": count(&served.failed_replies),
        "request_bytes": count(&served.request_bytes),
        "reply_bytes": count(&served.reply_bytes),
    }))
}

/// One serving thread: receives calls of `id` and answers each with as many bytes
/// as the caller's buffer holds, until `deadline` (or forever). A reply that fails
/// (its caller went away) is counted, and serving goes on.
fn serve_calls(progress: &Progress, lite: &Lite, id: u32, deadline: Option<Instant>, served: &Served) -> Res<()> {
    let mut buf = vec![0u8; LITE_RPC_MAX_MSG as usize];
    let mut reply: Vec<u8> = Vec::new();
    let mut pending: Option<(lite::ReplyToken, usize)> = None;
    loop {
        let wait = match deadline {
            None => SERVE_POLL,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                left.min(SERVE_POLL)
            }
        };
        let got = match pending.take() {
            Some((token, len)) => match lite.reply_and_recv(token, &reply[..len], id, &mut buf, wait) {
                Ok(incoming) => Ok(incoming),
                // Replied; nothing came in time.
                Err(e @ (lite::Error::Timeout | lite::Error::Interrupted)) => Err(e),
                Err(e) => {
                    // The reply failed (or the receive did: it fails again below).
                    if served.failed_replies.fetch_add(1, Ordering::Relaxed) == 0 {
                        progress.say(&format!("a reply failed (its caller gone?): {e}; serving on"));
                    }
                    lite.recv_rpc(id, &mut buf, wait)
                }
            },
            None => lite.recv_rpc(id, &mut buf, wait),
        };
        let incoming = match got {
            Ok(incoming) => incoming,
            Err(lite::Error::Timeout | lite::Error::Interrupted) => continue,
            Err(e) => return Err(format!("LT_recvRPC of RPC {id}: {e}")),
        };
        served.request_bytes.fetch_add(incoming.len as u64, Ordering::Relaxed);
        match incoming.reply {
            None => {
                served.messages.fetch_add(1, Ordering::Relaxed);
            }
            Some(token) => {
                served.calls.fetch_add(1, Ordering::Relaxed);
                let len = incoming.reply_capacity.min(LITE_RPC_MAX_MSG as usize);
                if reply.len() < len {
                    reply.resize(len, 0xa5);
                }
                served.reply_bytes.fetch_add(len as u64, Ordering::Relaxed);
                pending = Some((token, len));
            }
        }
    }
    if let Some((token, len)) = pending {
        if lite.reply_rpc(token, &reply[..len]).is_err() {
            served.failed_replies.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

fn malloc(progress: &Progress, namespace: u32, size: u64, holders: &[u32], repeat: u32) -> Res<Value> {
    if repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    let (lite, me) = open(progress, None)?;
    let mut samples = Vec::new();
    for i in 0..repeat {
        let name = format!("bench-{}-malloc-{i}", std::process::id());
        progress.say(&format!(
            "LT_malloc {size} B on {} + LT_map ({}/{repeat})",
            if holders.is_empty() { "this node".to_string() } else { format!("node(s) {holders:?}") },
            i + 1
        ));
        let t0 = Instant::now();
        let lmr = lite.malloc(size, &name, &opts(holders.to_vec(), namespace)).map_err(err("LT_malloc"))?;
        let t1 = Instant::now();
        let mapped = lite.map(&name, Perm::READ | Perm::WRITE, namespace).map_err(err("LT_map"))?;
        let t2 = Instant::now();
        let chunks = lmr.stat().ok().map(|s| s.nr_chunks);
        drop(mapped);
        let t3 = Instant::now();
        lmr.free().map_err(err("LT_free"))?;
        let free_ns = nanos(t3.elapsed());
        let (malloc_ns, map_ns) = (nanos(t1 - t0), nanos(t2 - t1));
        progress.say(&format!(
            "  malloc {:.1} ms, map {:.1} ms (free {:.1} ms, not counted)",
            malloc_ns as f64 / 1e6,
            map_ns as f64 / 1e6,
            free_ns as f64 / 1e6
        ));
        samples.push(json!({"malloc_ns": malloc_ns, "map_ns": map_ns, "total_ns": malloc_ns + map_ns,
                            "free_ns": free_ns, "chunks": chunks}));
    }
    let median = |key: &str| {
        let mut v: Vec<u64> = samples.iter().map(|s| s[key].as_u64().unwrap_or(0)).collect();
        Summary::of(&mut v).map(|s| s.median_ns).unwrap_or(0)
    };
    Ok(json!({
        "bench": "malloc",
        "node": me,
        "size": size,
        "holders": if holders.is_empty() { vec![me] } else { holders.to_vec() },
        "repeat": repeat,
        "malloc_ns": median("malloc_ns"),
        "map_ns": median("map_ns"),
        "total_ns": median("total_ns"),
        "free_ns": median("free_ns"),
        "samples": samples,
    }))
}

#[allow(clippy::too_many_arguments)]
fn lmrs(
    progress: &Progress,
    namespace: u32,
    count: u32,
    holder: u32,
    size: u64,
    iters: u32,
    warmup: u32,
    seed: Option<u64>,
    write_size: u64,
    threads: u32,
) -> Res<Value> {
    if count == 0 || iters == 0 {
        return Err("--count and --iters must be at least 1".into());
    }
    if write_size > size {
        return Err(format!("--write-size {write_size} exceeds the LMR size {size}"));
    }
    let (lite, me) = open(progress, Some(holder))?;
    let pid = std::process::id();
    let options = opts(vec![holder], namespace);
    let name = |i: u32| format!("bench-{pid}-lmr-{i}");
    let buf = buffer(write_size)?;
    let first = lite.malloc(size, &name(0), &options).map_err(err("LT_malloc of the first LMR"))?;
    let time_write = |lmr: &Lmr<'_>| -> Res<u64> {
        let t = Instant::now();
        lmr.write(0, &buf).map_err(err("LT_write"))?;
        Ok(nanos(t.elapsed()))
    };
    // The first LMR alone, before the others exist: the same process and cluster,
    // so that the comparison with many LMRs does not span runs.
    progress.say(&format!("{iters} LT_writes of {write_size} B to the first LMR, alone"));
    for _ in 0..warmup {
        time_write(&first)?;
    }
    let mut alone = (0..iters).map(|_| time_write(&first)).collect::<Res<Vec<_>>>()?;
    let alone = Summary::of(&mut alone).expect("iters >= 1");
    progress.say(&format!("allocating {} more LMRs of {size} B on node {holder} from {threads} threads", count - 1));
    let setup = Instant::now();
    let next = AtomicU32::new(1);
    let made = Mutex::new(Vec::with_capacity(count as usize));
    let allocate = || -> Res<()> {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                return Ok(());
            }
            let lmr = lite
                .malloc(size, &name(i), &options)
                .map_err(|e| format!("LT_malloc of LMR {} of {count}: {e}", i + 1))?;
            let mut made = made.lock().map_err(|_| "an allocating thread panicked")?;
            made.push(lmr);
            let done = made.len() as u32 + 1;
            if done.is_multiple_of(1000) || done == count {
                let s = setup.elapsed().as_secs_f64();
                progress.say(&format!("  {done}/{count} LMRs ({s:.0} s, {:.0}/s)", f64::from(done) / s.max(1e-9)));
            }
        }
    };
    let allocated = in_threads(threads, &allocate);
    let mut all = made.into_inner().map_err(|_| "an allocating thread panicked")?;
    allocated?;
    all.push(first);
    let setup_s = setup.elapsed().as_secs_f64();
    let seed = seed.unwrap_or((u64::from(pid) << 32) ^ nanos(progress.started.elapsed()));
    let mut rng = Rng::new(seed);
    // Alternating, so that both series see the same moments of a noisy cluster.
    progress.say(&format!(
        "{iters} LT_writes of {write_size} B to the first LMR, alternating with as many to random ones of the {count}"
    ));
    for _ in 0..warmup {
        time_write(&all[rng.below(all.len() as u64) as usize])?;
    }
    let (mut to_first, mut to_random) = (Vec::with_capacity(iters as usize), Vec::with_capacity(iters as usize));
    for _ in 0..iters {
        to_first.push(time_write(&all[count as usize - 1])?);
        to_random.push(time_write(&all[rng.below(all.len() as u64) as usize])?);
    }
    let first = Summary::of(&mut to_first).expect("iters >= 1");
    let random = Summary::of(&mut to_random).expect("iters >= 1");
    progress.say(&format!(
        "  alone: median {:.1} us p99 {:.1} us; with {count}: first median {:.1} us p99 {:.1} us, random median {:.1} us p99 {:.1} us",
        alone.median_ns as f64 / 1e3,
        alone.p99_ns as f64 / 1e3,
        first.median_ns as f64 / 1e3,
        first.p99_ns as f64 / 1e3,
        random.median_ns as f64 / 1e3,
        random.p99_ns as f64 / 1e3
    ));
    let mut value = json!({
        "bench": "lmrs",
        "node": me,
        "holder": holder,
        "count": count,
        "size": size,
        "write_size": write_size,
        "iters": iters,
        "seed": seed,
        "threads": threads,
        "setup_s": setup_s,
        "median_ns": random.median_ns,
        "p99_ns": random.p99_ns,
        "alone": summary_json(alone),
        "first": summary_json(first),
        "random": summary_json(random),
    });
    progress.say(&format!("freeing the {count} LMRs from {threads} threads"));
    let freeing = Instant::now();
    let left = Mutex::new(all);
    let free = || -> Res<()> {
        loop {
            let Some(lmr) = left.lock().map_err(|_| "a freeing thread panicked")?.pop() else { return Ok(()) };
            lmr.free().map_err(err("LT_free"))?;
        }
    };
    in_threads(threads, &free)?;
    let free_s = freeing.elapsed().as_secs_f64();
    progress.say(&format!("  freed in {free_s:.1} s"));
    value["free_s"] = json!(free_s);
    Ok(value)
}

/// Runs `work` on `threads` threads at once; the first error wins.
fn in_threads(threads: u32, work: &(dyn Fn() -> Res<()> + Sync)) -> Res<()> {
    std::thread::scope(|scope| {
        let running: Vec<_> = (0..threads.max(1)).map(|_| scope.spawn(work)).collect();
        running.into_iter().try_for_each(|t| t.join().map_err(|_| "a benchmark thread panicked".to_string())?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn an_rpc_flow_takes_a_reply_size_and_lat_takes_no_rpc() {
        let cli = Cli::try_parse_from(["lite-bench", "flow", "--holder", "1", "--op", "rpc"]).unwrap();
        let Command::Flow { op, size, reply_size, rpc_id, .. } = cli.command else { panic!("not a flow") };
        assert!(op == FlowOp::Rpc);
        assert_eq!((size, reply_size, rpc_id), (16, 64, DEFAULT_RPC_ID));
        let cli = Cli::try_parse_from(["lite-bench", "serve"]).unwrap();
        let Command::Serve { id, seconds, threads } = cli.command else { panic!("not serve") };
        assert_eq!((id, seconds, threads), (DEFAULT_RPC_ID, None, 1), "serve answers flow's default id");
        assert!(Cli::try_parse_from(["lite-bench", "lat", "--holder", "1", "--op", "rpc"]).is_err());
    }

    #[test]
    fn a_flow_runs_in_one_process_unless_told() {
        let parse = |extra: &[&str]| {
            let args = [&["lite-bench", "flow", "--holder", "1"], extra].concat();
            let Command::Flow { threads, procs, .. } = Cli::try_parse_from(args).unwrap().command else {
                panic!("not a flow")
            };
            (threads, procs)
        };
        assert_eq!(parse(&[]), (1, 1));
        assert_eq!(parse(&["--procs", "32", "--threads", "2"]), (2, 32));
    }

    #[test]
    fn a_forked_process_outcome_survives_the_pipe() {
        let samples = vec![(0, 7), (1_000, u64::MAX), (u64::MAX, 0)];
        assert_eq!(decode_outcome(&encode_outcome(&Ok(samples.clone()))), Ok(samples));
        assert_eq!(decode_outcome(&encode_outcome(&Ok(Vec::new()))), Ok(Vec::new()));
        let failed = Err("LT_malloc: out of memory".to_string());
        assert_eq!(decode_outcome(&encode_outcome(&failed)), failed);
        assert_eq!(decode_outcome(&[]), Err("exited without a result".to_string()));
        assert!(decode_outcome(b"O123").unwrap_err().contains("garbled"), "a cut-off sample");
    }

    #[test]
    fn an_rpc_moves_its_request_and_its_reply() {
        let spec = |op| FlowSpec { holder: 1, size: 16, op, reply_size: 64, rpc_id: 32 };
        assert_eq!(spec(FlowOp::Rpc).bytes_per_op(), 80);
        assert_eq!(spec(FlowOp::Write).bytes_per_op(), 16);
        assert_eq!(spec(FlowOp::Read).reply_len(), 0);
        assert_eq!(spec(FlowOp::Rpc).reply_len(), 64);
        assert!(spec(FlowOp::Rpc).check_reply(64, 64).is_ok());
        let short = spec(FlowOp::Rpc).check_reply(0, 64).unwrap_err();
        assert!(short.contains("lite-bench serve") && short.contains("RPC 32"), "{short}");
    }
}
