//! The collector's own resident memory (`/proc/self/statm`); its CPU time
//! comes from the `clock` crate.

use crate::proc_file::ProcFile;

/// Resident set size in bytes, from the second field of `/proc/self/statm`.
#[derive(Debug)]
pub struct Rss {
    statm: Option<ProcFile>,
    page_size: u64,
}

impl Rss {
    pub fn open() -> Rss {
        Rss { statm: ProcFile::open("/proc/self/statm").ok(), page_size: rustix::param::page_size() as u64 }
    }

    pub fn bytes(&mut self) -> Option<u64> {
        let text = self.statm.as_mut()?.read().ok()?;
        let pages: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
        Some(pages * self.page_size)
    }
}
