//! `user-hostile`: what an unprivileged local process could do to the kernel
//! before the fixes of issue 19, each as a regression check: zero sizes that
//! reached the page allocator, a local server's queue filled without bound, ioctls
//! that acted and then could not deliver their result, a thread locking a word
//! again through a second handle, and the per-file bounds. A kernel WARNING or
//! splat is caught by the suite's console check; this checks the errnos.

use crate::fuzz_user::alarm;
use crate::Checks;
use lite::uapi::*;
use lite::{Lite, MallocOptions, Perm};
use nix::errno::Errno;
use nix::sys::mman::{mmap_anonymous, mprotect, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::time::Duration;

const PAGE: usize = 4096;
/// A local server's queue takes this much from one file before EAGAIN (lite/rpc/:
/// `LOCAL_FILE_MAX`, one ring of a remote client: 8 MiB + 64 KiB).
const LOCAL_FILE_MAX: u64 = (8 << 20) | (64 << 10);
const MESSAGE: usize = 256 << 10;
/// Served at the peer by `lite-selftest rpc-serve` during the run, and served nowhere.
const SERVED: u32 = 4242;
const UNSERVED: u32 = 4241;

/// A page the process may read but not write: an ioctl argument there cannot
/// take the result.
struct ReadOnlyPage(NonNull<core::ffi::c_void>);

impl ReadOnlyPage {
    fn new<T>(contents: &T) -> ReadOnlyPage {
        let len = NonZeroUsize::new(PAGE).expect("page size");
        // SAFETY: a fresh anonymous mapping, unmapped in drop.
        let page =
            unsafe { mmap_anonymous(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }
                .expect("mmap");
        // SAFETY: the page is writable and larger than `T`.
        unsafe {
            std::ptr::copy_nonoverlapping(contents as *const T as *const u8, page.as_ptr() as *mut u8, size_of::<T>())
        };
        // SAFETY: the mapping made above.
        unsafe { mprotect(page, PAGE, ProtFlags::PROT_READ) }.expect("mprotect");
        ReadOnlyPage(page)
    }

    fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Drop for ReadOnlyPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        let _ = unsafe { munmap(self.0, PAGE) };
    }
}

fn name(bytes: &[u8]) -> [u8; 64] {
    let mut field = [0; 64];
    field[..bytes.len()].copy_from_slice(bytes);
    field
}

fn errno<T>(r: lite::Result<T>) -> Result<i32, Errno> {
    r.map(|_| 0).map_err(|e| e.errno())
}

/// PEER serves `SERVED` (`lite-selftest rpc-serve 4242`).
pub fn run(lite: &Lite, peer: u32) -> Checks {
    let mut c = Checks { failed: 0, passed: 0 };
    zero_sizes(lite, peer, &mut c);
    local_queue_is_bounded(lite, &mut c);
    results_are_delivered_or_undone(lite, &mut c);
    relock_through_second_handle(lite, &mut c);
    per_file_bounds(lite, &mut c);
    signals_leave_nothing_half_done(lite, peer, &mut c);
    c
}

/// Zero and huge sizes are refused before any allocation (a WARNING would fail the suite).
fn zero_sizes(lite: &Lite, peer: u32, c: &mut Checks) {
    let me = lite.node_id().unwrap_or(0);
    let mut rtt = [0u64; 1];
    for (node, reply_capacity, request_len) in
        [(me, 0, 0), (peer, 0, 0), (me, 0, 64), (me, 1 << 40, 0), (me, 0, 1 << 40)]
    {
        let mut bench = LiteRpcBench {
            node,
            id: UNSERVED,
            count: 1,
            timeout_ms: 100,
            request_len,
            reply_capacity,
            rtt_ns: rtt.as_mut_ptr() as u64,
            reply_len: 0,
        };
        let got = lite.raw_ioctl(LITE_IOC_RPC_BENCH, &mut bench as *mut _ as usize);
        let want: &[Errno] = if reply_capacity > LITE_RPC_MAX_MSG || request_len > LITE_RPC_MAX_MSG {
            &[Errno::EMSGSIZE]
        } else {
            // Nobody serves it.
            &[Errno::ECONNREFUSED, Errno::ETIMEDOUT]
        };
        c.expect_one_of(&format!("RPC_BENCH to {node}: reply {reply_capacity}, request {request_len}"), got, want);
    }
    // No input bytes from a page-aligned pointer, with an output of many pages so
    // that the request is not staged inline: nothing may be pinned for the input.
    let mut output = vec![0u8; 4 << 20];
    let input = output.as_ptr() as usize & !(PAGE - 1);
    let mut call = LiteRpcCall {
        node: peer,
        id: SERVED,
        input: (input + PAGE) as u64,
        input_len: 0,
        output: output.as_mut_ptr() as u64,
        output_len: output.len() as u64,
        timeout_ms: 200,
        slot: 1,
        ..Default::default()
    };
    let got = lite.raw_ioctl(LITE_IOC_RPC_CALL, &mut call as *mut _ as usize);
    c.expect("RPC_CALL with no input and a 4 MiB output", got, Ok(()));
    let mut wait = LiteWait { slot: 1, reserved: 0 };
    let _ = lite.raw_ioctl(LITE_IOC_WAIT, &mut wait as *mut _ as usize);
    let mut msg = LiteRpcCall {
        node: me,
        id: UNSERVED,
        input: 0,
        input_len: 0,
        timeout_ms: 100,
        flags: LITE_RPC_ONEWAY,
        ..Default::default()
    };
    let got = lite.raw_ioctl(LITE_IOC_RPC_CALL, &mut msg as *mut _ as usize);
    c.expect("empty message to an unserved local id", got, Err(Errno::ECONNREFUSED));
}

/// One-way messages to a local server that never receives stop at the sender's
/// bound with EAGAIN, and flow again once the server receives.
fn local_queue_is_bounded(lite: &Lite, c: &mut Checks) {
    let id = 4243;
    let me = lite.node_id().unwrap_or(0);
    if let Err(e) = lite.register_rpc(id) {
        c.expect("register a local server", Err(e.errno()), Ok(()));
        return;
    }
    let message = vec![0x5au8; MESSAGE];
    let mut accepted = 0u64;
    let refused = loop {
        match lite.send(me, id, &message, Duration::from_secs(5)) {
            Ok(()) => accepted += MESSAGE as u64,
            Err(e) => break Some(e.errno()),
        }
        if accepted > 128 << 20 {
            break None;
        }
    };
    c.expect(
        "messages to a local server that never receives end in EAGAIN",
        refused.map_or(Ok(0), Err),
        Err(Errno::EAGAIN),
    );
    let bounded = (LOCAL_FILE_MAX / 2..=LOCAL_FILE_MAX).contains(&accepted);
    c.expect(
        &format!("bytes queued before EAGAIN ({accepted}) within the bound ({LOCAL_FILE_MAX})"),
        if bounded { Ok(0) } else { Err(Errno::ENOBUFS) },
        Ok(()),
    );
    let mut buf = vec![0u8; MESSAGE];
    c.expect("the server receives one", errno(lite.recv_rpc(id, &mut buf, Duration::from_secs(5))), Ok(()));
    c.expect("then a message fits again", errno(lite.send(me, id, &message, Duration::from_secs(5))), Ok(()));
    c.expect("unregister drops what is queued", errno(lite.unregister_rpc(id)), Ok(()));
    c.expect("and gives the bound back", errno(lite.register_rpc(id)), Ok(()));
    c.expect("a message after re-registering", errno(lite.send(me, id, &message, Duration::from_secs(5))), Ok(()));
    let _ = lite.unregister_rpc(id);
}

/// An ioctl whose argument cannot take the result fails with EFAULT and leaves
/// nothing behind: no LMR, no handle, no taken name, no call, no consumed request.
fn results_are_delivered_or_undone(lite: &Lite, c: &mut Checks) {
    let before = lite.mem_stat().ok();
    let malloc = LiteMalloc {
        size: 8192,
        perm: LITE_PERM_READ | LITE_PERM_WRITE,
        name: name(b"hostile-copyout"),
        ..Default::default()
    };
    let page = ReadOnlyPage::new(&malloc);
    c.expect("MALLOC into a read-only argument", lite.raw_ioctl(LITE_IOC_MALLOC, page.addr()), Err(Errno::EFAULT));
    let lmr = lite.malloc(8192, "hostile-copyout", &MallocOptions::default());
    let got = match &lmr {
        Ok(_) => Ok(0),
        Err(e) => Err(e.errno()),
    };
    c.expect("the name is free afterwards", got, Ok(()));
    let map = LiteMap { perm: LITE_PERM_READ, name: name(b"hostile-copyout"), ..Default::default() };
    let page = ReadOnlyPage::new(&map);
    c.expect("MAP into a read-only argument", lite.raw_ioctl(LITE_IOC_MAP, page.addr()), Err(Errno::EFAULT));
    let mut buf = vec![0u8; PAGE];
    let register = LiteRegister {
        buf: buf.as_mut_ptr() as u64,
        len: PAGE as u64,
        perm: LITE_PERM_READ,
        name: name(b"hostile-register"),
        ..Default::default()
    };
    let page = ReadOnlyPage::new(&register);
    c.expect("REGISTER into a read-only argument", lite.raw_ioctl(LITE_IOC_REGISTER, page.addr()), Err(Errno::EFAULT));
    if let Ok(lmr) = lmr {
        c.expect("free the LMR", errno(lmr.free()), Ok(()));
    }
    let after = lite.mem_stat().ok();
    let same = match (before, after) {
        (Some(b), Some(a)) => b.mastered == a.mastered && b.mappings == a.mappings,
        _ => false,
    };
    c.expect("no LMR or mapping is left behind", if same { Ok(0) } else { Err(Errno::EEXIST) }, Ok(()));

    // A call whose argument cannot take its sequence number is not sent.
    let id = 4244;
    let me = lite.node_id().unwrap_or(0);
    if lite.register_rpc(id).is_ok() {
        let input = [7u8; 32];
        let call = LiteRpcCall {
            node: me,
            id,
            input: input.as_ptr() as u64,
            input_len: 32,
            timeout_ms: 1000,
            slot: 2,
            ..Default::default()
        };
        let page = ReadOnlyPage::new(&call);
        c.expect(
            "RPC_CALL into a read-only argument",
            lite.raw_ioctl(LITE_IOC_RPC_CALL, page.addr()),
            Err(Errno::EFAULT),
        );
        let mut buf = [0u8; 64];
        let got = errno(lite.recv_rpc(id, &mut buf, Duration::from_millis(200)));
        c.expect("nothing reached the server", got, Err(Errno::ETIMEDOUT));
        let recv = LiteRpcRecv { id, buf: buf.as_mut_ptr() as u64, buf_len: 64, timeout_ms: 100, ..Default::default() };
        let page = ReadOnlyPage::new(&recv);
        c.expect(
            "RPC_RECV into a read-only argument",
            lite.raw_ioctl(LITE_IOC_RPC_RECV, page.addr()),
            Err(Errno::EFAULT),
        );
        let _ = lite.unregister_rpc(id);
    }
}

/// The same thread locking a word it holds, through another handle of the LMR:
/// EDEADLK, not a wait for itself. A handle a lock is held through stays mapped.
fn relock_through_second_handle(lite: &Lite, c: &mut Checks) {
    let Ok(lmr) = lite.malloc(4096, "hostile-relock", &MallocOptions::default()) else {
        c.expect("malloc for the relock check", Err(Errno::ENOMEM), Ok(()));
        return;
    };
    let second = match lite.map("hostile-relock", Perm::READ | Perm::WRITE, 0) {
        Ok(h) => h,
        Err(e) => {
            c.expect("second handle", Err(e.errno()), Ok(()));
            return;
        }
    };
    let mut lock = LiteLock { lh: lmr.lh(), offset: 64, op: LITE_LOCK_ACQUIRE, reserved: 0 };
    c.expect("lock through the first handle", lite.raw_ioctl(LITE_IOC_LOCK, &mut lock as *mut _ as usize), Ok(()));
    let mut again = LiteLock { lh: second.lh(), offset: 64, op: LITE_LOCK_ACQUIRE, reserved: 0 };
    c.expect(
        "lock again through the second handle",
        lite.raw_ioctl(LITE_IOC_LOCK, &mut again as *mut _ as usize),
        Err(Errno::EDEADLK),
    );
    let mut unmap = LiteHandle { lh: lmr.lh() };
    c.expect(
        "unmap the handle a lock is held through",
        lite.raw_ioctl(LITE_IOC_UNMAP, &mut unmap as *mut _ as usize),
        Err(Errno::EBUSY),
    );
    lock.op = LITE_LOCK_RELEASE;
    c.expect("unlock", lite.raw_ioctl(LITE_IOC_LOCK, &mut lock as *mut _ as usize), Ok(()));
    drop(second);
    c.expect("free", errno(lmr.free()), Ok(()));
}

/// Per-file bounds: RPC ids a file serves.
fn per_file_bounds(lite: &Lite, c: &mut Checks) {
    let mut registered = Vec::new();
    let refused = (5000..5300).find_map(|id| match lite.register_rpc(id) {
        Ok(()) => {
            registered.push(id);
            None
        }
        Err(e) => Some(e.errno()),
    });
    c.expect("a file serves at most 256 ids", refused.map_or(Ok(0), Err), Err(Errno::ENOSPC));
    c.expect("exactly 256", if registered.len() == 256 { Ok(0) } else { Err(Errno::ERANGE) }, Ok(()));
    for id in registered {
        let _ = lite.unregister_rpc(id);
    }
}

/// LMRs held at PEER allocated and freed while signals keep interrupting the
/// caller: a signal may end the call with EINTR, but never halfway, with memory
/// allocated at the holder that no LMR owns (the suite then checks that every
/// node holds nothing). The fuzz suite found this at random; here it is every time.
fn signals_leave_nothing_half_done(lite: &Lite, peer: u32, c: &mut Checks) {
    const ROUNDS: u32 = 80;
    let opts = MallocOptions { holders: vec![peer], ..Default::default() };
    let (mut made, mut interrupted) = (0, 0);
    for round in 0..ROUNDS {
        // Periods from 0.2 to 200 ms, so that signals land in every phase of the calls
        // on release and debug kernels alike (a debug kernel's lookup alone can take 20 ms).
        let period = 200 + (round as libc::suseconds_t * 49_999) % 200_000;
        if let Err(e) = alarm(period) {
            c.expect("interval timer", Err(e), Ok(()));
            return;
        }
        match lite.malloc(4 << 20, &format!("hostile-signal-{round}"), &opts) {
            Ok(lmr) => {
                made += 1;
                if lmr.free().is_err() {
                    interrupted += 1;
                }
            }
            Err(e) if e.errno() == Errno::EINTR => interrupted += 1,
            Err(e) => {
                let _ = alarm(0);
                c.expect("malloc at the peer under signals", Err(e.errno()), Ok(()));
                return;
            }
        }
    }
    let _ = alarm(0);
    println!("    {ROUNDS} mallocs of 4 MiB at node {peer} under SIGALRM every 0.2-200 ms: {made} made, {interrupted} calls interrupted");
    c.expect("some LMRs were made under signals", if made > 0 { Ok(0) } else { Err(Errno::EINTR) }, Ok(()));
}
