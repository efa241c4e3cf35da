//! The random data of lmr-integrity: a seeded byte stream and a checksum of its pieces.

use lite_stats::Rng;

/// Random numbers as a byte stream (8 little-endian bytes per step): one seed gives
/// the same bytes however the stream is cut into pieces, so nothing needs to be kept.
pub(super) struct Stream {
    rng: Rng,
    word: [u8; 8],
    used: usize,
}

impl Stream {
    pub(super) fn new(seed: u64) -> Stream {
        Stream { rng: Rng::new(seed), word: [0; 8], used: 8 }
    }

    pub(super) fn fill(&mut self, buf: &mut [u8]) {
        let carried = (8 - self.used).min(buf.len());
        buf[..carried].copy_from_slice(&self.word[self.used..self.used + carried]);
        self.used += carried;
        let mut words = buf[carried..].chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            self.word = self.rng.next_u64().to_le_bytes();
            tail.copy_from_slice(&self.word[..tail.len()]);
            self.used = tail.len();
        }
    }
}

/// A 64-bit checksum of a piece, fast enough for gigabytes under emulation.
pub(super) fn checksum(buf: &[u8]) -> u64 {
    let mut words = buf.chunks_exact(8);
    let mut h = 0xcbf2_9ce4_8422_2325 ^ buf.len() as u64;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0x100_0000_01b3).rotate_left(23);
    }
    words.remainder().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_does_not_depend_on_how_it_is_cut() {
        let mut whole = vec![0u8; 1000];
        Stream::new(7).fill(&mut whole);
        let mut pieces = vec![0u8; 1000];
        let mut s = Stream::new(7);
        let mut at = 0;
        for len in [3, 5, 8, 13, 1, 0, 200, 770] {
            s.fill(&mut pieces[at..at + len]);
            at += len;
        }
        assert_eq!(pieces, whole);
        let mut other = vec![0u8; 1000];
        Stream::new(8).fill(&mut other);
        assert_ne!(other, whole);
        let mut zero = vec![0u8; 64];
        Stream::new(0).fill(&mut zero);
        assert!(zero.iter().any(|&b| b != 0));
    }

    #[test]
    fn checksums_see_one_changed_byte() {
        let mut data = vec![0u8; 3 << 20];
        Stream::new(1).fill(&mut data);
        let sum = checksum(&data);
        data[(1 << 20) + 3] ^= 1;
        assert_ne!(checksum(&data), sum);
        assert_ne!(checksum(&data[..7]), checksum(&data[..8]));
    }
}
