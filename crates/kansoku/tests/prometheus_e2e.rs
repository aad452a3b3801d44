//! A real Prometheus (Debian's 2.42) scrapes a real node_exporter every
//! second and remote-writes to `kansoku server`: nothing is lost — every
//! series with every sample (time and value) in both, read back through each
//! side's PromQL (`{job="node"}[1h]` at the same past instant).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Killed, enc, free_port, http_get, wait};

/// A real Prometheus with `config`, its data under `dir`: (the process,
/// its address), once it logs that it serves.
fn prometheus(dir: &std::path::Path, config: &str) -> (Killed, String) {
    let port = free_port();
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", file.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    (common::peer(cmd, "Server is ready to receive web requests"), format!("127.0.0.1:{port}"))
}

/// Posts a remote-write body to kansoku at `addr`: stored (204).
fn remote_write(addr: &str, body: &[u8]) {
    let (status, text) = common::http_post(addr, "/prometheus/api/v1/write", "Content-Encoding: snappy\r\n", body);
    assert_eq!(status, 204, "{text}");
}

/// A real Prometheus reading kansoku at `addr` by remote read, recent
/// samples too.
fn prometheus_reading(dir: &std::path::Path, addr: &str) -> (Killed, String) {
    prometheus(dir, &format!("remote_read:\n  - url: http://{addr}/prometheus/api/v1/read\n    read_recent: true\n"))
}

/// A PromQL instant query of a range vector as labels -> [(time, value)].
fn matrix(addr: &str, prefix: &str, q: &str, t: f64) -> BTreeMap<String, Vec<(f64, String)>> {
    let (status, body) = http_get(addr, &format!("{prefix}/api/v1/query?query={}&time={t:.3}", enc(q)));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["resultType"], "matrix", "{body}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut labels: Vec<String> =
                s["metric"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            let values = s["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_f64().unwrap(), p[1].as_str().unwrap().to_owned()))
                .collect();
            (labels.join(","), values)
        })
        .collect()
}

/// A PromQL instant query's vector as labels -> value.
fn vector(addr: &str, prefix: &str, q: &str, t: f64) -> BTreeMap<String, f64> {
    let (status, body) = http_get(addr, &format!("{prefix}/api/v1/query?query={}&time={t:.3}", enc(q)));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let m = s["metric"].as_object().unwrap();
            let mut labels: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            (labels.join(","), s["value"][1].as_str().unwrap().parse::<f64>().unwrap())
        })
        .collect()
}

#[test]
fn prometheus_remote_writes_node_exporter_to_kansoku_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let kansoku =
        common::start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &dir.path().join("data"));
    let node_port = free_port();
    let mut node_cmd = Command::new("prometheus-node-exporter");
    node_cmd.args([
        &format!("--web.listen-address=127.0.0.1:{node_port}"),
        "--collector.disable-defaults",
        "--collector.cpu",
        "--collector.meminfo",
        "--collector.loadavg",
        "--collector.stat",
    ]);
    let _node = common::peer(node_cmd, "msg=\"Listening on\"");
    let node = format!("127.0.0.1:{node_port}");
    let (_prom, prom) = prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['{node}']\n\
             remote_write:\n  - url: http://{}/prometheus/api/v1/write\n    queue_config:\n      batch_send_deadline: 1s\n",
            kansoku.addr
        ),
    );
    // Ten scrapes stored in kansoku.
    wait("ten scrapes remote-written to kansoku", Duration::from_secs(60), || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        vector(&kansoku.addr, "/prometheus", "count_over_time(up{job=\"node\"}[1h])", now).values().any(|&n| n >= 10.0)
    });
    // An instant 3 s back: both sides have all its samples once remote
    // write has caught up (batches leave Prometheus every second).
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() - 3.0;
    let q = "{job=\"node\"}[1h]";
    let want = matrix(&prom, "", q, t);
    let samples: usize = want.values().map(Vec::len).sum();
    assert!(want.len() > 50 && samples > 500, "node_exporter in Prometheus: {} series, {samples} samples", want.len());
    let mut got = BTreeMap::new();
    let caught_up = Instant::now() + Duration::from_secs(30);
    while Instant::now() < caught_up {
        got = matrix(&kansoku.addr, "/prometheus", q, t);
        if got == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let differ: Vec<&String> = want.keys().filter(|k| got.get(*k) != want.get(*k)).collect();
    assert!(
        differ.is_empty() && got.len() == want.len(),
        "{} of {} series differ ({} in kansoku), e.g. {:?}: prometheus {:?}, kansoku {:?}",
        differ.len(),
        want.len(),
        got.len(),
        differ.first(),
        differ.first().map(|k| &want[*k]),
        differ.first().and_then(|k| got.get(*k))
    );
    eprintln!("remote write: {} series, {samples} samples equal in Prometheus and kansoku", want.len());
    let (_, status) = http_get(&kansoku.addr, "/api/v1/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["prometheus"]["remote_write_samples"].as_u64().unwrap() > 500, "{status}");
    assert_eq!(status["prometheus"]["remote_write_refused"], 0, "{status}");
    assert_eq!(status["store"]["late_samples"], 0, "{status}");
}

/// A real Prometheus with kansoku as its remote-read source answers
/// kansoku's samples — series it never scraped — as its own.
#[test]
fn prometheus_reads_kansoku_by_remote_read() {
    let dir = tempfile::tempdir().unwrap();
    let kansoku =
        common::start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &dir.path().join("data"));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let samples: Vec<(i64, f64)> = (0..30).map(|i| (now_ms - 35_000 + i * 1000, (i * i) as f64 / 7.0)).collect();
    let body = promql::remote_write::encode(&[(vec![("__name__", "rr_metric"), ("src", "kansoku")], samples.clone())]);
    remote_write(&kansoku.addr, &body);
    let (_prom, prom) = prometheus_reading(dir.path(), &kansoku.addr);
    let t = now_ms as f64 / 1000.0;
    let from_prometheus = matrix(&prom, "", "rr_metric[1m]", t);
    let from_kansoku = matrix(&kansoku.addr, "/prometheus", "rr_metric[1m]", t);
    assert_eq!(from_prometheus.len(), 1, "{from_prometheus:?}");
    assert_eq!(from_prometheus, from_kansoku);
    let values = from_prometheus.values().next().unwrap();
    assert_eq!(values.len(), 30);
    assert_eq!(values[7].1, promql::value::format_float(49.0 / 7.0));
    let (_, status) = http_get(&kansoku.addr, "/api/v1/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["prometheus"]["remote_reads"].as_u64().unwrap() >= 1, "{status}");
}

/// A real Prometheus scrapes kansoku's `/prometheus/federate` (it asks for
/// OpenMetrics): a histogram kansoku holds — the form of the kernel's
/// latency histograms — arrives as a histogram family (Prometheus's own
/// metadata says so), every bucket with its value and time, and
/// `histogram_quantile` answers the same on both sides.
#[test]
fn prometheus_federates_kansoku_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let kansoku =
        common::start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &dir.path().join("data"));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut series: Vec<(Vec<(String, String)>, f64)> = Vec::new();
    for (host, scale) in [("a", 1.0), ("b", 3.0)] {
        for (le, n) in [("0.001", 2.0), ("0.01", 5.0), ("0.1", 9.0), ("+Inf", 10.0)] {
            series.push((
                vec![
                    ("__name__".into(), "lat_seconds_bucket".into()),
                    ("host".into(), host.into()),
                    ("le".into(), le.into()),
                ],
                n * scale,
            ));
        }
        series.push((vec![("__name__".into(), "lat_seconds_sum".into()), ("host".into(), host.into())], 0.3 * scale));
        series
            .push((vec![("__name__".into(), "lat_seconds_count".into()), ("host".into(), host.into())], 10.0 * scale));
    }
    let owned: Vec<promql::remote_write::SeriesSamples<'_>> = series
        .iter()
        .map(|(l, v)| (l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(), vec![(now_ms, *v)]))
        .collect();
    let body = promql::remote_write::encode(&owned);
    remote_write(&kansoku.addr, &body);
    let (_prom, prom) = prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kansoku\n    honor_labels: true\n    \
             metrics_path: /prometheus/federate\n    params:\n      'match[]': ['{{__name__=~\"lat_seconds.*\"}}']\n    \
             static_configs:\n      - targets: ['{}']\n",
            kansoku.addr
        ),
    );
    let mut meta = String::new();
    wait("Prometheus scraped the histogram family", Duration::from_secs(60), || {
        meta = http_get(&prom, "/api/v1/metadata?metric=lat_seconds").1;
        meta.contains("histogram")
    });
    assert!(meta.contains(r#""type":"histogram""#), "{meta}");
    // kansoku's own metadata of the family says what Prometheus's says.
    let ours = http_get(&kansoku.addr, "/prometheus/api/v1/metadata?metric=lat_seconds").1;
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap()["data"].take();
    assert_eq!(parse(&meta), parse(&ours), "metadata");
    let t = now_ms as f64 / 1000.0 + 1.0;
    // Prometheus adds job and instance; the rest is as kansoku has it.
    let strip = |m: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        m.into_iter()
            .map(|(k, v)| {
                (
                    k.split(',')
                        .filter(|l| !l.starts_with("job=") && !l.starts_with("instance="))
                        .collect::<Vec<_>>()
                        .join(","),
                    v,
                )
            })
            .collect()
    };
    for q in [
        "lat_seconds_bucket",
        "lat_seconds_sum",
        "lat_seconds_count",
        "histogram_quantile(0.5, sum by (le) (lat_seconds_bucket))",
    ] {
        let (theirs, ours) = (strip(vector(&prom, "", q, t)), strip(vector(&kansoku.addr, "/prometheus", q, t)));
        assert!(!ours.is_empty(), "{q}");
        assert_eq!(theirs, ours, "{q}");
    }
    assert_eq!(vector(&prom, "", "count(lat_seconds_bucket)", t).values().next(), Some(&8.0));
}

/// Prometheus's JSON, written the same (issue 43): the same samples in
/// kansoku and (by remote read) in a real Prometheus; the same requests to
/// both — values past 1e21 and below 1e-6, subnormals, −0, NaN and ±Inf in
/// vectors, matrices and scalars; query times finer than a millisecond;
/// `format_query` and `query_exemplars` — and the same `data`, byte for
/// byte in each value's text.
#[test]
fn prometheus_and_kansoku_write_the_same_json() {
    let dir = tempfile::tempdir().unwrap();
    let kansoku =
        common::start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &dir.path().join("data"));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let values = [1e300, 5e-324, -1.5e-7, 1e21, 123.5, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-6, 0.1];
    let names: Vec<String> = (0..values.len()).map(|i| i.to_string()).collect();
    let series: Vec<promql::remote_write::SeriesSamples<'_>> = values
        .iter()
        .zip(&names)
        .map(|(&v, n)| {
            (vec![("__name__", "fmt"), ("v", n.as_str())], (0..30).map(|k| (now_ms - 30_000 + k * 1000, v)).collect())
        })
        .collect();
    let body = promql::remote_write::encode(&series);
    remote_write(&kansoku.addr, &body);
    let (_prom, prom) = prometheus_reading(dir.path(), &kansoku.addr);
    // `data`, with a vector's or matrix's series in label order (their
    // order is not part of the answer).
    let data = |addr: &str, prefix: &str, path_and_query: &str| -> (u16, serde_json::Value) {
        let (status, body) = http_get(addr, &format!("{prefix}{path_and_query}"));
        let mut v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        if let Some(result) = v.get_mut("data").and_then(|d| d.get_mut("result")).and_then(|r| r.as_array_mut()) {
            result.sort_by_key(|s| s["metric"].to_string());
        }
        let d = if v["status"] == "success" { v["data"].take() } else { v["errorType"].take() };
        (status, d)
    };
    let t = now_ms / 1000 - 5;
    let queries = [
        format!("/api/v1/query?query=fmt&time={t}"),
        format!("/api/v1/query?query={}&time={t}", enc("-fmt")),
        format!("/api/v1/query?query=fmt&time={t}.9996"),
        format!("/api/v1/query?query={}&time={t}.0004", enc("timestamp(fmt)")),
        format!("/api/v1/query?query={}&time={t}.9996", enc("time()")),
        format!("/api/v1/query?query={}&time={t}.9996", enc("minute()")),
        format!("/api/v1/query?query={}&time={t}", enc("scalar(fmt{v=\"0\"})")),
        format!("/api/v1/query?query={}&time={t}", enc("scalar(fmt{v=\"1\"})")),
        format!("/api/v1/query?query={}&time={t}", enc("scalar(fmt{v=\"3\"})")),
        format!("/api/v1/query?query={}&time={t}", enc("fmt[3s]")),
        format!("/api/v1/query_range?query=fmt&start={}.0004&end={t}.9996&step=0.7", t - 10),
        format!("/api/v1/query_range?query={}&start={}&end={t}&step=1.0015", enc("fmt * 1e-300"), t - 10),
        format!("/api/v1/query_range?query={}&start={}&end={t}&step=2", enc("time() + 0.5"), t - 10),
        format!("/api/v1/query_exemplars?query=fmt&start={}&end={t}", t - 10),
        format!("/api/v1/query_exemplars?query={}&start={}&end={t}", enc("sum("), t - 10),
        format!(
            "/api/v1/format_query?query={}",
            enc("sum by(v)(rate(fmt{v=~\"1|2\"}[5m]))/ignoring(v)group_left sum(fmt)")
        ),
        format!("/api/v1/format_query?query={}", enc("  fmt  offset 5m  ")),
        format!(
            "/api/v1/format_query?query={}",
            enc(
                "histogram_quantile(0.9, sum by (le, job) (rate(http_request_duration_seconds_bucket{job=\"api\", handler=~\"/v1/.*\"}[5m]))) > 0.5"
            )
        ),
        format!("/api/v1/format_query?query={}", enc("sum(")),
    ];
    for q in &queries {
        let (theirs, ours) = (data(&prom, "", q), data(&kansoku.addr, "/prometheus", q));
        assert_eq!(theirs, ours, "{q}");
    }
    // The answers hold what the test is about.
    let (_, first) = data(&kansoku.addr, "/prometheus", &queries[0]);
    let text = first.to_string();
    for want in ["\"1e+300\"", "\"5e-324\"", "\"-1.5e-07\"", "\"1e+21\"", "\"NaN\"", "\"-Inf\"", "\"0.000001\""] {
        assert!(text.contains(want), "{want} in {text}");
    }
    let (_, scalar) = data(&kansoku.addr, "/prometheus", &queries[6]);
    assert_eq!(scalar["result"][1].as_str().map(str::len), Some(301), "a scalar is written without an exponent");
    let (_, time) = data(&kansoku.addr, "/prometheus", &queries[4]);
    assert_eq!(time["result"][0].as_f64(), Some((t + 1) as f64), "…59.9996 is the next second");
}
