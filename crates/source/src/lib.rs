//! What the readers of stored data need from a store, as one interface
//! below both stores: the embedded store (`store`) and a ClickHouse cluster
//! (`chstore`) implement it; the query languages (PromQL, InfluxQL), the
//! range API, recording rules and alerts, and the diagnosis read only
//! through it. [`Source`] is series by selector and their samples, read a
//! part at a time or bucketed where they are kept; [`tier::Tier`] is the
//! downsampled shape a store answers with; [`EventSource`] counts the
//! per-CPU events of a profile by [`Shape`] where they are kept. Plain data
//! and arithmetic, no I/O: a reader composed over several sources (the
//! server's own series beside ClickHouse's) is written against this crate
//! alone.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use codec::events::{EventBatch, ProcInfo};
use model::{Selector, SeriesKey, Timestamp};

pub mod cache;
pub mod tier;

pub use cache::CountCache;

use tier::Tier;

/// Per series, one column of buckets per aggregate.
pub type Buckets = Vec<Vec<Vec<Option<f64>>>>;

/// How the samples of a bucket are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    Min,
    Max,
    Avg,
    Last,
    Count,
}

impl Agg {
    pub fn name(self) -> &'static str {
        match self {
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Avg => "avg",
            Agg::Last => "last",
            Agg::Count => "count",
        }
    }
}

/// An aggregation name that is none of [`Agg`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown aggregation {0:?}: use min, max, avg, last or count")]
pub struct BadAgg(pub String);

impl FromStr for Agg {
    type Err = BadAgg;
    fn from_str(s: &str) -> Result<Agg, BadAgg> {
        Ok(match s {
            "min" => Agg::Min,
            "max" => Agg::Max,
            "avg" => Agg::Avg,
            "last" => Agg::Last,
            "count" => Agg::Count,
            other => return Err(BadAgg(other.to_owned())),
        })
    }
}

/// Which per-CPU events: the streams, the CPUs, the time range.
#[derive(Debug, Clone)]
pub struct EventQuery {
    pub streams: Selector,
    /// Only these CPUs; empty means all.
    pub cpus: Vec<u32>,
    /// Inclusive range, ns since the epoch.
    pub from: i64,
    pub to: i64,
}

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

    /// Samples of each of `ids` in `[from, to]`, in the order of `ids`: one
    /// round trip where the source is remote. Stops once more than `limit`
    /// samples are read (the caller refuses such a query).
    fn read_many(&self, ids: &[u32], from: Timestamp, to: Timestamp, limit: usize) -> Vec<(Vec<i64>, Vec<f64>)> {
        let mut out = Vec::with_capacity(ids.len());
        let mut total = 0;
        for &id in ids {
            if total > limit {
                break;
            }
            let r = self.read(id, from, to);
            total += r.0.len();
            out.push(r);
        }
        out
    }

    /// What [`Source::read`] returns, a part at a time in time order: a
    /// source that keeps samples in parts (the embedded store's blocks)
    /// hands them over without gathering the range.
    fn scan(&self, id: u32, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&[i64], &[f64])) {
        let (ts, vals) = self.read(id, from, to);
        f(&ts, &vals);
    }

    /// The tier resolutions the source keeps, ascending.
    fn tiers(&self) -> Vec<i64>;

    /// Tier `res` of series `id` for the periods starting in `[from, to]`.
    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier;

    /// What [`Source::read_tier`] returns, a part at a time in time order (a
    /// part's first period may continue the previous part's last).
    fn scan_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&Tier)) {
        f(&self.read_tier(id, res, from, to));
    }

    /// The samples of `ids` in `[from, to]` bucketed where they are kept:
    /// `n` buckets of `step` from `start`, a column per aggregate, as
    /// `store::query::downsample` would make them. None: the source has
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

    fn read_many(&self, ids: &[u32], from: Timestamp, to: Timestamp, limit: usize) -> Vec<(Vec<i64>, Vec<f64>)> {
        (**self).read_many(ids, from, to, limit)
    }

    fn tiers(&self) -> Vec<i64> {
        (**self).tiers()
    }

    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier {
        (**self).read_tier(id, res, from, to)
    }

    fn scan(&self, id: u32, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&[i64], &[f64])) {
        (**self).scan(id, from, to, f)
    }

    fn scan_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&Tier)) {
        (**self).scan_tier(id, res, from, to, f)
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

/// What a profile counts its events by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Per (pid, sampled ip): the top table.
    Ips,
    /// Per (pid, call chain): flame graphs, folded stacks, pprof. An event
    /// without a chain counts as the chain of its sampled ip alone.
    Stacks,
    /// Per CPU, time bucket (`buckets` equal parts of the range) and pid:
    /// the timeline.
    Timeline { buckets: usize },
}

/// A profile's events, counted where they are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Events counted (those of the pid asked for, if one was).
    pub events: u64,
    /// [`Shape::Ips`]: (pid, sampled ip) -> events.
    pub ips: HashMap<(u32, u64), u64>,
    /// [`Shape::Stacks`]: (pid, chain, leaf first) -> events.
    pub stacks: HashMap<(u32, Vec<u64>), u64>,
    /// Of `events`, those with a call chain.
    pub with_chains: u64,
    /// [`Shape::Timeline`]: cpu -> per bucket, pid -> events.
    pub cells: BTreeMap<u32, Vec<HashMap<u32, u32>>>,
    /// The process tables of the events' batches, oldest first (the latest
    /// description of a process wins).
    pub procs: Vec<ProcInfo>,
    /// Of the streams read, those with a `boot` label: the boot and the
    /// time of their newest event.
    pub boots: Vec<(i64, String)>,
    /// Batches that failed their checksum or did not decode: skipped.
    pub corrupt: u64,
}

impl EventCounts {
    /// Adds `other`'s counts to these (two sources as one).
    pub fn merge(&mut self, other: EventCounts) {
        self.events += other.events;
        self.with_chains += other.with_chains;
        for (k, v) in other.ips {
            *self.ips.entry(k).or_default() += v;
        }
        for (k, v) in other.stacks {
            *self.stacks.entry(k).or_default() += v;
        }
        for (cpu, row) in other.cells {
            match self.cells.get_mut(&cpu) {
                None => {
                    self.cells.insert(cpu, row);
                }
                Some(mine) => {
                    for (a, b) in mine.iter_mut().zip(row) {
                        for (pid, n) in b {
                            *a.entry(pid).or_default() += n;
                        }
                    }
                }
            }
        }
        self.procs.extend(other.procs);
        self.boots.extend(other.boots);
        self.corrupt += other.corrupt;
    }
}

/// Why events could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventsError {
    #[error("{0} samples in the range; narrow it (at most {1})")]
    TooLarge(u64, u64),
    #[error("{0}")]
    Unavailable(String),
}

/// The per-CPU events profiles read: the embedded store's event log, or
/// ClickHouse's `events` table (counted there, by SQL).
pub trait EventSource: Send + Sync + std::fmt::Debug {
    /// Counts the events of `q` (of process `pid` only, if given) by
    /// `shape`. A source that must bring the events to count them refuses
    /// more than `max` (bounded memory).
    fn count(&self, q: &EventQuery, pid: Option<u32>, shape: Shape, max: u64) -> Result<EventCounts, EventsError>;

    /// A number that changes whenever events older than a minute may have
    /// been added (an agent's backlog arriving late): what [`CountCache`]
    /// kept of the past is dropped when it moves. None: the source cannot
    /// say, and nothing of it is kept.
    fn generation(&self) -> Option<u64> {
        None
    }
}

/// Counts scanned batches by `shape` (what a source without a query
/// engine of its own does).
pub fn count_batches(
    mut batches: Vec<(SeriesKey, EventBatch)>,
    corrupt: u64,
    q: &EventQuery,
    pid: Option<u32>,
    shape: Shape,
) -> EventCounts {
    let mut out = EventCounts { corrupt, ..EventCounts::default() };
    let mut boots: HashMap<&str, i64> = HashMap::new();
    for (k, b) in &batches {
        if let (Some(boot), Some(&t)) = (k.get("boot"), b.time.last()) {
            let e = boots.entry(boot).or_insert(t);
            *e = (*e).max(t);
        }
    }
    out.boots = boots.into_iter().map(|(b, t)| (t, b.to_owned())).collect();
    out.boots.sort();
    batches.sort_by_key(|(_, b)| b.time.first().copied().unwrap_or(i64::MIN));
    let keep = |p: u32| pid.is_none_or(|want| want == p);
    for (_, b) in &batches {
        out.procs.extend(b.procs.iter().cloned());
        match shape {
            Shape::Ips => {
                for (p, ip) in b.pid.iter().zip(&b.ip) {
                    if keep(*p) {
                        *out.ips.entry((*p, *ip)).or_default() += 1;
                        out.events += 1;
                    }
                }
            }
            Shape::Stacks => {
                // Counted per batch-local chain first: one key built per stack.
                let mut local: HashMap<(u32, usize), u64> = HashMap::new();
                for i in 0..b.len() {
                    if keep(b.pid[i]) {
                        let key = if b.chain.is_empty() { usize::MAX - i } else { b.chain[i] as usize };
                        *local.entry((b.pid[i], key)).or_default() += 1;
                    }
                }
                for ((p, key), c) in local {
                    let stack = if b.chain.is_empty() { vec![b.ip[usize::MAX - key]] } else { b.stacks[key].clone() };
                    *out.stacks.entry((p, stack)).or_default() += c;
                    out.events += c;
                    if !b.chain.is_empty() {
                        out.with_chains += c;
                    }
                }
            }
            Shape::Timeline { buckets } => {
                let width = bucket_width(q, buckets);
                let row = out.cells.entry(b.cpu).or_insert_with(|| vec![HashMap::new(); buckets]);
                for (t, p) in b.time.iter().zip(&b.pid) {
                    if keep(*p) {
                        let k = (((t - q.from) / width) as usize).min(buckets - 1);
                        *row[k].entry(*p).or_default() += 1;
                        out.events += 1;
                    }
                }
            }
        }
    }
    out
}

/// The width of a timeline bucket: `buckets` equal parts of the query's
/// range (at least 1 ns).
pub fn bucket_width(q: &EventQuery, buckets: usize) -> i64 {
    ((q.to - q.from) / buckets.max(1) as i64).max(1)
}

/// A shared event source counts as the source itself.
impl<T: EventSource + ?Sized> EventSource for std::sync::Arc<T> {
    fn count(&self, q: &EventQuery, pid: Option<u32>, shape: Shape, max: u64) -> Result<EventCounts, EventsError> {
        (**self).count(q, pid, shape, max)
    }

    fn generation(&self) -> Option<u64> {
        (**self).generation()
    }
}
