//! The API through its router (`oneshot`, no sockets): a store filled with
//! known samples, then every endpoint and its errors.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};
use tower::ServiceExt;

const T0: i64 = 1_800_000_000_000_000_000;
const STEP: i64 = 100_000_000;

fn fixture() -> (tempfile::TempDir, api::ApiState) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        fsync: FsyncPolicy::Never,
        block_duration: Duration::from_secs(3600),
        head_samples_max: 1 << 20,
        ..Options::default()
    };
    let store = Store::open(dir.path(), opts).unwrap();
    let mut app = Appender::default();
    for i in 0..50i64 {
        let mut b = Batch::new(Timestamp(T0 + i * STEP));
        if i == 0 {
            for cpu in 0..2 {
                b.defs.push((
                    cpu,
                    SeriesKey::new(
                        "node_cpu_seconds_total",
                        [("cpu", cpu.to_string()), ("mode", "user".into()), ("host", "h".into())],
                    ),
                ));
            }
            b.defs.push((2, SeriesKey::new("node_load1", [("host", "h")])));
        }
        // cpu0 busy 50 %: +0.05 s per 100 ms; cpu1 idle. A gap in load1 at i = 20..30.
        b.points.push((0, (1000 + i * 5) as f64 / 100.0));
        b.points.push((1, 7.0));
        if !(20..30).contains(&i) {
            b.points.push((2, i as f64));
        }
        store.append(&mut app, &b).unwrap();
        if i == 25 {
            store.flush().unwrap(); // half in a block, half in the head
        }
    }
    // The InfluxDB databases the tests write to, as CREATE DATABASE keeps
    // them (writing to one that does not exist is a 404, as in influxd).
    std::fs::create_dir_all(dir.path().join("influx")).unwrap();
    std::fs::write(dir.path().join("influx/databases"), "a\nd\nx\n").unwrap();
    (dir, api::ApiState::new(Arc::new(store)))
}

async fn get(state: &api::ApiState, uri: &str) -> (StatusCode, serde_json::Value) {
    let resp = api::router(state.clone()).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

fn range(from_i: i64, to_i: i64) -> String {
    format!("from={}&to={}", (T0 + from_i * STEP) as f64 / 1e9, (T0 + to_i * STEP) as f64 / 1e9)
}

#[tokio::test]
async fn series_lists_with_matchers() {
    let (_d, st) = fixture();
    let (s, body) = get(&st, "/api/v1/series?match=node_cpu_seconds_total%7Bcpu%3D%221%22%7D").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body["series"],
        serde_json::json!([{"name": "node_cpu_seconds_total", "labels": {"cpu": "1", "host": "h", "mode": "user"}}])
    );
    let (_, body) = get(&st, "/api/v1/series").await;
    assert_eq!(body["series"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn raw_range_across_block_and_head_with_gaps() {
    let (_d, st) = fixture();
    let (s, body) = get(&st, &format!("/api/v1/query?query=%7Bhost%3D%22h%22%7D&{}&time_unit=ns", range(18, 32))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let times = body["times"].as_array().unwrap();
    assert_eq!(times.len(), 15);
    assert_eq!(times[0].as_i64(), Some(T0 + 18 * STEP));
    let load = body["series"].as_array().unwrap().iter().find(|s| s["name"] == "node_load1").unwrap();
    let vals = load["values"].as_array().unwrap();
    assert_eq!(vals[0], 18.0);
    assert!(vals[2..12].iter().all(|v| v.is_null()), "gap kept as nulls: {vals:?}");
    assert_eq!(vals[12], 30.0);
}

#[tokio::test]
async fn rate_and_downsampling() {
    let (_d, st) = fixture();
    let uri = format!("/api/v1/query?query=node_cpu_seconds_total&{}&rate=true&step=1s&agg=min,max,avg", range(10, 39));
    let (s, body) = get(&st, &uri).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["step_seconds"], 1.0);
    let series = body["series"].as_array().unwrap();
    assert_eq!(series.len(), 6, "2 series x 3 aggs");
    for s in series {
        let want = if s["labels"]["cpu"] == "0" { 0.5 } else { 0.0 };
        for v in s["values"].as_array().unwrap() {
            let v = v.as_f64().unwrap();
            assert!((v - want).abs() < 1e-9, "{} {}: {v}", s["labels"]["cpu"], s["agg"]);
        }
    }
    let (_, body) = get(&st, &format!("/api/v1/query?query=node_load1&{}&points=5&agg=count", range(0, 49))).await;
    let counts: Vec<f64> =
        body["series"][0]["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap_or(0.0)).collect();
    assert_eq!(counts.iter().sum::<f64>(), 40.0, "every stored load1 sample counted once: {counts:?}");
}

#[tokio::test]
async fn grouping_by_host_combines_cores() {
    let (_d, st) = fixture();
    let base = format!("/api/v1/query?query=node_cpu_seconds_total&{}&rate=true&step=1s", range(10, 39));
    for (extra, want) in
        [("by=host", 0.5), ("by=host&group=avg", 0.25), ("by=host&group=max", 0.5), ("group=count", 2.0)]
    {
        let (s, body) = get(&st, &format!("{base}&{extra}")).await;
        assert_eq!(s, StatusCode::OK, "{extra}: {body}");
        let series = body["series"].as_array().unwrap();
        assert_eq!(series.len(), 1, "{extra}: one group");
        let labels = if extra.contains("host") { serde_json::json!({"host": "h"}) } else { serde_json::json!({}) };
        assert_eq!(series[0]["labels"], labels, "{extra}: only the by labels stay");
        for v in series[0]["values"].as_array().unwrap() {
            assert!((v.as_f64().unwrap() - want).abs() < 1e-9, "{extra}: {v}");
        }
    }
}

#[tokio::test]
async fn errors_are_json_with_a_reason() {
    let (_d, st) = fixture();
    for (uri, status, needle) in [
        ("/api/v1/query", StatusCode::BAD_REQUEST, "missing parameter `query`"),
        ("/api/v1/query?query=m%7B", StatusCode::BAD_REQUEST, "invalid selector"),
        ("/api/v1/query?query=m&since=soon", StatusCode::BAD_REQUEST, "invalid duration"),
        ("/api/v1/query?query=m&since=1m&from=-2m", StatusCode::BAD_REQUEST, "not both"),
        ("/api/v1/query?query=m&step=1s&agg=median", StatusCode::BAD_REQUEST, "unknown aggregation"),
        ("/api/v1/query?query=m&agg=max", StatusCode::BAD_REQUEST, "needs step or points"),
        ("/api/v1/query?query=m&points=0", StatusCode::BAD_REQUEST, "positive integer"),
        ("/api/v1/query?query=m&by=host", StatusCode::BAD_REQUEST, "need step or points"),
        ("/api/v1/query?query=m&step=1s&group=median", StatusCode::BAD_REQUEST, "unknown group operation"),
        ("/api/v1/query?query=m&from=-1m&to=-2m", StatusCode::BAD_REQUEST, "empty time range"),
        ("/api/v1/query?query=m&step=1ns&since=1h", StatusCode::UNPROCESSABLE_ENTITY, "cells"),
        ("/api/v1/series?match=%7Ba%3D~%22(%22%7D", StatusCode::BAD_REQUEST, "bad regex"),
        ("/api/v2/nothing", StatusCode::NOT_FOUND, "no such endpoint"),
    ] {
        let (s, body) = get(&st, uri).await;
        assert_eq!(s, status, "{uri}: {body}");
        let msg = body["error"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{uri}: {msg}");
    }
}

#[tokio::test]
async fn status_reports_store_counters() {
    let (_d, st) = fixture();
    let (s, body) = get(&st, "/api/v1/status").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["store"]["series"], 3);
    assert_eq!(body["store"]["samples_appended"], 140);
    assert_eq!(body["store"]["blocks"], 1);
    assert!(body["store"]["block_bytes_per_sample"].as_f64().unwrap() > 0.0);
}

/// `/metrics` and `/api/v1/status` are one report: every number of the
/// status is a metric named after its section and key (counters with
/// `_total`), with the same value, and nothing else is.
#[tokio::test]
async fn metrics_and_status_name_each_figure_once() {
    let (_d, st) = fixture();
    let (_, status) = get(&st, "/api/v1/status").await;
    let resp = api::router(st.clone()).oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    let text = String::from_utf8(axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap().to_vec()).unwrap();
    let mut types = std::collections::HashMap::new();
    let mut values = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').unwrap();
            types.insert(name.to_owned(), kind.to_owned());
        } else {
            let (name, v) = line.rsplit_once(' ').unwrap();
            values.insert(name.to_owned(), v.parse::<f64>().unwrap());
        }
    }
    let mut checked = 0;
    for (section, figures) in status.as_object().unwrap() {
        let Some(figures) = figures.as_object() else { continue };
        for (key, v) in figures {
            let Some(v) = v.as_f64() else { continue };
            let base = format!("kansoku_{section}_{key}");
            let (name, kind) = match (values.get(&base), values.get(&format!("{base}_total"))) {
                (Some(_), None) => (base, "gauge"),
                (None, Some(_)) => (format!("{base}_total"), "counter"),
                other => panic!("{base}: {other:?} in {text}"),
            };
            assert_eq!(types[&name], kind, "{name}");
            // Sizes on disk may move between the two requests; counts do not here.
            // serde_json's parser (without `float_roundtrip`) may land a
            // float one unit in the last place off: equal within that.
            if !key.ends_with("bytes") {
                assert!((values[&name] - v).abs() <= 1e-12 * v.abs().max(1.0), "{name}: {} against {v}", values[&name]);
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} figures");
    assert_eq!(types["kansoku_store_samples_appended_total"], "counter");
    assert_eq!(values["kansoku_store_samples_appended_total"], 140.0);
}

#[tokio::test]
async fn live_tail_pushes_new_points() {
    use tokio_stream::StreamExt;
    let (_d, st) = fixture();
    let resp = api::router(st.clone())
        .oneshot(Request::get("/api/v1/live?match=node_load1").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body().into_data_stream();
    let first = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(first.starts_with("event: series") && first.contains("node_load1"), "{first}");
    // An append published by the writer reaches the subscriber.
    let id = st.store.series(&model::Selector::parse("node_load1").unwrap())[0].0;
    st.live
        .send(Arc::new(store::Appended { time: Timestamp(T0 + 60 * STEP), points: vec![(id, 42.0)], late: 0 }))
        .unwrap();
    let next = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(next.starts_with("event: points") && next.contains("\"values\":[42.0]"), "{next}");
}

#[tokio::test]
async fn live_streams_end_on_shutdown() {
    use tokio_stream::StreamExt;
    let (_d, st) = fixture();
    let resp = api::router(st.clone())
        .oneshot(Request::get("/api/v1/live?match=node_load1").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let mut body = resp.into_body().into_data_stream();
    let first = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(first.starts_with("event: series"), "{first}");
    st.close_streams();
    // The stream finishes (a graceful stop would otherwise wait for it forever).
    while let Some(chunk) = body.next().await {
        let chunk = String::from_utf8(chunk.unwrap().to_vec()).unwrap();
        assert!(!chunk.contains("event: points"), "no points after close: {chunk}");
    }
}

#[tokio::test]
async fn dashboard_is_served() {
    let (_d, st) = fixture();
    for (uri, kind, needle) in [
        ("/", "text/html", "/assets/app.js"),
        ("/assets/app.js", "text/javascript", "__kansoku"),
        ("/assets/app.css", "text/css", ".uplot"),
    ] {
        let resp = api::router(st.clone()).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{uri}");
        let ct = resp.headers()[axum::http::header::CONTENT_TYPE].to_str().unwrap().to_owned();
        assert!(ct.starts_with(kind), "{uri}: {ct}");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains(needle), "{uri}");
    }
    let (s, _) = get(&st, "/assets/nothing.js").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// A writing token (or the host it is bound to) may create only so many
/// series through /write, over all its requests.
#[tokio::test]
async fn a_writer_may_create_only_so_many_series() {
    let (_dir, mut state) = fixture();
    state.tokens =
        Some(Arc::new(access::TokenFile::fixed(access::Tokens::parse("bound-token-0123456789 node-3\n").unwrap())));
    state.influx = Arc::new(api::influx::Influx::with_writer_limit(30));
    let write = |first: usize| {
        let body: String = (first..first + 20).map(|i| format!("w,id={i} v=1 1800000000000000000\n")).collect();
        Request::post("/write?db=d")
            .header("Authorization", "Token bound-token-0123456789")
            .body(Body::from(body))
            .unwrap()
    };
    let resp = api::router(state.clone()).oneshot(write(0)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    // The same 20 again create nothing new.
    let resp = api::router(state.clone()).oneshot(write(0)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let resp = api::router(state.clone()).oneshot(write(20)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("host node-3 has created 20 series") && text.contains("limit of 30"), "{text}");
}

/// A request through the router: its status and body as text.
async fn send_text(st: &api::ApiState, req: Request<Body>) -> (StatusCode, String) {
    let resp = api::router(st.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let text = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8_lossy(&text).into_owned())
}

async fn request(st: &api::ApiState, method: &str, uri: &str, form: &str) -> (StatusCode, serde_json::Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if !form.is_empty() {
        req = req.header("content-type", "application/x-www-form-urlencoded");
    }
    let resp = api::router(st.clone()).oneshot(req.body(Body::from(form.to_owned())).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

/// The requests Grafana's Prometheus data source sends (its health check,
/// the query editor's metric and label browser, a dashboard panel, Explore's
/// table), as it sends them: GET or POST with a form body.
#[tokio::test]
async fn grafana_s_prometheus_requests_are_answered() {
    let (_d, st) = fixture();
    let secs = |i: i64| format!("{}.{:03}", (T0 + i * STEP) / 1_000_000_000, (T0 + i * STEP) / 1_000_000 % 1000);
    let (s, b) = request(&st, "GET", "/prometheus/api/v1/status/buildinfo", "").await;
    assert_eq!(
        (s, b["status"].as_str(), b["data"]["version"].as_str()),
        (StatusCode::OK, Some("success"), Some("2.42.0"))
    );
    // The health check: an instant query of `1+1`.
    let (s, b) = request(&st, "POST", "/prometheus/api/v1/query", &format!("query=1%2B1&time={}", secs(10))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["data"]["resultType"], "scalar");
    assert_eq!(b["data"]["result"][1], "2");
    // The metric browser.
    let (_, b) = request(&st, "GET", "/prometheus/api/v1/label/__name__/values", "").await;
    assert_eq!(b["data"], serde_json::json!(["node_cpu_seconds_total", "node_load1"]));
    let (_, b) =
        request(&st, "GET", &format!("/prometheus/api/v1/labels?start={}&end={}", secs(0), secs(49)), "").await;
    assert_eq!(b["data"], serde_json::json!(["__name__", "cpu", "host", "mode"]));
    let (_, b) =
        request(&st, "GET", "/prometheus/api/v1/label/cpu/values?match%5B%5D=node_cpu_seconds_total", "").await;
    assert_eq!(b["data"], serde_json::json!(["0", "1"]));
    let (_, b) =
        request(&st, "POST", "/prometheus/api/v1/series", "match%5B%5D=%7Bcpu%3D%221%22%7D&match%5B%5D=node_load1")
            .await;
    assert_eq!(b["data"].as_array().unwrap().len(), 2, "{b}");
    assert_eq!(b["data"][0]["__name__"], "node_cpu_seconds_total");
    let (s, b) = request(&st, "GET", "/prometheus/api/v1/metadata", "").await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("success")));
    // A panel: a range query, rate per CPU, summed by mode, every second.
    let form = format!(
        "query=sum+by+(mode)+(rate(node_cpu_seconds_total%5B1s%5D))&start={}&end={}&step=1",
        secs(20),
        secs(40)
    );
    let (s, b) = request(&st, "POST", "/prometheus/api/v1/query_range", &form).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["data"]["resultType"], "matrix");
    let series = &b["data"]["result"][0];
    assert_eq!(series["metric"], serde_json::json!({ "mode": "user" }));
    let values = series["values"].as_array().unwrap();
    assert_eq!(values.len(), 3, "{b}");
    // cpu0 grows 0.05 per 100 ms (0.5/s), cpu1 not at all: 0.5 in all.
    for v in values {
        let x: f64 = v[1].as_str().unwrap().parse().unwrap();
        assert!((x - 0.5).abs() < 1e-9, "{b}");
    }
    // Explore's table: an instant vector, time as a float.
    let (_, b) = request(&st, "GET", &format!("/prometheus/api/v1/query?query=node_load1&time={}", secs(10)), "").await;
    assert_eq!(b["data"]["result"][0]["value"][1], "10", "{b}");
    assert_eq!(b["data"]["result"][0]["metric"]["__name__"], "node_load1");
    // Prometheus's errors: their type and status.
    let (s, b) = request(&st, "GET", "/prometheus/api/v1/query?query=sum(", "").await;
    assert_eq!(
        (s, b["status"].as_str(), b["errorType"].as_str()),
        (StatusCode::BAD_REQUEST, Some("error"), Some("bad_data"))
    );
    let (s, b) = request(&st, "GET", "/prometheus/api/v1/query_range?query=1&start=10&end=20&step=0", "").await;
    assert_eq!((s, b["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_data")), "{b}");
    let (s, b) = request(&st, "GET", "/prometheus/api/v1/query_range?query=1&start=0&end=1000000&step=1", "").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(b["error"].as_str().unwrap().contains("11000 points"), "{b}");
    let many =
        format!("/prometheus/api/v1/query?query=node_load1%20%2B%20on()%20node_cpu_seconds_total&time={}", secs(10));
    let (s, b) = request(&st, "GET", &many, "").await;
    assert_eq!((s, b["errorType"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("execution")), "{b}");
    let (s, b) = request(&st, "GET", "/prometheus/api/v1/series", "").await;
    assert_eq!((s, b["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_data")));
}

/// Prometheus remote write: a body is stored and read back by PromQL; one
/// that does not decode, or claims a huge size, is refused (400, so
/// Prometheus does not retry it) and counted.
#[tokio::test]
async fn remote_write_stores_what_decodes_and_refuses_the_rest() {
    let (_d, st) = fixture();
    let t_ms = T0 / 1_000_000 + 60_000;
    let body = promql::remote_write::encode(&[(
        vec![("__name__", "rw_metric"), ("job", "prom")],
        vec![(t_ms, 1.5), (t_ms + 1000, 2.5)],
    )]);
    let post = |body: Vec<u8>| {
        let st = st.clone();
        async move {
            let req = Request::post("/prometheus/api/v1/write")
                .header("content-encoding", "snappy")
                .header("content-type", "application/x-protobuf")
                .body(Body::from(body))
                .unwrap();
            send_text(&st, req).await
        }
    };
    assert_eq!(post(body).await.0, StatusCode::NO_CONTENT);
    let uri = format!("/prometheus/api/v1/query?query=rw_metric%5B5s%5D&time={}", (t_ms + 1000) / 1000);
    let (_, b) = request(&st, "GET", &uri, "").await;
    assert_eq!(b["data"]["resultType"], "matrix", "{b}");
    assert_eq!(
        b["data"]["result"][0]["values"],
        serde_json::json!([[1_800_000_060i64, "1.5"], [1_800_000_061i64, "2.5"]])
    );
    let (s, why) = post(b"not snappy".to_vec()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{why}");
    assert!(why.contains("remote write"), "{why}");
    let mut bomb = vec![0x80, 0x80, 0x80, 0x80, 0x04]; // varint 1 GiB
    bomb.extend_from_slice(&[0; 8]);
    let (s, why) = post(bomb).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(why.contains("decompresses to 1073741824 bytes"), "{why}");
    let (_, status) = get(&st, "/api/v1/status").await;
    assert_eq!(status["prometheus"]["remote_write_samples"], 2);
    assert_eq!(status["prometheus"]["remote_write_refused"], 2);
}

/// The kernel's system call table over a range is PromQL over the stored
/// histograms (issue 44): every column equals the query the docs define it
/// by, asked of `/prometheus` over the same data — through a counter
/// restart, a bucket first written inside the range (which the old
/// hand-made increases read from 0, putting the median at the top), and a
/// call whose every duration is past the last bound. A rate divides by the
/// time with data, not the whole range.
#[tokio::test]
async fn kernel_syscall_table_is_the_promql_of_its_columns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    let key = |name: &str, call: &str, le: Option<&str>| {
        let mut l = vec![("host", "h".to_owned()), ("syscall", call.to_owned())];
        if let Some(le) = le {
            l.push(("le", le.to_owned()));
        }
        SeriesKey::new(name, l)
    };
    let series = [
        key("kernel_syscall_seconds_count", "read", None),
        key("kernel_syscall_seconds_sum", "read", None),
        key("kernel_syscall_seconds_bucket", "read", Some("0.000001")),
        key("kernel_syscall_seconds_bucket", "read", Some("0.000002")),
        key("kernel_syscall_seconds_bucket", "read", Some("+Inf")),
        key("kernel_syscall_seconds_count", "futex", None),
        key("kernel_syscall_seconds_sum", "futex", None),
        key("kernel_syscall_seconds_bucket", "futex", Some("+Inf")),
        key("kernel_syscall_seconds_count", "pause", None),
        key("kernel_syscall_seconds_sum", "pause", None),
        key("kernel_syscall_seconds_bucket", "pause", Some("+Inf")),
    ];
    let born = key("kernel_syscall_seconds_bucket", "read", Some("0.5"));
    const S: i64 = 1_000_000_000;
    // Every second for 10 s: read +100 calls (90 under 1 µs, 10 under 2 µs,
    // 0.0001 s); futex +1 call of 1 s, restarting (from 0) at 6 s; pause +1
    // call of 10 s. From 5 s a bucket of read's up to 0.5 s is written (as
    // the tracer writes a bucket once it is used): cumulative, so it holds
    // every call so far.
    for i in 0..10i64 {
        let mut b = Batch::new(Timestamp(T0 + i * S));
        if i == 0 {
            b.defs = series.iter().cloned().enumerate().map(|(k, s)| (k as u32, s)).collect();
        }
        if i == 5 {
            b.defs.push((11, born.clone()));
        }
        let r = (i + 1) as f64;
        let f = if i < 6 { (i + 1) as f64 } else { (i - 5) as f64 };
        b.points = vec![(0, 100.0 * r), (1, 1e-4 * r), (2, 90.0 * r), (3, 100.0 * r), (4, 100.0 * r)];
        b.points.extend([(5, f), (6, f), (7, f), (8, r), (9, 10.0 * r), (10, r)]);
        if i >= 5 {
            b.points.push((11, 100.0 * r));
        }
        store.append(&mut app, &b).unwrap();
    }
    let st = api::ApiState::new(Arc::new(store));
    let secs = |i: i64| (T0 + i * S) as f64 / 1e9;
    let (s, b) = get(&st, &format!("/api/v1/kernel/syscalls?host=h&from={}&to={}", secs(2), secs(9))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["window"], "7000ms", "{b}");
    let rows = b["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["syscall"].as_str().unwrap()).collect();
    assert_eq!(names, ["pause", "futex", "read"], "by time: {b}");
    // 7 s of range: futex 7 calls (the restart counted), read 700.
    assert_eq!(rows[1]["calls"].as_f64(), Some(7.0), "{b}");
    let read = &rows[2];
    assert_eq!(read["calls"].as_f64(), Some(700.0), "{read}");
    let close = |v: f64, want: f64| (v - want).abs() <= 1e-12 * want.abs().max(1e-9);
    // The median is under 1 µs (90 % of the calls are), not near 0.5 s.
    assert!(close(read["p50_seconds"].as_f64().unwrap(), 350.0 / 630.0 * 1e-6), "{read}");
    assert!(close(read["calls_per_second"].as_f64().unwrap(), 100.0), "{read}");
    // Every call of pause is past the last bound: at least that, not 0.
    let pause = &rows[0];
    let at_least: Vec<&str> = pause["at_least"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(at_least, ["p50_seconds", "p99_seconds", "max_seconds", "min_seconds"], "{pause}");
    assert!(pause["p50_seconds"].as_f64().unwrap() > 3.0, "{pause}");
    assert!(close(pause["mean_seconds"].as_f64().unwrap(), 10.0), "{pause}");

    // Each column against its query, asked of the Prometheus API.
    let w = b["window"].as_str().unwrap();
    let sel = |suffix: &str| format!("kernel_syscall_seconds_{suffix}{{host=\"h\"}}[{w}]");
    let buckets = format!("sum by (syscall, le) (increase({}))", sel("bucket"));
    let columns = [
        ("calls", format!("sum by (syscall) (increase({}))", sel("count"))),
        ("time_seconds", format!("sum by (syscall) (increase({}))", sel("sum"))),
        ("calls_per_second", format!("sum by (syscall) (rate({}))", sel("count"))),
        ("p50_seconds", format!("histogram_quantile(0.5, {buckets})")),
        ("p99_seconds", format!("histogram_quantile(0.99, {buckets})")),
        ("max_seconds", format!("histogram_quantile(1, {buckets})")),
    ];
    for (column, query) in columns {
        let uri = format!("/prometheus/api/v1/query?query={}&time={}", client::escape(&query), secs(9));
        let (s, answer) = get(&st, &uri).await;
        assert_eq!(s, StatusCode::OK, "{query}: {answer}");
        for row in rows {
            let call = row["syscall"].as_str().unwrap();
            let found = answer["data"]["result"].as_array().unwrap().iter().find(|r| r["metric"]["syscall"] == call);
            let want: f64 = found.map_or(f64::NAN, |r| r["value"][1].as_str().unwrap().parse().unwrap());
            let open = row["at_least"].as_array().unwrap().iter().any(|c| c == column);
            match row[column].as_f64() {
                // A lower bound where PromQL has none (NaN: no finite bucket).
                Some(_) if open && want.is_nan() => {}
                Some(got) => assert!(close(got, want), "{call} {column}: table {got}, {query} = {want}"),
                None => assert!(want.is_nan(), "{call} {column}: table null, {query} = {want}"),
            }
        }
    }
    // A range reaching before the data: the rate is over the time with data.
    let (_, b) = get(&st, &format!("/api/v1/kernel/syscalls?host=h&from={}&to={}", secs(-60), secs(9))).await;
    assert_eq!(b["window"], "9000ms", "{b}");
    let read = b["rows"].as_array().unwrap().iter().find(|r| r["syscall"] == "read").unwrap();
    assert!(close(read["calls_per_second"].as_f64().unwrap(), 100.0), "{read}");
    let (s, b) = get(&st, "/api/v1/kernel/syscalls").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let (s, b) = get(&st, &format!("/api/v1/kernel/syscalls?host=nobody&from={}&to={}", secs(2), secs(9))).await;
    assert_eq!((s, b["rows"].as_array().map(Vec::len)), (StatusCode::OK, Some(0)), "{b}");
}

/// The processes and cgroups tables are the PromQL of their columns:
/// cores over the range (clipped to the data), the sparkline and "now"
/// (rate over four samples at least), resident memory and counts — each
/// compared with `/prometheus` over the same stored series, through a
/// counter restart and a group that appears late.
#[tokio::test]
async fn tasks_tables_are_the_promql_of_their_columns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    let group = |metric: &str, name: &str, extra: Option<(&str, &str)>| {
        let mut l = vec![("host", "h".to_owned()), ("groupname", name.to_owned())];
        l.extend(extra.map(|(k, v)| (k, v.to_owned())));
        SeriesKey::new(metric, l)
    };
    let cpu = "namedprocess_namegroup_cpu_seconds_total";
    let series = [
        group(cpu, "busy", Some(("mode", "user"))),
        group(cpu, "busy", Some(("mode", "system"))),
        group("namedprocess_namegroup_memory_bytes", "busy", Some(("memtype", "resident"))),
        group("namedprocess_namegroup_num_procs", "busy", None),
        group(cpu, "idle \"q\"", Some(("mode", "user"))),
        SeriesKey::new("container_cpu_usage_seconds_total", [("host", "h"), ("id", "/system.slice")]),
        SeriesKey::new("container_memory_working_set_bytes", [("host", "h"), ("id", "/system.slice")]),
        SeriesKey::new("container_processes", [("host", "h"), ("id", "/system.slice")]),
    ];
    let late = group(cpu, "late", Some(("mode", "user")));
    const S: i64 = 1_000_000_000;
    // Every second for 120 s: busy 0.5 + 0.25 cores (its user counter
    // restarting at 60 s), 3 processes, 1 GiB; "idle" 0.01 cores; the
    // cgroup 1.5 cores; "late" 1 core from 90 s.
    for i in 0..120i64 {
        let mut b = Batch::new(Timestamp(T0 + i * S));
        if i == 0 {
            b.defs = series.iter().cloned().enumerate().map(|(k, s)| (k as u32, s)).collect();
        }
        if i == 90 {
            b.defs.push((8, late.clone()));
        }
        let t = i as f64;
        let user = if i < 60 { 0.5 * t } else { 0.5 * (t - 60.0) };
        b.points = vec![(0, user), (1, 0.25 * t), (2, 1073741824.0), (3, 3.0), (4, 0.01 * t)];
        b.points.extend([(5, 1.5 * t), (6, 5e8), (7, 12.0)]);
        if i >= 90 {
            b.points.push((8, t - 90.0));
        }
        store.append(&mut app, &b).unwrap();
    }
    let st = api::ApiState::new(Arc::new(store));
    let secs = |i: i64| (T0 + i * S) as f64 / 1e9;
    let close = |v: f64, want: f64| (v - want).abs() <= 1e-9 * want.abs().max(1e-9);
    let (s, b) =
        get(&st, &format!("/api/v1/tasks?host=h&kind=processes&from={}&to={}&points=30", secs(-60), secs(119))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // The range reaches a minute before the data: the window is the data's.
    assert_eq!(b["window"], "119000ms", "{b}");
    // 30 steps over 119 s: 3967 ms; the rate spans four samples at least.
    assert_eq!((b["step_seconds"].as_f64(), b["rate_window"].as_str()), (Some(3.967), Some("4000ms")), "{b}");
    let rows = b["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["busy", "late", "idle \"q\""], "ranked by cores: {b}");
    let busy = &rows[0];
    assert!((busy["cores"].as_f64().unwrap() - 0.75).abs() < 0.01, "{busy}");
    assert!(close(busy["now"].as_f64().unwrap(), 0.75), "{busy}");
    assert_eq!((busy["resident_bytes"].as_f64(), busy["count"].as_f64()), (Some(1073741824.0), Some(3.0)), "{busy}");
    assert_eq!(busy["spark"].as_array().unwrap().len(), 30, "{busy}");
    assert!(close(rows[1]["now"].as_f64().unwrap(), 1.0), "{}", rows[1]);

    // Each column against its query, asked of the Prometheus API.
    let (w, r) = (b["window"].as_str().unwrap(), b["rate_window"].as_str().unwrap());
    let by = |q: String| format!("sum by (groupname) ({q})");
    let instant = [
        ("cores", by(format!("rate({cpu}{{host=\"h\"}}[{w}])"))),
        ("now", by(format!("rate({cpu}{{host=\"h\"}}[{r}])"))),
        ("resident_bytes", by("namedprocess_namegroup_memory_bytes{host=\"h\",memtype=\"resident\"}".into())),
        ("count", by("namedprocess_namegroup_num_procs{host=\"h\"}".into())),
    ];
    for (column, query) in instant {
        let uri = format!("/prometheus/api/v1/query?query={}&time={}", client::escape(&query), secs(119));
        let (s, answer) = get(&st, &uri).await;
        assert_eq!(s, StatusCode::OK, "{query}: {answer}");
        for row in rows {
            let name = row["name"].as_str().unwrap();
            let found = answer["data"]["result"].as_array().unwrap().iter().find(|r| r["metric"]["groupname"] == name);
            let want = found.map(|r| r["value"][1].as_str().unwrap().parse::<f64>().unwrap());
            match (row[column].as_f64(), want) {
                (Some(got), Some(want)) => assert!(close(got, want), "{name} {column}: table {got}, {query} = {want}"),
                (got, want) => assert_eq!(got, want, "{name} {column}: {query}"),
            }
        }
    }
    // The sparkline, point by point, against the range query.
    let step = b["step_seconds"].as_f64().unwrap();
    let spark = by(format!("rate({cpu}{{host=\"h\"}}[{r}])"));
    let uri = format!(
        "/prometheus/api/v1/query_range?query={}&start={}&end={}&step={step}",
        client::escape(&spark),
        secs(119) - 29.0 * step,
        secs(119)
    );
    let (s, answer) = get(&st, &uri).await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    for row in rows {
        let name = row["name"].as_str().unwrap();
        let found =
            answer["data"]["result"].as_array().unwrap().iter().find(|r| r["metric"]["groupname"] == name).unwrap();
        let want: HashMap<String, f64> = found["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (format!("{:.3}", p[0].as_f64().unwrap()), p[1].as_str().unwrap().parse().unwrap()))
            .collect();
        for (k, got) in row["spark"].as_array().unwrap().iter().enumerate() {
            let t = format!("{:.3}", secs(119) - (29 - k) as f64 * step);
            match (got.as_f64(), want.get(&t)) {
                (Some(got), Some(&want)) => assert!(close(got, want), "{name} spark {k}: {got} against {want}"),
                (got, want) => assert_eq!(got, want.copied(), "{name} spark {k} at {t}"),
            }
        }
    }

    // The cgroups table, by `id`.
    let (s, b) = get(&st, &format!("/api/v1/tasks?host=h&kind=cgroups&from={}&to={}", secs(60), secs(119))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let row = &b["rows"][0];
    assert_eq!((row["name"].as_str(), row["count"].as_f64()), (Some("/system.slice"), Some(12.0)), "{b}");
    assert!(close(row["cores"].as_f64().unwrap(), 1.5), "{b}");
    assert!(close(row["resident_bytes"].as_f64().unwrap(), 5e8), "{b}");
    // Errors name what is wrong; a host without groups has no rows.
    let (s, b) = get(&st, "/api/v1/tasks?host=h&kind=threads").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(b["error"].as_str().unwrap().contains("processes, cgroups"), "{b}");
    let (s, b) = get(&st, "/api/v1/tasks?host=h&points=0").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let (s, b) = get(&st, "/api/v1/tasks?host=nobody&since=5m").await;
    assert_eq!((s, b["rows"].as_array().map(Vec::len)), (StatusCode::OK, Some(0)), "{b}");
}

/// The verdict per window over stored CPU counters: busy in user space,
/// then idle; the rule table beside it; a range shorter than a window is
/// refused.
#[tokio::test]
async fn diagnosis_names_each_window() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    const S: i64 = 1_000_000_000;
    let (mut user, mut idle) = (0.0, 0.0);
    for i in 0..60i64 {
        let mut b = Batch::new(Timestamp(T0 + i * S));
        if i == 0 {
            for (k, mode) in ["user", "idle"].iter().enumerate() {
                b.defs.push((
                    k as u32,
                    SeriesKey::new("node_cpu_seconds_total", [("cpu", "0"), ("host", "h"), ("mode", mode)]),
                ));
            }
        }
        let busy = i < 30;
        user += if busy { 0.95 } else { 0.01 };
        idle += if busy { 0.05 } else { 0.99 };
        b.points = vec![(0, user), (1, idle)];
        store.append(&mut app, &b).unwrap();
    }
    let st = api::ApiState::new(Arc::new(store));
    let secs = |i: i64| (T0 + i * S) as f64 / 1e9;
    let (s, b) = get(&st, &format!("/api/v1/diagnosis?host=h&from={}&to={}&window=10s", secs(0), secs(59))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let verdicts: Vec<&str> = b["windows"].as_array().unwrap().iter().map(|w| w["verdict"].as_str().unwrap()).collect();
    // The window ending at 30 s holds 9 busy seconds and 1 idle one.
    assert_eq!(verdicts, ["cpu-busy-user", "cpu-busy-user", "cpu-busy-user", "healthy", "healthy"], "{b}");
    assert_eq!(b["rules"].as_array().unwrap().len(), 7);
    assert_eq!(b["windows"][0]["evidence"][0]["name"], "CPU busy share");
    assert!(b["windows"][0].get("features").is_none(), "features only when asked");
    let uri = format!("/api/v1/diagnosis?host=h&from={}&to={}&window=10s&features=true", secs(0), secs(59));
    let (_, b) = get(&st, &uri).await;
    let f = &b["windows"][0]["features"];
    assert!((f["user"].as_f64().unwrap() - 0.95).abs() < 1e-9, "{f}");
    assert_eq!(f["tasks_d"], serde_json::Value::Null, "no kernel tracing here");
    // What the verdict was made without is said (issue 42: a dead tracer
    // left a confident "healthy" with its kernel features null).
    let no_data: Vec<&str> =
        b["windows"][0]["no_data"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(no_data.iter().any(|s| s.starts_with("kernel tracer")), "{no_data:?}");
    assert!(!no_data.contains(&"CPU counters"), "{no_data:?}");
    let (s, _) = get(&st, &format!("/api/v1/diagnosis?host=h&from={}&to={}&window=10s", secs(0), secs(5))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

/// Every host's verdict over the last whole window, for the cluster view:
/// one busy host, one idle, both named.
#[tokio::test]
async fn diagnosis_of_every_host_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    const S: i64 = 1_000_000_000;
    let now = Timestamp::now().as_nanos();
    let mut c = [0.0f64; 4];
    for i in 0..=40i64 {
        let mut b = Batch::new(Timestamp(now - (40 - i) * S));
        if i == 0 {
            for (k, (host, mode)) in [("a", "user"), ("a", "idle"), ("b", "user"), ("b", "idle")].iter().enumerate() {
                b.defs.push((
                    k as u32,
                    SeriesKey::new("node_cpu_seconds_total", [("cpu", "0"), ("host", host), ("mode", mode)]),
                ));
            }
        }
        for (k, step) in [0.97, 0.03, 0.02, 0.98].iter().enumerate() {
            c[k] += step;
        }
        b.points = c.iter().enumerate().map(|(k, v)| (k as u32, *v)).collect();
        store.append(&mut app, &b).unwrap();
    }
    let st = api::ApiState::new(Arc::new(store));
    let (s, b) = get(&st, "/api/v1/diagnosis/hosts?window=10s").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let got: Vec<(&str, &str)> = b["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["host"].as_str().unwrap(), h["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [("a", "cpu-busy-user"), ("b", "healthy")], "{b}");
}

/// Relative ranges are relative to the state's clock: `since=` and
/// PromQL's default evaluation time read "now" from it, so a test puts now
/// where it wants it.
#[tokio::test]
async fn relative_ranges_follow_the_state_s_clock() {
    let (_d, mut st) = fixture();
    let clock = Arc::new(clock::Manual::new(T0 + 49 * STEP + 1_000_000_000));
    st.clock = clock.clone();
    // One second after the last sample: the last 2 s (both ends in) hold 11.
    let (status, v) = get(&st, "/api/v1/query?query=node_load1&since=2s").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["times"].as_array().unwrap().len(), 11, "{v}");
    let (_, v) = get(&st, "/prometheus/api/v1/query?query=node_load1").await;
    assert_eq!(v["data"]["result"][0]["value"][1], "49", "{v}");
    // Ten minutes on: nothing in the last 2 s, and the sample is stale.
    clock.advance(600_000_000_000);
    let (_, v) = get(&st, "/api/v1/query?query=node_load1&since=2s").await;
    assert_eq!(v["times"].as_array().map(Vec::len), Some(0), "{v}");
    let (_, v) = get(&st, "/prometheus/api/v1/query?query=node_load1").await;
    assert_eq!(v["data"]["result"].as_array().map(Vec::len), Some(0), "{v}");
}

/// Issue 49: a point older than its series' newest, or a rewrite of it,
/// was dropped (first silently, then as a partial write). Now every
/// acknowledged point is kept, in any order, the last write of a time
/// winning — on `/write` (issue 49's own sequence: influxd holds
/// `[[10,1],[20,9]]`) and on Prometheus remote write; a bad line is still a
/// partial write that stores the rest.
#[tokio::test]
async fn points_in_any_order_are_kept_the_last_write_winning() {
    let (_d, st) = fixture();
    let write = |body: &'static str| {
        let st = st.clone();
        async move { send_text(&st, Request::post("/write?db=d").body(Body::from(body)).unwrap()).await }
    };
    assert_eq!(write("ooo v=2 1800000020000000000").await.0, StatusCode::NO_CONTENT);
    assert_eq!(write("ooo v=1 1800000010000000000").await.0, StatusCode::NO_CONTENT);
    assert_eq!(write("ooo v=9 1800000020000000000").await.0, StatusCode::NO_CONTENT, "a rewrite");
    assert_eq!(write("ooo v=9 1800000020000000000").await.0, StatusCode::NO_CONTENT, "the same point again");
    let (_, b) = request(&st, "GET", "/query?db=d&q=SELECT%20v%20FROM%20ooo&epoch=s", "").await;
    assert_eq!(
        b["results"][0]["series"][0]["values"],
        serde_json::json!([[1_800_000_010i64, 1], [1_800_000_020i64, 9]]),
        "{b}"
    );
    // One new point, one old, one bad line: both points are stored.
    let (s, why) = write("ooo v=3 1800000030000000000\nooo v=0 1800000005000000000\nooo v=\n").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(why.contains("unable to parse") && why.contains("dropped=1"), "{why}");
    let (_, b) = request(&st, "GET", "/prometheus/api/v1/query?query=ooo_v%5B1m%5D&time=1800000030", "").await;
    assert_eq!(
        b["data"]["result"][0]["values"],
        serde_json::json!([
            [1_800_000_005i64, "0"],
            [1_800_000_010i64, "1"],
            [1_800_000_020i64, "9"],
            [1_800_000_030i64, "3"]
        ])
    );
    // A flush, then a point inside the block's range and a rewrite of one
    // in it: blocks that overlap are merged on read, and by compaction.
    st.store.flush().unwrap();
    assert_eq!(write("ooo v=7 1800000015000000000\nooo v=8 1800000010000000000").await.0, StatusCode::NO_CONTENT);
    st.store.flush().unwrap();
    let want = serde_json::json!([
        [1_800_000_005i64, 0],
        [1_800_000_010i64, 8],
        [1_800_000_015i64, 7],
        [1_800_000_020i64, 9],
        [1_800_000_030i64, 3]
    ]);
    let (_, b) = request(&st, "GET", "/query?db=d&q=SELECT%20v%20FROM%20ooo&epoch=s", "").await;
    assert_eq!(b["results"][0]["series"][0]["values"], want, "{b}");
    let (_, b) = request(&st, "GET", "/query?db=d&q=SELECT%20count(v),sum(v)%20FROM%20ooo", "").await;
    let row = &b["results"][0]["series"][0]["values"][0];
    assert_eq!((&row[1], &row[2]), (&serde_json::json!(5), &serde_json::json!(27)), "{b}");
    let (_, status) = get(&st, "/api/v1/status").await;
    assert_eq!(status["influx"]["points_late"], 5, "{status}");
    assert_eq!(status["store"]["late_samples"], 5, "{status}");

    let remote = |samples: Vec<(i64, f64)>| {
        let st = st.clone();
        async move {
            let body = promql::remote_write::encode(&[(vec![("__name__", "rw_ooo")], samples)]);
            let req = Request::post("/prometheus/api/v1/write")
                .header("content-encoding", "snappy")
                .body(Body::from(body))
                .unwrap();
            send_text(&st, req).await
        }
    };
    let t = T0 / 1_000_000;
    assert_eq!(remote(vec![(t + 2000, 1.0)]).await.0, StatusCode::NO_CONTENT);
    assert_eq!(remote(vec![(t + 2000, 1.0)]).await.0, StatusCode::NO_CONTENT, "a resent sample");
    assert_eq!(remote(vec![(t + 1000, 5.0), (t + 3000, 2.0)]).await.0, StatusCode::NO_CONTENT);
    let q = format!("/prometheus/api/v1/query?query=rw_ooo%5B10s%5D&time={}", (t + 3000) / 1000);
    let (_, b) = request(&st, "GET", &q, "").await;
    let values: Vec<String> = b["data"]["result"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(values, ["5", "1", "2"], "{b}");
}

/// Issue 49: `/write?db=nosuchdb` answered 204 and made the database; as
/// influxd, it is a 404 until `CREATE DATABASE` (which outlives a
/// restart), and a statement on it says "database not found".
#[tokio::test]
async fn a_database_must_exist_to_be_written_to() {
    let (_dir, st) = fixture();
    let write = |st: api::ApiState, db: &'static str| async move {
        let req = Request::post(format!("/write?db={db}")).body(Body::from("m v=1 1800000000000000000")).unwrap();
        send_text(&st, req).await
    };
    let (s, why) = write(st.clone(), "nosuchdb").await;
    assert_eq!((s, why.as_str()), (StatusCode::NOT_FOUND, r#"{"error":"database not found: \"nosuchdb\""}"#));
    let (_, b) = request(&st, "GET", "/query?db=nosuchdb&q=SELECT%20*%20FROM%20m", "").await;
    assert_eq!(b["results"][0]["error"], "database not found: nosuchdb", "{b}");
    let (s, b) = request(&st, "POST", "/query", "q=CREATE+DATABASE+newdb").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(write(st.clone(), "newdb").await.0, StatusCode::NO_CONTENT);
    // A new process on the same data directory knows it.
    let again = api::ApiState::new(Arc::clone(&st.store));
    drop(st);
    assert_eq!(write(again.clone(), "newdb").await.0, StatusCode::NO_CONTENT);
    let (_, b) = request(&again, "GET", "/query?q=SHOW%20DATABASES", "").await;
    assert!(b.to_string().contains("newdb"), "{b}");
    let (_, b) = request(&again, "POST", "/query", "q=CREATE+DATABASE+%22a%0Ab%22").await;
    assert!(b["results"][0]["error"].as_str().is_some_and(|e| e.contains("invalid database name")), "{b}");
}

/// Issue 49: string fields were dropped (answered 204). Now each string is
/// kept once in a dictionary (`DATA/influx/strings`, fsynced before the
/// points naming it are stored) and answered as a string — after a
/// restart, and after a byte of the dictionary is flipped (only the strings
/// of the frame it hit are lost, answered as no value, never as another).
#[tokio::test]
async fn string_fields_are_kept_and_answered() {
    let (dir, st) = fixture();
    let write = |st: api::ApiState, body: &'static str| async move {
        send_text(&st, Request::post("/write?db=d&precision=s").body(Body::from(body)).unwrap()).await
    };
    let (s, why) =
        write(st.clone(), "ev,host=a msg=\"disk full\",n=1i 1800000000\nev,host=b msg=\"ok\" 1800000001").await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{why}");
    let (s, why) =
        write(st.clone(), "ev,host=a msg=\"a \\\"b\\\", c=d\" 1800000002\nev,host=a msg=\"ok\" 1800000000").await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{why}");
    let q = |st: api::ApiState, q: &'static str| async move {
        let (_, b) = request(&st, "POST", "/query", &format!("db=d&epoch=s&q={q}")).await;
        b["results"][0].clone()
    };
    let want =
        serde_json::json!([[1_800_000_000i64, "ok"], [1_800_000_001i64, "ok"], [1_800_000_002i64, "a \"b\", c=d"]]);
    let r = q(st.clone(), "SELECT msg FROM ev").await;
    assert_eq!(r["series"][0]["values"], want, "the rewrite at :00 wins: {r}");
    let r = q(st.clone(), "SELECT count(msg) FROM ev WHERE msg = 'ok'").await;
    assert_eq!(r["series"][0]["values"][0][1], 2, "{r}");
    let r = q(st.clone(), "SHOW FIELD KEYS FROM ev").await;
    assert_eq!(r["series"][0]["values"], serde_json::json!([["msg", "string"], ["n", "integer"]]), "{r}");
    let (_, status) = get(&st, "/api/v1/status").await;
    assert_eq!((&status["influx"]["string_values"], &status["influx"]["strings"]), (&4.into(), &3.into()), "{status}");
    // A new process on the same data directory answers the same.
    st.store.flush().unwrap();
    let again = api::ApiState::new(Arc::clone(&st.store));
    drop(st);
    assert_eq!(q(again.clone(), "SELECT msg FROM ev").await["series"][0]["values"], want);
    // New strings after a restart get new ids (the old ones are not reused).
    assert_eq!(write(again.clone(), "ev,host=c msg=\"new\" 1800000003").await.0, StatusCode::NO_CONTENT);
    let r = q(again.clone(), "SELECT distinct(msg) FROM ev").await;
    // As influxd lists them: as they first come, in time order.
    assert_eq!(r["series"][0]["values"], serde_json::json!([[0, "ok"], [0, "a \"b\", c=d"], [0, "new"]]), "{r}");
    // A flipped byte in the first frame ("disk full", "ok"): those points
    // have no value; the later strings keep theirs.
    let path = dir.path().join("influx/strings");
    flip_bit(&path, 8 + 8 + 8 + 4);
    let third = api::ApiState::new(Arc::clone(&again.store));
    drop(again);
    let r = q(third.clone(), "SELECT msg FROM ev").await;
    assert_eq!(
        r["series"][0]["values"],
        serde_json::json!([[1_800_000_002i64, "a \"b\", c=d"], [1_800_000_003i64, "new"]]),
        "{r}"
    );
}

/// Flips a bit of a file, as a disk may (a test's own file, not a worker's).
#[allow(clippy::disallowed_methods, reason = "a test's setup, before any request")]
fn flip_bit(path: &std::path::Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 1;
    std::fs::write(path, &bytes).unwrap();
}
