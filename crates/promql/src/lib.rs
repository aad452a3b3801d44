//! Prometheus compatibility on kansoku's store — PromQL, remote write in
//! ([`remote_write`]) and remote read out ([`remote_read`]) — so that Grafana's Prometheus data source,
//! anyone's PromQL and a Prometheus forwarding its samples all work against
//! every raw sample kansoku keeps. Expressions
//! are parsed by `promql-parser` (the maintained Rust port of Prometheus's
//! grammar); this crate evaluates them as Prometheus 2.42 does — lookback,
//! range windows closed at both ends, the extrapolation of `rate`, vector
//! matching, aggregation arithmetic — but over all steps of a query at once,
//! on nanosecond time, so steps go down to the 10 ms kansoku samples at. The
//! HTTP side (Prometheus's JSON) lives in `api`; the differential test
//! against a real Prometheus in `tests/differential.rs`. Remote write and
//! remote read speak snappy-compressed protobuf; the remote write decoder
//! is fuzzed.

mod aggregate;
mod binary;
mod engine;
mod functions;
mod over_time;
pub mod remote_read;
pub mod remote_write;
mod sum;
mod time;
pub mod value;

pub use engine::{Engine, Error, LOOKBACK_NS, Limits, Output, STALE_NAN, STEPS_MAX, is_stale, parse, series_selector};
pub use functions::bucket_quantile;
pub use value::{Labels, Series, Value};
