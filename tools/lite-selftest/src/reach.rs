//! `reach`: what a peer's NIC lets through (`LITE_IOC_REACH`, debug test builds
//! only). Answers one line per stdin command, so that a test drives two nodes:
//!
//!   malloc SIZE HOLDER          -> `lmr I` (an LMR of SIZE held by node HOLDER)
//!   extent I K                  -> `extent NODE ADDR LEN RKEY` (extent K of LMR I)
//!   fill I BYTE / check I BYTE  -> `ok`, or `differ OFFSET` (every byte of LMR I)
//!   free I                      -> `ok` or the errno's name
//!   canary                      -> `canary ADDR` (a page outside every LMR, held until exit)
//!   read NODE ADDR RKEY LEN     -> `ok HEX` or the errno's name (raw RDMA READ)
//!   write NODE ADDR RKEY LEN BYTE -> `ok` or the errno's name (raw RDMA WRITE)
//!   atomic NODE ADDR RKEY       -> `ok OLD` or the errno's name (raw fetch-and-add 1)
//!   hold-replies MS             -> `ok`: this node's kernel holds each RPC reply MS ms
//!                                  once its call slot is free (0: no more)
//!
//! Numbers are decimal or 0x-prefixed hex; the answer to a malformed line is
//! `usage: ...`. Exits on EOF.

use lite::uapi::*;
use lite::{Lite, Lmr, MallocOptions};
use std::io::{BufRead, Write};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn number(word: Option<&str>) -> Option<u64> {
    let word = word?;
    match word.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => word.parse().ok(),
    }
}

/// Posts `req` and prints `ok` plus `data` (of the answer), or the errno.
fn raw(lite: &Lite, mut req: LiteReach, data: impl Fn(&LiteReach) -> String) {
    match lite.raw_ioctl(LITE_IOC_REACH, &mut req as *mut LiteReach as usize) {
        Ok(_) => say(format!("ok {}", data(&req)).trim_end()),
        Err(e) => say(&format!("{e:?}")),
    }
}

fn extent(lite: &Lite, lmr: &Lmr<'_>, index: u32) -> String {
    let mut req = LiteReach { op: LITE_REACH_EXTENT, lh: lmr.lh(), index, ..Default::default() };
    match lite.raw_ioctl(LITE_IOC_REACH, &mut req as *mut LiteReach as usize) {
        Ok(_) => format!("extent {} {:#x} {} {:#x}", req.node, req.addr, req.len, req.rkey),
        Err(e) => format!("{e:?}"),
    }
}

/// Reads all of `lmr` and names the first byte that is not `byte`.
fn check(lmr: &Lmr<'_>, byte: u8) -> String {
    let mut buf = vec![0u8; lmr.size() as usize];
    if let Err(e) = lmr.read(0, &mut buf) {
        return format!("{:?}", e.errno());
    }
    match buf.iter().position(|&b| b != byte) {
        None => "ok".into(),
        Some(at) => format!("differ {at}"),
    }
}

/// One command line; `None` when it is malformed.
fn command<'a>(lite: &'a Lite, lmrs: &mut Vec<Option<Lmr<'a>>>, line: &str) -> Option<()> {
    let mut words = line.split_whitespace();
    let verb = words.next()?;
    let mut next = || number(words.next());
    match verb {
        "malloc" => {
            let (size, holder) = (next()?, next()?);
            let opts = MallocOptions { holders: vec![u32::try_from(holder).ok()?], ..Default::default() };
            let name = format!("reach-{}-{}", std::process::id(), lmrs.len());
            match lite.malloc(size, &name, &opts) {
                Ok(lmr) => {
                    lmrs.push(Some(lmr));
                    say(&format!("lmr {}", lmrs.len() - 1));
                }
                Err(e) => say(&format!("{:?}", e.errno())),
            }
        }
        "extent" | "fill" | "check" | "free" => {
            let slot = lmrs.get_mut(usize::try_from(next()?).ok()?)?;
            let arg = next();
            match (verb, slot.as_ref()) {
                (_, None) => say("EBADF"),
                ("extent", Some(lmr)) => say(&extent(lite, lmr, u32::try_from(arg?).ok()?)),
                ("fill", Some(lmr)) => match lmr.memset(0, lmr.size(), u8::try_from(arg?).ok()?) {
                    Ok(()) => say("ok"),
                    Err(e) => say(&format!("{:?}", e.errno())),
                },
                ("check", Some(lmr)) => say(&check(lmr, u8::try_from(arg?).ok()?)),
                _ => match slot.take().map(Lmr::free) {
                    Some(Err(e)) => say(&format!("{:?}", e.errno())),
                    _ => say("ok"),
                },
            }
        }
        "canary" => raw(lite, LiteReach { op: LITE_REACH_CANARY, ..Default::default() }, |r| format!("{:#x}", r.addr)),
        "hold-replies" => {
            let len = u32::try_from(next()?).ok()?;
            raw(lite, LiteReach { op: LITE_REACH_HOLD_REPLIES, len, ..Default::default() }, |_| String::new());
        }
        "read" | "write" | "atomic" => {
            let node = u32::try_from(next()?).ok()?;
            let (addr, rkey) = (next()?, u32::try_from(next()?).ok()?);
            let mut req = LiteReach { node, addr, rkey, ..Default::default() };
            match verb {
                "read" => {
                    req.op = LITE_REACH_READ;
                    req.len = u32::try_from(next()?).ok()?;
                    let len = (req.len as usize).min(LITE_REACH_DATA);
                    raw(lite, req, |r| r.data[..len].iter().map(|b| format!("{b:02x}")).collect());
                }
                "write" => {
                    req.op = LITE_REACH_WRITE;
                    req.len = u32::try_from(next()?).ok()?;
                    req.data = [u8::try_from(next()?).ok()?; LITE_REACH_DATA];
                    raw(lite, req, |_| String::new());
                }
                _ => {
                    req.op = LITE_REACH_ATOMIC;
                    raw(lite, req, |r| {
                        let mut old = [0u8; 8];
                        old.copy_from_slice(&r.data[..8]);
                        u64::from_ne_bytes(old).to_string()
                    });
                }
            }
        }
        _ => return None,
    }
    Some(())
}

pub fn run(lite: &Lite) -> std::process::ExitCode {
    let mut lmrs = Vec::new();
    say("ready");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if command(lite, &mut lmrs, &line).is_none() {
            say("usage: malloc SIZE HOLDER | extent I K | fill I BYTE | check I BYTE | free I | canary | \
                 read NODE ADDR RKEY LEN | write NODE ADDR RKEY LEN BYTE | atomic NODE ADDR RKEY | hold-replies MS");
        }
    }
    std::process::ExitCode::SUCCESS
}
