//! The SNMP poller: the glogger cycle of `seeds/002_931bea2baf348364.txt`
//! (one GET per target at each interval boundary, sent without waiting,
//! responses collected until the interval's time slice ends, silence recorded
//! as an error sample), with its own minimal BER codec and a fake agent farm
//! that injects what real agents do on bad days.

pub mod ber;
pub mod farm;
pub mod message;
pub mod mib;
pub mod oid;
pub mod plan;
pub mod poller;
mod series;
pub mod targets;
pub mod track;

pub use message::Version;
pub use oid::Oid;
pub use plan::{PlannedTarget, plan};
pub use poller::{Poller, PollerConfig, PollerStats};
