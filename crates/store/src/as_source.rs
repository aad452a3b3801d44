//! The embedded store as a [`source::Source`] and [`source::EventSource`]:
//! the interface every reader of stored data goes through (crate `source`).

use codec::events::Want;
use model::{Selector, SeriesKey, Timestamp};
use source::tier::Tier;
use source::{EventCounts, EventQuery, EventSource, EventsError, Shape, Source, count_batches};

use crate::Store;

impl Source for Store {
    fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize) {
        Store::series_limited(self, sel, limit)
    }

    fn series(&self, sel: &Selector) -> Vec<(u32, SeriesKey)> {
        Store::series(self, sel)
    }

    fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>) {
        Store::read(self, id, from, to)
    }

    fn tiers(&self) -> Vec<i64> {
        Store::tiers(self)
    }

    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier {
        Store::read_tier(self, id, res, from, to)
    }

    fn scan(&self, id: u32, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&[i64], &[f64])) {
        Store::scan(self, id, from, to, f)
    }

    fn scan_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&Tier)) {
        Store::scan_tier(self, id, res, from, to, f)
    }
}

/// A shared source reads as the source itself.
impl EventSource for Store {
    fn count(&self, q: &EventQuery, pid: Option<u32>, shape: Shape, max: u64) -> Result<EventCounts, EventsError> {
        let want = Want {
            time: true,
            pid: true,
            tid: false,
            ip: !matches!(shape, Shape::Timeline { .. }),
            chain: shape == Shape::Stacks,
        };
        let (batches, corrupt) = self.events().scan(q, want);
        let total: u64 = batches.iter().map(|(_, b)| b.len() as u64).sum();
        if total > max {
            return Err(EventsError::TooLarge(total, max));
        }
        Ok(count_batches(batches, corrupt, q, pid, shape))
    }

    fn generation(&self) -> Option<u64> {
        Some(self.events().stats().late_batches.load(std::sync::atomic::Ordering::Relaxed))
    }
}
