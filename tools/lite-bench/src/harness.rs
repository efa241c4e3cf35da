//! What every subcommand runs with: progress lines, /dev/lite and LMR options,
//! page-aligned buffers, timing and threads.

use crate::cli::Op;
use crate::{err, Res};
use lite::{Lite, Lmr, MallocOptions, Perm};
use std::time::{Duration, Instant};

pub(crate) struct Progress {
    pub(crate) quiet: bool,
    pub(crate) started: Instant,
}

impl Progress {
    pub(crate) fn say(&self, msg: &str) {
        if !self.quiet {
            eprintln!("lite-bench [{:6.1} s] {msg}", self.started.elapsed().as_secs_f64());
        }
    }
}

/// Opens /dev/lite and returns it with this node's id; warns when `holder` is this node.
pub(crate) fn open(progress: &Progress, holder: Option<u32>) -> Res<(Lite, u32)> {
    let lite = Lite::open().map_err(err("open /dev/lite"))?;
    let me = lite.node_id().map_err(err("node id"))?;
    if holder == Some(me) {
        progress.say(&format!("note: holder {me} is this node: this measures local copies, not RDMA"));
    }
    Ok((lite, me))
}

pub(crate) fn opts(holders: Vec<u32>, namespace: u32) -> MallocOptions {
    MallocOptions { holders, perm: Perm::READ | Perm::WRITE, namespace }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A patterned buffer that starts on a page boundary, as perftest's do: an
/// unaligned one spans one more page, which LITE pins and maps on every call.
pub(crate) struct Buffer {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// A user buffer of `len` bytes with every page touched (zero-copy transfers pin it).
pub(crate) fn buffer(len: u64) -> Res<Buffer> {
    const PAGE: usize = 4096;
    let len = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit in memory"))?;
    let total = len.checked_add(PAGE).ok_or_else(|| format!("{len} bytes do not fit in memory"))?;
    let mut bytes: Vec<u8> = (0..total).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
    let start = bytes.as_mut_ptr().align_offset(PAGE);
    Ok(Buffer { bytes, start, len })
}

pub(crate) fn rw(lmr: &Lmr<'_>, op: Op, buf: &mut [u8]) -> lite::Result<()> {
    match op {
        Op::Write => lmr.write(0, buf),
        Op::Read => lmr.read(0, buf),
    }
}

/// Runs `work` on `threads` threads at once; the first error wins.
pub(crate) fn in_threads(threads: u32, work: &(dyn Fn() -> Res<()> + Sync)) -> Res<()> {
    std::thread::scope(|scope| {
        let running: Vec<_> = (0..threads.max(1)).map(|_| scope.spawn(work)).collect();
        running.into_iter().try_for_each(|t| t.join().map_err(|_| "a benchmark thread panicked".to_string())?)
    })
}
