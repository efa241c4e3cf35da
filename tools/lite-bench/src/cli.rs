//! The command line: `Cli`, its subcommands and their options, and the operations
//! they name.

use crate::stats::{parse_nodes, parse_sizes};
use clap::{Parser, Subcommand, ValueEnum};
use lite::{parse_size, Class};

#[derive(Parser)]
#[command(
    name = "lite-bench",
    about = "LITE-RS benchmark (run on a cluster node): one measurement per invocation, one JSON object on stdout, progress on stderr",
    after_help = "LT_write latency is a full round trip (RDMA write + ack): compare it with ib_write_lat x 2 \
                  (perftest reports half a ping-pong). LT_read compares with ib_read_lat x 1. Bandwidth is in \
                  MiB/s (2^20 B/s), like perftest's BW average[MB/sec]. Sizes take K, M, G suffixes (powers of 1024). \
                  `flow --op rpc` calls `lite-bench serve`, which must run on the flow's --holder node."
)]
pub(crate) struct Cli {
    /// LMR namespace of the benchmark's LMRs (their names are bench-<pid>-...).
    #[arg(long, global = true, default_value_t = 0)]
    pub(crate) namespace: u32,
    /// No progress lines on stderr.
    #[arg(long, global = true)]
    pub(crate) quiet: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Op {
    Write,
    Read,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
        }
    }
}

/// What a flow does back to back.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FlowOp {
    /// LT_write of SIZE bytes to an LMR on NODE.
    Write,
    /// LT_read of SIZE bytes from an LMR on NODE.
    Read,
    /// LT_RPC to `lite-bench serve` on NODE: SIZE bytes in, REPLY_SIZE bytes out.
    Rpc,
}

impl FlowOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FlowOp::Write => "write",
            FlowOp::Read => "read",
            FlowOp::Rpc => "rpc",
        }
    }

    /// The LMR operation, `None` for RPC.
    pub(crate) fn lmr_op(self) -> Option<Op> {
        match self {
            FlowOp::Write => Some(Op::Write),
            FlowOp::Read => Some(Op::Read),
            FlowOp::Rpc => None,
        }
    }
}

/// The RPC id `serve` answers and `flow --op rpc` calls unless told otherwise.
const DEFAULT_RPC_ID: u32 = 32;

#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// LT_read: also take the kernel's phases of each read on its own (a
        /// statistics call after each, untimed), for each phase's median; the reads
        /// are then not back to back.
        #[arg(long)]
        per_read: bool,
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
        /// Each thread pauses THINK_US microseconds after each operation, as a client
        /// that does something with each answer (0: back to back).
        #[arg(long, default_value_t = 0)]
        think_us: u64,
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
        let Command::Flow { think_us, .. } =
            Cli::try_parse_from(["lite-bench", "flow", "--holder", "1"]).unwrap().command
        else {
            panic!("not a flow")
        };
        assert_eq!(think_us, 0, "back to back unless told");
        assert_eq!(parse(&["--procs", "32", "--threads", "2"]), (2, 32));
    }
}
