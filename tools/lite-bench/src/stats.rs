//! Pure helpers of lite-bench: latency summaries as JSON, size parsing and
//! throughput arithmetic. Everything here is host-testable (no /dev/lite).

use lite::parse_size;
use lite_stats::Summary;
use serde_json::{json, Value};

/// The JSON fields every latency result carries.
pub fn summary_json(s: Summary) -> Value {
    json!({
        "iters": s.count,
        "min_ns": s.min_ns,
        "median_ns": s.median_ns,
        "p99_ns": s.p99_ns,
        "max_ns": s.max_ns,
        "mean_ns": (s.mean_ns * 10.0).round() / 10.0,
    })
}

/// A comma-separated list of sizes (`8,64,4K`), each at least 1 byte.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    let sizes = s.split(',').filter(|p| !p.trim().is_empty()).map(parse_size).collect::<Result<Vec<_>, _>>()?;
    if sizes.is_empty() {
        return Err("no sizes given".into());
    }
    if let Some(zero) = sizes.iter().position(|&n| n == 0) {
        return Err(format!("size #{} is 0: every size must be at least 1 byte", zero + 1));
    }
    Ok(sizes)
}

/// A comma-separated list of node ids (`0,1,2`).
pub fn parse_nodes(s: &str) -> Result<Vec<u32>, String> {
    let nodes = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u32>().map_err(|_| format!("{p:?} is not a node id")))
        .collect::<Result<Vec<_>, _>>()?;
    if nodes.is_empty() {
        return Err("no nodes given".into());
    }
    Ok(nodes)
}

/// Throughput of `bytes` in `nanos`: (MiB/s = 2^20 bytes/s, as perftest's
/// `BW average[MB/sec]`; MB/s = 10^6 bytes/s).
pub fn throughput(bytes: u64, nanos: u64) -> (f64, f64) {
    if nanos == 0 {
        return (0.0, 0.0);
    }
    let per_s = bytes as f64 * 1e9 / nanos as f64;
    (per_s / (1u64 << 20) as f64, per_s / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_json_has_the_documented_fields() {
        let j = summary_json(Summary::of(&mut [10, 20, 30]).unwrap());
        for key in ["iters", "min_ns", "median_ns", "p99_ns", "max_ns", "mean_ns"] {
            assert!(j.get(key).is_some(), "{key}");
        }
        assert_eq!(j["median_ns"], 20);
        assert_eq!(j["mean_ns"], 20.0);
    }

    #[test]
    fn size_and_node_lists_parse() {
        assert_eq!(parse_sizes("8,64,512,4096,65536").unwrap(), vec![8, 64, 512, 4096, 65536]);
        assert_eq!(parse_sizes("4K, 1M").unwrap(), vec![4096, 1 << 20]);
        assert!(parse_sizes("8,0").unwrap_err().contains("#2"));
        assert!(parse_sizes("").is_err());
        assert_eq!(parse_nodes("0,1,2").unwrap(), vec![0, 1, 2]);
        assert!(parse_nodes("1,a").is_err());
    }

    #[test]
    fn throughput_units() {
        let (mib, mb) = throughput(1 << 20, 1_000_000_000);
        assert!((mib - 1.0).abs() < 1e-12);
        assert!((mb - 1.048576).abs() < 1e-12);
        assert_eq!(throughput(100, 0), (0.0, 0.0));
    }
}
