//! `GET /api/v1/tasks?host=H&kind=processes|cgroups[&from&to|&since][&n=15][&points=60]`:
//! the host view's tables of programs (process groups, `--processes`) and
//! cgroups over a range — per group its CPU in cores over the range, a
//! sparkline of it, the cores now, its resident memory and its process or
//! task count — ranked by CPU.
//!
//! Every column is a PromQL query, evaluated by the `/prometheus` engine
//! and named in the answer (`queries`), as the system call table's are
//! (issue 44: the page computed these from bucketed frames, and a cgroup
//! read "now 2.521 cores" on a 2-core machine). The window is the range
//! clipped to where the host's groups have data; the sparkline's rate
//! window spans at least four of the source's samples, as Grafana's
//! `$__rate_interval` does, so no point of it is made of one interval.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use model::Selector;

use crate::kernel::seconds;
use promql::value::{Labels, Value as PromValue};
use serde_json::{Value, json};

use crate::{ApiError, ApiState};

/// One table's series: grouped by `label`.
pub struct Kind {
    pub name: &'static str,
    pub label: &'static str,
    pub cpu: &'static str,
    /// The resident memory series, with its matcher.
    pub memory: &'static str,
    pub count: &'static str,
}

pub const KINDS: [Kind; 2] = [
    Kind {
        name: "processes",
        label: "groupname",
        cpu: "namedprocess_namegroup_cpu_seconds_total",
        memory: "namedprocess_namegroup_memory_bytes{memtype=\"resident\",",
        count: "namedprocess_namegroup_num_procs",
    },
    Kind {
        name: "cgroups",
        label: "id",
        cpu: "container_cpu_usage_seconds_total",
        memory: "container_memory_working_set_bytes{",
        count: "container_processes",
    },
];

/// The queries whose answers make a table.
pub struct Queries {
    /// Cores over the window, at its end.
    pub cores: String,
    /// Cores over each step (the sparkline, a range query; its last point
    /// is "now").
    pub spark: String,
    pub resident: String,
    pub count: String,
}

impl Queries {
    /// For `host` over `window`, the sparkline's rate over `rate_window`
    /// (PromQL durations).
    pub fn new(kind: &Kind, host: &str, window: &str, rate_window: &str) -> Queries {
        let (l, h) = (kind.label, model::quoted(host));
        Queries {
            cores: format!("sum by ({l}) (rate({}{{host={h}}}[{window}]))", kind.cpu),
            spark: format!("sum by ({l}) (rate({}{{host={h}}}[{rate_window}]))", kind.cpu),
            resident: format!("sum by ({l}) ({}host={h}}})", kind.memory),
            count: format!("sum by ({l}) ({}{{host={h}}})", kind.count),
        }
    }
}

/// Whole milliseconds, at least one, as a PromQL duration.
fn duration(ns: i64) -> String {
    format!("{}ms", (ns.max(1) as u64).div_ceil(1_000_000))
}

pub async fn tasks(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let get = |k: &str| params.get(k).map(String::as_str);
    let host = get("host").ok_or_else(|| ApiError::BadRequest("missing parameter `host`".into()))?.to_owned();
    let kind = match get("kind") {
        None => &KINDS[0],
        Some(k) => KINDS
            .iter()
            .find(|x| x.name == k)
            .ok_or_else(|| ApiError::BadRequest(format!("`kind`: one of processes, cgroups, not {k:?}")))?,
    };
    let (from, to) = model::resolve_range(get("from"), get("to"), get("since"), st.now())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if from > to {
        return Err(ApiError::BadRequest(format!("`from` ({from}) is after `to` ({to})")));
    }
    let num = |k: &str, default: usize, max: usize| -> Result<usize, ApiError> {
        match get(k) {
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| ApiError::BadRequest(format!("`{k}`: a number from 1 to {max}, not {v:?}"))),
        }
    };
    let (n, points) = (num("n", 15, 1000)?, num("points", 60, 1000)?);
    let store = std::sync::Arc::clone(&st.reader);
    let (from, to) = (from.as_nanos(), to.as_nanos());
    st.guard.run(move || answer(&*store, kind, &host, from, to, n, points)).await?
}

/// One group's columns.
#[derive(Default)]
struct Row {
    cores: Option<f64>,
    spark: Vec<Option<f64>>,
    resident: Option<f64>,
    count: Option<f64>,
}

/// The table's JSON (blocking: reads the store).
fn answer(
    store: &dyn source::Source,
    kind: &'static Kind,
    host: &str,
    from: i64,
    to: i64,
    n: usize,
    points: usize,
) -> Result<Json<Value>, ApiError> {
    let sel = Selector::parse(&format!("{}{{host={}}}", kind.cpu, model::quoted(host)))
        .map_err(|e| ApiError::BadRequest(format!("host: {e}")))?;
    let empty = || json!({"kind": kind.name, "label": kind.label, "from": seconds(from), "to": seconds(to), "groups": 0, "rows": []});
    let Some(start) = crate::span::start(store, &sel, from, to) else { return Ok(Json(empty())) };
    let begin = from.max(start.first);
    // Whole milliseconds, as the queries name it.
    let step = (((to - begin) / points as i64).max(1) as u64).div_ceil(1_000_000) as i64 * 1_000_000;
    // Four of the source's samples at least (one sample alone has no rate).
    let rate_ns = step.max(4 * start.spacing.unwrap_or(step));
    let (window, rate_window) = (duration(to - begin), duration(rate_ns));
    let q = Queries::new(kind, host, &window, &rate_window);
    let mut engine = promql::Engine::new(store);
    engine.limits.timeout = crate::guard::HEAVY_TIMEOUT;
    let fail = |query: &str, e: promql::Error| ApiError::BadRequest(format!("{query}: {e}"));
    let series = |v: PromValue| match v {
        PromValue::Vector(v) => v,
        _ => Vec::new(),
    };
    let name = |l: &Labels| promql::value::get(l, kind.label).to_owned();
    let mut rows: HashMap<String, Row> = HashMap::new();
    for (query, set) in [
        (&q.cores, (|r: &mut Row, v| r.cores = v) as fn(&mut Row, Option<f64>)),
        (&q.resident, |r, v| r.resident = v),
        (&q.count, |r, v| r.count = v),
    ] {
        for s in series(engine.instant(query, to).map_err(|e| fail(query, e))?.value) {
            set(rows.entry(name(&s.labels)).or_default(), s.points.first().copied().flatten());
        }
    }
    // The sparkline: `points` steps ending at `to`.
    let first_step = to - (points as i64 - 1) * step;
    for s in series(engine.range(&q.spark, first_step, to, step).map_err(|e| fail(&q.spark, e))?.value) {
        rows.entry(name(&s.labels)).or_default().spark = s.points;
    }
    let mut rows: Vec<(String, Row)> = rows.into_iter().filter(|(_, r)| r.cores.is_some()).collect();
    rows.sort_by(|a, b| {
        let c = |r: &Row| r.cores.unwrap_or(f64::NEG_INFINITY);
        c(&b.1).total_cmp(&c(&a.1)).then_with(|| a.0.cmp(&b.0))
    });
    let groups = rows.len();
    let shown: Vec<Value> = rows
        .into_iter()
        .take(n)
        .enumerate()
        .map(|(i, (name, r))| {
            let mut spark = r.spark;
            spark.resize(points, None);
            json!({
                "rank": i + 1,
                "name": name,
                "cores": r.cores,
                "now": spark.last().copied().flatten(),
                "spark": spark,
                "resident_bytes": r.resident,
                "count": r.count,
            })
        })
        .collect();
    Ok(Json(json!({
        "kind": kind.name,
        "label": kind.label,
        "from": seconds(from),
        "to": seconds(to),
        "window": window,
        "step_seconds": step as f64 / 1e9,
        "rate_window": rate_window,
        // Each column's query, evaluated at `to`; the sparkline's as a
        // range query of `points` steps of `step_seconds` ending at `to`
        // ("now" is its last point).
        "queries": {
            "cores": q.cores,
            "spark": q.spark,
            "now": q.spark,
            "resident_bytes": q.resident,
            "count": q.count,
        },
        "groups": groups,
        "rows": shown,
    })))
}
