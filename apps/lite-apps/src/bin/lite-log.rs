//! lite-log: a distributed atomic log on LITE (LITE-Log, paper §8.1).
//!
//! The log is two LMRs: `NAME.data`, a ring of `--capacity` bytes, and `NAME.meta`,
//! whose words are the reservation tail and the reclaimed head. Appending is one
//! LT_fetch_add on the tail, which reserves the entry's bytes at a log position
//! (positions only grow; the ring offset is the position modulo the capacity), and
//! one LT_write of the entry there. Entries carry their own position and a checksum,
//! so a reader tells a committed entry from a half-written one or from one of an
//! earlier lap of the ring without any further synchronization. The cleaner consumes
//! committed entries in log order and advances the head, which frees their space for
//! writers; `replay` reads what lies between head and tail without consuming it.
//!
//! A writer that dies between its reservation and its write leaves a hole that the
//! cleaner cannot step over (it does not know the hole's size): it reports the stall.

use clap::{Parser, Subcommand};
use lite::{parse_size, Lite, Lmr, MallocOptions, Perm};
use lite_apps::{fnv1a, Progress};
use lite_stats::percentile;
use std::io::BufRead;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const META_SIZE: u64 = 4096;
/// Meta words: format magic, ring capacity, tail (next free position), head (first
/// unreclaimed position).
const META_MAGIC: u64 = 0;
const META_CAPACITY: u64 = 8;
const META_TAIL: u64 = 16;
const META_HEAD: u64 = 24;
const LOG_MAGIC: u64 = 0x4c49_5445_4c4f_4731; // "LITELOG1"
const ENTRY_MAGIC: u32 = 0x4c45_4e54; // "LENT"
const HEADER: usize = 24;
/// Bytes a reader fetches first: the header and a small entry in one LT_read.
const FIRST_READ: usize = 128;
const MAX_ENTRY: u64 = 1 << 20;

#[derive(Parser)]
#[command(name = "lite-log", about = "A distributed atomic log on LITE: fetch-and-add reservations, one-sided appends")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create log NAME held by node HOLDER, print `ready`, and keep it until stdin
    /// closes (the creating process is the master of its LMRs).
    Create {
        name: String,
        #[arg(long, value_parser = parse_size, default_value = "4M")]
        capacity: u64,
        #[arg(long)]
        holder: Option<u32>,
    },
    /// Append COUNT entries per thread: each carries (writer id, sequence number) and
    /// filler up to SIZE bytes. Prints commits/s and latency (JSON with --json).
    Append {
        name: String,
        #[arg(long, default_value_t = 1000)]
        count: u64,
        #[arg(long, value_parser = parse_size, default_value = "16")]
        size: u64,
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Writer id of the first thread (the others follow); ids must be unique in the log.
        #[arg(long, default_value_t = 0)]
        writer: u64,
        /// Fail when the log stays full for this long (no cleaner, or a stalled one).
        #[arg(long, default_value_t = 30)]
        stall_s: u64,
        #[arg(long)]
        json: bool,
    },
    /// Consume entries in log order, check each writer's sequence numbers, and reclaim
    /// their space; stop after EXPECT entries (or run until killed).
    Clean {
        name: String,
        #[arg(long)]
        expect: Option<u64>,
        /// Fail when no entry commits for this long while some are reserved.
        #[arg(long, default_value_t = 30)]
        stall_s: u64,
        #[arg(long)]
        json: bool,
    },
    /// Read the entries between head and tail without consuming them.
    Replay {
        name: String,
        /// Print each entry (position, length, writer, sequence).
        #[arg(long)]
        verbose: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show head, tail and fill of log NAME.
    Stat {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let lite = match Lite::open() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lite-log: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Create { name, capacity, holder } => create(&lite, &name, capacity, holder),
        Command::Append { name, count, size, threads, writer, stall_s, json } => {
            let stall = Duration::from_secs(stall_s);
            append(&lite, &name, &AppendArgs { count, size, threads, writer, stall, json })
        }
        Command::Clean { name, expect, stall_s, json } => {
            clean(&lite, &name, expect, Duration::from_secs(stall_s), json)
        }
        Command::Replay { name, verbose, json } => replay(&lite, &name, verbose, json),
        Command::Stat { name, json } => stat(&lite, &name, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lite-log: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---- the entry format (pure) ----

/// Bytes an entry with `len` payload bytes occupies: header and payload, 8-aligned.
fn entry_size(len: u64) -> u64 {
    HEADER as u64 + len.div_ceil(8) * 8
}

/// Header: payload length, magic, the entry's own position, checksum of the rest.
fn encode(position: u64, payload: &[u8]) -> Vec<u8> {
    let mut e = vec![0u8; entry_size(payload.len() as u64) as usize];
    e[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    e[4..8].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
    e[8..16].copy_from_slice(&position.to_le_bytes());
    e[HEADER..HEADER + payload.len()].copy_from_slice(payload);
    let sum = fnv1a(&[&e[0..16], payload]);
    e[16..24].copy_from_slice(&sum.to_le_bytes());
    e
}

/// What a reader finds at a position.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// A committed entry with this many payload bytes.
    Entry { len: u64 },
    /// The whole entry is needed to check it: read this many bytes.
    NeedBytes(usize),
    /// Not (yet) a committed entry of this position.
    NotCommitted,
}

fn decode(position: u64, bytes: &[u8]) -> Found {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
    if bytes.len() < HEADER {
        return Found::NeedBytes(HEADER);
    }
    let len = u64::from(u32::from_le_bytes(bytes[0..4].try_into().unwrap_or([0; 4])));
    let magic = u32::from_le_bytes(bytes[4..8].try_into().unwrap_or([0; 4]));
    if magic != ENTRY_MAGIC || word(8) != position || len > MAX_ENTRY {
        return Found::NotCommitted;
    }
    let total = entry_size(len) as usize;
    if bytes.len() < total {
        return Found::NeedBytes(total);
    }
    if fnv1a(&[&bytes[0..16], &bytes[HEADER..HEADER + len as usize]]) == word(16) {
        Found::Entry { len }
    } else {
        Found::NotCommitted
    }
}

/// Ring pieces `[offset, len)` covering `len` bytes from log `position`.
fn pieces(capacity: u64, position: u64, len: u64) -> [(u64, u64); 2] {
    let start = position % capacity;
    let first = len.min(capacity - start);
    [(start, first), (0, len - first)]
}

/// The payload the test writers append: writer id, sequence number, filler.
fn payload(writer: u64, seq: u64, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size.max(16)];
    p[0..8].copy_from_slice(&writer.to_le_bytes());
    p[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in p[16..].iter_mut().enumerate() {
        *b = (writer as usize + seq as usize + i) as u8;
    }
    p
}

// ---- the log over LMRs ----

struct Log<'a> {
    data: Lmr<'a>,
    meta: Lmr<'a>,
    capacity: u64,
}

fn rw() -> Perm {
    Perm::READ | Perm::WRITE
}

impl<'a> Log<'a> {
    fn open(lite: &'a Lite, name: &str) -> lite::Result<Self> {
        let meta = lite.map(&format!("{name}.meta"), rw(), 0)?;
        let data = lite.map(&format!("{name}.data"), rw(), 0)?;
        let log = Log { capacity: 0, data, meta };
        if log.word(META_MAGIC)? != LOG_MAGIC {
            return Err(lite::Error::InvalidArgument(format!("{name}.meta is not a lite-log")));
        }
        let capacity = log.word(META_CAPACITY)?;
        if capacity == 0 || capacity > log.data.size() {
            return Err(lite::Error::InvalidArgument(format!("{name}: capacity {capacity} does not fit its data LMR")));
        }
        Ok(Log { capacity, ..log })
    }

    fn word(&self, offset: u64) -> lite::Result<u64> {
        let mut w = [0u8; 8];
        self.meta.read(offset, &mut w)?;
        Ok(u64::from_le_bytes(w))
    }

    fn read_at(&self, position: u64, buf: &mut [u8]) -> lite::Result<()> {
        let mut done = 0;
        for (offset, len) in pieces(self.capacity, position, buf.len() as u64) {
            if len > 0 {
                self.data.read(offset, &mut buf[done..done + len as usize])?;
                done += len as usize;
            }
        }
        Ok(())
    }

    /// Reserves space (one fetch-and-add), waits until the cleaner has freed it, and
    /// writes the entry; returns its position.
    fn append(&self, payload: &[u8], stall: Duration) -> Result<u64, String> {
        let size = entry_size(payload.len() as u64);
        if payload.len() as u64 > MAX_ENTRY || size > self.capacity {
            return Err(format!("an entry of {} bytes does not fit a log of {} bytes", payload.len(), self.capacity));
        }
        let position = self.meta.fetch_add(META_TAIL, size).map_err(|e| format!("reserve: {e}"))?;
        let waiting = Instant::now();
        let mut nap = Duration::from_micros(50);
        loop {
            let head = self.word(META_HEAD).map_err(|e| format!("read head: {e}"))?;
            if position + size <= head + self.capacity {
                break;
            }
            if waiting.elapsed() > stall {
                return Err(format!(
                    "the log is full for {} s (is a cleaner running?); position {position} stays reserved",
                    stall.as_secs()
                ));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
        let entry = encode(position, payload);
        let mut done = 0;
        for (offset, len) in pieces(self.capacity, position, size) {
            if len > 0 {
                self.data.write(offset, &entry[done..done + len as usize]).map_err(|e| format!("write: {e}"))?;
                done += len as usize;
            }
        }
        Ok(position)
    }

    /// The committed entry at `position` (its payload), or None if it is not yet.
    fn entry_at(&self, position: u64) -> lite::Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; FIRST_READ.min(self.capacity as usize)];
        self.read_at(position, &mut buf)?;
        loop {
            match decode(position, &buf) {
                Found::Entry { len } => return Ok(Some(buf[HEADER..HEADER + len as usize].to_vec())),
                Found::NotCommitted => return Ok(None),
                Found::NeedBytes(n) if n as u64 > self.capacity || n <= buf.len() => return Ok(None),
                Found::NeedBytes(n) => {
                    buf.resize(n, 0);
                    self.read_at(position, &mut buf)?;
                }
            }
        }
    }
}

fn create(lite: &Lite, name: &str, capacity: u64, holder: Option<u32>) -> Result<(), String> {
    if capacity < 64 || !capacity.is_multiple_of(8) {
        return Err(format!("capacity {capacity}: at least 64 bytes, a multiple of 8"));
    }
    let opts = MallocOptions { holders: holder.into_iter().collect(), perm: rw(), namespace: 0 };
    let data = lite.malloc(capacity, &format!("{name}.data"), &opts).map_err(|e| format!("create {name}.data: {e}"))?;
    let meta =
        lite.malloc(META_SIZE, &format!("{name}.meta"), &opts).map_err(|e| format!("create {name}.meta: {e}"))?;
    // Stale bytes in the ring cannot pass for entries (position and checksum), but
    // the meta words must start at zero.
    meta.memset(0, META_SIZE, 0).map_err(|e| format!("clear {name}.meta: {e}"))?;
    meta.write(META_CAPACITY, &capacity.to_le_bytes()).map_err(|e| e.to_string())?;
    meta.write(META_MAGIC, &LOG_MAGIC.to_le_bytes()).map_err(|e| e.to_string())?;
    println!("ready");
    for _ in std::io::stdin().lock().lines() {}
    drop((data, meta));
    Ok(())
}

struct AppendArgs {
    count: u64,
    size: u64,
    threads: u32,
    writer: u64,
    stall: Duration,
    json: bool,
}

fn append(lite: &Lite, name: &str, a: &AppendArgs) -> Result<(), String> {
    let log = Log::open(lite, name).map_err(|e| format!("open {name}: {e}"))?;
    let size = usize::try_from(a.size).map_err(|_| "size too large".to_string())?;
    let latencies = Mutex::new(Vec::new());
    let first_error = Mutex::new(None::<String>);
    let done = AtomicU64::new(0);
    let total = a.count * u64::from(a.threads);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..a.threads {
            let (log, latencies, first_error, done) = (&log, &latencies, &first_error, &done);
            s.spawn(move || {
                let writer = a.writer + u64::from(t);
                let mut mine = Vec::with_capacity(a.count as usize);
                for seq in 0..a.count {
                    let began = Instant::now();
                    if let Err(e) = log.append(&payload(writer, seq, size), a.stall) {
                        first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        break;
                    }
                    mine.push(began.elapsed().as_nanos() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                }
                latencies.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
            });
        }
        let mut progress = Progress::new("lite-log", "appended", total);
        while done.load(Ordering::Relaxed) < total && first_error.lock().is_ok_and(|e| e.is_none()) {
            progress.update(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut lat = latencies.into_inner().unwrap_or_else(|e| e.into_inner());
    lat.sort_unstable();
    let summary = serde_json::json!({
        "commits": lat.len(),
        "entry_bytes": a.size,
        "threads": a.threads,
        "seconds": seconds,
        "commits_per_s": lat.len() as f64 / seconds,
        "p50_ns": percentile(&lat, 50.0),
        "p99_ns": percentile(&lat, 99.0),
    });
    if a.json {
        println!("{summary}");
    } else {
        println!(
            "{} commits of {} B in {seconds:.2} s: {:.0} commits/s, latency median {:.0} us, p99 {:.0} us",
            lat.len(),
            a.size,
            lat.len() as f64 / seconds,
            percentile(&lat, 50.0) as f64 / 1e3,
            percentile(&lat, 99.0) as f64 / 1e3
        );
    }
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Per-writer sequence checking: after a writer's first entry seen (reading may
/// start mid-log), each next one must follow it: none missing, none twice.
#[derive(Default)]
struct Writers {
    next: std::collections::BTreeMap<u64, u64>,
    out_of_order: u64,
}

impl Writers {
    fn saw(&mut self, entry: &[u8]) {
        if entry.len() < 16 {
            self.out_of_order += 1;
            return;
        }
        let word = |at: usize| u64::from_le_bytes(entry[at..at + 8].try_into().unwrap_or([0; 8]));
        let next = self.next.entry(word(0)).or_insert(word(8));
        if word(8) != *next || entry != payload(word(0), word(8), entry.len()) {
            self.out_of_order += 1;
        }
        *next = word(8) + 1;
    }
}

fn clean(lite: &Lite, name: &str, expect: Option<u64>, stall: Duration, json: bool) -> Result<(), String> {
    let log = Log::open(lite, name).map_err(|e| format!("open {name}: {e}"))?;
    let mut head = log.word(META_HEAD).map_err(|e| e.to_string())?;
    let (mut entries, mut bytes, mut writers) = (0u64, 0u64, Writers::default());
    let mut progress = Progress::new("lite-log", "cleaned", expect.unwrap_or(0));
    let started = Instant::now();
    let mut last_commit = Instant::now();
    let mut nap = Duration::from_micros(50);
    while expect.is_none_or(|n| entries < n) {
        match log.entry_at(head).map_err(|e| format!("read at {head}: {e}"))? {
            Some(payload) => {
                writers.saw(&payload);
                head += entry_size(payload.len() as u64);
                entries += 1;
                bytes += payload.len() as u64;
                last_commit = Instant::now();
                nap = Duration::from_micros(50);
                // The head is published in batches: each write frees space for writers.
                if entries % 16 == 0 {
                    log.meta.write(META_HEAD, &head.to_le_bytes()).map_err(|e| format!("publish head: {e}"))?;
                }
                progress.update(entries);
            }
            None => {
                log.meta.write(META_HEAD, &head.to_le_bytes()).map_err(|e| format!("publish head: {e}"))?;
                let tail = log.word(META_TAIL).map_err(|e| e.to_string())?;
                if tail > head && last_commit.elapsed() > stall {
                    return Err(format!(
                        "position {head} is reserved but not written for {} s: a writer died mid-append",
                        stall.as_secs()
                    ));
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(2));
            }
        }
    }
    log.meta.write(META_HEAD, &head.to_le_bytes()).map_err(|e| format!("publish head: {e}"))?;
    progress.finish(entries);
    let seconds = started.elapsed().as_secs_f64();
    let summary = serde_json::json!({
        "entries": entries,
        "payload_bytes": bytes,
        "writers": writers.next.len(),
        "out_of_order": writers.out_of_order,
        "head": head,
        "seconds": seconds,
    });
    if json {
        println!("{summary}");
    } else {
        println!(
            "cleaned {entries} entries ({bytes} payload bytes) from {} writers in {seconds:.2} s, head now {head}, \
             {} out of order",
            writers.next.len(),
            writers.out_of_order
        );
    }
    if writers.out_of_order > 0 {
        return Err(format!("{} entries out of writer order or corrupt", writers.out_of_order));
    }
    Ok(())
}

fn replay(lite: &Lite, name: &str, verbose: bool, json: bool) -> Result<(), String> {
    let log = Log::open(lite, name).map_err(|e| format!("open {name}: {e}"))?;
    let tail = log.word(META_TAIL).map_err(|e| e.to_string())?;
    let mut position = log.word(META_HEAD).map_err(|e| e.to_string())?;
    let (mut entries, mut uncommitted) = (0u64, 0u64);
    let mut writers = Writers::default();
    while position < tail {
        match log.entry_at(position).map_err(|e| format!("read at {position}: {e}"))? {
            Some(payload) => {
                if verbose {
                    let word =
                        |at: usize| payload.get(at..at + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
                    println!("{position:>12} {:>6} B  writer {:?} seq {:?}", payload.len(), word(0), word(8));
                }
                writers.saw(&payload);
                position += entry_size(payload.len() as u64);
                entries += 1;
            }
            None => {
                // Reserved but not (yet) written, or reclaimed under us: replay stops
                // at the first gap, like a reader of the committed prefix.
                let head = log.word(META_HEAD).map_err(|e| e.to_string())?;
                if head > position {
                    // Writers' sequences go on from wherever the head is now.
                    position = head;
                    writers.next.clear();
                    continue;
                }
                uncommitted = tail - position;
                break;
            }
        }
    }
    let summary = serde_json::json!({
        "entries": entries,
        "writers": writers.next.len(),
        "out_of_order": writers.out_of_order,
        "uncommitted_bytes": uncommitted,
        "tail": tail,
    });
    if json {
        println!("{summary}");
    } else {
        println!(
            "{entries} committed entries from {} writers up to position {position} (tail {tail}, {uncommitted} bytes \
             reserved but not written)",
            writers.next.len()
        );
    }
    Ok(())
}

fn stat(lite: &Lite, name: &str, json: bool) -> Result<(), String> {
    let log = Log::open(lite, name).map_err(|e| format!("open {name}: {e}"))?;
    let (head, tail) =
        (log.word(META_HEAD).map_err(|e| e.to_string())?, log.word(META_TAIL).map_err(|e| e.to_string())?);
    let used = tail.saturating_sub(head);
    if json {
        println!("{}", serde_json::json!({ "capacity": log.capacity, "head": head, "tail": tail, "used": used }));
    } else {
        println!(
            "{name}: capacity {} B, head {head}, tail {tail}, {used} B in use ({:.1}%)",
            log.capacity,
            used as f64 * 100.0 / log.capacity as f64
        );
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
    fn an_entry_decodes_only_at_its_own_position_and_whole() {
        let e = encode(4096, b"hello log");
        assert_eq!(e.len() as u64, entry_size(9));
        assert_eq!(decode(4096, &e), Found::Entry { len: 9 });
        // The same bytes one lap later are stale.
        assert_eq!(decode(4096 + 65536, &e), Found::NotCommitted);
        // Torn: any changed payload byte fails the checksum.
        let mut torn = e.clone();
        torn[HEADER + 3] ^= 1;
        assert_eq!(decode(4096, &torn), Found::NotCommitted);
        // Only the header so far: asks for the rest.
        assert_eq!(decode(4096, &e[..HEADER]), Found::NeedBytes(e.len()));
        assert_eq!(decode(4096, &[0u8; 8]), Found::NeedBytes(HEADER));
        assert_eq!(decode(0, &[0u8; 64]), Found::NotCommitted);
    }

    #[test]
    fn ring_pieces_wrap_at_the_capacity() {
        assert_eq!(pieces(100, 250, 40), [(50, 40), (0, 0)]);
        assert_eq!(pieces(100, 290, 40), [(90, 10), (0, 30)]);
        assert_eq!(pieces(100, 300, 100), [(0, 100), (0, 0)]);
    }

    #[test]
    fn writers_in_order_pass_and_gaps_or_repeats_do_not() {
        let mut w = Writers::default();
        for seq in 0..3 {
            w.saw(&payload(7, seq, 16));
            w.saw(&payload(9, seq, 40));
        }
        assert_eq!((w.next.len(), w.out_of_order), (2, 0));
        w.saw(&payload(7, 4, 16));
        w.saw(&payload(9, 2, 40));
        assert_eq!(w.out_of_order, 2);
        // A writer first seen mid-sequence is fine.
        w.saw(&payload(5, 40, 16));
        w.saw(&payload(5, 41, 16));
        assert_eq!(w.out_of_order, 2);
        let mut corrupt = payload(1, 0, 32);
        corrupt[20] ^= 0xff;
        w.saw(&corrupt);
        assert_eq!(w.out_of_order, 3);
    }
}
