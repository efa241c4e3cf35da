//! LITE memory regions (LMRs): memory in one or more nodes' kernels, reached only
//! through a handle that is valid in the open of /dev/lite that obtained it.
//!
//! [`Lite::malloc`] and [`Lite::map`] return an [`Lmr`], which unmaps its handle when
//! dropped. The crate-private `lmr_*` calls work on raw handles so that the C ABI,
//! where a handle is a plain integer, shares the checks and the errno mapping.

use crate::error::LmrCall;
use crate::{Error, Lite, PeerState, Result};
use lite_uapi::*;
use nix::errno::Errno;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{BitOr, BitOrAssign};
use std::str::FromStr;

/// Permissions on an LMR (`LITE_PERM_*`): combine with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm(u32);

impl Perm {
    /// No permission (a grant of `NONE` revokes a node's access for future maps).
    pub const NONE: Perm = Perm(0);
    /// Read the LMR; be the source of a memcpy.
    pub const READ: Perm = Perm(LITE_PERM_READ);
    /// Write and memset the LMR; be the destination of a memcpy.
    pub const WRITE: Perm = Perm(LITE_PERM_WRITE);
    /// Grant permissions and free the LMR (the allocating process has it).
    pub const MASTER: Perm = Perm(LITE_PERM_MASTER);

    /// The `LITE_PERM_*` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// `None` when `bits` has a bit beyond the known ones.
    pub const fn from_bits(bits: u32) -> Option<Perm> {
        if bits & !LITE_PERM_ALL == 0 {
            Some(Perm(bits))
        } else {
            None
        }
    }

    /// True when every bit of `other` is in `self`.
    pub const fn contains(self, other: Perm) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for Perm {
    type Output = Perm;

    fn bitor(self, rhs: Perm) -> Perm {
        Perm(self.0 | rhs.0)
    }
}

impl BitOrAssign for Perm {
    fn bitor_assign(&mut self, rhs: Perm) {
        self.0 |= rhs.0;
    }
}

/// Letters `r`, `w`, `m` (read, write, master), or `none`.
impl fmt::Display for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (perm, letter) in [(Perm::READ, 'r'), (Perm::WRITE, 'w'), (Perm::MASTER, 'm')] {
            if self.contains(perm) {
                write!(f, "{letter}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Perm({self})")
    }
}

/// Parses what `Display` prints: letters out of `r`, `w`, `m` in any order, or `none`.
impl FromStr for Perm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Perm> {
        if s == "none" {
            return Ok(Perm::NONE);
        }
        let bad = || Error::InvalidArgument(format!("permission {s:?}: use letters r, w, m (e.g. rw) or none"));
        if s.is_empty() {
            return Err(bad());
        }
        s.chars().try_fold(Perm::NONE, |perm, c| match c {
            'r' => Ok(perm | Perm::READ),
            'w' => Ok(perm | Perm::WRITE),
            'm' => Ok(perm | Perm::MASTER),
            _ => Err(bad()),
        })
    }
}

/// How [`Lite::malloc`] places and shares an LMR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MallocOptions {
    /// Nodes that hold a share of the memory (split evenly); empty: this node.
    pub holders: Vec<u32>,
    /// What any node may map the LMR with; the master can grant more per node.
    pub perm: Perm,
    /// Names are unique within a namespace.
    pub namespace: u32,
}

impl Default for MallocOptions {
    fn default() -> Self {
        MallocOptions { holders: Vec::new(), perm: Perm::READ | Perm::WRITE, namespace: 0 }
    }
}

/// What [`Lmr::stat`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LmrStat {
    pub size: u64,
    /// This handle's permissions.
    pub perm: Perm,
    pub master_node: u32,
    /// Physically contiguous chunks the memory is made of, over all holders.
    pub nr_chunks: u32,
    /// Nodes holding part of the memory, ascending.
    pub holders: Vec<u32>,
}

/// A handle on an LMR, unmapped when dropped.
///
/// Handles belong to the [`Lite`] (open of /dev/lite) that obtained them; the
/// master's handle can grant and free. Every call is one ioctl.
pub struct Lmr<'a> {
    lite: &'a Lite,
    lh: u64,
    size: u64,
}

impl fmt::Debug for Lmr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lmr").field("lh", &self.lh).field("size", &self.size).finish()
    }
}

impl Lite {
    /// Allocates `size` bytes over `opts.holders` and makes this process its master.
    pub fn malloc(&self, size: u64, name: &str, opts: &MallocOptions) -> Result<Lmr<'_>> {
        if size == 0 {
            return Err(Error::InvalidArgument("an LMR must have at least 1 byte".into()));
        }
        let nodes = node_mask(&opts.holders)?;
        let lh = self.lmr_malloc(size, nodes, opts.perm.bits(), opts.namespace, name.as_bytes())?;
        Ok(Lmr { lite: self, lh, size })
    }

    /// Turns `buf` into an LMR held by this node (LT_register) and makes this process
    /// its master: other nodes read and write `buf` itself. `buf` stays borrowed (and
    /// its pages pinned) as long as the returned `Lmr` lives; at most
    /// `LITE_REGISTER_MAX_SIZE` bytes.
    pub fn register<'a>(&'a self, buf: &'a mut [u8], name: &str, perm: Perm, namespace: u32) -> Result<Lmr<'a>> {
        if buf.is_empty() {
            return Err(Error::InvalidArgument("an LMR must have at least 1 byte".into()));
        }
        let size = buf.len() as u64;
        let lh = self.lmr_register(buf.as_mut_ptr() as u64, size, perm.bits(), namespace, name.as_bytes())?;
        Ok(Lmr { lite: self, lh, size })
    }

    pub(crate) fn lmr_register(&self, buf: u64, len: u64, perm: u32, namespace: u32, name: &[u8]) -> Result<u64> {
        let mut arg = LiteRegister { buf, len, perm, namespace, name: encode_name(name)?, ..Default::default() };
        self.lmr_ioctl("register LMR", LmrCall::Malloc { name, size: len }, LITE_IOC_REGISTER, &mut arg)?;
        Ok(arg.lh)
    }

    /// Maps the LMR called `name` in `namespace` with `perm` (its master checks it);
    /// every call gives a new handle.
    pub fn map(&self, name: &str, perm: Perm, namespace: u32) -> Result<Lmr<'_>> {
        if perm.is_empty() {
            return Err(Error::InvalidArgument("map needs at least one permission (read or write)".into()));
        }
        let (lh, size) = self.lmr_map(name.as_bytes(), perm.bits(), namespace)?;
        Ok(Lmr { lite: self, lh, size })
    }

    fn lmr_ioctl<T>(&self, op: &'static str, call: LmrCall<'_>, cmd: u32, arg: &mut T) -> Result<()> {
        self.sys_ioctl(cmd, arg).map_err(|errno| Error::from_lmr_ioctl(op, call, errno))
    }

    pub(crate) fn lmr_malloc(&self, size: u64, nodes: u32, perm: u32, namespace: u32, name: &[u8]) -> Result<u64> {
        let mut arg = LiteMalloc { size, nodes, perm, namespace, name: encode_name(name)?, ..Default::default() };
        match self.lmr_ioctl("malloc LMR", LmrCall::Malloc { name, size }, LITE_IOC_MALLOC, &mut arg) {
            Ok(()) => Ok(arg.lh),
            Err(e) if matches!(e.errno(), Errno::ENOENT | Errno::EHOSTDOWN) => {
                Err(self.blame_holder(nodes).unwrap_or(e))
            }
            Err(e) => Err(e),
        }
    }

    /// After a malloc failed for a missing or down holder: which one it is.
    fn blame_holder(&self, nodes: u32) -> Option<Error> {
        let me = self.node_id().ok()?;
        let peers = self.peers().ok()?;
        mask_nodes(nodes).into_iter().filter(|&n| n != me).find_map(|n| match peers.iter().find(|p| p.id == n) {
            None => Some(Error::UnknownNode(n)),
            Some(p) if p.state != PeerState::Connected => Some(Error::NodeDown(n)),
            Some(_) => None,
        })
    }

    /// The new handle and the LMR's size.
    pub(crate) fn lmr_map(&self, name: &[u8], perm: u32, namespace: u32) -> Result<(u64, u64)> {
        let mut arg = LiteMap { namespace, perm, name: encode_name(name)?, ..Default::default() };
        self.lmr_ioctl("map LMR", LmrCall::Map { name }, LITE_IOC_MAP, &mut arg)?;
        Ok((arg.lh, arg.size))
    }

    pub(crate) fn lmr_unmap(&self, lh: u64) -> Result<()> {
        self.lmr_ioctl("unmap LMR", LmrCall::Handle, LITE_IOC_UNMAP, &mut LiteHandle { lh })
    }

    pub(crate) fn lmr_free(&self, lh: u64) -> Result<()> {
        self.lmr_ioctl("free LMR", LmrCall::Handle, LITE_IOC_FREE, &mut LiteHandle { lh })
    }

    pub(crate) fn lmr_grant(&self, lh: u64, node: u32, perm: u32) -> Result<()> {
        self.lmr_ioctl("grant LMR", LmrCall::Grant { node }, LITE_IOC_GRANT, &mut LiteGrant { lh, node, perm })
    }

    /// Reads (or writes) `len` bytes at user address `buf`; the kernel checks `buf`.
    /// `size` is the LMR's size when known, for a check before the crossing.
    pub(crate) fn lmr_rw(
        &self,
        write: bool,
        lh: u64,
        offset: u64,
        buf: u64,
        len: u64,
        size: Option<u64>,
    ) -> Result<()> {
        let op = if write { "write LMR" } else { "read LMR" };
        check_range(op, offset, len, size)?;
        let cmd = if write { LITE_IOC_WRITE } else { LITE_IOC_READ };
        self.lmr_ioctl(op, LmrCall::Access { offset, len, size }, cmd, &mut LiteRw { lh, offset, buf, len })
    }

    pub(crate) fn lmr_memset(&self, lh: u64, offset: u64, len: u64, value: u32, size: Option<u64>) -> Result<()> {
        let op = "memset LMR";
        if value > 255 {
            return Err(Error::InvalidArgument(format!("memset value {value} is not a byte (0..=255)")));
        }
        check_range(op, offset, len, size)?;
        let mut arg = LiteMemset { lh, offset, len, value, reserved: 0 };
        self.lmr_ioctl(op, LmrCall::Access { offset, len, size }, LITE_IOC_MEMSET, &mut arg)
    }

    /// An RDMA atomic (`LITE_ATOMIC_*`) on the word at `offset`; returns its old value.
    pub(crate) fn lmr_atomic(
        &self,
        lh: u64,
        offset: u64,
        op: u32,
        operand: u64,
        swap: u64,
        size: Option<u64>,
    ) -> Result<u64> {
        let name = if op == LITE_ATOMIC_COMPARE_SWAP { "compare-and-swap on LMR" } else { "fetch-and-add on LMR" };
        if !offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("{name}: offset {offset} is not a multiple of 8")));
        }
        check_range(name, offset, 8, size)?;
        let mut arg = LiteAtomic { lh, offset, op, operand, swap, ..Default::default() };
        match self.lmr_ioctl(name, LmrCall::Access { offset, len: 8, size }, LITE_IOC_ATOMIC, &mut arg) {
            Ok(()) => Ok(arg.old),
            // Only a registered buffer's own misalignment is left for the kernel to find.
            Err(Error::InvalidArgument(_)) => Err(Error::InvalidArgument(format!(
                "{name}: the word at offset {offset} is not 8-aligned in memory or spans two pieces \
                 (an LMR registered from an unaligned buffer)"
            ))),
            Err(e) => Err(e),
        }
    }

    /// `LITE_LOCK_*` on the lock word at `offset`; acquire returns whether the
    /// previous holder's node died holding it.
    pub(crate) fn lmr_lock(&self, lh: u64, offset: u64, op: u32, size: Option<u64>) -> Result<bool> {
        let name = if op == LITE_LOCK_ACQUIRE { "lock" } else { "unlock" };
        if !offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("{name}: offset {offset} is not a multiple of 8")));
        }
        check_range(name, offset, 8, size)?;
        match self.sys_ioctl(LITE_IOC_LOCK, &mut LiteLock { lh, offset, op, reserved: 0 }) {
            Ok(()) => Ok(false),
            Err(Errno::EOWNERDEAD) => Ok(true),
            Err(Errno::EDEADLK) => Err(Error::AlreadyLocked),
            Err(Errno::EPERM) => Err(Error::NotLocked),
            Err(Errno::ENOLCK) => Err(Error::LockLost),
            Err(Errno::EAGAIN) => Err(Error::TooManyWaiters),
            Err(errno) => Err(Error::from_lmr_ioctl(name, LmrCall::Access { offset, len: 8, size }, errno)),
        }
    }

    pub(crate) fn lmr_barrier(
        &self,
        lh: u64,
        offset: u64,
        participants: u32,
        timeout: std::time::Duration,
        size: Option<u64>,
    ) -> Result<()> {
        let name = "barrier";
        if !offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("{name}: offset {offset} is not a multiple of 8")));
        }
        if !(1..=LITE_BARRIER_MAX_PARTICIPANTS).contains(&participants) {
            return Err(Error::InvalidArgument(format!(
                "{name}: {participants} participants (1 to {LITE_BARRIER_MAX_PARTICIPANTS})"
            )));
        }
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        if !(1..=LITE_BARRIER_MAX_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(Error::InvalidArgument(format!(
                "{name}: timeout {timeout:?} (1 ms to {} s)",
                LITE_BARRIER_MAX_TIMEOUT_MS / 1000
            )));
        }
        check_range(name, offset, 8, size)?;
        match self.sys_ioctl(LITE_IOC_BARRIER, &mut LiteBarrier { lh, offset, participants, timeout_ms }) {
            Ok(()) => Ok(()),
            Err(Errno::EAGAIN) => Err(Error::TooManyWaiters),
            Err(errno) => Err(Error::from_lmr_ioctl(name, LmrCall::Access { offset, len: 8, size }, errno)),
        }
    }

    /// `dst` and `src` are (handle, offset, size if known).
    pub(crate) fn lmr_memcpy(
        &self,
        dst: (u64, u64, Option<u64>),
        src: (u64, u64, Option<u64>),
        len: u64,
    ) -> Result<()> {
        let op = "memcpy LMR";
        check_range(op, src.1, len, src.2)?;
        check_range(op, dst.1, len, dst.2)?;
        let mut arg = LiteMemcpy { dst_lh: dst.0, dst_offset: dst.1, src_lh: src.0, src_offset: src.1, len };
        self.lmr_ioctl(op, LmrCall::Access { offset: dst.1, len, size: dst.2 }, LITE_IOC_MEMCPY, &mut arg)
    }
}

impl Lmr<'_> {
    /// The raw handle (for the C ABI or raw ioctls); valid while `self` lives.
    pub fn lh(&self) -> u64 {
        self.lh
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fills `buf` from the LMR at `offset` (zero-copy: the holders write into `buf`).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.lite.lmr_rw(false, self.lh, offset, buf.as_mut_ptr() as u64, buf.len() as u64, Some(self.size))
    }

    /// Writes `buf` into the LMR at `offset`; returns once it is at the holders.
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.lite.lmr_rw(true, self.lh, offset, buf.as_ptr() as u64, buf.len() as u64, Some(self.size))
    }

    /// Sets `len` bytes at `offset` to `value`, at the holders (no data crosses the network).
    pub fn memset(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.lite.lmr_memset(self.lh, offset, len, value.into(), Some(self.size))
    }

    /// Copies `len` bytes from `src` at `src_offset` to this LMR at `dst_offset`, at
    /// the holders; `src` may be `self` and the ranges may overlap (memmove semantics).
    /// `src` must come from the same [`Lite`].
    pub fn memcpy_from(&self, dst_offset: u64, src: &Lmr<'_>, src_offset: u64, len: u64) -> Result<()> {
        // A handle number from another open of /dev/lite could name an unrelated LMR here.
        if !std::ptr::eq(self.lite, src.lite) {
            return Err(Error::BadHandle);
        }
        self.lite.lmr_memcpy((self.lh, dst_offset, Some(self.size)), (src.lh, src_offset, Some(src.size)), len)
    }

    /// Moves `len` bytes within this LMR from `src_offset` to `dst_offset` (may overlap).
    pub fn memmove(&self, dst_offset: u64, src_offset: u64, len: u64) -> Result<()> {
        self.memcpy_from(dst_offset, self, src_offset, len)
    }

    /// Adds `value` (wrapping) to the 8-byte word at `offset` (a multiple of 8) and
    /// returns its old value: one RDMA atomic by the holder's RNIC, atomic against every
    /// node's `fetch_add` and `compare_swap` on the word (not against `write`).
    /// Needs read and write permission.
    pub fn fetch_add(&self, offset: u64, value: u64) -> Result<u64> {
        self.lite.lmr_atomic(self.lh, offset, LITE_ATOMIC_FETCH_ADD, value, 0, Some(self.size))
    }

    /// Stores `new` in the 8-byte word at `offset` if it holds `expected`; returns the
    /// old value either way (so the swap happened iff it equals `expected`). LITE's
    /// test-and-set is `compare_swap(offset, 0, 1) == 0`. Atomic like [`Lmr::fetch_add`].
    pub fn compare_swap(&self, offset: u64, expected: u64, new: u64) -> Result<u64> {
        self.lite.lmr_atomic(self.lh, offset, LITE_ATOMIC_COMPARE_SWAP, expected, new, Some(self.size))
    }

    /// Takes the distributed lock whose word is at `offset` (a multiple of 8; the
    /// word starts at 0 and only lock calls touch it), waiting in FIFO order if
    /// another process anywhere holds it. Free, it costs one RDMA compare-and-swap.
    /// The guard releases it on drop, and the kernel releases it if this process
    /// exits. When the previous holder's node died holding it, the lock is taken over
    /// and [`LockGuard::holder_died`] says so: check what the lock protects.
    pub fn lock(&self, offset: u64) -> Result<LockGuard<'_>> {
        let holder_died = self.lite.lmr_lock(self.lh, offset, LITE_LOCK_ACQUIRE, Some(self.size))?;
        Ok(LockGuard { lmr: self, offset, holder_died, released: false })
    }

    /// Waits until `participants` callers (on any nodes, all passing the same number)
    /// reached the barrier whose counter is at `offset` (a multiple of 8; starts at 0,
    /// only barrier calls touch it). Back-to-back rounds on one counter do not mix.
    /// [`Error::Timeout`] after `timeout`; the counter is off by one round from then on.
    pub fn barrier(&self, offset: u64, participants: u32, timeout: std::time::Duration) -> Result<()> {
        self.lite.lmr_barrier(self.lh, offset, participants, timeout, Some(self.size))
    }

    /// Master only: from now on `node` (every node if `None`) may map with `perm`.
    /// Handles already mapped keep their permissions.
    pub fn grant(&self, node: Option<u32>, perm: Perm) -> Result<()> {
        self.lite.lmr_grant(self.lh, node.unwrap_or(LITE_NODE_ANY), perm.bits())
    }

    /// Size, this handle's permissions, master, chunks and holders.
    pub fn stat(&self) -> Result<LmrStat> {
        let mut arg = LiteLmrStat { lh: self.lh, ..Default::default() };
        self.lite.lmr_ioctl("stat LMR", LmrCall::Handle, LITE_IOC_LMR_STAT, &mut arg)?;
        Ok(LmrStat {
            size: arg.size,
            perm: Perm(arg.perm),
            master_node: arg.master_node,
            nr_chunks: arg.nr_chunks,
            holders: mask_nodes(arg.holders),
        })
    }

    /// Master only: frees the LMR everywhere; other handles on it then fail with
    /// [`Error::Freed`]. On failure the handle is unmapped like on drop.
    pub fn free(self) -> Result<()> {
        // On success the kernel released the handle with the LMR: no unmap follows.
        let this = ManuallyDrop::new(self);
        match this.lite.lmr_free(this.lh) {
            Ok(()) => Ok(()),
            Err(e) => {
                drop(ManuallyDrop::into_inner(this));
                Err(e)
            }
        }
    }
}

impl Drop for Lmr<'_> {
    fn drop(&mut self) {
        // Nothing to do about a failure: the handle is gone either way (e.g. EIDRM
        // after the master freed the LMR still releases it; the kernel frees the
        // rest when /dev/lite is closed).
        let _ = self.lite.lmr_unmap(self.lh);
    }
}

/// The NUL-padded name field: 1..=63 bytes without NUL.
pub(crate) fn encode_name(name: &[u8]) -> Result<[u8; LITE_NAME_MAX as usize]> {
    let max = LITE_NAME_MAX as usize - 1;
    let shown = String::from_utf8_lossy(name);
    if name.is_empty() {
        return Err(Error::InvalidArgument("an LMR name must not be empty".into()));
    }
    if name.len() > max {
        return Err(Error::InvalidArgument(format!(
            "LMR name {shown:?} is {} bytes long: at most {max} are allowed",
            name.len()
        )));
    }
    if name.contains(&0) {
        return Err(Error::InvalidArgument(format!("LMR name {shown:?} contains a NUL byte")));
    }
    let mut field = [0; LITE_NAME_MAX as usize];
    field[..name.len()].copy_from_slice(name);
    Ok(field)
}

/// The `nodes` bitmask for a list of node ids (empty list: 0, this node).
fn node_mask(nodes: &[u32]) -> Result<u32> {
    nodes.iter().try_fold(0, |mask, &n| {
        if n < LITE_MAX_NODES {
            Ok(mask | 1 << n)
        } else {
            Err(Error::InvalidArgument(format!("node {n} is out of range: node ids are 0..{LITE_MAX_NODES}")))
        }
    })
}

fn mask_nodes(mask: u32) -> Vec<u32> {
    (0..32).filter(|n| mask & (1 << n) != 0).collect()
}

/// The checks the kernel makes too, so the common mistakes get a precise message
/// without a crossing. `size` is `None` when unknown (C ABI).
fn check_range(op: &str, offset: u64, len: u64, size: Option<u64>) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidArgument(format!("{op} of 0 bytes: the length must be at least 1")));
    }
    match (offset.checked_add(len), size) {
        (None, _) => Err(Error::OutOfRange { offset, len, size }),
        (Some(end), Some(size)) if end > size => Err(Error::OutOfRange { offset, len, size: Some(size) }),
        _ => Ok(()),
    }
}

/// A distributed lock held by this process ([`Lmr::lock`]); dropping it unlocks.
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard<'l> {
    lmr: &'l Lmr<'l>,
    offset: u64,
    holder_died: bool,
    released: bool,
}

impl LockGuard<'_> {
    /// The lock was taken over from a holder whose node died while holding it.
    pub fn holder_died(&self) -> bool {
        self.holder_died
    }

    /// Releases the lock, reporting failures that dropping the guard ignores.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.lmr.lite.lmr_lock(self.lmr.lh, self.offset, LITE_LOCK_RELEASE, Some(self.lmr.size)).map(drop)
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            // Failing means the lock is gone already (LMR freed, node taken for dead).
            let _ = self.lmr.lite.lmr_lock(self.lmr.lh, self.offset, LITE_LOCK_RELEASE, Some(self.lmr.size));
        }
    }
}

impl fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard").field("lmr", self.lmr).field("offset", &self.offset).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_1_to_63_bytes_without_nul() {
        let field = encode_name(b"table").unwrap();
        assert_eq!(&field[..6], b"table\0");
        assert!(field[5..].iter().all(|&b| b == 0));
        assert_eq!(encode_name(&[b'a'; 63]).unwrap()[62], b'a');
        for (bad, says) in [(&b""[..], "empty"), (&[b'a'; 64][..], "64 bytes"), (b"ab\0cd", "NUL")] {
            let err = encode_name(bad).unwrap_err();
            assert_eq!(err.errno(), Errno::EINVAL);
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn perms_combine_print_and_parse() {
        let rw = Perm::READ | Perm::WRITE;
        assert_eq!(rw.bits(), LITE_PERM_READ | LITE_PERM_WRITE);
        assert!(rw.contains(Perm::READ) && !rw.contains(Perm::MASTER) && rw.contains(Perm::NONE));
        let mut all = rw;
        all |= Perm::MASTER;
        assert_eq!(all.bits(), LITE_PERM_ALL);
        assert_eq!(Perm::from_bits(8), None);
        assert_eq!(Perm::from_bits(3), Some(rw));
        assert_eq!(all.to_string(), "rwm");
        assert_eq!(format!("{:?}", Perm::WRITE), "Perm(w)");
        assert_eq!(Perm::NONE.to_string(), "none");
        for p in [Perm::NONE, Perm::READ, Perm::WRITE, rw, all] {
            assert_eq!(p.to_string().parse::<Perm>().unwrap(), p);
        }
        assert_eq!("wr".parse::<Perm>().unwrap(), rw);
        for bad in ["", "x", "rx", "read"] {
            assert_eq!(bad.parse::<Perm>().unwrap_err().errno(), Errno::EINVAL, "{bad}");
        }
    }

    #[test]
    fn holders_become_a_node_mask() {
        assert_eq!(node_mask(&[]).unwrap(), 0);
        assert_eq!(node_mask(&[0, 2, 15]).unwrap(), 0b1000_0000_0000_0101);
        assert_eq!(node_mask(&[16]).unwrap_err().errno(), Errno::EINVAL);
        assert_eq!(mask_nodes(0b1000_0000_0000_0101), vec![0, 2, 15]);
        assert_eq!(MallocOptions::default().perm, Perm::READ | Perm::WRITE);
    }

    #[test]
    fn ranges_are_checked_before_the_crossing() {
        assert_eq!(check_range("read", 0, 10, Some(10)), Ok(()));
        assert_eq!(check_range("read", 9, 1, None), Ok(()));
        assert_eq!(check_range("read", 10, 1, Some(10)), Err(Error::OutOfRange { offset: 10, len: 1, size: Some(10) }));
        assert_eq!(
            check_range("read", 1, u64::MAX, None),
            Err(Error::OutOfRange { offset: 1, len: u64::MAX, size: None })
        );
        let empty = check_range("write LMR", 0, 0, Some(10)).unwrap_err();
        assert_eq!(empty.errno(), Errno::EINVAL);
        assert!(empty.to_string().contains("write LMR of 0 bytes"));
    }
}
