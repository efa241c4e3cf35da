//! The LMR subcommands that move data: integrity of a large LMR, a server and a
//! client for cross-process and cross-node scenarios, and many LMRs left to the
//! kernel's cleanup at exit. The argument checks are in `lmr_hostile.rs`.

use lite::uapi::LITE_CHUNK_SIZE;
use lite::{Lite, Lmr, MallocOptions, Perm};
use lite_stats::Rng;
use nix::errno::Errno;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Default `--piece`: 3 MiB + 4099 bytes, so successive pieces start at ever
/// different offsets relative to the 4 MiB chunks and the page-aligned node shares.
pub const DEFAULT_PIECE: u64 = (3 << 20) + 4099;

/// Bytes per read or write when filling or checking the lmr-serve pattern.
const PATTERN_PIECE: u64 = 1 << 20;

/// An error with its errno name first, for scripts that look for it.
fn why(e: &lite::Error) -> String {
    format!("{:?}: {e}", e.errno())
}

/// Mismatches reported one by one on stderr; the rest are only counted.
const MAX_REPORTED: usize = 20;

/// `--grant NODE:PERM`, NODE a node id or `any`.
#[derive(Clone, Debug)]
pub struct GrantArg {
    node: Option<u32>,
    perm: Perm,
}

impl FromStr for GrantArg {
    type Err = String;

    fn from_str(s: &str) -> Result<GrantArg, String> {
        let (node, perm) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected NODE:PERM, e.g. 2:rw or any:r"))?;
        let node = match node {
            "any" => None,
            n => Some(n.parse().map_err(|_| format!("{s:?}: node must be a node id or `any`"))?),
        };
        Ok(GrantArg { node, perm: perm.parse().map_err(|e: lite::Error| e.to_string())? })
    }
}

/// An errno liblite returns, by name (as `{:?}` prints it).
pub fn parse_errno(s: &str) -> Result<Errno, String> {
    let errnos = lite::ERRNO_MESSAGES.map(|(errno, _)| errno);
    errnos.into_iter().find(|e| format!("{e:?}") == s).ok_or_else(|| {
        let names: Vec<String> = errnos.iter().map(|e| format!("{e:?}")).collect();
        format!("unknown errno name {s:?}: one of {}", names.join(", "))
    })
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// The lmr-serve pattern of an LMR named NAME: byte i is byte i % 8 (little-endian)
/// of splitmix64(fnv1a64(NAME) + i / 8). Every position differs, so data at the
/// wrong offset (a misplaced chunk) shows, and a client can check it knowing only
/// the name.
fn fill_pattern(name: &str, offset: u64, buf: &mut [u8]) {
    let key = fnv1a64(name.as_bytes());
    let mut i = 0;
    while i < buf.len() {
        let pos = offset + i as u64;
        let word = splitmix64(key.wrapping_add(pos / 8)).to_le_bytes();
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[skip..skip + n]);
        i += n;
    }
}

fn write_pattern(lmr: &Lmr<'_>, name: &str) -> lite::Result<()> {
    let mut buf = vec![0u8; PATTERN_PIECE.min(lmr.size()) as usize];
    for offset in (0..lmr.size()).step_by(PATTERN_PIECE as usize) {
        let piece = &mut buf[..(lmr.size() - offset).min(PATTERN_PIECE) as usize];
        fill_pattern(name, offset, piece);
        lmr.write(offset, piece)?;
    }
    Ok(())
}

/// Random numbers as a byte stream (8 little-endian bytes per step): one seed gives
/// the same bytes however the stream is cut into pieces, so nothing needs to be kept.
struct Stream {
    rng: Rng,
    word: [u8; 8],
    used: usize,
}

impl Stream {
    fn new(seed: u64) -> Stream {
        Stream { rng: Rng::new(seed), word: [0; 8], used: 8 }
    }

    fn fill(&mut self, buf: &mut [u8]) {
        let carried = (8 - self.used).min(buf.len());
        buf[..carried].copy_from_slice(&self.word[self.used..self.used + carried]);
        self.used += carried;
        let mut words = buf[carried..].chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            self.word = self.rng.next_u64().to_le_bytes();
            tail.copy_from_slice(&self.word[..tail.len()]);
            self.used = tail.len();
        }
    }
}

/// A 64-bit checksum of a piece, fast enough for gigabytes under emulation.
fn checksum(buf: &[u8]) -> u64 {
    let mut words = buf.chunks_exact(8);
    let mut h = 0xcbf2_9ce4_8422_2325 ^ buf.len() as u64;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0x100_0000_01b3).rotate_left(23);
    }
    words.remainder().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Where `size` bytes over `holders` nodes put each node's share, as the module's
/// `region.rs` lays them out (an even, page-aligned share per node): the
/// `(start, len)` of the non-empty shares. Only used to aim at node boundaries; a
/// different layout makes the checks less pointed, not wrong.
fn shares(size: u64, holders: u64) -> Vec<(u64, u64)> {
    let share = size.div_ceil(holders.max(1)).div_ceil(4096) * 4096;
    (0..holders).map(|i| i * share).filter(|&start| start < size).map(|s| (s, share.min(size - s))).collect()
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

/// Prints a protocol line and flushes it (stdout is a pipe to the test driver).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

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
pub fn serve(lite: &Lite, name: &str, size: u64, holders: &[u32], perm: Perm, grants: &[GrantArg], zeroed: bool) -> ExitCode {
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
            other => eprintln!("lmr-serve: unknown command {other:?} (`free`, or EOF to exit)"),
        }
    }
    // EOF: exit without freeing or unmapping; the kernel must release the LMR.
    std::mem::forget(lmr);
    ExitCode::SUCCESS
}

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

/// Prints `mapped`, then answers each stdin line `read` with `ok` or the errno name
/// of reading the first page, until EOF.
fn hold(lmr: &Lmr<'_>) {
    say("mapped");
    let mut page = vec![0u8; lmr.size().min(4096) as usize];
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "read" => match lmr.read(0, &mut page) {
                Ok(()) => say("ok"),
                Err(e) => say(&format!("{:?}", e.errno())),
            },
            "" => {}
            other => eprintln!("lmr-client: unknown command {other:?} (`read`, or EOF to exit)"),
        }
    }
}

/// `lmr-many`: what to allocate, from how many threads, and how long to hold it.
pub struct Many {
    pub count: u32,
    pub size: u64,
    pub holders: Vec<u32>,
    pub threads: u32,
    pub hold: Option<Duration>,
}

/// `lmr-many`.
pub fn many(lite: &Lite, args: Many) -> ExitCode {
    let Many { count, size, holders, threads, hold } = args;
    if count == 0 || size == 0 || threads == 0 {
        eprintln!("lite-selftest: COUNT, --size and --threads must be at least 1");
        return ExitCode::from(2);
    }
    let pid = std::process::id();
    // Each thread allocates through an open of /dev/lite of its own (an open holds
    // at most 65 536 LMRs): this one and threads - 1 more.
    let more = match (1..threads.min(count)).map(|_| Lite::open()).collect::<Result<Vec<_>, _>>() {
        Ok(more) => more,
        Err(e) => {
            eprintln!("lmr-many: open /dev/lite once per thread: {}", why(&e));
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let options = MallocOptions { holders, ..MallocOptions::default() };
    // Each thread takes the next index until COUNT are made or one fails.
    let next = std::sync::atomic::AtomicU32::new(0);
    let made = std::sync::Mutex::new(Vec::with_capacity(count as usize));
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for lite in std::iter::once(lite).chain(&more) {
            let (next, made, failed, options) = (&next, &made, &failed, &options);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count || failed.lock().unwrap().is_some() {
                    return;
                }
                match lite.malloc(size, &format!("many-{pid}-{i}"), options) {
                    Ok(lmr) => made.lock().unwrap().push(lmr),
                    Err(e) => {
                        failed.lock().unwrap().get_or_insert(format!("malloc #{i} of {size} bytes: {}", why(&e)));
                    }
                }
            });
        }
    });
    let lmrs = made.into_inner().unwrap();
    if let Some(e) = failed.into_inner().unwrap() {
        eprintln!("lmr-many: {e}");
        std::mem::forget(lmrs);
        return ExitCode::FAILURE;
    }
    let elapsed = start.elapsed();
    let len = size.min(8) as usize;
    let word = 0x0123_4567_89ab_cdef_u64.to_le_bytes();
    let ends = [(&lmrs[0], 0), (&lmrs[lmrs.len() - 1], size - len as u64)];
    for (lmr, offset) in ends {
        let mut back = [0u8; 8];
        let result = lmr.write(offset, &word[..len]).and_then(|()| lmr.read(offset, &mut back[..len]));
        match result {
            Ok(()) if back[..len] == word[..len] => {}
            Ok(()) => {
                eprintln!("lmr-many: read back {:02x?} at {offset}, wrote {:02x?}", &back[..len], &word[..len]);
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("lmr-many: {len} bytes at {offset}: {}", why(&e));
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "many: {count} LMRs of {size} bytes: malloc {:.3} s ({:.1} us each); first and last written",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / f64::from(count)
    );
    if let Some(hold) = hold {
        // A line of its own, once they all exist: scripts wait for it.
        println!("holding {count} LMRs for {} s", hold.as_secs_f64());
        std::thread::sleep(hold);
    }
    // Exit without freeing or unmapping: the kernel's cleanup at exit is what is exercised.
    std::mem::forget(lmrs);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_and_errno_names_parse() {
        let g: GrantArg = "2:rw".parse().unwrap();
        assert_eq!((g.node, g.perm), (Some(2), Perm::READ | Perm::WRITE));
        let g: GrantArg = "any:none".parse().unwrap();
        assert_eq!((g.node, g.perm), (None, Perm::NONE));
        assert!("2".parse::<GrantArg>().is_err() && "x:r".parse::<GrantArg>().is_err());
        assert_eq!(parse_errno("EIDRM"), Ok(Errno::EIDRM));
        assert!(parse_errno("EWHAT").unwrap_err().contains("EACCES"));
    }

    #[test]
    fn the_stream_does_not_depend_on_how_it_is_cut() {
        let mut whole = vec![0u8; 1000];
        Stream::new(7).fill(&mut whole);
        let mut pieces = vec![0u8; 1000];
        let mut s = Stream::new(7);
        let mut at = 0;
        for len in [3, 5, 8, 13, 1, 0, 200, 770] {
            s.fill(&mut pieces[at..at + len]);
            at += len;
        }
        assert_eq!(pieces, whole);
        let mut other = vec![0u8; 1000];
        Stream::new(8).fill(&mut other);
        assert_ne!(other, whole);
        let mut zero = vec![0u8; 64];
        Stream::new(0).fill(&mut zero);
        assert!(zero.iter().any(|&b| b != 0));
    }

    #[test]
    fn the_pattern_is_position_dependent_and_cuttable() {
        let mut whole = vec![0u8; 4096];
        fill_pattern("x", 0, &mut whole);
        let mut part = vec![0u8; 100];
        fill_pattern("x", 1001, &mut part);
        assert_eq!(part[..], whole[1001..1101]);
        assert_ne!(whole[..256], whole[256..512]);
        let mut other = vec![0u8; 4096];
        fill_pattern("y", 0, &mut other);
        assert_ne!(other, whole);
    }

    #[test]
    fn checksums_see_one_changed_byte() {
        let mut data = vec![0u8; 3 << 20];
        Stream::new(1).fill(&mut data);
        let sum = checksum(&data);
        data[(1 << 20) + 3] ^= 1;
        assert_ne!(checksum(&data), sum);
        assert_ne!(checksum(&data[..7]), checksum(&data[..8]));
    }

    #[test]
    fn shares_follow_the_module_layout() {
        let gib = 1 << 30;
        let s = shares(gib, 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].0, 357_916_672);
        assert_eq!(s.iter().map(|p| p.1).sum::<u64>(), gib);
        assert_eq!(shares(10, 3), vec![(0, 10)]);
    }

    #[test]
    fn mismatches_name_the_first_offset() {
        assert_eq!(describe_mismatch(100, b"abcd", b"abcd"), None);
        let m = describe_mismatch(100, b"abXdY", b"abcde").unwrap();
        assert!(m.starts_with("2 byte(s) differ, first at offset 102"), "{m}");
    }
}
