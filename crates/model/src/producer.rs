//! What every sampler on a node is to whoever runs it: a [`Producer`] has a
//! name, an interval, a report of itself, and makes one round at a time.
//! The host collector, the SNMP poller, the process scanner, the kernel
//! tracer, the fragmentation scan, rule groups, synthetic hosts and a
//! component's figures as series all take this one shape; `node::rounds`
//! is the one loop that runs them (wake on each wall-clock boundary, count
//! the rounds missed and dropped, carry a dropped round's series
//! declarations into the next), and `up`, `server` and `agent` run the same
//! list of them. The API sees their reports only.

use std::sync::Arc;
use std::time::Duration;

use crate::report::Figure;
use crate::{Batch, Timestamp};

/// A component's figures, read from any thread while it runs.
pub type ReportFn = Arc<dyn Fn() -> Vec<Figure> + Send + Sync>;

/// A sampler of series, run one round per boundary of its interval.
pub trait Producer: Send {
    /// Its thread's name and its report's section (`/api/v1/status`).
    fn name(&self) -> &'static str;

    /// Rounds run on the wall-clock boundaries of this interval.
    fn interval(&self) -> Duration;

    /// Its figures; `None` for a producer that reports nothing of itself.
    fn report(&self) -> Option<ReportFn>;

    /// One round for the boundary `t`, `lateness_ns` after it: the batch to
    /// store, or `None` when this round has nothing to store. A batch
    /// declares a series (in `defs`) once, in the first batch that holds
    /// it; a round the queue had no room for is dropped whole and its
    /// declarations ride on the next batch, so ids stay valid.
    fn round(&mut self, t: Timestamp, lateness_ns: i64) -> Option<Batch>;

    /// `n` boundaries passed while a round overran: counted, not made up.
    fn missed(&mut self, _n: u64) {}

    /// The round just made was dropped: its queue was full.
    fn dropped(&mut self) {}

    /// The wall clock stepped back; rounds resume from the next boundary.
    fn clock_stepped(&mut self) {}

    /// Stores its rounds on its own thread while the store is free (the
    /// 100 ms producers: host collector, SNMP poller), rather than waking a
    /// writer thread each round.
    fn inline(&self) -> bool {
        false
    }

    /// Makes its first round at once rather than at the first boundary (a
    /// scan every ten minutes shows something at start).
    fn starts_at_once(&self) -> bool {
        false
    }
}
