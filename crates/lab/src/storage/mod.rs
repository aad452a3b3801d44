//! The store's figures: bytes per sample, ingest, range and tier queries,
//! events, beside Prometheus, VictoriaMetrics and InfluxDB (`store_bench`),
//! and ClickHouse at scale (`clickhouse_bench`); where a data directory's
//! bytes go (`usage`); PromQL's range queries
//! beside Prometheus's (`promql_bench`).

pub mod clickhouse_bench;
pub mod promql_bench;
pub mod store_bench;
pub mod usage;
