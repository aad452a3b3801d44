//! `GET /api/v1/kernel/syscalls?host=H[&from&to|&since][&n=20]`: the
//! paper's table of system calls over a range (seed 001): per call, the
//! count and rate, total time and its share, mean, and the distribution's
//! minimum, median, p99 and maximum, ranked by total time — from the
//! kernel histograms `crates/trace` stores (`docs/trace.md`).

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::{Query, State};
use model::{Selector, Timestamp};
use serde_json::{Value, json};

use crate::{ApiError, ApiState};

/// How far before the range a counter's baseline sample is looked for (a
/// few of the tracer's intervals).
const BASELINE_NS: i64 = 5_000_000_000;

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
    let rows = st.guard.run(move || table(&store, &host, from.as_nanos(), to.as_nanos())).await??;
    let total: f64 = rows.iter().map(|r| r.sum_s).sum();
    let secs = (to.as_nanos() - from.as_nanos()).max(1) as f64 / 1e9;
    let shown: Vec<Value> = rows
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, r)| {
            json!({
                "rank": i + 1,
                "syscall": r.name,
                "calls": r.count,
                "calls_per_second": r.count / secs,
                "time_seconds": r.sum_s,
                "share": if total > 0.0 { r.sum_s / total } else { 0.0 },
                "mean_seconds": r.mean_s,
                "min_seconds": r.min_s,
                "p50_seconds": r.p50_s,
                "p99_seconds": r.p99_s,
                "max_seconds": r.max_s,
            })
        })
        .collect();
    Ok(Json(json!({
        "from": from.to_string(),
        "to": to.to_string(),
        "syscalls": rows.len(),
        "calls": rows.iter().map(|r| r.count).sum::<f64>(),
        "time_seconds": total,
        "rows": shown,
    })))
}

/// A call's counters' increases over the range: its cumulative buckets by
/// `le`, its time (seconds), its count.
type Grew = (Vec<(f64, f64)>, f64, f64);

/// Every system call's row on `host` over `[from, to]`, by total time.
fn table(store: &dyn source::Source, host: &str, from: i64, to: i64) -> Result<Vec<trace::table::Row>, ApiError> {
    let esc = host.replace('\\', "\\\\").replace('"', "\\\"");
    let sel = Selector::parse(&format!("{{__name__=~\"kernel_syscall_seconds_.*\",host=\"{esc}\"}}"))
        .map_err(|e| ApiError::BadRequest(format!("host: {e}")))?;
    let mut calls: BTreeMap<String, Grew> = BTreeMap::new();
    for (id, key) in store.series(&sel) {
        let Some(call) = key.get("syscall") else { continue };
        let (ts, vs) = store.read(id, Timestamp(from.saturating_sub(BASELINE_NS)), Timestamp(to));
        let k = ts.partition_point(|&t| t <= from);
        let baseline = if k > 0 { vs[k - 1] } else { 0.0 };
        let grew = trace::table::increase(baseline, &vs[k..]);
        let entry = calls.entry(call.to_owned()).or_default();
        match key.name() {
            "kernel_syscall_seconds_sum" => entry.1 = grew,
            "kernel_syscall_seconds_count" => entry.2 = grew,
            "kernel_syscall_seconds_bucket" => {
                let le = match key.get("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::NAN),
                    None => f64::NAN,
                };
                if !le.is_nan() {
                    entry.0.push((le, grew));
                }
            }
            _ => {}
        }
    }
    let mut rows: Vec<trace::table::Row> = calls
        .into_iter()
        .filter(|(_, (_, _, count))| *count > 0.0)
        .map(|(name, (mut cumulative, sum, count))| {
            // Stored cumulative; the row wants each bucket's own count.
            cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut prev = 0.0;
            let own: Vec<(f64, f64)> = cumulative
                .iter()
                .map(|&(le, c)| {
                    let n = (c - prev).max(0.0);
                    prev = c;
                    (le, n)
                })
                .collect();
            trace::table::row(&name, &own, sum, count)
        })
        .collect();
    rows.sort_by(|a, b| b.sum_s.total_cmp(&a.sum_s).then_with(|| a.name.cmp(&b.name)));
    Ok(rows)
}
