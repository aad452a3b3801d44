//! The collector's own cost, read from the kernel: thread and process CPU time
//! (ns, exact, from `clock_gettime`), and resident memory (`/proc/self/statm`).

use rustix::time::{ClockId, clock_gettime};

use crate::proc_file::ProcFile;

pub fn thread_cpu_ns() -> i64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

pub fn process_cpu_ns() -> i64 {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

pub fn monotonic_ns() -> i64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

pub fn realtime_ns() -> i64 {
    let t = clock_gettime(ClockId::Realtime);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

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
