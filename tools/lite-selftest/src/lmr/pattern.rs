//! The lmr-serve pattern: data that any process can regenerate from the LMR's name.

use lite::Lmr;

/// Bytes per read or write when filling or checking the lmr-serve pattern.
pub(super) const PATTERN_PIECE: u64 = 1 << 20;

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
pub(super) fn fill_pattern(name: &str, offset: u64, buf: &mut [u8]) {
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

pub(super) fn write_pattern(lmr: &Lmr<'_>, name: &str) -> lite::Result<()> {
    let mut buf = vec![0u8; PATTERN_PIECE.min(lmr.size()) as usize];
    for offset in (0..lmr.size()).step_by(PATTERN_PIECE as usize) {
        let piece = &mut buf[..(lmr.size() - offset).min(PATTERN_PIECE) as usize];
        fill_pattern(name, offset, piece);
        lmr.write(offset, piece)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
