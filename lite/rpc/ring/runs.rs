// SPDX-License-Identifier: GPL-2.0
//! Cutting a reply to fit the caller's output buffer: local DMA runs walked in
//! pieces ([`RunCursor`]) and paired with the caller's remote runs ([`zip_runs`]).

/// Walks local DMA runs in order, handing out pieces that fit remote runs.
pub(crate) struct RunCursor<'a> {
    runs: &'a [(u64, usize)],
    index: usize,
    offset: usize,
}

impl<'a> RunCursor<'a> {
    pub(crate) fn new(runs: &'a [(u64, usize)]) -> Self {
        RunCursor {
            runs,
            index: 0,
            offset: 0,
        }
    }

    /// The next contiguous piece of at most `max` bytes; `None` when the runs are
    /// exhausted or `max` is 0.
    pub(crate) fn next_piece(&mut self, max: usize) -> Option<(u64, usize)> {
        while let Some(&(addr, len)) = self.runs.get(self.index) {
            if self.offset < len {
                if max == 0 {
                    return None;
                }
                let take = (len - self.offset).min(max);
                let piece = (addr + self.offset as u64, take);
                self.offset += take;
                return Some(piece);
            }
            self.index += 1;
            self.offset = 0;
        }
        None
    }
}

/// Pairs `len` bytes of local runs with the remote runs (address, bytes, rkey)
/// they go to, in order: yields (local address, bytes, remote address, rkey)
/// pieces, each contiguous on both sides. Stops early when either side runs out.
pub(crate) fn zip_runs<'a>(
    local: &'a [(u64, usize)],
    remote: &'a [(u64, u32, u32)],
    len: usize,
) -> impl Iterator<Item = (u64, usize, u64, u32)> + 'a {
    let mut cursor = RunCursor::new(local);
    let mut remote = remote.iter();
    let mut current = (0u64, 0usize, 0u32);
    let mut left = len;
    core::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        if current.1 == 0 {
            let &(addr, run, rkey) = remote.next()?;
            current = (addr, run as usize, rkey);
        }
        let (local_addr, n) = cursor.next_piece(current.1.min(left))?;
        let piece = (local_addr, n, current.0, current.2);
        current = (current.0 + n as u64, current.1 - n, current.2);
        left -= n;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipped_runs_cover_both_sides_in_order() {
        let local = [(1000u64, 6000usize), (20_000, 3000)];
        let remote = [
            (0x10_000u64, 4096u32, 7u32),
            (0x50_000, 4096, 8),
            (0x90_000, 4096, 9),
        ];
        let pieces: Vec<_> = zip_runs(&local, &remote, 9000).collect();
        assert_eq!(
            pieces,
            vec![
                (1000, 4096, 0x10_000, 7),
                (5096, 1904, 0x50_000, 8),
                (20_000, 2192, 0x50_000 + 1904, 8),
                (22_192, 808, 0x90_000, 9)
            ]
        );
        assert_eq!(pieces.iter().map(|p| p.1).sum::<usize>(), 9000);
        assert_eq!(zip_runs(&local, &remote, 0).count(), 0);
        let short: Vec<_> = zip_runs(&local, &remote[..1], 9000).collect();
        assert_eq!(
            short,
            vec![(1000, 4096, 0x10_000, 7)],
            "stops where the remote runs end"
        );
    }

    #[test]
    fn cursor_cuts_local_runs_to_remote_runs() {
        let local = [(1000u64, 100usize), (5000, 50), (9000, 10)];
        let mut cursor = RunCursor::new(&local);
        assert_eq!(cursor.next_piece(30), Some((1000, 30)));
        assert_eq!(cursor.next_piece(100), Some((1030, 70)));
        assert_eq!(cursor.next_piece(0), None);
        assert_eq!(cursor.next_piece(100), Some((5000, 50)));
        assert_eq!(cursor.next_piece(4), Some((9000, 4)));
        assert_eq!(cursor.next_piece(100), Some((9004, 6)));
        assert_eq!(cursor.next_piece(100), None);
    }
}
