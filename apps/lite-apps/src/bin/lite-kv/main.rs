//! lite-kv: a key-value store on LITE. GET is one-sided: the client LT_reads the
//! key's bucket straight from the owner's memory, with no server CPU involved. PUT
//! and DELETE go by LT_RPC to the owner, which updates the bucket (one LT_write of
//! the slot) and answers.
//!
//! Keys are sharded over the server nodes (`--servers 1,2`) by hash; shard S is the
//! LMR `kv.S`, held and mastered by the server of that node, and RPC `KV_RPC_ID`
//! there. A bucket is `SLOTS` slots of `SLOT` bytes; each slot carries a checksum over
//! its contents and its version, so a GET that races an update sees a torn slot and
//! reads again instead of returning half of two values. A full bucket spills into
//! the next ones (up to `PROBES`); a key's chain ends at a bucket with an empty slot,
//! and deleted slots stay marked so that chains stay whole.
//!
//! `slots` holds the shard's layout and the request format, `server` serves a shard,
//! `client` is the `Store` through which clients reach the shards, `workload` loads,
//! verifies and benchmarks the key set, and `cli` is the command line.

mod cli;
mod client;
mod server;
mod slots;
mod workload;

use clap::Parser;
use cli::{Cli, Command};
use client::Store;
use lite::Lite;
use server::serve;
use std::process::ExitCode;
use std::time::Duration;
use workload::{bench, load, verify, BenchArgs};

const KV_RPC_ID: u32 = 0x4b56; // "KV"
const TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let lite = match Lite::open() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lite-kv: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve { buckets, threads } => serve(&lite, buckets, threads),
        Command::Get { servers, key } => Store::open(&lite, &servers).and_then(|s| match s.get(key.as_bytes())? {
            Some(v) => {
                println!("{}", String::from_utf8_lossy(&v));
                Ok(())
            }
            None => Err(format!("{key}: no such key")),
        }),
        Command::Put { servers, key, value } => {
            Store::open(&lite, &servers).and_then(|s| s.put(key.as_bytes(), value.as_bytes()))
        }
        Command::Delete { servers, key } => Store::open(&lite, &servers).and_then(|s| s.delete(key.as_bytes())),
        Command::Load { servers, keys, prefix, version, threads, json } => {
            Store::open(&lite, &servers).and_then(|s| load(&s, keys, &prefix, version, threads, json))
        }
        Command::Verify { servers, keys, prefix, exact, json } => {
            Store::open(&lite, &servers).and_then(|s| verify(&s, keys, &prefix, exact, json))
        }
        Command::Bench { servers, keys, prefix, ops, read_pct, dist, threads, seed, json } => {
            let a = BenchArgs { keys, prefix, ops, read_pct: read_pct.min(100), dist, threads, seed, json };
            Store::open(&lite, &servers).and_then(|s| bench(&s, &a))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lite-kv: {e}");
            ExitCode::FAILURE
        }
    }
}
