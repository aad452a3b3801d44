//! Plain data shared by every kansoku crate: time, series identity, batches of
//! samples, the Prometheus-style selectors that pick series, and the figures
//! a component reports of itself, the alerts active now. Nothing here
//! does I/O, so every other crate can depend on it without pulling anything in.

pub mod alert;
mod batch;
pub mod report;
mod selector;
mod series;
mod timestamp;

pub use batch::Batch;

/// The value Prometheus writes to mark a series gone (a staleness marker):
/// a NaN no computation produces; never a sample's value. Rule groups and
/// remote writes store it; range reads and tiers leave it out.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;
pub use selector::{MatchOp, Matcher, Selector, SelectorError};
pub use series::{METRIC_NAME_LABEL, SeriesKey};
pub use timestamp::{
    DEFAULT_SINCE, DurationError, Timestamp, civil_from_days, parse_duration, parse_time, resolve_range,
};
