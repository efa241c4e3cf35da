//! RPC checks run inside the guests: a server that verifies what it receives and
//! answers with checksummed data, clients that hammer it from several threads,
//! one-way messages, multicast, and hostile arguments.
//!
//! Request format: [reply length u64][seed u64][payload]; the payload and the reply
//! are random streams of `seed` and `seed + 1`, so both sides check every byte.

use crate::Checks;
use lite::uapi::*;
use lite::{Error, Lite, RpcStat};
use lite_stats::Rng;
use nix::errno::Errno;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);

fn fill(buf: &mut [u8], seed: u64) {
    let mut rng = Rng::new(seed);
    for chunk in buf.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
    }
}

fn pattern_ok(buf: &[u8], seed: u64) -> bool {
    let mut want = vec![0u8; buf.len()];
    fill(&mut want, seed);
    want == buf
}

/// Builds a request of `size` bytes. From 16 bytes on, its first 8 ask for `reply`
/// bytes and the next 8 seed the pattern of the rest and of the reply; a shorter
/// request is all pattern, and rpc-serve echoes it, as it does the kernel caller's.
fn request(size: usize, reply: usize, seed: u64) -> Vec<u8> {
    let mut req = vec![0u8; size];
    if size < 16 {
        fill(&mut req, seed);
        return req;
    }
    req[..8].copy_from_slice(&(reply as u64).to_le_bytes());
    req[8..16].copy_from_slice(&seed.to_le_bytes());
    fill(&mut req[16..], seed);
    req
}

static CALLS: AtomicU64 = AtomicU64::new(0);
static MESSAGES: AtomicU64 = AtomicU64::new(0);
static BAD: AtomicU64 = AtomicU64::new(0);

fn served() -> std::process::ExitCode {
    let bad = BAD.load(Ordering::Relaxed);
    println!(
        "served {} calls, {} messages, {bad} corrupt",
        CALLS.load(Ordering::Relaxed),
        MESSAGES.load(Ordering::Relaxed)
    );
    let _ = std::io::stdout().flush();
    if bad == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// Serves `id` from `threads` threads: checks each request, replies with the
/// asked-for pattern, counts one-way messages; takes `delay` over each. Prints
/// `ready`; with `limit`, exits after that many requests and messages; exits at EOF
/// on stdin too.
pub(crate) fn serve(lite: &Lite, id: u32, threads: u32, delay: Duration, limit: Option<u64>) -> std::process::ExitCode {
    if let Err(e) = lite.register_rpc(id) {
        eprintln!("rpc-serve: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(if served() == std::process::ExitCode::SUCCESS { 0 } else { 1 });
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    let failed = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(|| serve_requests(lite, id, delay, limit))).collect();
        workers.into_iter().any(|w| !matches!(w.join(), Ok(true)))
    });
    if failed {
        return std::process::ExitCode::FAILURE;
    }
    served()
}

/// One serving thread; false when receiving failed.
fn serve_requests(lite: &Lite, id: u32, delay: Duration, limit: Option<u64>) -> bool {
    let mut buf = vec![0u8; LITE_RPC_MAX_MSG as usize];
    let mut reply = Vec::new();
    let mut pending: Option<(lite::ReplyToken, usize)> = None;
    loop {
        if limit.is_some_and(|l| CALLS.load(Ordering::Relaxed) + MESSAGES.load(Ordering::Relaxed) >= l) {
            break;
        }
        let got = match pending.take() {
            Some((token, len)) => match lite.reply_and_recv(token, &reply[..len], id, &mut buf, TIMEOUT) {
                // The caller's node went away: its reply is lost, serving goes on.
                Err(e @ (Error::NodeDown(_) | Error::Sys { .. })) => {
                    eprintln!("rpc-serve: reply failed: {e}");
                    lite.recv_rpc(id, &mut buf, TIMEOUT)
                }
                other => other,
            },
            None => lite.recv_rpc(id, &mut buf, TIMEOUT),
        };
        let incoming = match got {
            Ok(i) => i,
            Err(Error::Timeout) => continue,
            Err(e) => {
                eprintln!("rpc-serve: {e}");
                return false;
            }
        };
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let body = &buf[..incoming.len];
        let (want, seed) = if body.len() >= 16 {
            let want = u64::from_le_bytes(body[..8].try_into().unwrap_or_default()) as usize;
            let seed = u64::from_le_bytes(body[8..16].try_into().unwrap_or_default());
            if !pattern_ok(&body[16..], seed) {
                BAD.fetch_add(1, Ordering::Relaxed);
                eprintln!("rpc-serve: corrupt request from node {} ({} bytes)", incoming.node, body.len());
            }
            (want, seed)
        } else {
            (body.len(), 0)
        };
        match incoming.reply {
            None => {
                MESSAGES.fetch_add(1, Ordering::Relaxed);
            }
            Some(token) => {
                CALLS.fetch_add(1, Ordering::Relaxed);
                if body.len() >= 16 {
                    reply.resize(want.min(LITE_RPC_MAX_MSG as usize), 0);
                    fill(&mut reply, seed + 1);
                } else {
                    reply.clear();
                    reply.extend_from_slice(body);
                }
                pending = Some((token, reply.len()));
            }
        }
    }
    if let Some((token, len)) = pending {
        let _ = lite.reply_rpc(token, &reply[..len]);
    }
    true
}

pub(crate) struct CallArgs {
    pub(crate) node: u32,
    pub(crate) id: u32,
    pub(crate) count: u64,
    pub(crate) threads: u32,
    pub(crate) size: usize,
    pub(crate) reply: usize,
    pub(crate) oneway: bool,
    pub(crate) expect_error: Option<Errno>,
    pub(crate) timeout: Duration,
    /// Issue the calls from the kernel (LITE_IOC_RPC_BENCH) instead.
    pub(crate) kernel_caller: bool,
    /// The server echoes: every reply is its request (`reply` is the buffer's size).
    pub(crate) echo: bool,
}

/// Calls (or sends to) `id` at `node` from `threads` threads, `count` times each,
/// checking every reply; prints a JSON summary line.
pub(crate) fn call(lite: &Lite, a: &CallArgs) -> std::process::ExitCode {
    if a.kernel_caller {
        return kernel_call(lite, a);
    }
    let echoed = a.echo || a.size < 16;
    let phases_before = lite.rpc_stat().ok();
    let failures = AtomicU64::new(0);
    let first_error = std::sync::Mutex::new(None::<String>);
    let crossings_before = lite.crossings();
    let start = Instant::now();
    let latencies = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..a.threads {
            let (failures, first_error, latencies) = (&failures, &first_error, &latencies);
            s.spawn(move || {
                let mut out = vec![0u8; a.reply];
                let mut mine = Vec::new();
                for i in 0..a.count {
                    let seed = (u64::from(a.node) << 48) ^ (u64::from(t) << 32) ^ (i * 2 + 7);
                    let req = request(a.size, a.reply, seed);
                    let began = Instant::now();
                    let result = if a.oneway {
                        lite.send(a.node, a.id, &req, a.timeout).map(|()| 0)
                    } else {
                        lite.rpc(a.node, a.id, &req, &mut out, a.timeout)
                    };
                    mine.push(began.elapsed().as_nanos() as u64);
                    let problem = match (result, a.expect_error) {
                        (Ok(len), None) if echoed && (a.oneway || out.get(..len) == Some(&req[..])) => None,
                        (Ok(len), None)
                            if !echoed && (a.oneway || (len == a.reply && pattern_ok(&out[..len], seed + 1))) =>
                        {
                            None
                        }
                        (Ok(len), None) => Some(format!("reply of {len} bytes (want {}) or corrupt", a.reply)),
                        (Ok(_), Some(want)) => Some(format!("succeeded, want {want}")),
                        (Err(e), Some(want)) if e.errno() == want => None,
                        (Err(e), _) => Some(format!("{e} ({})", e.errno())),
                    };
                    if let Some(p) = problem {
                        failures.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(p);
                    }
                }
                latencies.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
            });
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let calls = a.count * u64::from(a.threads);
    let mut lat = latencies.into_inner().unwrap_or_else(|e| e.into_inner());
    lat.sort_unstable();
    let pct = |p: f64| lite_stats::percentile(&lat, p);
    let failed = failures.load(Ordering::Relaxed);
    let crossings = lite.crossings() - crossings_before;
    let phases = phases_json(phases_before, lite.rpc_stat().ok(), 0, &lat);
    let summary = serde_json::json!({
        "calls": calls, "failed": failed, "seconds": elapsed,
        "calls_per_s": calls as f64 / elapsed.max(1e-9),
        "p50_ns": pct(50.0), "p99_ns": pct(99.0),
        "crossings_per_call": crossings as f64 / calls.max(1) as f64,
        "phases": phases,
        "first_error": first_error.into_inner().unwrap_or_else(|e| e.into_inner()),
    });
    println!("{summary}");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// The kernel's own caller: `count` calls of `size` bytes (echoed by rpc-serve
/// when under 16 bytes) into a `reply`-byte kernel buffer.
fn kernel_call(lite: &Lite, a: &CallArgs) -> std::process::ExitCode {
    let phases_before = lite.rpc_stat().ok();
    match lite.kernel_rpc_bench(a.node, a.id, a.count as u32, a.size, a.reply, a.timeout) {
        Ok(lat) => {
            let mut ns: Vec<u64> = lat.iter().map(|d| d.as_nanos() as u64).collect();
            ns.sort_unstable();
            let pct = |p: f64| lite_stats::percentile(&ns, p);
            let phases = phases_json(phases_before, lite.rpc_stat().ok(), 1, &ns);
            println!(
                "{}",
                serde_json::json!({"calls": ns.len(), "failed": 0, "p50_ns": pct(50.0), "p99_ns": pct(99.0),
                                   "phases": phases})
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}", serde_json::json!({"calls": a.count, "failed": a.count, "first_error": e.to_string()}));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The kernel's account of the calls `caller` (0: user space, 1: the kernel) made
/// between two snapshots of the node's RPC statistics, each phase's mean per call
/// (ns), beside the mean of `latencies` as the caller timed them: `outside_ns` is
/// what the kernel did not see (crossings, the caller's own wait on its slot).
/// Null without both snapshots or without an answered call.
fn phases_json(before: Option<RpcStat>, after: Option<RpcStat>, caller: usize, latencies: &[u64]) -> serde_json::Value {
    let (Some(before), Some(after)) = (before, after) else {
        return serde_json::Value::Null;
    };
    let (b, n) = (&before.call_phases[caller], &after.call_phases[caller]);
    let calls = n.calls.saturating_sub(b.calls);
    if calls == 0 || latencies.is_empty() {
        return serde_json::Value::Null;
    }
    let per_call = |now: Duration, was: Duration| now.saturating_sub(was).as_nanos() as f64 / calls as f64;
    let woken = n.woken.saturating_sub(b.woken);
    let wakeup_per_call = per_call(n.wakeup, b.wakeup);
    let inside = [
        per_call(n.pin, b.pin),
        per_call(n.register, b.register),
        per_call(n.stage, b.stage),
        per_call(n.round_trip, b.round_trip),
        per_call(n.publish, b.publish),
        wakeup_per_call,
    ];
    let mean = latencies.iter().sum::<u64>() as f64 / latencies.len() as f64;
    serde_json::json!({
        "calls": calls, "mean_ns": mean,
        "pin_ns": inside[0], "register_ns": inside[1], "stage_ns": inside[2],
        "round_trip_ns": inside[3], "publish_ns": inside[4],
        "release_ns": per_call(n.release, b.release),
        "woken_share": woken as f64 / calls as f64, "wakeup_ns": wakeup_per_call,
        "outside_ns": mean - inside.iter().sum::<f64>(),
    })
}

/// Multicast to `nodes`: prints each node's outcome as `node: ok|ERRNO`.
pub(crate) fn multicast(lite: &Lite, nodes: &[u32], id: u32, timeout: Duration) -> std::process::ExitCode {
    let req = request(64, 256, 99);
    let mut outs = vec![vec![0u8; 256]; nodes.len()];
    let results = lite.multicast_rpc(nodes, id, &req, &mut outs, timeout);
    for ((node, result), out) in nodes.iter().zip(results).zip(outs.iter()) {
        match result {
            Ok(len) if len == 256 && pattern_ok(&out[..len], 100) => println!("{node}: ok"),
            Ok(len) => println!("{node}: corrupt ({len} bytes)"),
            Err(e) => println!("{node}: {}", e.errno()),
        }
    }
    std::process::ExitCode::SUCCESS
}

/// Argument checking of the RPC ioctls. `node` runs a server of `id`.
pub(crate) fn hostile(lite: &Lite, node: u32, id: u32) -> Checks {
    let mut c = Checks { failed: 0, passed: 0 };
    const KERNEL: u64 = 0xffff_8880_0000_0000;
    let mut out = vec![0u8; 4096];
    let input = request(64, 64, 1);
    let call = |arg: &mut LiteRpcCall| lite.raw_ioctl(LITE_IOC_RPC_CALL, arg as *mut _ as usize);
    let good = LiteRpcCall {
        node,
        id,
        input: input.as_ptr() as u64,
        input_len: input.len() as u64,
        output: out.as_mut_ptr() as u64,
        output_len: 4096,
        timeout_ms: 10_000,
        slot: 0,
        ..Default::default()
    };
    let cases: Vec<(&str, LiteRpcCall, Errno)> = vec![
        ("id 0", LiteRpcCall { id: 0, ..good }, Errno::EINVAL),
        ("slot out of range", LiteRpcCall { slot: LITE_SLOTS, ..good }, Errno::EINVAL),
        ("timeout 0", LiteRpcCall { timeout_ms: 0, ..good }, Errno::EINVAL),
        ("timeout too long", LiteRpcCall { timeout_ms: LITE_RPC_MAX_TIMEOUT_MS + 1, ..good }, Errno::EINVAL),
        ("unknown flags", LiteRpcCall { flags: 2, ..good }, Errno::EINVAL),
        ("reserved", LiteRpcCall { reserved: 1, ..good }, Errno::EINVAL),
        ("oneway with output", LiteRpcCall { flags: LITE_RPC_ONEWAY, ..good }, Errno::EINVAL),
        ("input too large", LiteRpcCall { input_len: LITE_RPC_MAX_MSG + 1, ..good }, Errno::EMSGSIZE),
        ("output too large", LiteRpcCall { output_len: LITE_RPC_MAX_MSG + 1, ..good }, Errno::EMSGSIZE),
        ("input in kernel space", LiteRpcCall { input: KERNEL, ..good }, Errno::EFAULT),
        ("output in kernel space", LiteRpcCall { output: KERNEL, ..good }, Errno::EFAULT),
        ("output unmapped", LiteRpcCall { output: 0x1000, ..good }, Errno::EFAULT),
        ("input overflows", LiteRpcCall { input: u64::MAX - 8, input_len: 64, ..good }, Errno::EFAULT),
        ("unknown node", LiteRpcCall { node: 15, ..good }, Errno::ENOENT),
        ("unknown id", LiteRpcCall { id: 0xDEAD, ..good }, Errno::ECONNREFUSED),
    ];
    for (what, mut arg, want) in cases {
        c.expect(what, call(&mut arg), Err(want));
    }
    // A reply larger than the output buffer: the call completes with EOVERFLOW and
    // the reply's true size.
    let big = request(64, 8192, 5);
    match lite.rpc(node, id, &big, &mut out, Duration::from_secs(30)) {
        Err(Error::BufferTooSmall { size: 8192, capacity: 4096 }) => c.passed += 1,
        other => c.fail(&format!("reply larger than the buffer: got {other:?}, want BufferTooSmall 8192/4096")),
    }
    // A slot in use is EBUSY: post a slow call on slot 1 then reuse it... the server
    // answers fast, so check the wait ioctl's argument checks instead.
    let mut w = LiteWait { slot: LITE_SLOTS, reserved: 0 };
    c.expect(
        "wait on a slot out of range",
        lite.raw_ioctl(LITE_IOC_WAIT, &mut w as *mut _ as usize),
        Err(Errno::EINVAL),
    );
    let mut w = LiteWait { slot: 2, reserved: 0 };
    c.expect("wait on an idle slot", lite.raw_ioctl(LITE_IOC_WAIT, &mut w as *mut _ as usize), Ok(()));
    let mut r = LiteRpcRecv { id, timeout_ms: 10, ..Default::default() };
    c.expect(
        "receive for an id not served",
        lite.raw_ioctl(LITE_IOC_RPC_RECV, &mut r as *mut _ as usize),
        Err(Errno::ENOENT),
    );
    let mut r = LiteRpcReply { token: 12345, buf: 0, len: 0 };
    c.expect(
        "reply with an unknown token",
        lite.raw_ioctl(LITE_IOC_RPC_REPLY, &mut r as *mut _ as usize),
        Err(Errno::EBADF),
    );
    let mut reg = LiteRpcId { id: 0, reserved: 0 };
    c.expect("register id 0", lite.raw_ioctl(LITE_IOC_RPC_REGISTER, &mut reg as *mut _ as usize), Err(Errno::EINVAL));
    let mut reg = LiteRpcId { id: 77, reserved: 1 };
    c.expect(
        "register with reserved set",
        lite.raw_ioctl(LITE_IOC_RPC_REGISTER, &mut reg as *mut _ as usize),
        Err(Errno::EINVAL),
    );
    let mut reg = LiteRpcId { id: 77, reserved: 0 };
    c.expect("register 77", lite.raw_ioctl(LITE_IOC_RPC_REGISTER, &mut reg as *mut _ as usize), Ok(()));
    c.expect(
        "register 77 twice",
        lite.raw_ioctl(LITE_IOC_RPC_REGISTER, &mut reg as *mut _ as usize),
        Err(Errno::EEXIST),
    );
    let mut small = [0u8; 4];
    let mut r =
        LiteRpcRecv { id: 77, timeout_ms: 10, buf: small.as_mut_ptr() as u64, buf_len: 4, ..Default::default() };
    c.expect(
        "receive with nothing queued",
        lite.raw_ioctl(LITE_IOC_RPC_RECV, &mut r as *mut _ as usize),
        Err(Errno::ETIMEDOUT),
    );
    c.expect("unregister 77", lite.raw_ioctl(LITE_IOC_RPC_UNREGISTER, &mut reg as *mut _ as usize), Ok(()));
    c.expect(
        "unregister 77 again",
        lite.raw_ioctl(LITE_IOC_RPC_UNREGISTER, &mut reg as *mut _ as usize),
        Err(Errno::ENOENT),
    );
    let mut b = LiteRpcBench { node, id, count: 0, timeout_ms: 1000, ..Default::default() };
    c.expect(
        "kernel bench of 0 calls",
        lite.raw_ioctl(LITE_IOC_RPC_BENCH, &mut b as *mut _ as usize),
        Err(Errno::EINVAL),
    );
    // The in-kernel caller: 8 B requests come back echoed.
    match lite.kernel_rpc_bench(node, id, 3, 8, 4096, Duration::from_secs(30)) {
        Ok(times) if times.len() == 3 => c.passed += 1,
        other => c.fail(&format!("kernel caller: got {other:?}, want 3 timed calls")),
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_request_is_all_pattern_and_a_long_one_asks_for_its_reply() {
        let short = request(8, 4096, 5);
        let mut want = vec![0u8; 8];
        fill(&mut want, 5);
        assert_eq!(short, want);
        let long = request(40, 4096, 5);
        assert_eq!(long.len(), 40);
        assert_eq!(u64::from_le_bytes(long[..8].try_into().unwrap()), 4096);
        assert_eq!(u64::from_le_bytes(long[8..16].try_into().unwrap()), 5);
        assert!(pattern_ok(&long[16..], 5));
    }
}
