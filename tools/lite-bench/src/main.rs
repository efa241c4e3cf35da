//! lite-bench: runs inside a guest (or on a real node) and measures one thing per
//! invocation through liblite: one JSON object on stdout, progress on stderr.
//! `tools/bench.py` runs it beside perftest on the same cluster and compares.
//!
//!   lite-bench lat --op write|read --holder NODE [--sizes 8,64,512,4096,65536] [--iters N] [--warmup W]
//!                  [--per-read]
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

mod bw;
mod cli;
mod flow;
mod harness;
mod lat;
mod lmrs;
mod malloc;
mod read_samples;
mod serve;
mod stats;

use bw::bw;
use clap::Parser;
use cli::{Cli, Command};
use flow::{flow, FlowSpec, Workers};
use harness::Progress;
use lat::lat;
use lmrs::lmrs;
use malloc::malloc;
use serde_json::Value;
use serve::serve;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

fn err(what: &str) -> impl Fn(lite::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let progress = Progress { quiet: cli.quiet, started: Instant::now() };
    let result = match cli.command {
        Command::Lat { op, holder, ref sizes, iters, warmup, per_read } => {
            lat(&progress, cli.namespace, op, holder, sizes, iters, warmup, per_read)
        }
        Command::Bw { holder, ref sizes, seconds, iters, threads, warmup } => {
            bw(&progress, cli.namespace, holder, sizes, seconds, iters, threads, warmup)
        }
        Command::Malloc { size, ref holders, repeat } => {
            malloc(&progress, cli.namespace, size, holders.as_deref().unwrap_or(&[]), repeat)
        }
        Command::Flow {
            holder,
            size,
            op,
            reply_size,
            rpc_id,
            seconds,
            class,
            threads,
            procs,
            interval_ms,
            think_us,
        } => {
            let spec = FlowSpec { holder, size, op, reply_size, rpc_id };
            let workers = Workers { threads, procs, think: Duration::from_micros(think_us) };
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
