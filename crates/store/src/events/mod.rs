//! Event columns: per-CPU samples (time, pid, tid, ip, call chain) kept as
//! compressed columnar batches in append-only logs. See `docs/format/events.md`.

mod batch;
mod log;

pub(crate) use batch::par_map;
pub use batch::{
    BatchError, Column, Encoding, EventBatch, Header, MAX_BUILD_ID, MAX_COMM, MAX_EVENTS, MAX_MAPS, MAX_PATH, MapInfo,
    ProcInfo, Want, encode_many, threads_for,
};
pub use log::{EVENTS, EventLog, EventQuery, EventStats, Top};
