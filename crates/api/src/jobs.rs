//! Jobs handed to agents (`kansoku server`, agents started with `--jobs`):
//! - `GET /api/v1/jobs`: the agents connected now that take jobs, and which;
//! - `POST /api/v1/jobs/load`: runs one load on several agents at one
//!   instant (`kansoku lab load --agents`). The body:
//!   `{"agents": ["a","b"], "args": ["http://…", "-c", "50", "-d", "10s"],
//!   "start_in_s": 1, "connect_timeout_s": 10, "timeout_s": 60}`. The answer,
//!   once every agent answered or timed out: the start on the server's clock
//!   (ns, as a string), and per agent its clock offset and round trip, the
//!   start on its own clock, and its report (`load::Report`'s bytes in
//!   base64) or the error.
//!
//! It makes agents send traffic: with tokens, a writing token not bound to
//! one host may ask it.

use axum::Json;
use axum::extract::State;
use base64::Engine;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::{ApiError, ApiState};

/// Most agents one job may start.
const AGENTS_MAX: usize = 256;
/// Longest a job may ask the server to wait for its answers.
const TIMEOUT_MAX_S: f64 = 24.0 * 3600.0;

fn jobs(st: &ApiState) -> Result<&crate::ClusterView, ApiError> {
    st.cluster.as_ref().ok_or_else(|| {
        ApiError::Unavailable("no agents here: jobs run on agents of kansoku server (its --ingest)".into())
    })
}

pub async fn offers(State(st): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let c = jobs(&st)?;
    let agents: Vec<Value> =
        c.jobs.offers().into_iter().map(|(host, kinds)| json!({"host": host, "kinds": kinds})).collect();
    Ok(Json(json!({ "agents": agents })))
}

pub async fn load(
    State(st): State<ApiState>,
    caller: Option<axum::Extension<Caller>>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    if let Some(axum::Extension(c)) = &caller
        && c.access != access::Access::Write(None)
    {
        return Err(ApiError::Forbidden("starting load on agents needs a writing token not bound to one host".into()));
    }
    let c = jobs(&st)?;
    let req: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))?;
    let strings = |key: &str| -> Result<Vec<String>, ApiError> {
        let bad = || ApiError::BadRequest(format!("{key:?}: give a list of strings"));
        req.get(key)
            .and_then(Value::as_array)
            .ok_or_else(bad)?
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect()
    };
    let seconds = |key: &str, default: f64| -> Result<std::time::Duration, ApiError> {
        let v = req.get(key).map_or(Some(default), Value::as_f64);
        match v {
            Some(s) if (0.0..=TIMEOUT_MAX_S).contains(&s) => Ok(std::time::Duration::from_secs_f64(s)),
            _ => Err(ApiError::BadRequest(format!("{key:?}: seconds, from 0 to {TIMEOUT_MAX_S}"))),
        }
    };
    let agents = strings("agents")?;
    let args = strings("args")?;
    if agents.is_empty() || agents.len() > AGENTS_MAX {
        return Err(ApiError::BadRequest(format!("\"agents\": from 1 to {AGENTS_MAX} host names")));
    }
    let mut unique = agents.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != agents.len() {
        return Err(ApiError::BadRequest("\"agents\": a host is named twice".into()));
    }
    let start_in = seconds("start_in_s", 1.0)?;
    let connect = seconds("connect_timeout_s", 10.0)?;
    let timeout = seconds("timeout_s", 60.0)?;
    let (start_ns, runs) = c
        .jobs
        .run(&c.hosts, &agents, "load", &args, ingest::JobTimes { start_in, connect, timeout })
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let agents: Vec<Value> = runs
        .iter()
        .map(|r| {
            let (report, error) = match &r.result {
                Ok(bytes) => (Some(b64.encode(bytes)), None),
                Err(e) => (None, Some(e.to_string())),
            };
            json!({"host": r.host, "offset_ns": r.offset_ns, "rtt_ns": r.rtt_ns, "start_ns": r.start_ns.to_string(),
                   "report": report, "error": error})
        })
        .collect();
    Ok(Json(json!({ "start_ns": start_ns.to_string(), "agents": agents })))
}
