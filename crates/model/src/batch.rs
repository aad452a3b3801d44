//! One collection round's worth of samples, as it travels from a collector to
//! a store (and, later, over the wire): all samples share one timestamp, and
//! series are declared once by the sender and then referred to by a small id.

use crate::{SeriesKey, Timestamp};

/// Samples taken at one instant by one sender.
///
/// Invariants: every id in `points` was declared in `defs` of this batch or of
/// an earlier batch from the same sender; ids are the sender's own, dense from 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// The instant the round was scheduled for (an interval boundary), not the
    /// moment the files were read: hosts sampling on the same boundary line up.
    pub time: Timestamp,
    /// Series this sender mentions for the first time: (sender's id, key).
    pub defs: Vec<(u32, SeriesKey)>,
    /// (sender's id, value). Counters are raw cumulative values.
    pub points: Vec<(u32, f64)>,
}

impl Batch {
    pub fn new(time: Timestamp) -> Batch {
        Batch { time, defs: Vec::new(), points: Vec::new() }
    }
}

/// Where a producer hands its rounds, never waiting: a bounded queue to a
/// writer thread (`SyncSender`), or a sink that stores the round on the
/// producer's own thread when it can (`node::pipelines`). `Full` gives the batch
/// back, so the producer can count it and carry its declarations on.
pub trait Sink {
    fn try_send(&self, batch: Batch) -> Result<(), std::sync::mpsc::TrySendError<Batch>>;
}

impl Sink for std::sync::mpsc::SyncSender<Batch> {
    fn try_send(&self, batch: Batch) -> Result<(), std::sync::mpsc::TrySendError<Batch>> {
        std::sync::mpsc::SyncSender::try_send(self, batch)
    }
}
