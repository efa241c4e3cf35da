//! `lmr-client`: map an LMR, write or check the pattern, and hold the mapping.

use super::pattern::{fill_pattern, write_pattern, PATTERN_PIECE};
use super::{access, describe_mismatch, say};
use lite::{Lite, Lmr, Perm};
use nix::errno::Errno;
use std::io::BufRead;
use std::process::ExitCode;

/// What `lmr-client` was asked to do.
pub struct Client {
    pub name: String,
    pub perm: Perm,
    pub expect_error: Option<Errno>,
    pub check_pattern: bool,
    pub write_pattern: bool,
    pub hold: bool,
}

enum ClientFailure {
    Call { step: &'static str, err: lite::Error },
    Mismatch(String),
}

fn client_steps<'l>(lite: &'l Lite, c: &Client) -> Result<Lmr<'l>, ClientFailure> {
    let lmr = lite.map(&c.name, c.perm, 0).map_err(|err| ClientFailure::Call { step: "map", err })?;
    if c.write_pattern {
        write_pattern(&lmr, &c.name).map_err(|err| ClientFailure::Call { step: "write", err })?;
    }
    if c.check_pattern {
        let mut got = vec![0u8; PATTERN_PIECE.min(lmr.size()) as usize];
        let mut want = got.clone();
        for offset in (0..lmr.size()).step_by(PATTERN_PIECE as usize) {
            let len = (lmr.size() - offset).min(PATTERN_PIECE) as usize;
            lmr.read(offset, &mut got[..len]).map_err(|err| ClientFailure::Call { step: "read", err })?;
            fill_pattern(&c.name, offset, &mut want[..len]);
            if let Some(m) = describe_mismatch(offset, &got[..len], &want[..len]) {
                return Err(ClientFailure::Mismatch(format!("pattern mismatch: {m}")));
            }
        }
    }
    Ok(lmr)
}

/// `lmr-client`: exit 0 when the outcome is the expected one.
pub fn client(lite: &Lite, c: &Client) -> ExitCode {
    let tag = format!("lmr-client: {}", c.name);
    let ok = match (client_steps(lite, c), c.expect_error) {
        (Err(ClientFailure::Call { step, err }), Some(want)) if err.errno() == want => {
            println!("{tag}: {step} failed with {want:?} as expected");
            true
        }
        (Err(ClientFailure::Call { step, err }), _) => {
            println!("{tag}: {step} failed with {:?}: {err}", err.errno());
            false
        }
        (Err(ClientFailure::Mismatch(m)), _) => {
            println!("{tag}: {m}");
            false
        }
        (Ok(_), Some(want)) => {
            println!("{tag}: succeeded, but {want:?} was expected");
            false
        }
        (Ok(lmr), None) if c.hold => {
            hold(&lmr);
            true
        }
        (Ok(lmr), None) => {
            println!("{tag}: ok, mapped {} with {} bytes", c.perm, lmr.size());
            true
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Prints `mapped`, then answers each stdin line `read`, `write` or `atomic` with
/// `ok` or the errno name of that access (see `access`), until EOF.
fn hold(lmr: &Lmr<'_>) {
    say("mapped");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "" => {}
            command if access(lmr, command) => {}
            other => eprintln!("lmr-client: unknown command {other:?} (`read`, `write`, `atomic`, or EOF to exit)"),
        }
    }
}
