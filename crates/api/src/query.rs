//! `GET /api/v1/series` and `GET /api/v1/query`: list series, read a range.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Query, State};
use axum::response::IntoResponse;
use model::{Selector, SeriesKey, Timestamp, resolve_range};
use serde::Serialize;
use store::query::{Agg, Frame, Group, GroupOp, RangeQuery, range};

use crate::{ApiError, ApiState};

type Params = Query<HashMap<String, String>>;

fn selector(params: &HashMap<String, String>, name: &str) -> Result<Selector, ApiError> {
    let text = params.get(name).map_or("", String::as_str);
    Selector::parse(text).map_err(|e| ApiError::BadRequest(e.to_string()))
}

#[derive(Serialize, Debug)]
pub struct SeriesJson<'a> {
    pub name: &'a str,
    pub labels: BTreeMap<&'a str, &'a str>,
}

impl<'a> SeriesJson<'a> {
    pub fn new(key: &'a SeriesKey) -> SeriesJson<'a> {
        SeriesJson { name: key.name(), labels: key.labels().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect() }
    }
}

/// Series one `/api/v1/series` answer lists by default, and at most.
pub const SERIES_LIST_DEFAULT: usize = 10_000;
pub const SERIES_LIST_MAX: usize = 100_000;

pub async fn series(State(st): State<ApiState>, Query(params): Params) -> Result<axum::response::Response, ApiError> {
    let sel = selector(&params, "match")?;
    let limit = match params.get("limit") {
        None => SERIES_LIST_DEFAULT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=SERIES_LIST_MAX).contains(l))
            .ok_or_else(|| ApiError::BadRequest(format!("limit {l:?}: a number from 1 to {SERIES_LIST_MAX}")))?,
    };
    let store = st.reader.clone();
    let body = st
        .guard
        .run(move || {
            let (found, total) = store.series_limited(&sel, limit);
            // Serialised straight to bytes (no JSON tree of 100,000 entries);
            // `total` and `truncated` say when there is more than was listed.
            let list = SeriesList {
                series: found.iter().map(|(_, k)| SeriesJson::new(k)).collect(),
                total,
                truncated: total > limit,
            };
            serde_json::to_vec(&list).expect("a series list serialises")
        })
        .await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[derive(Serialize)]
struct SeriesList<'a> {
    series: Vec<SeriesJson<'a>>,
    total: usize,
    truncated: bool,
}

#[derive(Serialize)]
struct FrameJson<'a> {
    /// Seconds since the epoch (uPlot's x unit), or integer ns with `time_unit=ns`.
    times: TimesJson,
    time_unit: &'static str,
    step_seconds: Option<f64>,
    series: Vec<FrameSeriesJson<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum TimesJson {
    Seconds(Vec<f64>),
    Nanos(Vec<i64>),
}

#[derive(Serialize)]
struct FrameSeriesJson<'a> {
    #[serde(flatten)]
    series: SeriesJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agg: Option<&'static str>,
    values: &'a [Option<f64>],
}

/// Parses the query parameters into a [`RangeQuery`]; shared by the HTTP
/// handler and tests.
pub fn parse_range_query(params: &HashMap<String, String>, now: Timestamp) -> Result<RangeQuery, ApiError> {
    let bad = |e: &dyn std::fmt::Display| ApiError::BadRequest(e.to_string());
    if !params.contains_key("query") {
        return Err(ApiError::BadRequest("missing parameter `query` (a selector, e.g. node_load1)".into()));
    }
    let sel = selector(params, "query")?;
    let get = |k: &str| params.get(k).map(String::as_str);
    let (from, to) = resolve_range(get("from"), get("to"), get("since"), now).map_err(|e| bad(&e))?;
    let step_ns = get("step")
        .map(|s| model::parse_duration(s).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)))
        .transpose()
        .map_err(|e| bad(&e))?;
    let points = get("points")
        .map(|p| p.parse::<usize>().ok().filter(|&n| n > 0))
        .map(|p| p.ok_or_else(|| ApiError::BadRequest("points must be a positive integer".into())))
        .transpose()?;
    let rate = match get("rate") {
        None | Some("false" | "0") => false,
        Some("true" | "1" | "") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("rate must be true or false, not {other:?}")));
        }
    };
    let aggs = get("agg")
        .map_or(Ok(Vec::new()), |a| a.split(',').map(str::parse::<Agg>).collect())
        .map_err(store::query::QueryError::from)?;
    if !aggs.is_empty() && step_ns.is_none() && points.is_none() {
        return Err(ApiError::BadRequest("agg needs step or points (aggregation is per bucket)".into()));
    }
    let group = match (get("by"), get("group")) {
        (None, None) => None,
        (by, op) => {
            let op = op.map_or(Ok(GroupOp::Sum), str::parse).map_err(|e: String| ApiError::BadRequest(e))?;
            let by = by.unwrap_or("").split(',').map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned);
            if step_ns.is_none() && points.is_none() {
                return Err(ApiError::BadRequest(
                    "by/group need step or points (series are combined per bucket)".into(),
                ));
            }
            Some(Group { by: by.collect(), op })
        }
    };
    Ok(RangeQuery { selector: sel, from, to, step_ns, points, rate, aggs, group })
}

pub async fn query_range(
    State(st): State<ApiState>,
    Query(params): Params,
) -> Result<axum::response::Response, ApiError> {
    let q = parse_range_query(&params, st.now())?;
    let nanos = match params.get("time_unit").map(String::as_str) {
        None | Some("s") => false,
        Some("ns") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("time_unit must be s or ns, not {other:?}")));
        }
    };
    let store = st.reader.clone();
    let body = st
        .guard
        .run(move || {
            let frame = range(&store, &q)?;
            // A 1 ns step over 50 ms stayed under the cell limit and then
            // asked for 1.6 GB of JSON: the answer's size is known first.
            let size = frame.times.len().saturating_mul(frame.series.len() + 1).saturating_mul(FRAME_CELL_BYTES);
            if size > crate::prometheus::ANSWER_BYTES_MAX {
                return Err(ApiError::TooLarge(format!(
                    "the answer would be about {} MiB, over the {} MiB an answer may be; ask for fewer points with step or points",
                    size >> 20,
                    crate::prometheus::ANSWER_BYTES_MAX >> 20
                )));
            }
            let held = model::budget::MemoryBudget::global().reservation();
            held.grow(size).map_err(|e| ApiError::TooLarge(e.to_string()))?;
            Ok(serde_json::to_vec(&frame_json_of(&frame, nanos)).expect("frame serialises"))
        })
        .await??;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Bytes a cell of a frame's JSON may take (a time or a value and its comma).
const FRAME_CELL_BYTES: usize = 24;

/// The JSON body of `/api/v1/query` for a frame; also used by `kansoku query --format json`.
pub fn frame_json(frame: &Frame, nanos: bool) -> serde_json::Value {
    serde_json::to_value(frame_json_of(frame, nanos)).expect("frame serialises")
}

fn frame_json_of(frame: &Frame, nanos: bool) -> FrameJson<'_> {
    let times = if nanos {
        TimesJson::Nanos(frame.times.clone())
    } else {
        TimesJson::Seconds(frame.times.iter().map(|&t| t as f64 / 1e9).collect())
    };
    FrameJson {
        times,
        time_unit: if nanos { "ns" } else { "s" },
        step_seconds: frame.step_ns.map(|s| s as f64 / 1e9),
        series: frame
            .series
            .iter()
            .map(|s| FrameSeriesJson { series: SeriesJson::new(&s.key), agg: s.agg.map(Agg::name), values: &s.values })
            .collect(),
    }
}
