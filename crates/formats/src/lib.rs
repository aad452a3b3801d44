//! The formats stored samples leave kansoku in, written in one place each:
//! OpenMetrics 1.0 and Prometheus text 0.0.4 (`openmetrics`: the API's
//! `/prometheus/federate` and `kansoku export` write the same lines), CSV and
//! InfluxDB line protocol (`export`), and Apache Parquet (`parquet`, behind
//! the `parquet` feature: ~1 min of compile on 2 cores). Pure writers over
//! the store's reads; the binary and the API only pick one.

pub mod export;
pub mod openmetrics;
#[cfg(feature = "parquet")]
pub mod parquet;

pub use export::{Format, Request, csv_field, label_columns, write};
