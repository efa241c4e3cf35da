//! Slots and buckets, pure: a shard's layout, the slot codec, where a key goes, the
//! requests of PUT and DELETE, and the values `load` and `bench` put.

use lite_apps::fnv1a;

pub(crate) const SLOT: usize = 128;
pub(crate) const SLOTS: usize = 4;
pub(crate) const BUCKET: usize = SLOT * SLOTS;
pub(crate) const MAX_KEY: usize = 24;
pub(crate) const MAX_VALUE: usize = 80;
/// Slot layout: key length, value length, reserved, version, key, value, checksum.
const KEY_AT: usize = 8;
const VALUE_AT: usize = KEY_AT + MAX_KEY;
const SUM_AT: usize = VALUE_AT + MAX_VALUE;
/// Buckets a key may spill over into.
pub(crate) const PROBES: u64 = 8;
/// Slot byte 2 of a deleted slot.
const DELETED: u8 = 1;

pub(crate) const OP_PUT: u8 = 1;
pub(crate) const OP_DELETE: u8 = 2;
pub(crate) const STATUS_OK: u8 = 0;
pub(crate) const STATUS_FULL: u8 = 1;
pub(crate) const STATUS_BAD: u8 = 2;
pub(crate) const STATUS_MISSING: u8 = 3;

/// FNV-1a with a splitmix64 finish, so that similar keys spread over all bits.
fn key_hash(key: &[u8]) -> u64 {
    let mut h = fnv1a(&[key]);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The shard (index into the servers) and the bucket of a key.
pub(crate) fn place(key: &[u8], shards: usize, buckets: u64) -> (usize, u64) {
    let h = key_hash(key);
    ((h % shards as u64) as usize, (h >> 20) % buckets)
}

/// A slot holding `key`, or a deleted slot when `key` is empty.
pub(crate) fn encode_slot(key: &[u8], value: &[u8], version: u32) -> [u8; SLOT] {
    let mut s = [0u8; SLOT];
    s[0] = key.len() as u8;
    if key.is_empty() {
        s[2] = DELETED;
    }
    s[1] = value.len() as u8;
    s[4..8].copy_from_slice(&version.to_le_bytes());
    s[KEY_AT..KEY_AT + key.len()].copy_from_slice(key);
    s[VALUE_AT..VALUE_AT + value.len()].copy_from_slice(value);
    let sum = fnv1a(&[&s[..SUM_AT]]);
    s[SUM_AT..SUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
    s
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Slot<'a> {
    /// Never used: a key's chain of buckets ends here.
    Empty,
    /// Free, but keys placed while it was in use may follow.
    Deleted,
    Full {
        key: &'a [u8],
        value: &'a [u8],
    },
    /// Being rewritten while it was read (or corrupt).
    Torn,
}

pub(crate) fn decode_slot(s: &[u8]) -> Slot<'_> {
    if s.len() < SLOT {
        return Slot::Torn;
    }
    let sum = u64::from_le_bytes(s[SUM_AT..SUM_AT + 8].try_into().unwrap_or([0; 8]));
    if s[..SUM_AT + 8].iter().all(|&b| b == 0) {
        return Slot::Empty;
    }
    if fnv1a(&[&s[..SUM_AT]]) != sum {
        return Slot::Torn;
    }
    let (klen, vlen) = (s[0] as usize, s[1] as usize);
    if klen == 0 {
        return if s[2] == DELETED { Slot::Deleted } else { Slot::Torn };
    }
    if klen > MAX_KEY || vlen > MAX_VALUE {
        return Slot::Torn;
    }
    Slot::Full { key: &s[KEY_AT..KEY_AT + klen], value: &s[VALUE_AT..VALUE_AT + vlen] }
}

/// What one bucket says about a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Found(Vec<u8>),
    /// Not here, and the chain ends here.
    Absent,
    /// Not here: look in the next bucket.
    Next,
    /// A slot was caught mid-update: read the bucket again.
    Torn,
}

pub(crate) fn find(bucket: &[u8], key: &[u8]) -> Lookup {
    let (mut torn, mut ends) = (false, false);
    for slot in bucket.chunks(SLOT) {
        match decode_slot(slot) {
            Slot::Full { key: k, value } if k == key => return Lookup::Found(value.to_vec()),
            Slot::Torn => torn = true,
            Slot::Empty => ends = true,
            _ => {}
        }
    }
    match (torn, ends) {
        (true, _) => Lookup::Torn,
        (false, true) => Lookup::Absent,
        (false, false) => Lookup::Next,
    }
}

pub(crate) fn request(op: u8, key: &[u8], value: &[u8]) -> Result<Vec<u8>, String> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(format!("keys are 1 to {MAX_KEY} bytes, not {}", key.len()));
    }
    if value.len() > MAX_VALUE {
        return Err(format!("values are at most {MAX_VALUE} bytes, not {}", value.len()));
    }
    let mut r = vec![op, key.len() as u8, value.len() as u8];
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    Ok(r)
}

/// (op, key, value) of a well-formed request.
pub(crate) fn parse_request(r: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&op, &klen, &vlen) = (r.first()?, r.get(1)?, r.get(2)?);
    let (klen, vlen) = (klen as usize, vlen as usize);
    if klen == 0 || klen > MAX_KEY || vlen > MAX_VALUE || r.len() != 3 + klen + vlen {
        return None;
    }
    Some((op, &r[3..3 + klen], &r[3 + klen..]))
}

/// The value `load` and `bench` put for a key at a version: checkable by any reader.
pub(crate) fn value_for(key: &[u8], version: u64) -> Vec<u8> {
    format!("v{version}:{:016x}", key_hash(key) ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

/// The version a value of `value_for` was made with, if it was made for this key.
pub(crate) fn version_of(key: &[u8], value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let version: u64 = text.strip_prefix('v')?.split(':').next()?.parse().ok()?;
    (value_for(key, version) == value).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::key_name;
    #[test]
    fn slots_round_trip_and_torn_slots_are_seen() {
        let s = encode_slot(b"apple", b"red", 3);
        assert_eq!(decode_slot(&s), Slot::Full { key: b"apple", value: b"red" });
        assert_eq!(decode_slot(&[0u8; SLOT]), Slot::Empty);
        let mut torn = s;
        torn[VALUE_AT] ^= 1;
        assert_eq!(decode_slot(&torn), Slot::Torn);
        // Half of a new version over the old one.
        let newer = encode_slot(b"apple", b"green", 4);
        let mut mixed = s;
        mixed[..SLOT / 2].copy_from_slice(&newer[..SLOT / 2]);
        assert_eq!(decode_slot(&mixed), Slot::Torn);
    }

    #[test]
    fn find_returns_the_key_or_says_where_to_look() {
        let mut bucket = [0u8; BUCKET];
        bucket[SLOT..2 * SLOT].copy_from_slice(&encode_slot(b"k1", b"one", 1));
        bucket[3 * SLOT..].copy_from_slice(&encode_slot(b"k2", b"two", 1));
        assert_eq!(find(&bucket, b"k2"), Lookup::Found(b"two".to_vec()));
        assert_eq!(find(&bucket, b"k3"), Lookup::Absent);
        bucket[SLOT + VALUE_AT] ^= 1;
        assert_eq!(find(&bucket, b"k3"), Lookup::Torn);
        assert_eq!(find(&bucket, b"k2"), Lookup::Found(b"two".to_vec()));
        let full: Vec<u8> = (0..SLOTS).flat_map(|i| encode_slot(format!("f{i}").as_bytes(), b"v", 1)).collect();
        assert_eq!(find(&full, b"k3"), Lookup::Next);
    }

    #[test]
    fn requests_are_bounded_and_parsed_back() {
        let r = request(OP_PUT, b"key", b"value").unwrap_or_default();
        assert_eq!(parse_request(&r), Some((OP_PUT, &b"key"[..], &b"value"[..])));
        assert!(request(OP_PUT, b"", b"v").is_err());
        assert!(request(OP_PUT, &[b'k'; MAX_KEY + 1], b"v").is_err());
        assert!(request(OP_PUT, b"k", &[0; MAX_VALUE + 1]).is_err());
        assert_eq!(parse_request(&r[..r.len() - 1]), None);
        assert_eq!(parse_request(&[OP_PUT, 0, 0]), None);
        assert_eq!(parse_request(&[OP_PUT, 200, 1, 1]), None);
    }

    #[test]
    fn values_name_their_key_and_version() {
        let v = value_for(b"key7", 42);
        assert!(v.len() <= MAX_VALUE);
        assert_eq!(version_of(b"key7", &v), Some(42));
        assert_eq!(version_of(b"key8", &v), None);
        assert_eq!(version_of(b"key7", b"v42:junk"), None);
    }

    #[test]
    fn keys_spread_over_shards_and_buckets() {
        let mut shards = [0u32; 3];
        let mut buckets = std::collections::HashSet::new();
        for i in 0..3000 {
            let (s, b) = place(&key_name("key", i), 3, 1024);
            shards[s] += 1;
            buckets.insert(b);
        }
        assert!(shards.iter().all(|&n| n > 800), "{shards:?}");
        assert!(buckets.len() > 900);
    }
}
