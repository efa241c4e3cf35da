//! `lmr-hostile`: the LMR ioctls (atomics included), raw, against unknown and foreign handles, bad
//! ranges, sizes, buffers, names, permission bits and nodes, missing permissions
//! and freed LMRs; each must fail with the errno the ABI documents (uapi/src/abi/mod.rs).
//!
//! Assumptions beyond the ABI text: node 15 (or the highest id that is neither this
//! node nor a peer) is absent, and its bit at malloc gives EHOSTDOWN or ENOENT (the
//! kernel may see it as a down node or as no node at all); unmapping a handle of a
//! freed LMR succeeds; a freed LMR's name can no longer be mapped (ENOENT); a grant
//! of no permission to a node stops it from mapping (EACCES).

use crate::{Checks, KERNEL_ADDR};
use lite::uapi::*;
use lite::Lite;
use nix::errno::Errno;
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;

type Got = Result<i32, Errno>;

const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;
const R: u32 = LITE_PERM_READ;
const W: u32 = LITE_PERM_WRITE;
const RW: u32 = LITE_PERM_READ | LITE_PERM_WRITE;

/// A name field holding `bytes` (cut at 64: malformed names are the point).
fn name_field(bytes: &[u8]) -> [u8; 64] {
    let mut field = [0; 64];
    let len = bytes.len().min(64);
    field[..len].copy_from_slice(&bytes[..len]);
    field
}

/// Raw LMR ioctls on one open of /dev/lite.
pub(crate) struct Raw<'a>(pub(crate) &'a Lite);

impl Raw<'_> {
    fn io<T>(&self, cmd: u32, arg: &mut T) -> Got {
        self.0.raw_ioctl(cmd, arg as *mut T as usize)
    }

    /// The result and the handle.
    fn malloc_ns(&self, size: u64, nodes: u32, perm: u32, namespace: u32, name: &[u8]) -> (Got, u64) {
        let mut arg = LiteMalloc { size, nodes, perm, namespace, name: name_field(name), ..Default::default() };
        (self.io(LITE_IOC_MALLOC, &mut arg), arg.lh)
    }

    pub(crate) fn malloc(&self, size: u64, nodes: u32, perm: u32, name: &[u8]) -> (Got, u64) {
        self.malloc_ns(size, nodes, perm, 0, name)
    }

    fn map_ns(&self, name: &[u8], perm: u32, namespace: u32) -> (Got, u64) {
        let mut arg = LiteMap { namespace, perm, name: name_field(name), ..Default::default() };
        (self.io(LITE_IOC_MAP, &mut arg), arg.lh)
    }

    pub(crate) fn map(&self, name: &[u8], perm: u32) -> (Got, u64) {
        self.map_ns(name, perm, 0)
    }

    pub(crate) fn read(&self, lh: u64, offset: u64, buf: u64, len: u64) -> Got {
        self.io(LITE_IOC_READ, &mut LiteRw { lh, offset, buf, len })
    }

    pub(crate) fn write(&self, lh: u64, offset: u64, buf: u64, len: u64) -> Got {
        self.io(LITE_IOC_WRITE, &mut LiteRw { lh, offset, buf, len })
    }

    fn memset(&self, lh: u64, offset: u64, len: u64, value: u32) -> Got {
        self.io(LITE_IOC_MEMSET, &mut LiteMemset { lh, offset, len, value, reserved: 0 })
    }

    fn memcpy(&self, dst_lh: u64, dst_offset: u64, src_lh: u64, src_offset: u64, len: u64) -> Got {
        self.io(LITE_IOC_MEMCPY, &mut LiteMemcpy { dst_lh, dst_offset, src_lh, src_offset, len })
    }

    fn grant(&self, lh: u64, node: u32, perm: u32) -> Got {
        self.io(LITE_IOC_GRANT, &mut LiteGrant { lh, node, perm })
    }

    pub(crate) fn free(&self, lh: u64) -> Got {
        self.io(LITE_IOC_FREE, &mut LiteHandle { lh })
    }

    fn unmap(&self, lh: u64) -> Got {
        self.io(LITE_IOC_UNMAP, &mut LiteHandle { lh })
    }

    /// The result and the old value.
    fn atomic(&self, lh: u64, offset: u64, op: u32, operand: u64, swap: u64) -> (Got, u64) {
        let mut arg = LiteAtomic { lh, offset, op, operand, swap, ..Default::default() };
        (self.io(LITE_IOC_ATOMIC, &mut arg), arg.old)
    }

    fn stat(&self, lh: u64) -> (Got, LiteLmrStat) {
        let mut arg = LiteLmrStat { lh, ..Default::default() };
        (self.io(LITE_IOC_LMR_STAT, &mut arg), arg)
    }
}

/// Anonymous memory for buffer checks, unmapped on drop.
struct Mapping {
    addr: std::ptr::NonNull<std::ffi::c_void>,
    len: usize,
}

impl Mapping {
    fn new(pages: usize, prot: ProtFlags) -> Result<Mapping, Errno> {
        let len = pages * PAGE as usize;
        let size = NonZeroUsize::new(len).ok_or(Errno::EINVAL)?;
        // SAFETY: a fresh private anonymous mapping; only its address is used here.
        let addr = unsafe { mmap_anonymous(None, size, prot, MapFlags::MAP_PRIVATE) }?;
        Ok(Mapping { addr, len })
    }

    fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// Unmaps every page from `page` on, leaving a hole after the rest.
    fn cut(&mut self, page: usize) -> Result<(), Errno> {
        let keep = page * PAGE as usize;
        // SAFETY: the tail of our own mapping; nothing refers to it.
        unsafe { munmap(self.addr.byte_add(keep), self.len - keep) }?;
        self.len = keep;
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping with its current length.
        let _ = unsafe { munmap(self.addr, self.len) };
    }
}

/// The LMRs most checks aim at: one on this node, one at PEER (whose data path pins
/// user pages and sends them over RDMA).
struct Targets {
    local: u64,
    remote: u64,
    local_name: Vec<u8>,
}

pub fn run(lite: &Lite, peer: u32) -> Checks {
    let mut c = Checks { failed: 0, passed: 0 };
    let raw = Raw(lite);
    let (me, peers) = match lite.node_id().and_then(|me| Ok((me, lite.peers()?))) {
        Ok(v) => v,
        Err(e) => {
            c.fail(&format!("this node and its peers: {e}"));
            return c;
        }
    };
    if peer >= LITE_MAX_NODES || peer == me {
        c.fail(&format!("PEER must be another node's id (below {LITE_MAX_NODES}), not {peer}"));
        return c;
    }
    let pid = std::process::id();
    let name = |tag: &str| format!("hostile-{pid}-{tag}").into_bytes();

    let local_name = name("local");
    let (got_local, local) = raw.malloc(MIB, 0, RW, &local_name);
    c.expect("malloc 1 MiB here", got_local, Ok(()));
    let (got_remote, remote) = raw.malloc(MIB, 1 << peer, RW, &name("peer"));
    c.expect("malloc 1 MiB at PEER", got_remote, Ok(()));
    // Nothing below means anything without them.
    if got_local.is_err() || got_remote.is_err() {
        return c;
    }
    let t = Targets { local, remote, local_name };

    round_trips(&mut c, &raw, &t, me, peer);
    handles(&mut c, &raw, &t);
    ranges(&mut c, &raw, &t);
    sizes(&mut c, &raw, me, peer, &name);
    buffers(&mut c, &raw, &t);
    arguments(&mut c, &raw, &t, &name);
    let absent = (0..LITE_MAX_NODES).rev().find(|&n| n != me && peers.iter().all(|p| p.id != n));
    if let Some(absent) = absent {
        let (got, _) = raw.malloc(MIB, 1 << absent, RW, &name("absent"));
        c.expect_one_of(
            &format!("malloc at node {absent}, not in the cluster"),
            got,
            &[Errno::EHOSTDOWN, Errno::ENOENT],
        );
        let (got, _) = raw.malloc(MIB, 1 << absent | 1 << me, RW, &name("absent-and-here"));
        c.expect_one_of(
            &format!("malloc spread over this node and node {absent}, not in the cluster"),
            got,
            &[Errno::EHOSTDOWN, Errno::ENOENT],
        );
    }
    atomics(&mut c, &raw, &t);
    permissions(&mut c, &raw, me, &name);
    lifetime(&mut c, &raw, &name);
    register(&mut c, &raw, &name);

    c.expect("free the LMR here", raw.free(t.local), Ok(()));
    c.expect("free the LMR at PEER", raw.free(t.remote), Ok(()));
    c
}

/// Atomics here (loopback through the RNIC) and at PEER: they work and return the old
/// value, and bad words, ops and handles are refused.
fn atomics(c: &mut Checks, raw: &Raw<'_>, t: &Targets) {
    for (lh, at) in [(t.local, "here"), (t.remote, "at PEER")] {
        let start: u64 = 5 << 40;
        let word = 7 * 8;
        let mut value = start.to_le_bytes();
        c.expect(&format!("write a word {at}"), raw.write(lh, word, value.as_mut_ptr() as u64, 8), Ok(()));
        let (got, old) = raw.atomic(lh, word, LITE_ATOMIC_FETCH_ADD, 3, 0);
        c.expect(&format!("fetch-add {at}"), got, Ok(()));
        let (got, old_after_add) = raw.atomic(lh, word, LITE_ATOMIC_COMPARE_SWAP, start, 1);
        c.expect(&format!("compare-and-swap that must miss {at}"), got, Ok(()));
        let (got, old_after_miss) = raw.atomic(lh, word, LITE_ATOMIC_COMPARE_SWAP, start + 3, 9);
        c.expect(&format!("compare-and-swap that must hit {at}"), got, Ok(()));
        c.expect(&format!("read the word back {at}"), raw.read(lh, word, value.as_mut_ptr() as u64, 8), Ok(()));
        let seen = [old, old_after_add, old_after_miss, u64::from_le_bytes(value)];
        if seen != [start, start + 3, start + 3, 9] {
            c.fail(&format!(
                "atomics {at}: old values and final word {seen:?}, want [{start}, {}, {}, 9]",
                start + 3,
                start + 3
            ));
        }
        let size = MIB;
        for (what, offset) in [("offset 4", 4), ("offset 1", 1), ("the last 4 bytes", size - 4)] {
            let (got, _) = raw.atomic(lh, offset, LITE_ATOMIC_FETCH_ADD, 1, 0);
            c.expect(&format!("fetch-add at {what} (misaligned) {at}"), got, Err(Errno::EINVAL));
        }
        for (what, offset) in [("the size", size), ("u64::MAX - 7", u64::MAX - 7)] {
            let (got, _) = raw.atomic(lh, offset, LITE_ATOMIC_COMPARE_SWAP, 0, 1);
            c.expect(&format!("compare-and-swap at {what} {at}"), got, Err(Errno::ERANGE));
        }
        c.expect(&format!("atomic op 0 {at}"), raw.atomic(lh, 0, 0, 1, 0).0, Err(Errno::EINVAL));
        c.expect(&format!("atomic op 3 {at}"), raw.atomic(lh, 0, 3, 1, 0).0, Err(Errno::EINVAL));
        c.expect(
            &format!("fetch-add with a swap value {at}"),
            raw.atomic(lh, 0, LITE_ATOMIC_FETCH_ADD, 1, 2).0,
            Err(Errno::EINVAL),
        );
        let mut arg = LiteAtomic { lh, op: LITE_ATOMIC_FETCH_ADD, reserved: 1, ..Default::default() };
        c.expect(&format!("atomic with reserved bits {at}"), raw.io(LITE_IOC_ATOMIC, &mut arg), Err(Errno::EINVAL));
    }
    c.expect(
        "fetch-add on an unknown handle",
        raw.atomic(0xdead_beef, 0, LITE_ATOMIC_FETCH_ADD, 1, 0).0,
        Err(Errno::EBADF),
    );
    c.expect("atomic with a kernel-space argument", raw.0.raw_ioctl(LITE_IOC_ATOMIC, KERNEL_ADDR), Err(Errno::EFAULT));
}

/// Valid transfers work, so that the failures below are about the arguments.
fn round_trips(c: &mut Checks, raw: &Raw<'_>, t: &Targets, me: u32, peer: u32) {
    let data: Vec<u8> = (0..PAGE as usize).map(|i| (i * 7 + i / 251) as u8).collect();
    for (lh, at) in [(t.local, "here"), (t.remote, "at PEER")] {
        let mut back = vec![0u8; data.len()];
        c.expect(&format!("write a page {at}"), raw.write(lh, 100, data.as_ptr() as u64, PAGE), Ok(()));
        c.expect(&format!("read a page {at}"), raw.read(lh, 100, back.as_mut_ptr() as u64, PAGE), Ok(()));
        if back != data {
            c.fail(&format!("the page read back {at} differs from the one written"));
        }
    }
    c.expect("memcpy from here to PEER", raw.memcpy(t.remote, 5000, t.local, 100, PAGE), Ok(()));
    let mut back = vec![0u8; data.len()];
    c.expect("read the copy at PEER", raw.read(t.remote, 5000, back.as_mut_ptr() as u64, PAGE), Ok(()));
    if back != data {
        c.fail("the page memcpy'd to PEER differs from its source");
    }
    let (got, stat) = raw.stat(t.remote);
    c.expect("stat the LMR at PEER", got, Ok(()));
    if stat.size != MIB || stat.perm != LITE_PERM_ALL || stat.master_node != me || stat.holders != 1 << peer {
        c.fail(&format!(
            "stat of the master handle at PEER: size {}, perm {}, master {}, holders {:#x}; want {MIB}, {LITE_PERM_ALL}, {me}, {:#x}",
            stat.size, stat.perm, stat.master_node, stat.holders, 1u32 << peer
        ));
    }
}

fn handles(c: &mut Checks, raw: &Raw<'_>, t: &Targets) {
    let mut buf = [0u8; 16];
    let b = buf.as_mut_ptr() as u64;
    let all_ops = |raw: &Raw<'_>, lh: u64| -> Vec<(&'static str, Got)> {
        vec![
            ("read", raw.read(lh, 0, b, 16)),
            ("write", raw.write(lh, 0, b, 16)),
            ("memset", raw.memset(lh, 0, 16, 0)),
            ("memcpy into", raw.memcpy(lh, 0, t.local, 0, 16)),
            ("memcpy from", raw.memcpy(t.local, 0, lh, 0, 16)),
            ("grant", raw.grant(lh, LITE_NODE_ANY, R)),
            ("stat", raw.stat(lh).0),
            ("unmap", raw.unmap(lh)),
            ("free", raw.free(lh)),
        ]
    };
    for bad in [0, 0xdead_beef_0000_0001] {
        for (op, got) in all_ops(raw, bad) {
            c.expect(&format!("{op} with unknown handle {bad:#x}"), got, Err(Errno::EBADF));
        }
    }
    match Lite::open() {
        Ok(other) => {
            let other = Raw(&other);
            let b = buf.as_mut_ptr() as u64;
            let foreign = [
                ("read", other.read(t.local, 0, b, 16)),
                ("write", other.write(t.local, 0, b, 16)),
                ("memset", other.memset(t.local, 0, 16, 0)),
                ("memcpy", other.memcpy(t.local, 0, t.local, 64, 16)),
                ("grant", other.grant(t.local, LITE_NODE_ANY, R)),
                ("stat", other.stat(t.local).0),
                ("unmap", other.unmap(t.local)),
                ("free", other.free(t.local)),
            ];
            for (op, got) in foreign {
                c.expect(&format!("{op} with a handle of another open of /dev/lite"), got, Err(Errno::EBADF));
            }
        }
        Err(e) => c.fail(&format!("open /dev/lite a second time: {e}")),
    }
    c.expect("the handle still works where it was obtained", raw.read(t.local, 0, b, 16), Ok(()));
}

fn ranges(c: &mut Checks, raw: &Raw<'_>, t: &Targets) {
    let mut buf = [0u8; 16];
    let b = buf.as_mut_ptr() as u64;
    let lh = t.local;
    c.expect("read the last byte", raw.read(lh, MIB - 1, b, 1), Ok(()));
    c.expect("read at offset == size", raw.read(lh, MIB, b, 1), Err(Errno::ERANGE));
    c.expect("write at offset == size", raw.write(lh, MIB, b, 1), Err(Errno::ERANGE));
    c.expect("read across the end", raw.read(lh, MIB - 1, b, 2), Err(Errno::ERANGE));
    c.expect("read with offset + len overflowing", raw.read(lh, 1, b, u64::MAX), Err(Errno::ERANGE));
    c.expect("write at offset 2^64 - 1", raw.write(lh, u64::MAX, b, 2), Err(Errno::ERANGE));
    c.expect("memset at offset == size", raw.memset(lh, MIB, 1, 0), Err(Errno::ERANGE));
    c.expect("memset with offset + len overflowing", raw.memset(lh, 8, u64::MAX - 4, 0), Err(Errno::ERANGE));
    c.expect("memcpy to beyond the end", raw.memcpy(lh, MIB, lh, 0, 1), Err(Errno::ERANGE));
    c.expect("memcpy from beyond the end", raw.memcpy(lh, 0, lh, MIB - 1, 2), Err(Errno::ERANGE));
    c.expect("memcpy with src offset + len overflowing", raw.memcpy(lh, 0, lh, u64::MAX, 1), Err(Errno::ERANGE));
    c.expect("read 0 bytes", raw.read(lh, 0, b, 0), Err(Errno::EINVAL));
    c.expect("write 0 bytes", raw.write(lh, 0, b, 0), Err(Errno::EINVAL));
    c.expect("memset 0 bytes", raw.memset(lh, 0, 0, 0), Err(Errno::EINVAL));
    c.expect("memcpy 0 bytes", raw.memcpy(lh, 0, lh, 8, 0), Err(Errno::EINVAL));
}

fn sizes(c: &mut Checks, raw: &Raw<'_>, me: u32, peer: u32, name: &dyn Fn(&str) -> Vec<u8>) {
    c.expect("malloc 0 bytes", raw.malloc(0, 0, RW, &name("size0")).0, Err(Errno::EINVAL));
    let (got, _) = raw.malloc(LITE_LMR_MAX_SIZE + 1, 0, RW, &name("huge"));
    c.expect("malloc LITE_LMR_MAX_SIZE + 1", got, Err(Errno::ENOMEM));
    let (got, _) = raw.malloc(64 << 30, 1 << peer, RW, &name("64g"));
    c.expect("malloc 64 GiB at PEER", got, Err(Errno::ENOMEM));
    // Both holders refuse while the other's answer is still coming.
    let (got, _) = raw.malloc(64 << 30, 1 << peer | 1 << me, RW, &name("64g-spread"));
    c.expect("malloc 64 GiB spread over this node and PEER", got, Err(Errno::ENOMEM));
    // A failed allocation must give back what it had: a normal one still works.
    let (got, lh) = raw.malloc(MIB, 1 << peer, RW, &name("after64g"));
    c.expect("malloc 1 MiB at PEER after the failed 64 GiB", got, Ok(()));
    if got.is_ok() {
        c.expect("free it", raw.free(lh), Ok(()));
    }
}

fn buffers(c: &mut Checks, raw: &Raw<'_>, t: &Targets) {
    for (lh, at) in [(t.local, "here"), (t.remote, "at PEER")] {
        for (addr, what) in [(0, "NULL"), (KERNEL_ADDR as u64, "a kernel address"), (0x10, "unmapped memory")] {
            c.expect(&format!("read {at} into {what}"), raw.read(lh, 0, addr, PAGE), Err(Errno::EFAULT));
            c.expect(&format!("write {at} from {what}"), raw.write(lh, 0, addr, PAGE), Err(Errno::EFAULT));
        }
        match Mapping::new(2, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE).and_then(|mut m| m.cut(1).map(|()| m)) {
            Ok(half) => {
                let what = "a buffer whose second page is unmapped";
                c.expect(
                    &format!("read {at} 2 pages into {what}"),
                    raw.read(lh, 0, half.addr(), 2 * PAGE),
                    Err(Errno::EFAULT),
                );
                c.expect(
                    &format!("write {at} 2 pages from {what}"),
                    raw.write(lh, 0, half.addr(), 2 * PAGE),
                    Err(Errno::EFAULT),
                );
            }
            Err(e) => c.fail(&format!("mmap 2 pages and unmap one: {e}")),
        }
        match Mapping::new(1, ProtFlags::PROT_READ) {
            Ok(ro) => c.expect(
                &format!("read {at} into read-only memory"),
                raw.read(lh, 0, ro.addr(), PAGE),
                Err(Errno::EFAULT),
            ),
            Err(e) => c.fail(&format!("mmap a read-only page: {e}")),
        }
    }
    c.expect("read with its argument at NULL", raw.0.raw_ioctl(LITE_IOC_READ, 0), Err(Errno::EFAULT));
    c.expect(
        "malloc with its argument in the kernel",
        raw.0.raw_ioctl(LITE_IOC_MALLOC, KERNEL_ADDR),
        Err(Errno::EFAULT),
    );
    c.expect("map with its argument in unmapped memory", raw.0.raw_ioctl(LITE_IOC_MAP, 0x10), Err(Errno::EFAULT));
}

/// LT_register of buffers that are not the caller's writable memory, or too large.
fn register(c: &mut Checks, raw: &Raw<'_>, name: &dyn Fn(&str) -> Vec<u8>) {
    let reg = |buf: u64, len: u64, tag: &str| {
        let mut arg = LiteRegister { buf, len, perm: RW, name: name_field(&name(tag)), ..Default::default() };
        (raw.io(LITE_IOC_REGISTER, &mut arg), arg.lh)
    };
    for (addr, what) in [(0, "NULL"), (KERNEL_ADDR as u64, "a kernel address"), (0x10, "unmapped memory")] {
        c.expect(&format!("register {what}"), reg(addr, PAGE, "bad").0, Err(Errno::EFAULT));
    }
    match Mapping::new(1, ProtFlags::PROT_READ) {
        Ok(ro) => c.expect("register read-only memory", reg(ro.addr(), PAGE, "ro").0, Err(Errno::EFAULT)),
        Err(e) => c.fail(&format!("mmap a read-only page: {e}")),
    }
    match Mapping::new(2, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE).and_then(|mut m| m.cut(1).map(|()| m)) {
        Ok(half) => c.expect(
            "register 2 pages whose second is unmapped",
            reg(half.addr(), 2 * PAGE, "half").0,
            Err(Errno::EFAULT),
        ),
        Err(e) => c.fail(&format!("mmap 2 pages and unmap one: {e}")),
    }
    c.expect("register 0 bytes", reg(0x1000, 0, "empty").0, Err(Errno::EINVAL));
    c.expect(
        "register more than LITE_REGISTER_MAX_SIZE",
        reg(0x1000, LITE_REGISTER_MAX_SIZE + 1, "huge").0,
        Err(Errno::ENOMEM),
    );
    match Mapping::new(3, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE) {
        Ok(good) => {
            let (got, lh) = reg(good.addr() + 100, 2 * PAGE, "good");
            c.expect("register 2 pages at an unaligned address", got, Ok(()));
            if got.is_ok() {
                c.expect("read the registered buffer through its handle", raw.read(lh, 0, good.addr(), 16), Ok(()));
                c.expect("free it", raw.free(lh), Ok(()));
            }
        }
        Err(e) => c.fail(&format!("mmap 3 pages: {e}")),
    }
}

/// Names, permission bits, nodes, namespaces, reserved fields, memset values.
fn arguments(c: &mut Checks, raw: &Raw<'_>, t: &Targets, name: &dyn Fn(&str) -> Vec<u8>) {
    for (bad, what) in
        [(&b""[..], "an empty name"), (&[b'a'; 64][..], "64 bytes without NUL"), (b"ab\0cd", "a NUL inside")]
    {
        c.expect(&format!("malloc with {what}"), raw.malloc(PAGE, 0, RW, bad).0, Err(Errno::EINVAL));
        c.expect(&format!("map with {what}"), raw.map(bad, R).0, Err(Errno::EINVAL));
    }
    let longest = [b'n'; 63];
    let (got, lh) = raw.malloc(PAGE, 0, RW, &longest);
    c.expect("malloc with a 63-byte name", got, Ok(()));
    if got.is_ok() {
        c.expect("free it", raw.free(lh), Ok(()));
    }

    c.expect("malloc with perm bit 8", raw.malloc(PAGE, 0, 8, &name("perm8")).0, Err(Errno::EINVAL));
    c.expect("map with perm bit 8", raw.map(&t.local_name, 8).0, Err(Errno::EINVAL));
    c.expect("map with no permission", raw.map(&t.local_name, 0).0, Err(Errno::EINVAL));
    c.expect("grant perm bit 8", raw.grant(t.local, LITE_NODE_ANY, 8), Err(Errno::EINVAL));
    c.expect("grant to node LITE_MAX_NODES", raw.grant(t.local, LITE_MAX_NODES, R), Err(Errno::EINVAL));
    c.expect("malloc at node bit 16", raw.malloc(PAGE, 1 << 16, RW, &name("node16")).0, Err(Errno::EINVAL));

    c.expect("map an unknown name", raw.map(&name("nonexistent"), R).0, Err(Errno::ENOENT));
    c.expect("malloc a name that is taken", raw.malloc(PAGE, 0, RW, &t.local_name).0, Err(Errno::EEXIST));
    c.expect("map the name in another namespace", raw.map_ns(&t.local_name, R, 1).0, Err(Errno::ENOENT));
    let (got, lh) = raw.malloc_ns(PAGE, 0, RW, 1, &t.local_name);
    c.expect("malloc the name in another namespace", got, Ok(()));
    if got.is_ok() {
        c.expect("free it", raw.free(lh), Ok(()));
    }

    let mut arg =
        LiteMalloc { size: PAGE, perm: RW, reserved: 1, name: name_field(&name("reserved")), ..Default::default() };
    c.expect("malloc with the reserved field set", raw.io(LITE_IOC_MALLOC, &mut arg), Err(Errno::EINVAL));
    let mut arg = LiteMemset { lh: t.local, offset: 0, len: 16, value: 0, reserved: 1 };
    c.expect("memset with the reserved field set", raw.io(LITE_IOC_MEMSET, &mut arg), Err(Errno::EINVAL));
    c.expect("memset value 256", raw.memset(t.local, 0, 16, 256), Err(Errno::EINVAL));
}

/// Handles keep the permissions they were mapped with; the master decides what a
/// map gets; only the master grants and frees.
fn permissions(c: &mut Checks, raw: &Raw<'_>, me: u32, name: &dyn Fn(&str) -> Vec<u8>) {
    let mut buf = [0u8; 16];
    let b = buf.as_mut_ptr() as u64;
    let ro_name = name("ro");
    let (got_master, master) = raw.malloc(MIB, 0, R, &ro_name);
    c.expect("malloc an LMR others may only read", got_master, Ok(()));
    let (got_ro, ro) = raw.map(&ro_name, R);
    c.expect("map it for reading", got_ro, Ok(()));
    if got_master.is_err() || got_ro.is_err() {
        return;
    }
    c.expect("map it for writing", raw.map(&ro_name, W).0, Err(Errno::EACCES));
    c.expect("map it for reading and writing", raw.map(&ro_name, RW).0, Err(Errno::EACCES));
    c.expect("map it as master", raw.map(&ro_name, LITE_PERM_MASTER).0, Err(Errno::EACCES));
    let (got, stat) = raw.stat(ro);
    c.expect("stat the read-only handle", got, Ok(()));
    if stat.perm != R || stat.master_node != me || stat.size != MIB {
        c.fail(&format!(
            "stat of the read-only handle: perm {}, master {}, size {}",
            stat.perm, stat.master_node, stat.size
        ));
    }
    c.expect("read through the read-only handle", raw.read(ro, 0, b, 16), Ok(()));
    c.expect("write through the read-only handle", raw.write(ro, 0, b, 16), Err(Errno::EACCES));
    c.expect("memset through the read-only handle", raw.memset(ro, 0, 16, 1), Err(Errno::EACCES));
    c.expect("memcpy into the read-only handle", raw.memcpy(ro, 0, master, 64, 16), Err(Errno::EACCES));
    c.expect("memmove within the read-only handle", raw.memcpy(ro, 0, ro, 8, 16), Err(Errno::EACCES));
    c.expect("memcpy out of the read-only handle", raw.memcpy(master, 0, ro, 64, 16), Ok(()));
    let (got, _) = raw.atomic(ro, 0, LITE_ATOMIC_FETCH_ADD, 1, 0);
    c.expect("fetch-add through the read-only handle", got, Err(Errno::EACCES));
    let (got, _) = raw.atomic(ro, 0, LITE_ATOMIC_COMPARE_SWAP, 0, 1);
    c.expect("compare-and-swap through the read-only handle", got, Err(Errno::EACCES));
    c.expect("grant through a non-master handle", raw.grant(ro, me, RW), Err(Errno::EPERM));
    c.expect("free through a non-master handle", raw.free(ro), Err(Errno::EPERM));

    c.expect("grant this node read and write", raw.grant(master, me, RW), Ok(()));
    let (got, rw) = raw.map(&ro_name, RW);
    c.expect("map for writing after the grant", got, Ok(()));
    c.expect("write through the granted handle", raw.write(rw, 0, b, 16), Ok(()));
    c.expect("the older read-only handle still cannot write", raw.write(ro, 0, b, 16), Err(Errno::EACCES));
    c.expect("grant this node nothing", raw.grant(master, me, 0), Ok(()));
    c.expect("map after the grant of nothing", raw.map(&ro_name, R).0, Err(Errno::EACCES));

    let wo_name = name("wo");
    let (got, wo_master) = raw.malloc(MIB, 0, RW, &wo_name);
    c.expect("malloc an LMR others may read and write", got, Ok(()));
    let (got, wo) = raw.map(&wo_name, W);
    c.expect("map it write-only", got, Ok(()));
    c.expect("write through the write-only handle", raw.write(wo, 0, b, 16), Ok(()));
    c.expect("read through the write-only handle", raw.read(wo, 0, b, 16), Err(Errno::EACCES));
    c.expect("memcpy out of the write-only handle", raw.memcpy(wo_master, 0, wo, 64, 16), Err(Errno::EACCES));

    for (lh, what) in [(ro, "read-only"), (rw, "granted"), (wo, "write-only")] {
        c.expect(&format!("unmap the {what} handle"), raw.unmap(lh), Ok(()));
        c.expect(&format!("read after unmapping the {what} handle"), raw.read(lh, 0, b, 16), Err(Errno::EBADF));
    }
    c.expect("free the read-only LMR", raw.free(master), Ok(()));
    c.expect("free the write-only LMR", raw.free(wo_master), Ok(()));
}

/// After the master frees an LMR its own handle is gone (EBADF) and every other
/// handle, in this open of /dev/lite or another, fails with EIDRM until unmapped.
fn lifetime(c: &mut Checks, raw: &Raw<'_>, name: &dyn Fn(&str) -> Vec<u8>) {
    let mut buf = [0u8; 16];
    let b = buf.as_mut_ptr() as u64;
    let life = name("life");
    let (got, master) = raw.malloc(MIB, 0, R, &life);
    c.expect("malloc an LMR to free", got, Ok(()));
    let (got, mine) = raw.map(&life, R);
    c.expect("map it again in this open of /dev/lite", got, Ok(()));
    let other = match Lite::open() {
        Ok(other) => other,
        Err(e) => {
            c.fail(&format!("open /dev/lite a second time: {e}"));
            return;
        }
    };
    let other = Raw(&other);
    let (got, theirs) = other.map(&life, R);
    c.expect("map it in another open of /dev/lite", got, Ok(()));
    c.expect("free it", raw.free(master), Ok(()));
    c.expect("read through the freed master handle", raw.read(master, 0, b, 16), Err(Errno::EBADF));
    c.expect("free the freed master handle again", raw.free(master), Err(Errno::EBADF));
    c.expect("read through another handle of the freed LMR", raw.read(mine, 0, b, 16), Err(Errno::EIDRM));
    c.expect("stat another handle of the freed LMR", raw.stat(mine).0, Err(Errno::EIDRM));
    c.expect("read through another open's handle of the freed LMR", other.read(theirs, 0, b, 16), Err(Errno::EIDRM));
    c.expect("map the freed LMR's name", raw.map(&life, R).0, Err(Errno::ENOENT));
    c.expect("unmap a handle of the freed LMR", raw.unmap(mine), Ok(()));
    c.expect("read through it after the unmap", raw.read(mine, 0, b, 16), Err(Errno::EBADF));
    c.expect("unmap another open's handle of the freed LMR", other.unmap(theirs), Ok(()));
}
