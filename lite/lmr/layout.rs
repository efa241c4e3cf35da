// SPDX-License-Identifier: GPL-2.0
//! LITE memory regions, the pure part: permissions, names, ranges, how an LMR is
//! split over holders and chunks, and how an access is cut into pieces that each
//! stay inside one physically contiguous chunk.
//!
//! Pure logic (core only): compiled into the module and unit-tested on the host.

/// Permission bits (equal to the ABI's `LITE_PERM_*`, asserted in the module).
pub(crate) const PERM_READ: u32 = 1;
pub(crate) const PERM_WRITE: u32 = 2;
pub(crate) const PERM_MASTER: u32 = 4;
pub(crate) const PERM_ALL: u32 = PERM_READ | PERM_WRITE | PERM_MASTER;

/// Bytes of a name field (NUL-padded).
pub(crate) const NAME_LEN: usize = 64;
/// Largest chunk of memory allocated at a holder (LITE used 4 MB).
pub(crate) const CHUNK_MAX: u64 = 4 << 20;
/// Smallest unit of allocation.
pub(crate) const PAGE: u64 = 4096;

/// True when `perm` has no bit beyond the known ones.
pub(crate) fn perm_known(perm: u32) -> bool {
    perm & !PERM_ALL == 0
}

/// True when `have` includes every bit of `want`.
pub(crate) fn perm_allows(have: u32, want: u32) -> bool {
    have & want == want
}

/// Length of a NUL-padded name, or `None` when it is malformed: no NUL terminator
/// (63 bytes at most), or bytes after the first NUL. An all-zero name has length 0.
pub(crate) fn name_len(name: &[u8; NAME_LEN]) -> Option<usize> {
    let len = name.iter().position(|&b| b == 0)?;
    name[len..].iter().all(|&b| b == 0).then_some(len)
}

/// Why an access range is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeError {
    /// Zero bytes.
    Empty,
    /// Beyond the end of the LMR, or `offset + len` overflows.
    OutOfBounds,
}

/// Checks `[offset, offset + len)` against an LMR of `size` bytes.
pub(crate) fn check_range(size: u64, offset: u64, len: u64) -> Result<(), RangeError> {
    if len == 0 {
        return Err(RangeError::Empty);
    }
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(RangeError::OutOfBounds),
    }
}

fn round_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to) * to
}

/// Bytes each holder gets when `size` bytes are spread over `holders` (a node
/// bitmask): an even, page-aligned share per node in ascending node order, the last
/// ones possibly smaller or empty. Yields `(node, bytes)` for non-empty shares.
pub(crate) fn shares(size: u64, holders: u32) -> impl Iterator<Item = (u32, u64)> {
    let count = u64::from(holders.count_ones().max(1));
    let share = round_up(size.div_ceil(count), PAGE);
    let mut left = size;
    (0..32u32)
        .filter(move |n| holders & (1 << n) != 0)
        .filter_map(move |node| {
            let bytes = left.min(share);
            left -= bytes;
            (bytes > 0).then_some((node, bytes))
        })
}

/// Size of the next chunk to allocate for `remaining` bytes, given that chunks of
/// `limit` bytes or more just failed (`CHUNK_MAX` at first). `None` when even one
/// page cannot be had.
pub(crate) fn next_chunk_len(remaining: u64, limit: u64) -> Option<u64> {
    let len = round_up(remaining, PAGE).min(CHUNK_MAX).min(limit);
    (len >= PAGE && remaining > 0).then_some(len - len % PAGE)
}

/// A physically contiguous piece of an LMR at one holder: LMR bytes
/// `[start, start + len)` live at DMA address `addr` of node `node`, which peers
/// reach with `rkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) node: u32,
    pub(crate) start: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) rkey: u32,
}

/// Part of an access that stays inside extent `extent`: `len` bytes at `addr` of the
/// holder (under the extent's `rkey`), `pos` bytes from the start of the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) extent: usize,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
    pub(crate) pos: u64,
    pub(crate) len: u64,
}

/// Cuts `[offset, offset + len)` (already checked against the size) into pieces, in
/// order. `extents` are sorted by `start` and tile the LMR.
pub(crate) fn pieces(extents: &[Extent], offset: u64, len: u64) -> Pieces<'_> {
    let first = extents.partition_point(|e| e.start + e.len <= offset);
    Pieces {
        extents,
        index: first,
        offset,
        end: offset + len,
        base: offset,
    }
}

pub(crate) struct Pieces<'a> {
    extents: &'a [Extent],
    index: usize,
    offset: u64,
    end: u64,
    base: u64,
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.offset >= self.end {
            return None;
        }
        let e = self.extents.get(self.index)?;
        let inside = self.offset.checked_sub(e.start)?;
        let len = (e.len - inside).min(self.end - self.offset);
        let piece = Piece {
            extent: self.index,
            addr: e.addr + inside,
            rkey: e.rkey,
            pos: self.offset - self.base,
            len,
        };
        self.offset += len;
        self.index += 1;
        Some(piece)
    }
}

/// Bytes of the word an RDMA atomic works on; it must be aligned to them.
pub(crate) const ATOMIC_LEN: u64 = 8;

/// Why an atomic cannot work on a word.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AtomicError {
    /// The offset, or the word's address at its holder, is not 8-aligned.
    Misaligned,
    /// Beyond the end of the LMR.
    OutOfBounds,
}

/// The (extent, holder address) of the 8-byte word at `offset` of an LMR of `size`
/// bytes tiled by `extents`. Allocated chunks are page-aligned, but a registered
/// buffer may start anywhere, so the holder address is checked too.
pub(crate) fn atomic_word(
    extents: &[Extent],
    size: u64,
    offset: u64,
) -> Result<(usize, u64), AtomicError> {
    // Alignment first: a misaligned offset is wrong whatever the size.
    if offset % ATOMIC_LEN != 0 {
        return Err(AtomicError::Misaligned);
    }
    check_range(size, offset, ATOMIC_LEN).map_err(|_| AtomicError::OutOfBounds)?;
    let mut parts = pieces(extents, offset, ATOMIC_LEN);
    match (parts.next(), parts.next()) {
        (Some(word), None) if word.len == ATOMIC_LEN && word.addr % ATOMIC_LEN == 0 => {
            Ok((word.extent, word.addr))
        }
        // Split over two extents, or unaligned at the holder.
        (Some(_), _) => Err(AtomicError::Misaligned),
        (None, _) => Err(AtomicError::OutOfBounds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_words_must_be_aligned_and_whole() {
        let aligned = [
            Extent {
                node: 0,
                start: 0,
                addr: 0x10000,
                len: 4096,
                rkey: 0,
            },
            Extent {
                node: 2,
                start: 4096,
                addr: 0x80000,
                len: 4096,
                rkey: 0,
            },
        ];
        assert_eq!(atomic_word(&aligned, 8192, 0), Ok((0, 0x10000)));
        assert_eq!(atomic_word(&aligned, 8192, 4088), Ok((0, 0x10000 + 4088)));
        assert_eq!(atomic_word(&aligned, 8192, 4096), Ok((1, 0x80000)));
        assert_eq!(atomic_word(&aligned, 8192, 8184), Ok((1, 0x80000 + 4088)));
        assert_eq!(atomic_word(&aligned, 8192, 4), Err(AtomicError::Misaligned));
        assert_eq!(
            atomic_word(&aligned, 8192, 8192),
            Err(AtomicError::OutOfBounds)
        );
        assert_eq!(
            atomic_word(&aligned, 8192, u64::MAX - 7),
            Err(AtomicError::OutOfBounds)
        );
        assert_eq!(
            atomic_word(&aligned, 8192, 8188),
            Err(AtomicError::Misaligned),
            "misaligned and past the end"
        );
        assert_eq!(
            atomic_word(&aligned, 8190, 8184),
            Err(AtomicError::OutOfBounds)
        );
        // A registered buffer starting at an odd address, and one split at an odd length.
        let odd = [
            Extent {
                node: 1,
                start: 0,
                addr: 0x2003,
                len: 13,
                rkey: 0,
            },
            Extent {
                node: 1,
                start: 13,
                addr: 0x9000,
                len: 100,
                rkey: 0,
            },
        ];
        assert_eq!(atomic_word(&odd, 113, 0), Err(AtomicError::Misaligned));
        assert_eq!(
            atomic_word(&odd, 113, 8),
            Err(AtomicError::Misaligned),
            "split over two extents"
        );
        assert_eq!(
            atomic_word(&odd, 113, 16),
            Err(AtomicError::Misaligned),
            "0x9003 at the holder"
        );
    }

    #[test]
    fn names_need_a_terminator_and_nothing_after_it() {
        let mut name = [0u8; NAME_LEN];
        assert_eq!(name_len(&name), Some(0));
        name[..5].copy_from_slice(b"table");
        assert_eq!(name_len(&name), Some(5));
        name[7] = b'x';
        assert_eq!(name_len(&name), None, "byte after the NUL");
        let full = [b'a'; NAME_LEN];
        assert_eq!(name_len(&full), None, "no terminator");
        let mut longest = [b'a'; NAME_LEN];
        longest[63] = 0;
        assert_eq!(name_len(&longest), Some(63));
    }

    #[test]
    fn ranges_reject_empty_beyond_and_overflow() {
        assert_eq!(check_range(100, 0, 100), Ok(()));
        assert_eq!(check_range(100, 99, 1), Ok(()));
        assert_eq!(check_range(100, 0, 0), Err(RangeError::Empty));
        assert_eq!(check_range(100, 100, 1), Err(RangeError::OutOfBounds));
        assert_eq!(check_range(100, 50, 51), Err(RangeError::OutOfBounds));
        assert_eq!(
            check_range(u64::MAX, u64::MAX - 1, 2),
            Err(RangeError::OutOfBounds)
        );
        assert_eq!(
            check_range(100, u64::MAX, u64::MAX),
            Err(RangeError::OutOfBounds)
        );
    }

    #[test]
    fn permissions() {
        assert!(perm_known(PERM_ALL) && !perm_known(8));
        assert!(perm_allows(PERM_READ | PERM_WRITE, PERM_READ));
        assert!(!perm_allows(PERM_READ, PERM_READ | PERM_WRITE));
        assert!(perm_allows(PERM_READ, 0));
    }

    #[test]
    fn shares_cover_the_size_in_page_aligned_parts() {
        let gib = 1u64 << 30;
        let s: Vec<_> = shares(gib, 0b111).collect();
        assert_eq!(s.len(), 3);
        assert_eq!(s.iter().map(|x| x.1).sum::<u64>(), gib);
        assert!(s[..2].iter().all(|x| x.1 % PAGE == 0));
        assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(
            shares(10, 0b10100).collect::<Vec<_>>(),
            vec![(2, 10)],
            "tiny LMRs stay on one node"
        );
        assert_eq!(
            shares(3 * PAGE, 0b1011).collect::<Vec<_>>(),
            vec![(0, PAGE), (1, PAGE), (3, PAGE)]
        );
        assert_eq!(shares(5, 1 << 31).collect::<Vec<_>>(), vec![(31, 5)]);
    }

    #[test]
    fn chunks_are_pages_up_to_the_maximum_and_shrink_on_failure() {
        assert_eq!(next_chunk_len(1, CHUNK_MAX), Some(PAGE));
        assert_eq!(next_chunk_len(10 << 20, CHUNK_MAX), Some(CHUNK_MAX));
        assert_eq!(next_chunk_len(10 << 20, CHUNK_MAX / 2), Some(CHUNK_MAX / 2));
        assert_eq!(next_chunk_len(10 << 20, PAGE + 1), Some(PAGE));
        assert_eq!(next_chunk_len(10 << 20, PAGE - 1), None);
        assert_eq!(next_chunk_len(0, CHUNK_MAX), None);
    }

    fn layout(lens: &[u64]) -> Vec<Extent> {
        let mut start = 0;
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let e = Extent {
                    node: i as u32 % 3,
                    start,
                    addr: 0x10_0000 * (i as u64 + 1),
                    len,
                    rkey: 0x100 + i as u32,
                };
                start += len;
                e
            })
            .collect()
    }

    #[test]
    fn pieces_split_at_extent_boundaries() {
        let ext = layout(&[100, 50, 200]);
        let p: Vec<_> = pieces(&ext, 90, 70).collect();
        assert_eq!(
            p,
            vec![
                Piece {
                    extent: 0,
                    addr: 0x10_0000 + 90,
                    rkey: 0x100,
                    pos: 0,
                    len: 10
                },
                Piece {
                    extent: 1,
                    addr: 0x20_0000,
                    rkey: 0x101,
                    pos: 10,
                    len: 50
                },
                Piece {
                    extent: 2,
                    addr: 0x30_0000,
                    rkey: 0x102,
                    pos: 60,
                    len: 10
                },
            ]
        );
        assert_eq!(
            pieces(&ext, 100, 1).collect::<Vec<_>>(),
            vec![Piece {
                extent: 1,
                addr: 0x20_0000,
                rkey: 0x101,
                pos: 0,
                len: 1
            }]
        );
        assert_eq!(pieces(&ext, 349, 1).next().unwrap().extent, 2);
    }

    #[test]
    fn pieces_cover_every_byte_exactly_once() {
        let ext = layout(&[4096, 8192, 4096, 12288, 4096]);
        let size: u64 = ext.iter().map(|e| e.len).sum();
        for offset in (0..size).step_by(1000) {
            for len in [1, 7, 4096, 5000, size - offset] {
                if check_range(size, offset, len).is_err() {
                    continue;
                }
                let mut next = 0;
                for p in pieces(&ext, offset, len) {
                    assert_eq!(p.pos, next);
                    let e = ext[p.extent];
                    assert!(p.addr >= e.addr && p.addr + p.len <= e.addr + e.len);
                    assert_eq!(p.rkey, e.rkey);
                    assert_eq!(p.addr - e.addr + e.start, offset + p.pos);
                    next += p.len;
                }
                assert_eq!(next, len);
            }
        }
    }
}
