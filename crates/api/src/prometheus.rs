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
use promql::value::Labels;
use serde_json::{Value, json};

use crate::{ApiError, ApiState, auth};

/// Remote writes decoded and stored at once; a further one is answered
/// 503 (Prometheus retries it).
pub const REMOTE_WRITES_MAX: usize = 4;

/// The Prometheus endpoints' counters (`prometheus` in `/api/v1/status`),
/// and the turns remote writes take.
#[derive(Debug)]
pub struct PromStats {
    pub writes: Arc<tokio::sync::Semaphore>,
    pub queries: AtomicU64,
    pub remote_writes: AtomicU64,
    pub remote_write_samples: AtomicU64,
    /// Remote writes refused: undecodable, or too many new series.
    pub remote_write_refused: AtomicU64,
    pub remote_reads: AtomicU64,
    /// Samples a remote write sent that are not kept (times outside what
    /// the store holds); answered 400, as Prometheus answers them.
    pub remote_write_samples_refused: AtomicU64,
    /// Series `/federate` left out: names the exposition format cannot print.
    pub federate_skipped_names: AtomicU64,
}

impl Default for PromStats {
    fn default() -> PromStats {
        PromStats {
            writes: Arc::new(tokio::sync::Semaphore::new(REMOTE_WRITES_MAX)),
            queries: AtomicU64::default(),
            remote_writes: AtomicU64::default(),
            remote_write_samples: AtomicU64::default(),
            remote_write_refused: AtomicU64::default(),
            remote_reads: AtomicU64::default(),
            remote_write_samples_refused: AtomicU64::default(),
            federate_skipped_names: AtomicU64::default(),
        }
    }
}

impl PromStats {
    pub fn report(&self) -> [model::report::Figure; 7] {
        use model::report::Figure;
        [
            Figure::counter("remote_write_samples_refused", self.remote_write_samples_refused.load(Relaxed)),
            Figure::counter("federate_skipped_names", self.federate_skipped_names.load(Relaxed)),
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
#[derive(Debug)]
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

const MS: i64 = 1_000_000;

/// Unix seconds as Prometheus's API reads them (`parseTime`, then the
/// engine's milliseconds): a float whose fraction is rounded to the
/// millisecond (`…59.9996` is the next second), in ns. None: not a finite
/// number, or past what nanoseconds hold (year 2262).
fn float_seconds_ms(s: &str) -> Option<i64> {
    let t: f64 = s.parse().ok().filter(|t: &f64| t.is_finite())?;
    let (whole, frac) = (t.trunc(), t.fract());
    let frac = (frac * 1000.0).round() / 1000.0;
    if whole.abs() >= 1e10 {
        return None;
    }
    let ns = (whole as i64).checked_mul(1_000_000_000)?.checked_add((frac * 1e9) as i64)?;
    ns.div_euclid(MS).checked_mul(MS)
}

/// A time as Prometheus takes it: Unix seconds or RFC 3339, on whole
/// milliseconds as Prometheus's API answers (kansoku's own API keeps
/// nanoseconds; `docs/promql.md`).
fn time_param(p: &[(String, String)], name: &str, default: Option<i64>, now: Timestamp) -> Result<i64, PromError> {
    let ns = match get(p, name) {
        None | Some("") => default.ok_or_else(|| PromError::bad(format!("missing parameter {name:?}")))?,
        Some(s) => match float_seconds_ms(s) {
            Some(ns) => ns,
            None => model::parse_time(s, now).map(Timestamp::as_nanos).map_err(|_| {
                PromError::bad(format!("invalid parameter {name:?}: cannot parse {s:?} to a valid timestamp"))
            })?,
        },
    };
    Ok(ns.div_euclid(MS).checked_mul(MS).unwrap_or(ns))
}

/// A step: seconds (`15`, `0.01`) or a duration (`15s`, `1m30s`), in whole
/// milliseconds as Prometheus's engine steps (a finer step is refused:
/// kansoku's own `/api/v1/query` steps in nanoseconds).
fn duration_param(p: &[(String, String)], name: &str) -> Result<i64, PromError> {
    let s = get(p, name).ok_or_else(|| PromError::bad(format!("missing parameter {name:?}")))?;
    let ns = match s.parse::<f64>() {
        Ok(d) if d.is_finite() && (d * 1e9).abs() < 9.2e18 => (d * 1e9) as i64,
        Ok(_) => return Err(PromError::bad(format!("cannot parse {s:?} to a valid duration. It overflows int64"))),
        Err(_) => model::parse_duration(s).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)).map_err(|_| {
            PromError::bad(format!("invalid parameter {name:?}: cannot parse {s:?} to a valid duration"))
        })?,
    };
    if ns <= 0 {
        return Err(PromError::bad(
            "invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    if ns < MS {
        return Err(PromError::bad(format!(
            "invalid parameter \"step\": {s:?} is finer than the millisecond Prometheus's API steps by; kansoku's own /api/v1/query takes nanosecond steps"
        )));
    }
    Ok(ns / MS * MS)
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

/// Bytes one point of an answer may take (`[1700000000.123,"-1.2345678901234567e-300"],`).
const ANSWER_POINT_BYTES: usize = 48;
/// The largest answer a query may have, estimated before it is written
/// (a 1 ns step over 50 ms asked for 1.6 GB of JSON).
pub const ANSWER_BYTES_MAX: usize = 256 << 20;

/// The points and label bytes an answer holds: what it costs to write.
fn answer_size(out: &promql::Output, range: bool) -> usize {
    let labels = |l: &Labels| l.iter().map(|(k, v)| k.len() + v.len() + 8).sum::<usize>() + 32;
    match &out.value {
        promql::Value::Scalar(v) => v.len() * ANSWER_POINT_BYTES,
        promql::Value::String(s) => s.len() * 2 + 64,
        promql::Value::Matrix(m) => m.iter().map(|(l, s)| labels(l) + s.len() * ANSWER_POINT_BYTES).sum(),
        promql::Value::Vector(v) => v
            .iter()
            .map(|s| {
                let n = if range { s.points.iter().flatten().count() } else { 1 };
                labels(&s.labels) + n * ANSWER_POINT_BYTES
            })
            .sum(),
    }
}

/// A time in seconds as [`secs`] writes it, straight into `out`.
fn write_secs(out: &mut Vec<u8>, ns: i64) {
    serde_json::to_writer(&mut *out, &secs(ns)).expect("a number serialises");
}

/// `[t,"v"]`, the value as a vector's or a matrix's sample is written.
fn write_point(out: &mut Vec<u8>, ns: i64, v: f64) {
    write_point_as(out, ns, &promql::value::format_sample(v));
}

fn write_point_as(out: &mut Vec<u8>, ns: i64, v: &str) {
    out.push(b'[');
    write_secs(out, ns);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(v.as_bytes());
    out.extend_from_slice(b"\"]");
}

fn write_metric(out: &mut Vec<u8>, labels: &Labels) {
    let map: std::collections::BTreeMap<&str, &str> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    serde_json::to_writer(&mut *out, &map).expect("labels serialise");
}

/// `{"metric":{…},"values":[[t,"v"],…]}` for the points given.
fn write_series(out: &mut Vec<u8>, labels: &Labels, points: impl Iterator<Item = (i64, f64)>) {
    out.extend_from_slice(b"{\"metric\":");
    write_metric(out, labels);
    out.extend_from_slice(b",\"values\":[");
    for (i, (t, v)) in points.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_point(out, t, v);
    }
    out.extend_from_slice(b"]}");
}

/// A query's answer in Prometheus's JSON, written straight to bytes (no
/// tree of values, which took ~150 bytes a point); its size is estimated
/// first and refused past [`ANSWER_BYTES_MAX`] or the memory budget.
fn answer(out: promql::Output, range: bool, start: i64) -> Result<Vec<u8>, PromError> {
    let size = answer_size(&out, range);
    if size > ANSWER_BYTES_MAX {
        return Err(PromError(
            "execution",
            format!(
                "the answer would be about {} MiB, over the {} MiB an answer may be; ask for fewer points (a longer step, a shorter range) or fewer series",
                size >> 20,
                ANSWER_BYTES_MAX >> 20
            ),
        ));
    }
    let held = model::budget::MemoryBudget::global().reservation();
    held.grow(size).map_err(|e| PromError("execution", e.to_string()))?;
    let mut body = Vec::with_capacity(size.min(1 << 20));
    body.extend_from_slice(b"{\"data\":{\"result\":");
    let kind = match (out.value, range) {
        (promql::Value::Scalar(v), false) => {
            // A scalar never has an exponent (Prometheus's `Scalar.MarshalJSON`).
            write_point_as(&mut body, start, &promql::value::format_float(v[0]));
            "scalar"
        }
        (promql::Value::String(s), _) => {
            body.push(b'[');
            write_secs(&mut body, start);
            body.push(b',');
            serde_json::to_writer(&mut body, &s).expect("a string serialises");
            body.push(b']');
            "string"
        }
        (promql::Value::Matrix(mut series), _) => {
            series.sort_by(|a, b| a.0.cmp(&b.0));
            body.push(b'[');
            for (i, (labels, samples)) in series.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                write_series(&mut body, labels, samples.iter().copied());
            }
            body.push(b']');
            "matrix"
        }
        (promql::Value::Vector(series), false) => {
            body.push(b'[');
            let present = series.iter().filter_map(|s| s.points[0].map(|v| (&s.labels, v)));
            for (i, (labels, v)) in present.enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(b"{\"metric\":");
                write_metric(&mut body, labels);
                body.extend_from_slice(b",\"value\":");
                write_point(&mut body, start, v);
                body.push(b'}');
            }
            body.push(b']');
            "vector"
        }
        (promql::Value::Scalar(v), true) => {
            body.push(b'[');
            write_series(&mut body, &Labels::new(), out.times.iter().copied().zip(v));
            body.push(b']');
            "matrix"
        }
        (promql::Value::Vector(mut series), true) => {
            series.sort_by(|a, b| a.labels.cmp(&b.labels));
            body.push(b'[');
            let present = series.iter().filter(|s| s.points.iter().any(Option::is_some));
            for (i, s) in present.enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                let points = out.times.iter().zip(&s.points).filter_map(|(&t, p)| p.map(|v| (t, v)));
                write_series(&mut body, &s.labels, points);
            }
            body.push(b']');
            "matrix"
        }
    };
    body.extend_from_slice(format!(",\"resultType\":\"{kind}\"}},\"status\":\"success\"}}").as_bytes());
    Ok(body)
}

async fn query_inner(st: ApiState, p: Vec<(String, String)>, range: bool) -> Result<Response, PromError> {
    st.prometheus.queries.fetch_add(1, Relaxed);
    let q = get(&p, "query").ok_or_else(|| PromError::bad("missing parameter \"query\""))?.to_owned();
    let now = st.now().as_nanos();
    let (start, end, step) = if range {
        let (s, e) = (time_param(&p, "start", None, st.now())?, time_param(&p, "end", None, st.now())?);
        (s, e, duration_param(&p, "step")?)
    } else {
        let t = time_param(&p, "time", Some(now), st.now())?;
        (t, t, 1)
    };
    let store = st.reader.clone();
    let body = st
        .guard
        .run(move || {
            // Stops computing when its answer is due (the guard's 503), not
            // 90 s later (issue 42: a query went on for 45 s of CPU).
            let mut engine = promql::Engine::new(&store);
            engine.limits.timeout = crate::guard::HEAVY_TIMEOUT;
            let out = if range { engine.range(&q, start, end, step) } else { engine.instant(&q, start) }?;
            answer(out, range, start)
        })
        .await??;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
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

/// Label matchers all the `match[]` of one request (or the queries of one
/// remote read) may hold together: each regex may compile to 256 KiB, and
/// 5,000 of them took 2.5 GB.
pub const REQUEST_MATCHERS_MAX: usize = 4 * model::MATCHERS_MAX;

/// Refuses a request whose selectors hold more than [`REQUEST_MATCHERS_MAX`]
/// matchers together.
fn check_matchers(n: usize) -> Result<(), PromError> {
    if n > REQUEST_MATCHERS_MAX {
        return Err(PromError::bad(format!(
            "the request's selectors hold {n} label matchers; at most {REQUEST_MATCHERS_MAX} together"
        )));
    }
    Ok(())
}

/// The selectors of `match[]`; none means every series. Compiles their
/// regexes: call it on a blocking thread (inside the guard), never on an
/// async worker.
fn matchers(p: &[(String, String)]) -> Result<Vec<Selector>, PromError> {
    let texts: Vec<&str> = p.iter().filter(|(k, _)| k == "match[]").map(|(_, v)| v.as_str()).collect();
    // Cheap first bound, before any parsing: a matcher is at least `a=""`.
    check_matchers(texts.len())?;
    let sels: Vec<Selector> =
        texts.iter().map(|v| promql::series_selector(v).map_err(PromError::from)).collect::<Result<_, _>>()?;
    check_matchers(sels.iter().map(|s| s.matchers.len()).sum())?;
    Ok(if sels.is_empty() { vec![Selector::all()] } else { sels })
}

/// Series one listing may return (Prometheus has no bound; Grafana asks
/// with `match[]` and a range).
const LIST_MAX: usize = 100_000;

/// Every series the `match[]` selectors of `p` match, deduplicated, as
/// label sets.
async fn matching(st: &ApiState, p: Vec<(String, String)>) -> Result<Vec<Labels>, PromError> {
    let store = st.reader.clone();
    let out = st
        .guard
        .run(move || {
            let found = matched(&store, &matchers(&p)?)?;
            let seen: BTreeSet<Labels> = found.iter().map(|(_, k)| promql::value::of_key(k)).collect();
            Ok::<_, PromError>(seen.into_iter().collect::<Vec<Labels>>())
        })
        .await??;
    Ok(out)
}

/// Every series (id, key) any selector matches, each once.
fn matched(store: &dyn source::Source, sels: &[Selector]) -> Result<Vec<(u32, model::SeriesKey)>, PromError> {
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
        let found = matching(&st, p).await?;
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
    use formats::openmetrics::{Format, Sample, render};
    let run = async {
        let p = params(q, &Bytes::new())?;
        if !p.iter().any(|(k, _)| k == "match[]") {
            return Err(PromError::bad("no match[] parameter provided"));
        }
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let format =
            if accept.contains("application/openmetrics-text") { Format::OpenMetrics } else { Format::Text004 };
        let store = st.reader.clone();
        let now = st.now();
        let stats = Arc::clone(&st.prometheus);
        let samples = st
            .guard
            .run(move || {
                let mut out = Vec::new();
                let found = matched(&store, &matchers(&p)?)?;
                let ids: Vec<u32> = found.iter().map(|f| f.0).collect();
                let reads = store.read_many(&ids, now.saturating_sub(LOOKBACK), now, usize::MAX);
                for ((_, key), (ts, vals)) in found.into_iter().zip(reads) {
                    // A name the exposition formats cannot print (written
                    // through /write, where InfluxDB allows any) is left out
                    // and counted, never printed raw.
                    if key.check_names().is_err() {
                        stats.federate_skipped_names.fetch_add(1, Relaxed);
                        continue;
                    }
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
        let found = matching(&st, p).await?;
        let names: BTreeSet<&str> = found.iter().flat_map(|l| l.iter().map(|(k, _)| k.as_str())).collect();
        Ok(success(json!(names)))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

pub async fn label_values(State(st): State<ApiState>, Path(name): Path<String>, RawQuery(q): RawQuery) -> Response {
    let run = async {
        let p = params(q, &Bytes::new())?;
        let found = matching(&st, p).await?;
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
    let body = match crate::serve::read_body(body, max).await {
        Ok(b) => b,
        Err((status, e)) => return refuse(status, e),
    };
    let caller = caller.map(|c| c.0);
    let forced_host = match caller.as_ref().map(|c| &c.access) {
        Some(access::Access::Write(Some(h))) => Some(h.clone()),
        _ => None,
    };
    let writer = caller.map(|c| c.writer);
    let (store, influx, live) = (st.store.clone(), Arc::clone(&st.influx), st.live.clone());
    // Decoding and storing run on a blocking thread, at most
    // REMOTE_WRITES_MAX at once (each may hold DECODED_MEMORY_MAX).
    let Ok(turn) = st.prometheus.writes.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{REMOTE_WRITES_MAX} remote writes are being stored; try again (Prometheus retries a 503)"),
        );
    };
    let task = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        let mut series = match promql::remote_write::decode(&body) {
            Ok(series) => series,
            Err(e) => return Ok(Err(format!("remote write: {e}"))),
        };
        drop(body);
        // Samples the store cannot hold are not kept: said with a 400 (as
        // Prometheus answers out-of-bounds samples: the sender drops them,
        // never retries), the rest stored.
        let mut out_of_bounds = 0usize;
        let mut example = None;
        for (key, samples) in &mut series {
            samples.retain(|&(t, _)| {
                let ok = Timestamp(t).is_storable();
                if !ok {
                    out_of_bounds += 1;
                    example.get_or_insert_with(|| format!("{key} at {t} ns"));
                }
                ok
            });
        }
        let mut points = influx::Points::from_series(series);
        if let Some(host) = forced_host {
            for k in &mut points.keys {
                let mut labels = k.labels().to_vec();
                labels.push(("host".into(), host.clone()));
                *k = model::SeriesKey::new(k.name(), labels);
            }
        }
        let n = points.points.len();
        // Samples at or before their series' newest time are kept (as
        // Prometheus's out-of-order window keeps them), merged on read.
        crate::influx::store_points(&store, &influx, &live, &points, writer.as_deref())
            .map(|r| r.map(|_late| (n, out_of_bounds, example)))
    });
    match task.await {
        Ok(Ok(Ok((n, 0, _)))) => {
            stats.remote_write_samples.fetch_add(n as u64, Relaxed);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Ok(Ok((n, refused, example)))) => {
            stats.remote_write_samples.fetch_add(n as u64, Relaxed);
            stats.remote_write_samples_refused.fetch_add(refused as u64, Relaxed);
            let example = example.unwrap_or_default();
            refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "out of bounds: {refused} samples have times kansoku cannot store (1970 to 2200), e.g. {example}; the other {n} were stored"
                ),
            )
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
/// The largest remote-read answer, labels and samples, before encoding.
pub const REMOTE_READ_BYTES_MAX: usize = 256 << 20;

pub async fn remote_read(State(st): State<ApiState>, body: Bytes) -> Response {
    st.prometheus.remote_reads.fetch_add(1, Relaxed);
    let store = st.reader.clone();
    let answer = st
        .guard
        .run(move || {
            // Decoded here, not on an async worker: its regexes compile.
            let queries = promql::remote_read::decode_request(&body)
                .map_err(|e| (StatusCode::BAD_REQUEST, format!("remote read: {e}")))?;
            let n_matchers: usize = queries.iter().map(|q| q.0.matchers.len()).sum();
            if n_matchers > REQUEST_MATCHERS_MAX {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("remote read: {n_matchers} label matchers; at most {REQUEST_MATCHERS_MAX} together"),
                ));
            }
            // What the answer holds, labels included (a series with a 30 MB
            // label matched by 60 queries asked for 2.7 GB), counted
            // before each series is taken and held against the budget.
            let held = model::budget::MemoryBudget::global().reservation();
            let mut bytes = 0usize;
            let mut total = 0usize;
            let mut answers = Vec::with_capacity(queries.len());
            for (sel, from, to) in &queries {
                let too_much = |m: String| (StatusCode::UNPROCESSABLE_ENTITY, m);
                let (found, n) = store.series_limited(sel, LIST_MAX);
                if n > LIST_MAX {
                    return Err(too_much(format!("{n} series match a query; at most {LIST_MAX}")));
                }
                let mut series = Vec::with_capacity(found.len());
                let ids: Vec<u32> = found.iter().map(|f| f.0).collect();
                let left = READ_SAMPLES_MAX.saturating_sub(total);
                let reads = store.read_many(&ids, Timestamp(*from), Timestamp(*to), left);
                for ((_, key), (t, v)) in found.into_iter().zip(reads) {
                    total += t.len();
                    if total > READ_SAMPLES_MAX {
                        return Err(too_much(format!("more than {READ_SAMPLES_MAX} samples; narrow the range")));
                    }
                    let size = key.labels().iter().map(|(k, v)| k.len() + v.len() + 64).sum::<usize>()
                        + key.name().len()
                        + 64
                        + t.len() * 32;
                    bytes += size;
                    if bytes > REMOTE_READ_BYTES_MAX {
                        return Err(too_much(format!(
                            "the answer would pass {} MiB (labels and samples); narrow the queries",
                            REMOTE_READ_BYTES_MAX >> 20
                        )));
                    }
                    held.grow(size).map_err(|e| too_much(e.to_string()))?;
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
        Ok(Err(refused)) => refused.into_response(),
        Err(e) => e.into_response(),
    }
}

/// `/metadata[?metric=NAME][&limit=N]`: each stored metric family's type
/// and help ([`crate::metadata`]), as Prometheus answers from its scrapes:
/// `{"family": [{"type", "help", "unit"}]}`.
pub async fn metadata(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let run = async {
        let p = params(q, &Bytes::new())?;
        let limit = match get(&p, "limit") {
            None | Some("") => None,
            Some(l) => {
                Some(l.parse::<i64>().map_err(|_| PromError::bad(format!("limit must be a number, not {l:?}")))?)
            }
        };
        let metric = get(&p, "metric").unwrap_or("").to_owned();
        let found = matching(&st, Vec::new()).await?;
        let names = found.iter().map(|l| promql::value::get(l, promql::value::NAME));
        let all = crate::metadata::of_names(names);
        let out: serde_json::Map<String, Value> = all
            .into_iter()
            .filter(|(family, _)| metric.is_empty() || *family == metric)
            .take(limit.filter(|&l| l >= 0).map_or(usize::MAX, |l| l as usize))
            .map(|(family, meta)| (family, json!([meta.json()])))
            .collect();
        Ok(success(Value::Object(out)))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

/// `/query_exemplars?query=…&start=…&end=…`: the query is checked as
/// Prometheus checks it; kansoku keeps no exemplars, so the answer is the
/// empty list Prometheus gives without exemplar storage.
pub async fn query_exemplars(State(st): State<ApiState>, RawQuery(q): RawQuery, body: Bytes) -> Response {
    let run = async {
        let p = params(q, &body)?;
        let query = get(&p, "query").ok_or_else(|| PromError::bad("missing parameter \"query\""))?.to_owned();
        let (start, end) =
            (time_param(&p, "start", Some(i64::MIN), st.now())?, time_param(&p, "end", Some(i64::MAX), st.now())?);
        if end < start {
            return Err(PromError::bad("end timestamp must not be before start timestamp"));
        }
        st.guard.run(move || promql::parse(&query).map(drop)).await??;
        Ok(success(json!([])))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
}

/// `/format_query?query=…`: the expression as Prometheus's formatter
/// writes it (`promql-parser`'s port of it).
pub async fn format_query(State(st): State<ApiState>, RawQuery(q): RawQuery, body: Bytes) -> Response {
    let run = async {
        let p = params(q, &body)?;
        let query = get(&p, "query").ok_or_else(|| PromError::bad("missing parameter \"query\""))?.to_owned();
        let pretty = st.guard.run(move || promql::parse(&query).map(|e| e.prettify())).await??;
        Ok(success(json!(pretty)))
    };
    run.await.unwrap_or_else(|e: PromError| e.into_response())
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
        "value": promql::value::go_exponent(a.value),
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
            [1.0, 0.85, 1234.5, -2e-7, 0.0, f64::NAN].map(promql::value::go_exponent),
            ["1e+00", "8.5e-01", "1.2345e+03", "-2e-07", "0e+00", "NaN"]
        );
    }

    use super::secs;

    #[test]
    fn times_print_as_their_decimal() {
        assert_eq!(secs(1_795_525_425_266_000_000).to_string(), "1795525425.266");
        assert_eq!(secs(1_795_525_526_583_000_000).to_string(), "1795525526.583");
        assert_eq!(secs(1_700_000_000_000_000_000).to_string(), "1700000000");
        assert_eq!(secs(10_000_000).to_string(), "0.01");
    }

    #[test]
    fn times_and_steps_are_milliseconds_as_prometheus_reads_them() {
        use super::{float_seconds_ms, time_param};
        assert_eq!(float_seconds_ms("1700000000.015"), Some(1_700_000_000_015_000_000));
        assert_eq!(float_seconds_ms("1700000059.9996"), Some(1_700_000_060_000_000_000), "rounded up to the second");
        assert_eq!(float_seconds_ms("1700000059.0004"), Some(1_700_000_059_000_000_000));
        assert_eq!(float_seconds_ms("-1.5"), Some(-1_500_000_000));
        assert_eq!(float_seconds_ms("15"), Some(15_000_000_000));
        assert_eq!(float_seconds_ms("1e9"), Some(1_000_000_000_000_000_000));
        assert_eq!(float_seconds_ms("-9223372036"), Some(-9_223_372_036_000_000_000));
        for bad in ["15s", ".", "NaN", "inf", "2026-01-01T00:00:00Z", "1e30", "9223372037", "-9223372036.9"] {
            assert_eq!(float_seconds_ms(bad), None, "{bad}");
        }
        let now = model::Timestamp(0);
        let p = |v: &str| vec![("time".to_owned(), v.to_owned())];
        assert_eq!(time_param(&p("2026-01-01T00:00:00.123456789Z"), "time", None, now).unwrap() % 1_000_000, 0);
        assert_eq!(time_param(&[], "time", Some(1_999_999), now).unwrap(), 1_000_000, "now, truncated");
        let step = |v: &str| super::duration_param(&[("step".to_owned(), v.to_owned())], "step").map_err(|e| e.1);
        assert_eq!(step("0.0155").unwrap(), 15_000_000);
        assert_eq!(step("1m30s").unwrap(), 90_000_000_000);
        assert!(step("0.0001").unwrap_err().contains("millisecond"));
        assert!(step("0").unwrap_err().contains("zero or negative"));
        assert!(step("1e300").unwrap_err().contains("overflows"));
    }
}
