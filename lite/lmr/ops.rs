// SPDX-License-Identifier: GPL-2.0
//! One-sided operations on an LMR through a handle: read, write, atomics, memset,
//! memcpy, and the statistics of a handle and of this node.

use crate::compat::{now_ns, user_slice};
use crate::errno::EIDRM;
use crate::iobuf::{Sink, Source, Transfer};
use crate::net::polling::{Wait, POLL_MAX_BYTES};
use crate::net::wire::{self, MsgKind};
use crate::net::Peer;
use crate::uapi::*;
use crate::verbs::{Atomic, DmaBuf};
use core::ops::Range;
use kernel::prelude::*;
use kernel::sync::Mutex;

use super::handles::FileLmrs;
use super::holder::hold_limit;
use super::layout::{self, AtomicError, CHUNK_MAX, PERM_READ, PERM_WRITE};
use super::mapping::{HeldWord, Word, WordRef};
use super::read_phases::ReadStamps;
use super::LmrNode;
use super::{erange, range_error};

impl LmrNode {
    /// LT_read into `io`'s sink, or LT_write from its source, of its length at
    /// `offset` of the LMR.
    pub(crate) fn rw(
        &self,
        file: &Mutex<FileLmrs>,
        lh: u64,
        offset: u64,
        mut io: Transfer<'_>,
    ) -> Result {
        let entry = now_ns();
        let write = io.is_write();
        let (mapping, perm) = file.lock().get(lh)?;
        if !layout::perm_allows(perm, if write { PERM_WRITE } else { PERM_READ }) {
            return Err(EACCES);
        }
        let len = io.len();
        layout::check_range(mapping.size, offset, len as u64).map_err(range_error)?;
        if let Transfer::Read(Sink::User { addr, .. })
        | Transfer::Write(Source::User { addr, .. }) = io
        {
            addr.checked_add(len).ok_or(EFAULT)?;
        }
        let using = mapping.begin()?;
        let me = self.net.me()?;
        // A read of at most the size that may poll first (polling.rs), all from one
        // other node: its phases count.
        let mut small_read = None;
        for piece in layout::pieces(&mapping.extents, offset, len as u64) {
            using.check()?;
            let node = mapping.extents[piece.extent].node;
            let (pos, size) = (piece.pos as usize, piece.len as usize);
            let span = pos..pos + size;
            if node == me {
                let (chunk, off) = using.local()?.find(piece.addr, piece.len)?;
                match &mut io {
                    Transfer::Write(Source::User { addr, .. }) => chunk.copy_from_user(
                        off,
                        &mut user_slice(*addr + pos, size).reader(),
                        size,
                    )?,
                    Transfer::Read(Sink::User { addr, .. }) => chunk.copy_to_user(
                        off,
                        &mut user_slice(*addr + pos, size).writer(),
                        size,
                    )?,
                    Transfer::Write(Source::Kernel(data)) => {
                        chunk.write_bytes(off, data.get(span).ok_or(EINVAL)?)?
                    }
                    Transfer::Read(Sink::Kernel(out)) => {
                        chunk.read(off, out.get_mut(span).ok_or(EINVAL)?)?
                    }
                }
                continue;
            }
            let peer = self.net.peer(node)?;
            let still_valid = || using.check();
            match &mut io {
                Transfer::Write(Source::User { addr, .. })
                | Transfer::Read(Sink::User { addr, .. }) => {
                    let window = peer.rdma_user(
                        write,
                        *addr + pos,
                        size,
                        piece.addr,
                        piece.rkey,
                        &still_valid,
                    )?;
                    if !write && size == len && len as u64 <= POLL_MAX_BYTES {
                        small_read = Some(window);
                    }
                }
                _ => rdma_bounced(&peer, &mut io, span, piece.addr, piece.rkey, &still_valid)?,
            }
        }
        if let Some(window) = small_read {
            let read = ReadStamps {
                entry,
                ready: window.ready_ns,
                post: window.op.post_ns,
                posted: window.op.posted_ns,
                handled: window.op.done_ns,
                running: window.running_ns,
                returned: now_ns(),
                slept: window.op.slept,
            };
            read.add_to(&mut self.read_phases.lock());
        }
        Ok(())
    }

    /// The 8-byte word at `offset` of the LMR behind `lh`, for atomics, locks and
    /// barriers: needs read and write permission and 8-byte alignment.
    pub(crate) fn lmr_word(&self, file: &Mutex<FileLmrs>, lh: u64, offset: u64) -> Result<WordRef> {
        let (mapping, perm) = file.lock().get(lh)?;
        if !layout::perm_allows(perm, PERM_READ | PERM_WRITE) {
            return Err(EACCES);
        }
        let (extent, addr) =
            layout::atomic_word(&mapping.extents, mapping.size, offset).map_err(|e| match e {
                AtomicError::Misaligned => EINVAL,
                AtomicError::OutOfBounds => erange(),
            })?;
        let word = Word {
            holder: mapping.extents[extent].node,
            master: mapping.master,
            id: mapping.id,
            addr,
        };
        let rkey = mapping.extents[extent].rkey;
        Ok(WordRef {
            mapping,
            word,
            rkey,
        })
    }

    /// An RDMA atomic on `word` by its holder's RNIC, so that it is atomic against
    /// every node's; fails once the LMR is freed. Returns the old value.
    pub(crate) fn word_atomic(&self, word: &WordRef, atomic: Atomic) -> Result<u64> {
        let _using = word.mapping.begin()?;
        self.atomic_on(&word.word, word.rkey, atomic, Wait::PollFirst)
    }

    /// As [`Self::word_atomic`], for the kernel's own work on a word this node holds,
    /// whose memory `held` keeps.
    pub(crate) fn held_word_atomic(&self, held: &HeldWord, atomic: Atomic) -> Result<u64> {
        if self.net.device()?.paths().holder_atomics {
            let (chunk, off) = held.memory.find(held.word.addr, 8)?;
            return chunk.atomic(off, atomic);
        }
        self.net
            .loopback()?
            .atomic(atomic, held.word.addr, held.rkey, Wait::Sleep)
    }

    /// `atomic` on `word`: by its holder's RNIC (through the loopback QP when this
    /// node holds it), or by the holder's kernel where the device's paths say so.
    fn atomic_on(&self, word: &Word, rkey: u32, atomic: Atomic, wait: Wait) -> Result<u64> {
        if word.holder == self.net.me()? {
            if self.net.device()?.paths().holder_atomics {
                return self.serve_atomic(word.master, word.id, word.addr, atomic);
            }
            return self.net.loopback()?.atomic(atomic, word.addr, rkey, wait);
        }
        let peer = self.net.peer(word.holder)?;
        if peer.dev.paths().holder_atomics {
            return Self::ask_holder(&peer, word, atomic);
        }
        peer.atomic(atomic, word.addr, rkey, wait)
    }

    /// `atomic` on `word`, asked of its holder's kernel through `holder`.
    fn ask_holder(holder: &Peer, word: &Word, atomic: Atomic) -> Result<u64> {
        let (op, operand, swap) = match atomic {
            Atomic::FetchAdd(add) => (wire::ATOMIC_FETCH_ADD, add, 0),
            Atomic::CompareSwap { expected, new } => (wire::ATOMIC_COMPARE_SWAP, expected, new),
        };
        let req = wire::WordAtomic {
            master: word.master,
            op,
            id: word.id,
            addr: word.addr,
            operand,
            swap,
        };
        let mut old = [0u8; 8];
        match holder.request_to_the_end(MsgKind::Atomic, &req, &mut old)? {
            8 => Ok(u64::from_le_bytes(old)),
            _ => Err(EIO),
        }
    }

    /// Executes `atomic` on the word at `addr` this node holds for LMR (`master`,
    /// `id`); EIDRM once the LMR is freed.
    pub(crate) fn serve_atomic(
        &self,
        master: u32,
        id: u64,
        addr: u64,
        atomic: Atomic,
    ) -> Result<u64> {
        let memory = self.held_memory(master, id)?;
        let (chunk, off) = memory.find(addr, 8)?;
        chunk.atomic(off, atomic)
    }

    /// LT_fetch_add / LT_compare_swap on the 8-byte word at `offset`. Returns the old value.
    pub(crate) fn atomic(
        &self,
        file: &Mutex<FileLmrs>,
        lh: u64,
        offset: u64,
        atomic: Atomic,
    ) -> Result<u64> {
        let word = self.lmr_word(file, lh, offset)?;
        self.word_atomic(&word, atomic)
    }

    /// `word` (from a peer) with the memory this node holds for its LMR, which
    /// stays allocated while the result lives; EINVAL unless the word is 8 bytes of
    /// it, EIDRM once the LMR is freed.
    pub(crate) fn held_word(&self, word: &Word) -> Result<HeldWord> {
        let memory = self.held_memory(word.master, word.id)?;
        let (chunk, _) = memory.find(word.addr, 8)?;
        let rkey = chunk.rkey().ok_or_else(EIDRM)?;
        Ok(HeldWord::new(*word, rkey, memory))
    }

    /// LT_memset, executed by the holders.
    pub(crate) fn memset(
        &self,
        file: &Mutex<FileLmrs>,
        lh: u64,
        offset: u64,
        len: u64,
        value: u32,
    ) -> Result {
        let (mapping, perm) = file.lock().get(lh)?;
        if value > 0xFF {
            return Err(EINVAL);
        }
        if !layout::perm_allows(perm, PERM_WRITE) {
            return Err(EACCES);
        }
        layout::check_range(mapping.size, offset, len).map_err(range_error)?;
        let using = mapping.begin()?;
        let me = self.net.me()?;
        for piece in layout::pieces(&mapping.extents, offset, len) {
            using.check()?;
            let node = mapping.extents[piece.extent].node;
            if node == me {
                let (chunk, off) = using.local()?.find(piece.addr, piece.len)?;
                chunk.fill(off, piece.len as usize, value as u8)?;
            } else {
                let req = wire::Memset {
                    master: mapping.master,
                    value,
                    id: mapping.id,
                    addr: piece.addr,
                    len: piece.len,
                };
                self.net
                    .peer(node)?
                    .request(MsgKind::Memset, &req, &mut [])?;
            }
        }
        Ok(())
    }

    /// LT_memcpy / LT_memmove, executed by the holders of the source.
    pub(crate) fn memcpy(
        &self,
        file: &Mutex<FileLmrs>,
        dst_lh: u64,
        dst_off: u64,
        src_lh: u64,
        src_off: u64,
        len: u64,
    ) -> Result {
        let ((dst, dst_perm), (src, src_perm)) = {
            let files = file.lock();
            (files.get(dst_lh)?, files.get(src_lh)?)
        };
        if !layout::perm_allows(dst_perm, PERM_WRITE) || !layout::perm_allows(src_perm, PERM_READ) {
            return Err(EACCES);
        }
        layout::check_range(dst.size, dst_off, len).map_err(range_error)?;
        layout::check_range(src.size, src_off, len).map_err(range_error)?;
        let dst_use = dst.begin()?;
        let src_use = src.begin()?;
        // Pieces that each stay inside one source and one destination chunk.
        let mut steps = KVec::new();
        for s in layout::pieces(&src.extents, src_off, len) {
            for d in layout::pieces(&dst.extents, dst_off + s.pos, s.len) {
                steps.push(
                    (s.extent, s.addr + d.pos, d.extent, d.addr, d.len),
                    GFP_KERNEL,
                )?;
            }
        }
        // Copying towards higher offsets of the same LMR goes backwards, so an
        // overlapping move never reads bytes it already overwrote.
        let same = dst.master == src.master && dst.id == src.id;
        if same && dst_off > src_off {
            steps.reverse();
        }
        let me = self.net.me()?;
        for &(s_ext, s_addr, d_ext, d_addr, n) in steps.iter() {
            dst_use.check()?;
            src_use.check()?;
            let s_node = src.extents[s_ext].node;
            let d_node = dst.extents[d_ext].node;
            if s_node == me {
                let (from, from_off) = src_use.local()?.find(s_addr, n)?;
                if d_node == me {
                    let (to, to_off) = dst_use.local()?.find(d_addr, n)?;
                    to.move_from(to_off, from, from_off, n as usize)?;
                } else {
                    self.net.peer(d_node)?.rdma_write_kernel(
                        from,
                        from_off,
                        n as usize,
                        d_addr,
                        dst.extents[d_ext].rkey,
                    )?;
                }
            } else {
                let req = wire::Copy {
                    src_master: src.master,
                    dst_master: dst.master,
                    src_id: src.id,
                    src_addr: s_addr,
                    dst_id: dst.id,
                    dst_addr: d_addr,
                    len: n,
                    dst_node: d_node,
                    dst_rkey: dst.extents[d_ext].rkey,
                };
                self.net
                    .peer(s_node)?
                    .request(MsgKind::Copy, &req, &mut [])?;
            }
        }
        Ok(())
    }

    /// Describes the LMR behind `lh`.
    pub(crate) fn stat(&self, file: &Mutex<FileLmrs>, lh: u64) -> Result<LiteLmrStat> {
        let (mapping, perm) = file.lock().get(lh)?;
        drop(mapping.begin()?);
        Ok(LiteLmrStat {
            lh,
            size: mapping.size,
            perm,
            master_node: mapping.master,
            nr_chunks: mapping.extents.len() as u32,
            holders: mapping.extents.iter().fold(0, |mask, e| mask | 1 << e.node),
        })
    }

    /// Counts of this node's LMR bookkeeping (the lock and barrier queues are the
    /// locks service's to fill in).
    pub(crate) fn mem_stat(&self) -> LiteMemStat {
        let mem = self.mem.lock();
        LiteMemStat {
            mastered: mem.lmrs.iter().count() as u32,
            mappings: mem.maps.iter().count() as u32,
            held_bytes: mem.held_bytes,
            held_limit: hold_limit(),
            lock_queued: 0,
            barrier_queued: 0,
            reserve_bytes: mem.reserve.len() as u64 * CHUNK_MAX,
            reserve_target: mem.reserve_target as u64 * CHUNK_MAX,
            reserve_used: mem.reserve_used * CHUNK_MAX,
            read_phases: *self.read_phases.lock(),
        }
    }
}

/// Kernel memory of a calling module is not the device's to reach: its bytes at
/// `span` of the transfer go to or come from the peer's `remote` (under `rkey`)
/// through a bounce buffer, a window at a time.
fn rdma_bounced(
    peer: &Peer,
    io: &mut Transfer<'_>,
    span: Range<usize>,
    remote: u64,
    rkey: u32,
    still_valid: &dyn Fn() -> Result,
) -> Result {
    const BOUNCE_BYTES: usize = 64 << 10;
    let bounce = DmaBuf::new(&peer.dev, span.len().min(BOUNCE_BYTES))?;
    let mut at = span.start;
    while at < span.end {
        still_valid()?;
        let n = (span.end - at).min(bounce.size());
        let remote_at = remote + (at - span.start) as u64;
        match io {
            Transfer::Write(Source::Kernel(data)) => {
                bounce.write_bytes(0, data.get(at..at + n).ok_or(EINVAL)?)?;
                peer.rdma_kernel(true, &bounce, 0, n, remote_at, rkey)?;
            }
            Transfer::Read(Sink::Kernel(out)) => {
                peer.rdma_kernel(false, &bounce, 0, n, remote_at, rkey)?;
                bounce.read(0, out.get_mut(at..at + n).ok_or(EINVAL)?)?;
            }
            _ => return Err(EINVAL),
        }
        at += n;
    }
    Ok(())
}
