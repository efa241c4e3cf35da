//! The LMR subcommands that move data: integrity of a large LMR, small reads from
//! many threads, a server and a client for cross-process and cross-node scenarios,
//! and many LMRs left to the kernel's cleanup at exit. The argument checks are in
//! `lmr_hostile.rs`.
//!
//! `args.rs` parses the `--grant` and errno arguments, `pattern.rs` holds the
//! lmr-serve pattern and `stream.rs` the random data of `integrity.rs`;
//! `serve.rs`, `client.rs`, `many.rs` and `small_reads.rs` hold their subcommands.
//! This file has the helpers they share.

mod args;
mod client;
mod integrity;
mod many;
mod pattern;
mod serve;
mod small_reads;
mod stream;

pub use args::{parse_errno, GrantArg};
pub use client::{client, Client};
pub use integrity::{integrity, Integrity, DEFAULT_PIECE};
pub use many::{many, Many};
pub use serve::{serve, serve_registered};
pub use small_reads::{small_reads, SmallReads};

use std::io::Write;

/// An error with its errno name first, for scripts that look for it.
fn why(e: &lite::Error) -> String {
    format!("{:?}: {e}", e.errno())
}

/// The first bytes of the first mismatch of two equally long slices, and how many differ.
fn describe_mismatch(offset: u64, got: &[u8], want: &[u8]) -> Option<String> {
    let first = got.iter().zip(want).position(|(g, w)| g != w)?;
    let count = got.iter().zip(want).filter(|(g, w)| g != w).count();
    let end = (first + 8).min(got.len());
    Some(format!(
        "{count} byte(s) differ, first at offset {}: got {:02x?}, want {:02x?}",
        offset + first as u64,
        &got[first..end],
        &want[first..end]
    ))
}

/// One access through `lmr` on a stdin command of a holding subcommand: `read` or
/// `write` of the first page, `atomic` (fetch-and-add 1 on the first word).
/// Prints `ok` or the errno's name; false for any other command.
fn access(lmr: &lite::Lmr<'_>, command: &str) -> bool {
    let mut page = vec![0u8; lmr.size().min(4096) as usize];
    let done = match command {
        "read" => lmr.read(0, &mut page),
        "write" => lmr.read(0, &mut page).and_then(|()| lmr.write(0, &page)),
        "atomic" => lmr.fetch_add(0, 1).map(drop),
        _ => return false,
    };
    match done {
        Ok(()) => say("ok"),
        Err(e) => say(&format!("{:?}", e.errno())),
    }
    true
}

/// Prints a protocol line and flushes it (stdout is a pipe to the test driver).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatches_name_the_first_offset() {
        assert_eq!(describe_mismatch(100, b"abcd", b"abcd"), None);
        let m = describe_mismatch(100, b"abXdY", b"abcde").unwrap();
        assert!(m.starts_with("2 byte(s) differ, first at offset 102"), "{m}");
    }
}
