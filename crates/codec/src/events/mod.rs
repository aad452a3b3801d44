//! One batch of one CPU's events as columns, and its compressed encoding
//! (`docs/format/events.md`).
//!
//! Each column is transformed to expose its structure (times as deltas from
//! the timer's period, thread ids relative to their process id, instruction
//! pointers as a dictionary and an index) and compressed with zstd; compact
//! encoding tries every codec (and pco) and keeps the smallest. Decoding
//! checks every length against the header, so a damaged or hostile batch is
//! an error, never a wrong answer or an unbounded allocation.

mod batch;
mod column;
mod par;
mod procs;
#[cfg(test)]
mod tests;

pub use batch::Header;
pub use par::{encode_many, par_map, threads_for};

/// Events of one CPU, as parallel columns of equal length, times ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventBatch {
    pub cpu: u32,
    /// Nanoseconds since the Unix epoch.
    pub time: Vec<i64>,
    pub pid: Vec<u32>,
    pub tid: Vec<u32>,
    /// Instruction pointer (user or kernel address).
    pub ip: Vec<u64>,
    /// Per event, its call chain: an index into `stacks`; empty when the
    /// batch has no call chains.
    pub chain: Vec<u32>,
    /// The batch's distinct call chains, leaf (the sampled ip) first.
    pub stacks: Vec<Vec<u64>>,
    /// The processes of the batch's events as they were then: name and the
    /// executable mappings its user addresses fall in, so they can be named
    /// after the process has gone (empty when the source had no side band).
    pub procs: Vec<ProcInfo>,
}

/// A process as its samples saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub comm: String,
    pub maps: Vec<MapInfo>,
}

/// An executable mapping: `[start, end)` of the address space shows the
/// file from byte `pgoff`; `build_id` empty when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapInfo {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub build_id: Vec<u8>,
    pub path: String,
}

impl MapInfo {
    /// The offset in the file of address `ip` of this mapping.
    pub fn file_offset(&self, ip: u64) -> Option<u64> {
        (self.start..self.end).contains(&ip).then(|| ip - self.start + self.pgoff)
    }
}

/// Bounds of the process table (a decoder never allocates beyond them).
pub const MAX_MAPS: usize = 4096;
pub const MAX_COMM: usize = 256;
pub const MAX_PATH: usize = 4096;
pub const MAX_BUILD_ID: usize = 64;

/// The columns an event query can group or filter by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    Cpu,
    Pid,
    Tid,
    Ip,
    Chain,
}

impl Column {
    pub fn parse(s: &str) -> Option<Column> {
        Some(match s {
            "cpu" => Column::Cpu,
            "pid" => Column::Pid,
            "tid" => Column::Tid,
            "ip" => Column::Ip,
            "chain" => Column::Chain,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Column::Cpu => "cpu",
            Column::Pid => "pid",
            Column::Tid => "tid",
            Column::Ip => "ip",
            Column::Chain => "chain",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("event batch columns differ in length (time {time}, pid {pid}, tid {tid}, ip {ip}, chain {chain})")]
    Ragged { time: usize, pid: usize, tid: usize, ip: usize, chain: usize },
    #[error("event batch is empty")]
    Empty,
    #[error("event batch has {0} events; at most {MAX_EVENTS} per batch")]
    TooLarge(usize),
    #[error("malformed event batch: {0}")]
    Malformed(&'static str),
}

/// A batch holds at most this many events (about 1.6 s of one CPU at 10 kHz
/// would be 16,000): bounds what a decoder allocates for a hostile header.
pub const MAX_EVENTS: usize = 1 << 20;
/// Frames of one call chain at most (the kernel's default
/// `perf_event_max_stack` is 127).
pub const MAX_DEPTH: usize = 512;
/// Frames of a batch's stack table at most (32 MiB decoded).
pub const MAX_FRAMES: usize = 1 << 22;

/// How hard [`EventBatch::encode`] works. Measured on a real `perf record -F
/// 10000 -a` capture in batches of 1,000 events (`docs/benchmarks.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// One codec per column, chosen by what the column holds, zstd level 1:
    /// ~3.2 B/event at ~13 M events/s per core. For the agent and ingest,
    /// where CPU time is the workload's.
    #[default]
    Fast,
    /// The smallest of every codec, zstd level 3 and pco per column: ~2.9
    /// B/event at ~1.4 M events/s. For rewriting stored data.
    Compact,
}

/// Which columns to decompress.
#[derive(Debug, Clone, Copy, Default)]
pub struct Want {
    pub time: bool,
    pub pid: bool,
    pub tid: bool,
    pub ip: bool,
    pub chain: bool,
}

impl Want {
    pub const ALL: Want = Want { time: true, pid: true, tid: true, ip: true, chain: true };

    /// Just the column `c` (and not even time).
    pub fn column(c: Column) -> Want {
        let mut w = Want::default();
        match c {
            Column::Cpu => {}
            Column::Pid => w.pid = true,
            Column::Tid => w.tid = true,
            Column::Ip => w.ip = true,
            Column::Chain => w.chain = true,
        }
        w
    }
}
