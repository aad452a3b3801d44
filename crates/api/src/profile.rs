//! Per-CPU samples over a range (host, optional CPU and pid), symbolised
//! here (`perf::symbols`):
//! - `GET /api/v1/profile/top`: the top symbols (rank, symbol, module,
//!   samples, share);
//! - `GET /api/v1/profile/flame`: the flame graph of the call chains, its
//!   frames in preorder as [name, samples, depth] (flat: deep stacks meet
//!   no client's nesting limit); samples without a chain are their process
//!   and symbol;
//! - `GET /api/v1/profile/folded`: the same stacks as folded-stacks text
//!   for flamegraph.pl, inferno or speedscope;
//! - `GET /api/v1/profile/pprof`: the same as a gzipped pprof profile
//!   (`go tool pprof`, Parca, Pyroscope);
//! - `GET /api/v1/profile/timeline`: per CPU and time bucket, the process
//!   that ran most, for the dashboard's timeline strip.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use model::{Selector, Timestamp};
use perf::symbols::Procs;
use source::EventQuery;
use source::{EventCounts, EventsError, Shape};

use crate::{ApiError, ApiState};

/// Most events one request may scan (a minute of 64 CPUs at 10 kHz is 38 M).
const SCAN_MAX: u64 = 50_000_000;

/// The range, stream and filters of a profile request.
struct Request {
    query: EventQuery,
    pid: Option<u32>,
    n: usize,
    buckets: usize,
}

fn request(params: &HashMap<String, String>, now: Timestamp) -> Result<Request, ApiError> {
    let get = |k: &str| params.get(k).map(String::as_str);
    let host = get("host").ok_or_else(|| ApiError::BadRequest("missing parameter `host`".into()))?;
    // Without a stream: the samples of whichever event the host sampled.
    let stream = match get("stream") {
        Some(s) => format!("{{__name__={},", model::quoted(s)),
        None => "{__name__=~\"perf_cpu_clock|perf_cycles\",".to_owned(),
    };
    let sel = Selector::parse(&format!("{stream}host={}}}", model::quoted(host)))
        .map_err(|e| ApiError::BadRequest(format!("stream or host: {e}")))?;
    let (from, to) = model::resolve_range(get("from"), get("to"), get("since"), now)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let num = |k: &str| -> Result<Option<u64>, ApiError> {
        get(k).map(|v| v.parse::<u64>().map_err(|_| ApiError::BadRequest(format!("`{k}`: a number")))).transpose()
    };
    let num32 = |k: &str| -> Result<Option<u32>, ApiError> {
        num(k)?
            .map(|v| u32::try_from(v).map_err(|_| ApiError::BadRequest(format!("`{k}`: {v} is past 4294967295"))))
            .transpose()
    };
    let cpus: Vec<u32> = num32("cpu")?.map(|c| vec![c]).unwrap_or_default();
    Ok(Request {
        query: EventQuery { streams: sel, cpus, from: from.as_nanos(), to: to.as_nanos() },
        pid: num32("pid")?,
        n: num("n")?.unwrap_or(20).clamp(1, 1000) as usize,
        buckets: num("buckets")?.unwrap_or(200).clamp(1, 2000) as usize,
    })
}

/// Counts the request's events by `shape` where they are kept (on a
/// blocking thread), gathers what names them, and hands both to `f`.
async fn count<T: Send + 'static>(
    st: &ApiState,
    req: Request,
    shape: Shape,
    f: impl FnOnce(&Request, EventCounts, &Procs) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let (events, root, counted) = (Arc::clone(&st.events), st.store.root().to_path_buf(), Arc::clone(&st.counted));
    let symbols = st.symbols.clone();
    st.guard
        .run(move || {
            let now = clock::realtime_ns();
            let mut counts =
                counted.count(&*events, &req.query, req.pid, shape, SCAN_MAX, now).map_err(|e| match e {
                    EventsError::TooLarge(..) => ApiError::TooLarge(e.to_string()),
                    EventsError::Unavailable(m) => ApiError::Unavailable(format!("reading the events: {m}")),
                })?;
            // The processes as the batches saw them (in time order: the latest
            // description of a process wins), and the store's build-id cache.
            let mut procs = Procs::new(Some(root.join(perf::procs::CACHE_DIR)));
            // Streams sampled on another boot (or machine) say so in their
            // `boot` label; streams without one (imports) are taken as this one's.
            let here = perf::boot_id();
            // The newest foreign boot's kernel table names kernel frames
            // (a range spanning a reboot of the host names the older
            // boot's kernel frames from the newer table: rarely right).
            let foreign =
                counts.boots.iter().filter(|(_, boot)| Some(boot) != here.as_ref()).max().map(|(_, b)| b.clone());
            procs.set_foreign(foreign.is_some());
            let table = foreign.as_deref().and_then(symstore::Key::kallsyms);
            if let (Some(symbols), Some(key)) = (&symbols, &table)
                && symbols.ensure(key)
                && let Some(path) = symbols.path(key)
            {
                symbols.touch(key);
                procs.set_kallsyms(path);
            }
            procs.add(&std::mem::take(&mut counts.procs));
            if let Some(symbols) = &symbols {
                // Binaries another server received come from the shared
                // store (on a server in front of ClickHouse).
                for id in procs.build_ids() {
                    if let Some(key) = symstore::Key::binary(id) {
                        symbols.ensure(&key);
                    }
                }
                let lacking: Vec<(Vec<u8>, String)> = procs
                    .build_ids()
                    .into_iter()
                    .filter_map(|id| Some((id.to_vec(), symbols.why_lacking(&symstore::Key::binary(id)?)?)))
                    .collect();
                for (id, why) in lacking {
                    procs.set_lacking(id, why);
                }
            }
            let out = f(&req, counts, &procs);
            if let Some(symbols) = &symbols {
                for id in procs.used() {
                    if let Some(key) = symstore::Key::binary(&id) {
                        symbols.touch(&key);
                    }
                }
            }
            Ok(out)
        })
        .await?
}

pub async fn top(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let v = count(&st, request(&params, st.now())?, Shape::Ips, |req, c, procs| {
        let rows: Vec<_> = perf::symbols::top(&c.ips, req.n, procs).iter().map(crate::views::top_row).collect();
        serde_json::json!({ "samples": c.events, "corrupt_batches": c.corrupt, "rows": rows })
    })
    .await?;
    Ok(Json(v))
}

pub async fn flame(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    // The client's width in pixels: frames narrower than one are merged.
    let width = match params.get("width") {
        Some(w) => Some(
            w.parse::<u64>()
                .ok()
                .filter(|&w| w > 0)
                .ok_or_else(|| ApiError::BadRequest(format!("`width`: a positive number of pixels, not {w:?}")))?,
        ),
        None => None,
    };
    let v = count(&st, request(&params, st.now())?, Shape::Stacks, move |_, c, procs| {
        let mut root = perf::symbols::flame(&c.stacks, procs);
        let merged = width.map_or(0, |w| root.trim(root.value.div_ceil(w)));
        serde_json::json!({
            "samples": root.value, "with_call_chains": c.with_chains, "corrupt_batches": c.corrupt,
            "merged_frames": merged, "frames": root.flatten(),
        })
    })
    .await?;
    Ok(Json(v))
}

pub async fn folded(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let text =
        count(&st, request(&params, st.now())?, Shape::Stacks, |_, c, procs| perf::symbols::folded(&c.stacks, procs))
            .await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}

pub async fn pprof(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    use std::io::Write;
    let bytes = count(&st, request(&params, st.now())?, Shape::Stacks, |req, c, procs| {
        let p = perf::pprof::profile(&c.stacks, procs, req.query.from, req.query.to);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&perf::pprof::encode(&p)).and_then(|()| gz.finish())
    })
    .await?
    .map_err(|e| ApiError::Internal(format!("pprof: {e}")))?;
    let headers = [
        (axum::http::header::CONTENT_TYPE, "application/octet-stream"),
        (axum::http::header::CONTENT_DISPOSITION, "attachment; filename=\"profile.pb.gz\""),
    ];
    Ok((headers, bytes))
}

pub async fn timeline(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let req = request(&params, st.now())?;
    let shape = Shape::Timeline { buckets: req.buckets };
    let v = count(&st, req, shape, |req, c, procs| {
        let (from, to) = (req.query.from, req.query.to);
        let width = source::bucket_width(&req.query, req.buckets);
        let mut names: HashMap<u32, String> = HashMap::new();
        let cpus: Vec<serde_json::Value> = c
            .cells
            .into_iter()
            .map(|(cpu, row)| {
                let cells: Vec<serde_json::Value> = row
                    .iter()
                    .map(|m| match m.iter().max_by_key(|(p, c)| (**c, std::cmp::Reverse(**p))) {
                        Some((&pid, &c)) => {
                            let total: u32 = m.values().sum();
                            names.entry(pid).or_insert_with(|| process_name(pid, procs));
                            serde_json::json!([pid, c, total])
                        }
                        None => serde_json::Value::Null,
                    })
                    .collect();
                serde_json::json!({ "cpu": cpu, "cells": cells })
            })
            .collect();
        serde_json::json!({
            "from": from, "to": to, "bucket_ns": width, "corrupt_batches": c.corrupt,
            "cpus": cpus, "processes": names,
        })
    })
    .await?;
    Ok(Json(v))
}

fn process_name(pid: u32, procs: &Procs) -> String {
    if pid == 0 {
        return "idle".into();
    }
    procs.comm(pid).unwrap_or_else(|| format!("pid {pid}"))
}
