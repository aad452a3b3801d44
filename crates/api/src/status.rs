//! `GET /api/v1/status` and `GET /metrics`: what the collector, SNMP poller,
//! store, ingest and HTTP server are doing, including every drop they
//! counted — both rendered from one report per component (its figures, each
//! named once: `model::report`), so the JSON key `dropped_batches` of
//! `collector` and the metric `kansoku_collector_dropped_batches_total` are
//! the same figure, under the name its series is stored as.

use std::sync::atomic::Ordering::Relaxed;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use model::report::{Figure, Kind, Value};
use serde_json::json;

use crate::ApiState;

/// A section of the report: its name (the JSON key and the metric prefix
/// after `kansoku_`) and its figures, or nothing when the part is not running.
type Section = (&'static str, Option<Vec<Figure>>);

fn sections(st: &ApiState) -> Vec<Section> {
    let http = vec![
        Figure::counter("connections", st.http.connections.load(Relaxed)),
        Figure::gauge("connections_open", st.http.open.load(Relaxed)),
        Figure::counter("accept_errors", st.http.accept_errors.load(Relaxed)),
        Figure::counter("auth_refused", st.auth_refused.load(Relaxed)),
        Figure::counter("heavy_requests", st.guard.stats.heavy.load(Relaxed)),
        Figure::counter("busy_refused", st.guard.stats.busy_refused.load(Relaxed)),
        Figure::counter("timed_out", st.guard.stats.timed_out.load(Relaxed)),
        Figure::counter("symbolizer_panics", perf::symbols::SYMBOLIZER_PANICS.load(Relaxed)),
        Figure::counter("body_timeouts", st.http.body_timeouts.load(Relaxed)),
        Figure::gauge("query_memory_bytes", model::budget::MemoryBudget::global().used() as u64),
        Figure::gauge("query_memory_peak_bytes", model::budget::MemoryBudget::global().peak.load(Relaxed) as u64),
        Figure::counter("query_memory_refused", model::budget::MemoryBudget::global().refused.load(Relaxed)),
    ];
    let ingest = st.cluster.as_ref().map(|c| {
        let hosts = c.hosts.snapshot();
        let count = |s: &str| hosts.iter().filter(|h| h.state == s).count() as u64;
        let mut figures = c.ingest.report().to_vec();
        figures.extend([
            Figure::gauge("hosts_live", count("live")),
            Figure::gauge("hosts_late", count("late")),
            Figure::gauge("hosts_gone", count("gone")),
            Figure::gauge("hosts_clock_off", hosts.iter().filter(|h| h.clock_off).count() as u64),
        ]);
        figures
    });
    let mut out = vec![
        ("http", Some(http)),
        ("ingest", ingest),
        ("influx", Some(st.influx.report())),
        ("prometheus", Some(st.prometheus.report().to_vec())),
        ("store", Some(st.store.report())),
    ];
    out.extend(st.reports.iter().map(|r| (r.0, Some((r.1)()))));
    // Documented as null when the part does not run here.
    for part in ["collector", "snmp"] {
        if !out.iter().any(|s| s.0 == part) {
            out.push((part, None));
        }
    }
    out
}

fn to_json(figures: &[Figure]) -> serde_json::Value {
    let m = figures
        .iter()
        .map(|f| {
            let v = match f.value {
                Value::Int(v) => json!(v),
                Value::Float(v) => json!(v.is_finite().then_some(v)),
            };
            (f.json_key(), v)
        })
        .collect::<serde_json::Map<_, _>>();
    serde_json::Value::Object(m)
}

pub async fn status(State(st): State<ApiState>) -> Json<serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (name, figures) in sections(&st) {
        out.insert(name.into(), figures.as_deref().map_or(serde_json::Value::Null, to_json));
    }
    out.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    out.insert("data_dir".into(), json!(st.store.root().display().to_string()));
    out.insert("interval_seconds".into(), json!(st.interval.map(|d| d.as_secs_f64())));
    out.insert("live_subscribers".into(), json!(st.live.receiver_count()));
    Json(serde_json::Value::Object(out))
}

/// `GET /metrics`: every figure of `/api/v1/status` in the Prometheus text
/// format, `kansoku_SECTION_KEY` (`_total` for counters, typed as such), plus
/// one `kansoku_host_up` per agent.
pub async fn metrics(State(st): State<ApiState>) -> Response {
    let mut out = String::new();
    let mut typed = std::collections::HashSet::new();
    for (section, figures) in sections(&st) {
        for f in figures.iter().flatten() {
            let v = f.as_f64();
            if !v.is_finite() {
                continue;
            }
            let name = f.metric(&format!("kansoku_{section}"));
            if typed.insert(name.clone()) {
                let kind = if f.kind == Kind::Counter { "counter" } else { "gauge" };
                out.push_str(&format!("# TYPE {name} {kind}\n"));
            }
            match f.label {
                Some((k, l)) => out.push_str(&format!("{name}{{{k}=\"{l}\"}} {v}\n")),
                None => out.push_str(&format!("{name} {v}\n")),
            }
        }
    }
    out.push_str(&format!(
        "# TYPE kansoku_live_subscribers gauge\nkansoku_live_subscribers {}\n",
        st.live.receiver_count()
    ));
    if let Some(c) = &st.cluster {
        out.push_str("# TYPE kansoku_host_up gauge\n");
        for h in c.hosts.snapshot() {
            let host = h.host.replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!(
                "kansoku_host_up{{host=\"{host}\",state=\"{}\"}} {}\n",
                h.state,
                u8::from(h.state == "live")
            ));
            if let Some(o) = h.clock_offset_ns {
                out.push_str(&format!("kansoku_host_clock_offset_seconds{{host=\"{host}\"}} {}\n", o as f64 / 1e9));
            }
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], out).into_response()
}
