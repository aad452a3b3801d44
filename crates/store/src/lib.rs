//! kansoku's embedded store: keeps every raw sample.
//!
//! Write path: [`Store::append`] frames the batch into the WAL (fsync per
//! [`FsyncPolicy`]), then adds it to the in-memory head. When the head spans
//! [`Options::block_duration`] it is written as an immutable, compressed block
//! and the WAL segments it covers are deleted. Read path: blocks, then the
//! head. The store knows nothing of HTTP, the collector or the wire.

mod block;
mod dir;
pub mod events;
mod head;
pub mod heap;
mod open_files;
pub mod query;
pub mod samples;
pub mod source;
mod store;
pub mod tier;
pub mod wal;

use std::path::PathBuf;

pub use block::{BlockError, BlockMeta, read_block_meta};
pub use source::Source;
pub use store::{
    Appended, Appender, DiskBudget, DiskUsage, FsyncPolicy, Options, Retention, SERIES_MAX_DEFAULT, Store, StoreStats,
};

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
