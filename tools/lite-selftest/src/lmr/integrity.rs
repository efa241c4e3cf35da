//! `lmr-integrity`: write a large LMR piece by piece, read it back and compare, then
//! straddle chunk and node boundaries, memset, memcpy between holders and memmove.

use super::stream::{checksum, Stream};
use super::{describe_mismatch, why};
use lite::uapi::LITE_CHUNK_SIZE;
use lite::{Lite, Lmr, MallocOptions, Perm};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Default `--piece`: 3 MiB + 4099 bytes, so successive pieces start at ever
/// different offsets relative to the 4 MiB chunks and the page-aligned node shares.
pub const DEFAULT_PIECE: u64 = (3 << 20) + 4099;

/// Mismatches reported one by one on stderr; the rest are only counted.
const MAX_REPORTED: usize = 20;

/// Where `size` bytes over `holders` nodes put each node's share, as the module's
/// `region.rs` lays them out (an even, page-aligned share per node): the
/// `(start, len)` of the non-empty shares. Only used to aim at node boundaries; a
/// different layout makes the checks less pointed, not wrong.
fn shares(size: u64, holders: u64) -> Vec<(u64, u64)> {
    let share = size.div_ceil(holders.max(1)).div_ceil(4096) * 4096;
    (0..holders).map(|i| i * share).filter(|&start| start < size).map(|s| (s, share.min(size - s))).collect()
}

/// What `lmr-integrity` was asked to do.
pub struct Integrity {
    pub size: u64,
    pub holders: Vec<u32>,
    pub seed: u64,
    pub piece: u64,
    pub json: bool,
}

/// 16 bytes around a boundary, captured while writing: the model for the
/// straddling accesses.
struct Window {
    start: u64,
    bytes: [u8; 16],
}

struct IntegrityRun<'a, 'l> {
    lmr: &'a Lmr<'l>,
    args: &'a Integrity,
    nodes: Vec<u32>,
    windows: Vec<Window>,
    problems: Vec<String>,
    write_time: Duration,
    read_time: Duration,
}

/// A failed LMR call ends the run (the rest would only repeat it).
type Step = Result<(), String>;

impl IntegrityRun<'_, '_> {
    fn problem(&mut self, what: String) {
        if self.problems.len() < MAX_REPORTED {
            eprintln!("integrity: MISMATCH {what}");
        }
        self.problems.push(what);
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Step {
        self.lmr.read(offset, buf).map_err(|e| format!("read {} bytes at {offset}: {}", buf.len(), why(&e)))
    }

    fn write(&mut self, offset: u64, buf: &[u8]) -> Step {
        self.lmr.write(offset, buf).map_err(|e| format!("write {} bytes at {offset}: {}", buf.len(), why(&e)))
    }

    /// Reads `[offset, offset + want.len())` and records a mismatch with `want`.
    fn compare(&mut self, what: &str, offset: u64, want: &[u8]) -> Step {
        let mut got = vec![0u8; want.len()];
        self.read(offset, &mut got)?;
        if let Some(m) = describe_mismatch(offset, &got, want) {
            self.problem(format!("{what}: {m}"));
        }
        Ok(())
    }

    fn check_stat(&mut self, me: u32) -> Step {
        let stat = self.lmr.stat().map_err(|e| format!("stat: {}", why(&e)))?;
        let mut asked: Vec<u32> = if self.args.holders.is_empty() { vec![me] } else { self.args.holders.clone() };
        asked.sort_unstable();
        asked.dedup();
        // Tiny LMRs may leave the last nodes without a share.
        let all_hold = self.args.size >= asked.len() as u64 * LITE_CHUNK_SIZE;
        let holders_ok = if all_hold {
            stat.holders == asked
        } else {
            !stat.holders.is_empty() && stat.holders.iter().all(|n| asked.contains(n))
        };
        if stat.size != self.args.size || !holders_ok || stat.master_node != me {
            self.problem(format!(
                "stat: size {}, holders {:?}, master {}; asked for {} bytes over {asked:?} from node {me}",
                stat.size, stat.holders, stat.master_node, self.args.size
            ));
        }
        if stat.perm != Perm::READ | Perm::WRITE | Perm::MASTER {
            self.problem(format!("stat: the master handle has permissions {}, not rwm", stat.perm));
        }
        self.nodes = stat.holders;
        Ok(())
    }

    /// A new LMR reads as zeros (the holders zero what they hand out, also from their
    /// zeroed reserve): the first, a middle and the last page of every chunk.
    fn reads_zero(&mut self) -> Step {
        const PAGE: u64 = 4096;
        let zeros = [0u8; PAGE as usize];
        for chunk in (0..self.args.size).step_by(LITE_CHUNK_SIZE as usize) {
            let end = (chunk + LITE_CHUNK_SIZE).min(self.args.size);
            let mut pages = [chunk, chunk + (end - chunk) / 2, end.saturating_sub(PAGE).max(chunk)];
            pages.sort_unstable();
            for (i, &page) in pages.iter().enumerate() {
                if i > 0 && page == pages[i - 1] {
                    continue;
                }
                let len = PAGE.min(self.args.size - page) as usize;
                self.compare("fresh LMR", page, &zeros[..len])?;
            }
        }
        Ok(())
    }

    /// The first few chunk boundaries and the node boundaries, with 8 bytes each side.
    fn choose_windows(&mut self) {
        let size = self.args.size;
        let chunks = (1..=4).map(|k| k * LITE_CHUNK_SIZE);
        let nodes = shares(size, self.nodes.len() as u64).into_iter().skip(1).map(|(start, _)| start);
        let mut starts: Vec<u64> = chunks.chain(nodes).filter(|&b| b >= 8 && b + 8 <= size).map(|b| b - 8).collect();
        starts.sort_unstable();
        starts.dedup();
        self.windows = starts.into_iter().map(|start| Window { start, bytes: [0; 16] }).collect();
    }

    fn capture(&mut self, offset: u64, piece: &[u8]) {
        let end = offset + piece.len() as u64;
        for w in &mut self.windows {
            let (lo, hi) = (w.start.max(offset), (w.start + 16).min(end));
            if lo < hi {
                w.bytes[(lo - w.start) as usize..(hi - w.start) as usize]
                    .copy_from_slice(&piece[(lo - offset) as usize..(hi - offset) as usize]);
            }
        }
    }

    fn pieces(&self) -> impl Iterator<Item = (usize, u64, usize)> {
        let (size, piece) = (self.args.size, self.args.piece);
        (0..size).step_by(piece as usize).enumerate().map(move |(i, off)| (i, off, piece.min(size - off) as usize))
    }

    /// Writes the stream piece by piece; returns each piece's checksum.
    fn write_all(&mut self) -> Result<Vec<u64>, String> {
        let mut stream = Stream::new(self.args.seed);
        let mut buf = vec![0u8; self.args.piece.min(self.args.size) as usize];
        let mut sums = Vec::new();
        let mut progress = Progress::new("write", self.args.size);
        for (_, offset, len) in self.pieces().collect::<Vec<_>>() {
            stream.fill(&mut buf[..len]);
            sums.push(checksum(&buf[..len]));
            self.capture(offset, &buf[..len]);
            let start = Instant::now();
            self.write(offset, &buf[..len])?;
            self.write_time += start.elapsed();
            progress.at(offset + len as u64);
        }
        Ok(sums)
    }

    /// Reads every piece back and compares it with the regenerated stream and the
    /// checksum taken when it was written.
    fn read_all(&mut self, sums: &[u64]) -> Step {
        let mut stream = Stream::new(self.args.seed);
        let len = self.args.piece.min(self.args.size) as usize;
        let (mut want, mut got) = (vec![0u8; len], vec![0u8; len]);
        let mut progress = Progress::new("read", self.args.size);
        for (i, offset, len) in self.pieces().collect::<Vec<_>>() {
            stream.fill(&mut want[..len]);
            let start = Instant::now();
            self.read(offset, &mut got[..len])?;
            self.read_time += start.elapsed();
            let sum = checksum(&got[..len]);
            let differs = describe_mismatch(offset, &got[..len], &want[..len]);
            if sum != sums[i] || differs.is_some() {
                let detail = differs.unwrap_or_else(|| "the bytes match the regenerated data".into());
                self.problem(format!(
                    "piece {i} ({len} bytes at {offset}): checksum {sum:016x}, written {:016x}; {detail}",
                    sums[i]
                ));
            }
            progress.at(offset + len as u64);
        }
        Ok(())
    }

    /// Small reads and writes across each boundary: 2d bytes centred on it and 8
    /// bytes sliding over it, d = 1..=7, checked against the captured window.
    fn straddle(&mut self) -> Step {
        let mut rng = Stream::new(!self.args.seed);
        for w in 0..self.windows.len() {
            let start = self.windows[w].start;
            let boundary = start + 8;
            let accesses: Vec<(u64, usize)> =
                (1..=7).flat_map(|d| [(boundary - d, 2 * d as usize), (boundary - d, 8)]).collect();
            for &(offset, len) in &accesses {
                let want = self.windows[w].bytes[(offset - start) as usize..][..len].to_vec();
                self.compare(&format!("read {len} bytes at {offset} across {boundary}"), offset, &want)?;
            }
            for &(offset, len) in &accesses {
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                self.write(offset, &data)?;
                self.windows[w].bytes[(offset - start) as usize..][..len].copy_from_slice(&data);
                let want = self.windows[w].bytes;
                self.compare(&format!("after writing {len} bytes at {offset} across {boundary}"), start, &want)?;
            }
        }
        Ok(())
    }

    /// Runs `op` on the LMR and checks `[lo, hi)` afterwards against what was there
    /// before, changed by `model`.
    fn modelled(
        &mut self,
        what: &str,
        (lo, hi): (u64, u64),
        op: impl FnOnce(&Lmr<'_>) -> lite::Result<()>,
        model: impl FnOnce(&mut [u8]),
    ) -> Step {
        let mut want = vec![0u8; (hi - lo) as usize];
        self.read(lo, &mut want)?;
        model(&mut want);
        op(self.lmr).map_err(|e| format!("{what}: {}", why(&e)))?;
        self.compare(what, lo, &want)
    }

    fn memset(&mut self) -> Step {
        let size = self.args.size;
        let at = if size >= LITE_CHUNK_SIZE + 8192 { LITE_CHUNK_SIZE - 5000 } else { size / 4 };
        let len = 12_000.min(size - at);
        let window = (at.saturating_sub(16), (at + len + 16).min(size));
        let value = 0xA5;
        let what = format!("memset {len} bytes at {at} to {value:#x}");
        let range = (at - window.0) as usize..(at - window.0 + len) as usize;
        self.modelled(&what, window, |l| l.memset(at, len, value), |w| w[range].fill(value))
    }

    /// Copies `len` bytes from `src` to `dst` within the LMR and checks the
    /// destination (with 16 bytes around it) and that the source is intact.
    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Step {
        let size = self.args.size;
        let what = format!("copy {len} bytes from {src} to {dst}");
        let hull = (dst.min(src).saturating_sub(16), (dst.max(src) + len + 16).min(size));
        if hull.1 - hull.0 <= 2 * len + 64 {
            // Overlapping or adjacent: one window holds both ranges.
            let (s, d) = ((src - hull.0) as usize, (dst - hull.0) as usize);
            return self.modelled(&what, hull, |l| l.memmove(dst, src, len), |w| w.copy_within(s..s + len as usize, d));
        }
        let mut data = vec![0u8; len as usize];
        self.read(src, &mut data)?;
        let window = (dst.saturating_sub(16), (dst + len + 16).min(size));
        let d = (dst - window.0) as usize;
        self.modelled(
            &what,
            window,
            |l| l.memcpy_from(dst, l, src, len),
            |w| w[d..d + data.len()].copy_from_slice(&data),
        )?;
        self.compare(&format!("source of {what}"), src, &data)
    }

    /// From the middle of the first holder's share to the middle of the last one's
    /// (two halves of the LMR on one holder), then overlapping moves both ways
    /// across the first chunk boundary.
    fn copies(&mut self) -> Step {
        let size = self.args.size;
        let parts = shares(size, self.nodes.len() as u64);
        let (from, to) = match parts[..] {
            [_] | [] => ((0, size / 2), (size / 2, size - size / 2)),
            _ => (parts[0], parts[parts.len() - 1]),
        };
        let len = (from.1.min(to.1) / 2).min((1 << 20) + 4099);
        if len > 0 {
            self.copy(to.0 + (to.1 - len) / 2, from.0 + (from.1 - len) / 2, len)?;
        }
        let base = if size >= LITE_CHUNK_SIZE + (3 << 20) { LITE_CHUNK_SIZE - 3000 } else { size / 4 };
        let avail = size - base;
        let shift = (avail / 4).min(4099);
        let len = (avail - shift).min((2 << 20) + 1);
        if shift > 0 {
            self.copy(base + shift, base, len)?;
            self.copy(base, base + shift, len)?;
        }
        Ok(())
    }
}

/// Percent done on stderr, every 10%.
struct Progress {
    what: &'static str,
    total: u64,
    shown: u64,
}

impl Progress {
    fn new(what: &'static str, total: u64) -> Progress {
        Progress { what, total, shown: 0 }
    }

    fn at(&mut self, done: u64) {
        let percent = (u128::from(done) * 100 / u128::from(self.total.max(1))) as u64;
        if percent >= self.shown + 10 || (percent == 100 && self.shown < 100) {
            self.shown = percent - percent % 10;
            eprintln!("integrity: {} {percent}%", self.what);
        }
    }
}

fn mb_per_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64().max(1e-9) / 1e6
}

/// `lmr-integrity`: exit 1 on any mismatch or failed call.
pub fn integrity(lite: &Lite, args: &Integrity) -> ExitCode {
    if args.size == 0 || args.piece == 0 {
        eprintln!("lite-selftest: --size and --piece must be at least 1 byte");
        return ExitCode::from(2);
    }
    let me = match lite.node_id() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("integrity: {}", why(&e));
            return ExitCode::FAILURE;
        }
    };
    let name = format!("integrity-{}", std::process::id());
    let opts = MallocOptions { holders: args.holders.clone(), ..Default::default() };
    let lmr = match lite.malloc(args.size, &name, &opts) {
        Ok(lmr) => lmr,
        Err(e) => {
            eprintln!("integrity: malloc {} bytes as {name}: {}", args.size, why(&e));
            return ExitCode::FAILURE;
        }
    };
    let mut run = IntegrityRun {
        lmr: &lmr,
        args,
        nodes: vec![me],
        windows: Vec::new(),
        problems: Vec::new(),
        write_time: Duration::ZERO,
        read_time: Duration::ZERO,
    };
    let result = run.check_stat(me).and_then(|()| {
        run.reads_zero()?;
        run.choose_windows();
        let sums = run.write_all()?;
        run.read_all(&sums)?;
        run.straddle()?;
        run.memset()?;
        run.copies()
    });
    if let Err(e) = result {
        run.problem(e);
    }
    let IntegrityRun { nodes, mut problems, write_time, read_time, .. } = run;
    if let Err(e) = lmr.free() {
        eprintln!("integrity: MISMATCH free: {}", why(&e));
        problems.push(format!("free: {}", why(&e)));
    }
    let (write, read) = (mb_per_s(args.size, write_time), mb_per_s(args.size, read_time));
    let nodes_list = nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if args.json {
        let report = serde_json::json!({
            "size": args.size,
            "nodes": nodes,
            "seed": args.seed,
            "piece": args.piece,
            "ok": problems.is_empty(),
            "write_mb_s": (write * 10.0).round() / 10.0,
            "read_mb_s": (read * 10.0).round() / 10.0,
            "problems": problems,
        });
        println!("{report}");
    } else if problems.is_empty() {
        println!(
            "integrity: {} bytes over nodes [{nodes_list}]: ok, write {write:.1} MB/s, read {read:.1} MB/s",
            args.size
        );
    } else {
        println!("integrity: {} bytes over nodes [{nodes_list}]: FAILED, {} problem(s)", args.size, problems.len());
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_module_layout() {
        let gib = 1 << 30;
        let s = shares(gib, 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].0, 357_916_672);
        assert_eq!(s.iter().map(|p| p.1).sum::<u64>(), gib);
        assert_eq!(shares(10, 3), vec![(0, 10)]);
    }
}
