//! lite-mr: MapReduce WordCount on LITE (LITE-MR, paper §8.2).
//!
//! The master loads the input into an LMR spread over the worker nodes and hands out
//! tasks by LT_RPC. A map task LT_reads its split of the input, counts words and
//! publishes one LMR per reducer (`mr.J.map.M.R`) in its own node's memory; a reduce
//! task LT_reads partition R of every map task, merges, and publishes `mr.J.out.R`,
//! which the master reads to write the result. Workers keep what they published
//! until the master says the job is over. Nothing but liblite moves data.

use clap::{Parser, Subcommand};
use lite::{parse_size, Error, Lite, Lmr, MallocOptions, Perm};
use lite_apps::{fnv1a, Progress};
use lite_stats::Rng;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MR_RPC_ID: u32 = 0x4d52; // "MR"
const TASK_TIMEOUT: Duration = Duration::from_secs(600);
/// Input is loaded and read in pieces of this size.
const PIECE: usize = 1 << 20;
/// A word longer than this is cut (and counted by its first bytes).
const MAX_WORD: usize = 64;

/// Longest error text a worker sends back (the master's reply buffer is 512 bytes).
const MAX_ERROR: usize = 500;

const TASK_MAP: u8 = 1;
const TASK_REDUCE: u8 = 2;
const TASK_DONE: u8 = 3;

#[derive(Parser)]
#[command(name = "lite-mr", about = "MapReduce WordCount on LITE: input, intermediate data and output in LMRs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a corpus of SIZE bytes of words (a power-law vocabulary) to OUT.
    Gen {
        out: String,
        #[arg(long, value_parser = parse_size, default_value = "100M")]
        size: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Serve map and reduce tasks on this node until stdin closes; prints `ready`.
    Worker {
        #[arg(long, default_value_t = 2)]
        threads: u32,
    },
    /// Count the words of INPUT with the workers on NODES; write `word count` lines,
    /// sorted, to OUTPUT.
    Run {
        input: String,
        output: String,
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<u32>,
        /// Map tasks (splits of the input); default: 2 per node.
        #[arg(long)]
        maps: Option<u32>,
        /// Reduce tasks (partitions); default: 1 per node.
        #[arg(long)]
        reduces: Option<u32>,
        /// Also count in this process and compare.
        #[arg(long)]
        check: bool,
        #[arg(long)]
        json: bool,
    },
    /// The single-process reference: count the words of INPUT into OUTPUT.
    Reference { input: String, output: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Gen { out, size, seed } => generate(&out, size, seed),
        Command::Reference { input, output } => reference(&input, &output).map(|s| {
            println!("{} distinct words, {} in all, in {:.2} s", s.distinct, s.total, s.seconds);
        }),
        Command::Worker { threads } => open().and_then(|lite| worker(&lite, threads)),
        Command::Run { input, output, nodes, maps, reduces, check, json } => open().and_then(|lite| {
            let maps = maps.unwrap_or(2 * nodes.len() as u32);
            let reduces = reduces.unwrap_or(nodes.len() as u32);
            run(&lite, &RunArgs { input, output, nodes, maps, reduces, check, json })
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lite-mr: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open() -> Result<Lite, String> {
    Lite::open().map_err(|e| e.to_string())
}

// ---- words, splits, partitions (pure) ----

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'\'' || b >= 0x80
}

/// Adds the words of `text` to `counts`, lowercased (ASCII).
fn count_words(text: &[u8], counts: &mut HashMap<Vec<u8>, u64>) {
    for word in text.split(|&b| !is_word_byte(b)).filter(|w| !w.is_empty()) {
        let word: Vec<u8> = word[..word.len().min(MAX_WORD)].iter().map(u8::to_ascii_lowercase).collect();
        *counts.entry(word).or_insert(0) += 1;
    }
}

/// Split `i` of `n` over `size` bytes: `[start, end)` before word alignment.
fn split(size: u64, n: u32, i: u32) -> (u64, u64) {
    let at = |k: u32| (u128::from(size) * u128::from(k) / u128::from(n)) as u64;
    (at(i), at(i + 1))
}

/// Which reducer gets a word.
fn partition(word: &[u8], reduces: u32) -> u32 {
    (fnv1a(&[word]) % u64::from(reduces)) as u32
}

/// A partition's bytes: (length u16, word, count u64) records.
fn encode_counts(counts: &[(&Vec<u8>, &u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (word, &count) in counts {
        out.extend_from_slice(&(word.len() as u16).to_le_bytes());
        out.extend_from_slice(word);
        out.extend_from_slice(&count.to_le_bytes());
    }
    out
}

fn decode_counts(mut bytes: &[u8], into: &mut HashMap<Vec<u8>, u64>) -> Result<(), String> {
    while !bytes.is_empty() {
        let len = bytes.get(..2).map(|l| u16::from_le_bytes([l[0], l[1]]) as usize).ok_or("truncated record")?;
        let word = bytes.get(2..2 + len).ok_or("truncated word")?;
        let count = bytes.get(2 + len..10 + len).ok_or("truncated count")?;
        *into.entry(word.to_vec()).or_insert(0) += u64::from_le_bytes(count.try_into().map_err(|_| "bad count")?);
        bytes = &bytes[10 + len..];
    }
    Ok(())
}

fn write_counts(path: &str, counts: &HashMap<Vec<u8>, u64>) -> Result<(), String> {
    let sorted: BTreeMap<_, _> = counts.iter().collect();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?);
    for (word, count) in sorted {
        out.write_all(word).and_then(|()| writeln!(out, " {count}")).map_err(|e| format!("{path}: {e}"))?;
    }
    out.flush().map_err(|e| format!("{path}: {e}"))
}

// ---- task messages ----

/// The text of split `[start, end)` whose words a map task counts: the words that
/// start inside it, the last one read on to its end past the split. `read(at, len)`
/// reads the input.
fn split_text<E>(read: impl Fn(u64, u64) -> Result<Vec<u8>, E>, size: u64, start: u64, end: u64) -> Result<Vec<u8>, E> {
    // One byte before the split tells whether its first word began in the previous one.
    let from = start.saturating_sub(1);
    let mut text = read(from, end - from)?;
    let mut at = end;
    while at < size && text.last().is_some_and(|&b| is_word_byte(b)) {
        let more = read(at, (size - at).min(MAX_WORD as u64))?;
        let cut = more.iter().position(|&b| !is_word_byte(b)).unwrap_or(more.len());
        text.extend_from_slice(&more[..cut]);
        at += cut as u64;
        if cut < more.len() {
            break;
        }
    }
    if start == 0 {
        return Ok(text);
    }
    // Drop the byte before the split and the rest of a word that began before it.
    let skip = if is_word_byte(text[0]) {
        1 + text[1..].iter().position(|&b| !is_word_byte(b)).unwrap_or(text.len() - 1)
    } else {
        1
    };
    text.drain(..skip.min(text.len()));
    Ok(text)
}

/// map: job, task, maps, reduces, input size; reduce: job, task, maps.
fn task(kind: u8, job: u64, task: u32, maps: u32, reduces: u32, input: u64) -> Vec<u8> {
    let mut t = vec![kind];
    for w in [job, u64::from(task), u64::from(maps), u64::from(reduces), input] {
        t.extend_from_slice(&w.to_le_bytes());
    }
    t
}

struct Task {
    kind: u8,
    job: u64,
    task: u32,
    maps: u32,
    reduces: u32,
    input: u64,
}

fn parse_task(t: &[u8]) -> Option<Task> {
    if t.len() != 41 {
        return None;
    }
    let w = |i: usize| u64::from_le_bytes(t[1 + 8 * i..9 + 8 * i].try_into().unwrap_or([0; 8]));
    let small = |v: u64| u32::try_from(v).ok().filter(|&n| n > 0 && n <= 4096);
    Some(Task {
        kind: t[0],
        job: w(0),
        task: u32::try_from(w(1)).ok()?,
        maps: small(w(2))?,
        reduces: small(w(3))?,
        input: w(4),
    })
}

fn input_name(job: u64) -> String {
    format!("mr.{job}.input")
}

fn map_name(job: u64, m: u32, r: u32) -> String {
    format!("mr.{job}.map.{m}.{r}")
}

fn out_name(job: u64, r: u32) -> String {
    format!("mr.{job}.out.{r}")
}

// ---- worker ----

/// LMRs a worker published, per job, kept until the master ends the job.
type Published<'a> = Mutex<Vec<(u64, Lmr<'a>)>>;

fn worker(lite: &Lite, threads: u32) -> Result<(), String> {
    lite.register_rpc(MR_RPC_ID).map_err(|e| format!("serve RPC {MR_RPC_ID}: {e}"))?;
    let published: Published<'_> = Mutex::new(Vec::new());
    let stopping = std::sync::atomic::AtomicBool::new(false);
    println!("ready");
    let _ = std::io::stdout().flush();
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> =
            (0..threads.max(1)).map(|_| s.spawn(|| serve_tasks(lite, &published, &stopping))).collect();
        for _ in std::io::stdin().lock().lines() {}
        stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = lite.unregister_rpc(MR_RPC_ID);
        for w in workers {
            w.join().map_err(|_| "a worker thread panicked".to_string())??;
        }
        Ok(())
    })
}

fn serve_tasks<'a>(
    lite: &'a Lite,
    published: &Published<'a>,
    stopping: &std::sync::atomic::AtomicBool,
) -> Result<(), String> {
    let mut buf = [0u8; 64];
    let mut pending: Option<(lite::ReplyToken, Vec<u8>)> = None;
    loop {
        let got = match pending.take() {
            Some((token, reply)) => lite.reply_and_recv(token, &reply, MR_RPC_ID, &mut buf, TASK_TIMEOUT),
            None => lite.recv_rpc(MR_RPC_ID, &mut buf, TASK_TIMEOUT),
        };
        let incoming = match got {
            Ok(i) => i,
            Err(Error::Timeout | Error::NodeDown(_)) => continue,
            Err(Error::BufferTooSmall { .. }) => {
                // Not a task: take it off the queue and say so.
                let mut big = vec![0u8; lite::uapi::LITE_RPC_MAX_MSG as usize];
                if let Ok(i) = lite.recv_rpc(MR_RPC_ID, &mut big, TASK_TIMEOUT) {
                    pending = i.reply.map(|t| (t, [&[1u8][..], b"malformed task"].concat()));
                }
                continue;
            }
            Err(_) if stopping.load(std::sync::atomic::Ordering::Relaxed) => return Ok(()),
            Err(e) => return Err(format!("receive: {e}")),
        };
        let outcome = match parse_task(&buf[..incoming.len]) {
            Some(t) if t.kind == TASK_MAP => map_task(lite, &t, published),
            Some(t) if t.kind == TASK_REDUCE => reduce_task(lite, &t, published),
            Some(t) if t.kind == TASK_DONE => {
                published.lock().unwrap_or_else(|e| e.into_inner()).retain(|(job, _)| *job != t.job);
                Ok(0)
            }
            _ => Err("malformed task".to_string()),
        };
        // Reply: 0 and the bytes published, or 1 and the error.
        let reply = match outcome {
            Ok(bytes) => [&[0u8][..], &bytes.to_le_bytes()].concat(),
            Err(e) => {
                eprintln!("lite-mr worker: {e}");
                // The master's reply buffer holds 512 bytes.
                let cut = (0..=e.len().min(MAX_ERROR)).rev().find(|&i| e.is_char_boundary(i)).unwrap_or(0);
                [&[1u8][..], &e.as_bytes()[..cut]].concat()
            }
        };
        pending = incoming.reply.map(|t| (t, reply));
    }
}

/// Publishes `bytes` as LMR `name` in this node's memory, readable by any node: a
/// length word, then the bytes.
fn publish<'a>(lite: &'a Lite, job: u64, name: &str, bytes: &[u8], published: &Published<'a>) -> Result<(), String> {
    let me = lite.node_id().map_err(|e| e.to_string())?;
    let opts = MallocOptions { holders: vec![me], perm: Perm::READ, namespace: 0 };
    let lmr = lite.malloc(8 + bytes.len() as u64, name, &opts).map_err(|e| format!("publish {name}: {e}"))?;
    lmr.write(0, &(bytes.len() as u64).to_le_bytes()).map_err(|e| format!("write {name}: {e}"))?;
    for (i, piece) in bytes.chunks(PIECE).enumerate() {
        lmr.write(8 + (i * PIECE) as u64, piece).map_err(|e| format!("write {name}: {e}"))?;
    }
    published.lock().unwrap_or_else(|e| e.into_inner()).push((job, lmr));
    Ok(())
}

/// The bytes a worker published as LMR `name`.
fn fetch(lite: &Lite, name: &str) -> Result<Vec<u8>, String> {
    let lmr = lite.map(name, Perm::READ, 0).map_err(|e| format!("map {name}: {e}"))?;
    let mut len = [0u8; 8];
    lmr.read(0, &mut len).map_err(|e| format!("read {name}: {e}"))?;
    let len = u64::from_le_bytes(len);
    if len > lmr.size() - 8 {
        return Err(format!("{name}: length {len} beyond the LMR's {} bytes", lmr.size()));
    }
    read_range(&lmr, 8, len).map_err(|e| format!("read {name}: {e}"))
}

fn read_range(lmr: &Lmr<'_>, start: u64, len: u64) -> lite::Result<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    for (i, piece) in out.chunks_mut(PIECE).enumerate() {
        lmr.read(start + (i * PIECE) as u64, piece)?;
    }
    Ok(out)
}

/// Counts the words of split `task`: those that start inside it (a word crossing
/// the split's end is finished by reading on).
fn map_task<'a>(lite: &'a Lite, t: &Task, published: &Published<'a>) -> Result<u64, String> {
    let input = lite.map(&input_name(t.job), Perm::READ, 0).map_err(|e| format!("map the input: {e}"))?;
    let size = t.input.min(input.size());
    let (start, end) = split(size, t.maps, t.task);
    let text = split_text(|at, len| read_range(&input, at, len), size, start, end)
        .map_err(|e| format!("read the input: {e}"))?;
    let mut counts = HashMap::new();
    count_words(&text, &mut counts);
    let mut parts: Vec<Vec<(&Vec<u8>, &u64)>> = vec![Vec::new(); t.reduces as usize];
    for entry in &counts {
        parts[partition(entry.0, t.reduces) as usize].push(entry);
    }
    let mut total = 0;
    for (r, part) in parts.iter().enumerate() {
        let bytes = encode_counts(part);
        publish(lite, t.job, &map_name(t.job, t.task, r as u32), &bytes, published)?;
        total += bytes.len() as u64;
    }
    Ok(total)
}

fn reduce_task<'a>(lite: &'a Lite, t: &Task, published: &Published<'a>) -> Result<u64, String> {
    let mut counts = HashMap::new();
    for m in 0..t.maps {
        let name = map_name(t.job, m, t.task);
        decode_counts(&fetch(lite, &name)?, &mut counts).map_err(|e| format!("{name}: {e}"))?;
    }
    let sorted: Vec<_> = counts.iter().collect();
    let bytes = encode_counts(&sorted);
    publish(lite, t.job, &out_name(t.job, t.task), &bytes, published)?;
    Ok(bytes.len() as u64)
}

// ---- master ----

struct RunArgs {
    input: String,
    output: String,
    nodes: Vec<u32>,
    maps: u32,
    reduces: u32,
    check: bool,
    json: bool,
}

/// Runs `count` tasks of one kind on the workers (task i on node i mod n), all at
/// once; returns the bytes they published.
fn phase(
    lite: &Lite,
    a: &RunArgs,
    what: &str,
    count: u32,
    make: impl Fn(u32) -> Vec<u8> + Sync,
) -> Result<u64, String> {
    let done = std::sync::atomic::AtomicU64::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for i in 0..count {
            let (make, done, results) = (&make, &done, &results);
            s.spawn(move || {
                let node = a.nodes[i as usize % a.nodes.len()];
                let mut reply = [0u8; 512];
                let outcome = match lite.rpc(node, MR_RPC_ID, &make(i), &mut reply, TASK_TIMEOUT) {
                    Ok(9) if reply[0] == 0 => Ok(u64::from_le_bytes(reply[1..9].try_into().unwrap_or([0; 8]))),
                    Ok(n) => {
                        Err(format!("{what} task {i} on node {node}: {}", String::from_utf8_lossy(&reply[1..n.max(1)])))
                    }
                    Err(Error::NoServer { .. }) => Err(format!("node {node} runs no `lite-mr worker`")),
                    Err(e) => Err(format!("{what} task {i} on node {node}: {e}")),
                };
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                results.lock().unwrap_or_else(|e| e.into_inner()).push(outcome);
            });
        }
        let mut progress = Progress::new("lite-mr", format!("{what} tasks done"), u64::from(count));
        while done.load(std::sync::atomic::Ordering::Relaxed) < u64::from(count) {
            progress.update(done.load(std::sync::atomic::Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(200));
        }
        progress.finish(u64::from(count));
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().sum()
}

fn run(lite: &Lite, a: &RunArgs) -> Result<(), String> {
    if a.nodes.is_empty() || a.maps == 0 || a.reduces == 0 || a.maps > 4096 || a.reduces > 4096 {
        return Err("need --nodes (workers) and 1 to 4096 map and reduce tasks".into());
    }
    let started = Instant::now();
    let text = std::fs::read(&a.input).map_err(|e| format!("{}: {e}", a.input))?;
    let size = text.len() as u64;
    let job = u64::from(std::process::id()) << 20 | (started.elapsed().as_nanos() as u64 & 0xfffff);
    let opts = MallocOptions { holders: a.nodes.clone(), perm: Perm::READ, namespace: 0 };
    let input = lite.malloc(size.max(1), &input_name(job), &opts).map_err(|e| format!("input LMR: {e}"))?;
    let mut progress = Progress::new("lite-mr", "input bytes loaded", size);
    for (i, piece) in text.chunks(PIECE).enumerate() {
        input.write((i * PIECE) as u64, piece).map_err(|e| format!("load the input: {e}"))?;
        progress.update(((i + 1) * PIECE).min(text.len()) as u64);
    }
    progress.finish(size);
    let loaded = started.elapsed().as_secs_f64();
    let outcome = (|| {
        let shuffled = phase(lite, a, "map", a.maps, |m| task(TASK_MAP, job, m, a.maps, a.reduces, size))?;
        let mapped = started.elapsed().as_secs_f64();
        phase(lite, a, "reduce", a.reduces, |r| task(TASK_REDUCE, job, r, a.maps, a.reduces, size))?;
        let reduced = started.elapsed().as_secs_f64();
        let mut counts = HashMap::new();
        for r in 0..a.reduces {
            decode_counts(&fetch(lite, &out_name(job, r))?, &mut counts)?;
        }
        write_counts(&a.output, &counts)?;
        Ok::<_, String>((shuffled, mapped, reduced, counts))
    })();
    // Whatever happened, the workers drop this job's LMRs.
    for &node in &a.nodes {
        let mut reply = [0u8; 512];
        let _ = lite.rpc(node, MR_RPC_ID, &task(TASK_DONE, job, 0, 1, 1, 0), &mut reply, TASK_TIMEOUT);
    }
    drop(input);
    let (shuffled, mapped, reduced, counts) = outcome?;
    let seconds = started.elapsed().as_secs_f64();
    let words: u64 = counts.values().sum();
    let mut summary = serde_json::json!({
        "input_bytes": size,
        "nodes": a.nodes,
        "maps": a.maps,
        "reduces": a.reduces,
        "distinct_words": counts.len(),
        "words": words,
        "shuffle_bytes": shuffled,
        "load_s": loaded,
        "map_s": mapped - loaded,
        "reduce_s": reduced - mapped,
        "seconds": seconds,
    });
    let mut identical = true;
    if a.check {
        let reference_out = format!("{}.reference", a.output);
        let r = reference(&a.input, &reference_out)?;
        identical = std::fs::read(&reference_out).ok() == std::fs::read(&a.output).ok();
        summary["reference_s"] = r.seconds.into();
        summary["identical"] = identical.into();
    }
    if a.json {
        println!("{summary}");
    } else {
        println!(
            "{words} words ({} distinct) in {size} bytes on nodes {:?}: {seconds:.2} s (load {loaded:.2} s, map {:.2} s, \
             reduce {:.2} s), {shuffled} bytes shuffled",
            counts.len(),
            a.nodes,
            mapped - loaded,
            reduced - mapped
        );
        if a.check {
            println!(
                "single-process reference: {:.2} s; outputs {}",
                summary["reference_s"].as_f64().unwrap_or(0.0),
                if identical { "identical" } else { "DIFFER" }
            );
        }
    }
    if identical {
        Ok(())
    } else {
        Err(format!("{} differs from the single-process reference", a.output))
    }
}

// ---- reference and corpus ----

struct Counted {
    distinct: usize,
    total: u64,
    seconds: f64,
}

fn reference(input: &str, output: &str) -> Result<Counted, String> {
    let started = Instant::now();
    let text = std::fs::read(input).map_err(|e| format!("{input}: {e}"))?;
    let mut counts = HashMap::new();
    count_words(&text, &mut counts);
    write_counts(output, &counts)?;
    Ok(Counted { distinct: counts.len(), total: counts.values().sum(), seconds: started.elapsed().as_secs_f64() })
}

fn generate(path: &str, size: u64, seed: u64) -> Result<(), String> {
    const VOCABULARY: u64 = 50_000;
    let mut rng = Rng::new(seed);
    let words: Vec<String> = (0..VOCABULARY)
        .map(|_| {
            let len = 2 + rng.below(10) as usize;
            (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect()
        })
        .collect();
    let zipf = lite_apps::Zipf::new(VOCABULARY, 0.9);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?);
    let (mut written, mut line) = (0u64, 0usize);
    let mut progress = Progress::new("lite-mr", "bytes generated", size);
    while written < size {
        let word = &words[zipf.sample(&mut rng) as usize];
        // Capitals and punctuation now and then: the counter must normalize them.
        let sep = match rng.below(20) {
            0 => ", ",
            1 => ". ",
            _ => " ",
        };
        let text = if rng.below(50) == 0 { word.to_uppercase() } else { word.clone() };
        line += text.len() + sep.len();
        let end = if line > 72 {
            line = 0;
            "\n"
        } else {
            sep
        };
        out.write_all(text.as_bytes())
            .and_then(|()| out.write_all(end.as_bytes()))
            .map_err(|e| format!("{path}: {e}"))?;
        written += (text.len() + end.len()) as u64;
        progress.update(written);
    }
    out.flush().map_err(|e| format!("{path}: {e}"))?;
    println!("{written} bytes of words in {path}");
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
    fn words_are_normalized_and_counted() {
        let mut c = HashMap::new();
        count_words(b"The cat, the CAT. don't-stop\n", &mut c);
        assert_eq!(c.get(&b"the"[..]), Some(&2));
        assert_eq!(c.get(&b"cat"[..]), Some(&2));
        assert_eq!(c.get(&b"don't"[..]), Some(&1));
        assert_eq!(c.get(&b"stop"[..]), Some(&1));
    }

    #[test]
    fn splits_cover_the_input_exactly() {
        for (size, n) in [(10u64, 3u32), (1, 4), (1000, 7)] {
            let mut at = 0;
            for i in 0..n {
                let (s, e) = split(size, n, i);
                assert_eq!(s, at);
                at = e;
            }
            assert_eq!(at, size);
        }
    }

    #[test]
    fn splits_count_every_word_once() {
        let mut rng = Rng::new(3);
        for round in 0..200 {
            let len = 1 + rng.below(300) as usize;
            let text: Vec<u8> =
                (0..len).map(|_| if rng.below(4) == 0 { b' ' } else { b'a' + rng.below(3) as u8 }).collect();
            let mut want = HashMap::new();
            count_words(&text, &mut want);
            let n = 1 + (round % 9) as u32;
            let read = |at: u64, len: u64| Ok::<_, ()>(text[at as usize..(at + len) as usize].to_vec());
            let mut got = HashMap::new();
            for i in 0..n {
                let (s, e) = split(len as u64, n, i);
                count_words(&split_text(read, len as u64, s, e).unwrap_or_default(), &mut got);
            }
            assert_eq!(got, want, "{n} splits of {:?}", String::from_utf8_lossy(&text));
        }
    }

    #[test]
    fn counts_round_trip_and_merge() {
        let (a, b) = (b"alpha".to_vec(), b"beta".to_vec());
        let bytes = encode_counts(&[(&a, &3), (&b, &1)]);
        let mut m = HashMap::new();
        decode_counts(&bytes, &mut m).unwrap_or_default();
        decode_counts(&bytes, &mut m).unwrap_or_default();
        assert_eq!((m[&a], m[&b]), (6, 2));
        assert!(decode_counts(&bytes[..bytes.len() - 1], &mut m).is_err());
    }

    #[test]
    fn tasks_round_trip_and_bad_ones_are_refused() {
        let t = parse_task(&task(TASK_MAP, 9, 2, 6, 3, 1000));
        assert!(t.is_some_and(|t| (t.kind, t.job, t.task, t.maps, t.reduces, t.input) == (TASK_MAP, 9, 2, 6, 3, 1000)));
        assert!(parse_task(&task(TASK_MAP, 9, 2, 0, 3, 1000)).is_none());
        assert!(parse_task(&[1, 2, 3]).is_none());
    }
}
