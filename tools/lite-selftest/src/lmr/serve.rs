//! `lmr-serve`: allocate (or register) an LMR holding the pattern, free it on command.

use super::pattern::{fill_pattern, write_pattern};
use super::{access, say, why, GrantArg};
use lite::{Lite, Lmr, MallocOptions, Perm};
use std::io::BufRead;
use std::process::ExitCode;

/// The `free` command of lmr-serve: prints `freed`, or the errno's name.
fn free_and_report(lmr: Lmr<'_>) -> ExitCode {
    match lmr.free() {
        Ok(()) => {
            say("freed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&format!("{:?}", e.errno()));
            eprintln!("lmr-serve: free: {}", why(&e));
            ExitCode::FAILURE
        }
    }
}

/// `lmr-serve --register`: the pattern is written into a buffer of this process, which
/// then becomes the LMR; `zero` and `check` act on that buffer directly (no LITE call),
/// to show that other nodes read and write this very memory.
pub fn serve_registered(lite: &Lite, name: &str, size: u64, perm: Perm) -> ExitCode {
    let mut buf = vec![0u8; size as usize];
    fill_pattern(name, 0, &mut buf);
    let base = buf.as_mut_ptr();
    let lmr = match lite.register(&mut buf, name, perm, 0) {
        Ok(lmr) => lmr,
        Err(e) => {
            eprintln!("lmr-serve: register {name}: {}", why(&e));
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: `buf` is borrowed by `lmr` for the kernel; this process touches it only
    // between the commands of the test driver, while no remote access is running,
    // which is the contract of LT_register (the memory is shared with the cluster).
    let own = unsafe { std::slice::from_raw_parts_mut(base, size as usize) };
    say("ready");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "zero" => {
                own.fill(0);
                say("zeroed");
            }
            "check" => {
                let mut want = vec![0u8; own.len()];
                fill_pattern(name, 0, &mut want);
                say(if own[..] == want[..] { "pattern ok" } else { "pattern bad" });
            }
            "free" => return free_and_report(lmr),
            "" => {}
            other => eprintln!("lmr-serve: unknown command {other:?} (`zero`, `check`, `free`, or EOF)"),
        }
    }
    std::mem::forget(lmr);
    ExitCode::SUCCESS
}

/// `lmr-serve`.
pub fn serve(
    lite: &Lite,
    name: &str,
    size: u64,
    holders: &[u32],
    perm: Perm,
    grants: &[GrantArg],
    zeroed: bool,
) -> ExitCode {
    let opts = MallocOptions { holders: holders.to_vec(), perm, namespace: 0 };
    let lmr = match lite.malloc(size, name, &opts) {
        Ok(lmr) => lmr,
        Err(e) => {
            eprintln!("lmr-serve: malloc {name}: {}", why(&e));
            return ExitCode::FAILURE;
        }
    };
    for g in grants {
        if let Err(e) = lmr.grant(g.node, g.perm) {
            eprintln!("lmr-serve: grant {} to {:?}: {}", g.perm, g.node, why(&e));
            return ExitCode::FAILURE;
        }
    }
    let filled = if zeroed { lmr.memset(0, size, 0) } else { write_pattern(&lmr, name) };
    if let Err(e) = filled {
        eprintln!("lmr-serve: filling it: {}", why(&e));
        return ExitCode::FAILURE;
    }
    say("ready");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "free" => return free_and_report(lmr),
            "" => {}
            command if access(&lmr, command) => {}
            other => {
                eprintln!("lmr-serve: unknown command {other:?} (`free`, `read`, `write`, `atomic`, or EOF to exit)")
            }
        }
    }
    // EOF: exit without freeing or unmapping; the kernel must release the LMR.
    std::mem::forget(lmr);
    ExitCode::SUCCESS
}
