//! The evaluator: an expression over a list of step times, each node
//! evaluated once for all steps. Selectors read the store once per series
//! for the whole query; range windows slide over those samples; subqueries
//! evaluate their expression at their own aligned steps and are then read
//! like range selectors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use model::budget::{MemoryBudget, Reservation};
use model::{Selector, Timestamp};
use promql_parser::parser::{self, AtModifier, Expr, Offset, VectorSelector};

use crate::value::{self, Labels, Series, Value};

/// How far back an instant selector looks for a sample: Prometheus's default.
pub const LOOKBACK_NS: i64 = 300_000_000_000;
/// Points per series a range query may return, as Prometheus allows.
pub const STEPS_MAX: usize = 11_000;
/// A subquery's step when it names none (Prometheus's default global
/// evaluation interval).
const SUBQUERY_STEP_NS: i64 = 60_000_000_000;
pub use model::STALE_NAN;

/// Whether `v` is a staleness marker (not just any NaN).
pub fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is wrong: the expression does not parse, a parameter is
    /// out of range (Prometheus's `bad_data`).
    #[error("{0}")]
    BadData(String),
    /// The expression cannot be evaluated on this data (`execution`).
    #[error("{0}")]
    Execution(String),
    /// Past a limit on series or samples read.
    #[error("{0}")]
    TooLarge(String),
    /// Past the time a query may take (Prometheus's `timeout`).
    #[error("{0}")]
    Timeout(String),
}

type Result<T> = std::result::Result<T, Error>;

/// Bounds on what one query may read and compute.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Series one selector may match.
    pub series: usize,
    /// Samples all selectors of the query may read together.
    pub samples: usize,
    /// Points (series × steps) all the query's operations may compute
    /// together: what `count_values` of a 1 s subquery over 6 hours makes
    /// of one series (steps², billions) is refused as it grows, before it
    /// is allocated.
    pub points: usize,
    /// How long one query may take (checked as it reads and at every
    /// operation; Prometheus's `--query.timeout`, 2 minutes by default).
    pub timeout: std::time::Duration,
}

/// Points one query may compute, by default (Prometheus's
/// `--query.max-samples` is 50 M samples held at once).
pub const POINTS_MAX: usize = 20_000_000;
/// Bytes a sample read or a point computed is counted as against the
/// memory budget (a time and a value, or an optional value).
pub const POINT_BYTES: usize = 16;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            series: 100_000,
            samples: 50_000_000,
            points: POINTS_MAX,
            timeout: std::time::Duration::from_secs(120),
        }
    }
}

#[derive(Debug)]
pub struct Engine<'a> {
    pub(crate) store: &'a dyn source::Source,
    pub lookback: i64,
    pub limits: Limits,
    /// What all queries hold together ([`MemoryBudget::global`] unless set).
    pub budget: std::sync::Arc<MemoryBudget>,
}

/// A query's result: its value at every step time (ns).
#[derive(Debug, Clone)]
pub struct Output {
    pub times: Vec<i64>,
    pub value: Value,
}

/// Series of samples with their times, windowed per step: what a range
/// selector or a subquery hands to a range function.
pub(crate) struct Matrix {
    pub series: Vec<(Labels, Vec<i64>, Vec<f64>)>,
    /// The window's end at each step (the step's time, `@` and offset applied).
    pub ends: Vec<i64>,
    pub range: i64,
}

impl Matrix {
    /// The samples of series `s` in `[end - range, end]` at step `i`.
    pub fn window(&self, s: usize, i: usize) -> (&[i64], &[f64]) {
        let (_, t, v) = &self.series[s];
        let end = self.ends[i];
        let lo = t.partition_point(|&x| x < end - self.range);
        let hi = t.partition_point(|&x| x <= end);
        (&t[lo..hi], &v[lo..hi])
    }
}

impl<'a> Engine<'a> {
    pub fn new(store: &'a dyn source::Source) -> Engine<'a> {
        Engine { store, lookback: LOOKBACK_NS, limits: Limits::default(), budget: MemoryBudget::global() }
    }

    /// Evaluates `query` at one time (an instant query).
    pub fn instant(&self, query: &str, at: i64) -> Result<Output> {
        self.eval(query, at, at, 1, true)
    }

    /// Evaluates `query` at `start`, `start + step`, ... up to `end` (ns): a
    /// range query, whose result must be a scalar or an instant vector.
    pub fn range(&self, query: &str, start: i64, end: i64, step: i64) -> Result<Output> {
        self.eval(query, start, end, step, false)
    }

    fn eval(&self, query: &str, start: i64, end: i64, step: i64, instant: bool) -> Result<Output> {
        if step <= 0 {
            return Err(Error::BadData(
                "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
            ));
        }
        if end < start {
            return Err(Error::BadData("end timestamp must not be before start time".into()));
        }
        // As i128: `end - start` overflows i64 for times a request may name.
        let n = (i128::from(end) - i128::from(start)) / i128::from(step) + 1;
        if n > STEPS_MAX as i128 {
            return Err(Error::BadData(format!(
                "exceeded maximum resolution of {STEPS_MAX} points per timeseries. Try decreasing the query resolution (?step=XX)"
            )));
        }
        let expr = parse(query)?;
        let n = n as i64;
        let times: Vec<i64> = (0..n).map(|i| start + i * step).collect();
        let deadline = std::time::Instant::now() + self.limits.timeout;
        let ev = Ev {
            engine: self,
            start,
            end,
            read: std::cell::Cell::new(0),
            points: std::cell::Cell::new(0),
            counted: std::cell::Cell::new(0),
            deadline,
            held: self.budget.reservation(),
        };
        let mut inner = &expr;
        while let Expr::Paren(p) = inner {
            inner = &p.expr;
        }
        if matches!(inner, Expr::MatrixSelector(_) | Expr::Subquery(_)) {
            if !instant {
                return Err(Error::BadData(
                    "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector".into(),
                ));
            }
            let m = ev.matrix(inner, &times)?;
            let series = (0..m.series.len())
                .filter_map(|s| {
                    let (t, v) = m.window(s, 0);
                    (!t.is_empty()).then(|| (m.series[s].0.clone(), t.iter().copied().zip(v.iter().copied()).collect()))
                })
                .collect();
            return Ok(Output { times, value: Value::Matrix(series) });
        }
        let value = ev.eval(&expr, &times)?;
        if !instant && matches!(value, Value::String(_)) {
            return Err(Error::BadData(
                "invalid expression type \"string\" for range query, must be Scalar or instant Vector".into(),
            ));
        }
        Ok(Output { times, value })
    }
}

/// How deep brackets may nest in an expression.
pub const DEPTH_MAX: usize = 64;
/// Operators one expression may hold: each is a level of the syntax tree
/// (`1+1+…+1` is as deep as it is long), and the parser, the evaluator and
/// the tree's drop recurse once a level.
pub const OPERATORS_MAX: usize = 512;

/// Refuses, before parsing, an expression whose tree would be deeper than
/// the stack can walk: brackets nested past [`DEPTH_MAX`] or more than
/// [`OPERATORS_MAX`] operators (3,000 terms of `1+…` or `abs(` overflowed
/// the stack and ended the process). Strings and comments are skipped.
fn check_shape(query: &str) -> Result<()> {
    let b = query.as_bytes();
    let (mut depth, mut operators, mut i) = (0usize, 0usize, 0usize);
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' && q != b'`' { 2 } else { 1 };
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > DEPTH_MAX {
                    return Err(Error::BadData(format!(
                        "the expression nests brackets deeper than {DEPTH_MAX}; write it flatter"
                    )));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'=' | b'!' | b'<' | b'>' => operators += 1,
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let from = i;
                while i + 1 < b.len() && (b[i + 1].is_ascii_alphanumeric() || b[i + 1] == b'_') {
                    i += 1;
                }
                // Set operators, and function calls (each a level too).
                let word = &query[from..=i];
                if matches!(word, "and" | "or" | "unless" | "atan2") || b.get(i + 1) == Some(&b'(') {
                    operators += 1;
                }
            }
            _ => {}
        }
        if operators > OPERATORS_MAX {
            return Err(Error::BadData(format!(
                "the expression has more than {OPERATORS_MAX} operators and calls; split it up"
            )));
        }
        i += 1;
    }
    Ok(())
}

/// Parses a PromQL expression; `holt_winters` (Prometheus 2's name for
/// `double_exponential_smoothing`) is known too. Expressions too deep to
/// walk are refused first ([`check_shape`]).
pub fn parse(query: &str) -> Result<Expr> {
    check_shape(query)?;
    static EXTRA: std::sync::Once = std::sync::Once::new();
    EXTRA.call_once(|| {
        use promql_parser::parser::function::{Function, register_extra_functions};
        use promql_parser::parser::value::ValueType;
        let hw = Function::new(
            "holt_winters",
            vec![ValueType::Matrix, ValueType::Scalar, ValueType::Scalar],
            0,
            ValueType::Vector,
            false,
        );
        register_extra_functions(vec![hw]).expect("holt_winters is not built in");
    });
    // promql-parser 0.11 panics on a unitless duration out of range
    // (`x[1e30]`, `x[1555…5]`: `Duration::from_secs_f64`; found by fuzzing):
    // a refused expression, not a crashed request.
    match std::panic::catch_unwind(|| parser::parse(query)) {
        Ok(parsed) => parsed.map_err(Error::BadData),
        Err(_) => Err(Error::BadData(format!("the expression {query:?} could not be parsed (a number out of range?)"))),
    }
}

/// One query's evaluation: its bounds (for `@ start()` and `@ end()`) and
/// what it has read so far.
pub(crate) struct Ev<'e, 'a> {
    pub engine: &'e Engine<'a>,
    start: i64,
    end: i64,
    read: std::cell::Cell<usize>,
    /// Points computed so far (against [`Limits::points`]).
    points: std::cell::Cell<usize>,
    /// Points the node being evaluated has already counted as it made its
    /// series ([`Ev::charge_series`]): not counted again for its output.
    counted: std::cell::Cell<usize>,
    /// When the query must have finished.
    deadline: std::time::Instant,
    /// What this query holds of the memory budget.
    held: Reservation,
}

pub(crate) fn duration_ns(d: &Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn offset_ns(o: &Option<Offset>) -> i64 {
    match o {
        Some(Offset::Pos(d)) => duration_ns(d),
        Some(Offset::Neg(d)) => -duration_ns(d),
        None => 0,
    }
}

/// An `@` time in ns. `promql-parser` saturates a time past 2^64 ms
/// (`x @ 1e30`) where Prometheus refuses one past 2^63 s: that one is
/// refused as Prometheus refuses it; later times read as the last
/// nanosecond kansoku can name (year 2262), where there is no data.
fn at_ns(t: &SystemTime) -> Result<i64> {
    let ms = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis(),
        Err(e) => e.duration().as_millis(),
    };
    if ms >= u128::from(u64::MAX) {
        return Err(Error::BadData(
            "timestamp out of bounds for @ modifier: the time is past 2^63 seconds from 1970".into(),
        ));
    }
    Ok(system_time_ns(t))
}

fn system_time_ns(t: &SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => duration_ns(&d),
        Err(e) => -duration_ns(&e.duration()),
    }
}

impl Ev<'_, '_> {
    /// The time a selector reads at for each step: the step's time, or the
    /// `@` time, less the offset.
    pub(crate) fn refs(&self, times: &[i64], at: &Option<AtModifier>, offset: &Option<Offset>) -> Result<Vec<i64>> {
        let off = offset_ns(offset);
        let at = match at {
            None => None,
            Some(AtModifier::Start) => Some(self.start),
            Some(AtModifier::End) => Some(self.end),
            Some(AtModifier::At(t)) => Some(at_ns(t)?),
        };
        Ok(times.iter().map(|&t| at.unwrap_or(t).saturating_sub(off)).collect())
    }

    /// Evaluates `e` at every step; what it computes is counted against
    /// the query's limits, and the deadline checked, at every node.
    pub fn eval(&self, e: &Expr, times: &[i64]) -> Result<Value> {
        self.check_deadline("evaluating")?;
        // Inner nodes keep their own count; this node's is restored after.
        let outer = self.counted.replace(0);
        let v = self.eval_node(e, times);
        let counted = self.counted.replace(outer);
        let v = v?;
        let points = match &v {
            Value::Scalar(s) => s.len(),
            Value::Vector(vs) => vs.len().saturating_mul(times.len()),
            Value::Matrix(m) => m.iter().map(|(_, s)| s.len()).sum(),
            Value::String(_) => 0,
        };
        self.charge(points.saturating_sub(counted))?;
        Ok(v)
    }

    /// Fails once the query is past its time.
    pub fn check_deadline(&self, doing: &str) -> Result<()> {
        if std::time::Instant::now() > self.deadline {
            return Err(Error::Timeout(format!(
                "query timed out after {:?} ({doing}); narrow its range or its selectors",
                self.engine.limits.timeout
            )));
        }
        Ok(())
    }

    /// Counts a series of `steps` points the current node is about to make,
    /// before it is allocated (`count_values`, vector matching: one call
    /// per new series); the node's output is then not counted again.
    pub fn charge_series(&self, steps: usize) -> Result<()> {
        self.charge(steps)?;
        self.counted.set(self.counted.get().saturating_add(steps));
        Ok(())
    }

    /// Counts `points` computed (series × steps) against the query's limit
    /// and the memory budget.
    fn charge(&self, points: usize) -> Result<()> {
        let limit = self.engine.limits.points;
        self.tally(&self.points, points, limit, "computes", "points (series × steps)", "or use a longer step")
    }

    /// Adds `n` to `counter`, refuses past `limit`, and reserves what the
    /// `n` samples or points hold of the memory budget.
    fn tally(
        &self,
        counter: &std::cell::Cell<usize>,
        n: usize,
        limit: usize,
        verb: &str,
        what: &str,
        hint: &str,
    ) -> Result<()> {
        let total = counter.get().saturating_add(n);
        counter.set(total);
        if total > limit {
            return Err(Error::TooLarge(format!(
                "the query {verb} more than {limit} {what}; narrow its range or its selectors{}{hint}",
                if hint.is_empty() { "" } else { ", " }
            )));
        }
        self.held.grow(n.saturating_mul(POINT_BYTES)).map_err(|e| Error::TooLarge(e.to_string()))
    }

    fn eval_node(&self, e: &Expr, times: &[i64]) -> Result<Value> {
        match e {
            Expr::NumberLiteral(n) => Ok(Value::Scalar(vec![n.val; times.len()])),
            Expr::StringLiteral(s) => Ok(Value::String(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr, times),
            Expr::Unary(u) => match self.eval(&u.expr, times)? {
                Value::Scalar(v) => Ok(Value::Scalar(v.into_iter().map(|x| -x).collect())),
                Value::Vector(mut vs) => {
                    for s in &mut vs {
                        value::drop_name(&mut s.labels);
                        s.points.iter_mut().flatten().for_each(|x| *x = -*x);
                    }
                    merge(vs)
                }
                Value::String(_) | Value::Matrix(_) => Err(Error::Execution("unary minus of a string".into())),
            },
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.vector_selector(vs, times, false)?)),
            Expr::MatrixSelector(_) => Err(Error::BadData(
                "a range vector cannot be the result of a query or an operand; use it in a function (rate, *_over_time)".into(),
            )),
            Expr::Subquery(_) => Err(Error::BadData(
                "a subquery is a range vector: use it in a function (rate, *_over_time)".into(),
            )),
            Expr::Call(c) => crate::functions::call(self, c, times),
            Expr::Aggregate(a) => crate::aggregate::aggregate(self, a, times),
            Expr::Binary(b) => crate::binary::binary(self, b, times),
            Expr::Extension(_) => Err(Error::BadData("extension expressions are not supported".into())),
        }
    }

    /// The store's series a selector names.
    pub(crate) fn select(&self, vs: &VectorSelector) -> Result<Vec<(u32, model::SeriesKey)>> {
        let sel = to_selector(vs)?;
        let (series, total) = self.engine.store.series_limited(&sel, self.engine.limits.series);
        if total > self.engine.limits.series {
            return Err(Error::TooLarge(format!(
                "the selector {vs} matches {total} series; at most {} per selector",
                self.engine.limits.series
            )));
        }
        Ok(series)
    }

    /// Reads one series' samples in `[from, to]`, counted against the limit
    /// (staleness markers included: the selectors treat them).
    pub(crate) fn read(&self, id: u32, from: i64, to: i64) -> Result<(Vec<i64>, Vec<f64>)> {
        let (t, v) = self.engine.store.read(id, Timestamp(from), Timestamp(to));
        self.count(t.len())?;
        Ok((t, v))
    }

    /// Reads the samples of every series of a selector in `[from, to]`
    /// (one round trip where the store is remote), counted against the
    /// limit.
    fn read_all(&self, ids: &[u32], from: i64, to: i64) -> Result<Vec<(Vec<i64>, Vec<f64>)>> {
        let left = self.engine.limits.samples.saturating_sub(self.read.get());
        let reads = self.engine.store.read_many(ids, Timestamp(from), Timestamp(to), left);
        self.count(reads.iter().map(|r| r.0.len()).sum())?;
        Ok(reads)
    }

    /// Counts `n` samples (or tier points) read against the limit, and
    /// checks the deadline (every read passes here).
    pub(crate) fn count(&self, n: usize) -> Result<()> {
        self.check_deadline("reading its series")?;
        self.tally(&self.read, n, self.engine.limits.samples, "reads", "samples", "")
    }

    /// An instant selector at every step: the newest sample at or before
    /// the reference time, no older than the lookback. With `sample_times`
    /// the values are the samples' own times in seconds (`timestamp()`).
    pub fn vector_selector(&self, vs: &VectorSelector, times: &[i64], sample_times: bool) -> Result<Vec<Series>> {
        let refs = self.refs(times, &vs.at, &vs.offset)?;
        let (Some(&lo), Some(&hi)) = (refs.iter().min(), refs.iter().max()) else { return Ok(Vec::new()) };
        let lookback = self.engine.lookback;
        let mut out = Vec::new();
        let selected = self.select(vs)?;
        let ids: Vec<u32> = selected.iter().map(|s| s.0).collect();
        let reads = self.read_all(&ids, lo.saturating_sub(lookback), hi)?;
        for ((_, key), (t, v)) in selected.into_iter().zip(reads) {
            if t.is_empty() {
                continue;
            }
            let points: Vec<Option<f64>> = refs
                .iter()
                .map(|&r| {
                    let j = t.partition_point(|&x| x <= r);
                    // A staleness marker ends the series there.
                    (j > 0 && t[j - 1] >= r - lookback && !is_stale(v[j - 1]))
                        .then(|| if sample_times { value::seconds(t[j - 1]) } else { v[j - 1] })
                })
                .collect();
            if points.iter().any(Option::is_some) {
                out.push(Series { labels: value::of_key(&key), points });
            }
        }
        Ok(out)
    }

    /// A range selector or subquery, as the windows a range function reads.
    pub fn matrix(&self, e: &Expr, times: &[i64]) -> Result<Matrix> {
        match e {
            Expr::MatrixSelector(ms) => {
                let vs = &ms.vs;
                let range = duration_ns(&ms.range);
                let ends = self.refs(times, &vs.at, &vs.offset)?;
                let (Some(&lo), Some(&hi)) = (ends.iter().min(), ends.iter().max()) else {
                    return Ok(Matrix { series: Vec::new(), ends, range });
                };
                let mut series = Vec::new();
                let selected = self.select(vs)?;
                let ids: Vec<u32> = selected.iter().map(|s| s.0).collect();
                let reads = self.read_all(&ids, lo.saturating_sub(range), hi)?;
                for ((_, key), (mut t, mut v)) in selected.into_iter().zip(reads) {
                    // Range vectors leave staleness markers out.
                    if v.iter().any(|&x| is_stale(x)) {
                        let keep: Vec<bool> = v.iter().map(|&x| !is_stale(x)).collect();
                        let mut k = keep.iter();
                        t.retain(|_| *k.next().expect("one flag per sample"));
                        let mut k = keep.iter();
                        v.retain(|_| *k.next().expect("one flag per sample"));
                    }
                    if !t.is_empty() {
                        series.push((value::of_key(&key), t, v));
                    }
                }
                Ok(Matrix { series, ends, range })
            }
            Expr::Subquery(sq) => {
                let range = duration_ns(&sq.range);
                let step = sq.step.as_ref().map_or(SUBQUERY_STEP_NS, duration_ns).max(1);
                let ends = self.refs(times, &sq.at, &sq.offset)?;
                let (Some(&lo), Some(&hi)) = (ends.iter().min(), ends.iter().max()) else {
                    return Ok(Matrix { series: Vec::new(), ends, range });
                };
                // The inner steps: multiples of the step, from the first at or
                // after the earliest window's start.
                let from = lo.saturating_sub(range);
                let mut first = from.div_euclid(step) * step;
                if first < from {
                    first += step;
                }
                let n = if hi < first { 0 } else { (i128::from(hi) - i128::from(first)) / i128::from(step) + 1 };
                if n > 10 * STEPS_MAX as i128 {
                    return Err(Error::TooLarge(format!(
                        "the subquery {sq} takes {n} steps; at most {}",
                        10 * STEPS_MAX
                    )));
                }
                let inner: Vec<i64> = (0..n as i64).map(|i| first + i * step).collect();
                let series = match self.eval(&sq.expr, &inner)? {
                    Value::Vector(vs) => vs
                        .into_iter()
                        .map(|s| {
                            let (t, v): (Vec<i64>, Vec<f64>) =
                                inner.iter().zip(&s.points).filter_map(|(&t, p)| p.map(|v| (t, v))).unzip();
                            (s.labels, t, v)
                        })
                        .collect(),
                    Value::Scalar(v) => vec![(Labels::new(), inner.clone(), v)],
                    Value::String(_) | Value::Matrix(_) => {
                        return Err(Error::BadData("a subquery of a string".into()));
                    }
                };
                Ok(Matrix { series, ends, range })
            }
            Expr::Paren(p) => self.matrix(&p.expr, times),
            other => Err(Error::BadData(format!("expected a range vector, got {other}"))),
        }
    }
}

/// A PromQL selector as the store's [`Selector`].
pub fn to_selector(vs: &VectorSelector) -> Result<Selector> {
    if !vs.matchers.or_matchers.is_empty() {
        return Err(Error::BadData("`or` inside a selector is not supported".into()));
    }
    if vs.matchers.matchers.len() + usize::from(vs.name.is_some()) > model::MATCHERS_MAX {
        return Err(Error::BadData(format!("the selector has more than {} label matchers", model::MATCHERS_MAX)));
    }
    let mut sel = Selector::default();
    let bad = |e: regex::Error| Error::BadData(format!("invalid regular expression: {e}"));
    if let Some(name) = &vs.name {
        sel.matchers.push(model::Matcher::new(value::NAME, model::MatchOp::Equal, name.as_str()).map_err(bad)?);
    }
    for m in &vs.matchers.matchers {
        use promql_parser::label::MatchOp as P;
        let op = match m.op {
            P::Equal => model::MatchOp::Equal,
            P::NotEqual => model::MatchOp::NotEqual,
            P::Re(_) => model::MatchOp::Regex,
            P::NotRe(_) => model::MatchOp::NotRegex,
        };
        sel.matchers.push(model::Matcher::new(m.name.as_str(), op, m.value.as_str()).map_err(bad)?);
    }
    Ok(sel)
}

/// A series selector as `match[]` gives one (`up`, `{job="api"}`).
pub fn series_selector(text: &str) -> Result<Selector> {
    match parse(text)? {
        Expr::VectorSelector(vs) => to_selector(&vs),
        other => Err(Error::BadData(format!("{other} is not a series selector"))),
    }
}

/// Series with equal labels merged into one; two with a value at the same
/// step are an error, as in Prometheus.
pub(crate) fn merge(series: Vec<Series>) -> Result<Value> {
    let mut out: Vec<Series> = Vec::with_capacity(series.len());
    let mut at: std::collections::HashMap<Labels, usize> = std::collections::HashMap::new();
    for s in series {
        if !s.points.iter().any(Option::is_some) {
            continue;
        }
        match at.get(&s.labels) {
            Some(&i) => {
                for (a, b) in out[i].points.iter_mut().zip(s.points) {
                    if b.is_some() {
                        if a.is_some() {
                            return Err(Error::Execution(
                                "vector cannot contain metrics with the same labelset".into(),
                            ));
                        }
                        *a = b;
                    }
                }
            }
            None => {
                at.insert(s.labels.clone(), out.len());
                out.push(s);
            }
        }
    }
    Ok(Value::Vector(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_would_crash_the_parser_is_a_bad_request() {
        for q in ["em_(-(x[2m])[15555555555555555555555555555555555])", "x[1e30]", "rate(x[-5])"] {
            match parse(q) {
                Err(Error::BadData(_)) => {}
                other => panic!("{q}: {other:?}"),
            }
        }
        assert!(parse("rate(x[5m])").is_ok());
        assert!(parse("holt_winters(x[5m], 0.5, 0.5)").is_ok(), "Prometheus 2's name is known");
    }

    #[test]
    fn ranges_past_the_step_limit_or_backwards_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = store::Store::open(dir.path(), store::Options::default()).unwrap();
        let e = Engine::new(&store);
        assert!(matches!(e.range("1", 0, STEPS_MAX as i64 * 10, 1), Err(Error::BadData(m)) if m.contains("11000")));
        assert!(matches!(e.range("1", 10, 0, 1), Err(Error::BadData(_))));
        assert!(matches!(e.range("\"s\"", 0, 10, 1), Err(Error::BadData(m)) if m.contains("string")));
        assert!(matches!(e.instant("\"s\"", 0).unwrap().value, Value::String(ref s) if s == "s"));
        assert_eq!(e.instant("1 + 1", 0).unwrap().value, Value::Scalar(vec![2.0]));
    }

    /// A query past its time is stopped where it reads, with Prometheus's
    /// `timeout` error; one that reads nothing has nothing to stop.
    #[test]
    fn a_query_past_its_time_is_a_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let store = store::Store::open(dir.path(), store::Options::default()).unwrap();
        let mut app = store::Appender::default();
        let mut b = model::Batch::new(Timestamp(1_000_000_000));
        b.defs.push((0, model::SeriesKey::new("x", [("a", "1")])));
        b.points.push((0, 1.0));
        store.append(&mut app, &b).unwrap();
        let mut e = Engine::new(&store);
        assert!(e.instant("x", 1_000_000_000).is_ok());
        e.limits.timeout = std::time::Duration::ZERO;
        assert!(matches!(e.instant("x", 1_000_000_000), Err(Error::Timeout(m)) if m.contains("timed out")));
        // Issue 42: a query that reads nothing but computes for long was
        // answered 503 and went on computing; the deadline is checked at
        // every operation, not only where samples are read.
        assert!(matches!(e.instant("1 + 1", 0), Err(Error::Timeout(m)) if m.contains("evaluating")));
    }

    fn empty_store() -> (tempfile::TempDir, store::Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = store::Store::open(dir.path(), store::Options::default()).unwrap();
        (dir, store)
    }

    /// Issue 42: `count_values` over a 1 s subquery of 6 hours made 21,600
    /// series of 21,600 steps from no data (3.4 GB, the process ended),
    /// alike as a recording rule. The points a query computes are counted
    /// as they are made, and refused past the limit before allocation.
    #[test]
    fn a_query_that_computes_steps_squared_is_refused_as_it_grows() {
        let (_dir, store) = empty_store();
        let e = Engine::new(&store);
        let q = r#"count(count_over_time(count_values("v", vector(time()))[6h:1s]))"#;
        let t = 1_800_000_000_000_000_000;
        let budget = e.budget.used();
        match e.instant(q, t) {
            Err(Error::TooLarge(m)) => assert!(m.contains("points"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(e.budget.used(), budget, "the refused query gave its reservation back");
        // The same shape, small, is answered.
        let small = r#"count(count_over_time(count_values("v", vector(time()))[1m:10s]))"#;
        assert_eq!(e.instant(small, t).unwrap().value.kind(), "vector");
        // Many-to-many vector matching is counted series by series too.
        let mut e = Engine::new(&store);
        e.limits.points = 1_000;
        let q = r#"count_values("a", vector(time())) + on() group_left count_values("b", vector(time()))"#;
        assert!(matches!(e.range(q, 0, 2_000_000_000_000, 1_000_000_000), Err(Error::TooLarge(_))));
    }

    /// All queries at once hold at most the memory budget: one that would
    /// pass it is refused with what it asked and what the budget is.
    #[test]
    fn a_query_past_the_shared_memory_budget_is_refused() {
        let (_dir, store) = empty_store();
        let mut e = Engine::new(&store);
        e.budget = MemoryBudget::new(64 << 20);
        let other = e.budget.reservation();
        other.grow((64 << 20) - 100_000).unwrap();
        let q = "vector(time())";
        match e.range(q, 0, 10_000_000_000_000, 1_000_000_000) {
            Err(Error::TooLarge(m)) => assert!(m.contains("64 MiB"), "{m}"),
            other => panic!("{other:?}"),
        }
        drop(other);
        assert!(e.range(q, 0, 10_000_000_000_000, 1_000_000_000).is_ok());
        assert_eq!(e.budget.used(), 0);
    }

    /// Issue 42: `1+1+…` of 3,000 terms, `abs(` × 3,000, `(` × 50,000
    /// overflowed the stack. Too deep is refused before parsing; as deep as
    /// allowed parses and evaluates on a thread's default 2 MiB stack.
    #[test]
    fn expressions_deeper_than_the_stack_can_walk_are_refused() {
        let refused = [
            vec!["1"; 3000].join("+"),
            format!("{}1{}", "abs(".repeat(3000), ")".repeat(3000)),
            "(".repeat(50_000),
            format!("{}1{}", "(".repeat(DEPTH_MAX + 1), ")".repeat(DEPTH_MAX + 1)),
            vec!["x"; 600].join(" or "),
        ];
        for q in &refused {
            assert!(matches!(parse(q), Err(Error::BadData(_))), "{}", &q[..40]);
        }
        // Strings and comments are not operators or brackets.
        assert!(parse(&format!("label_replace(x, \"a\", \"{}\", \"b\", \"c\")", "(+".repeat(1000))).is_ok());
        assert!(parse(&format!("x # {}", "(((+".repeat(1000))).is_ok());
        let deepest = [
            vec!["1"; OPERATORS_MAX].join("+"),
            format!("{}1{}", "(".repeat(DEPTH_MAX), ")".repeat(DEPTH_MAX)),
            format!("{}vector(1){}", "abs(".repeat(DEPTH_MAX - 1), ")".repeat(DEPTH_MAX - 1)),
            vec!["vector(1)"; OPERATORS_MAX / 2].join(" or "),
        ];
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let (_dir, store) = empty_store();
                let e = Engine::new(&store);
                for q in &deepest {
                    assert!(e.instant(q, 0).is_ok(), "{}", &q[..40]);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// Issue 42: `start=-9223372036&end=9223372036` overflowed `end - start`
    /// and answered empty; it is past the step limit.
    #[test]
    fn a_range_spanning_all_time_is_past_the_step_limit_not_empty() {
        let (_dir, store) = empty_store();
        let e = Engine::new(&store);
        let r = e.range("1", -9_223_372_036_000_000_000, 9_223_372_036_000_000_000, 1_000_000_000);
        assert!(matches!(r, Err(Error::BadData(m)) if m.contains("11000")));
    }
}
