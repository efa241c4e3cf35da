//! `serve`: the RPC server of `flow --op rpc`, answering every call with as many
//! bytes as the caller's reply buffer holds.

use crate::harness::{in_threads, open, Progress};
use crate::{err, Res};
use lite::uapi::LITE_RPC_MAX_MSG;
use lite::Lite;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The server's longest sleep in LT_recvRPC: how soon it notices its time is up.
const SERVE_POLL: Duration = Duration::from_secs(1);

/// What the serving threads did, together.
#[derive(Default)]
struct Served {
    calls: AtomicU64,
    messages: AtomicU64,
    failed_replies: AtomicU64,
    request_bytes: AtomicU64,
    reply_bytes: AtomicU64,
}

pub(crate) fn serve(progress: &Progress, id: u32, seconds: Option<f64>, threads: u32) -> Res<Value> {
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
