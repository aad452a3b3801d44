//! HTTP API: `pub fn router(state) -> Router`, one handler per endpoint, one
//! [`ApiError`]. Responses are columnar JSON (one time array, one value array
//! per series) so the dashboard hands them to uPlot unchanged.
//! Documented in `docs/api.md`.
//!
//! Beside kansoku's own endpoints: the Prometheus API under `/prometheus`
//! (`prometheus`), and `/federate` written by `formats::openmetrics`
//! (OpenMetrics with typed histogram families, or text 0.0.4). Tokens are checked by `auth`,
//! heavy requests bounded by `guard`, and `serve` is the listener with its
//! connection cap and header timeout. What other crates report (agents,
//! ingest counters, SNMP targets) is shaped into JSON here (`views`).

pub mod auth;
mod diagnosis;
mod error;
mod fragmentation;
pub mod guard;
pub mod influx;
mod jobs;
mod kernel;
mod live;
mod metadata;
mod profile;
pub mod prometheus;
mod query;
pub mod serve;
mod span;
mod status;
mod tasks;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use store::{Appended, Store};
use tokio::sync::broadcast;

pub use error::ApiError;
pub use query::{frame_json, parse_range_query};

/// Live subscribers lag behind by at most this many intervals before they
/// are told they missed some (10 s at 100 ms).
pub const LIVE_BUFFER: usize = 100;

/// What `kansoku server` shares with the API: its agents and ingest counters.
#[derive(Clone, Debug)]
pub struct ClusterView {
    pub hosts: Arc<ingest::hosts::Hosts>,
    pub ingest: Arc<ingest::IngestStats>,
    /// Jobs handed to agents (`POST /api/v1/jobs/load`).
    pub jobs: Arc<ingest::Jobs>,
}

/// A running part's report (each producer's, the rules', the symbol
/// store's, …): its section name in `/api/v1/status` and `/metrics`, and how
/// to read its figures. The API knows the producers by their reports only.
#[derive(Clone)]
pub struct Report(pub &'static str, pub model::producer::ReportFn);

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Report({})", self.0)
    }
}

#[derive(Clone, Debug)]
pub struct ApiState {
    pub store: Arc<Store>,
    /// What queries read: the store itself, or on `kansoku server --store
    /// clickhouse://…` the ClickHouse cluster the agents' data goes to.
    pub reader: Arc<dyn source::Source>,
    /// What profiles count: the store's event log, or ClickHouse's events.
    pub events: Arc<dyn source::EventSource>,
    /// The profiles' whole minutes of the past, counted once
    /// (`source::CountCache`).
    pub counted: Arc<source::CountCache>,
    /// The flame graphs' and top tables' settled 10 s parts, named once
    /// (`profile::NamedPart`).
    pub named: Arc<source::cache::Kept<Arc<profile::NamedPart>>>,
    /// Each acknowledged append, for the live tail.
    pub live: broadcast::Sender<Arc<Appended>>,
    /// On a server in front of ClickHouse: the live tail polls `reader`
    /// this far behind now (the agents' batches land late), instead of
    /// following `live`.
    pub live_delay: Option<std::time::Duration>,
    pub interval: Option<std::time::Duration>,
    /// Asks the SNMP poller, if one runs, for its targets' state.
    pub snmp_targets: Option<model::snmp::TargetsFn>,
    /// The agents' ingest, on `kansoku server`.
    pub cluster: Option<ClusterView>,
    /// The InfluxDB 1.x compatibility endpoints.
    pub influx: Arc<influx::Influx>,
    /// The Prometheus endpoints' counters.
    pub prometheus: Arc<prometheus::PromStats>,
    /// Reports of the running parts the API does not own: producers,
    /// rules, symbol store, ClickHouse, threads.
    pub reports: Vec<Report>,
    /// The rule groups' active alerts (`--rules`).
    pub alerts: Option<Arc<model::alert::AlertBoard>>,
    /// Tokens (`kansoku server --tokens`): every endpoint but `/ping` then
    /// requires one, and writing a writing one (`auth`).
    pub tokens: Option<Arc<access::TokenFile>>,
    /// Requests refused for a missing, unknown or read-only token.
    pub auth_refused: Arc<std::sync::atomic::AtomicU64>,
    /// Bounds heavy requests (queries, series, profiles) together.
    pub guard: Arc<guard::Guard>,
    /// The HTTP listener's connection counters.
    pub http: Arc<serve::ServeStats>,
    /// Set on shutdown: live streams end so a graceful stop does not wait
    /// for open dashboards forever.
    pub closing: Arc<tokio::sync::watch::Sender<bool>>,
    /// The fragmentation maps kept (`up --fragmentation`) and the paths scanned.
    pub fragmentation: Option<(extents::Snapshots, Vec<std::path::PathBuf>)>,
    /// Agents' binaries and kernel symbol tables (`kansoku server`): what
    /// names other hosts' samples.
    pub symbols: Option<Arc<symstore::SymStore>>,
    /// What "now" is to relative ranges (`since=5m`, PromQL's default
    /// time), the verdict's windows and the live tail: the system's clock,
    /// or in tests one they drive.
    pub clock: Arc<dyn clock::Clock>,
}

/// Memory the profiles' counted minutes may hold (a busy minute of call
/// chains at 1 kHz on two CPUs is ~2 MB).
pub const COUNT_CACHE_BYTES: usize = 96 << 20;

/// Memory the flame graphs' and top tables' named parts may hold (a minute
/// of a machine building software, thousands of short processes, is ~10 MB).
pub const NAMED_CACHE_BYTES: usize = 128 << 20;

impl ApiState {
    pub fn new(store: Arc<Store>) -> ApiState {
        ApiState {
            reader: store.clone(),
            events: store.clone(),
            counted: Arc::new(source::CountCache::new(COUNT_CACHE_BYTES)),
            named: Arc::new(source::cache::Kept::new(NAMED_CACHE_BYTES)),
            store,
            live: broadcast::channel(LIVE_BUFFER).0,
            live_delay: None,
            interval: None,
            snmp_targets: None,
            cluster: None,
            influx: Arc::default(),
            prometheus: Arc::default(),
            reports: Vec::new(),
            alerts: None,
            tokens: None,
            auth_refused: Arc::default(),
            guard: Arc::default(),
            http: Arc::default(),
            closing: Arc::new(tokio::sync::watch::channel(false).0),
            fragmentation: None,
            symbols: None,
            clock: Arc::new(clock::System),
        }
    }

    /// Now, by the state's clock.
    pub fn now(&self) -> model::Timestamp {
        model::Timestamp(self.clock.now_ns())
    }

    /// Ends every live stream (and refuses new ones to linger): call when
    /// the server begins a graceful shutdown.
    pub fn close_streams(&self) {
        self.closing.send_replace(true);
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(asset))
        .route("/api/v1/series", get(query::series))
        .route("/api/v1/query", get(query::query_range))
        .route("/api/v1/live", get(live::live))
        .route("/api/v1/status", get(status::status))
        .route("/api/v1/snmp/targets", get(snmp_targets))
        .route("/api/v1/hosts", get(hosts))
        .route("/api/v1/jobs", get(jobs::offers))
        .route("/api/v1/jobs/load", axum::routing::post(jobs::load))
        .route("/api/v1/fragmentation", get(fragmentation::list))
        .route("/api/v1/fragmentation/map", get(fragmentation::map))
        .route("/api/v1/profile/top", get(profile::top))
        .route("/api/v1/kernel/syscalls", get(kernel::syscalls))
        .route("/api/v1/tasks", get(tasks::tasks))
        .route("/api/v1/diagnosis", get(diagnosis::diagnosis))
        .route("/api/v1/diagnosis/hosts", get(diagnosis::hosts))
        .route("/api/v1/profile/flame", get(profile::flame))
        .route("/api/v1/profile/folded", get(profile::folded))
        .route("/api/v1/profile/pprof", get(profile::pprof))
        .route("/api/v1/profile/timeline", get(profile::timeline))
        .route("/metrics", get(status::metrics))
        .route("/ping", get(influx::ping).head(influx::ping))
        .route("/write", axum::routing::post(influx::write).layer(axum::extract::DefaultBodyLimit::disable()))
        .route("/query", get(influx::query).post(influx::query))
        .route("/login", get(auth::login))
        .route("/prometheus/api/v1/query", get(prometheus::query).post(prometheus::query))
        .route("/prometheus/api/v1/query_range", get(prometheus::query_range).post(prometheus::query_range))
        .route("/prometheus/api/v1/series", get(prometheus::series).post(prometheus::series))
        .route("/prometheus/api/v1/labels", get(prometheus::labels).post(prometheus::labels))
        .route("/prometheus/api/v1/label/{name}/values", get(prometheus::label_values))
        .route("/prometheus/api/v1/metadata", get(prometheus::metadata))
        .route("/prometheus/api/v1/query_exemplars", get(prometheus::query_exemplars).post(prometheus::query_exemplars))
        .route("/prometheus/api/v1/format_query", get(prometheus::format_query).post(prometheus::format_query))
        .route("/prometheus/api/v1/read", axum::routing::post(prometheus::remote_read))
        .route(
            "/prometheus/api/v1/write",
            axum::routing::post(prometheus::remote_write).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/prometheus/api/v1/status/buildinfo", get(prometheus::buildinfo))
        .route("/prometheus/federate", get(prometheus::federate))
        .route("/prometheus/api/v1/alerts", get(prometheus::alerts))
        .route("/api/v1/alerts", get(prometheus::alerts))
        .route("/prometheus/api/v1/rules", get(prometheus::rules))
        .route("/api/v1/rules", get(prometheus::rules))
        .fallback(|| async { ApiError::NotFound })
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token))
        .with_state(state)
}

/// `GET /api/v1/snmp/targets`: every SNMP target as of the poller's last
/// interval (answered, round trip, each OID's value, error, update period and
/// staleness). Built by the poller when asked, at the end of its interval.
async fn snmp_targets(
    axum::extract::State(st): axum::extract::State<ApiState>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let views = st.snmp_targets.clone().ok_or_else(|| {
        ApiError::Unavailable("no SNMP poller runs here: start kansoku snmp, or kansoku up --snmp-targets".into())
    })?;
    let limit = st.interval.unwrap_or(std::time::Duration::from_secs(1)) * 2 + std::time::Duration::from_secs(1);
    let got = tokio::task::spawn_blocking(move || views.get(limit))
        .await
        .map_err(|e| ApiError::Internal(format!("SNMP view task: {e}")))?;
    let targets =
        got.ok_or_else(|| ApiError::Unavailable(format!("the SNMP poller did not answer within {limit:?}")))?;
    let targets: Vec<serde_json::Value> = targets.iter().map(views::snmp_target).collect();
    Ok(axum::Json(serde_json::json!({ "targets": targets })))
}

/// `GET /api/v1/hosts`: every agent the server knows: state (live, late,
/// gone), version, clock offset, overhead, progress.
async fn hosts(
    axum::extract::State(st): axum::extract::State<ApiState>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let cluster = st
        .cluster
        .as_ref()
        .ok_or_else(|| ApiError::Unavailable("no agents report here: this is not a kansoku server".into()))?;
    let hosts: Vec<serde_json::Value> = cluster.hosts.snapshot().iter().map(views::host).collect();
    Ok(axum::Json(serde_json::json!({ "hosts": hosts })))
}

async fn index() -> Html<&'static str> {
    Html(include_str!("../../../web/dist/index.html"))
}

/// The dashboard's bundle (web/, built by `make web`), embedded so the one
/// binary serves everything.
async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (body, kind): (&'static [u8], &str) = match name.as_str() {
        "app.js" => (include_bytes!("../../../web/dist/app.js"), "text/javascript; charset=utf-8"),
        "app.css" => (include_bytes!("../../../web/dist/app.css"), "text/css; charset=utf-8"),
        _ => return Err(ApiError::NotFound),
    };
    Ok(([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body))
}
