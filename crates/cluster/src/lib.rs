//! kansoku's cluster transport (`docs/format/wire.md`, ARCHITECTURE.md):
//! (the messages themselves are the `wire` crate's)
//! - [`spool`]: the agent's bounded on-disk queue of unacknowledged batches;
//! - [`agent`]: spooler and sender (reconnects, resends oldest first);
//! - [`server`]: the ingest listener (auth, limits, dedup, acks after fsync);
//! - [`hosts`]: what the server knows of each agent (state, clock offset);
//! - [`tls`]: rustls configuration from PEM files.
//!
//! The agent also runs the jobs the server hands it (`agent::JobRunner`;
//! `server::jobs` starts a job on every agent it names at one instant on each
//! one's clock, and carries the result bytes back without reading them), and
//! sends the symbol sources it is asked for: the ingest server asks agents
//! for the build ids and boot tables their event batches name. Several
//! servers in front of ClickHouse share those sources through it
//! (`server::SharedSymbols`).

pub mod agent;
pub mod hosts;
pub mod net;
pub mod server;
pub mod spool;
pub mod tls;
