// SPDX-License-Identifier: GPL-2.0
//! A work request's gather list cut at a byte count. A transfer gathers its next
//! work request to the size the pacer allowed after the last one; when pacing
//! begins in between, the pacer grants a chunk of it, and the rest goes as further
//! work requests. Posted whole, the gathered 31 KiB of two unpaced transfers were
//! 60 ms of a 1 MiB/s link at once, just as latency traffic began.

/// Where the first `bytes` bytes of entries of lengths `lens` end: the entries
/// taken whole, and the bytes taken of the next one (0: it starts the rest).
pub(crate) fn cut(lens: impl IntoIterator<Item = usize>, bytes: usize) -> (usize, usize) {
    let mut left = bytes;
    let mut whole = 0;
    for len in lens {
        if len > left {
            return (whole, left);
        }
        left -= len;
        whole += 1;
    }
    (whole, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_inside_an_entry_takes_part_of_it() {
        assert_eq!(cut([4096, 4096, 8192], 6000), (1, 1904));
        assert_eq!(cut([31207], 4096), (0, 4096));
    }

    #[test]
    fn a_cut_at_an_entry_boundary_takes_it_whole() {
        assert_eq!(cut([4096, 4096, 8192], 8192), (2, 0));
        assert_eq!(cut([4096, 4096], 4096), (1, 0));
    }

    #[test]
    fn a_cut_past_the_end_takes_everything() {
        assert_eq!(cut([4096, 100], 1 << 20), (2, 0));
        assert_eq!(cut([], 10), (0, 0));
        assert_eq!(cut([10], 0), (0, 0));
    }
}
