//! The contract every host source implements, and the registry of sources the
//! collector runs by default. Adding a source: one module, one line here.

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::{procfs, sysfs};

/// A family of files read once per round.
pub trait HostSource: Send {
    /// Short stable name, used as the `source` label of error counters.
    fn name(&self) -> &'static str;
    /// Reads and emits one round of samples.
    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError>;
    /// The files [`HostSource::collect`] reads each round: what the collector's
    /// floor reads and nothing more ([`crate::Collector::read_round`]).
    fn files(&mut self) -> Vec<&mut ProcFile>;
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("parse {path}: {source}")]
    Parse { path: String, source: ParseError },
}

/// What a parser did not understand, by line (1-based).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {what}")]
pub struct ParseError {
    pub line: usize,
    pub what: String,
}

impl ParseError {
    pub fn new(line: usize, what: impl Into<String>) -> ParseError {
        ParseError { line, what: what.into() }
    }
}

/// Parses one unsigned decimal field, naming the field when it is not one.
pub(crate) fn field_u64(s: Option<&str>, line: usize, field: &str) -> Result<u64, ParseError> {
    let s = s.ok_or_else(|| ParseError::new(line, format!("missing field {field}")))?;
    parse_u64(s).ok_or_else(|| ParseError::new(line, format!("field {field}: {s:?} is not an unsigned integer")))
}

/// Decimal digits to `u64`, `None` on anything else or overflow. A plain
/// loop: `str::parse` handles signs and radixes we never see and showed in
/// the collector's profile.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s.as_bytes() {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// A source this host does not offer, and why (logged once at start-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub source: &'static str,
    pub why: String,
}

impl Missing {
    pub fn new(source: &'static str, why: impl Into<String>) -> Missing {
        Missing { source, why: why.into() }
    }
}

/// Every source this host offers, rooted at `root` (`/` in production, a
/// fixture tree in tests). Sources whose files this kernel lacks are left out
/// and named in the second list, so the caller can log them once.
pub fn default_sources(root: &Path) -> (Vec<Box<dyn HostSource>>, Vec<Missing>) {
    let mut sources: Vec<Box<dyn HostSource>> = Vec::new();
    let mut missing = Vec::new();
    let mut add = |r: Result<Box<dyn HostSource>, Missing>| match r {
        Ok(s) => sources.push(s),
        Err(m) => missing.push(m),
    };
    add(procfs::stat::StatSource::open(root));
    add(procfs::meminfo::MeminfoSource::open(root));
    add(sysfs::block::BlockSource::open(root).or_else(|_| procfs::diskstats::DiskstatsSource::open(root)));
    add(procfs::net_dev::NetDevSource::open(root));
    add(procfs::loadavg::LoadavgSource::open(root));
    add(procfs::pressure::PressureSource::open(root));
    add(sysfs::cpuidle::CpuidleSource::open(root));
    (sources, missing)
}

#[cfg(test)]
mod tests {
    use super::parse_u64;

    #[test]
    fn parses_u64_like_std() {
        for s in ["0", "7", "18446744073709551615", "18446744073709551616", "", "-1", "1 ", "12a", "007"] {
            assert_eq!(parse_u64(s), s.parse::<u64>().ok(), "{s:?}");
        }
        assert_eq!(parse_u64("+1"), None, "procfs never writes a sign; std would accept it");
    }
}
