//! Host collectors and the loop that runs them.
//!
//! Each source (a procfs or sysfs file family) is a module with a pure parser
//! over the file's text and a thin [`HostSource`] that reads the file and emits
//! samples. The [`Collector`] wakes on absolute interval boundaries (wall time
//! mod interval), runs every source into one [`model::Batch`] stamped with the
//! boundary, adds its own cost, and hands the batch to a bounded queue.
//! See `docs/metrics.md` for every metric, its source and its resolution.

mod collector;
mod emitter;
pub mod own_cost;
mod proc_file;
pub mod procfs;
mod source;
pub mod sysfs;

pub use collector::{Collector, CollectorConfig, CollectorStats, INTERVAL_MAX, INTERVAL_MIN, parse_interval};
pub use emitter::Emitter;
pub use proc_file::ProcFile;
pub use source::{HostSource, ParseError, SourceError, default_sources};
