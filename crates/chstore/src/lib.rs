//! The store at scale (issue 27): a kansoku server in front of a ClickHouse
//! cluster instead of its embedded store. ClickHouse keeps what one machine
//! cannot — sharded across servers, each shard replicated through ZooKeeper,
//! columnar and compressed — and kansoku keeps its protocol, its agents and
//! its idea of exactly once. This crate holds the schema (`schema`: series
//! dictionary, samples with their 1 s and 1 min tiers as materialised views,
//! per-CPU events as columns, each agent spool's mark; plain MergeTree on
//! one server, `Replicated*` under `Distributed` on a cluster, all of it
//! accepted by ClickHouse 18.16), the HTTP client (`client`: RowBinary in,
//! text out, failing over among the addresses given), the writer a server's
//! ingest calls per batch (`writer`: deterministic blocks, so a batch resent
//! through another server is deduplicated by the replicated tables), the
//! reader queries use (`reader`: series and samples as `source::Source`;
//! `events`: profiles counted by SQL as `source::EventSource`), and a
//! cluster on loopback for tests and the lab (`local`).
//!
//! The series dictionary is keyed by the key's hash (`series_id`, so every
//! server makes the same rows); events keep their chains and process tables;
//! `Layout::statements` is the schema's DDL. The reader asks for a selector's
//! series in one query and pushes the range API's buckets down into SQL;
//! `Both` reads it beside the server's own embedded series. The writer also
//! drops old data by day partition (`drop_before`), keeps each spool's mark
//! (`mark`, `set_mark`), files shared symbol sources (`put_symbol`,
//! `get_symbol`) and sets the insert quorum (`set_insert_quorum`).

pub mod client;
pub mod events;
pub mod local;
pub mod reader;
pub mod schema;
pub mod writer;

pub use client::{Client, Error, Target};
pub use reader::{Both, Reader};
pub use schema::Layout;
pub use writer::{OpenError, Writer, series_id};
