//! Latencies for people (lite-stats summarizes them).

/// "412 us", "1.25 ms", "2.00 s".
pub fn human(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{} us", ns / 1_000),
        10_000_000..=9_999_999_999 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human(950), "950 ns");
        assert_eq!(human(412_345), "412 us");
        assert_eq!(human(1_250_000 * 10), "12.50 ms");
        assert_eq!(human(2_000_000_000 * 10), "20.00 s");
    }
}
