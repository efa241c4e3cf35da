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

use clap::{Parser, Subcommand, ValueEnum};
use lite::{Error, Lite, Lmr, MallocOptions, Perm};
use lite_apps::{fnv1a, Progress, Zipf};
use lite_stats::{percentile, Rng};
use std::io::BufRead;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const KV_RPC_ID: u32 = 0x4b56; // "KV"
const SLOT: usize = 128;
const SLOTS: usize = 4;
const BUCKET: usize = SLOT * SLOTS;
const MAX_KEY: usize = 24;
const MAX_VALUE: usize = 80;
/// Slot layout: key length, value length, reserved, version, key, value, checksum.
const KEY_AT: usize = 8;
const VALUE_AT: usize = KEY_AT + MAX_KEY;
const SUM_AT: usize = VALUE_AT + MAX_VALUE;
const TIMEOUT: Duration = Duration::from_secs(10);
/// Buckets a key may spill over into.
const PROBES: u64 = 8;
/// Slot byte 2 of a deleted slot.
const DELETED: u8 = 1;
/// A GET that keeps finding a torn slot gives up after this many reads.
const GET_RETRIES: u32 = 1000;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const STATUS_OK: u8 = 0;
const STATUS_FULL: u8 = 1;
const STATUS_BAD: u8 = 2;
const STATUS_MISSING: u8 = 3;

#[derive(Parser)]
#[command(name = "lite-kv", about = "A key-value store on LITE: one-sided GETs, PUTs by RPC to the owner")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Dist {
    Uniform,
    Zipfian,
}

#[derive(Subcommand)]
enum Command {
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

// ---- slots and buckets (pure) ----

/// FNV-1a with a splitmix64 finish, so that similar keys spread over all bits.
fn key_hash(key: &[u8]) -> u64 {
    let mut h = fnv1a(&[key]);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The shard (index into the servers) and the bucket of a key.
fn place(key: &[u8], shards: usize, buckets: u64) -> (usize, u64) {
    let h = key_hash(key);
    ((h % shards as u64) as usize, (h >> 20) % buckets)
}

/// A slot holding `key`, or a deleted slot when `key` is empty.
fn encode_slot(key: &[u8], value: &[u8], version: u32) -> [u8; SLOT] {
    let mut s = [0u8; SLOT];
    s[0] = key.len() as u8;
    if key.is_empty() {
        s[2] = DELETED;
    }
    s[1] = value.len() as u8;
    s[4..8].copy_from_slice(&version.to_le_bytes());
    s[KEY_AT..KEY_AT + key.len()].copy_from_slice(key);
    s[VALUE_AT..VALUE_AT + value.len()].copy_from_slice(value);
    let sum = fnv1a(&[&s[..SUM_AT]]);
    s[SUM_AT..SUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
    s
}

#[derive(Debug, PartialEq, Eq)]
enum Slot<'a> {
    /// Never used: a key's chain of buckets ends here.
    Empty,
    /// Free, but keys placed while it was in use may follow.
    Deleted,
    Full { key: &'a [u8], value: &'a [u8] },
    /// Being rewritten while it was read (or corrupt).
    Torn,
}

fn decode_slot(s: &[u8]) -> Slot<'_> {
    if s.len() < SLOT {
        return Slot::Torn;
    }
    let sum = u64::from_le_bytes(s[SUM_AT..SUM_AT + 8].try_into().unwrap_or([0; 8]));
    if s[..SUM_AT + 8].iter().all(|&b| b == 0) {
        return Slot::Empty;
    }
    if fnv1a(&[&s[..SUM_AT]]) != sum {
        return Slot::Torn;
    }
    let (klen, vlen) = (s[0] as usize, s[1] as usize);
    if klen == 0 {
        return if s[2] == DELETED { Slot::Deleted } else { Slot::Torn };
    }
    if klen > MAX_KEY || vlen > MAX_VALUE {
        return Slot::Torn;
    }
    Slot::Full { key: &s[KEY_AT..KEY_AT + klen], value: &s[VALUE_AT..VALUE_AT + vlen] }
}

/// What one bucket says about a key.
#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    Found(Vec<u8>),
    /// Not here, and the chain ends here.
    Absent,
    /// Not here: look in the next bucket.
    Next,
    /// A slot was caught mid-update: read the bucket again.
    Torn,
}

fn find(bucket: &[u8], key: &[u8]) -> Lookup {
    let (mut torn, mut ends) = (false, false);
    for slot in bucket.chunks(SLOT) {
        match decode_slot(slot) {
            Slot::Full { key: k, value } if k == key => return Lookup::Found(value.to_vec()),
            Slot::Torn => torn = true,
            Slot::Empty => ends = true,
            _ => {}
        }
    }
    match (torn, ends) {
        (true, _) => Lookup::Torn,
        (false, true) => Lookup::Absent,
        (false, false) => Lookup::Next,
    }
}

fn request(op: u8, key: &[u8], value: &[u8]) -> Result<Vec<u8>, String> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(format!("keys are 1 to {MAX_KEY} bytes, not {}", key.len()));
    }
    if value.len() > MAX_VALUE {
        return Err(format!("values are at most {MAX_VALUE} bytes, not {}", value.len()));
    }
    let mut r = vec![op, key.len() as u8, value.len() as u8];
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    Ok(r)
}

/// (op, key, value) of a well-formed request.
fn parse_request(r: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&op, &klen, &vlen) = (r.first()?, r.get(1)?, r.get(2)?);
    let (klen, vlen) = (klen as usize, vlen as usize);
    if klen == 0 || klen > MAX_KEY || vlen > MAX_VALUE || r.len() != 3 + klen + vlen {
        return None;
    }
    Some((op, &r[3..3 + klen], &r[3 + klen..]))
}

/// The value `load` and `bench` put for a key at a version: checkable by any reader.
fn value_for(key: &[u8], version: u64) -> Vec<u8> {
    format!("v{version}:{:016x}", key_hash(key) ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

/// The version a value of `value_for` was made with, if it was made for this key.
fn version_of(key: &[u8], value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let version: u64 = text.strip_prefix('v')?.split(':').next()?.parse().ok()?;
    (value_for(key, version) == value).then_some(version)
}

// ---- the server ----

/// The shard's buckets as the server knows them; every change is written through to
/// the LMR that clients read.
struct Table {
    slots: Vec<[u8; SLOT]>,
    versions: Vec<u32>,
}

fn serve(lite: &Lite, buckets: u64, threads: u32) -> Result<(), String> {
    let me = lite.node_id().map_err(|e| e.to_string())?;
    let size = buckets.checked_mul(BUCKET as u64).filter(|&s| s > 0).ok_or("bad bucket count")?;
    let opts = MallocOptions { holders: vec![me], perm: Perm::READ, namespace: 0 };
    let shard = lite.malloc(size, &format!("kv.{me}"), &opts).map_err(|e| format!("allocate kv.{me}: {e}"))?;
    shard.memset(0, size, 0).map_err(|e| format!("clear kv.{me}: {e}"))?;
    let slots = (buckets as usize) * SLOTS;
    let table = Mutex::new(Table { slots: vec![[0u8; SLOT]; slots], versions: vec![0; slots] });
    lite.register_rpc(KV_RPC_ID).map_err(|e| format!("serve RPC {KV_RPC_ID}: {e}"))?;
    let (served, stopping) = (AtomicU64::new(0), AtomicBool::new(false));
    println!("ready: shard kv.{me}, {buckets} buckets of {SLOTS} slots");
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> =
            (0..threads.max(1)).map(|_| s.spawn(|| serve_requests(lite, &shard, buckets, &table, &served, &stopping))).collect();
        // The shard lives as long as stdin is open.
        for _ in std::io::stdin().lock().lines() {}
        stopping.store(true, Ordering::Relaxed);
        // Wakes the workers: their receives fail from now on.
        let _ = lite.unregister_rpc(KV_RPC_ID);
        for w in workers {
            w.join().map_err(|_| "a server thread panicked".to_string())??;
        }
        Ok(())
    })?;
    println!("served {} requests", served.load(Ordering::Relaxed));
    Ok(())
}

fn serve_requests(
    lite: &Lite,
    shard: &Lmr<'_>,
    buckets: u64,
    table: &Mutex<Table>,
    served: &AtomicU64,
    stopping: &AtomicBool,
) -> Result<(), String> {
    let mut buf = vec![0u8; 3 + MAX_KEY + MAX_VALUE];
    let mut pending: Option<(lite::ReplyToken, u8)> = None;
    loop {
        let got = match pending.take() {
            Some((token, status)) => lite.reply_and_recv(token, &[status], KV_RPC_ID, &mut buf, TIMEOUT),
            None => lite.recv_rpc(KV_RPC_ID, &mut buf, TIMEOUT),
        };
        let incoming = match got {
            Ok(i) => i,
            Err(Error::Timeout) => continue,
            // The caller went away before its reply: serving goes on.
            Err(Error::NodeDown(_)) => continue,
            Err(Error::BufferTooSmall { .. }) => {
                let mut big = vec![0u8; lite::uapi::LITE_RPC_MAX_MSG as usize];
                if let Ok(i) = lite.recv_rpc(KV_RPC_ID, &mut big, TIMEOUT) {
                    pending = i.reply.map(|t| (t, STATUS_BAD));
                }
                continue;
            }
            Err(_) if stopping.load(Ordering::Relaxed) => return Ok(()),
            Err(e) => return Err(format!("receive: {e}")),
        };
        served.fetch_add(1, Ordering::Relaxed);
        let status = match parse_request(&buf[..incoming.len]) {
            Some((op, key, value)) => update(shard, buckets, table, op, key, value)?,
            None => STATUS_BAD,
        };
        pending = incoming.reply.map(|t| (t, status));
    }
}

/// The slots of `key`'s chain of buckets: where it is, and the first free slot.
fn chain(slots: &[[u8; SLOT]], buckets: u64, key: &[u8]) -> (Option<usize>, Option<usize>) {
    let (_, bucket) = place(key, 1, buckets);
    let mut free = None;
    for probe in 0..PROBES.min(buckets) {
        let first = ((bucket + probe) % buckets) as usize * SLOTS;
        let mut ends = false;
        for (i, slot) in slots.iter().enumerate().skip(first).take(SLOTS) {
            match decode_slot(slot) {
                Slot::Full { key: k, .. } if k == key => return (Some(i), free),
                Slot::Full { .. } | Slot::Torn => {}
                Slot::Deleted => free = free.or(Some(i)),
                Slot::Empty => {
                    free = free.or(Some(i));
                    ends = true;
                }
            }
        }
        if ends {
            break;
        }
    }
    (None, free)
}

/// Applies a PUT or DELETE and writes the changed slot through.
fn update(shard: &Lmr<'_>, buckets: u64, table: &Mutex<Table>, op: u8, key: &[u8], value: &[u8]) -> Result<u8, String> {
    let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
    let i = match (op, chain(&t.slots, buckets, key)) {
        (OP_PUT, (Some(i), _) | (None, Some(i))) => i,
        (OP_PUT, (None, None)) => return Ok(STATUS_FULL),
        (OP_DELETE, (Some(i), _)) => i,
        (OP_DELETE, (None, _)) => return Ok(STATUS_MISSING),
        _ => return Ok(STATUS_BAD),
    };
    t.versions[i] = t.versions[i].wrapping_add(1);
    t.slots[i] = if op == OP_PUT { encode_slot(key, value, t.versions[i]) } else { encode_slot(&[], &[], t.versions[i]) };
    shard.write((i * SLOT) as u64, &t.slots[i]).map_err(|e| format!("write slot {i}: {e}"))?;
    Ok(STATUS_OK)
}

// ---- the client ----

struct Store<'a> {
    lite: &'a Lite,
    servers: Vec<u32>,
    shards: Vec<Lmr<'a>>,
    buckets: u64,
    torn_reads: AtomicU64,
}

impl<'a> Store<'a> {
    fn open(lite: &'a Lite, servers: &[u32]) -> Result<Self, String> {
        if servers.is_empty() {
            return Err("name the nodes that run `lite-kv serve` with --servers (e.g. --servers 1,2)".into());
        }
        let mut shards = Vec::new();
        for &node in servers {
            let lmr = lite.map(&format!("kv.{node}"), Perm::READ, 0).map_err(|e| match e {
                Error::NoSuchName(_) => format!("no shard kv.{node}: is `lite-kv serve` running on node {node}?"),
                e => format!("map kv.{node}: {e}"),
            })?;
            shards.push(lmr);
        }
        let buckets = shards[0].size() / BUCKET as u64;
        if shards.iter().any(|s| s.size() != buckets * BUCKET as u64) {
            return Err("the shards have different sizes: start every server with the same --buckets".into());
        }
        Ok(Store { lite, servers: servers.to_vec(), shards, buckets, torn_reads: AtomicU64::new(0) })
    }

    /// One LT_read of the key's bucket, usually; again if it caught a slot
    /// mid-update, and of the next bucket while the chain goes on.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(format!("keys are 1 to {MAX_KEY} bytes, not {}", key.len()));
        }
        let (shard, first) = place(key, self.shards.len(), self.buckets);
        let mut buf = [0u8; BUCKET];
        let (mut probe, mut torn) = (0, 0);
        while probe < PROBES.min(self.buckets) {
            let bucket = (first + probe) % self.buckets;
            self.shards[shard].read(bucket * BUCKET as u64, &mut buf).map_err(|e| format!("get: {e}"))?;
            match find(&buf, key) {
                Lookup::Found(v) => return Ok(Some(v)),
                Lookup::Absent => return Ok(None),
                Lookup::Next => probe += 1,
                Lookup::Torn => {
                    self.torn_reads.fetch_add(1, Ordering::Relaxed);
                    torn += 1;
                    if torn > GET_RETRIES {
                        return Err(format!("get: bucket {bucket} of shard {shard} stayed torn for {GET_RETRIES} reads"));
                    }
                }
            }
        }
        Ok(None)
    }

    fn call(&self, op: u8, key: &[u8], value: &[u8]) -> Result<u8, String> {
        let req = request(op, key, value)?;
        let (shard, _) = place(key, self.shards.len(), self.buckets);
        let mut status = [0u8; 1];
        let n = self.lite.rpc(self.servers[shard], KV_RPC_ID, &req, &mut status, TIMEOUT).map_err(|e| e.to_string())?;
        if n != 1 {
            return Err(format!("node {}: a reply of {n} bytes is not a lite-kv status", self.servers[shard]));
        }
        Ok(status[0])
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.call(OP_PUT, key, value)? {
            STATUS_OK => Ok(()),
            STATUS_FULL => Err(format!("put: the bucket of {:?} is full (serve with more --buckets)", String::from_utf8_lossy(key))),
            s => Err(format!("put: the server refused the request (status {s})")),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<(), String> {
        match self.call(OP_DELETE, key, &[])? {
            STATUS_OK => Ok(()),
            STATUS_MISSING => Err(format!("{}: no such key", String::from_utf8_lossy(key))),
            s => Err(format!("delete: the server refused the request (status {s})")),
        }
    }
}

fn key_name(prefix: &str, i: u64) -> Vec<u8> {
    format!("{prefix}{i}").into_bytes()
}

fn load(store: &Store<'_>, keys: u64, prefix: &str, version: u64, threads: u32, json: bool) -> Result<(), String> {
    let started = Instant::now();
    let (next, done) = (AtomicU64::new(0), AtomicU64::new(0));
    let first_error = Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= keys {
                    break;
                }
                let key = key_name(prefix, i);
                if let Err(e) = store.put(&key, &value_for(&key, version)) {
                    first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                    next.store(keys, Ordering::Relaxed);
                    break;
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        let mut progress = Progress::new("lite-kv", "loaded", keys);
        while done.load(Ordering::Relaxed) < keys && next.load(Ordering::Relaxed) < keys {
            progress.update(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let seconds = started.elapsed().as_secs_f64();
    if json {
        println!("{}", serde_json::json!({ "loaded": keys, "seconds": seconds, "puts_per_s": keys as f64 / seconds }));
    } else {
        println!("loaded {keys} keys in {seconds:.2} s ({:.0} PUTs/s)", keys as f64 / seconds);
    }
    Ok(())
}

fn verify(store: &Store<'_>, keys: u64, prefix: &str, exact: Option<u64>, json: bool) -> Result<(), String> {
    let (mut missing, mut wrong) = (0u64, 0u64);
    let mut progress = Progress::new("lite-kv", "verified", keys);
    for i in 0..keys {
        let key = key_name(prefix, i);
        match store.get(&key)? {
            None => missing += 1,
            Some(v) => match (version_of(&key, &v), exact) {
                (None, _) => wrong += 1,
                (Some(got), Some(want)) if got != want => wrong += 1,
                _ => {}
            },
        }
        progress.update(i + 1);
    }
    let torn = store.torn_reads.load(Ordering::Relaxed);
    if json {
        println!("{}", serde_json::json!({ "keys": keys, "missing": missing, "wrong": wrong, "torn_reads": torn }));
    } else {
        println!("{keys} keys read one-sided: {missing} missing, {wrong} wrong ({torn} torn reads retried)");
    }
    if missing + wrong > 0 {
        return Err(format!("{missing} keys missing, {wrong} with a wrong value"));
    }
    Ok(())
}

struct BenchArgs {
    keys: u64,
    prefix: String,
    ops: u64,
    read_pct: u32,
    dist: Dist,
    threads: u32,
    seed: u64,
    json: bool,
}

#[derive(Default)]
struct Samples {
    get_ns: Vec<u64>,
    put_ns: Vec<u64>,
    wrong: u64,
}

fn bench(store: &Store<'_>, a: &BenchArgs) -> Result<(), String> {
    if a.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    let zipf = (a.dist == Dist::Zipfian).then(|| Zipf::new(a.keys, 0.99));
    let all = Mutex::new(Samples::default());
    let first_error = Mutex::new(None::<String>);
    let done = AtomicU64::new(0);
    let total = a.ops * u64::from(a.threads);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..a.threads.max(1) {
            let (all, first_error, done, zipf) = (&all, &first_error, &done, &zipf);
            s.spawn(move || {
                let mut rng = Rng::new(a.seed.wrapping_mul(1000).wrapping_add(u64::from(t)));
                let mut mine = Samples::default();
                for _ in 0..a.ops {
                    let rank = match zipf {
                        Some(z) => z.sample(&mut rng),
                        None => rng.below(a.keys),
                    };
                    // Scatter popular ranks over the key space (and so over shards).
                    let key = key_name(&a.prefix, rank.wrapping_mul(0x9E37_79B9) % a.keys);
                    let began = Instant::now();
                    let result = if rng.below(100) < u64::from(a.read_pct) {
                        store.get(&key).map(|v| {
                            if v.as_deref().and_then(|v| version_of(&key, v)).is_none() {
                                mine.wrong += 1;
                            }
                            mine.get_ns.push(began.elapsed().as_nanos() as u64);
                        })
                    } else {
                        store.put(&key, &value_for(&key, rng.below(1 << 20))).map(|()| {
                            mine.put_ns.push(began.elapsed().as_nanos() as u64);
                        })
                    };
                    if let Err(e) = result {
                        first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        break;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
                all.get_ns.extend(mine.get_ns);
                all.put_ns.extend(mine.put_ns);
                all.wrong += mine.wrong;
            });
        }
        let mut progress = Progress::new("lite-kv", "operations", total);
        while done.load(Ordering::Relaxed) < total && first_error.lock().is_ok_and(|e| e.is_none()) {
            progress.update(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut all = all.into_inner().unwrap_or_else(|e| e.into_inner());
    all.get_ns.sort_unstable();
    all.put_ns.sort_unstable();
    let ops = (all.get_ns.len() + all.put_ns.len()) as u64;
    let dist = match a.dist {
        Dist::Uniform => "uniform",
        Dist::Zipfian => "zipfian",
    };
    let summary = serde_json::json!({
        "ops": ops,
        "read_pct": a.read_pct,
        "dist": dist,
        "threads": a.threads,
        "seconds": seconds,
        "ops_per_s": ops as f64 / seconds,
        "gets": all.get_ns.len(),
        "get_p50_ns": percentile(&all.get_ns, 50.0),
        "get_p99_ns": percentile(&all.get_ns, 99.0),
        "puts": all.put_ns.len(),
        "put_p50_ns": percentile(&all.put_ns, 50.0),
        "put_p99_ns": percentile(&all.put_ns, 99.0),
        "wrong_values": all.wrong,
        "torn_reads": store.torn_reads.load(Ordering::Relaxed),
    });
    if a.json {
        println!("{summary}");
    } else {
        println!(
            "{ops} ops ({}% GET, {dist}, {} thread(s)) in {seconds:.2} s: {:.0} ops/s; GET median {:.0} us p99 {:.0} us; \
             PUT median {:.0} us p99 {:.0} us; {} wrong values",
            a.read_pct,
            a.threads,
            ops as f64 / seconds,
            percentile(&all.get_ns, 50.0) as f64 / 1e3,
            percentile(&all.get_ns, 99.0) as f64 / 1e3,
            percentile(&all.put_ns, 50.0) as f64 / 1e3,
            percentile(&all.put_ns, 99.0) as f64 / 1e3,
            all.wrong
        );
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    if all.wrong > 0 {
        return Err(format!("{} GETs returned a missing or foreign value", all.wrong));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn slots_round_trip_and_torn_slots_are_seen() {
        let s = encode_slot(b"apple", b"red", 3);
        assert_eq!(decode_slot(&s), Slot::Full { key: b"apple", value: b"red" });
        assert_eq!(decode_slot(&[0u8; SLOT]), Slot::Empty);
        let mut torn = s;
        torn[VALUE_AT] ^= 1;
        assert_eq!(decode_slot(&torn), Slot::Torn);
        // Half of a new version over the old one.
        let newer = encode_slot(b"apple", b"green", 4);
        let mut mixed = s;
        mixed[..SLOT / 2].copy_from_slice(&newer[..SLOT / 2]);
        assert_eq!(decode_slot(&mixed), Slot::Torn);
    }

    #[test]
    fn find_returns_the_key_or_says_where_to_look() {
        let mut bucket = [0u8; BUCKET];
        bucket[SLOT..2 * SLOT].copy_from_slice(&encode_slot(b"k1", b"one", 1));
        bucket[3 * SLOT..].copy_from_slice(&encode_slot(b"k2", b"two", 1));
        assert_eq!(find(&bucket, b"k2"), Lookup::Found(b"two".to_vec()));
        assert_eq!(find(&bucket, b"k3"), Lookup::Absent);
        bucket[SLOT + VALUE_AT] ^= 1;
        assert_eq!(find(&bucket, b"k3"), Lookup::Torn);
        assert_eq!(find(&bucket, b"k2"), Lookup::Found(b"two".to_vec()));
        let full: Vec<u8> = (0..SLOTS).flat_map(|i| encode_slot(format!("f{i}").as_bytes(), b"v", 1)).collect();
        assert_eq!(find(&full, b"k3"), Lookup::Next);
    }

    #[test]
    fn chains_spill_into_later_buckets_and_survive_deletes() {
        let buckets = 2;
        let mut slots = vec![[0u8; SLOT]; buckets as usize * SLOTS];
        let keys: Vec<Vec<u8>> = (0..8).map(|i| key_name("c", i)).collect();
        for k in &keys {
            let (at, free) = chain(&slots, buckets, k);
            assert_eq!(at, None);
            let i = free.unwrap_or(usize::MAX);
            slots[i] = encode_slot(k, k, 1);
        }
        // Full: no room for a ninth key, and every key is found.
        assert_eq!(chain(&slots, buckets, b"ninth"), (None, None));
        for k in &keys {
            assert!(chain(&slots, buckets, k).0.is_some());
        }
        // Deleting keeps later keys reachable and frees the slot for reuse.
        let (gone, _) = chain(&slots, buckets, &keys[0]);
        let gone = gone.unwrap_or(usize::MAX);
        slots[gone] = encode_slot(&[], &[], 2);
        assert_eq!(decode_slot(&slots[gone]), Slot::Deleted);
        for k in &keys[1..] {
            assert!(chain(&slots, buckets, k).0.is_some());
        }
        assert_eq!(chain(&slots, buckets, b"ninth"), (None, Some(gone)));
    }

    #[test]
    fn requests_are_bounded_and_parsed_back() {
        let r = request(OP_PUT, b"key", b"value").unwrap_or_default();
        assert_eq!(parse_request(&r), Some((OP_PUT, &b"key"[..], &b"value"[..])));
        assert!(request(OP_PUT, b"", b"v").is_err());
        assert!(request(OP_PUT, &[b'k'; MAX_KEY + 1], b"v").is_err());
        assert!(request(OP_PUT, b"k", &[0; MAX_VALUE + 1]).is_err());
        assert_eq!(parse_request(&r[..r.len() - 1]), None);
        assert_eq!(parse_request(&[OP_PUT, 0, 0]), None);
        assert_eq!(parse_request(&[OP_PUT, 200, 1, 1]), None);
    }

    #[test]
    fn values_name_their_key_and_version() {
        let v = value_for(b"key7", 42);
        assert!(v.len() <= MAX_VALUE);
        assert_eq!(version_of(b"key7", &v), Some(42));
        assert_eq!(version_of(b"key8", &v), None);
        assert_eq!(version_of(b"key7", b"v42:junk"), None);
    }

    #[test]
    fn keys_spread_over_shards_and_buckets() {
        let mut shards = [0u32; 3];
        let mut buckets = std::collections::HashSet::new();
        for i in 0..3000 {
            let (s, b) = place(&key_name("key", i), 3, 1024);
            shards[s] += 1;
            buckets.insert(b);
        }
        assert!(shards.iter().all(|&n| n > 800), "{shards:?}");
        assert!(buckets.len() > 900);
    }
}
