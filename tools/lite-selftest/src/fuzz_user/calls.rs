//! One `fuzz-user` worker's calls: the commands and their weights, and for each a
//! structured random argument (see the parent module), issued through `Fuzz::one`.

use super::{chaos, Args, NOBODY};
use lite::uapi::*;
use lite::Lite;
use lite_stats::Rng;
use nix::errno::Errno;
use nix::sys::mman::{mmap_anonymous, mprotect, MapFlags, ProtFlags};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::mem::size_of;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

pub(super) const PAGE: usize = 4096;
/// The valid user buffer (an inaccessible page follows it).
const BUF: u64 = 64 << 10;
const KERNEL_ADDR: u64 = 0xffff_8880_0000_0000;
/// LMRs a worker keeps (mastered, and mapped) before it frees or unmaps the oldest.
const MAX_LIVE: usize = 64;
const MAX_LIVE_BYTES: u64 = 64 << 20;
pub(super) const RW: ProtFlags = ProtFlags::PROT_READ.union(ProtFlags::PROT_WRITE);

/// Commands that need CAP_NET_ADMIN.
const ADMIN: [u32; 9] = [
    LITE_IOC_JOIN,
    LITE_IOC_LEAVE,
    LITE_IOC_PEER_PREPARE,
    LITE_IOC_PEER_CONNECT,
    LITE_IOC_PEER_DOWN,
    LITE_IOC_QOS_SET,
    LITE_IOC_RESERVE,
    LITE_IOC_CLASS_RULE_ADD,
    LITE_IOC_CLASS_RULE_DEL,
];
/// Stands for a random command number in `CMDS`.
const RANDOM: u32 = 0;
/// Stand for what a worker does to its process (chaos.rs): scribble on its shared
/// page, close and reopen /dev/lite, fork a child that calls and is killed.
const SCRIBBLE: u32 = 1;
const REOPEN: u32 = 2;
const FORK: u32 = 3;
/// Calls a forked child makes before it exits, at most; it is killed within
/// `FORK_KILL_MS` ms.
const FORK_CALLS: u64 = 8;
const FORK_KILL_MS: u64 = 20;

/// (name, command, weight).
pub(super) const CMDS: [(&str, u32, u64); 44] = [
    ("INFO", LITE_IOC_INFO, 2),
    ("PEERS", LITE_IOC_PEERS, 2),
    ("PING", LITE_IOC_PING, 2),
    ("MALLOC", LITE_IOC_MALLOC, 8),
    ("REGISTER", LITE_IOC_REGISTER, 3),
    ("MAP", LITE_IOC_MAP, 8),
    ("UNMAP", LITE_IOC_UNMAP, 4),
    ("FREE", LITE_IOC_FREE, 4),
    ("GRANT", LITE_IOC_GRANT, 3),
    ("READ", LITE_IOC_READ, 8),
    ("WRITE", LITE_IOC_WRITE, 8),
    ("MEMSET", LITE_IOC_MEMSET, 4),
    ("MEMCPY", LITE_IOC_MEMCPY, 4),
    ("MEM_STAT", LITE_IOC_MEM_STAT, 1),
    ("ATOMIC", LITE_IOC_ATOMIC, 6),
    ("LOCK", LITE_IOC_LOCK, 6),
    ("BARRIER", LITE_IOC_BARRIER, 3),
    ("RPC_REGISTER", LITE_IOC_RPC_REGISTER, 3),
    ("RPC_UNREGISTER", LITE_IOC_RPC_UNREGISTER, 2),
    ("RPC_CALL", LITE_IOC_RPC_CALL, 6),
    ("WAIT", LITE_IOC_WAIT, 3),
    ("RPC_RECV", LITE_IOC_RPC_RECV, 4),
    ("RPC_REPLY", LITE_IOC_RPC_REPLY, 3),
    ("RPC_REPLY_RECV", LITE_IOC_RPC_REPLY_RECV, 3),
    ("RPC_BENCH", LITE_IOC_RPC_BENCH, 2),
    ("RPC_STAT", LITE_IOC_RPC_STAT, 1),
    ("LMR_STAT", LITE_IOC_LMR_STAT, 3),
    ("QOS_GET", LITE_IOC_QOS_GET, 1),
    ("CLASS_RULES", LITE_IOC_CLASS_RULES, 1),
    ("CLASS_SELF", LITE_IOC_CLASS_SELF, 1),
    ("QOS_STAT", LITE_IOC_QOS_STAT, 1),
    ("JOIN", LITE_IOC_JOIN, 1),
    ("LEAVE", LITE_IOC_LEAVE, 1),
    ("PEER_PREPARE", LITE_IOC_PEER_PREPARE, 1),
    ("PEER_CONNECT", LITE_IOC_PEER_CONNECT, 1),
    ("PEER_DOWN", LITE_IOC_PEER_DOWN, 1),
    ("QOS_SET", LITE_IOC_QOS_SET, 1),
    ("RESERVE", LITE_IOC_RESERVE, 1),
    ("CLASS_RULE_ADD", LITE_IOC_CLASS_RULE_ADD, 1),
    ("CLASS_RULE_DEL", LITE_IOC_CLASS_RULE_DEL, 1),
    ("RANDOM", RANDOM, 3),
    ("SCRIBBLE", SCRIBBLE, 2),
    ("REOPEN", REOPEN, 1),
    ("FORK", FORK, 1),
];

/// One of the values (all evaluated first), chosen by `$f.rng`.
macro_rules! pick {
    ($f:expr, $($v:expr),+ $(,)?) => {{
        let xs = [$($v),+];
        xs[$f.rng.below(xs.len() as u64) as usize]
    }};
}

/// The index in `CMDS` of a command drawn from `rng`, by weight.
fn pick_command(rng: &mut Rng) -> usize {
    let total: u64 = CMDS.iter().map(|c| c.2).sum();
    let mut w = rng.below(total);
    CMDS.iter()
        .position(|c| {
            w < c.2 || {
                w -= c.2;
                false
            }
        })
        .unwrap_or(0)
}

/// One element of a non-empty pool.
fn pick_from<T: Copy>(rng: &mut Rng, pool: &[T]) -> T {
    pool[rng.below(pool.len() as u64) as usize]
}

/// The bytes of a uapi struct (`repr(C)`, integers only, explicit padding).
fn bytes<T: Copy>(v: T) -> Vec<u8> {
    // SAFETY: every byte of these structs is an initialized integer byte.
    unsafe { std::slice::from_raw_parts(&v as *const T as *const u8, size_of::<T>()) }.to_vec()
}

/// A uapi struct from (at least) its bytes; any bit pattern is a valid value.
fn decode<T: Copy>(b: &[u8]) -> Option<T> {
    // SAFETY: length checked; an integer-only struct, read unaligned.
    (b.len() >= size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(b.as_ptr() as *const T) })
}

/// `rw` bytes of private read-write memory followed by one inaccessible page, kept
/// for the life of the process. Returns its address.
fn region(rw: usize) -> Result<u64, Errno> {
    let len = NonZeroUsize::new(rw + PAGE).ok_or(Errno::EINVAL)?;
    // SAFETY: a fresh anonymous mapping, only ever used through its address.
    let p = unsafe { mmap_anonymous(None, len, ProtFlags::PROT_NONE, MapFlags::MAP_PRIVATE) }?;
    // SAFETY: the first `rw` bytes of our own mapping.
    unsafe { mprotect(p, rw, RW) }?;
    Ok(p.as_ptr() as u64)
}

/// Changes the protection of the page at `addr` (one of ours).
fn protect(addr: u64, prot: ProtFlags) -> Result<(), Errno> {
    let p = NonNull::new(addr as *mut libc::c_void).ok_or(Errno::EINVAL)?;
    // SAFETY: one page of our own mapping; nothing holds a reference into it.
    unsafe { mprotect(p, PAGE, prot) }
}

/// Keeps the newest 16 entries of a pool.
fn bound<T>(v: &mut Vec<T>) {
    if v.len() > 16 {
        v.drain(..v.len() - 16);
    }
}

/// An LMR handle this worker got back.
struct Held {
    lh: u64,
    size: u64,
    master: bool,
}

/// One worker's state.
pub(super) struct Fuzz {
    lite: Lite,
    rng: Rng,
    nodes: Vec<u32>,
    names: Vec<[u8; 64]>,
    /// `BUF` valid bytes, then an inaccessible page.
    buf: u64,
    /// One read-only page (of random bytes).
    ro: u64,
    /// Two pages for ioctl arguments, then an inaccessible page.
    args: u64,
    held: Vec<Held>,
    stale: Vec<u64>,
    tokens: Vec<u64>,
    slots: Vec<u32>,
    /// (handle, offset) of locks taken.
    locks: Vec<(u64, u64)>,
    /// Command name -> outcome ("ok" or errno name) -> calls.
    stats: BTreeMap<&'static str, BTreeMap<String, u64>>,
    /// Command name -> time spent in its calls (ns).
    time_ns: BTreeMap<&'static str, u64>,
    eperm_violations: u64,
    /// Forked children killed but not reaped yet.
    zombies: Vec<Pid>,
}

impl Fuzz {
    /// The index in `CMDS` of the next command, by weight.
    pub(super) fn pick_command(&mut self) -> usize {
        pick_command(&mut self.rng)
    }

    /// The counts by command and outcome, and the EPERM violations, as JSON.
    pub(super) fn report(&self) -> serde_json::Value {
        serde_json::json!({ "calls": self.stats, "time_ns": self.time_ns, "eperm_violations": self.eperm_violations })
    }

    pub(super) fn new(lite: Lite, seed: u64, a: &Args) -> Result<Fuzz, Errno> {
        let (buf, ro, args) = (region(BUF as usize)?, region(PAGE)?, region(2 * PAGE)?);
        let mut rng = Rng::new(seed);
        for i in 0..PAGE as u64 / 8 {
            // SAFETY: inside the read-write page just mapped.
            unsafe { ((ro + i * 8) as *mut u64).write(rng.next_u64()) };
        }
        protect(ro, ProtFlags::PROT_READ)?;
        let name = |i| {
            let (mut f, s) = ([0u8; 64], format!("fzu-{}-{i}", a.seed));
            f[..s.len()].copy_from_slice(s.as_bytes());
            f
        };
        let (nodes, names) = (a.nodes.clone(), (0..8).map(name).collect());
        let (held, stale, tokens, slots, locks, stats) = (vec![], vec![], vec![], vec![], vec![], BTreeMap::new());
        Ok(Fuzz {
            lite,
            rng,
            nodes,
            names,
            buf,
            ro,
            args,
            held,
            stale,
            tokens,
            slots,
            locks,
            stats,
            time_ns: BTreeMap::new(),
            eperm_violations: 0,
            zombies: vec![],
        })
    }

    // ---- interesting values ----

    fn v64(&mut self) -> u64 {
        pick!(
            self,
            0,
            1,
            self.rng.below(64),
            4095,
            4096,
            4097,
            4 << 20,
            u64::from(u32::MAX),
            u64::MAX,
            self.rng.next_u64()
        )
    }

    fn v32(&mut self) -> u32 {
        pick!(self, 0, 1, self.rng.below(64) as u32, 4095, 4096, 4097, u32::MAX, self.rng.next_u64() as u32)
    }

    /// Mostly 0, as reserved fields must be.
    fn reserved(&mut self) -> u32 {
        if self.rng.chance(95) {
            0
        } else {
            self.v32()
        }
    }

    /// Transfer lengths: mostly small and valid.
    fn len(&mut self) -> u64 {
        let (small, any) = (1 + self.rng.below(256), self.v64());
        pick!(self, 0, small, small, small, small, small, 8, 4095, 4096, 4097, BUF, 4 << 20, any, any)
    }

    /// Valid ones 1..=50 ms; invalid ones beyond every command's limit.
    fn timeout(&mut self) -> u32 {
        if self.rng.chance(92) {
            1 + self.rng.below(50) as u32
        } else {
            pick!(self, 0, 3_600_001, u32::MAX)
        }
    }

    /// Ping and bench counts: a few round trips, or invalid.
    fn small_count(&mut self) -> u32 {
        pick!(self, 0, 1, 1, 2, 3, LITE_PING_MAX_COUNT + 1, u32::MAX)
    }

    fn node(&mut self) -> u32 {
        match self.nodes.is_empty() || self.rng.chance(25) {
            true => pick!(self, 3, 15, 16, 255, LITE_NODE_NONE),
            false => pick_from(&mut self.rng, &self.nodes),
        }
    }

    fn node_mask(&mut self) -> u32 {
        match self.rng.below(10) {
            0..=4 => 0,
            5..=7 => {
                self.nodes.iter().filter(|&&n| n < 32).fold(0, |m, &n| if self.rng.chance(50) { m | 1 << n } else { m })
            }
            8 => pick!(self, 1 << 3, 1 << 15, 1 << 16, u32::MAX),
            _ => self.rng.next_u64() as u32,
        }
    }

    fn perm(&mut self) -> u32 {
        let rw = LITE_PERM_READ | LITE_PERM_WRITE;
        if self.rng.chance(60) {
            rw
        } else {
            pick!(self, 0, LITE_PERM_READ, LITE_PERM_WRITE, LITE_PERM_ALL, LITE_PERM_MASTER, 8, u32::MAX)
        }
    }

    fn namespace(&mut self) -> u32 {
        pick!(self, 0, 0, 0, 0, 0, 0, 0, 0, 1, self.v32())
    }

    /// A name of the shared pool, or a malformed one (empty, no NUL, random bytes).
    fn name(&mut self) -> [u8; 64] {
        match self.rng.below(30) {
            0 => [0; 64],
            1 => [b'x'; 64],
            2 => std::array::from_fn(|_| self.rng.next_u64() as u8),
            _ => pick_from(&mut self.rng, &self.names),
        }
    }

    fn rpc_id(&mut self) -> u32 {
        if self.rng.chance(85) {
            1 + self.rng.below(8) as u32
        } else {
            pick!(self, 0, 9, u32::MAX, self.rng.next_u64() as u32)
        }
    }

    /// RPC message and buffer lengths.
    fn msg_len(&mut self) -> u64 {
        let (small, any) = (self.rng.below(4096), self.v64());
        pick!(self, 0, small, small, small, small, small, BUF, LITE_RPC_MAX_MSG, LITE_RPC_MAX_MSG + 1, any)
    }

    /// A user pointer: the valid buffer (at its start, inside, near its end), NULL, a
    /// kernel address, the read-only page or anything.
    fn uptr(&mut self) -> u64 {
        match self.rng.below(100) {
            0..=54 => self.buf,
            55..=64 => self.buf + self.rng.below(BUF),
            65..=69 => self.buf + BUF - 1 - self.rng.below(64),
            70..=77 => 0,
            78..=85 => KERNEL_ADDR + self.rng.below(1 << 30),
            86..=93 => self.ro + self.rng.below(64),
            _ => self.rng.next_u64(),
        }
    }

    /// A handle and the size of its LMR (a guess for stale and random handles).
    fn handle(&mut self) -> (u64, u64) {
        match self.rng.below(100) {
            0..=79 if !self.held.is_empty() => {
                let h = &self.held[self.rng.below(self.held.len() as u64) as usize];
                (h.lh, h.size)
            }
            80..=89 if !self.stale.is_empty() => (pick_from(&mut self.rng, &self.stale), 4096),
            _ => (pick!(self, 0, 1, 2, u64::MAX, self.rng.next_u64()), 4096),
        }
    }

    /// An offset into an LMR of `size` bytes: inside (often 8-aligned), at its edges, beyond.
    fn offset(&mut self, size: u64) -> u64 {
        let (inside, aligned, any) = (self.rng.below(size), self.rng.below(size) & !7, self.v64());
        let (last, end) = (size.saturating_sub(8), size.saturating_sub(1));
        pick!(
            self,
            0,
            aligned,
            aligned,
            aligned,
            aligned,
            inside,
            last,
            end,
            size,
            size.wrapping_add(1),
            u64::MAX,
            u64::MAX - 7,
            any
        )
    }

    // ---- arguments ----

    /// The argument of `cmd`, field by field.
    fn argument(&mut self, cmd: u32) -> Vec<u8> {
        match cmd {
            LITE_IOC_PEERS | LITE_IOC_CLASS_RULES => {
                // LiteClassRules has the same layout.
                let capacity = pick!(self, 0, 1, 2, 16, 64, u32::MAX, self.rng.next_u64() as u32);
                bytes(LitePeerList { entries: self.uptr(), capacity, count: self.v32() })
            }
            LITE_IOC_PING => {
                let payload = pick!(self, 0, 1, 64, LITE_PING_MAX_PAYLOAD, LITE_PING_MAX_PAYLOAD + 1, u32::MAX);
                bytes(LitePing {
                    node: self.node(),
                    count: self.small_count(),
                    timeout_ms: self.timeout(),
                    payload,
                    rtt_ns: self.uptr(),
                })
            }
            LITE_IOC_MALLOC => {
                let size = match self.rng.below(20) {
                    0..=15 => pick!(self, 1, 8, 64, 4095, 4096, 4097, 65536, 1 << 20, 1 + self.rng.below(1 << 20)),
                    16 => 4 << 20,
                    17 => 0,
                    _ => pick!(self, LITE_LMR_MAX_SIZE, LITE_LMR_MAX_SIZE + 1, 1 << 62, u64::MAX), // ENOMEM at once
                };
                let (nodes, perm, namespace, reserved, name) =
                    (self.node_mask(), self.perm(), self.namespace(), self.reserved(), self.name());
                bytes(LiteMalloc { size, nodes, perm, namespace, reserved, name, lh: self.rng.next_u64() })
            }
            LITE_IOC_REGISTER => {
                let (fits, any) = (1 + self.rng.below(BUF), self.v64());
                let len = pick!(self, 0, fits, fits, fits, fits, fits, BUF, BUF + 1, LITE_REGISTER_MAX_SIZE + 1, any);
                let (buf, perm, namespace, name) = (self.uptr(), self.perm(), self.namespace(), self.name());
                bytes(LiteRegister { buf, len, perm, namespace, name, lh: self.rng.next_u64() })
            }
            LITE_IOC_MAP => {
                let (namespace, perm, name) = (self.namespace(), self.perm(), self.name());
                bytes(LiteMap { namespace, perm, name, lh: self.rng.next_u64(), size: self.rng.next_u64() })
            }
            LITE_IOC_UNMAP | LITE_IOC_FREE => bytes(LiteHandle { lh: self.handle().0 }),
            LITE_IOC_GRANT => {
                let node = if self.rng.chance(40) { LITE_NODE_ANY } else { self.node() };
                bytes(LiteGrant { lh: self.handle().0, node, perm: self.perm() })
            }
            LITE_IOC_READ | LITE_IOC_WRITE => {
                let (lh, size) = self.handle();
                bytes(LiteRw { lh, offset: self.offset(size), buf: self.uptr(), len: self.len() })
            }
            LITE_IOC_MEMSET => {
                let (lh, size) = self.handle();
                let value = pick!(self, 0, 0xff, 256, u32::MAX, self.rng.below(256) as u32);
                bytes(LiteMemset { lh, offset: self.offset(size), len: self.len(), value, reserved: self.reserved() })
            }
            LITE_IOC_MEMCPY => {
                let ((dst_lh, dst), (src_lh, src)) = (self.handle(), self.handle());
                bytes(LiteMemcpy {
                    dst_lh,
                    dst_offset: self.offset(dst),
                    src_lh,
                    src_offset: self.offset(src),
                    len: self.len(),
                })
            }
            LITE_IOC_LMR_STAT => bytes(LiteLmrStat { lh: self.handle().0, ..Default::default() }),
            LITE_IOC_ATOMIC => {
                let (lh, size) = self.handle();
                let op = pick!(self, LITE_ATOMIC_FETCH_ADD, LITE_ATOMIC_FETCH_ADD, LITE_ATOMIC_COMPARE_SWAP, 0, 3);
                let swap = if op == LITE_ATOMIC_FETCH_ADD && self.rng.chance(80) { 0 } else { self.v64() };
                let (offset, reserved, operand) = (self.offset(size), self.reserved(), self.v64());
                bytes(LiteAtomic { lh, offset, op, reserved, operand, swap, old: self.rng.next_u64() })
            }
            LITE_IOC_LOCK => {
                let op = pick!(self, LITE_LOCK_ACQUIRE, LITE_LOCK_ACQUIRE, LITE_LOCK_RELEASE, LITE_LOCK_RELEASE, 0, 3);
                let (lh, offset) = match op == LITE_LOCK_RELEASE && !self.locks.is_empty() && self.rng.chance(70) {
                    true => pick_from(&mut self.rng, &self.locks),
                    false => {
                        let (lh, size) = self.handle();
                        (lh, self.offset(size))
                    }
                };
                bytes(LiteLock { lh, offset, op, reserved: self.reserved() })
            }
            LITE_IOC_BARRIER => {
                let (lh, size) = self.handle();
                let participants = pick!(self, 0, 1, 1, 2, 3, LITE_BARRIER_MAX_PARTICIPANTS + 1, u32::MAX);
                bytes(LiteBarrier { lh, offset: self.offset(size), participants, timeout_ms: self.timeout() })
            }
            LITE_IOC_RPC_REGISTER | LITE_IOC_RPC_UNREGISTER => {
                bytes(LiteRpcId { id: self.rpc_id(), reserved: self.reserved() })
            }
            LITE_IOC_RPC_CALL => {
                let (node, id, input, input_len) = (self.node(), self.rpc_id(), self.uptr(), self.msg_len());
                let (output, output_len, timeout_ms, reserved) =
                    (self.uptr(), self.msg_len(), self.timeout(), self.reserved());
                let slot = if self.rng.chance(90) {
                    self.rng.below(u64::from(LITE_SLOTS)) as u32
                } else {
                    pick!(self, LITE_SLOTS, u32::MAX)
                };
                let flags = pick!(self, 0, 0, 0, LITE_RPC_ONEWAY, 2, u32::MAX);
                bytes(LiteRpcCall {
                    node,
                    id,
                    input,
                    input_len,
                    output,
                    output_len,
                    timeout_ms,
                    slot,
                    flags,
                    reserved,
                    seq: 0,
                })
            }
            LITE_IOC_WAIT => {
                let slot = match !self.slots.is_empty() && self.rng.chance(70) {
                    true => pick_from(&mut self.rng, &self.slots),
                    false => pick!(self, 0, LITE_SLOTS, u32::MAX),
                };
                bytes(LiteWait { slot, reserved: self.reserved() })
            }
            LITE_IOC_RPC_RECV => bytes(self.recv()),
            LITE_IOC_RPC_REPLY => bytes(self.reply()),
            LITE_IOC_RPC_REPLY_RECV => bytes(LiteRpcReplyRecv { reply: self.reply(), recv: self.recv() }),
            LITE_IOC_RPC_BENCH => {
                let (node, id, count, timeout_ms) = (self.node(), self.rpc_id(), self.small_count(), self.timeout());
                let (request_len, reply_capacity, rtt_ns) = (self.msg_len(), self.msg_len(), self.uptr());
                bytes(LiteRpcBench { node, id, count, timeout_ms, request_len, reply_capacity, rtt_ns, reply_len: 0 })
            }
            LITE_IOC_CLASS_SELF => {
                let class = pick!(
                    self,
                    LITE_CLASS_LATENCY,
                    LITE_CLASS_DEFAULT,
                    LITE_CLASS_BULK,
                    3,
                    LITE_CLASS_QUERY,
                    self.v32()
                );
                bytes(LiteClassSelf { class, source: self.reserved() })
            }
            // The privileged ones, filled like a real (root) caller would.
            LITE_IOC_JOIN => bytes(LiteJoin { node_id: self.node(), reserved: self.reserved(), epoch: self.v64() }),
            LITE_IOC_PEER_PREPARE => {
                bytes(LitePeerPrepare { peer_id: self.node(), peer_epoch: self.v64(), ..Default::default() })
            }
            LITE_IOC_PEER_CONNECT => {
                bytes(LitePeerConnect { peer_id: self.node(), peer_epoch: self.v64(), ..Default::default() })
            }
            LITE_IOC_PEER_DOWN => bytes(LitePeerDown { peer_id: self.node(), reserved: self.reserved() }),
            LITE_IOC_RESERVE => bytes(LiteReserve { bytes: self.v64() }),
            LITE_IOC_CLASS_RULE_ADD | LITE_IOC_CLASS_RULE_DEL => {
                let id = pick!(self, u64::from(std::process::id()), u64::from(NOBODY), self.v64());
                bytes(LiteClassRule { kind: pick!(self, 0, 1, 2, 3, 4), class: pick!(self, 0, 1, 2, 3), id })
            }
            LITE_IOC_QOS_SET => {
                let (set, mode, target99_ns) = (self.rng.below(64) as u32, self.rng.below(4) as u32, self.v64());
                let weights = [self.v32(), self.v32(), self.v32()];
                bytes(LiteQos {
                    set,
                    mode,
                    target99_ns,
                    weights,
                    chunk_bytes: self.v32(),
                    link_rate: self.v64(),
                    target99_ratio_pct: self.v32(),
                    reserved: self.reserved(),
                })
            }
            // Output-only arguments (INFO, MEM_STAT, RPC_STAT, QOS_GET, QOS_STAT), LEAVE and
            // random command numbers: random bytes of the size the number encodes.
            _ => (0..(cmd >> 16) & 0x3FFF).map(|_| self.rng.next_u64() as u8).collect(),
        }
    }

    fn recv(&mut self) -> LiteRpcRecv {
        let (id, timeout_ms, buf) = (self.rpc_id(), self.timeout(), self.uptr());
        let buf_len = pick!(self, 0, 1, 64, 4096, BUF, LITE_RPC_MAX_MSG, u64::MAX);
        LiteRpcRecv { id, timeout_ms, buf, buf_len, ..Default::default() }
    }

    fn reply(&mut self) -> LiteRpcReply {
        let token = if !self.tokens.is_empty() && self.rng.chance(70) {
            pick_from(&mut self.rng, &self.tokens)
        } else {
            self.v64()
        };
        LiteRpcReply { token, buf: self.uptr(), len: self.msg_len() }
    }

    /// Puts `arg` where the ioctl will find it: mostly at the start of the argument
    /// pages, sometimes unaligned, running into the inaccessible page, in the
    /// read-only page, NULL or in the kernel. Returns the pointer and, when the whole
    /// argument sits in writable memory, where to read the kernel's answer.
    fn place(&mut self, arg: &[u8]) -> (u64, Option<u64>) {
        let end = self.args + 2 * PAGE as u64;
        let n = arg.len().min(2 * PAGE);
        let at = match self.rng.below(100) {
            0..=74 => self.args,
            75..=79 => self.args + 1 + self.rng.below(7),
            80..=84 => end - n as u64 + self.rng.below(n.min(8) as u64 + 1),
            85..=89 if n <= PAGE && protect(self.ro, RW).is_ok() => {
                // SAFETY: the read-only page, writable for this copy.
                unsafe { std::ptr::copy_nonoverlapping(arg.as_ptr(), self.ro as *mut u8, n) };
                let _ = protect(self.ro, ProtFlags::PROT_READ);
                return (self.ro, None);
            }
            90..=94 => return (0, None),
            _ => return (KERNEL_ADDR + (self.rng.below(1 << 24) & !7), None),
        };
        let fits = ((end - at) as usize).min(n);
        // SAFETY: `at .. at + fits` lies in the read-write argument pages.
        unsafe { std::ptr::copy_nonoverlapping(arg.as_ptr(), at as *mut u8, fits) };
        (at, (fits == arg.len()).then_some(at))
    }

    /// Counts `r` for `name`; a privileged command must have failed with EPERM.
    fn count(&mut self, name: &'static str, cmd: u32, r: Result<i32, Errno>) {
        let outcome = r.map_or_else(|e| format!("{e:?}"), |_| "ok".to_string());
        if ADMIN.contains(&cmd) && r != Err(Errno::EPERM) {
            self.eperm_violations += 1;
            if self.eperm_violations <= 10 {
                eprintln!("fuzz-user: EPERM-violation: {name} ({cmd:#x}) as nobody gave {outcome}, not EPERM");
            }
        }
        *self.stats.entry(name).or_default().entry(outcome).or_default() += 1;
    }

    /// One call of the command at `CMDS[i]`.
    pub(super) fn one(&mut self, i: usize) {
        let (name, mut cmd, _) = CMDS[i];
        match cmd {
            SCRIBBLE => {
                let r = chaos::scribble(&self.lite, &mut self.rng);
                return self.count(name, cmd, r.map(|()| 0));
            }
            REOPEN => return self.reopen(name),
            FORK => return self.fork(name),
            _ => {}
        }
        if cmd == RANDOM {
            let size = if self.rng.chance(50) {
                self.rng.below(0x4000) as u32
            } else {
                pick!(self, 0, 8, 16, 24, 32, 64, 0x78)
            };
            cmd = (self.rng.below(4) as u32) << 30 | size << 16 | LITE_IOC_MAGIC << 8 | self.rng.below(48) as u32;
        }
        let arg = self.argument(cmd);
        let (ptr, back) = self.place(&arg);
        let started = std::time::Instant::now();
        let r = self.lite.raw_ioctl(cmd, ptr as usize);
        *self.time_ns.entry(name).or_default() += started.elapsed().as_nanos() as u64;
        self.count(name, cmd, r);
        // SAFETY: `back` is where the whole argument was placed, in the argument pages.
        let out = back.map(|a| unsafe { std::slice::from_raw_parts(a as *const u8, arg.len()) }.to_vec());
        self.harvest(cmd, &arg, out.as_deref(), r);
        self.trim();
    }

    /// Keeps what a call gave back (handles, tokens, pending slots, locks) and
    /// forgets what it released. `arg` is what was passed, `out` what came back.
    fn harvest(&mut self, cmd: u32, arg: &[u8], out: Option<&[u8]>, r: Result<i32, Errno>) {
        let (ok, out) = (r.is_ok(), out.filter(|_| r.is_ok()));
        let held = |lh, size, master| Held { lh, size, master };
        match cmd {
            LITE_IOC_MALLOC => self.held.extend(out.and_then(decode::<LiteMalloc>).map(|m| held(m.lh, m.size, true))),
            LITE_IOC_REGISTER => {
                self.held.extend(out.and_then(decode::<LiteRegister>).map(|m| held(m.lh, m.len, true)))
            }
            LITE_IOC_MAP => self.held.extend(out.and_then(decode::<LiteMap>).map(|m| held(m.lh, m.size, false))),
            LITE_IOC_UNMAP | LITE_IOC_FREE if ok => {
                decode::<LiteHandle>(arg).into_iter().for_each(|h| self.forget(h.lh))
            }
            LITE_IOC_LOCK if ok || r == Err(Errno::EOWNERDEAD) => {
                if let Some(l) = decode::<LiteLock>(arg) {
                    self.locks.retain(|&x| x != (l.lh, l.offset));
                    self.locks.extend((l.op == LITE_LOCK_ACQUIRE).then_some((l.lh, l.offset)));
                }
            }
            LITE_IOC_RPC_CALL if ok => {
                self.slots.extend(decode::<LiteRpcCall>(arg).filter(|c| c.flags & LITE_RPC_ONEWAY == 0).map(|c| c.slot))
            }
            LITE_IOC_WAIT if ok => {
                decode::<LiteWait>(arg).into_iter().for_each(|w| self.slots.retain(|&s| s != w.slot))
            }
            LITE_IOC_RPC_RECV => {
                self.tokens.extend(out.and_then(decode::<LiteRpcRecv>).map(|v| v.token).filter(|&t| t != 0))
            }
            LITE_IOC_RPC_REPLY | LITE_IOC_RPC_REPLY_RECV if ok => {
                decode::<LiteRpcReply>(arg).into_iter().for_each(|v| self.tokens.retain(|&t| t != v.token));
                self.tokens.extend(out.and_then(decode::<LiteRpcReplyRecv>).map(|v| v.recv.token).filter(|&t| t != 0));
            }
            _ => {}
        }
        bound(&mut self.tokens);
        bound(&mut self.stale);
        bound(&mut self.slots);
        bound(&mut self.locks);
    }

    /// Drops handle `lh` from the pool; it becomes a stale handle.
    /// Closes /dev/lite and opens it again: every handle, lock, call slot and token
    /// of the old file is stale from now on.
    fn reopen(&mut self, name: &'static str) {
        match Lite::open() {
            Ok(lite) => {
                self.lite = lite;
                let held: Vec<u64> = self.held.drain(..).map(|h| h.lh).collect();
                self.stale.extend(held);
                self.locks.clear();
                self.slots.clear();
                self.tokens.clear();
                self.count(name, REOPEN, Ok(0));
            }
            Err(e) => self.count(name, REOPEN, Err(e.errno())),
        }
    }

    /// Forks a child that makes up to `FORK_CALLS` calls through this worker's open
    /// file (its handles, locks and slots) and kills it within `FORK_KILL_MS`.
    fn fork(&mut self, name: &'static str) {
        chaos::reap(&mut self.zombies);
        let calls = 1 + self.rng.below(FORK_CALLS);
        let kill_after = std::time::Duration::from_millis(self.rng.below(FORK_KILL_MS + 1));
        let mut child = Rng::new(self.rng.next_u64());
        let mut zombies = std::mem::take(&mut self.zombies);
        let outcome = chaos::fork_and_kill(kill_after, &mut zombies, || {
            for _ in 0..calls {
                let i = pick_command(&mut child);
                // No process chaos in the child: only calls.
                if CMDS[i].1 > FORK {
                    self.one(i);
                }
            }
        });
        self.zombies = zombies;
        let outcome = outcome.map_or_else(|e| format!("{e:?}"), str::to_string);
        *self.stats.entry(name).or_default().entry(outcome).or_default() += 1;
    }

    fn forget(&mut self, lh: u64) {
        self.held.retain(|h| h.lh != lh);
        self.locks.retain(|l| l.0 != lh);
        self.stale.push(lh);
    }

    /// Frees the oldest mastered LMRs and unmaps the oldest mappings beyond the bounds
    /// (releasing the locks taken through them first).
    fn trim(&mut self) {
        loop {
            let masters = self.held.iter().filter(|h| h.master);
            let (count, bytes) = masters.fold((0, 0u64), |(c, b), h| (c + 1, b.saturating_add(h.size)));
            let mapped = self.held.len() - count;
            let too_many_masters = count > MAX_LIVE || bytes > MAX_LIVE_BYTES;
            if !too_many_masters && mapped <= MAX_LIVE {
                return;
            }
            let Some(&Held { lh, master, .. }) = self.held.iter().find(|h| h.master == too_many_masters) else {
                return;
            };
            for (_, offset) in self.locks.clone().into_iter().filter(|l| l.0 == lh) {
                let mut arg = LiteLock { lh, offset, op: LITE_LOCK_RELEASE, reserved: 0 };
                let r = self.lite.raw_ioctl(LITE_IOC_LOCK, &mut arg as *mut LiteLock as usize);
                self.count("LOCK", LITE_IOC_LOCK, r);
            }
            let (name, cmd) = if master { ("FREE", LITE_IOC_FREE) } else { ("UNMAP", LITE_IOC_UNMAP) };
            let r = self.lite.raw_ioctl(cmd, &mut LiteHandle { lh } as *mut LiteHandle as usize);
            self.count(name, cmd, r);
            // Gone or not (EBUSY: a lock held through it), it leaves the pool.
            self.forget(lh);
        }
    }
}
