//! The value parsers clap calls that no crate below owns (`--trace`), and
//! the default host name. Durations are `model::parse_duration`'s,
//! intervals `collect::parse_interval`'s, disk budgets and tiers the
//! store's: one vocabulary for every command. What a node samples is
//! `sample`'s; each command's own flags stay beside what it runs.

use std::time::Duration;

/// `--trace`: how often the kernel's event histograms are read, or `off`.
#[derive(Clone, Debug)]
pub struct TraceEvery(pub Option<Duration>);

pub fn parse_trace(s: &str) -> Result<TraceEvery, String> {
    if s == "off" {
        return Ok(TraceEvery(None));
    }
    let d = model::parse_duration(s).map_err(|e| e.to_string())?;
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&d) {
        return Err(format!("{s} is out of range: 100ms to 60s, or off"));
    }
    Ok(TraceEvery(Some(d)))
}

pub use model::hostname;
