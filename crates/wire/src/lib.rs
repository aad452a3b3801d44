//! The agent <-> server wire protocol (`docs/format/wire.md`), apart from
//! any I/O so that it is small to build and to fuzz:
//! - [`frame`]: framed, checksummed messages ([`Msg`]);
//! - [`rounds`]: the columnar, compressed encoding of collection rounds.

pub mod frame;
pub mod rounds;

pub use frame::*;

/// A job's result bytes as an agent sends them back, or why it failed, in
/// words (`Msg::JobDone`).
pub type JobResult = Result<Vec<u8>, String>;
