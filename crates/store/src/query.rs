//! Range queries shaped for charts: one shared time column and one value
//! column per series (uPlot's data layout), raw or downsampled into buckets,
//! with counter rates derived at query time (the store keeps raw counters).

pub use source::Agg;
use std::str::FromStr;

use model::{Selector, SeriesKey, Timestamp};

use crate::tier::{Scale, Tier};

/// Series one query may touch; more is almost certainly a mistyped selector.
pub const QUERY_SERIES_MAX: usize = 20_000;
/// Cells (times x series) one query may return.
pub const QUERY_CELLS_MAX: usize = 50_000_000;
/// The widest bucket: ten years. With ranges clamped to the storable times
/// (`Timestamp::is_storable`), bucket arithmetic stays far inside `i64`.
pub const STEP_NS_MAX: i64 = 3650 * 86_400 * 1_000_000_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    #[error(transparent)]
    BadAgg(#[from] source::BadAgg),
    #[error("empty time range: from ({from}) is after to ({to})")]
    EmptyRange { from: Timestamp, to: Timestamp },
    #[error("selector matches {0} series (limit {QUERY_SERIES_MAX}); narrow it with more labels")]
    TooManySeries(usize),
    #[error("result would hold {0} cells (limit {QUERY_CELLS_MAX}); ask for fewer points with step or points")]
    TooManyCells(usize),
    #[error("step must be from 1ns to 3650d")]
    BadStep,
    #[error("grouping (by) needs step or points: series are combined per bucket")]
    GroupNeedsBuckets,
}

#[derive(Debug, Clone)]
pub struct RangeQuery {
    pub selector: Selector,
    pub from: Timestamp,
    pub to: Timestamp,
    /// Bucket width; `None` with `points: None` means raw samples.
    pub step_ns: Option<i64>,
    /// Target number of buckets over the range (used when `step_ns` is None).
    pub points: Option<usize>,
    /// Per-second rate of a counter (resets handled) instead of its value.
    pub rate: bool,
    /// Aggregations per bucket; one output column per (series, agg).
    pub aggs: Vec<Agg>,
    /// Combine the bucketed columns of series that share these labels
    /// (`sum by (host)`); `None` keeps every series.
    pub group: Option<Group>,
}

/// Combines several series' columns bucket by bucket, as PromQL's
/// `sum by (host) (...)`: the output key holds the name and only the `by`
/// labels; a bucket where no member has a value stays a gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub by: Vec<String>,
    pub op: GroupOp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupOp {
    Sum,
    Avg,
    Min,
    Max,
    /// Members with a value in the bucket.
    Count,
}

impl FromStr for GroupOp {
    type Err = String;
    fn from_str(s: &str) -> Result<GroupOp, String> {
        Ok(match s {
            "sum" => GroupOp::Sum,
            "avg" => GroupOp::Avg,
            "min" => GroupOp::Min,
            "max" => GroupOp::Max,
            "count" => GroupOp::Count,
            other => return Err(format!("unknown group operation {other:?}: use sum, avg, min, max or count")),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Sample times (raw) or bucket start times (downsampled), ns, ascending.
    pub times: Vec<i64>,
    pub series: Vec<FrameSeries>,
    /// Bucket width when downsampled.
    pub step_ns: Option<i64>,
}

/// A dropped answer's columns go back to the [`pool`] for the next query.
impl Drop for Frame {
    fn drop(&mut self) {
        pool::give(self.series.iter_mut().map(|s| std::mem::take(&mut s.values)));
    }
}

/// Value columns of answers already dropped, kept for the next query's.
///
/// An hour of 256 series at 1,800 buckets × 3 aggregates is 22 MB of
/// columns. Freed, glibc returns such memory to the kernel, and the next
/// query's columns are fresh pages the kernel zeroes and maps one fault at
/// a time: a third of a tier query's time (`docs/benchmarks.md`). Kept
/// here instead — at most [`POOL_BYTES_MAX`], and all let go once no query
/// took one for [`POOL_IDLE`] ([`trim`], which a server calls on a timer) —
/// a dashboard's queries reuse the same pages.
pub mod pool {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Most bytes of columns kept.
    pub const POOL_BYTES_MAX: usize = 64 << 20;
    /// Kept columns are let go after this long without a query.
    pub const POOL_IDLE: Duration = Duration::from_secs(10);
    /// Columns shorter than this are not worth keeping.
    const KEEP_MIN: usize = 64;

    type Column = Vec<Option<f64>>;

    struct Pool {
        columns: Vec<Column>,
        bytes: usize,
        used: Option<Instant>,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool { columns: Vec::new(), bytes: 0, used: None });

    fn lock() -> std::sync::MutexGuard<'static, Pool> {
        POOL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bytes(c: &Column) -> usize {
        c.capacity() * std::mem::size_of::<Option<f64>>()
    }

    /// An empty column with room for `n` values: a kept one if one is
    /// large enough.
    pub fn take(n: usize) -> Column {
        if n >= KEEP_MIN {
            let mut p = lock();
            p.used = Some(Instant::now());
            if let Some(at) = p.columns.iter().rposition(|c| c.capacity() >= n) {
                let c = p.columns.swap_remove(at);
                p.bytes -= bytes(&c);
                return c;
            }
        }
        Vec::with_capacity(n)
    }

    /// Keeps `columns` (emptied) while there is room.
    pub fn give(columns: impl Iterator<Item = Column>) {
        let mut p = lock();
        for mut c in columns {
            if c.capacity() < KEEP_MIN || p.bytes + bytes(&c) > POOL_BYTES_MAX {
                continue;
            }
            c.clear();
            p.bytes += bytes(&c);
            p.columns.push(c);
        }
    }

    /// Lets every kept column go if no query took one for [`POOL_IDLE`].
    pub fn trim() {
        trim_if_idle_for(POOL_IDLE);
    }

    /// Lets every kept column go if no query took one for `idle`.
    pub fn trim_if_idle_for(idle: Duration) {
        let mut p = lock();
        if p.used.is_none_or(|t| t.elapsed() >= idle) && !p.columns.is_empty() {
            p.columns = Vec::new();
            p.bytes = 0;
            drop(p);
            crate::heap::give_back_free();
        }
    }

    /// Bytes of columns kept now.
    pub fn kept_bytes() -> usize {
        lock().bytes
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FrameSeries {
    pub key: SeriesKey,
    /// `None` for raw columns.
    pub agg: Option<Agg>,
    /// One entry per `times` entry; `None` is a gap (no sample there).
    pub values: Vec<Option<f64>>,
}

pub fn range(store: &dyn source::Source, q: &RangeQuery) -> Result<Frame, QueryError> {
    if q.from > q.to {
        return Err(QueryError::EmptyRange { from: q.from, to: q.to });
    }
    // Nothing is stored outside the storable times: a range reaching past
    // them reads the same data, and its bucket arithmetic cannot overflow.
    let clamp = |t: Timestamp| Timestamp(t.0.clamp(Timestamp::STORABLE_MIN.0, Timestamp::STORABLE_END.0 - 1));
    let q = &RangeQuery { from: clamp(q.from), to: clamp(q.to), ..q.clone() };
    let matched = store.series(&q.selector);
    if matched.len() > QUERY_SERIES_MAX {
        return Err(QueryError::TooManySeries(matched.len()));
    }
    if q.group.is_some() && q.step_ns.is_none() && q.points.is_none() {
        return Err(QueryError::GroupNeedsBuckets);
    }
    let step = match (q.step_ns, q.points) {
        (Some(s), _) if !(1..=STEP_NS_MAX).contains(&s) => return Err(QueryError::BadStep),
        (Some(s), _) => Some(s),
        // A derived bucket of a second or more is rounded up to whole
        // seconds (minutes), so it can be answered from a tier.
        (None, Some(n)) => Some(snap_step(((q.to.0 - q.from.0) / n.max(1) as i64).max(1))),
        (None, None) => None,
    };
    // The coarsest tier whose periods tile the buckets, unless the query
    // needs raw samples (rates, last values).
    let tier_res = step
        .filter(|_| !q.rate && !q.aggs.contains(&Agg::Last))
        .and_then(|step| store.tiers().into_iter().rev().find(|&res| step >= res && step % res == 0));
    // A rate at the first sample in range needs the sample before it: look
    // back 60 s, the longest collection interval.
    let read_from = if q.rate { q.from.saturating_sub(std::time::Duration::from_secs(60)) } else { q.from };
    let finish = |mut ts: Vec<i64>, mut vals: Vec<f64>| {
        if q.rate {
            (ts, vals) = rate(&ts, &vals);
        }
        let lo = ts.partition_point(|&t| t < q.from.0);
        ts.drain(..lo);
        vals.drain(..lo);
        (ts, vals)
    };
    let read = |id: u32| {
        let (ts, vals) = store.read(id, read_from, q.to);
        finish(ts, vals)
    };
    match step {
        None => {
            // Every series in one read (one round trip where the source is
            // remote).
            let ids: Vec<u32> = matched.iter().map(|m| m.0).collect();
            let reads = store.read_many(&ids, read_from, q.to, usize::MAX);
            let columns: Vec<_> = matched
                .into_iter()
                .zip(reads)
                .map(|((_, key), (ts, vals))| {
                    let (ts, vals) = finish(ts, vals);
                    (key, ts, vals)
                })
                .collect();
            let (times, values) = align(columns.iter().map(|(_, t, v)| (&t[..], &v[..])));
            let cells = times.len() * values.len();
            if cells > QUERY_CELLS_MAX {
                return Err(QueryError::TooManyCells(cells));
            }
            let series = columns
                .into_iter()
                .zip(values)
                .map(|((key, _, _), values)| FrameSeries { key, agg: None, values })
                .collect();
            Ok(Frame { times, series, step_ns: None })
        }
        Some(step) => {
            let start = q.from.0 - q.from.0.rem_euclid(step);
            let n = ((q.to.0 - start) / step).saturating_add(1) as usize;
            let aggs = if q.aggs.is_empty() { vec![Agg::Avg] } else { q.aggs.clone() };
            // The time column alone counts: a tiny step over no series must not allocate.
            let cells = n.saturating_mul((matched.len() * aggs.len()).max(1));
            if cells > QUERY_CELLS_MAX {
                return Err(QueryError::TooManyCells(cells));
            }
            let times = (0..n as i64).map(|i| start + i * step).collect();
            // Raw buckets where the source computes them itself (a
            // ClickHouse cluster: one query for every series).
            if tier_res.is_none() && !q.rate {
                let ids: Vec<u32> = matched.iter().map(|m| m.0).collect();
                if let Some(columns) = store.buckets(&ids, q.from, q.to, start, step, n, &aggs) {
                    let mut series: Vec<FrameSeries> = matched
                        .iter()
                        .zip(columns)
                        .flat_map(|((_, key), cols)| {
                            cols.into_iter().zip(&aggs).map(|(values, &agg)| FrameSeries {
                                key: key.clone(),
                                agg: Some(agg),
                                values,
                            })
                        })
                        .collect();
                    if let Some(group) = &q.group {
                        series = combine(series, group);
                    }
                    return Ok(Frame { times, series, step_ns: Some(step) });
                }
            }
            // Series are independent: read, decode and bucket them on every
            // core, each keeping only its buckets.
            // A range of whole tier periods: every sample in it is in a
            // period wholly inside it, so those periods alone are exact.
            let whole_periods =
                tier_res.filter(|&res| q.from.0.rem_euclid(res) == 0 && (q.to.0 + 1).rem_euclid(res) == 0);
            let bucket = |(id, key): &(u32, SeriesKey), b: &mut Bucketer| {
                b.reset();
                let columns = if let Some(res) = whole_periods {
                    store.scan_tier(*id, res, q.from, Timestamp(q.to.0 + 1 - res), &mut |t| b.add_tier(t));
                    b.finish(&aggs)
                } else if let Some(res) = tier_res {
                    store.scan_tier(*id, res, Timestamp(start), q.to, &mut |t| b.add_tier(t));
                    let mut columns = b.finish(&aggs);
                    // A tier period holds samples outside [from, to] where the
                    // range cuts a bucket: those edge buckets come from raw
                    // samples, so the answer is the one raw data gives.
                    let mut edges: Vec<usize> =
                        [(q.from.0 > start).then_some(0), (q.to.0 < start + n as i64 * step - 1).then_some(n - 1)]
                            .into_iter()
                            .flatten()
                            .collect();
                    edges.dedup();
                    for k in edges {
                        let lo = start + k as i64 * step;
                        let mut edge = Bucketer::new(lo, step, 1);
                        let (from, to) = (Timestamp(lo.max(q.from.0)), Timestamp((lo + step - 1).min(q.to.0)));
                        store.scan(*id, from, to, &mut |ts, vals| edge.add(ts, vals));
                        for (column, e) in columns.iter_mut().zip(edge.finish(&aggs)) {
                            column[k] = e[0];
                        }
                    }
                    columns
                } else if q.rate {
                    let (ts, vals) = read(*id);
                    b.add(&ts, &vals);
                    b.finish(&aggs)
                } else {
                    // Decoded a chunk at a time into the buckets.
                    store.scan(*id, q.from, q.to, &mut |ts, vals| b.add(ts, vals));
                    b.finish(&aggs)
                };
                columns
                    .into_iter()
                    .zip(&aggs)
                    .map(|(values, &agg)| FrameSeries { key: key.clone(), agg: Some(agg), values })
                    .collect::<Vec<_>>()
            };
            let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(matched.len().max(1));
            let per = matched.len().div_ceil(threads).max(1);
            let mut series: Vec<FrameSeries> = std::thread::scope(|s| {
                let parts: Vec<_> = matched
                    .chunks(per)
                    .map(|part| {
                        s.spawn(|| {
                            // One set of buckets per thread, reset per series.
                            let mut b = Bucketer::new(start, step, n);
                            part.iter().flat_map(|m| bucket(m, &mut b)).collect::<Vec<_>>()
                        })
                    })
                    .collect();
                parts.into_iter().flat_map(|h| h.join().expect("BUG: query thread panicked")).collect()
            });
            if let Some(group) = &q.group {
                series = combine(series, group);
            }
            Ok(Frame { times, series, step_ns: Some(step) })
        }
    }
}

/// Groups bucketed columns by (name, `by` labels, agg) and combines each
/// group bucket by bucket; output sorted by key.
pub fn combine(series: Vec<FrameSeries>, group: &Group) -> Vec<FrameSeries> {
    struct Acc {
        agg: Option<Agg>,
        values: Vec<Option<f64>>,
        members: Vec<u32>,
    }
    type GroupId = (SeriesKey, Option<&'static str>);
    let mut groups: std::collections::BTreeMap<GroupId, Acc> = std::collections::BTreeMap::new();
    for s in series {
        let labels = s.key.labels().iter().filter(|(k, _)| group.by.iter().any(|b| b == k)).cloned();
        let key = SeriesKey::new(s.key.name(), labels);
        let n = s.values.len();
        let acc = groups.entry((key, s.agg.map(Agg::name))).or_insert_with(|| Acc {
            agg: s.agg,
            values: vec![None; n],
            members: vec![0; n],
        });
        for (i, v) in s.values.into_iter().enumerate() {
            let Some(v) = v else { continue };
            acc.members[i] += 1;
            let slot = &mut acc.values[i];
            *slot = Some(match (*slot, group.op) {
                (None, GroupOp::Count) => 1.0,
                (None, _) => v,
                (Some(a), GroupOp::Sum | GroupOp::Avg) => a + v,
                (Some(a), GroupOp::Min) => a.min(v),
                (Some(a), GroupOp::Max) => a.max(v),
                (Some(a), GroupOp::Count) => a + 1.0,
            });
        }
    }
    groups
        .into_iter()
        .map(|((key, _), mut acc)| {
            if group.op == GroupOp::Avg {
                for (v, &m) in acc.values.iter_mut().zip(&acc.members) {
                    if let Some(v) = v {
                        *v /= f64::from(m);
                    }
                }
            }
            FrameSeries { key, agg: acc.agg, values: acc.values }
        })
        .collect()
}

/// Per-second rate between consecutive samples of a counter, stamped at the
/// later sample. A decrease is a counter reset: the rate counts from zero,
/// as Prometheus does.
pub fn rate(ts: &[i64], vals: &[f64]) -> (Vec<i64>, Vec<f64>) {
    let mut out_t = Vec::with_capacity(ts.len().saturating_sub(1));
    let mut out_v = Vec::with_capacity(ts.len().saturating_sub(1));
    for i in 1..ts.len() {
        let dt = (ts[i] - ts[i - 1]) as f64 / 1e9;
        let dv = if vals[i] >= vals[i - 1] { vals[i] - vals[i - 1] } else { vals[i] };
        out_t.push(ts[i]);
        out_v.push(dv / dt);
    }
    (out_t, out_v)
}

/// Aggregates samples into `n` buckets of `step` ns from `start`; empty
/// buckets are `None` (gaps stay gaps).
pub fn downsample(ts: &[i64], vals: &[f64], start: i64, step: i64, n: usize, agg: Agg) -> Vec<Option<f64>> {
    let mut b = Bucketer::new(start, step, n);
    b.add(ts, vals);
    b.finish(&[agg]).pop().expect("one aggregate asked, one column")
}

/// Samples folded into `n` buckets of `step` ns from `start`, every
/// aggregate at once and a part at a time (a block's chunk, then the next):
/// what [`downsample`] gives for each aggregate, in one pass, holding only
/// the buckets. Min and max ignore NaN as `f64::min` does; a sum starts
/// from `-0.0`, as `Iterator::sum` does.
#[derive(Debug)]
pub struct Bucketer {
    start: i64,
    step: i64,
    min: Vec<f64>,
    max: Vec<f64>,
    sum: Vec<f64>,
    count: Vec<f64>,
    last: Vec<f64>,
    /// The bucket being filled, `[begin, end)`: parts come in time order,
    /// so the index is computed once a bucket.
    cur: usize,
    begin: i64,
    end: i64,
}

impl Bucketer {
    pub fn new(start: i64, step: i64, n: usize) -> Bucketer {
        Bucketer {
            start,
            step,
            min: vec![f64::INFINITY; n],
            max: vec![f64::NEG_INFINITY; n],
            sum: vec![-0.0; n],
            count: vec![0.0; n],
            last: vec![f64::NAN; n],
            cur: 0,
            begin: i64::MAX,
            end: i64::MIN,
        }
    }

    /// Empties every bucket (to fold another series into the same ones).
    pub fn reset(&mut self) {
        self.min.fill(f64::INFINITY);
        self.max.fill(f64::NEG_INFINITY);
        self.sum.fill(-0.0);
        self.count.fill(0.0);
        self.last.fill(f64::NAN);
        (self.cur, self.begin, self.end) = (0, i64::MAX, i64::MIN);
    }

    /// Moves to the bucket of `t`; false if `t` is in none.
    #[inline]
    fn seek(&mut self, t: i64) -> bool {
        if t >= self.begin && t < self.end {
            return true;
        }
        // Parts come in time order: most often `t` is in the next bucket,
        // found without the division.
        let next = self.cur + 1;
        if self.begin <= self.end
            && t >= self.end
            && (t.wrapping_sub(self.end) as u64) < self.step as u64
            && next < self.count.len()
        {
            (self.cur, self.begin, self.end) = (next, self.end, self.end + self.step);
            return true;
        }
        let k = (t - self.start).div_euclid(self.step);
        if k < 0 || k as usize >= self.count.len() {
            return false;
        }
        self.cur = k as usize;
        self.begin = self.start + k * self.step;
        self.end = self.begin + self.step;
        true
    }

    /// Time-ordered samples, after those already added.
    pub fn add(&mut self, ts: &[i64], vals: &[f64]) {
        let n = ts.len().min(vals.len());
        self.fold::<false>(&ts[..n], Scale::UNIT, |i| [vals[i]; 3], |_| 1.0, |s, b, i| s.last[b] = vals[i]);
    }

    /// Tier periods whose width tiles the buckets, after those already
    /// added: min of minima, max of maxima, sum of sums over sum of counts
    /// (a tier keeps no last values: never asked of one).
    pub fn add_tier(&mut self, t: &Tier) {
        let mms = |i| [t.min[i], t.max[i], t.sum[i]];
        if t.scale == Scale::UNIT {
            self.fold::<false>(&t.ts, Scale::UNIT, mms, |i| t.count[i], |_, _, _| {});
        } else {
            self.fold::<true>(&t.ts, t.scale, mms, |i| t.count[i], |_, _, _| {});
        }
    }

    /// Folds time-ordered entries into their buckets: entry `i`'s minimum,
    /// maximum and sum from `mms`, its count from `count`. A bucket's run
    /// of entries is folded in registers, in order (the same sums as one
    /// at a time); `ran(self, bucket, last entry)` after each run. `SCALED`:
    /// minima and maxima are to be divided by `scale`, done once a run, on
    /// the run's extreme (division is monotone: the same extreme).
    #[inline(always)]
    fn fold<const SCALED: bool>(
        &mut self,
        ts: &[i64],
        scale: Scale,
        mms: impl Fn(usize) -> [f64; 3],
        count: impl Fn(usize) -> f64,
        mut ran: impl FnMut(&mut Self, usize, usize),
    ) {
        let mut i = 0;
        while i < ts.len() {
            if !self.seek(ts[i]) {
                i += 1;
                continue;
            }
            let b = self.cur;
            let (mut lo, mut hi, mut sum, mut c) = if SCALED {
                (f64::INFINITY, f64::NEG_INFINITY, self.sum[b], self.count[b])
            } else {
                (self.min[b], self.max[b], self.sum[b], self.count[b])
            };
            // The run holds at least the entry seek placed.
            while i < ts.len() && ts[i] < self.end {
                let [min, max, s] = mms(i);
                lo = lo.min(min);
                hi = hi.max(max);
                sum += s;
                c += count(i);
                i += 1;
            }
            if SCALED {
                (lo, hi) = (self.min[b].min(lo / scale.min), self.max[b].max(hi / scale.max));
            }
            (self.min[b], self.max[b], self.sum[b], self.count[b]) = (lo, hi, sum, c);
            ran(self, b, i - 1);
        }
    }

    /// A column of buckets per aggregate; an empty bucket is `None`.
    pub fn finish(&self, aggs: &[Agg]) -> Vec<Vec<Option<f64>>> {
        aggs.iter().map(|&agg| self.column(agg)).collect()
    }

    /// One aggregate's buckets, the aggregate chosen once, not per bucket.
    fn column(&self, agg: Agg) -> Vec<Option<f64>> {
        let mut column = pool::take(self.count.len());
        let counts = &self.count;
        fn of<'a>(counts: &'a [f64], values: &'a [f64]) -> impl Iterator<Item = Option<f64>> + 'a {
            counts.iter().zip(values).map(|(&c, &v)| (c > 0.0).then_some(v))
        }
        match agg {
            Agg::Min => column.extend(of(counts, &self.min)),
            Agg::Max => column.extend(of(counts, &self.max)),
            Agg::Last => column.extend(of(counts, &self.last)),
            Agg::Avg => column.extend(counts.iter().zip(&self.sum).map(|(&c, &s)| (c > 0.0).then(|| s / c))),
            Agg::Count => column.extend(counts.iter().map(|&c| (c > 0.0).then_some(c))),
        }
        column
    }
}

/// Rounds a bucket width of a minute or more up to whole minutes, of a second
/// or more up to whole seconds; finer widths stay as they are.
fn snap_step(step: i64) -> i64 {
    for (res, _) in crate::tier::RESOLUTIONS.iter().rev() {
        if step >= *res {
            return (step + res - 1) / res * res;
        }
    }
    step
}

/// Puts several series on the union of their timestamps.
pub fn align<'a>(columns: impl Iterator<Item = (&'a [i64], &'a [f64])> + Clone) -> (Vec<i64>, Vec<Vec<Option<f64>>>) {
    let mut times: Vec<i64> = columns.clone().flat_map(|(t, _)| t.iter().copied()).collect();
    times.sort_unstable();
    times.dedup();
    let values = columns
        .map(|(ts, vals)| {
            let mut out = pool::take(times.len());
            out.resize(times.len(), None);
            let mut k = 0;
            for (&t, &v) in ts.iter().zip(vals) {
                while times[k] < t {
                    k += 1;
                }
                out[k] = Some(v);
            }
            out
        })
        .collect();
    (times, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_handles_resets() {
        let (t, v) = rate(&[0, 1_000_000_000, 2_000_000_000, 3_000_000_000], &[10.0, 30.0, 5.0, 6.0]);
        assert_eq!(t, [1_000_000_000, 2_000_000_000, 3_000_000_000]);
        assert_eq!(v, [20.0, 5.0, 1.0]);
        assert_eq!(rate(&[5], &[1.0]), (vec![], vec![]));
    }

    #[test]
    fn downsample_buckets_and_gaps() {
        let ts = [0, 1, 2, 10, 11, 35];
        let vals = [1.0, 5.0, 3.0, 7.0, 9.0, 2.0];
        let got = |agg| downsample(&ts, &vals, 0, 10, 4, agg);
        assert_eq!(got(Agg::Min), [Some(1.0), Some(7.0), None, Some(2.0)]);
        assert_eq!(got(Agg::Max), [Some(5.0), Some(9.0), None, Some(2.0)]);
        assert_eq!(got(Agg::Avg), [Some(3.0), Some(8.0), None, Some(2.0)]);
        assert_eq!(got(Agg::Last), [Some(3.0), Some(9.0), None, Some(2.0)]);
        assert_eq!(got(Agg::Count), [Some(3.0), Some(2.0), None, Some(1.0)]);
    }

    /// The definition: each bucket's samples gathered, then aggregated.
    fn naive(ts: &[i64], vals: &[f64], start: i64, step: i64, n: usize, agg: Agg) -> Vec<Option<f64>> {
        (0..n as i64)
            .map(|k| {
                let v: Vec<f64> =
                    ts.iter().zip(vals).filter(|(t, _)| (**t - start).div_euclid(step) == k).map(|(_, v)| *v).collect();
                (!v.is_empty()).then(|| match agg {
                    Agg::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
                    Agg::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    Agg::Avg => v.iter().sum::<f64>() / v.len() as f64,
                    Agg::Last => v[v.len() - 1],
                    Agg::Count => v.len() as f64,
                })
            })
            .collect()
    }

    fn bits(c: &[Option<f64>]) -> Vec<Option<u64>> {
        c.iter().map(|v| v.map(f64::to_bits)).collect()
    }

    const ALL: [Agg; 5] = [Agg::Min, Agg::Max, Agg::Avg, Agg::Last, Agg::Count];

    proptest::proptest! {
        /// Every aggregate in one pass, the samples in parts cut anywhere:
        /// bit for bit what gathering each bucket's samples gives (NaN,
        /// -0.0 and samples outside the buckets included).
        #[test]
        fn one_pass_in_parts_is_the_definition(
            gaps in proptest::collection::vec(1i64..40, 0..120),
            pick in proptest::collection::vec(0usize..6, 120),
            cuts in proptest::collection::vec(0usize..120, 0..4),
            start in -50i64..50, step in 1i64..30, n in 1usize..12,
        ) {
            const VALUES: [f64; 6] = [1.5, -0.0, 0.0, f64::NAN, -3.25, 1e300];
            let mut t = -60;
            let ts: Vec<i64> = gaps.iter().map(|g| { t += g; t }).collect();
            let vals: Vec<f64> = ts.iter().zip(&pick).map(|(_, &p)| VALUES[p]).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(ts.len())).chain([0, ts.len()]).collect();
            cuts.sort_unstable();
            // Reused: another series folded first, then reset.
            let mut b = Bucketer::new(start, step, n);
            b.add(&[start, start + step], &[7.0, f64::NAN]);
            b.reset();
            for w in cuts.windows(2) {
                b.add(&ts[w[0]..w[1]], &vals[w[0]..w[1]]);
            }
            for (agg, got) in ALL.into_iter().zip(b.finish(&ALL)) {
                let want = naive(&ts, &vals, start, step, n, agg);
                // Which zero `f64::min`/`max` return for -0.0 and 0.0 is
                // unspecified: there the two zeros are one.
                let zero = |c: Vec<Option<f64>>| match agg {
                    Agg::Min | Agg::Max => c.into_iter().map(|v| v.map(|x| if x == 0.0 { 0.0 } else { x })).collect(),
                    _ => c,
                };
                proptest::prop_assert_eq!(bits(&zero(got)), bits(&zero(want)), "{:?}", agg);
            }
        }

        /// From a tier: a bucket's min, max, sum and count are those of the
        /// raw samples in it (the periods tile the buckets; the tier built in
        /// parts, a period split between two).
        #[test]
        fn tier_buckets_are_the_raw_buckets(
            gaps in proptest::collection::vec(1i64..700, 1..200),
            pick in proptest::collection::vec(-400i64..400, 200),
            cut in 0usize..200, per in 1i64..5, n in 1usize..20,
        ) {
            let mut t = 0;
            let ts: Vec<i64> = gaps.iter().map(|g| { t += g; t }).collect();
            // Hundredths, exact as the tier's sums are.
            let vals: Vec<f64> = ts.iter().zip(&pick).map(|(_, &p)| p as f64 / 100.0).collect();
            let (res, step) = (1000, 1000 * per);
            let cut = cut.min(ts.len());
            let mut b = Bucketer::new(0, step, n);
            b.add_tier(&Tier::build(&ts[..cut], &vals[..cut], res));
            b.add_tier(&Tier::build(&ts[cut..], &vals[cut..], res));
            let aggs = [Agg::Min, Agg::Max, Agg::Count];
            for (agg, got) in aggs.into_iter().zip(b.finish(&aggs)) {
                proptest::prop_assert_eq!(bits(&got), bits(&naive(&ts, &vals, 0, step, n, agg)), "{:?}", agg);
            }
            let avg = b.finish(&[Agg::Avg]).pop().unwrap();
            for (got, want) in avg.iter().zip(naive(&ts, &vals, 0, step, n, Agg::Avg)) {
                proptest::prop_assert_eq!(got.is_some(), want.is_some());
                if let (Some(g), Some(w)) = (got, want) {
                    proptest::prop_assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{} vs {}", g, w);
                }
            }
        }
    }

    #[test]
    fn combine_groups_by_labels_and_keeps_gaps() {
        let key = |cpu: &str, host: &str| SeriesKey::new("idle", [("cpu", cpu), ("host", host)]);
        let col = |cpu, host, values: &[Option<f64>]| FrameSeries {
            key: key(cpu, host),
            agg: Some(Agg::Avg),
            values: values.to_vec(),
        };
        let input = vec![
            col("0", "a", &[Some(1.0), None, Some(3.0)]),
            col("1", "a", &[Some(3.0), None, None]),
            col("0", "b", &[Some(5.0), Some(6.0), None]),
        ];
        let by = |op| combine(input.clone(), &Group { by: vec!["host".into()], op });
        let host = |h: &str| SeriesKey::new("idle", [("host", h)]);
        let sum = by(GroupOp::Sum);
        assert_eq!(sum.len(), 2);
        assert_eq!(sum[0].key, host("a"));
        assert_eq!(sum[0].values, [Some(4.0), None, Some(3.0)]);
        assert_eq!(sum[1].values, [Some(5.0), Some(6.0), None]);
        assert_eq!(by(GroupOp::Avg)[0].values, [Some(2.0), None, Some(3.0)]);
        assert_eq!(by(GroupOp::Min)[0].values, [Some(1.0), None, Some(3.0)]);
        assert_eq!(by(GroupOp::Max)[0].values, [Some(3.0), None, Some(3.0)]);
        assert_eq!(by(GroupOp::Count)[0].values, [Some(2.0), None, Some(1.0)]);
        assert_eq!(by(GroupOp::Sum)[0].agg, Some(Agg::Avg));
    }

    #[test]
    fn align_marks_missing_as_gaps() {
        let a = ([1, 2, 4], [1.0, 2.0, 4.0]);
        let b = ([2, 3], [20.0, 30.0]);
        let (times, cols) = align([(&a.0[..], &a.1[..]), (&b.0[..], &b.1[..])].into_iter());
        assert_eq!(times, [1, 2, 3, 4]);
        assert_eq!(cols[0], [Some(1.0), Some(2.0), None, Some(4.0)]);
        assert_eq!(cols[1], [None, Some(20.0), Some(30.0), None]);
    }
}
