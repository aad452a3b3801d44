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
//! reader queries use (`reader`: series and samples as `store::Source`;
//! `events`: profiles counted by SQL as `store::source::EventSource`), and a
//! cluster on loopback for tests and the lab (`local`).

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
