//! `GET /api/v1/profile/top`: the top symbols of per-CPU samples over a
//! range (host, optional CPU and pid), symbolised here (`perf::symbols`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use model::{Selector, Timestamp};
use store::events::{EventQuery, Want};

use crate::{ApiError, ApiState};

/// Most events one request may scan (a minute of 64 CPUs at 10 kHz is 38 M).
const SCAN_MAX: usize = 50_000_000;

pub async fn top(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let get = |k: &str| params.get(k).map(String::as_str);
    let host = get("host").ok_or_else(|| ApiError::BadRequest("missing parameter `host`".into()))?;
    let stream = get("stream").unwrap_or("perf_cpu_clock");
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let sel = Selector::parse(&format!("{}{{host=\"{}\"}}", esc(stream), esc(host)))
        .map_err(|e| ApiError::BadRequest(format!("stream or host: {e}")))?;
    let now = Timestamp::now();
    let (from, to) = model::resolve_range(get("from"), get("to"), get("since"), now)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let num = |k: &str| -> Result<Option<u64>, ApiError> {
        get(k).map(|v| v.parse::<u64>().map_err(|_| ApiError::BadRequest(format!("`{k}`: a number")))).transpose()
    };
    let cpus: Vec<u32> = num("cpu")?.map(|c| vec![c as u32]).unwrap_or_default();
    let pid = num("pid")?.map(|p| p as u32);
    let n = num("n")?.unwrap_or(20).clamp(1, 1000) as usize;
    let store = Arc::clone(&st.store);
    let result = tokio::task::spawn_blocking(move || {
        let q = EventQuery { streams: sel, cpus, from: from.as_nanos(), to: to.as_nanos() };
        let want = Want { time: true, pid: true, tid: false, ip: true, chain: false };
        let (batches, corrupt) = store.events().scan(&q, want);
        let total: usize = batches.iter().map(|(_, b)| b.len()).sum();
        if total > SCAN_MAX {
            return Err(ApiError::TooLarge(format!("{total} samples in the range; narrow it (at most {SCAN_MAX})")));
        }
        let mut counts: HashMap<(u32, u64), u64> = HashMap::new();
        for (_, b) in &batches {
            for (p, ip) in b.pid.iter().zip(&b.ip) {
                if pid.is_none_or(|want| want == *p) {
                    *counts.entry((*p, *ip)).or_default() += 1;
                }
            }
        }
        let samples: u64 = counts.values().sum();
        let rows = perf::symbols::top(&counts, n);
        Ok(serde_json::json!({ "samples": samples, "corrupt_batches": corrupt, "rows": rows }))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("profile task: {e}")))??;
    Ok(Json(result))
}
