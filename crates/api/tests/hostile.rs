//! Issue 42, one test per class of small request that ended the server:
//! each is refused with the API's own error, before its cost is paid, and
//! the server goes on answering. Through the router (`oneshot`, no
//! sockets); the real process under a memory cap is `kansoku`'s
//! `hardening_e2e`.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};
use tower::ServiceExt;

const T0: i64 = 1_800_000_000_000_000_000;

/// One stored series `m{host="h"}`, a point every 10 ms for 1 s.
fn fixture() -> (tempfile::TempDir, api::ApiState) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { fsync: FsyncPolicy::Never, ..Options::default() };
    let store = Store::open(dir.path(), opts).unwrap();
    let mut app = Appender::default();
    for i in 0..100i64 {
        let mut b = Batch::new(Timestamp(T0 + i * 10_000_000));
        if i == 0 {
            b.defs.push((0, SeriesKey::new("m", [("host", "h")])));
        }
        b.points.push((0, i as f64));
        store.append(&mut app, &b).unwrap();
    }
    // The InfluxDB databases the tests write to, as CREATE DATABASE keeps
    // them (writing to one that does not exist is a 404, as in influxd).
    std::fs::create_dir_all(dir.path().join("influx")).unwrap();
    std::fs::write(dir.path().join("influx/databases"), "a\nd\nx\n").unwrap();
    (dir, api::ApiState::new(Arc::new(store)))
}

async fn send(st: &api::ApiState, req: Request<Body>) -> (StatusCode, String) {
    let resp = api::router(st.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 64 << 20).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn get(st: &api::ApiState, uri: &str) -> (StatusCode, String) {
    send(st, Request::get(uri).body(Body::empty()).unwrap()).await
}

/// A POST with a form body (Grafana sends long queries so; a URI this long
/// is refused by the client already).
async fn post_form(st: &api::ApiState, uri: &str, form: String) -> (StatusCode, String) {
    let req = Request::post(uri).header("content-type", "application/x-www-form-urlencoded").body(Body::from(form));
    send(st, req.unwrap()).await
}

fn enc(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Prometheus's error: the status, `errorType` and a message containing `want`.
fn prom_error(got: &(StatusCode, String), status: StatusCode, kind: &str, want: &str) {
    let v = json(&got.1);
    assert_eq!((got.0, v["errorType"].as_str()), (status, Some(kind)), "{}", got.1);
    assert!(v["error"].as_str().unwrap().contains(want), "{}", got.1);
}

/// 1, and the same as a rule: steps² from no data.
#[tokio::test]
async fn promql_that_grows_with_steps_squared_is_refused() {
    let (_d, st) = fixture();
    let q = enc(r#"count(count_over_time(count_values("v", vector(time()))[6h:1s]))"#);
    let got = get(&st, &format!("/prometheus/api/v1/query?query={q}&time=1800000000")).await;
    prom_error(&got, StatusCode::UNPROCESSABLE_ENTITY, "execution", "points");
    assert_eq!(model::budget::MemoryBudget::global().used(), 0, "nothing stays reserved");
}

/// 2: a 1 ns step over 50 ms stayed under the cell limit, then its JSON
/// asked for 1.6 GB. The answer's size is known first.
#[tokio::test]
async fn an_answer_too_large_to_write_is_refused_before_it_is_written() {
    let (_d, st) = fixture();
    let (from, to) = (T0 as f64 / 1e9, (T0 + 50_000_000) as f64 / 1e9);
    let got = get(&st, &format!("/api/v1/query?query=m&from={from}&to={to}&step=1ns")).await;
    assert_eq!(got.0, StatusCode::UNPROCESSABLE_ENTITY, "{}", got.1);
    assert!(json(&got.1)["error"].as_str().unwrap().contains("MiB"), "{}", got.1);
    // 10 ms steps over the same range are answered.
    let ok = get(&st, &format!("/api/v1/query?query=m&from={from}&to={to}&step=10ms")).await;
    assert_eq!(ok.0, StatusCode::OK, "{}", ok.1);
    assert_eq!(json(&ok.1)["times"].as_array().unwrap().len(), 5, "{}", ok.1);
}

/// 3: 16 KB of gzip that inflates to millions of bad lines keeps a few
/// messages, counts them all.
#[tokio::test]
async fn a_gzip_of_bad_lines_is_answered_with_their_count() {
    let (_d, st) = fixture();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for _ in 0..64 {
        gz.write_all(&b"x\n".repeat(1 << 16)).unwrap();
    }
    let body = gz.finish().unwrap();
    assert!(body.len() < 64 << 10, "{}", body.len());
    let req = Request::post("/write?db=a").header("content-encoding", "gzip").body(Body::from(body)).unwrap();
    let (status, text) = send(&st, req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains(&format!("and {} more bad lines", 64 * (1 << 16) - 1)), "{text}");
    let (_, status) = get(&st, "/api/v1/status").await;
    assert_eq!(json(&status)["influx"]["bad_lines"], 64 * (1 << 16));
}

async fn remote_write(st: &api::ApiState, body: Vec<u8>) -> (StatusCode, String) {
    let req = Request::post("/prometheus/api/v1/write")
        .header("content-encoding", "snappy")
        .header("content-type", "application/x-protobuf")
        .body(Body::from(body))
        .unwrap();
    send(st, req).await
}

/// 4, 8, 16, 19: remote write's amplification, label sizes, names and
/// samples it will not keep.
#[tokio::test]
async fn remote_write_refuses_what_it_cannot_keep_and_says_so() {
    let (_d, st) = fixture();
    // 4: empty series by the million.
    let raw: Vec<u8> = [0x0a, 0x00].repeat(8 << 20);
    let bomb = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    let (s, why) = remote_write(&st, bomb).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{why}");
    assert!(why.contains("8388608 series"), "{why}");
    // 8: a 30 MB label value.
    let big = "v".repeat(30 << 20);
    let (s, why) = remote_write(
        &st,
        promql::remote_write::encode(&[(vec![("__name__", "x"), ("a", &big)], vec![(1_800_000_000_000, 1.0)])]),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{why}");
    assert!(why.contains("at most 16384"), "{why}");
    // 19: a name that forges lines in /federate.
    let forged = "up\ninjected_metric{job=\"forged\"} 1e9";
    let (s, why) = remote_write(
        &st,
        promql::remote_write::encode(&[(vec![("__name__", forged)], vec![(1_800_000_000_000, 1.0)])]),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{why}");
    assert!(why.contains("invalid metric name"), "{why}");
    // 16: samples outside what the store holds are answered 400 (Prometheus
    // does not retry them); the others are kept.
    let t = (T0 + 1_000_000_000) / 1_000_000;
    let body = promql::remote_write::encode(&[(vec![("__name__", "rw")], vec![(-5_000, 1.0), (t, 2.0)])]);
    let (s, why) = remote_write(&st, body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{why}");
    assert!(why.contains("out of bounds: 1 samples") && why.contains("other 1 were stored"), "{why}");
    let (_, b) = get(&st, &format!("/prometheus/api/v1/query?query=rw&time={}", t / 1000)).await;
    assert_eq!(json(&b)["data"]["result"][0]["value"][1], "2", "{b}");
    let (_, status) = get(&st, "/api/v1/status").await;
    assert_eq!(json(&status)["prometheus"]["remote_write_samples_refused"], 1);
}

/// 19: a series whose name the exposition cannot print (written through
/// /write, where InfluxDB allows any) is left out of /federate, counted.
#[tokio::test]
async fn federate_prints_only_names_it_can_print() {
    let (_d, st) = fixture();
    let now = Timestamp::now().as_nanos();
    let line = format!("bad\\ name,host=h v=1 {now}\nok,host=h v=2 {now}\n");
    let (s, why) = send(&st, Request::post("/write?db=d").body(Body::from(line)).unwrap()).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{why}");
    let (s, text) = get(&st, &format!("/prometheus/federate?match[]={}", enc(r#"{db="d"}"#))).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert!(text.contains("ok_v{db=\"d\",host=\"h\",influx_field=\"v\"} 2"), "{text}");
    assert!(!text.contains("bad"), "{text}");
    let (_, status) = get(&st, "/api/v1/status").await;
    assert_eq!(json(&status)["prometheus"]["federate_skipped_names"], 1);
}

/// 5, 6, 9: InfluxQL's cost, regexes and depth.
#[tokio::test]
async fn influxql_is_bounded_in_cells_regexes_and_depth() {
    let (_d, st) = fixture();
    let influx = |q: String| {
        let st = st.clone();
        async move { post_form(&st, "/query?db=x", format!("q={}", enc(&q))).await }
    };
    let point = Request::post("/write?db=x").body(Body::from(format!("cpu v=1 {T0}\n"))).unwrap();
    assert_eq!(send(&st, point).await.0, StatusCode::NO_CONTENT);
    let fields = vec!["mean(v)"; 600].join(",");
    let to = T0 + 99_999_000_000_000;
    let (s, b) = influx(format!("SELECT {fields} FROM cpu WHERE time >= {T0} AND time < {to} GROUP BY time(1s)")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(b.contains("cells per series"), "{b}");
    let (s, b) = influx("SELECT v FROM m WHERE a =~ /(.*){10000}/".into()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(b.contains("size limit"), "{b}");
    let deep = format!("SELECT v FROM m WHERE {}a = 'b'{}", "(".repeat(3500), ")".repeat(3500));
    let (s, b) = influx(deep).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(b.contains("deeper than 64"), "{b}");
    let long = format!("SELECT v FROM m WHERE {}", vec!["a = 'b'"; 3500].join(" OR "));
    let (s, b) = influx(long).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(b.contains("more than 512 comparisons"), "{b}");
    // Wildcards multiply a short list: 6 × mean(*) over 200 fields is
    // 1,200 columns from a 50-byte list (25 × over 200 fields once took
    // 1.6 s to name). Refused before any point is read.
    let wide: String = (0..200).map(|i| format!("f{i:03}={i}")).collect::<Vec<_>>().join(",");
    let point = Request::post("/write?db=x").body(Body::from(format!("wide {wide} {T0}\n"))).unwrap();
    assert_eq!(send(&st, point).await.0, StatusCode::NO_CONTENT);
    let (s, b) = influx(format!("SELECT {} FROM wide", ["mean(*)"; 6].join(","))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(b.contains("make 1200 columns; at most 1000"), "{b}");
    // Arithmetic of many operands: bounded where it is parsed.
    let (s, b) = influx(format!("SELECT {} FROM wide", ["f001"; 17].join("+"))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(b.contains("more than 16"), "{b}");
    // Issue 49's functions, with the largest arguments a query can name:
    // answered, never an allocation of what the argument says.
    for q in ["SELECT moving_average(v, 9223372036854775807) FROM cpu", "SELECT top(v, 9223372036854775807) FROM cpu"] {
        let (s, b) = influx(q.into()).await;
        assert_eq!(s, StatusCode::OK, "{q}: {b}");
        assert!(!b.contains("\"error\""), "{q}: {b}");
    }
    let q = format!(
        "SELECT moving_average(mean(v), 9223372036854775807) FROM cpu WHERE time >= {T0} AND time < {to} GROUP BY time(1s)"
    );
    let (s, b) = influx(q).await;
    assert!(s == StatusCode::OK && b.contains("buckets"), "{b}");
    // A chunked answer of 100,000 one-row pieces: linear (each piece copied
    // whole was quadratic, and hung the fuzzer).
    let q = enc(&format!(
        "SELECT count(v) FROM cpu WHERE time >= {T0} AND time < {} GROUP BY time(1s) fill(0)",
        T0 + 99_000_000_000_000
    ));
    let (s, b) = get(&st, &format!("/query?db=x&chunked=true&chunk_size=1&q={q}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b.lines().count(), 99_000, "{}", &b[..200.min(b.len())]);
}

/// 7, 9, 20: selectors and expressions that took gigabytes or the stack.
#[tokio::test]
async fn selectors_and_expressions_are_bounded_before_they_are_compiled() {
    let (_d, st) = fixture();
    let many: String = (0..5000).map(|i| format!("match[]={}&", enc(&format!("{{a=~\"x{i}.*\"}}")))).collect();
    let got = post_form(&st, "/prometheus/api/v1/series", many).await;
    prom_error(&got, StatusCode::BAD_REQUEST, "bad_data", "label matchers");
    let wide: Vec<String> = (0..100).map(|i| format!("l{i}=~\"a.*\"")).collect();
    let got = get(&st, &format!("/prometheus/api/v1/series?match[]={}", enc(&format!("{{{}}}", wide.join(","))))).await;
    prom_error(&got, StatusCode::BAD_REQUEST, "bad_data", "more than 64 label matchers");
    let got = post_form(&st, "/prometheus/api/v1/series", format!("match[]={}", "(".repeat(10_000))).await;
    prom_error(&got, StatusCode::BAD_REQUEST, "bad_data", "deeper than 64");
    for q in [vec!["1"; 3000].join("+"), format!("{}1{}", "abs(".repeat(3000), ")".repeat(3000)), "(".repeat(50_000)] {
        let got = post_form(&st, "/prometheus/api/v1/query", format!("query={}", enc(&q))).await;
        prom_error(&got, StatusCode::BAD_REQUEST, "bad_data", "");
    }
    let got = get(&st, "/prometheus/api/v1/query_range?query=1&start=-9223372036&end=9223372036&step=1").await;
    prom_error(&got, StatusCode::BAD_REQUEST, "bad_data", "11000 points");
    let (s, _) = get(&st, "/ping").await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}

/// 11: a body that trickles is cut off (through the real listener: the
/// timeout is the connection's, not the router's).
#[tokio::test]
async fn a_trickling_body_is_cut_off_and_the_slot_freed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_d, st) = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = api::serve::ServeLimits {
        max_connections: 2,
        body_idle_timeout: Duration::from_millis(300),
        ..api::serve::ServeLimits::default()
    };
    let stats = Arc::clone(&st.http);
    let server =
        tokio::spawn(api::serve::serve(listener, api::router(st.clone()), limits, stats, std::future::pending()));
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"POST /write?db=a HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nx").await.unwrap();
        slow.push(c);
    }
    // Both slots are held until the bodies time out; then each is answered
    // 408 and closed, and /ping gets a slot.
    for mut c in slow {
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).await.unwrap();
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    }
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 204"));
    assert_eq!(st.http.body_timeouts.load(std::sync::atomic::Ordering::Relaxed), 2);
    server.abort();
}

/// 17, 18: a page on another origin cannot write through the browser (with
/// the dashboard's cookie, or to an open server); tokens ride in headers,
/// not URLs, except on InfluxDB's two endpoints; a host-bound token asking
/// for load jobs is forbidden (403), not malformed.
#[tokio::test]
async fn cross_origin_writes_and_tokens_in_urls_are_refused() {
    let (_d, mut st) = fixture();
    let line = || Body::from(format!("m v=1 {T0}\n"));
    // No tokens: a browser's cross-origin POST is refused; a client that is
    // not a browser (no Origin) and the page's own origin write.
    let from = |origin: &str| {
        Request::post("/write?db=a").header("host", "127.0.0.1:7070").header("origin", origin).body(line()).unwrap()
    };
    let (s, b) = send(&st, from("http://127.0.0.1:8000")).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    assert!(b.contains("another origin"), "{b}");
    assert_eq!(send(&st, from("http://127.0.0.1:7070")).await.0, StatusCode::NO_CONTENT);
    assert_eq!(send(&st, Request::post("/write?db=a").body(line()).unwrap()).await.0, StatusCode::NO_CONTENT);
    let cross_site = Request::post("/write?db=a").header("sec-fetch-site", "same-site").body(line()).unwrap();
    assert_eq!(send(&st, cross_site).await.0, StatusCode::FORBIDDEN);
    // A query POSTed from another origin (Grafana's browser access) is a read.
    let query = Request::post("/prometheus/api/v1/query")
        .header("origin", "http://grafana:3000")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("query=1"))
        .unwrap();
    assert_eq!(send(&st, query).await.0, StatusCode::OK);

    st.tokens = Some(Arc::new(access::TokenFile::fixed(
        access::Tokens::parse("free-token-0123456789\nbound-token-0123456789 node-3\n").unwrap(),
    )));
    let cookie = "kansoku_token=free-token-0123456789";
    // The cookie alone (text/plain from a form elsewhere, no Origin) is not
    // enough to write; from the dashboard's origin it is.
    let (s, b) = send(&st, Request::post("/write?db=a").header("cookie", cookie).body(line()).unwrap()).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    let own = Request::post("/write?db=a").header("cookie", cookie).header("sec-fetch-site", "same-origin");
    assert_eq!(send(&st, own.body(line()).unwrap()).await.0, StatusCode::NO_CONTENT);
    let (s, _) = send(&st, Request::get("/api/v1/series").header("cookie", cookie).body(Body::empty()).unwrap()).await;
    assert_eq!(s, StatusCode::OK, "reading with the cookie is the dashboard's way");
    // A token in the URL: on /write and /query only.
    let (s, b) = get(&st, "/api/v1/series?p=free-token-0123456789").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{b}");
    assert!(b.contains("send it in a header"), "{b}");
    let (s, _) = get(&st, "/query?q=SHOW%20DATABASES&p=free-token-0123456789").await;
    assert_eq!(s, StatusCode::OK);
    // A host-bound token cannot start load jobs: forbidden.
    let job = Request::post("/api/v1/jobs/load")
        .header("authorization", "Bearer bound-token-0123456789")
        .body(Body::from(r#"{"agents":["a"],"args":["http://127.0.0.1:9/"]}"#))
        .unwrap();
    let (s, b) = send(&st, job).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
}

/// The processes and cgroups table (`/api/v1/tasks`): every parameter out
/// of its range is a 400 naming it; the widest range the clock allows, an
/// injected host and the most points are answered (within the data there
/// is), and the server goes on.
#[tokio::test]
async fn the_tasks_table_bounds_its_parameters() {
    let (_d, st) = fixture();
    for (q, want) in [
        ("kind=processes", "missing parameter `host`"),
        ("host=h&kind=threads", "`kind`: one of processes, cgroups"),
        ("host=h&n=0", "`n`: a number from 1 to 1000"),
        ("host=h&n=1001", "`n`: a number from 1 to 1000"),
        ("host=h&points=99999999999999999999", "`points`: a number from 1 to 1000"),
        ("host=h&points=-1", "`points`: a number from 1 to 1000"),
        ("host=h&from=10&to=5", "is after `to`"),
        ("host=h&from=nonsense", ""),
    ] {
        let (s, body) = get(&st, &format!("/api/v1/tasks?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {body}");
        assert!(json(&body)["error"].as_str().unwrap().contains(want), "{q}: {body}");
    }
    for q in [
        format!("host={}&from=-9223372036&to=9223372036&points=1000&n=1000", enc("h\"}) or vector(1) # ")),
        "host=h&kind=cgroups&since=100000d&points=1000".to_owned(),
    ] {
        let (s, body) = get(&st, &format!("/api/v1/tasks?{q}")).await;
        assert!(s == StatusCode::OK || s == StatusCode::BAD_REQUEST, "{q}: {s} {body}");
        if s == StatusCode::OK {
            assert_eq!(json(&body)["rows"].as_array().map(Vec::len), Some(0), "{q}: no task series here: {body}");
        }
    }
    let (s, _) = get(&st, "/ping").await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}

/// The profiles' `within` (issue 44): past a minute, negative or not a
/// duration is a 400 naming it; the longest, over the widest range, is
/// answered (no events here: complete at once), and the server goes on.
#[tokio::test]
async fn a_profile_s_within_is_bounded() {
    let (_d, st) = fixture();
    for view in ["flame", "top"] {
        for bad in ["61s", "-1s", "soon", "99999999999999999999h"] {
            let (s, body) = get(&st, &format!("/api/v1/profile/{view}?host=h&since=15m&within={bad}")).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{view} {bad}: {body}");
            assert!(json(&body)["error"].as_str().unwrap().contains("`within`"), "{view} {bad}: {body}");
        }
        let (s, body) = get(&st, &format!("/api/v1/profile/{view}?host=h&since=100000d&within=60s")).await;
        assert_eq!(s, StatusCode::OK, "{view}: {body}");
        assert_eq!(json(&body)["complete"], true, "{view}: {body}");
    }
    // The counted views over the widest range: a day of kept minutes at
    // most, the rest one raw part (it listed 144 M minutes first).
    for view in ["folded", "pprof", "timeline"] {
        let (s, body) = get(&st, &format!("/api/v1/profile/{view}?host=h&since=100000d")).await;
        assert_eq!(s, StatusCode::OK, "{view}: {body}");
    }
    let (s, _) = get(&st, "/ping").await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}
