//! `GET /api/v1/kernel/syscalls?host=H[&from&to|&since][&n=20]`: the
//! paper's table of system calls over a range (seed 001): per call, the
//! count and rate, total time and its share, mean, and the distribution's
//! minimum, median, p99 and maximum, ranked by total time — from the
//! kernel histograms `crates/trace` stores (`docs/trace.md`).
//!
//! Every column is a PromQL query over the stored series, evaluated by the
//! same engine as `/prometheus` and named in the answer (`queries`), so the
//! table cannot disagree with what a user asks Prometheus-style (issue 44:
//! the old hand-made increases read a bucket born inside the range from 0
//! and put `read`'s median at 0.956 s where PromQL said 0.98 µs). The
//! window is the range clipped to where the host's tracer has data, so a
//! rate divides by the time that was measured.

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::{Query, State};
use model::{Selector, Timestamp};
use promql::value::{Labels, Value as PromValue};
use serde_json::{Value, json};

use crate::{ApiError, ApiState};

/// A call's columns over the window.
#[derive(Default)]
struct Row {
    calls: f64,
    time_s: f64,
    /// `sum by (le)` of the buckets' increases: (`le`, cumulative count).
    buckets: Vec<(f64, f64)>,
}

/// The queries whose answers make the table, for `host` over a window of
/// `window` (a PromQL duration), evaluated at the range's end.
pub struct Queries {
    pub calls: String,
    pub time: String,
    pub buckets: String,
}

impl Queries {
    pub fn new(host: &str, window: &str) -> Queries {
        let sel = |suffix: &str| format!("kernel_syscall_seconds_{suffix}{{host={}}}[{window}]", model::quoted(host));
        Queries {
            calls: format!("sum by (syscall) (increase({}))", sel("count")),
            time: format!("sum by (syscall) (increase({}))", sel("sum")),
            buckets: format!("sum by (syscall, le) (increase({}))", sel("bucket")),
        }
    }

    /// The quantile `q` as a query (`histogram_quantile` of the buckets).
    pub fn quantile(&self, q: f64) -> String {
        format!("histogram_quantile({q}, {})", self.buckets)
    }
}

pub async fn syscalls(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let get = |k: &str| params.get(k).map(String::as_str);
    let host = get("host").ok_or_else(|| ApiError::BadRequest("missing parameter `host`".into()))?.to_owned();
    let (from, to) = model::resolve_range(get("from"), get("to"), get("since"), st.now())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let n = match get("n") {
        Some(v) => v.parse::<usize>().map_err(|_| ApiError::BadRequest("`n`: a number".into()))?,
        None => 20,
    };
    let store = std::sync::Arc::clone(&st.reader);
    let (from, to) = (from.as_nanos(), to.as_nanos());
    st.guard.run(move || answer(&*store, &host, from, to, n)).await?
}

/// The table's JSON (blocking: reads the store).
fn answer(store: &dyn source::Source, host: &str, from: i64, to: i64, n: usize) -> Result<Json<Value>, ApiError> {
    let Some(first) = first_sample(store, host, from, to)? else {
        return Ok(Json(json!({"from": seconds(from), "to": seconds(to), "syscalls": 0, "calls": 0.0,
            "time_seconds": 0.0, "rows": []})));
    };
    // The window reaches back to the range's start or the first sample,
    // whichever is later, in whole milliseconds (a PromQL duration),
    // rounded up so that the first sample is inside it.
    let window_ms = ((to - from.max(first)) as u64).div_ceil(1_000_000).max(1);
    let window = format!("{window_ms}ms");
    let q = Queries::new(host, &window);
    let mut engine = promql::Engine::new(store);
    engine.limits.timeout = crate::guard::HEAVY_TIMEOUT;
    let eval = |query: &str| -> Result<Vec<(Labels, f64)>, ApiError> {
        let out = engine.instant(query, to).map_err(|e| ApiError::BadRequest(format!("{query}: {e}")))?;
        let PromValue::Vector(v) = out.value else { return Ok(Vec::new()) };
        Ok(v.into_iter().filter_map(|s| s.points.first().copied().flatten().map(|p| (s.labels, p))).collect())
    };
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let call = |l: &Labels| promql::value::get(l, "syscall").to_owned();
    for (l, v) in eval(&q.calls)? {
        rows.entry(call(&l)).or_default().calls = v;
    }
    for (l, v) in eval(&q.time)? {
        rows.entry(call(&l)).or_default().time_s = v;
    }
    for (l, v) in eval(&q.buckets)? {
        let le = match promql::value::get(&l, "le") {
            "+Inf" => f64::INFINITY,
            s => s.parse().unwrap_or(f64::NAN),
        };
        if !le.is_nan() {
            rows.entry(call(&l)).or_default().buckets.push((le, v));
        }
    }
    let mut rows: Vec<(String, Row)> = rows.into_iter().filter(|(_, r)| r.calls > 0.0).collect();
    rows.sort_by(|a, b| b.1.time_s.total_cmp(&a.1.time_s).then_with(|| a.0.cmp(&b.0)));
    let total: f64 = rows.iter().map(|(_, r)| r.time_s).sum();
    let secs = window_ms as f64 / 1e3;
    let shown: Vec<Value> = rows
        .iter_mut()
        .take(n)
        .enumerate()
        .map(|(i, (name, r))| {
            let d = Distribution::of(&mut r.buckets);
            json!({
                "rank": i + 1,
                "syscall": name,
                "calls": r.calls,
                "calls_per_second": r.calls / secs,
                "time_seconds": r.time_s,
                "share": if total > 0.0 { r.time_s / total } else { 0.0 },
                "mean_seconds": (r.calls > 0.0).then(|| r.time_s / r.calls),
                "min_seconds": d.min,
                "p50_seconds": d.p50,
                "p99_seconds": d.p99,
                "max_seconds": d.max,
                "at_least": d.at_least,
            })
        })
        .collect();
    Ok(Json(json!({
        "from": seconds(from),
        "to": seconds(to),
        "window": window,
        "queries": {
            "calls": q.calls,
            "calls_per_second": format!("({}) / {secs}", q.calls),
            "time_seconds": q.time,
            "mean_seconds": format!("({}) / ({})", q.time, q.calls),
            "p50_seconds": q.quantile(0.5),
            "p99_seconds": q.quantile(0.99),
            "max_seconds": q.quantile(1.0),
            "min_seconds": format!("the lower bound of the lowest bucket of ({}) above 0", q.buckets),
        },
        "syscalls": rows.len(),
        "calls": rows.iter().map(|(_, r)| r.calls).sum::<f64>(),
        "time_seconds": total,
        "rows": shown,
    })))
}

/// RFC 3339 of a time in ns.
pub(crate) fn seconds(ns: i64) -> String {
    Timestamp(ns).to_string()
}

/// The first sample time (ns) of the host's system call counts in
/// `[from, to]`, if any: where the tracer's data begins.
fn first_sample(store: &dyn source::Source, host: &str, from: i64, to: i64) -> Result<Option<i64>, ApiError> {
    let sel = Selector::parse(&format!("kernel_syscall_seconds_count{{host={}}}", model::quoted(host)))
        .map_err(|e| ApiError::BadRequest(format!("host: {e}")))?;
    Ok(crate::span::start(store, &sel, from, to).map(|s| s.first))
}

/// A call's distribution read from its buckets' increases, as
/// `histogram_quantile` reads them.
struct Distribution {
    min: Option<f64>,
    p50: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
    /// The columns that are only lower bounds: their rank fell among the
    /// calls longer than the last bound (`le="+Inf"`), where PromQL answers
    /// that bound.
    at_least: Vec<&'static str>,
}

impl Distribution {
    fn of(buckets: &mut [(f64, f64)]) -> Distribution {
        let quantile = |q: f64, b: &mut [(f64, f64)]| Some(promql::bucket_quantile(q, b)).filter(|v| !v.is_nan());
        let (p50, p99, max) = (quantile(0.5, buckets), quantile(0.99, buckets), quantile(1.0, buckets));
        // Sorted by `le` now; the counts as histogram_quantile reads them
        // (made monotonic).
        let mut cumulative: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
        for &(le, c) in buckets.iter() {
            let prev = cumulative.last().map_or(0.0, |&(_, p)| p);
            cumulative.push((le, c.max(prev)));
        }
        let total = cumulative.last().map_or(0.0, |&(_, c)| c);
        // Where each quantile's rank falls: past the last finite bound
        // (in `le="+Inf"`), PromQL answers that bound, or NaN when no
        // finite bound is there; the table says "at least" the bound.
        let finite = cumulative.iter().rev().find(|(le, _)| le.is_finite()).copied();
        let bound = finite.map_or(OVERFLOW_S, |(le, _)| le);
        let open = |q: f64| total > 0.0 && finite.is_none_or(|(_, c)| c < q * total);
        let mut at_least = Vec::new();
        let mut lower_bound = |name: &'static str, q: f64, v: Option<f64>| {
            if open(q) {
                at_least.push(name);
                Some(bound)
            } else {
                v
            }
        };
        let (p50, p99, max) = (
            lower_bound("p50_seconds", 0.5, p50),
            lower_bound("p99_seconds", 0.99, p99),
            lower_bound("max_seconds", 1.0, max),
        );
        // The lowest bucket with calls: its own lower bound where it is one
        // of the tracer's buckets (only used ones are stored), else the
        // previous bound.
        let min = cumulative.iter().position(|&(_, c)| c > 0.0).map(|i| {
            let prev = if i == 0 { 0.0 } else { cumulative[i - 1].0 };
            let le = cumulative[i].0;
            if le.is_infinite() {
                at_least.push("min_seconds");
                return prev.max(OVERFLOW_S);
            }
            trace::hist::lower_of_le(le).unwrap_or(prev).max(prev)
        });
        Distribution { min, p50, p99, max, at_least }
    }
}

/// Where the tracer's last bucket begins (seconds): calls longer than this
/// are counted only under `le="+Inf"`.
const OVERFLOW_S: f64 = trace::hist::OVERFLOW_NS as f64 / 1e9;
