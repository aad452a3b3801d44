//! The same samples in kansoku's store and in a real Prometheus (Debian's
//! 2.42: `promtool tsdb create-blocks-from openmetrics` writes them, the
//! test starts `prometheus` on them); the same expressions, as instant
//! queries and as range queries at several steps, to both; equal answers
//! (values within 1e-9 relative), or both errors. The pass rate is printed
//! and must be 100 %: every difference is a bug here or a line in
//! `docs/promql.md` saying why it is right.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

const MS: i64 = 1_000_000;

/// One series of the test data: its key and its (ms, value) samples.
type SeriesData = (SeriesKey, Vec<(i64, f64)>);
const SCRAPE_MS: i64 = 15_000;
const SPAN_MS: i64 = 2 * 3_600_000;

/// A Prometheus serving a data directory, killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_prometheus(dir: &std::path::Path) -> Prometheus {
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 15s\n").unwrap();
    let port = free_port();
    let mut child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--storage.tsdb.retention.time=100y")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus (Debian: apt-get install prometheus; scripts/deps.sh test)");
    // Ready when it says so in its log: the event, not a poll.
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in lines.map_while(Result::ok) {
            if line.contains("Server is ready to receive web requests")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    let p = Prometheus { child, url: format!("http://127.0.0.1:{port}") };
    rx.recv_timeout(Duration::from_secs(60)).expect("prometheus did not become ready in 60 s");
    p
}

/// The test data: counters with resets, gauges, a gauge with gaps longer
/// than the lookback, an info metric and a histogram, scraped every 15 s
/// with jitter, as (key, [(ms, value)]).
fn data(t0: i64) -> Vec<SeriesData> {
    let mut rng = fastrand::Rng::with_seed(42);
    let n = SPAN_MS / SCRAPE_MS;
    let times =
        |rng: &mut fastrand::Rng| -> Vec<i64> { (0..n).map(|k| t0 + k * SCRAPE_MS + rng.i64(0..2000)).collect() };
    let mut out = Vec::new();
    for inst in ["a", "b", "c"] {
        for code in ["200", "500"] {
            let ts = times(&mut rng);
            let mut v = rng.f64() * 100.0;
            let reset_at = if inst == "b" && code == "200" { n / 3 } else { -1 };
            let pts = ts
                .iter()
                .enumerate()
                .map(|(k, &t)| {
                    v += rng.f64() * if code == "200" { 50.0 } else { 3.0 };
                    if k as i64 == reset_at {
                        v = rng.f64() * 5.0;
                    }
                    (t, v)
                })
                .collect();
            out.push((
                SeriesKey::new("http_requests_total", [("instance", inst), ("code", code), ("job", "api")]),
                pts,
            ));
        }
        for zone in ["z1", "z2"] {
            let ts = times(&mut rng);
            let mut v = 15.0 + rng.f64() * 10.0;
            let pts = ts
                .iter()
                .map(|&t| {
                    v += rng.f64() - 0.5;
                    (t, v)
                })
                .collect();
            out.push((SeriesKey::new("node_temp", [("instance", inst), ("zone", zone)]), pts));
        }
        out.push((
            SeriesKey::new("node_info", [("instance", inst), ("version", &format!("1.{}", inst.len() + 2))]),
            times(&mut rng).into_iter().map(|t| (t, 1.0)).collect(),
        ));
        let ts = times(&mut rng);
        let mut counts = [0.0f64; 4];
        let mut buckets: Vec<Vec<(i64, f64)>> = vec![Vec::new(); 4];
        for &t in &ts {
            let new = rng.f64() * 20.0;
            let fast = new * rng.f64();
            counts[0] += fast * 0.3;
            counts[1] += fast;
            counts[2] += fast + (new - fast) * 0.5;
            counts[3] += new;
            for (b, c) in buckets.iter_mut().zip(counts) {
                b.push((t, c));
            }
        }
        for (le, pts) in ["0.1", "0.5", "1", "+Inf"].iter().zip(buckets) {
            out.push((SeriesKey::new("req_duration_seconds_bucket", [("instance", inst), ("le", *le)]), pts));
        }
    }
    // A gauge with gaps: present in bursts, absent longer than the lookback.
    let ts = times(&mut rng);
    let pts = ts.iter().enumerate().filter(|(k, _)| (k / 20) % 3 != 1).map(|(_, &t)| (t, rng.f64() * 1000.0)).collect();
    out.push((SeriesKey::new("sparse_gauge", [("instance", "a")]), pts));
    // Corner values (issue 43), each kind a series of `corner`.
    let corner = |kind: &str, rng: &mut fastrand::Rng, f: &dyn Fn(usize, &mut fastrand::Rng) -> f64| {
        let pts = times(rng).into_iter().enumerate().map(|(k, t)| (t, f(k, rng))).collect();
        (SeriesKey::new("corner", [("kind", kind)]), pts)
    };
    // A sum that depends on the order of adding: a plain sum loses the 1s.
    out.push(corner("cancel", &mut rng, &|k, _| [1e16, 1.0, -1e16, 3.0, 1.0][k % 5]));
    // Near the largest float: sums overflow, means must not.
    out.push(corner("huge", &mut rng, &|k, _| 1.6e308 * (1.0 - (k % 7) as f64 * 1e-3)));
    out.push(corner("big", &mut rng, &|_, r| 1e300 * (1.0 + r.f64())));
    out.push(corner("tiny", &mut rng, &|k, _| [5e-324, 1e-310, 2.5e-308, 1e-7, 0.0][k % 5]));
    out.push(corner("special", &mut rng, &|k, r| match k % 9 {
        0 => f64::NAN,
        3 => f64::INFINITY,
        5 => -0.0,
        7 => f64::NEG_INFINITY,
        _ => r.f64() * 10.0 - 5.0,
    }));
    // Ties and NaN, for sort and topk.
    for (i, v) in [1.0, 1.0, f64::NAN, 2.0, -1.0].into_iter().enumerate() {
        let pts = times(&mut rng).into_iter().map(|t| (t, v)).collect();
        out.push((SeriesKey::new("ordered", [("i", i.to_string())]), pts));
    }
    out
}

fn openmetrics(data: &[SeriesData]) -> String {
    let mut by_name: BTreeMap<&str, Vec<&SeriesData>> = BTreeMap::new();
    for d in data {
        by_name.entry(d.0.name()).or_default().push(d);
    }
    let mut out = String::new();
    for (_, series) in by_name {
        for (key, pts) in series {
            let labels: Vec<String> = key.labels().iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            for (t, v) in pts {
                // Exactly the float, in a form Go's ParseFloat reads.
                let v = match *v {
                    v if v.is_nan() => "NaN".to_owned(),
                    f64::INFINITY => "+Inf".to_owned(),
                    f64::NEG_INFINITY => "-Inf".to_owned(),
                    v => format!("{v:e}"),
                };
                out.push_str(&format!("{}{{{}}} {v} {}.{:03}\n", key.name(), labels.join(","), t / 1000, t % 1000));
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

fn kansoku_store(dir: &std::path::Path, data: &[SeriesData]) -> Store {
    let store = Store::open(dir, Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    let mut by_time: BTreeMap<i64, Vec<(u32, f64)>> = BTreeMap::new();
    for (id, (_, pts)) in data.iter().enumerate() {
        for &(t, v) in pts {
            by_time.entry(t).or_default().push((id as u32, v));
        }
    }
    let mut declared = false;
    for (t, points) in by_time {
        let mut b = Batch::new(Timestamp(t * MS));
        if !declared {
            b.defs = data.iter().enumerate().map(|(i, (k, _))| (i as u32, k.clone())).collect();
            declared = true;
        }
        b.points = points;
        store.append(&mut app, &b).unwrap();
    }
    store
}

/// A query's answer in one shape for both: labels -> [(ms, value)] (and,
/// for an instant vector, its values in the order given), or a string, or
/// an error (its Prometheus type, its message).
#[derive(Debug, PartialEq)]
enum Answer {
    Series(BTreeMap<String, Vec<(i64, f64)>>, Vec<f64>),
    String(String),
    Error(String, String),
}

fn key_of(labels: impl Iterator<Item = (String, String)>) -> String {
    let mut l: Vec<(String, String)> = labels.collect();
    l.sort();
    l.iter().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join(",")
}

fn parse_value(v: &serde_json::Value) -> (i64, f64) {
    let t = (v[0].as_f64().unwrap() * 1000.0).round() as i64;
    let s = v[1].as_str().unwrap();
    let x = match s {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().unwrap(),
    };
    (t, x)
}

fn prometheus_answer(url: &str, path: &str, params: &[(&str, String)]) -> Answer {
    let mut req = ureq::get(format!("{url}{path}"));
    for (k, v) in params {
        req = req.query(*k, v);
    }
    let body = match req.config().http_status_as_error(false).build().call() {
        Ok(mut r) => r.body_mut().read_to_string().unwrap(),
        Err(e) => return Answer::Error("transport".into(), e.to_string()),
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    if v["status"] != "success" {
        return Answer::Error(v["errorType"].as_str().unwrap_or("?").to_owned(), v["error"].to_string());
    }
    let mut order = Vec::new();
    let data = &v["data"];
    let mut out = BTreeMap::new();
    let metric = |m: &serde_json::Value| {
        key_of(m.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())))
    };
    match data["resultType"].as_str().unwrap() {
        "matrix" => {
            for s in data["result"].as_array().unwrap() {
                out.insert(metric(&s["metric"]), s["values"].as_array().unwrap().iter().map(parse_value).collect());
            }
        }
        "vector" => {
            for s in data["result"].as_array().unwrap() {
                let p = parse_value(&s["value"]);
                order.push(p.1);
                out.insert(metric(&s["metric"]), vec![p]);
            }
        }
        "scalar" => {
            out.insert(String::new(), vec![parse_value(&data["result"])]);
        }
        "string" => return Answer::String(data["result"][1].as_str().unwrap().to_owned()),
        other => panic!("result type {other}"),
    }
    Answer::Series(out, order)
}

fn kansoku_answer(engine: &promql::Engine<'_>, q: &str, start: i64, end: i64, step: i64, instant: bool) -> Answer {
    let out = if instant { engine.instant(q, start * MS) } else { engine.range(q, start * MS, end * MS, step * MS) };
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            let kind = match e {
                promql::Error::BadData(_) => "bad_data",
                promql::Error::Execution(_) | promql::Error::TooLarge(_) => "execution",
                promql::Error::Timeout(_) => "timeout",
            };
            return Answer::Error(kind.into(), e.to_string());
        }
    };
    let ms: Vec<i64> = out.times.iter().map(|t| t / MS).collect();
    let mut res = BTreeMap::new();
    let mut order = Vec::new();
    match out.value {
        promql::Value::Scalar(v) => {
            res.insert(String::new(), ms.iter().copied().zip(v).collect());
        }
        promql::Value::String(s) => return Answer::String(s),
        promql::Value::Matrix(series) => {
            for (labels, samples) in series {
                res.insert(key_of(labels.into_iter()), samples.iter().map(|&(t, v)| (t / MS, v)).collect());
            }
        }
        promql::Value::Vector(series) => {
            for s in series {
                let pts: Vec<(i64, f64)> = ms.iter().zip(&s.points).filter_map(|(&t, p)| p.map(|v| (t, v))).collect();
                if instant && let Some(p) = pts.first() {
                    order.push(p.1);
                }
                if !pts.is_empty() {
                    res.insert(key_of(s.labels.into_iter()), pts);
                }
            }
        }
    }
    Answer::Series(res, order)
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (a - b).abs() < 1e-12
}

/// Why two answers differ, if they do: other series, times or values,
/// another error type, or (`ordered`: `sort`, `sort_desc`) the values in
/// another order (ties in any order, as Prometheus's unstable sort leaves
/// them).
fn differ(p: &Answer, k: &Answer, ordered: bool) -> Option<String> {
    match (p, k) {
        (Answer::Error(a, _), Answer::Error(b, _)) if a == b => None,
        (Answer::String(a), Answer::String(b)) if a == b => None,
        (Answer::Series(a, oa), Answer::Series(b, ob)) => {
            if ordered && (oa.len() != ob.len() || oa.iter().zip(ob).any(|(x, y)| !close(*x, *y))) {
                return Some(format!("order: prometheus {oa:?}, kansoku {ob:?}"));
            }
            if a.keys().ne(b.keys()) {
                let only_p: Vec<_> = a.keys().filter(|k| !b.contains_key(*k)).take(3).collect();
                let only_k: Vec<_> = b.keys().filter(|k| !a.contains_key(*k)).take(3).collect();
                return Some(format!("series differ: only in prometheus {only_p:?}, only in kansoku {only_k:?}"));
            }
            for (key, pa) in a {
                let pb = &b[key];
                if pa.len() != pb.len() {
                    return Some(format!("{key}: {} points in prometheus, {} in kansoku", pa.len(), pb.len()));
                }
                for (x, y) in pa.iter().zip(pb) {
                    if x.0 != y.0 || !close(x.1, y.1) {
                        return Some(format!("{key}: prometheus {x:?}, kansoku {y:?}"));
                    }
                }
            }
            None
        }
        _ => {
            let short = |a: &Answer| format!("{a:?}").chars().take(300).collect::<String>();
            Some(format!("prometheus {}\n  kansoku {}", short(p), short(k)))
        }
    }
}

/// The expressions: every selector form, range function, aggregation,
/// operator and function, alone and combined.
fn expressions(t_at: i64) -> Vec<String> {
    let mut e: Vec<String> = [
        "http_requests_total",
        "http_requests_total[2m]",
        "node_temp[5m] offset 10m",
        "(sparse_gauge[10m])",
        "sum(node_temp)[5m:1m]",
        "http_requests_total{code=\"200\"}",
        "http_requests_total{instance=~\"a|b\"}",
        "http_requests_total{code!=\"500\",instance!~\"c\"}",
        "{__name__=~\"node_temp|sparse_gauge\"}",
        "node_temp",
        "sparse_gauge",
        "node_temp offset 10m",
        "node_temp offset -3m",
        "node_temp @ start()",
        "node_temp @ end()",
        "1",
        "1 + 2 * 3",
        "2 ^ 3 ^ 2",
        "-7 % 3",
        "1 > bool 2",
        "(1 + 2) / 4",
        "\"a string\"",
        "-node_temp",
        "(node_temp)",
        "node_temp * 2",
        "2 - node_temp",
        "node_temp / 0",
        "node_temp % 3",
        "node_temp ^ 2",
        "node_temp > 20",
        "node_temp > bool 20",
        "20 < node_temp",
        "20 >= bool node_temp",
        "node_temp == node_temp",
        "node_temp != bool node_temp",
        "node_temp{zone=\"z1\"} - ignoring(zone) node_temp{zone=\"z2\"}",
        "node_temp{zone=\"z1\"} > on(instance) node_temp{zone=\"z2\"}",
        "node_temp{zone=\"z1\"} > bool on(instance) node_temp{zone=\"z2\"}",
        "http_requests_total{code=\"200\"} / ignoring(code) http_requests_total{code=\"500\"}",
        "http_requests_total / ignoring(code) group_left node_info",
        "http_requests_total * on(instance) group_left(version) node_info",
        "node_info * on(instance) group_right(version) http_requests_total",
        "node_info + on(instance) group_right node_temp",
        "node_temp and node_temp > 20",
        "node_temp and on(instance) sparse_gauge",
        "node_temp or sparse_gauge",
        "sparse_gauge or node_temp",
        "node_temp unless node_temp{zone=\"z1\"}",
        "node_temp unless on(instance) sparse_gauge",
        "node_temp + on() node_temp",
        "http_requests_total + ignoring(code) http_requests_total",
        "node_temp atan2 node_temp",
        "abs(-node_temp)",
        "ceil(node_temp)",
        "floor(node_temp)",
        "exp(node_temp / 10)",
        "sqrt(node_temp)",
        "ln(node_temp)",
        "log2(node_temp)",
        "log10(node_temp)",
        "sgn(node_temp - 20)",
        "round(node_temp)",
        "round(node_temp, 0.5)",
        "clamp(node_temp, 18, 22)",
        "clamp(node_temp, 22, 18)",
        "clamp_min(node_temp, 20)",
        "clamp_max(node_temp, 20)",
        "sin(node_temp)",
        "cos(node_temp)",
        "tan(node_temp)",
        "asin(node_temp / 100)",
        "acos(node_temp / 100)",
        "atan(node_temp)",
        "sinh(node_temp / 10)",
        "cosh(node_temp / 10)",
        "tanh(node_temp)",
        "asinh(node_temp)",
        "acosh(node_temp)",
        "atanh(node_temp / 100)",
        "deg(node_temp)",
        "rad(node_temp)",
        "pi()",
        "time()",
        "vector(1)",
        "vector(time())",
        "scalar(sum(node_temp))",
        "scalar(node_temp)",
        "node_temp * scalar(count(node_temp))",
        "timestamp(node_temp)",
        "timestamp(sparse_gauge)",
        "timestamp(node_temp * 1)",
        "hour()",
        "minute()",
        "day_of_week()",
        "day_of_month()",
        "day_of_year()",
        "days_in_month()",
        "month()",
        "year()",
        "month(vector(1700000000))",
        "hour(node_temp * 1e8)",
        "absent(nonexistent{job=\"x\"})",
        "absent(nonexistent{job=\"x\",job=\"y\"})",
        "absent(nonexistent{job=~\"x\"})",
        "absent(node_temp)",
        "absent(sparse_gauge)",
        "absent_over_time(nonexistent{a=\"b\"}[5m])",
        "absent_over_time(sparse_gauge[1m])",
        "sort(node_temp)",
        "sort_desc(node_temp)",
        "label_replace(node_temp, \"z\", \"$1\", \"zone\", \"z(.*)\")",
        "label_replace(node_temp, \"zone\", \"\", \"zone\", \".*\")",
        "label_replace(node_temp, \"instance\", \"x\", \"\", \"\")",
        "label_replace(node_temp, \"__name__\", \"renamed\", \"\", \"\")",
        "label_join(node_temp, \"both\", \"-\", \"instance\", \"zone\")",
        "histogram_quantile(0.9, rate(req_duration_seconds_bucket[5m]))",
        "histogram_quantile(0.5, sum by (le) (rate(req_duration_seconds_bucket[5m])))",
        "histogram_quantile(0.99, sum by (le, instance) (rate(req_duration_seconds_bucket[10m])))",
        "histogram_quantile(1.5, rate(req_duration_seconds_bucket[5m]))",
        "histogram_quantile(-1, rate(req_duration_seconds_bucket[5m]))",
        "histogram_quantile(0.9, req_duration_seconds_bucket{le!=\"+Inf\"})",
        "topk(2, node_temp)",
        "bottomk(1, node_temp)",
        "topk by (zone) (1, node_temp)",
        "bottomk without (instance) (2, node_temp)",
        "topk(0, node_temp)",
        "quantile(0.5, node_temp)",
        "quantile by (instance) (0.75, node_temp)",
        "quantile(2, node_temp)",
        "count_values(\"v\", round(node_temp))",
        "count_values by (zone) (\"v\", ceil(node_temp))",
        "sum(node_temp) by (zone) / on(zone) group_left count(node_temp) by (zone)",
        "max_over_time(rate(http_requests_total[5m])[30m:1m])",
        "avg_over_time(node_temp[10m:])",
        "rate(http_requests_total[5m:30s])",
        "min_over_time(node_temp[20m:2m] offset 5m)",
        "max_over_time(deriv(node_temp[10m])[20m:90s])",
        "sum_over_time(sum(node_temp)[15m:1m])",
        "quantile_over_time(0.9, node_temp[10m])",
        "quantile_over_time(0.1, sparse_gauge[20m])",
        "predict_linear(node_temp[15m], 600)",
        "predict_linear(http_requests_total[10m], 3600)",
        "holt_winters(node_temp[10m], 0.5, 0.3)",
        "holt_winters(node_temp[10m], 0.1, 0.9)",
        "rate(http_requests_total[5m] offset 5m)",
        "rate(http_requests_total[5m] @ end())",
        "sum(rate(http_requests_total[5m]))",
        "sum without (instance) (rate(http_requests_total[5m]))",
        "sum(rate(http_requests_total[5m])) by (code) / ignoring(code) group_left sum(rate(http_requests_total[5m]))",
        "rate(node_temp[5m])",
        "increase(sparse_gauge[10m])",
        // More shapes Grafana panels use.
        "sum by (instance) (rate(http_requests_total[2m])) > 0.1",
        "sum by (instance) (rate(http_requests_total[2m])) > bool 0.1",
        "rate(http_requests_total[1m]) * 60",
        "100 * (1 - avg by (instance) (rate(http_requests_total{code=\"200\"}[5m])) / avg by (instance) (rate(http_requests_total[5m])))",
        "avg(node_temp) + on() group_left() max(node_temp)",
        "node_temp > on(instance) group_left(zone) node_temp * 0",
        "max by (zone) (node_temp) - min by (zone) (node_temp)",
        "stddev by (zone) (node_temp)",
        "stdvar(node_temp)",
        "count(node_temp > 20)",
        "group by (zone) (node_temp)",
        "sum(node_temp) / count(node_temp)",
        "clamp(node_temp, 18, 22)",
        "clamp_min(node_temp, 21)",
        "clamp_max(node_temp, 19)",
        "round(node_temp, 0.5)",
        "abs(node_temp - 20)",
        "sgn(node_temp - 20)",
        "exp(node_temp / 10)",
        "ln(node_temp)",
        "log2(node_temp)",
        "log10(node_temp)",
        "sqrt(node_temp)",
        "node_temp % 3",
        "node_temp ^ 2",
        "-node_temp",
        "node_temp and on(instance) sparse_gauge",
        "node_temp or sparse_gauge",
        "node_temp unless on(instance) sparse_gauge",
        "sum_over_time(node_temp[2h])",
        "count_over_time(http_requests_total[1h])",
        "max_over_time(sparse_gauge[45m])",
        "sum(",
        "node_temp{zone=~\"(\"}",
        "rate(node_temp)",
        "nosuchfunction(node_temp)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    e.push(format!("node_temp @ {}", t_at / 1000));
    e.push(format!("rate(http_requests_total[5m] @ {})", t_at / 1000));
    for f in ["rate", "irate", "increase", "delta", "idelta", "deriv", "resets", "changes"] {
        for r in ["1m", "5m", "17m30s"] {
            e.push(format!("{f}(http_requests_total[{r}])"));
        }
        e.push(format!("{f}(sparse_gauge[3m])"));
    }
    for f in ["avg", "min", "max", "sum", "count", "last", "present", "stddev", "stdvar"] {
        e.push(format!("{f}_over_time(node_temp[5m])"));
        e.push(format!("{f}_over_time(sparse_gauge[10m])"));
        e.push(format!("{f}_over_time(http_requests_total[2m] offset 1m)"));
    }
    // Long windows: answered from the minute tier plus raw edges.
    for f in ["avg", "min", "max", "sum", "count"] {
        e.push(format!("({f}_over_time((http_requests_total[37m30s])))"));
        e.push(format!("{f}_over_time(node_temp[1h] offset 7m)"));
    }
    for op in ["sum", "avg", "min", "max", "count", "group", "stddev", "stdvar"] {
        for g in ["", " by (instance)", " without (code)", " by (instance, code)", " without ()"] {
            e.push(format!("{op}{g} (rate(http_requests_total[5m]))"));
        }
        e.push(format!("{op} by (zone) (node_temp)"));
        e.push(format!("{op}(sparse_gauge)"));
    }
    e.extend(corner_expressions());
    e
}

/// Issue 43's classes, each with cases of its own over the `corner` and
/// `ordered` series.
fn corner_expressions() -> Vec<String> {
    let mut e = Vec::new();
    // 1, 2: compensated sums, on raw windows and on the minute tier's;
    // sums that overflow, means that must not.
    for kind in ["cancel", "huge", "big", "tiny", "special"] {
        for r in ["1m", "2m30s", "5m", "37m30s", "1h"] {
            for f in ["sum", "avg", "min", "max", "count", "stddev", "stdvar"] {
                e.push(format!("{f}_over_time(corner{{kind=\"{kind}\"}}[{r}])"));
            }
        }
        e.push(format!("deriv(corner{{kind=\"{kind}\"}}[10m])"));
        e.push(format!("predict_linear(corner{{kind=\"{kind}\"}}[10m], 60)"));
        e.push(format!("corner{{kind=\"{kind}\"}}"));
        e.push(format!("sum_over_time(corner{{kind=\"{kind}\"}}[10m:1m])"));
    }
    // 3: inverse hyperbolic functions of huge, tiny and special values.
    for f in ["acosh", "asinh", "atanh", "ln", "log2", "sqrt", "exp"] {
        for kind in ["huge", "big", "tiny", "special"] {
            e.push(format!("{f}(corner{{kind=\"{kind}\"}})"));
            e.push(format!("{f}(-corner{{kind=\"{kind}\"}})"));
        }
    }
    // 4: argument errors of label_replace and label_join are `execution`.
    e.extend(
        [
            r#"label_replace(node_temp, "bad-label", "x", "zone", "(.*)")"#,
            r#"label_replace(node_temp, "1abc", "x", "zone", "(.*)")"#,
            r#"label_replace(node_temp, "z", "x", "zone", "(")"#,
            r#"label_replace(nonexistent, "z", "x", "zone", "(")"#,
            r#"label_replace(node_temp, "", "x", "zone", ".*")"#,
            r#"label_join(node_temp, "bad-label", "-", "zone")"#,
            r#"label_join(node_temp, "ok", "-", "bad-src")"#,
            r#"label_join(nonexistent, "bad-label", "-", "zone")"#,
        ]
        .map(String::from),
    );
    // 5: accepted here, refused there.
    e.extend(
        [
            r#"count_values("bad-label", node_temp)"#,
            r#"count_values("", node_temp)"#,
            r#"count_values("bad-label", nonexistent)"#,
            "node_temp @ 1e30",
            "node_temp @ -1e30",
            "rate(http_requests_total[5m] @ 1e30)",
            "topk(scalar(ordered{i=\"2\"}), node_temp)",
            "topk(scalar(nonexistent), node_temp)",
            "bottomk(1e20, node_temp)",
            "topk(-1e19, node_temp)",
            "topk(scalar(ordered{i=\"2\"}), nonexistent)",
            "topk(2, ordered)",
            "bottomk(2, ordered)",
            "topk(1, corner)",
        ]
        .map(String::from),
    );
    // 6: holt_winters checks its factors only where there is data.
    e.extend(
        [
            "holt_winters(nonexistent[5m], 1, 0.5)",
            "holt_winters(nonexistent[5m], 0.5, 7)",
            "holt_winters(node_temp[5m], 1, 0.5)",
            "holt_winters(node_temp[5m], 0.5, 0)",
            "holt_winters(sparse_gauge[1m], 0.5, 1)",
        ]
        .map(String::from),
    );
    // 7: NaN last in sort and sort_desc; ties in any order.
    for f in ["sort", "sort_desc"] {
        e.push(format!("{f}(ordered)"));
        e.push(format!("{f}(corner)"));
        e.push(format!("{f}(-ordered)"));
        e.push(format!("{f}(node_temp)"));
    }
    // 8: a sample's time as the float nearest its decimal.
    e.extend(
        [
            "time() - timestamp(node_temp)",
            "timestamp(corner)",
            "time() - timestamp(sparse_gauge)",
            "timestamp(node_temp) - timestamp(node_temp offset 1m)",
            "time() - time()",
            "vector(time()) - on() timestamp(ordered{i=\"0\"})",
        ]
        .map(String::from),
    );
    e
}

/// The right answer where Prometheus 2.42's is wrong: `ln` of a subnormal
/// (Go's assembly `math.Log` on amd64, golang/go#56600, gives
/// ln(1e-310) = −709.09; it is −713.80). kansoku must give `f64::ln` of
/// the samples its selector (equal to Prometheus's, tested apart) gives.
fn right_ln(
    q: &str,
    engine: &promql::Engine<'_>,
    k: &Answer,
    p: &Answer,
    g: (i64, i64, i64, bool),
) -> Option<Result<bool, String>> {
    let inner = q.strip_prefix("ln(")?.strip_suffix(")")?;
    if !inner.contains("tiny") {
        return None;
    }
    let Answer::Series(sel, _) = kansoku_answer(engine, inner, g.0, g.1, g.2, g.3) else {
        return Some(Err("no selector".into()));
    };
    let Answer::Series(got, _) = k else { return Some(Err(format!("kansoku: {k:?}"))) };
    for (key, pts) in &sel {
        let key = key.split(',').filter(|l| !l.starts_with("__name__=")).collect::<Vec<_>>().join(",");
        let want: Vec<(i64, f64)> = pts.iter().map(|&(t, v)| (t, v.ln())).collect();
        let have = got.get(&key).cloned().unwrap_or_default();
        if have.len() != want.len() || have.iter().zip(&want).any(|(a, b)| a.0 != b.0 || !close(a.1, b.1)) {
            return Some(Err(format!("{key}: kansoku {have:?}, ln of the samples {want:?}")));
        }
    }
    Some(Ok(differ(p, k, false).is_some()))
}

/// Where kansoku answers differently from Prometheus 2.42 on purpose
/// (`docs/promql.md`): `avg_over_time` is the compensated sum over the
/// count (Prometheus 3's method), where 2.42's running mean drifts over
/// values that cancel. Over the `cancel` series (integers) the true mean is
/// computed exactly here and kansoku must give it.
fn exact_mean(q: &str, data: &[SeriesData], k: &Answer, p: &Answer, t: &[i64]) -> Option<Result<bool, String>> {
    let r = q.strip_prefix("avg_over_time(corner{kind=\"cancel\"}[")?.strip_suffix("])")?;
    let range_ms = match r {
        "1m" => 60_000,
        "2m30s" => 150_000,
        "5m" => 300_000,
        "37m30s" => 2_250_000,
        "1h" => 3_600_000,
        other => panic!("no exact mean for [{other}]"),
    };
    let pts = &data.iter().find(|d| d.0.name() == "corner" && d.0.get("kind") == Some("cancel")).unwrap().1;
    let want: Vec<(i64, f64)> = t
        .iter()
        .filter_map(|&end| {
            let w: Vec<i128> =
                pts.iter().filter(|(at, _)| *at >= end - range_ms && *at <= end).map(|p| p.1 as i128).collect();
            (!w.is_empty()).then(|| (end, w.iter().sum::<i128>() as f64 / w.len() as f64))
        })
        .collect();
    let Answer::Series(kk, _) = k else { return Some(Err(format!("kansoku: {k:?}"))) };
    let got: Vec<(i64, f64)> = kk.values().next().cloned().unwrap_or_default();
    if got.len() != want.len() || got.iter().zip(&want).any(|(a, b)| a.0 != b.0 || !close(a.1, b.1)) {
        return Some(Err(format!("kansoku {got:?}, the exact mean {want:?}")));
    }
    // Whether Prometheus 2.42 drifted from the exact mean here.
    Some(Ok(differ(p, k, false).is_some()))
}

#[test]
fn promql_answers_as_prometheus_does() {
    if Command::new("promtool").arg("--version").output().is_err() {
        panic!("promtool is missing: apt-get install prometheus (scripts/deps.sh test installs it)");
    }
    let dir = tempfile::tempdir().unwrap();
    // Two hours of data ending an hour ago, on whole seconds.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let t0 = (now_ms - SPAN_MS - 3_600_000) / 60_000 * 60_000;
    let data = data(t0);
    let om = dir.path().join("data.om");
    std::fs::write(&om, openmetrics(&data)).unwrap();
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(dir.path().join("tsdb"))
        .output()
        .unwrap();
    assert!(out.status.success(), "promtool: {}", String::from_utf8_lossy(&out.stderr));
    let prom = start_prometheus(dir.path());
    let store = Arc::new(kansoku_store(&dir.path().join("kansoku"), &data));
    let engine = promql::Engine::new(&store);

    let end = t0 + SPAN_MS;
    let t_at = t0 + 47 * 60_000 + 7_250;
    // (start, end, step ms, instant)
    let grid: Vec<(i64, i64, i64, bool)> = vec![
        (t0 + 30 * 60_000, 0, 0, true),
        (t0 + 61 * 60_000 + 7_123, 0, 0, true),
        (end - 1, 0, 0, true),
        (t0 + 10 * 60_000, t0 + 110 * 60_000, 60_000, false),
        (t0 + 20 * 60_000, t0 + 50 * 60_000, 15_000, false),
        (t0 + 33 * 60_000 + 3_000, t0 + 40 * 60_000, 7_000, false),
    ];
    let mut failures = Vec::new();
    let mut total = 0;
    let mut non_empty = 0;
    let mut drifted = 0;
    let mut go_log_wrong = 0;
    for q in expressions(t_at) {
        for &(s, e, step, instant) in &grid {
            total += 1;
            let p = if instant {
                prometheus_answer(
                    &prom.url,
                    "/api/v1/query",
                    &[("query", q.clone()), ("time", format!("{}.{:03}", s / 1000, s % 1000))],
                )
            } else {
                let f = |ms: i64| format!("{}.{:03}", ms / 1000, ms % 1000);
                prometheus_answer(
                    &prom.url,
                    "/api/v1/query_range",
                    &[("query", q.clone()), ("start", f(s)), ("end", f(e)), ("step", f(step))],
                )
            };
            let k = kansoku_answer(&engine, &q, s, e, step, instant);
            if matches!(&p, Answer::Series(m, _) if !m.is_empty()) {
                non_empty += 1;
            }
            let ordered = instant && (q.starts_with("sort(") || q.starts_with("sort_desc("));
            let steps: Vec<i64> = if instant { vec![s] } else { (0..=(e - s) / step).map(|i| s + i * step).collect() };
            // (Prometheus's mean drifted, its ln was wrong), where kansoku
            // answers differently on purpose.
            let deliberate =
                exact_mean(&q, &data, &k, &p, &steps).map(|r| r.map(|drifted| (drifted, false))).or_else(|| {
                    right_ln(&q, &engine, &k, &p, (s, e, step, instant)).map(|r| r.map(|wrong| (false, wrong)))
                });
            match deliberate {
                Some(Ok((mean_drifted, ln_wrong))) => {
                    drifted += usize::from(mean_drifted);
                    go_log_wrong += usize::from(ln_wrong);
                    continue;
                }
                Some(Err(why)) => {
                    failures.push(format!("{q} @ {s}..{e} step {step}: {why}"));
                    continue;
                }
                None => {}
            }
            if let Some(why) = differ(&p, &k, ordered) {
                failures.push(format!("{q} @ {s}..{e} step {step}: {why}"));
            }
        }
    }
    let passed = total - failures.len();
    eprintln!("promql differential: {passed}/{total} queries equal ({non_empty} with data in Prometheus)");
    for f in failures.iter().take(60) {
        eprintln!("DIFF {}", f.chars().take(400).collect::<String>());
    }
    assert!(non_empty > total / 2, "most queries should have data: {non_empty} of {total}");
    // The documented difference is real: Prometheus 2.42's running mean
    // drifts over values that cancel (else the docs are stale).
    assert!(drifted > 0, "Prometheus 2.42 answered the exact mean everywhere: update docs/promql.md");
    assert!(go_log_wrong > 0, "Prometheus 2.42 answered ln of subnormals right: update docs/promql.md");
    assert!(failures.is_empty(), "{} of {total} queries differ from Prometheus (first above)", failures.len());
}
