//! The Prometheus HTTP API under `/prometheus` (Grafana's Prometheus data
//! source URL is `http://HOST:7070/prometheus`): instant and range queries
//! in PromQL (the `promql` crate), series, label names and values, metadata
//! and build information, GET or POST form bodies, Prometheus's JSON result
//! format and error types.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use axum::body::Bytes;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use model::{Selector, Timestamp};
use promql::value::{Labels, format_float};
use serde_json::{Value, json};

use crate::{ApiError, ApiState, auth};

/// The Prometheus endpoints' counters (`prometheus` in `/api/v1/status`).
#[derive(Debug, Default)]
pub struct PromStats {
    pub queries: AtomicU64,
    pub remote_writes: AtomicU64,
    pub remote_write_samples: AtomicU64,
    /// Remote writes refused: undecodable, or too many new series.
    pub remote_write_refused: AtomicU64,
    pub remote_reads: AtomicU64,
}

impl PromStats {
    pub fn report(&self) -> [model::report::Figure; 5] {
        use model::report::Figure;
        [
            Figure::counter("queries", self.queries.load(Relaxed)),
            Figure::counter("remote_writes", self.remote_writes.load(Relaxed)),
            Figure::counter("remote_write_samples", self.remote_write_samples.load(Relaxed)),
            Figure::counter("remote_write_refused", self.remote_write_refused.load(Relaxed)),
            Figure::counter("remote_reads", self.remote_reads.load(Relaxed)),
        ]
    }
}

/// The Prometheus release whose API and PromQL this implements (Grafana
/// reads it to pick the features it uses).
pub const PROMETHEUS_VERSION: &str = "2.42.0";

/// A Prometheus error: its type, and the status it is sent with.
struct PromError(&'static str, String);

impl PromError {
    fn bad(msg: impl Into<String>) -> PromError {
        PromError("bad_data", msg.into())
    }
}

impl IntoResponse for PromError {
    fn into_response(self) -> Response {
        let status = match self.0 {
            "bad_data" => StatusCode::BAD_REQUEST,
            "execution" => StatusCode::UNPROCESSABLE_ENTITY,
            "timeout" | "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, axum::Json(json!({ "status": "error", "errorType": self.0, "error": self.1 }))).into_response()
    }
}

impl From<promql::Error> for PromError {
    fn from(e: promql::Error) -> PromError {
        match e {
            promql::Error::BadData(m) => PromError("bad_data", m),
            promql::Error::Execution(m) | promql::Error::TooLarge(m) => PromError("execution", m),
            promql::Error::Timeout(m) => PromError("timeout", m),
        }
    }
}

impl From<ApiError> for PromError {
    fn from(e: ApiError) -> PromError {
        match e {
            ApiError::BadRequest(m) => PromError("bad_data", m),
            ApiError::TooLarge(m) => PromError("execution", m),
            ApiError::Unavailable(m) => PromError("unavailable", m),
            other => PromError("internal", other.to_string()),
        }
    }
}

fn success(data: Value) -> Response {
    axum::Json(json!({ "status": "success", "data": data })).into_response()
}

/// The request's parameters, from the query string and a form body alike
/// (Grafana POSTs long queries), repeated names (`match[]`) kept.
fn params(query: Option<String>, body: &Bytes) -> Result<Vec<(String, String)>, PromError> {
    let mut out: Vec<(String, String)> = serde_urlencoded::from_str(query.as_deref().unwrap_or(""))
        .map_err(|e| PromError::bad(format!("query string: {e}")))?;
    if !body.is_empty() {
        let text = std::str::from_utf8(body).map_err(|_| PromError::bad("form body is not UTF-8"))?;
        let form: Vec<(String, String)> =
            serde_urlencoded::from_str(text).map_err(|e| PromError::bad(format!("form body: {e}")))?;
        out.extend(form);
    }
    Ok(out)
}

fn get<'a>(p: &'a [(String, String)], name: &str) -> Option<&'a str> {
    p.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A decimal number of seconds to nanoseconds, exactly (`1700000000.015`).
fn decimal_ns(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let secs: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut frac_ns = 0i64;
    for (i, c) in frac.chars().take(9).enumerate() {
        frac_ns += i64::from(c as u8 - b'0') * 10i64.pow(8 - i as u32);
    }
    let ns = secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)?;
    Some(if neg { -ns } else { ns })
}

/// A time as Prometheus takes it: Unix seconds or RFC 3339.
fn time_param(p: &[(String, String)], name: &str, default: Option<i64>) -> Result<i64, PromError> {
    match get(p, name) {
        None | Some("") => default.ok_or_else(|| PromError::bad(format!("missing parameter {name:?}"))),
        Some(s) => match decimal_ns(s) {
            Some(ns) => Ok(ns),
            None => model::parse_time(s, Timestamp::now()).map(Timestamp::as_nanos).map_err(|_| {
                PromError::bad(format!("invalid parameter {name:?}: cannot parse {s:?} to a valid timestamp"))
            }),
        },
    }
}

/// A step: seconds (`15`, `0.01`) or a duration (`15s`, `1m30s`).
fn duration_param(p: &[(String, String)], name: &str) -> Result<i64, PromError> {
    let s = get(p, name).ok_or_else(|| PromError::bad(format!("missing parameter {name:?}")))?;
    let ns = match decimal_ns(s) {
        Some(ns) => ns,
        None => model::parse_duration(s).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)).map_err(|_| {
            PromError::bad(format!("invalid parameter {name:?}: cannot parse {s:?} to a valid duration"))
        })?,
    };
    if ns <= 0 {
        return Err(PromError::bad(
            "invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    Ok(ns)
}

/// A time in seconds as Prometheus writes it: the decimal of the time
/// (`1795525425.266`), not the float nearest `ns / 1e9` (`…425.2659998`).
fn secs(ns: i64) -> Value {
    let (s, frac) = (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    if frac == 0 {
        return json!(s);
    }
    let decimal = format!("{s}.{frac:09}");
    json!(decimal.parse::<f64>().unwrap_or(ns as f64 / 1e9))
}

fn metric(labels: &Labels) -> Value {
    Value::Object(labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

async fn query_inner(st: ApiState, p: Vec<(String, String)>, range: bool) -> Result<Response, PromError> {
    st.prometheus.queries.fetch_add(1, Relaxed);
    let q = get(&p, "query").ok_or_else(|| PromError::bad("missing parameter \"query\""))?.to_owned();
    let now = Timestamp::now().as_nanos();
    let (start, end, step) = if range {
        let (s, e) = (time_param(&p, "start", None)?, time_param(&p, "end", None)?);
        (s, e, duration_param(&p, "step")?)
    } else {
        let t = time_param(&p, "time", Some(now))?;
        (t, t, 1)
    };
    let store = st.reader.clone();
    let out = st
        .guard
        .run(move || {
            let engine = promql::Engine::new(&store);
            if range { engine.range(&q, start, end, step) } else { engine.instant(&q, start) }
        })
        .await??;
    let data = match (out.value, range) {
        (promql::Value::Scalar(v), false) => {
            json!({ "resultType": "scalar", "result": [secs(start), format_float(v[0])] })
        }
        (promql::Value::String(s), _) => json!({ "resultType": "string", "result": [secs(start), s] }),
        (promql::Value::Matrix(mut series), _) => {
            series.sort_by(|a, b| a.0.cmp(&b.0));
            let result: Vec<Value> = series
                .iter()
                .map(|(labels, samples)| {
                    let values: Vec<Value> = samples.iter().map(|&(t, v)| json!([secs(t), format_float(v)])).collect();
                    json!({ "metric": metric(labels), "values": values })
                })
                .collect();
            json!({ "resultType": "matrix", "result": result })
        }
        (promql::Value::Vector(series), false) => {
            let result: Vec<Value> = series
                .iter()
                .filter_map(|s| {
                    s.points[0].map(|v| json!({ "metric": metric(&s.labels), "value": [secs(start), format_float(v)] }))
                })
                .collect();
            json!({ "resultType": "vector", "result": result })
        }
        (promql::Value::Scalar(v), true) => {
            let values: Vec<Value> = out.times.iter().zip(v).map(|(&t, x)| json!([secs(t), format_float(x)])).collect();
            json!({ "resultType": "matrix", "result": [{ "metric": {}, "values": values }] })
        }
        (promql::Value::Vector(mut series), true) => {
            series.sort_by(|a, b| a.labels.cmp(&b.labels));
            let result: Vec<Value> = series
                .iter()
                .filter(|s| s.points.iter().any(Option::is_some))
                .map(|s| {
                    let values: Vec<Value> = out
                        .times
                        .iter()
                        .zip(&s.points)
                        .filter_map(|(&t, p)| p.map(|v| json!([secs(t), format_float(v)])))
                        .collect();
                    json!({ "metric": metric(&s.labels), "values": values })
                })
                .collect();
            json!({ "resultType": "matrix", "result": result })
        }
    };
    Ok(success(data))
}

pub async fn query(State(st): State<ApiState>, RawQuery(q): RawQuery, body: Bytes) -> Response {
    match params(q, &body) {
        Ok(p) => query_inner(st, p, false).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    }
}

pub async fn query_range(State(st): State<ApiState>, RawQuery(q): RawQuery, body: Bytes) -> Response {
    match params(q, &body) {
        Ok(p) => query_inner(st, p, true).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    }
}

/// The selectors of `match[]`; none means every series.
fn matchers(p: &[(String, String)]) -> Result<Vec<Selector>, PromError> {
    let sels: Vec<Selector> = p
        .iter()
        .filter(|(k, _)| k == "match[]")
        .map(|(_, v)| promql::series_selector(v).map_err(PromError::from))
        .collect::<Result<_, _>>()?;
    Ok(if sels.is_empty() { vec![Selector::all()] } else { sels })
}

/// Series one listing may return (Prometheus has no bound; Grafana asks
/// with `match[]` and a range).
const LIST_MAX: usize = 100_000;

/// Every series the selectors match, deduplicated, as label sets.
async fn matching(st: &ApiState, sels: Vec<Selector>) -> Result<Vec<Labels>, PromError> {
    let store = st.reader.clone();
    let out = st
        .guard
        .run(move || {
            let found = matched(&store, &sels)?;
            let seen: BTreeSet<Labels> = found.iter().map(|(_, k)| promql::value::of_key(k)).collect();
            Ok::<_, PromError>(seen.into_iter().collect::<Vec<Labels>>())
        })
        .await??;
    Ok(out)
}

/// Every series (id, key) any selector matches, each once.
fn matched(store: &dyn store::Source, sels: &[Selector]) -> Result<Vec<(u32, model::SeriesKey)>, PromError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for sel in sels {
        let (found, total) = store.series_limited(sel, LIST_MAX);
        if total > LIST_MAX {
            return Err(PromError("execution", format!("{total} series match; at most {LIST_MAX}: narrow match[]")));
        }
        out.extend(found.into_iter().filter(|(id, _)| seen.insert(*id)));
    }
    Ok(out)
}

pub async fn series(State(st): State<ApiState>, RawQuery(q): RawQuery, body: Bytes) -> Response {
    let run = async {
        let p = params(q, &body)?;
        if !p.iter().any(|(k, _)| k == "match[]") {
            return Err(PromError::bad("no match[] parameter provided"));
        }
        let found = matching(&st, matchers(&p)?).await?;
        Ok(success(Value::Array(found.iter().map(metric).collect())))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

/// `/federate?match[]=…`: the newest sample (within 5 minutes,
/// Prometheus's lookback) of every series the selectors match, in the
/// exposition format the scraper accepts — OpenMetrics (histogram families
/// typed) or text 0.0.4 — so a Prometheus scrapes kansoku as it federates
/// another (`honor_labels: true`; docs/api.md).
pub async fn federate(State(st): State<ApiState>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    use crate::exposition::{Format, Sample, render};
    let run = async {
        let p = params(q, &Bytes::new())?;
        if !p.iter().any(|(k, _)| k == "match[]") {
            return Err(PromError::bad("no match[] parameter provided"));
        }
        let sels = matchers(&p)?;
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let format =
            if accept.contains("application/openmetrics-text") { Format::OpenMetrics } else { Format::Text004 };
        let store = st.reader.clone();
        let now = Timestamp::now();
        let samples = st
            .guard
            .run(move || {
                let mut out = Vec::new();
                let found = matched(&store, &sels)?;
                let ids: Vec<u32> = found.iter().map(|f| f.0).collect();
                let reads = store.read_many(&ids, now.saturating_sub(LOOKBACK), now, usize::MAX);
                for ((_, key), (ts, vals)) in found.into_iter().zip(reads) {
                    if let (Some(&t), Some(&v)) = (ts.last(), vals.last())
                        && v.to_bits() != model::STALE_NAN
                    {
                        out.push(Sample { labels: promql::value::of_key(&key), t, v });
                    }
                }
                Ok::<_, PromError>(out)
            })
            .await??;
        Ok(([(header::CONTENT_TYPE, format.content_type())], render(&samples, format)).into_response())
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

/// How far back `/federate` looks for a series' newest sample.
const LOOKBACK: std::time::Duration = std::time::Duration::from_secs(300);

pub async fn labels(State(st): State<ApiState>, RawQuery(q): RawQuery, body: Bytes) -> Response {
    let run = async {
        let p = params(q, &body)?;
        let found = matching(&st, matchers(&p)?).await?;
        let names: BTreeSet<&str> = found.iter().flat_map(|l| l.iter().map(|(k, _)| k.as_str())).collect();
        Ok(success(json!(names)))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

pub async fn label_values(State(st): State<ApiState>, Path(name): Path<String>, RawQuery(q): RawQuery) -> Response {
    let run = async {
        let p = params(q, &Bytes::new())?;
        let found = matching(&st, matchers(&p)?).await?;
        let values: BTreeSet<&str> =
            found.iter().map(|l| promql::value::get(l, &name)).filter(|v| !v.is_empty()).collect();
        Ok(success(json!(values)))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

/// `POST /prometheus/api/v1/write`: Prometheus remote write 1.0 (snappy
/// protobuf). 204 once stored; 400 for a body that does not decode or would
/// create too many series (Prometheus drops it, never retries); 503 when the
/// store cannot write now (Prometheus retries).
pub async fn remote_write(
    State(st): State<ApiState>,
    caller: Option<Extension<auth::Caller>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let stats = Arc::clone(&st.prometheus);
    stats.remote_writes.fetch_add(1, Relaxed);
    let refuse = |status: StatusCode, msg: String| {
        stats.remote_write_refused.fetch_add(1, Relaxed);
        (status, msg).into_response()
    };
    let max = crate::influx::WRITE_MAX;
    if headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok()).is_some_and(|n| n > max)
    {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over {max} bytes"));
    }
    let Ok(body) = axum::body::to_bytes(body, max).await else {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over {max} bytes"));
    };
    let caller = caller.map(|c| c.0);
    let forced_host = match caller.as_ref().map(|c| &c.access) {
        Some(cluster::server::Access::Write(Some(h))) => Some(h.clone()),
        _ => None,
    };
    let writer = caller.map(|c| c.writer);
    let (store, influx, live) = (st.store.clone(), Arc::clone(&st.influx), st.live.clone());
    let task = tokio::task::spawn_blocking(move || {
        let mut points = match promql::remote_write::decode(&body) {
            Ok(series) => influx::Points::from_series(series),
            Err(e) => return Ok(Err(format!("remote write: {e}"))),
        };
        if let Some(host) = forced_host {
            for k in &mut points.keys {
                let mut labels = k.labels().to_vec();
                labels.push(("host".into(), host.clone()));
                *k = model::SeriesKey::new(k.name(), labels);
            }
        }
        let n = points.points.len();
        crate::influx::store_points(&store, &influx, &live, &points, writer.as_deref()).map(|r| r.map(|()| n))
    });
    match task.await {
        Ok(Ok(Ok(n))) => {
            stats.remote_write_samples.fetch_add(n as u64, Relaxed);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Ok(Err(refused))) => refuse(StatusCode::BAD_REQUEST, refused),
        Ok(Err(e)) => refuse(StatusCode::SERVICE_UNAVAILABLE, format!("cannot store now: {e}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("write task: {e}")),
    }
}

/// Samples one remote read may return, over all its queries.
const READ_SAMPLES_MAX: usize = 50_000_000;

/// `POST /prometheus/api/v1/read`: Prometheus remote read (the samples
/// response), every matching series' raw samples in each query's range.
pub async fn remote_read(State(st): State<ApiState>, body: Bytes) -> Response {
    st.prometheus.remote_reads.fetch_add(1, Relaxed);
    let queries = match promql::remote_read::decode_request(&body) {
        Ok(q) => q,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("remote read: {e}")).into_response(),
    };
    let store = st.reader.clone();
    let answer = st
        .guard
        .run(move || {
            let mut total = 0usize;
            let mut answers = Vec::with_capacity(queries.len());
            for (sel, from, to) in &queries {
                let (found, n) = store.series_limited(sel, LIST_MAX);
                if n > LIST_MAX {
                    return Err(format!("{n} series match a query; at most {LIST_MAX}"));
                }
                let mut series = Vec::with_capacity(found.len());
                let ids: Vec<u32> = found.iter().map(|f| f.0).collect();
                let left = READ_SAMPLES_MAX.saturating_sub(total);
                let reads = store.read_many(&ids, Timestamp(*from), Timestamp(*to), left);
                for ((_, key), (t, v)) in found.into_iter().zip(reads) {
                    total += t.len();
                    if total > READ_SAMPLES_MAX {
                        return Err(format!("more than {READ_SAMPLES_MAX} samples; narrow the range"));
                    }
                    if !t.is_empty() {
                        series.push((key, t, v));
                    }
                }
                answers.push(series);
            }
            Ok(promql::remote_read::encode_response(&answers))
        })
        .await;
    match answer {
        Ok(Ok(bytes)) => {
            ([(header::CONTENT_TYPE, "application/x-protobuf"), (header::CONTENT_ENCODING, "snappy")], bytes)
                .into_response()
        }
        Ok(Err(too_much)) => (StatusCode::UNPROCESSABLE_ENTITY, too_much).into_response(),
        Err(e) => e.into_response(),
    }
}

/// kansoku keeps no metric metadata (types, help): an empty answer, as a
/// Prometheus whose targets expose none.
pub async fn metadata() -> Response {
    success(json!({}))
}

/// `/api/v1/alerts`: the rule groups' pending and firing alerts, as
/// Prometheus lists them (also the dashboard's banner, under
/// `/api/v1/alerts`). Empty when no rules are loaded.
pub async fn alerts(State(st): State<ApiState>) -> Response {
    let alerts: Vec<Value> = st.alerts.as_ref().map(|b| b.all()).unwrap_or_default().iter().map(alert_json).collect();
    success(json!({ "alerts": alerts }))
}

fn alert_json(a: &model::alert::ActiveAlert) -> Value {
    json!({
        "labels": a.labels,
        "annotations": a.annotations,
        "state": if a.firing { "firing" } else { "pending" },
        "activeAt": Timestamp(a.active_at).to_string(),
        "value": go_exp(a.value),
    })
}

/// `/api/v1/rules[?type=alert|record]`: every rule group, its rules' health,
/// last error, evaluation time and active alerts, as Prometheus lists them
/// (Grafana's rule browser). Empty when no rules are loaded.
pub async fn rules(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match params(q, &Bytes::new()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let want_alerting = match p.iter().find(|(k, _)| k == "type").map(|(_, v)| v.as_str()) {
        None | Some("") => None,
        Some("alert") => Some(true),
        Some("record") => Some(false),
        Some(other) => return PromError::bad(format!("invalid rule type {other:?}: alert or record")).into_response(),
    };
    let secs = |ns: i64| ns as f64 / 1e9;
    let when = |t: i64| if t == 0 { "0001-01-01T00:00:00Z".to_owned() } else { Timestamp(t).to_string() };
    let groups: Vec<Value> = st
        .alerts
        .as_ref()
        .map(|b| b.groups())
        .unwrap_or_default()
        .into_iter()
        .map(|g| {
            let rules: Vec<Value> = g
                .rules
                .iter()
                .filter(|r| want_alerting.is_none_or(|a| a == r.alerting))
                .map(|r| {
                    let mut v = json!({
                        "name": r.name,
                        "query": r.query,
                        "labels": r.labels,
                        "health": if r.last_eval == 0 { "unknown" } else if r.last_error.is_some() { "err" } else { "ok" },
                        "evaluationTime": secs(r.eval_ns),
                        "lastEvaluation": when(r.last_eval),
                        "type": if r.alerting { "alerting" } else { "recording" },
                    });
                    if let Some(e) = &r.last_error {
                        v["lastError"] = json!(e);
                    }
                    if r.alerting {
                        let state = if r.alerts.iter().any(|a| a.firing) {
                            "firing"
                        } else if r.alerts.is_empty() {
                            "inactive"
                        } else {
                            "pending"
                        };
                        v["state"] = json!(state);
                        v["duration"] = json!(r.hold_s);
                        v["keepFiringFor"] = json!(r.keep_firing_s);
                        v["annotations"] = json!(r.annotations);
                        v["alerts"] = Value::Array(r.alerts.iter().map(alert_json).collect());
                    }
                    v
                })
                .collect();
            json!({
                "name": g.name,
                "file": g.file,
                "rules": rules,
                "interval": g.interval_s,
                "limit": g.limit,
                "evaluationTime": secs(g.eval_ns),
                "lastEvaluation": when(g.last_eval),
            })
        })
        .collect();
    success(json!({ "groups": groups }))
}

/// A float as Go's `strconv.FormatFloat(v, 'e', -1, 64)` prints it (how
/// Prometheus gives an alert's value): `1e+00`, `8.5e-01`.
fn go_exp(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "NaN".into()
        } else if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let s = format!("{v:e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

pub async fn buildinfo() -> Response {
    success(json!({
        "version": PROMETHEUS_VERSION,
        "revision": concat!("kansoku-", env!("CARGO_PKG_VERSION")),
        "branch": "",
        "buildUser": "",
        "buildDate": "",
        "goVersion": "",
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn alert_values_print_as_go_does() {
        assert_eq!(
            [1.0, 0.85, 1234.5, -2e-7, 0.0, f64::NAN].map(super::go_exp),
            ["1e+00", "8.5e-01", "1.2345e+03", "-2e-07", "0e+00", "NaN"]
        );
    }

    use super::{decimal_ns, secs};

    #[test]
    fn times_print_as_their_decimal() {
        assert_eq!(secs(1_795_525_425_266_000_000).to_string(), "1795525425.266");
        assert_eq!(secs(1_795_525_526_583_000_000).to_string(), "1795525526.583");
        assert_eq!(secs(1_700_000_000_000_000_000).to_string(), "1700000000");
        assert_eq!(secs(10_000_000).to_string(), "0.01");
    }

    #[test]
    fn decimal_seconds_are_read_exactly() {
        assert_eq!(decimal_ns("1700000000.015"), Some(1_700_000_000_015_000_000));
        assert_eq!(decimal_ns("0.01"), Some(10_000_000));
        assert_eq!(decimal_ns("-1.5"), Some(-1_500_000_000));
        assert_eq!(decimal_ns("15"), Some(15_000_000_000));
        assert_eq!(decimal_ns("15s"), None);
        assert_eq!(decimal_ns("."), None);
        assert_eq!(decimal_ns("2026-01-01T00:00:00Z"), None);
    }
}
