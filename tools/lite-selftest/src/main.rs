//! lite-selftest: runs inside a guest against the real module and checks that
//! hostile or malformed calls get the documented errno and nothing worse, and that
//! LITE memory regions (LMRs) keep their data and behave across processes and nodes.
//!
//!   lite-selftest hostile PEER     argument checking (PEER: a connected node id)
//!   lite-selftest fuzz SEED N      N random ioctls, must not hurt the kernel
//!   lite-selftest lmr-integrity --size BYTES [--holders 0,1,2] --seed N [--piece BYTES] [--json]
//!                                  write, read back and compare an LMR piece by piece
//!   lite-selftest lmr-hostile PEER LMR argument and permission checks
//!   lite-selftest user-hostile PEER bounds, undone results, relocking (PEER serves 4242)
//!   lite-selftest lmr-serve NAME --size BYTES [--holders LIST] [--perm PERM] [--grant NODE:PERM]...
//!                                  allocate NAME with a known pattern, print `ready`,
//!                                  free it on a stdin line `free`, answer `read`,
//!                                  `write`, `atomic` with `ok` or an errno, exit on EOF
//!   lite-selftest lmr-client NAME --perm PERM [--expect-error ERRNO] [--check-pattern]
//!                                  [--write-pattern] [--hold]
//!                                  map NAME and check the outcome; with --hold, answer
//!                                  `read`, `write`, `atomic` with `ok` or an errno
//!   lite-selftest lmr-many COUNT --size BYTES [--holders LIST] [--threads T] [--hold-seconds S]
//!                                  allocate COUNT LMRs (hold them S s) and exit without freeing them
//!   lite-selftest rpc-serve ID [--threads T] [--delay-ms N] [--limit N]
//!                                  serve RPC ID, checking requests, answering patterns
//!   lite-selftest rpc-call NODE ID [--count N] [--threads T] [--size BYTES] [--reply BYTES]
//!                                  [--oneway] [--expect-error ERRNO] [--timeout-ms N] [--kernel-caller]
//!                                  call (or send to) ID at NODE, check every reply (JSON summary)
//!   lite-selftest rpc-multicast NODES ID
//!                                  one request to every node of NODES, each outcome
//!   lite-selftest rpc-hostile NODE ID  argument checks of the RPC ioctls (NODE serves ID)
//!   lite-selftest atomic-count NAME --offset OFF --threads T --count N [--cas]
//!                                  increment a word of LMR NAME N times per thread (JSON summary)
//!   lite-selftest atomic-read NAME --offset OFF
//!                                  print the word
//!   lite-selftest fail-loop --holder NODE --seconds S [--threads T]
//!                                  loop on calls that must fail (JSON summary)
//!   lite-selftest reach            raw RDMA past the module's checks, one stdin command
//!                                  a line (debug test builds only; see reach.rs)
//!
//! BYTES take a K, M, G or T suffix (powers of 1024); PERM is letters out of r, w, m,
//! or none. The argument checks print `FAIL ...` lines and `N passed, M failed`.
//! Exit status: 0 ok, 1 a check failed, 2 bad usage.

mod atomic;
mod fail_loop;
mod fuzz_user;
mod lmr;
mod lmr_hostile;
mod lmr_race;
mod lock;
mod reach;
mod rpc;
mod user_hostile;

use clap::{Parser, Subcommand};
use lite::uapi::*;
use lite::{Lite, Perm};
use lite_stats::Rng;
use nix::errno::Errno;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "lite-selftest", about = "In-guest checks of the LITE-RS module: hostile input and LMRs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Argument checking of the membership and ping ioctls (PEER: a connected node id).
    Hostile { peer: u32 },
    /// COUNT random ioctls from SEED; the kernel must survive them.
    Fuzz { seed: u64, count: u32 },
    /// Fill an LMR with pseudo-random data piece by piece, read it back and compare;
    /// then straddle chunk boundaries, memset, memcpy between holders and memmove.
    LmrIntegrity {
        /// LMR size (K, M, G, T suffixes).
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size)]
        size: u64,
        /// Holder nodes, comma-separated (default: this node).
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        holders: Vec<u32>,
        /// Seed of the random data.
        #[arg(long, value_name = "N")]
        seed: u64,
        /// Bytes per write/read (default 3 MiB + 4099: unaligned, so pieces cross chunk
        /// and node boundaries).
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size, default_value_t = lmr::DEFAULT_PIECE)]
        piece: u64,
        /// Print a JSON object instead of the summary line.
        #[arg(long)]
        json: bool,
    },
    /// Argument, permission and lifetime checks of the LMR ioctls (PEER: a connected node id).
    LmrHostile { peer: u32 },
    /// What an unprivileged process could do before issue 19's fixes: zero sizes,
    /// unbounded local queues, results it cannot take, relocking (PEER: a connected node id).
    UserHostile { peer: u32 },
    /// Allocate NAME filled with its pattern, print `ready`, then wait: a stdin line
    /// `free` frees it (prints `freed`); EOF exits without freeing.
    LmrServe {
        name: String,
        /// LMR size (K, M, G, T suffixes).
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size)]
        size: u64,
        /// Holder nodes, comma-separated (default: this node).
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        holders: Vec<u32>,
        /// What any node may map it with (letters r, w, or none).
        #[arg(long, value_name = "PERM", default_value = "rw")]
        perm: Perm,
        /// NODE:PERM (NODE a node id or `any`): what that node may map with; repeatable.
        #[arg(long, value_name = "NODE:PERM")]
        grant: Vec<lmr::GrantArg>,
        /// Register a buffer of this process (LT_register) instead of allocating;
        /// stdin also takes `zero` and `check` (on the buffer itself).
        #[arg(long)]
        register: bool,
        /// Zeros instead of the pattern (lock words and barrier counters start at 0).
        #[arg(long, conflicts_with = "register")]
        zeroed: bool,
    },
    /// Map NAME with PERM and check the outcome (exit 0 when the expectation holds).
    LmrClient {
        name: String,
        /// Permissions to map with (r, w, rw).
        #[arg(long, value_name = "PERM")]
        perm: Perm,
        /// The first failing step (map, then --write-pattern, then --check-pattern)
        /// must fail with this errno (EACCES, ENOENT, EIDRM, ...).
        #[arg(long, value_name = "ERRNO", value_parser = lmr::parse_errno)]
        expect_error: Option<Errno>,
        /// Read the whole LMR and verify the pattern of lmr-serve.
        #[arg(long)]
        check_pattern: bool,
        /// Write the pattern of lmr-serve over the whole LMR (before any check).
        #[arg(long)]
        write_pattern: bool,
        /// Print `mapped`, then answer each stdin line `read` with `ok` or an errno
        /// name (reading one page); exit on EOF.
        #[arg(long)]
        hold: bool,
    },
    /// Fill an LMR of 1 MiB with its pattern, then read pieces of 1 B-4 KiB at random
    /// offsets into buffers at random alignments from THREADS threads at once, and
    /// compare every byte.
    LmrSmallReads {
        /// Holder nodes, comma-separated (default: this node).
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        holders: Vec<u32>,
        #[arg(long, default_value_t = 8)]
        threads: u32,
        /// Reads per thread.
        #[arg(long, default_value_t = 200)]
        reads: u32,
        /// Seed of the offsets, lengths and alignments.
        #[arg(long, value_name = "N", default_value_t = 1)]
        seed: u64,
    },
    /// Allocate COUNT LMRs on this node, write to the first and last, print the time,
    /// and exit without freeing them (the kernel must clean up).
    LmrMany {
        count: u32,
        /// Size of each (K, M, G, T suffixes).
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size)]
        size: u64,
        /// Holder nodes, comma-separated (default: this node).
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        holders: Vec<u32>,
        /// Threads allocating them, each through its own open of /dev/lite (each
        /// LT_malloc waits for round trips; an open holds at most 65 536 LMRs).
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Then print `holding COUNT LMRs` and hold them this long before exiting.
        #[arg(long, value_name = "S")]
        hold_seconds: Option<f64>,
    },
    /// Serve RPC ID: check every request, reply with the asked-for pattern.
    RpcServe {
        id: u32,
        /// Threads receiving and answering (each replies and receives in one crossing).
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Sleep this long over each request or message (a slow server).
        #[arg(long, value_name = "N", default_value_t = 0)]
        delay_ms: u64,
        /// Exit after this many requests and messages.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Call (or send to) ID at NODE and check every reply; prints a JSON summary.
    RpcCall {
        node: u32,
        id: u32,
        /// Calls per thread.
        #[arg(long, default_value_t = 10)]
        count: u64,
        #[arg(long, default_value_t = 1)]
        threads: u32,
        /// Request bytes: from 16 on, they ask for --reply bytes; fewer are echoed.
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size, default_value_t = 64)]
        size: u64,
        /// Reply bytes asked for (and output buffer size), or the buffer for an echo.
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size, default_value_t = 64)]
        reply: u64,
        /// One-way messages (LT_send) instead of calls.
        #[arg(long)]
        oneway: bool,
        /// Every call must fail with this errno.
        #[arg(long, value_name = "ERRNO", value_parser = lmr::parse_errno)]
        expect_error: Option<Errno>,
        #[arg(long, value_name = "N", default_value_t = 60_000)]
        timeout_ms: u64,
        /// Issue the calls from the kernel (LITE_IOC_RPC_BENCH; --count calls, one thread).
        #[arg(long)]
        kernel_caller: bool,
        /// The server echoes (apps/kmod-echo): every reply must be its request.
        #[arg(long, conflicts_with_all = ["oneway", "kernel_caller"])]
        echo: bool,
    },
    /// One request to every node of NODES (comma-separated); prints each outcome.
    RpcMulticast {
        #[arg(value_delimiter = ',')]
        nodes: Vec<u32>,
        id: u32,
    },
    /// Argument checks of the RPC ioctls (NODE serves ID with rpc-serve).
    RpcHostile { node: u32, id: u32 },
    /// Increment the 8-byte word at OFFSET of LMR NAME (mapped rw) COUNT times per
    /// thread with fetch-and-add, or with compare-and-swap loops; prints a JSON summary.
    AtomicCount {
        name: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long, default_value_t = 1)]
        threads: u32,
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Compare-and-swap retry loops instead of fetch-and-add.
        #[arg(long)]
        cas: bool,
    },
    /// Print the 8-byte word at OFFSET of LMR NAME (mapped rw).
    AtomicRead {
        name: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// Increment the plain counter at OFFSET+8 of LMR NAME (mapped rw) COUNT times per
    /// thread with LT_read and LT_write under the lock at OFFSET; prints a JSON summary.
    LockCount {
        name: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long, default_value_t = 1)]
        threads: u32,
        #[arg(long, default_value_t = 100)]
        count: u64,
    },
    /// Take the lock at OFFSET of LMR NAME, print `locked`, hold it until stdin closes.
    LockHold {
        name: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// Under the lock at OFFSET of LMR NAME, append ID to the list counted at OFFSET+8
    /// (entries from OFFSET+16): the list records the order in which callers got the lock.
    LockAppend {
        name: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long)]
        id: u64,
    },
    /// ROUNDS back-to-back barriers of PARTICIPANTS on the counter at OFFSET of LMR NAME
    /// (arrivals counted at OFFSET+8), arriving after a random skew; prints JSON and
    /// fails if anyone left a round early.
    BarrierRounds {
        name: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long)]
        participants: u32,
        #[arg(long, default_value_t = 10)]
        rounds: u64,
        /// Up to this many milliseconds of sleep before each arrival.
        #[arg(long, default_value_t = 0)]
        skew_ms: u64,
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
    },
    /// Race LT_free against maps, reads, writes, atomics and locks of LMR NAME: the
    /// master allocates, fills and frees it round after round (with --threads mappers
    /// of its own), mappers on other nodes map it and work on it; nothing may reach
    /// its memory after the free returned (EIDRM). Exit 1 on a violation.
    LmrRace {
        name: String,
        #[arg(long, value_enum)]
        role: lmr_race::Role,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Mapper threads (the master's own, or this mapper's).
        #[arg(long, default_value_t = 4)]
        threads: u32,
        /// Holder nodes of the master's LMR, comma-separated (default: this node).
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        holders: Vec<u32>,
        /// LMR size (K, M, G, T suffixes; a multiple of 8).
        #[arg(long, value_name = "BYTES", value_parser = lite::parse_size, default_value_t = 64 << 10)]
        size: u64,
        /// Print a JSON object (the summary line goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Loop for SECONDS on calls that must fail: unknown and foreign handles, a write
    /// through a read-only handle and a map for writing that permissions refuse,
    /// ranges past an LMR's end, a 64 GiB malloc at HOLDER; prints a JSON summary, and
    /// exits 1 if a call did not fail with its errno.
    FailLoop {
        /// Node that holds the LMR the calls aim at (and refuses the 64 GiB).
        #[arg(long)]
        holder: u32,
        #[arg(long)]
        seconds: f64,
        #[arg(long, default_value_t = 1)]
        threads: u32,
    },
    /// COUNT structured random ioctls from SEED by P worker processes running as
    /// nobody; every privileged ioctl must fail with EPERM, no worker may crash or hang.
    FuzzUser {
        seed: u64,
        count: u64,
        /// Node ids to aim at, comma-separated.
        #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "0,1,2")]
        nodes: Vec<u32>,
        #[arg(long, value_name = "P", default_value_t = 2)]
        processes: u32,
    },
    /// Raw RDMA to peers with any address and key, past every check of the module, one
    /// stdin command a line (malloc, extent, fill, check, free, canary, read, write,
    /// atomic); needs a module built for the debug test suite.
    Reach,
}

pub(crate) struct Checks {
    failed: u32,
    passed: u32,
}

impl Checks {
    fn expect(&mut self, what: &str, got: Result<i32, Errno>, want: Result<(), Errno>) {
        let ok = match (&got, want) {
            (Ok(_), Ok(())) => true,
            (Err(g), Err(w)) => *g == w,
            _ => false,
        };
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            println!("FAIL {what}: got {got:?}, want {want:?}");
        }
    }

    /// Like `expect`, for a call that may fail with any of `wants`.
    fn expect_one_of(&mut self, what: &str, got: Result<i32, Errno>, wants: &[Errno]) {
        match got {
            Err(g) if wants.contains(&g) => self.passed += 1,
            _ => self.fail(&format!("{what}: got {got:?}, want one of {wants:?}")),
        }
    }

    /// Records a failed check that is not about an errno.
    fn fail(&mut self, what: &str) {
        self.failed += 1;
        println!("FAIL {what}");
    }
}

const KERNEL_ADDR: usize = 0xffff_8880_0000_0000;

fn hostile(lite: &Lite, peer: u32) -> Checks {
    let mut c = Checks { failed: 0, passed: 0 };
    let io = |cmd: u32, arg: usize| lite.raw_ioctl(cmd, arg);
    let addr = |v: &mut dyn std::any::Any| v as *mut dyn std::any::Any as *mut u8 as usize;

    c.expect("unknown ioctl number", io(0x4C99, 0), Err(Errno::ENOTTY));
    c.expect("foreign ioctl type", io(0x8008_5401, 0), Err(Errno::ENOTTY));
    c.expect("LITE_IOC_INFO with wrong size", io(LITE_IOC_INFO ^ (1 << 16), 0), Err(Errno::ENOTTY));
    c.expect("info to NULL", io(LITE_IOC_INFO, 0), Err(Errno::EFAULT));
    c.expect("info to a kernel address", io(LITE_IOC_INFO, KERNEL_ADDR), Err(Errno::EFAULT));
    c.expect("info to unmapped memory", io(LITE_IOC_INFO, 0x10), Err(Errno::EFAULT));

    // Real round trips happen below: allow for a slow (emulated, debug) kernel.
    let mut ping = LitePing { node: peer, count: 0, timeout_ms: 20_000, payload: 0, rtt_ns: 0 };
    c.expect("ping count 0", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::EINVAL));
    ping.count = LITE_PING_MAX_COUNT + 1;
    c.expect("ping count too large", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::EINVAL));
    ping.count = 1;
    ping.timeout_ms = 0;
    c.expect("ping timeout 0", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::EINVAL));
    ping.timeout_ms = 20_000;
    ping.payload = LITE_PING_MAX_PAYLOAD + 1;
    c.expect("ping payload larger than a message", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::EINVAL));
    ping.payload = LITE_PING_MAX_PAYLOAD;
    c.expect("ping writing RTTs to NULL", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::EFAULT));
    ping.rtt_ns = KERNEL_ADDR as u64;
    c.expect("ping writing RTTs into the kernel", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::EFAULT));
    let mut rtt = 0u64;
    ping.rtt_ns = &mut rtt as *mut u64 as u64;
    c.expect("ping a connected peer", io(LITE_IOC_PING, addr(&mut ping)), Ok(()));
    ping.node = LITE_MAX_NODES + 5;
    c.expect("ping an unknown node", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::ENOENT));
    ping.node = LITE_NODE_NONE;
    c.expect("ping node NONE", io(LITE_IOC_PING, addr(&mut ping)), Err(Errno::ENOENT));

    let mut list = LitePeerList { entries: 0, capacity: 16, count: 0 };
    c.expect("peer list into NULL", io(LITE_IOC_PEERS, addr(&mut list)), Err(Errno::EFAULT));
    list.capacity = 0;
    c.expect("peer list with capacity 0", io(LITE_IOC_PEERS, addr(&mut list)), Ok(()));
    if list.count == 0 {
        c.failed += 1;
        println!("FAIL peer list with capacity 0 did not report the peer count");
    }
    list.capacity = u32::MAX;
    list.entries = KERNEL_ADDR as u64;
    c.expect("peer list into the kernel", io(LITE_IOC_PEERS, addr(&mut list)), Err(Errno::EFAULT));

    let mut prep = LitePeerPrepare { peer_id: 99, peer_epoch: 1, ..Default::default() };
    c.expect("prepare node 99", io(LITE_IOC_PEER_PREPARE, addr(&mut prep)), Err(Errno::EINVAL));
    prep.peer_id = lite.node_id().unwrap_or(0);
    c.expect("prepare self", io(LITE_IOC_PEER_PREPARE, addr(&mut prep)), Err(Errno::EINVAL));
    let mut conn = LitePeerConnect { peer_id: peer, reserved: 0, peer_epoch: 0, remote: Default::default() };
    c.expect("connect with 0 QPs", io(LITE_IOC_PEER_CONNECT, addr(&mut conn)), Err(Errno::EINVAL));
    conn.remote.nr_qps = lite.info().map(|i| i.qps_per_peer).unwrap_or(1);
    conn.remote.mtu = 9;
    c.expect("connect with a bad MTU", io(LITE_IOC_PEER_CONNECT, addr(&mut conn)), Err(Errno::EINVAL));
    conn.remote.mtu = 3;
    c.expect("connect without a mailbox", io(LITE_IOC_PEER_CONNECT, addr(&mut conn)), Err(Errno::EINVAL));
    conn.remote.mailbox_addr = 1 << 30;
    conn.remote.mailbox_slots = 7;
    c.expect("connect with a foreign mailbox layout", io(LITE_IOC_PEER_CONNECT, addr(&mut conn)), Err(Errno::EINVAL));
    conn.remote.mailbox_slots = 32;
    c.expect("connect a stale epoch", io(LITE_IOC_PEER_CONNECT, addr(&mut conn)), Err(Errno::ENOENT));
    let mut join = LiteJoin { node_id: LITE_MAX_NODES, reserved: 0, epoch: 1 };
    c.expect("join with id out of range", io(LITE_IOC_JOIN, addr(&mut join)), Err(Errno::EINVAL));
    join.node_id = (lite.node_id().unwrap_or(0) + 1) % LITE_MAX_NODES;
    c.expect("join under another id while joined", io(LITE_IOC_JOIN, addr(&mut join)), Err(Errno::EBUSY));
    let mut down = LitePeerDown { peer_id: 14, reserved: 0 };
    c.expect("down an unknown peer", io(LITE_IOC_PEER_DOWN, addr(&mut down)), Err(Errno::ENOENT));
    down.reserved = 1;
    c.expect("down with reserved field set", io(LITE_IOC_PEER_DOWN, addr(&mut down)), Err(Errno::EINVAL));
    let mut reserve = LiteReserve { bytes: u64::MAX };
    c.expect("reserve beyond the hold limit", io(LITE_IOC_RESERVE, addr(&mut reserve)), Err(Errno::EINVAL));
    c.expect("reserve from NULL", io(LITE_IOC_RESERVE, 0), Err(Errno::EFAULT));

    mmap_checks(&mut c);
    unprivileged_checks(&mut c);
    c
}

fn mmap_checks(c: &mut Checks) {
    use nix::sys::mman::{mmap, MapFlags, ProtFlags};
    use std::num::NonZeroUsize;
    let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/lite") else {
        c.failed += 1;
        println!("FAIL cannot open /dev/lite");
        return;
    };
    let page = NonZeroUsize::new(4096).unwrap();
    let two = NonZeroUsize::new(8192).unwrap();
    let rw = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
    let map = |len, prot, off| {
        // SAFETY: a fresh mapping of the device; never dereferenced here.
        unsafe { mmap(None, len, prot, MapFlags::MAP_SHARED, &file, off) }.map(|_| 0)
    };
    c.expect("mmap two pages", map(two, rw, 0), Err(Errno::EINVAL));
    c.expect("mmap at offset 4096", map(page, rw, 4096), Err(Errno::EINVAL));
    c.expect("mmap executable", map(page, rw | ProtFlags::PROT_EXEC, 0), Err(Errno::EPERM));
    c.expect("mmap the shared page", map(page, rw, 0), Ok(()));
}

/// Membership and reserve ioctls need CAP_NET_ADMIN: check from a child that dropped root.
fn unprivileged_checks(c: &mut Checks) {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, setuid, ForkResult, Uid};
    // SAFETY: the child only makes syscalls and exits.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let code = (|| {
                setuid(Uid::from_raw(65534)).ok()?;
                let lite = Lite::open().ok()?;
                let mut join = LiteJoin { node_id: 1, reserved: 0, epoch: 1 };
                let r = lite.raw_ioctl(LITE_IOC_JOIN, &mut join as *mut LiteJoin as usize);
                let leave = lite.raw_ioctl(LITE_IOC_LEAVE, 0);
                let mut reserve = LiteReserve { bytes: 4 << 20 };
                let reserve = lite.raw_ioctl(LITE_IOC_RESERVE, &mut reserve as *mut LiteReserve as usize);
                let status = lite.peers().is_ok();
                Some(r == Err(Errno::EPERM) && leave == Err(Errno::EPERM) && reserve == Err(Errno::EPERM) && status)
            })();
            std::process::exit(if code == Some(true) { 0 } else { 1 });
        }
        Ok(ForkResult::Parent { child }) => {
            let ok = matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0)));
            c.expect(
                "membership and reserve ioctls as nobody give EPERM",
                if ok { Ok(0) } else { Err(Errno::EACCES) },
                Ok(()),
            );
        }
        Err(e) => c.expect("fork", Err(e), Ok(())),
    }
}

/// Random ioctl numbers (our type byte, random nr/size/direction) and random
/// argument pointers; the kernel must answer each with an errno or success.
fn fuzz(lite: &Lite, seed: u64, count: u32) -> Checks {
    let mut rng = Rng::new(seed);
    let mut next = || rng.next_u64();
    let mut buf = vec![0u8; 65536];
    for _ in 0..count {
        let r = next();
        let nr = (r & 0xF) as u32;
        let dir = ((r >> 4) & 3) as u32;
        let size = ((r >> 8) & 0x3FFF) as u32;
        let cmd = (dir << 30) | (size << 16) | (LITE_IOC_MAGIC << 8) | nr;
        // Never JOIN/LEAVE/DOWN for real: they would change membership under the test.
        if matches!(cmd, LITE_IOC_JOIN | LITE_IOC_LEAVE | LITE_IOC_PEER_DOWN | LITE_IOC_PEER_PREPARE) {
            continue;
        }
        for b in buf.iter_mut().take(256) {
            *b = next() as u8;
        }
        let arg = match (r >> 24) & 3 {
            0 => buf.as_mut_ptr() as usize,
            1 => KERNEL_ADDR + (next() as usize & 0xFFFF),
            2 => next() as usize,
            _ => 0,
        };
        let _ = lite.raw_ioctl(cmd, arg);
    }
    Checks { failed: 0, passed: count }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let lite = match Lite::open() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lite-selftest: {e}");
            return ExitCode::FAILURE;
        }
    };
    let checks = match cli.command {
        Command::Hostile { peer } => hostile(&lite, peer),
        Command::Fuzz { seed, count } => fuzz(&lite, seed, count),
        Command::LmrHostile { peer } => lmr_hostile::run(&lite, peer),
        Command::UserHostile { peer } => user_hostile::run(&lite, peer),
        Command::LmrIntegrity { size, holders, seed, piece, json } => {
            return lmr::integrity(&lite, &lmr::Integrity { size, holders, seed, piece, json })
        }
        Command::LmrServe { name, size, perm, register: true, .. } => {
            return lmr::serve_registered(&lite, &name, size, perm)
        }
        Command::LmrServe { name, size, holders, perm, grant, zeroed, .. } => {
            return lmr::serve(&lite, &name, size, &holders, perm, &grant, zeroed)
        }
        Command::LmrClient { name, perm, expect_error, check_pattern, write_pattern, hold } => {
            return lmr::client(&lite, &lmr::Client { name, perm, expect_error, check_pattern, write_pattern, hold })
        }
        Command::LmrSmallReads { holders, threads, reads, seed } => {
            return lmr::small_reads(&lite, &lmr::SmallReads { holders, threads, reads, seed })
        }
        Command::LmrMany { count, size, holders, threads, hold_seconds } => {
            let hold = match hold_seconds.map(std::time::Duration::try_from_secs_f64) {
                Some(Err(_)) => {
                    eprintln!("lite-selftest: --hold-seconds must be a number of seconds, at least 0");
                    return ExitCode::from(2);
                }
                Some(Ok(d)) => Some(d),
                None => None,
            };
            return lmr::many(&lite, lmr::Many { count, size, holders, threads, hold });
        }
        Command::RpcServe { id, threads, delay_ms, limit } => {
            return rpc::serve(&lite, id, threads, std::time::Duration::from_millis(delay_ms), limit)
        }
        Command::RpcCall {
            node,
            id,
            count,
            threads,
            size,
            reply,
            oneway,
            expect_error,
            timeout_ms,
            kernel_caller,
            echo,
        } => {
            let args = rpc::CallArgs {
                node,
                id,
                count,
                threads,
                size: size as usize,
                reply: reply as usize,
                oneway,
                expect_error,
                timeout: std::time::Duration::from_millis(timeout_ms),
                kernel_caller,
                echo,
            };
            return rpc::call(&lite, &args);
        }
        Command::RpcMulticast { nodes, id } => {
            return rpc::multicast(&lite, &nodes, id, std::time::Duration::from_secs(30))
        }
        Command::RpcHostile { node, id } => rpc::hostile(&lite, node, id),
        Command::AtomicCount { name, offset, threads, count, cas } => {
            return atomic::count(&lite, &atomic::Count { name, offset, threads, count, cas })
        }
        Command::AtomicRead { name, offset } => return atomic::read(&lite, &name, offset),
        Command::LockCount { name, offset, threads, count } => {
            return lock::count(&lite, &lock::Count { name, offset, threads, count })
        }
        Command::LockHold { name, offset } => return lock::hold(&lite, &name, offset),
        Command::LockAppend { name, offset, id } => return lock::append(&lite, &name, offset, id),
        Command::BarrierRounds { name, offset, participants, rounds, skew_ms, timeout_ms } => {
            return lock::rounds(&lite, &lock::Rounds { name, offset, participants, rounds, skew_ms, timeout_ms })
        }
        Command::LmrRace { name, role, seconds, threads, holders, size, json } => {
            return lmr_race::run(&lite, &lmr_race::Args { name, role, seconds, threads, holders, size, json })
        }
        Command::FailLoop { holder, seconds, threads } => {
            return fail_loop::run(&lite, &fail_loop::Args { holder, seconds, threads })
        }
        Command::FuzzUser { seed, count, nodes, processes } => {
            return fuzz_user::run(&fuzz_user::Args { seed, count, nodes, processes })
        }
        Command::Reach => return reach::run(&lite),
    };
    println!("{} passed, {} failed", checks.passed, checks.failed);
    if checks.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
