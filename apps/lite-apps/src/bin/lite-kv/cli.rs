//! The command line: `Cli`, its subcommands and their options.

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "lite-kv", about = "A key-value store on LITE: one-sided GETs, PUTs by RPC to the owner")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Dist {
    Uniform,
    Zipfian,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve this node's shard: allocate `kv.NODE` with BUCKETS buckets, print `ready`,
    /// answer PUT and DELETE until stdin closes.
    Serve {
        #[arg(long, default_value_t = 16384)]
        buckets: u64,
        #[arg(long, default_value_t = 2)]
        threads: u32,
    },
    /// Print the value of KEY (exit 1 if absent).
    Get {
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<u32>,
        key: String,
    },
    /// Set KEY to VALUE.
    Put {
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<u32>,
        key: String,
        value: String,
    },
    /// Remove KEY.
    Delete {
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<u32>,
        key: String,
    },
    /// Put keys `PREFIX0..PREFIX{KEYS-1}` with values derived from them and VERSION.
    Load {
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<u32>,
        #[arg(long, default_value_t = 10000)]
        keys: u64,
        #[arg(long, default_value = "key")]
        prefix: String,
        #[arg(long, default_value_t = 0)]
        version: u64,
        #[arg(long, default_value_t = 4)]
        threads: u32,
        #[arg(long)]
        json: bool,
    },
    /// Check every loaded key: its value must be one some version of it could have
    /// (exactly VERSION with --exact).
    Verify {
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<u32>,
        #[arg(long, default_value_t = 10000)]
        keys: u64,
        #[arg(long, default_value = "key")]
        prefix: String,
        #[arg(long)]
        exact: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// YCSB-like client: OPS operations per thread over the loaded keys, READ_PCT% GETs,
    /// the rest PUTs of a new value; every GET is checked against the key.
    Bench {
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<u32>,
        #[arg(long, default_value_t = 10000)]
        keys: u64,
        #[arg(long, default_value = "key")]
        prefix: String,
        #[arg(long, default_value_t = 5000)]
        ops: u64,
        #[arg(long, default_value_t = 95)]
        read_pct: u32,
        #[arg(long, value_enum, default_value_t = Dist::Uniform)]
        dist: Dist,
        #[arg(long, default_value_t = 1)]
        threads: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
