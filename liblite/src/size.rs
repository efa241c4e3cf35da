//! Sizes as people type them on command lines.

/// Bytes, optionally with a K, M, G or T suffix (powers of 1024; `KiB`, `MB`, ... too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a size: bytes, or with a K, M, G or T suffix");
    let lower = s.trim().to_ascii_lowercase();
    let body = lower.trim_end_matches('b').trim_end_matches('i');
    let (digits, shift) = match body.as_bytes().last() {
        Some(b'k') => (&body[..body.len() - 1], 10),
        Some(b'm') => (&body[..body.len() - 1], 20),
        Some(b'g') => (&body[..body.len() - 1], 30),
        Some(b't') => (&body[..body.len() - 1], 40),
        _ if body.len() == lower.len() => (body, 0),
        _ => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4099"), Ok(4099));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("4m"), Ok(4 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GB"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert!(parse_size("").is_err() && parse_size("x").is_err() && parse_size("G").is_err());
        assert!(parse_size("1.5G").is_err() && parse_size("12b").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
