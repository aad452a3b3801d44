//! The bottleneck verdict — the half of seed 001
//! (`seeds/001_ad0cddd3f1c2901a.txt`) that names an overload's type from
//! what the instruments saw: **CPU-busy** (user or kernel), **I/O-bound**
//! (the CPU idle while tasks wait on the disk), **network-bound** (packets
//! waiting in queueing disciplines), **lock contention**, **memory
//! pressure**, or **healthy**. For each window of a host, a few
//! features are read by PromQL from what kansoku already stores (the
//! collector's CPU modes and pressure stalls, the kernel histograms of
//! `crates/trace`), then a rule table a person can read (`RULES`,
//! docs/diagnosis.md) picks the verdict and keeps the numbers that decided
//! it as its evidence, with a confidence from how far past its threshold
//! each deciding number is.
//!
//! `tests/recorded` holds the windows of a real campaign (`kansoku lab
//! diagnose --record`) that the rules must keep naming.

mod features;
mod rules;

pub use features::{Features, features, features_by_host};
pub use rules::{Evidence, Kind, RULES, Verdict, classify};
