//! Event logs: per-CPU samples kept as the `codec` crate's compressed
//! columnar batches in append-only logs, and the queries over them. See
//! `docs/format/events.md`.

mod log;

pub use log::{EVENTS, EventLog, EventQuery, EventStats, ORPHAN, Top};
