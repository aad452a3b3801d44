//! Sources under `/proc`. Each module: a pure `parse_*` over the file's text,
//! and a `*Source` (a `HostSource`) that reads the file each round and emits node_exporter-named
//! series.

pub mod diskstats;
pub mod loadavg;
pub mod meminfo;
pub mod net_dev;
pub mod pressure;
pub mod stat;

use std::path::Path;

use crate::proc_file::ProcFile;
use crate::source::{Missing, ParseError, SourceError};

/// Opens `root/rel` for a source named `name`, or says why it is missing.
pub(crate) fn open(root: &Path, rel: &str, name: &'static str) -> Result<ProcFile, Missing> {
    let path = root.join(rel);
    ProcFile::open(&path).map_err(|e| Missing::new(name, format!("{}: {e}", path.display())))
}

/// Names the file in a parser's error.
pub(crate) fn parsed<T>(path: &Path, r: Result<T, ParseError>) -> Result<T, SourceError> {
    r.map_err(|source| SourceError::Parse { path: path.display().to_string(), source })
}
