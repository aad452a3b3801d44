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
    assert_eq!(status["store"]["out_of_order_dropped"], 0, "{status}");
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
    let (status, text) =
        common::http_post(&kansoku.addr, "/prometheus/api/v1/write", "Content-Encoding: snappy\r\n", &body);
    assert_eq!(status, 204, "{text}");
    let (_prom, prom) = prometheus(
        dir.path(),
        &format!("remote_read:\n  - url: http://{}/prometheus/api/v1/read\n    read_recent: true\n", kansoku.addr),
    );
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
    let (status, text) =
        common::http_post(&kansoku.addr, "/prometheus/api/v1/write", "Content-Encoding: snappy\r\n", &body);
    assert_eq!(status, 204, "{text}");
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
