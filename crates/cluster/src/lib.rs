//! kansoku's cluster transport (`docs/format/wire.md`, ARCHITECTURE.md):
//! (the messages themselves are the `wire` crate's)
//! - [`spool`]: the agent's bounded on-disk queue of unacknowledged batches;
//! - [`agent`]: spooler and sender (reconnects, resends oldest first);
//! - [`server`]: the ingest listener (auth, limits, dedup, acks after fsync);
//! - [`hosts`]: what the server knows of each agent (state, clock offset);
//! - [`tls`]: rustls configuration from PEM files.

pub mod agent;
pub mod hosts;
pub mod net;
pub mod server;
pub mod spool;
pub mod tls;
