//! Plain data shared by every kansoku crate: time, series identity, batches of
//! samples, the Prometheus-style selectors that pick series, and the figures
//! a component reports of itself, the alerts active now. Nothing here
//! does I/O, so every other crate can depend on it without pulling anything in.

pub mod alert;
mod batch;
pub mod budget;
pub mod producer;
pub mod report;
mod selector;
mod series;
pub mod snmp;
pub mod task;
mod timestamp;

pub use batch::{Batch, Sink};

/// The value Prometheus writes to mark a series gone (a staleness marker):
/// a NaN no computation produces; never a sample's value. Rule groups and
/// remote writes store it; range reads and tiers leave it out.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;
pub use selector::{MATCHERS_MAX, MatchOp, Matcher, REGEX_BYTES_MAX, Selector, SelectorError};
pub use series::{
    LABEL_NAME_BYTES_MAX, LABEL_VALUE_BYTES_MAX, LABELS_MAX, METRIC_NAME_LABEL, SeriesKey, is_label_name,
    is_metric_name, quoted,
};
pub use timestamp::{
    DEFAULT_SINCE, DurationError, Timestamp, civil_from_days, parse_duration, parse_time, resolve_range,
};

/// A size in bytes as a flag gives it: digits with an optional K, M, G or T
/// suffix (powers of 1024, either case); zero and overflow refused.
/// This machine's name: the default `host` label of what it collects.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("{s:?}: a size such as 4096, 4K, 64M or 1G"))
}

#[cfg(test)]
mod bytes_tests {
    use super::parse_bytes;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert_eq!(parse_bytes("256m"), Ok(256 << 20));
        assert_eq!(parse_bytes("2T"), Ok(2 << 40));
        assert_eq!(parse_bytes("512"), Ok(512));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("99999999999T").is_err(), "overflow");
        assert!(parse_bytes("lots").is_err());
    }
}
