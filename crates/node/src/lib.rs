//! The pipelines of a running kansoku, wired the same way whatever the
//! command: each producer (`model::producer::Producer`: host collector, SNMP
//! poller, kernel tracer, processes, fragmentation, rule groups, synthetic
//! hosts) runs in the one round loop ([`rounds`]) on its own thread and
//! hands its rounds to a bounded queue; a writer thread of its own drains the
//! queue into the store (and the live broadcast) — [`pipelines`] — or, on an
//! agent, into the spool that the sender ships from — [`agent`]. A full queue drops and counts; nothing
//! blocks a producer. [`signal`] is the stop on Ctrl-C or SIGTERM and what
//! systemd is told (ready, watchdog, stopping);
//! [`supervise`] records every thread's panic and shows it. The binary
//! parses flags and picks the producers; what runs is here.
//!
//! A producer that samples every 100 ms stores its round on its own thread
//! while the store's writer lock is free (`Pipelines::add` of an inline producer,
//! `Store::try_append`) and queues it otherwise; the per-CPU sampler's sets
//! go to an event writer thread of their own. On an agent (`agent::run`) the
//! collector and the sampler feed the spool.

use std::time::Duration;

pub mod agent;
pub mod pipelines;
pub mod rounds;
pub mod signal;
pub mod supervise;

/// Rounds buffered between a producer and its store writer or spooler: 25 s
/// at 100 ms. A store that stalls longer makes the producer drop rounds
/// (counted), never block.
pub const QUEUE_ROUNDS: usize = 256;

/// Sets of per-CPU event batches (a second of every CPU each) buffered
/// between the sampler and the store or spool: 16 s. Full: sets dropped and
/// counted.
pub const PERF_QUEUE: usize = 16;

/// Ring data pages per CPU: 1 MiB, ~26,000 samples, 2.6 s at 10 kHz.
pub const PERF_RING_PAGES: usize = 256;
/// How often the sampler drains the rings.
pub const PERF_DRAIN: Duration = Duration::from_millis(50);
/// Per-CPU samples go to the store as one set per this much wall-clock time
/// (an agent uses its `--batch`).
pub const PERF_BATCH: Duration = Duration::from_secs(1);
