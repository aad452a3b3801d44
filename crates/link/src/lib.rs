//! The agent ⇄ server connection, for both ends: TCP or TLS over it, the
//! server list an agent fails over along, and frames read one at a time
//! into `wire::Msg`s by a reader task with a bounded queue (`net`); rustls
//! configurations from PEM files (`tls`). The messages themselves are the
//! `wire` crate's, the agent's and the ingest's logic their own crates'.

pub mod net;
pub mod tls;
