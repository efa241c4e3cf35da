//! `flow`: one traffic flow of a priority class, LT_write, LT_read or LT_RPC back
//! to back (or with a pause between them) from threads or forked processes, with
//! its timeline.

use crate::cli::FlowOp;
use crate::harness::{buffer, nanos, open, opts, rw, Progress};
use crate::stats::{summary_json, throughput};
use crate::{err, Res};
use lite::uapi::LITE_RPC_MAX_MSG;
use lite::{Class, Lite, Lmr};
use lite_stats::Summary;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// How long one LT_RPC of a flow may take before the flow fails.
const RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a flow's first (untimed) LT_RPC waits for the server to register.
const SERVER_WAIT: Duration = Duration::from_secs(10);

/// Completion time (since the flow's start) and latency of every operation.
type Samples = Vec<(u64, u64)>;

/// What one flow does, to which node.
pub(crate) struct FlowSpec {
    pub(crate) holder: u32,
    /// Bytes per operation (for rpc: request bytes).
    pub(crate) size: u64,
    pub(crate) op: FlowOp,
    /// Reply bytes per LT_RPC (rpc only).
    pub(crate) reply_size: u64,
    pub(crate) rpc_id: u32,
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

/// Who runs a flow: THREADS threads in each of PROCS processes, each thread
/// pausing `think` after each operation (zero: back to back).
#[derive(Clone, Copy)]
pub(crate) struct Workers {
    pub(crate) threads: u32,
    pub(crate) procs: u32,
    pub(crate) think: Duration,
}

/// When a flow's clock started, by the monotonic and the wall clock.
type FlowStart = (Instant, std::time::SystemTime);

pub(crate) fn flow(
    progress: &Progress,
    namespace: u32,
    spec: &FlowSpec,
    seconds: f64,
    class: Option<Class>,
    workers: Workers,
    interval_ms: u64,
) -> Res<Value> {
    let (holder, size, op) = (spec.holder, spec.size, spec.op);
    let Workers { threads, procs, think } = workers;
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
        flow_procs(namespace, spec, workers, limit)?
    } else {
        flow_threads(namespace, spec, threads, think, limit, None)?
    };
    let started_unix_ms =
        start.and_then(|(_, wall)| wall.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as u64);
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
        "think_us": think.as_micros() as u64,
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
/// start and every operation's completion time since it and latency. Each thread
/// pauses `think` after each operation.
fn flow_threads(
    namespace: u32,
    spec: &FlowSpec,
    threads: u32,
    think: Duration,
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
                        Some(_) => {
                            lite.malloc(size, &name, &opts(vec![holder], namespace)).map(Some).map_err(err("LT_malloc"))
                        }
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
                    let t0 =
                        start.lock().unwrap().get_or_insert_with(|| (Instant::now(), std::time::SystemTime::now())).0;
                    let mut mine = Vec::new();
                    let mut began = Instant::now();
                    while began - t0 < limit {
                        match (lmr, op.lmr_op()) {
                            (Some(lmr), Some(lmr_op)) => rw(lmr, lmr_op, input).map_err(err(op_failed))?,
                            _ => rpc_once(lite, spec, input, output)?,
                        }
                        let end = Instant::now();
                        mine.push((nanos(end - t0), nanos(end - began)));
                        began = if think.is_zero() {
                            end
                        } else {
                            std::thread::sleep(think);
                            Instant::now()
                        };
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
fn flow_procs(namespace: u32, spec: &FlowSpec, workers: Workers, limit: Duration) -> Res<(Option<FlowStart>, Samples)> {
    use std::io::Read;
    let Workers { threads, procs, think } = workers;
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
            let outcome = flow_threads(namespace, spec, threads, think, limit, Some(clock)).map(|(_, samples)| samples);
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

#[cfg(test)]
mod tests {
    use super::*;

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
