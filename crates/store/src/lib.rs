//! kansoku's embedded store: keeps every raw sample.
//!
//! Write path: [`Store::append`] frames the batch into the WAL (fsync per
//! [`FsyncPolicy`]), then adds it to the in-memory head. When the head spans
//! [`Options::block_duration`] it is written as an immutable, compressed block
//! and the WAL segments it covers are deleted. Read path: blocks, then the
//! head. The store knows nothing of HTTP, the collector or the wire.
//!
//! The WAL commits in groups (an appender writes under the writer lock and
//! fsyncs outside it; appends written meanwhile ride on that fsync,
//! `wal::GroupSync`) and writes each series definition twice; a segment that
//! did not replay whole is kept in `wal/damaged/`, never deleted. The head
//! keeps each series' newest samples raw and seals every 32 before them into
//! a compressed chunk (`samples::chunk`). A block keeps each entry's place
//! (`block::Loc`), never its key — keys are interned once per store — and
//! frames each chunk with its index number, with a compressed copy of the
//! keys after every 64 chunks, so a block whose index fails is read by
//! scanning them (`block::recover_block`). Blocks are merged by the hour
//! (compaction) and carry downsampled tiers (`tier::Tier`); retention removes
//! the oldest. Range queries (`query::{range, Bucketer}`) take their answers'
//! columns from a bounded pool that lets go when idle (`query::pool`); freed
//! memory is given back to the kernel after flushes, merges and pool trims
//! (`heap`, the crate's only unsafe module). Beside the series sit the
//! per-CPU event logs (`events::{EventLog, EventQuery}`). Readers read it
//! through the `source` crate's interface (`as_source`), as they read
//! ClickHouse.

mod as_source;
mod block;
mod dir;
pub mod events;
mod head;
pub mod heap;
mod open_files;
pub mod query;
pub mod samples;
mod store;
pub mod tier;
pub mod wal;

use std::path::PathBuf;

pub use block::{BlockError, BlockMeta, read_block_meta};
pub use store::{
    Appended, Appender, DiskBudget, DiskUsage, FsyncPolicy, Options, Retention, SERIES_MAX_DEFAULT, Store, StoreStats,
};

/// The block files of a data directory that hold its data, oldest first
/// (those a compaction replaced, left by a crash, skipped): for reports that
/// read their indexes (`kansoku lab store --report`).
pub fn block_files(root: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    let mut reach = None;
    let mut out = Vec::new();
    for (g, path) in block::list_blocks(&dir::blocks_dir(root))? {
        if !block::replaces(reach, g) {
            reach = Some(reach.map_or(g.last, |r: u64| r.max(g.last)));
            out.push(path);
        }
    }
    Ok(out)
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path} is not a kansoku data directory (no KANSOKU file, not empty); choose a new or empty directory")]
    NotOurs { path: PathBuf },
    #[error("{path} does not exist; run `kansoku up --data {path}` to create it, or pass the right --data")]
    Missing { path: PathBuf },
    #[error("{path} has data format {found:?}, this kansoku reads format 1; use the kansoku that wrote it")]
    Format { path: PathBuf, found: String },
    #[error(
        "{path} is in use by another kansoku (pid {pid}); stop it, or use read-only commands (`kansoku query --data`) which work while it runs"
    )]
    Locked { path: PathBuf, pid: String },
    #[error("store opened read-only")]
    ReadOnly,
    #[error("{op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Block(#[from] BlockError),
    #[error(transparent)]
    Events(codec::events::BatchError),
}
