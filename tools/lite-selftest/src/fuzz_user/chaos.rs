//! What a `fuzz-user` worker does to its own process besides calling: scribbling
//! on the shared page the kernel publishes results in, and forking a child that
//! calls through the same open file and is killed (SIGKILL) at a random moment,
//! maybe in the middle of a call.

use lite::Lite;
use lite_stats::Rng;
use nix::errno::Errno;
use nix::sys::mman::{mmap, munmap, MapFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::calls::{PAGE, RW};

/// How long a killed child may take to leave the kernel before the worker goes
/// on without it (it is reaped later).
const REAP_WAIT: Duration = Duration::from_secs(2);

/// Writes random words at random places of another mapping of `lite`'s shared
/// page: the kernel must trust nothing it reads back from there.
pub(super) fn scribble(lite: &Lite, rng: &mut Rng) -> Result<(), Errno> {
    let len = NonZeroUsize::new(PAGE).ok_or(Errno::EINVAL)?;
    // SAFETY: the descriptor stays open while `lite` lives, which outlasts this call.
    let fd = unsafe { BorrowedFd::borrow_raw(lite.as_raw_fd()) };
    // SAFETY: a fresh shared mapping of the device's page, only written through
    // volatile stores below and unmapped before returning.
    let page = unsafe { mmap(None, len, RW, MapFlags::MAP_SHARED, fd, 0) }?;
    for _ in 0..1 + rng.below(16) {
        let at = rng.below(PAGE as u64 / 8) as usize * 8;
        // SAFETY: an aligned word inside the page just mapped.
        unsafe { (page.as_ptr() as *mut u64).byte_add(at).write_volatile(rng.next_u64()) };
    }
    // SAFETY: the mapping made above, no longer used.
    unsafe { munmap(page, PAGE) }
}

/// Forks a child that runs `calls` (through the parent's open /dev/lite) and
/// exits; kills it after `kill_after` unless it ended first. Returns what became
/// of it: "exited", "killed", or "killed, still in the kernel" (reaped by a later
/// call of `reap`).
pub(super) fn fork_and_kill(
    kill_after: Duration,
    zombies: &mut Vec<Pid>,
    calls: impl FnOnce(),
) -> Result<&'static str, Errno> {
    // SAFETY: the worker is single-threaded; the child only runs `calls` and exits
    // without unwinding into the parent's state.
    match unsafe { fork() }? {
        ForkResult::Child => {
            calls();
            // SAFETY: ends the child at once, without running the parent's destructors.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            std::thread::sleep(kill_after);
            if let Ok(WaitStatus::Exited(..)) = waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                return Ok("exited");
            }
            kill(child, Signal::SIGKILL)?;
            let killed = Instant::now();
            while killed.elapsed() < REAP_WAIT {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(5)),
                    _ => return Ok("killed"),
                }
            }
            zombies.push(child);
            Ok("killed, still in the kernel")
        }
    }
}

/// Reaps the children that have left the kernel since.
pub(super) fn reap(zombies: &mut Vec<Pid>) {
    zombies.retain(|&pid| matches!(waitpid(pid, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive)));
}
