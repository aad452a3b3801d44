//! Range queries shaped for charts: one shared time column and one value
//! column per series (uPlot's data layout), raw or downsampled into buckets,
//! with counter rates derived at query time (the store keeps raw counters).

use std::str::FromStr;

use model::{Selector, SeriesKey, Timestamp};

use crate::tier::Tier;

/// Series one query may touch; more is almost certainly a mistyped selector.
pub const QUERY_SERIES_MAX: usize = 20_000;
/// Cells (times x series) one query may return.
pub const QUERY_CELLS_MAX: usize = 50_000_000;
/// The widest bucket: ten years. With ranges clamped to the storable times
/// (`Timestamp::is_storable`), bucket arithmetic stays far inside `i64`.
pub const STEP_NS_MAX: i64 = 3650 * 86_400 * 1_000_000_000;

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

impl FromStr for Agg {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Agg, QueryError> {
        Ok(match s {
            "min" => Agg::Min,
            "max" => Agg::Max,
            "avg" => Agg::Avg,
            "last" => Agg::Last,
            "count" => Agg::Count,
            other => return Err(QueryError::BadAgg(other.to_owned())),
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    #[error("unknown aggregation {0:?}: use min, max, avg, last or count")]
    BadAgg(String),
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

#[derive(Debug, Clone, PartialEq)]
pub struct FrameSeries {
    pub key: SeriesKey,
    /// `None` for raw columns.
    pub agg: Option<Agg>,
    /// One entry per `times` entry; `None` is a gap (no sample there).
    pub values: Vec<Option<f64>>,
}

pub fn range(store: &dyn crate::Source, q: &RangeQuery) -> Result<Frame, QueryError> {
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
            let bucket = |(id, key): &(u32, SeriesKey)| {
                if let Some(res) = tier_res {
                    let tier = store.read_tier(*id, res, Timestamp(start), q.to);
                    let mut columns = downsample_tier_all(&tier, start, step, n, &aggs);
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
                        let (ts, vals) =
                            store.read(*id, Timestamp(lo.max(q.from.0)), Timestamp((lo + step - 1).min(q.to.0)));
                        for (column, &agg) in columns.iter_mut().zip(&aggs) {
                            column[k] = downsample(&ts, &vals, lo, step, 1, agg)[0];
                        }
                    }
                    return columns
                        .into_iter()
                        .zip(&aggs)
                        .map(|(values, &agg)| FrameSeries { key: key.clone(), agg: Some(agg), values })
                        .collect::<Vec<_>>();
                }
                let (ts, vals) = read(*id);
                aggs.iter()
                    .map(|&agg| FrameSeries {
                        key: key.clone(),
                        agg: Some(agg),
                        values: downsample(&ts, &vals, start, step, n, agg),
                    })
                    .collect::<Vec<_>>()
            };
            let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(matched.len().max(1));
            let per = matched.len().div_ceil(threads).max(1);
            let mut series: Vec<FrameSeries> = std::thread::scope(|s| {
                let parts: Vec<_> = matched
                    .chunks(per)
                    .map(|part| s.spawn(|| part.iter().flat_map(bucket).collect::<Vec<_>>()))
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
    let mut out = vec![None; n];
    let mut i = 0;
    while i < ts.len() {
        let b = (ts[i] - start).div_euclid(step);
        if b < 0 || b as usize >= n {
            i += 1;
            continue;
        }
        let end = start + (b + 1) * step;
        let j = i + ts[i..].partition_point(|&t| t < end);
        let v = &vals[i..j];
        out[b as usize] = Some(match agg {
            Agg::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
            Agg::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Agg::Avg => v.iter().sum::<f64>() / v.len() as f64,
            Agg::Last => v[v.len() - 1],
            Agg::Count => v.len() as f64,
        });
        i = j;
    }
    out
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

/// [`downsample`] from a tier whose periods tile the buckets, for several
/// aggregates in one pass: min of minima, max of maxima, sum of sums over
/// sum of counts.
pub fn downsample_tier_all(t: &Tier, start: i64, step: i64, n: usize, aggs: &[Agg]) -> Vec<Vec<Option<f64>>> {
    let mut out: Vec<Vec<Option<f64>>> = aggs.iter().map(|_| vec![None; n]).collect();
    let mut counts = vec![0.0; if aggs.contains(&Agg::Avg) { n } else { 0 }];
    // Periods ascend: the bucket index changes only at bucket boundaries.
    let (mut b, mut end) = (usize::MAX, i64::MIN);
    for i in 0..t.ts.len() {
        let p = t.ts[i];
        if p < start {
            continue;
        }
        if p >= end {
            let k = (p - start) / step;
            if k as usize >= n {
                break;
            }
            b = k as usize;
            end = start + (k + 1) * step;
        }
        for (o, &agg) in out.iter_mut().zip(aggs) {
            let cur = o[b];
            o[b] = Some(match agg {
                Agg::Min => cur.map_or(t.min[i], |c| c.min(t.min[i])),
                Agg::Max => cur.map_or(t.max[i], |c| c.max(t.max[i])),
                Agg::Avg => cur.unwrap_or(0.0) + t.sum[i],
                Agg::Count => cur.unwrap_or(0.0) + t.count[i],
                Agg::Last => unreachable!("BUG: last values are never read from a tier"),
            });
        }
        if !counts.is_empty() {
            counts[b] += t.count[i];
        }
    }
    for (o, &agg) in out.iter_mut().zip(aggs) {
        if agg == Agg::Avg {
            for (v, c) in o.iter_mut().zip(&counts) {
                if let Some(sum) = v {
                    *sum /= c;
                }
            }
        }
    }
    out
}

/// Puts several series on the union of their timestamps.
pub fn align<'a>(columns: impl Iterator<Item = (&'a [i64], &'a [f64])> + Clone) -> (Vec<i64>, Vec<Vec<Option<f64>>>) {
    let mut times: Vec<i64> = columns.clone().flat_map(|(t, _)| t.iter().copied()).collect();
    times.sort_unstable();
    times.dedup();
    let values = columns
        .map(|(ts, vals)| {
            let mut out = vec![None; times.len()];
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
