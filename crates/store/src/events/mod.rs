//! Event columns: per-CPU samples (time, pid, tid, ip, call chain) kept as
//! compressed columnar batches in append-only logs. See `docs/format/events.md`.

mod batch;
mod log;

pub use batch::{
    BatchError, Column, Encoding, EventBatch, Header, MAX_EVENTS, MapInfo, ProcInfo, Want, encode_many, par_map,
    threads_for,
};
pub use log::{EVENTS, EventLog, EventQuery, EventStats, Top};
