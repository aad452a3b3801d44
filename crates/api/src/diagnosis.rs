//! `GET /api/v1/diagnosis?host=H[&since=5m | &from=&to=][&window=10s][&features=true]`:
//! the bottleneck verdict of each window (`crates/diagnose`,
//! docs/diagnosis.md) with its confidence and the numbers that decided it,
//! and the rule table; with `features`, every number the rules read.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use serde_json::{Value, json};

use crate::{ApiError, ApiState};

/// Most windows one request may classify.
const WINDOWS_MAX: i64 = 2_000;

pub async fn diagnosis(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let get = |k: &str| params.get(k).map(String::as_str);
    let host = get("host").ok_or_else(|| ApiError::BadRequest("missing parameter `host`".into()))?.to_owned();
    let since = get("since").or(if get("from").is_none() { Some("5m") } else { None });
    let (from, to) = model::resolve_range(get("from"), get("to"), since, st.now())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let window = match get("window") {
        Some(w) => model::parse_duration(w).map_err(|e| ApiError::BadRequest(format!("`window`: {e}")))?,
        None => std::time::Duration::from_secs(10),
    };
    let w = i64::try_from(window.as_nanos()).unwrap_or(i64::MAX).max(100_000_000);
    let (from, to) = (from.as_nanos(), to.as_nanos());
    // Windows end on multiples of the window, the first a window after `from`.
    let first = (from.div_euclid(w) + 1) * w;
    if to < first {
        return Err(ApiError::BadRequest(format!("the range is shorter than one window ({window:?})")));
    }
    if (to - first) / w + 1 > WINDOWS_MAX {
        return Err(ApiError::TooLarge(format!("more than {WINDOWS_MAX} windows: widen `window` or narrow the range")));
    }
    let with_features = matches!(get("features"), Some("true" | "1"));
    let store = std::sync::Arc::clone(&st.reader);
    let windows = st
        .guard
        .run(move || {
            diagnose::features(&store, &host, first, to, w)
                .into_iter()
                .map(|f| (diagnose::classify(&f), f))
                .collect::<Vec<_>>()
        })
        .await?;
    let windows: Vec<Value> = windows
        .iter()
        .map(|(v, f)| {
            let mut w = json!({
                "t": v.t as f64 / 1e9,
                "verdict": v.kind.name(),
                "confidence": v.confidence,
                "evidence": v.evidence.iter().map(|e| json!({"name": e.name, "value": e.value, "threshold": e.threshold})).collect::<Vec<_>>(),
                // Sources that gave the window nothing: the verdict was made without them.
                "no_data": f.no_data(),
            });
            if with_features {
                w["features"] = json!(f);
            }
            w
        })
        .collect();
    let rules: Vec<Value> =
        diagnose::RULES.iter().map(|(k, when)| json!({"verdict": k.name(), "when": when})).collect();
    Ok(Json(json!({ "window_seconds": w as f64 / 1e9, "rules": rules, "windows": windows })))
}

/// `GET /api/v1/diagnosis/hosts[?window=10s]`: every host's verdict over
/// the last whole window (the cluster view's column): the same features,
/// one PromQL query each grouped by host, however many hosts there are.
pub async fn hosts(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let window = match params.get("window") {
        Some(w) => model::parse_duration(w).map_err(|e| ApiError::BadRequest(format!("`window`: {e}")))?,
        None => std::time::Duration::from_secs(10),
    };
    let w = i64::try_from(window.as_nanos()).unwrap_or(i64::MAX).max(100_000_000);
    // The last window that has ended.
    let end = st.now().as_nanos().div_euclid(w) * w;
    let store = std::sync::Arc::clone(&st.reader);
    let verdicts = st
        .guard
        .run(move || {
            diagnose::features_by_host(&store, "host=~\".+\"", end, end, w)
                .into_iter()
                .filter_map(|(host, f)| f.last().map(|f| (host, diagnose::classify(f))))
                .collect::<Vec<_>>()
        })
        .await?;
    let hosts: Vec<Value> = verdicts
        .iter()
        .map(|(host, v)| json!({"host": host, "t": v.t as f64 / 1e9, "verdict": v.kind.name(), "confidence": v.confidence}))
        .collect();
    Ok(Json(json!({ "window_seconds": w as f64 / 1e9, "hosts": hosts })))
}
