//! The value parsers clap calls (durations, intervals, disk budgets,
//! tiers, perf events, `--trace`), and the default host name. The flags of
//! what a node samples are `sample`'s; each command's own flags stay beside
//! what it runs.

use std::time::Duration;

use collect::{INTERVAL_MAX, INTERVAL_MIN};
use store::DiskBudget;

/// Downsampled tiers to write with each block (`--tiers`), in ns.
#[derive(Debug, Clone)]
pub struct Tiers(pub Vec<i64>);

pub fn parse_tiers(s: &str) -> Result<Tiers, String> {
    if s == "none" {
        return Ok(Tiers(Vec::new()));
    }
    s.split(',')
        .map(|t| {
            store::tier::RESOLUTIONS
                .iter()
                .find(|r| r.1 == t.trim())
                .map(|r| r.0)
                .ok_or_else(|| format!("{t:?} is not a tier: use 1s, 1m, 1s,1m or none"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Tiers)
}

pub fn parse_budget(s: &str) -> Result<DiskBudget, String> {
    let bad = || format!("{s:?}: use bytes like 500G, a percentage like 50%, or unlimited");
    if s == "unlimited" {
        return Ok(DiskBudget::Unlimited);
    }
    if let Some(p) = s.strip_suffix('%') {
        let p: f64 = p.parse().map_err(|_| bad())?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(bad());
        }
        return Ok(DiskBudget::FractionOfFilesystem(p / 100.0));
    }
    model::parse_bytes(s).map(DiskBudget::Bytes).map_err(|_| bad())
}

pub fn parse_perf_event(s: &str) -> Result<perf::Event, String> {
    perf::Event::parse(s).ok_or_else(|| format!("{s:?}: use cpu-clock or cycles"))
}

/// `--trace`: how often the kernel's event histograms are read, or `off`.
#[derive(Clone, Debug)]
pub struct TraceEvery(pub Option<Duration>);

pub fn parse_trace(s: &str) -> Result<TraceEvery, String> {
    if s == "off" {
        return Ok(TraceEvery(None));
    }
    let d = parse_dur(s)?;
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&d) {
        return Err(format!("{s} is out of range: 100ms to 60s, or off"));
    }
    Ok(TraceEvery(Some(d)))
}

pub fn parse_dur(s: &str) -> Result<Duration, String> {
    model::parse_duration(s).map_err(|e| e.to_string())
}

pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_dur(s)?;
    if !(INTERVAL_MIN..=INTERVAL_MAX).contains(&d) {
        return Err(format!("{s} is out of range: use {INTERVAL_MIN:?} to {INTERVAL_MAX:?}"));
    }
    Ok(d)
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_budgets_parse_or_explain() {
        assert_eq!(parse_budget("unlimited"), Ok(DiskBudget::Unlimited));
        assert_eq!(parse_budget("50%"), Ok(DiskBudget::FractionOfFilesystem(0.5)));
        assert_eq!(parse_budget("2G"), Ok(DiskBudget::Bytes(2 << 30)));
        assert_eq!(parse_budget("1234"), Ok(DiskBudget::Bytes(1234)));
        assert_eq!(parse_tiers("1s,1m").unwrap().0, [1_000_000_000, 60_000_000_000]);
        assert!(parse_tiers("none").unwrap().0.is_empty());
        assert!(parse_tiers("5s").unwrap_err().contains("1s,1m"));
        for bad in ["0", "150%", "0%", "12X", "", "-5G", "99999999999T"] {
            let e = parse_budget(bad).unwrap_err();
            assert!(e.contains("500G") && e.contains("unlimited"), "{bad}: {e}");
        }
    }
}
