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
pub use selector::{MatchOp, Matcher, Selector, SelectorError};
pub use series::{METRIC_NAME_LABEL, SeriesKey};
pub use timestamp::{
    DEFAULT_SINCE, DurationError, Timestamp, civil_from_days, parse_duration, parse_time, resolve_range,
};
