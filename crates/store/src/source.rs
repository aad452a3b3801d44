//! What the readers of series need from a store — the query languages, the
//! range API, the diagnosis — as one trait, so that they read the embedded
//! store and a ClickHouse cluster (`chstore::Reader`) alike.

use model::{Selector, SeriesKey, Timestamp};

use crate::Store;
use crate::query::Agg;
use crate::tier::Tier;

/// Per series, one column of buckets per aggregate.
pub type Buckets = Vec<Vec<Vec<Option<f64>>>>;

/// Series by selector and their samples. Ids are the source's own, valid
/// for the life of the source.
pub trait Source: Send + Sync + std::fmt::Debug {
    /// The first `limit` series matching `sel` (sorted by key) and how many
    /// match in all.
    fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize);

    /// Every series matching `sel`, sorted by key.
    fn series(&self, sel: &Selector) -> Vec<(u32, SeriesKey)> {
        self.series_limited(sel, usize::MAX).0
    }

    /// Samples of series `id` with `from <= t <= to`, in time order.
    fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>);

    /// The tier resolutions the source keeps, ascending.
    fn tiers(&self) -> Vec<i64>;

    /// Tier `res` of series `id` for the periods starting in `[from, to]`.
    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier;

    /// The samples of `ids` in `[from, to]` bucketed where they are kept:
    /// `n` buckets of `step` from `start`, a column per aggregate, as
    /// [`crate::query::downsample`] would make them. None: the source has
    /// no such shortcut, and the caller reads the samples.
    #[allow(clippy::too_many_arguments)]
    fn buckets(
        &self,
        _ids: &[u32],
        _from: Timestamp,
        _to: Timestamp,
        _start: i64,
        _step: i64,
        _n: usize,
        _aggs: &[Agg],
    ) -> Option<Buckets> {
        None
    }
}

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
}

/// A shared source reads as the source itself.
impl<T: Source + ?Sized> Source for std::sync::Arc<T> {
    fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize) {
        (**self).series_limited(sel, limit)
    }

    fn series(&self, sel: &Selector) -> Vec<(u32, SeriesKey)> {
        (**self).series(sel)
    }

    fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>) {
        (**self).read(id, from, to)
    }

    fn tiers(&self) -> Vec<i64> {
        (**self).tiers()
    }

    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier {
        (**self).read_tier(id, res, from, to)
    }

    fn buckets(
        &self,
        ids: &[u32],
        from: Timestamp,
        to: Timestamp,
        start: i64,
        step: i64,
        n: usize,
        aggs: &[Agg],
    ) -> Option<Buckets> {
        (**self).buckets(ids, from, to, start, step, n, aggs)
    }
}
