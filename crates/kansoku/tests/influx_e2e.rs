//! The InfluxDB 1.x endpoints of `kansoku server`: the Python `influxdb`
//! package (Debian's) writes DataFrames and reads them back; gzip bodies,
//! precisions, bad lines and `/metrics` over raw HTTP.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use common::{http_get, start};

fn post(addr: &str, path: &str, headers: &str, body: &[u8]) -> (u16, String) {
    common::http_post(addr, path, headers, body)
}

#[test]
fn python_influxdb_client_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], dir.path());
    let port = srv.addr.rsplit(':').next().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/influx_client_check.py");
    // Debian's interpreter, where python3-influxdb and python3-pandas live.
    let out = Command::new("/usr/bin/python3").arg(script).arg(port).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn gzip_precision_bad_lines_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], dir.path());
    let a = &srv.addr;
    let (status, _) = http_get(a, "/ping");
    assert_eq!(status, 204);
    common::create_database(a, "d", "");

    let lines = "m,host=a v=1.5,n=7i,ip=18446744073709551615u 1700000000\nm,host=a v=2.5 1700000001\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(lines.as_bytes()).unwrap();
    let body = gz.finish().unwrap();
    let (status, resp) = post(a, "/write?db=d&precision=s", "Content-Encoding: gzip\r\n", &body);
    assert_eq!(status, 204, "{resp}");
    let (status, resp) = http_get(a, "/query?db=d&epoch=s&q=SELECT%20*%20FROM%20m");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    let s = &v["results"][0]["series"][0];
    assert_eq!(s["columns"], serde_json::json!(["time", "host", "ip", "n", "v"]), "{v}");
    assert_eq!(s["values"][0], serde_json::json!([1700000000, "a", 18446744073709551615u64, 7, 1.5]), "{v}");
    assert_eq!(s["values"][1], serde_json::json!([1700000001, "a", null, null, 2.5]), "{v}");

    // Good lines are stored, bad ones reported: InfluxDB's partial write.
    let (status, resp) = post(a, "/write?db=d", "", b"m v=3 1700000002000000000\nm v=oops\nm\n");
    assert_eq!(status, 400);
    assert!(resp.contains("partial write") && resp.contains("1 more"), "{resp}");
    let (_, resp) = http_get(a, "/query?db=d&epoch=s&q=SELECT%20v%20FROM%20m%20WHERE%20time%20%3E%201700000001s");
    assert!(resp.contains("\"columns\":[\"time\",\"v\"]") && resp.contains("[1700000002,3]"), "{resp}");
    let (status, resp) = post(a, "/write", "", b"m v=1\n");
    assert_eq!(status, 404, "{resp}");
    let (status, resp) = http_get(a, "/query?db=d&q=DELETE%20FROM%20m");
    assert_eq!(status, 400, "{resp}");

    let (status, metrics) = http_get(a, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("kansoku_influx_bad_lines_total 2\n"), "{metrics}");
    assert!(metrics.contains("kansoku_influx_points_total 5\n"), "{metrics}");
    assert!(metrics.contains("# TYPE kansoku_store_samples_appended_total counter"), "{metrics}");
    assert!(metrics.contains("# TYPE kansoku_store_series gauge"), "{metrics}");
}

#[test]
fn with_tokens_writing_needs_one() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "bound-token-0123456789 node-9\nfree-token-0123456789\nread reader-token-0123456789\n")
        .unwrap();
    let data = dir.path().join("data");
    // A tokens file others can read is refused, naming the fix.
    let out = common::run(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--ingest",
        "127.0.0.1:0",
        "--tokens",
        tokens.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("open to other users") && err.contains("chmod 600"), "{err}");
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let srv = start(
        &["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap()],
        &data,
    );
    let a = &srv.addr;
    common::create_database(a, "d", "Authorization: Token free-token-0123456789\r\n");
    let line = b"m,host=spoofed v=1 1700000000000000000\n";
    let (status, resp) = post(a, "/write?db=d", "", line);
    assert_eq!(status, 401, "{resp}");
    let (status, resp) = post(a, "/write?db=d", "Authorization: Token wrong-token-0123456789\r\n", line);
    assert_eq!((status, resp.contains("unknown token")), (401, true), "{resp}");
    // A host-bound token writes as its host, whatever the tags say.
    let (status, resp) = post(a, "/write?db=d", "Authorization: Bearer bound-token-0123456789\r\n", line);
    assert_eq!(status, 204, "{resp}");
    // The Python client's username/password: Basic, the token as password.
    let basic = "Authorization: Basic dXNlcjpmcmVlLXRva2VuLTAxMjM0NTY3ODk=\r\n"; // user:free-token-0123456789
    let (status, resp) = post(a, "/write?db=d", basic, b"m,host=h2 v=2 1700000000000000000\n");
    assert_eq!(status, 204, "{resp}");
    let (status, resp) = post(a, "/write?db=d&p=free-token-0123456789", "", b"m,host=h3 v=3 1700000000000000000\n");
    assert_eq!(status, 204, "{resp}");
    let (_, resp) = http_get(a, "/query?db=d&q=SELECT%20*%20FROM%20m&p=reader-token-0123456789");
    assert!(
        resp.contains("\"node-9\"") && !resp.contains("spoofed") && resp.contains("\"h2\"") && resp.contains("\"h3\""),
        "{resp}"
    );

    // Reading needs a token too: every endpoint but /ping.
    for path in [
        "/api/v1/series",
        "/api/v1/query?query=m_v",
        "/api/v1/status",
        "/api/v1/hosts",
        "/api/v1/live?match=m_v",
        "/api/v1/profile/top?host=h",
        "/api/v1/snmp/targets",
        "/metrics",
        "/query?q=SHOW%20DATABASES",
        "/",
    ] {
        let (status, resp) = http_get(a, path);
        assert_eq!(status, 401, "{path}: {resp}");
        let (status, resp) =
            http_get(a, &format!("{path}{}p=wrong-token-0123456789", if path.contains('?') { '&' } else { '?' }));
        assert_eq!(status, 401, "{path}: {resp}");
    }
    assert_eq!(http_get(a, "/ping").0, 204);
    // A read-only token reads, and cannot write.
    let reader = "Authorization: Token reader-token-0123456789\r\n";
    let (status, resp) = http_get(a, "/api/v1/series?p=reader-token-0123456789");
    assert!(status == 401 && resp.contains("send it in a header"), "{resp}");
    let (status, resp) = common::http_get_with(a, "/api/v1/series", reader);
    assert!(status == 200 && resp.contains("node-9"), "{resp}");
    let (status, resp) = post(a, "/write?db=d&p=reader-token-0123456789", "", b"m v=9\n");
    assert_eq!(status, 403, "{resp}");
    let (status, resp) = http_get(a, "/query?q=CREATE%20DATABASE%20x&p=reader-token-0123456789");
    assert_eq!(status, 403, "{resp}");
    // The token is checked before the body is read: an anonymous client's
    // garbage gzip is refused as unauthorised, not parsed.
    let (status, resp) = post(a, "/write?db=d", "Content-Encoding: gzip\r\n", b"not gzip at all");
    assert_eq!(status, 401, "{resp}");
    // A browser signs in once: /login sets the cookie the dashboard carries.
    let mut s = TcpStream::connect(a.as_str()).unwrap();
    write!(s, "GET /login?token=reader-token-0123456789 HTTP/1.0\r\nHost: {a}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.contains("kansoku_token=reader-token-0123456789; Path=/; HttpOnly"), "{resp}");
    let mut s = TcpStream::connect(a.as_str()).unwrap();
    write!(s, "GET /api/v1/series HTTP/1.0\r\nHost: {a}\r\nCookie: x=1; kansoku_token=reader-token-0123456789\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.0 200") && resp.contains("node-9"), "{resp}");
    let (_, status) = common::http_get_with(a, "/api/v1/status", reader);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["http"]["auth_refused"].as_u64().unwrap() >= 24, "{status}");
}

/// The same points in kansoku and in a real InfluxDB 1.6 (Debian's
/// `influxd`, started here); the InfluxQL a 1.x client sends — SHOW
/// MEASUREMENTS, TAG KEYS, FIELD KEYS, TAG VALUES, SELECT with tag and time
/// conditions, ORDER BY time DESC, LIMIT, aggregates by tags and by time
/// buckets with fill() — answered identically.
#[test]
fn influxql_answers_as_influxdb_does() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &dir.path().join("k"));
    let (http_port, rpc_port) = (common::free_port(), common::free_port());
    let d = dir.path().join("influxd");
    let conf = dir.path().join("influxdb.conf");
    std::fs::write(
        &conf,
        format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:{rpc_port}\"\n[meta]\n  dir = \"{0}/meta\"\n[data]\n  dir = \"{0}/data\"\n  wal-dir = \"{0}/wal\"\n  query-log-enabled = false\n[http]\n  bind-address = \"127.0.0.1:{http_port}\"\n  log-enabled = false\n",
            d.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new("influxd");
    cmd.arg("-config").arg(&conf);
    let _influxd = common::peer(cmd, "Listening on HTTP");
    let influx = format!("127.0.0.1:{http_port}");
    let mut lines = String::new();
    for i in 0..20u64 {
        let (host, region) = (["a", "b"][(i % 2) as usize], ["eu", "us"][(i / 2 % 2) as usize]);
        lines.push_str(&format!(
            "cpu,host={host},region={region} load={},n={}i {}\n",
            i as f64 / 8.0,
            i * 3,
            1_767_225_600 + i
        ));
        if i % 3 == 0 {
            // `free` only on some points: conditions on a missing field.
            let free = if i % 2 == 0 { format!(",free={}i", 100 - i) } else { String::new() };
            lines.push_str(&format!("mem,host={host} used={}{free} {}\n", 1000.0 + i as f64 * 0.25, 1_767_225_600 + i));
        }
    }
    for addr in [&srv.addr, &influx] {
        let (s, body) =
            post(addr, "/query", "Content-Type: application/x-www-form-urlencoded\r\n", b"q=CREATE%20DATABASE%20lab");
        assert_eq!(s, 200, "{addr}: {body}");
        let (s, body) = post(addr, "/write?db=lab&precision=s", "", lines.as_bytes());
        assert_eq!(s, 204, "{addr}: {body}");
        // Times off the second, for RFC 3339 answers (issue 49).
        let frac = b"frac v=1 1767225600500000000\nfrac v=2 1767225601000000001\nfrac v=3 1767225602120000000\n\
            tie,host=a v=1,w=5i 1767225600000000000\ntie,host=b v=2,w=5i 1767225600000000000\n\
            tie,host=c v=2,w=3i 1767225601000000000\ntie,host=a v=0.5,w=3i 1767225601000000000\n";
        let (s, body) = post(addr, "/write?db=lab", "", frac);
        assert_eq!(s, 204, "{addr}: {body}");
        // Issue 49: a load in four shuffled requests, then rewrites of
        // some of its points — every one kept, the last write winning.
        // String fields (issue 49): spaces, commas, `=`, quotes and
        // backslashes, the empty string, one rewritten.
        let mut log = String::new();
        for i in 0..12u64 {
            let msg = ["disk full", "ok, fine", "a=b \\\"q\\\"", "", "C:\\\\tmp\\n", "日本語"][(i % 6) as usize];
            let level = ["info", "warn", "info", "error"][(i % 4) as usize];
            log.push_str(&format!(
                "log,host={} msg=\"{msg}\",level=\"{level}\",code={}i {}\n",
                ["a", "b"][(i % 2) as usize],
                i % 5,
                1_767_225_600 + i
            ));
        }
        log.push_str("log,host=a msg=\"rewritten\" 1767225602\n");
        let (s, body) = post(addr, "/write?db=lab&precision=s", "", log.as_bytes());
        assert_eq!(s, 204, "{addr}: {body}");
        for part in [3, 1, 0, 2, 4] {
            let mut body = String::new();
            for i in (0..40u64).filter(|i| if part == 4 { i % 10 == 0 } else { i % 4 == part }) {
                for host in ["a", "b"] {
                    let v = if part == 4 { 1000 + i } else { i * 2 + u64::from(host == "b") };
                    // A boolean beside them, as Telegraf sends some.
                    let ok =
                        if part == 4 { String::new() } else { format!(",ok={}", ["true", "F", "t"][(i % 3) as usize]) };
                    body.push_str(&format!("ooo,host={host} v={v},w={}i{ok} {}\n", i % 7, 1_767_225_600 + i));
                }
            }
            let (s, out) = post(addr, "/write?db=lab&precision=s", "", body.as_bytes());
            assert_eq!(s, 204, "{addr}: {out}");
        }
    }
    let queries = [
        // Arithmetic with numbers (Grafana's math part: bytes to bits, …).
        "SELECT load * 2, n * 2, n / 4, n + 0.5, n % 7, n - 100 FROM cpu WHERE host = 'a'",
        "SELECT mean(load) * 8 FROM cpu GROUP BY host",
        "SELECT mean(load) * 100 / 8 AS pct, max(n) - 1 FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s) fill(none)",
        "SELECT 2 * (load + 1) FROM cpu WHERE host = 'b' LIMIT 3",
        "SELECT load / 0, n / 0, n % 0 FROM cpu LIMIT 2",
        "SELECT -load, 1 - n FROM cpu LIMIT 2",
        "SELECT used / 1024 / 1024, free * 1.5 FROM mem",
        "SELECT mean(used) * 8 FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s) fill(5)",
        "SELECT load, load * 2, host FROM cpu LIMIT 2",
        // Out of order and rewritten (issue 49).
        "SELECT * FROM ooo",
        "SELECT count(v), sum(v), first(v), last(v), max(w) FROM ooo GROUP BY host",
        "SELECT mean(v) FROM ooo WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:40Z' GROUP BY time(10s), host",
        "SELECT v FROM ooo WHERE host = 'b' ORDER BY time DESC LIMIT 5",
        // FROM /regex/: every measurement it matches (issue 49).
        "SELECT count(v) FROM /oo|tie/ GROUP BY host",
        "SELECT * FROM /^fr/",
        "SELECT mean(load), max(used) FROM /cpu|mem/",
        "SELECT v FROM /nomatch/",
        "SELECT last(v) FROM /./ WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:40Z' GROUP BY time(20s) fill(none)",
        // Casts (issue 49).
        "SELECT load::string, n::float, load::integer, n::integer, load::float FROM cpu LIMIT 3",
        "SELECT msg::string, code::float, msg::float, level::boolean FROM log LIMIT 3",
        "SELECT ok::boolean, v::integer, w::unsigned FROM ooo LIMIT 3",
        "SELECT msg::tag, host::field FROM log",
        "SELECT host::tag, load::field FROM cpu LIMIT 2",
        "SELECT load::string FROM cpu",
        "SELECT n::integer * 2, load::integer + 1 FROM cpu LIMIT 2",
        // What a hostile review found (issue 49).
        "SELECT first(msg) FROM log WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s) fill(0)",
        "SELECT first(msg) + 1 FROM log",
        "SELECT /^lo/, n * 10 FROM cpu LIMIT 2",
        "SELECT mean(*), max(n) * 2 FROM cpu",
        "SELECT msg::integer, msg FROM log LIMIT 2",
        // SHOW … FROM /re/ (issue 49).
        "SHOW FIELD KEYS FROM /o/",
        "SHOW TAG KEYS FROM /^(cpu|mem)$/",
        "SHOW SERIES FROM /m/",
        "SHOW TAG VALUES FROM /c/ WITH KEY = host",
        "SHOW SERIES CARDINALITY FROM /oo/",
        "SHOW FIELD KEYS FROM /nomatch/",
        // Arithmetic between fields and between functions (issue 49).
        "SELECT load + n, n * 2 - load FROM cpu WHERE host = 'a' LIMIT 4",
        "SELECT sum(load) / count(load) FROM cpu GROUP BY host",
        "SELECT mean(load) + max(n) AS x, min(n) FROM cpu",
        "SELECT used - free, free FROM mem",
        "SELECT n % 4 + n / 2, n - n, (load + n) * 2 FROM cpu LIMIT 3",
        "SELECT count(v) * 2 + sum(w) FROM ooo WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:40Z' GROUP BY time(10s), host",
        "SELECT sum(v) - sum(w), mean(v) FROM ooo WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:40Z' GROUP BY time(8s) fill(none)",
        "SELECT msg + code, code + code FROM log LIMIT 2",
        "SELECT load / n FROM cpu LIMIT 3",
        // Wildcards: in functions, and regexes as items (issue 49).
        "SELECT mean(*) FROM cpu GROUP BY host",
        "SELECT count(*) FROM log",
        "SELECT max(*), min(*) FROM ooo",
        "SELECT first(*), last(*) FROM log GROUP BY host",
        "SELECT count(/o/) FROM ooo",
        "SELECT percentile(*, 50) FROM cpu",
        "SELECT sum(*) FROM log",
        "SELECT distinct(*) FROM tie",
        "SELECT mean(*) FROM /cpu|mem/",
        "SELECT /o/ FROM cpu LIMIT 3",
        "SELECT /^(l|h)/ FROM cpu WHERE region = 'us' LIMIT 3",
        "SELECT /zzz/ FROM cpu",
        "SELECT count(*) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(10s)",
        // Strings as strings (issue 49).
        "SHOW FIELD KEYS FROM log",
        "SELECT * FROM log",
        "SELECT msg, code FROM log WHERE level = 'warn'",
        "SELECT msg FROM log WHERE msg =~ /dis|fine/",
        "SELECT msg FROM log WHERE msg != '' AND host = 'b'",
        "SELECT msg FROM log WHERE msg > 'm' OR msg = ''",
        "SELECT msg FROM log WHERE msg = 5",
        "SELECT level, code FROM log WHERE level = 'info' AND code > 1",
        "SELECT count(msg), first(msg), last(msg) FROM log GROUP BY host",
        "SELECT distinct(level) FROM log",
        "SELECT distinct(msg) FROM log WHERE host = 'a'",
        "SELECT mode(level) FROM log GROUP BY host",
        "SELECT count(distinct(level)) FROM log",
        "SELECT mean(msg) FROM log",
        "SELECT max(level) FROM log",
        "SELECT min(level) FROM log",
        "SELECT sum(msg) FROM log",
        "SELECT median(msg) FROM log",
        "SELECT spread(msg) FROM log",
        "SELECT stddev(msg) FROM log",
        "SELECT percentile(msg, 50) FROM log",
        "SELECT integral(msg) FROM log",
        "SELECT top(level, 2) FROM log",
        "SELECT msg * 2, code * 2 FROM log LIMIT 3",
        "SELECT derivative(msg) FROM log",
        "SELECT last(msg) FROM log WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s) fill(previous)",
        "SELECT first(level), count(level) FROM log WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s) fill(none)",
        "SELECT * FROM log WHERE level::field = 'error'",
        // Booleans as booleans (issue 49).
        "SHOW FIELD KEYS FROM ooo",
        "SELECT ok, v FROM ooo WHERE host = 'a' LIMIT 4",
        "SELECT count(ok), first(ok), last(ok) FROM ooo GROUP BY host",
        "SELECT distinct(ok) FROM ooo",
        "SELECT mode(ok) FROM ooo",
        "SELECT * FROM ooo WHERE ok = true AND host = 'b' LIMIT 3",
        "SELECT v FROM ooo WHERE ok = false LIMIT 3",
        "SELECT mean(ok) FROM ooo",
        "SELECT max(ok) FROM ooo",
        "SELECT sum(ok) FROM ooo",
        "SELECT median(ok) FROM ooo",
        "SELECT spread(ok) FROM ooo",
        "SELECT stddev(ok) FROM ooo",
        "SELECT percentile(ok, 50) FROM ooo",
        "SELECT integral(ok) FROM ooo",
        "SELECT min(ok), count(distinct(ok)) FROM ooo",
        "SELECT distinct(ok) FROM ooo WHERE host = 'a' AND time >= '2026-01-01T00:00:01Z'",
        "SELECT count(ok) FROM ooo WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:40Z' GROUP BY time(20s)",
        "SHOW MEASUREMENTS",
        "SHOW TAG KEYS",
        "SHOW TAG KEYS FROM cpu",
        "SHOW FIELD KEYS",
        "SHOW FIELD KEYS FROM mem",
        "SHOW TAG VALUES WITH KEY = host",
        "SHOW TAG VALUES FROM cpu WITH KEY = region",
        "SELECT * FROM cpu",
        "SELECT load, n FROM cpu WHERE host = 'a'",
        "SELECT * FROM cpu ORDER BY time DESC LIMIT 3",
        "SELECT load FROM cpu WHERE time >= '2026-01-01T00:00:05Z' AND time < '2026-01-01T00:00:12Z' ORDER BY time DESC",
        "SELECT * FROM mem WHERE host = 'b' LIMIT 2",
        "SELECT used FROM mem WHERE host = 'nobody'",
        "SELECT * FROM cpu WHERE host != 'a' AND region =~ /u/ LIMIT 3",
        "SELECT load FROM cpu WHERE region !~ /^e/ LIMIT 4 OFFSET 2",
        "SELECT * FROM cpu WHERE host =~ /a|b/ ORDER BY time DESC LIMIT 2 OFFSET 1",
        "SHOW SERIES",
        "SHOW SERIES FROM mem",
        "SELECT count(load) FROM cpu",
        "SELECT count(load) FROM cpu WHERE region = 'eu' GROUP BY host",
        "SELECT mean(load), max(n) FROM cpu GROUP BY host",
        "SELECT max(load) FROM cpu",
        "SELECT min(load) FROM cpu WHERE host = 'b'",
        "SELECT first(load), last(load) FROM cpu GROUP BY region",
        "SELECT spread(n), median(load), sum(n) FROM cpu",
        "SELECT mean(load) AS avg FROM cpu GROUP BY *",
        "SELECT stddev(load) FROM cpu GROUP BY host",
        "SELECT sum(n) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s)",
        "SELECT count(load), mean(load) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:30Z' GROUP BY time(10s)",
        "SELECT count(load) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:30Z' GROUP BY time(10s) fill(none)",
        "SELECT mean(used) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s), host fill(0)",
        "SELECT last(used) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s) fill(previous)",
        "SELECT mean(load) FROM cpu WHERE time >= '2026-01-01T00:00:03Z' AND time <= '2026-01-01T00:00:09Z'",
        // The grammar: OR, parentheses, field conditions, casts.
        "SELECT load FROM cpu WHERE host = 'a' OR region = 'us'",
        "SELECT load FROM cpu WHERE host = 'a' OR load > 2",
        "SELECT load FROM cpu WHERE (host = 'a' OR region = 'us') AND n > 30",
        "SELECT * FROM cpu WHERE load > 1 AND (region = 'eu' OR n < 40) LIMIT 4",
        "SELECT load FROM cpu WHERE n != 3 AND n <> 6 AND load <= 1",
        "SELECT n FROM cpu WHERE load > 2 AND load < 2.3",
        "SELECT load FROM cpu WHERE n > 50.5 OR n = 0",
        "SELECT load FROM cpu WHERE load >= '2'",
        "SELECT load FROM cpu WHERE nosuch = 1",
        "SELECT load FROM cpu WHERE host = 1",
        "SELECT \"load\"::field, host::tag FROM cpu WHERE host::tag = 'b' LIMIT 3",
        "SELECT used, free FROM mem WHERE free > 90",
        "SELECT used FROM mem WHERE free != 94",
        "SELECT used FROM mem WHERE free < 95 OR host = 'b'",
        "SELECT load AS l, host FROM cpu WHERE region = 'us' LIMIT 3",
        // Functions.
        "SELECT percentile(load, 50) FROM cpu",
        "SELECT percentile(load, 90), count(load) FROM cpu GROUP BY host",
        "SELECT percentile(load, 0), percentile(load, 100), percentile(n, 33.3) FROM cpu",
        "SELECT distinct(n) FROM cpu WHERE n < 20",
        "SELECT distinct(n) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:06Z' GROUP BY time(3s)",
        "SELECT count(distinct(n)) FROM cpu GROUP BY region",
        "SELECT distinct(n) FROM cpu WHERE host = 'a' AND load > 1 AND time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s) fill(0)",
        "SELECT distinct(n) FROM cpu WHERE host = 'a' AND load > 1 AND time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s) fill(previous)",
        "SELECT count(distinct(n)) FROM cpu WHERE load > 1 AND time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s)",
        "SELECT mean(load) FROM cpu WHERE n > 20 GROUP BY host",
        "SELECT max(used) FROM mem WHERE free > 0",
        "SELECT mean(load), mean(n) FROM cpu",
        // Grouping, ordering, paging.
        "SELECT mean(load) FROM cpu GROUP BY host SLIMIT 1 SOFFSET 1",
        "SELECT max(load) FROM cpu GROUP BY host, region SLIMIT 2",
        "SELECT mean(load) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s) ORDER BY time DESC",
        "SELECT mean(load) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s) LIMIT 2 OFFSET 1",
        "SELECT sum(n) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s, 2s)",
        "SELECT mean(used) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(2s) fill(linear)",
        "SELECT sum(free) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(2s) fill(linear)",
        "SELECT load FROM cpu GROUP BY host LIMIT 2",
        "SELECT * FROM cpu GROUP BY region ORDER BY time DESC LIMIT 2",
        "SELECT count(n) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(10s), host ORDER BY time DESC SLIMIT 1",
        "SELECT * FROM cpu WHERE region = 'eu' GROUP BY * LIMIT 1",
        // SHOW with filters.
        "SHOW MEASUREMENTS WITH MEASUREMENT =~ /c.u/",
        "SHOW MEASUREMENTS WITH MEASUREMENT = mem",
        "SHOW TAG VALUES WITH KEY IN (host, region)",
        "SHOW TAG VALUES WITH KEY =~ /reg/",
        "SHOW TAG VALUES FROM cpu WITH KEY != host",
        "SHOW SERIES WHERE host = 'a'",
        "SHOW SERIES FROM cpu WHERE region =~ /u/ AND host != 'b'",
        "SELECT load FROM cpu WHERE time > '2026-01-01T00:00:15Z'; SHOW TAG KEYS FROM mem",
        // Issue 49: grouping order, repeated and `time` columns, names
        // qualified by database and policy.
        "SELECT mean(load) FROM cpu GROUP BY region, host",
        "SELECT count(n) FROM cpu GROUP BY \"region\",\"host\" SLIMIT 3",
        "SELECT load, load FROM cpu LIMIT 2",
        "SELECT load, n, load FROM cpu WHERE host = 'b' LIMIT 2",
        "SELECT time, load FROM cpu LIMIT 2",
        "SELECT load FROM \"lab\".\"autogen\".\"cpu\" LIMIT 2",
        "SELECT load FROM lab..cpu LIMIT 2",
        "SELECT mean(load), mean(load) FROM cpu",
        // As Grafana's InfluxQL editor writes them (epoch-ms time filters,
        // lowercase keywords, quoted names, `fill(null)`).
        "SELECT mean(\"load\") FROM \"cpu\" WHERE (\"host\" = 'a') AND time >= 1767225600000ms and time <= 1767225619000ms GROUP BY time(5s) fill(null)",
        "SELECT max(\"n\") FROM \"autogen\".\"cpu\" WHERE time >= 1767225600000ms and time <= 1767225619000ms GROUP BY time(2s), \"host\" fill(none)",
        "SELECT non_negative_derivative(mean(\"n\"), 1s) FROM \"cpu\" WHERE time >= 1767225600000ms and time <= 1767225619000ms GROUP BY time(4s), \"region\" fill(null)",
        "SELECT \"load\" FROM \"cpu\" WHERE time >= 1767225610000ms and time <= 1767225613000ms",
        "select count(load) from cpu where time > '2026-01-01' group by host",
        "SELECT count(load) FROM cpu WHERE time >= '2026-01-01 00:00:05' AND time < '2026-01-01 00:00:10'",
        // Ties across series at one time, and casts (issue 49).
        "SELECT first(v), last(v) FROM tie",
        "SELECT first(w) FROM tie",
        "SELECT last(w) FROM tie",
        "SELECT min(v), max(w) FROM tie",
        "SELECT max(v) FROM tie",
        "SELECT percentile(v, 50) FROM tie",
        "SELECT percentile(w, 50) FROM tie",
        "SELECT median(w), spread(v) FROM tie",
        "SELECT load::integer FROM cpu LIMIT 3",
        "SELECT n::float, load::float FROM cpu LIMIT 3",
        "SELECT used::integer FROM mem LIMIT 2",
        // Cardinality, and more functions (issue 49).
        "SHOW SERIES CARDINALITY",
        "SHOW SERIES EXACT CARDINALITY",
        "SHOW SERIES EXACT CARDINALITY FROM cpu",
        "SHOW MEASUREMENT CARDINALITY",
        "SHOW MEASUREMENT EXACT CARDINALITY",
        "SHOW TAG KEY CARDINALITY",
        "SHOW TAG KEY EXACT CARDINALITY FROM cpu",
        "SHOW TAG VALUES CARDINALITY WITH KEY = host",
        "SHOW TAG VALUES EXACT CARDINALITY FROM cpu WITH KEY = region",
        "SHOW FIELD KEY CARDINALITY",
        "SHOW FIELD KEY EXACT CARDINALITY FROM mem",
        "SELECT mode(n) FROM cpu GROUP BY region",
        "SELECT mode(w) FROM tie",
        "SELECT integral(load) FROM cpu WHERE host = 'a'",
        "SELECT integral(n, 2s) FROM cpu WHERE region = 'us'",
        "SELECT integral(load, 1m) FROM cpu",
        "SELECT integral(used) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(6s)",
        "SELECT top(load, 3) FROM cpu",
        "SELECT bottom(n, 2) FROM cpu GROUP BY region",
        "SELECT top(used, 2) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(10s)",
        "SELECT bottom(load, 1) AS low FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s), host",
        "SELECT top(w, 2) FROM tie",
        // Math functions, of points and of functions (issue 49).
        "SELECT abs(load), round(load) FROM cpu WHERE host = 'a' LIMIT 3",
        "SELECT sqrt(load) FROM cpu GROUP BY host LIMIT 2",
        "SELECT exp(load) FROM cpu WHERE host = 'b' LIMIT 2",
        "SELECT round(mean(load)) FROM cpu GROUP BY host",
        "SELECT abs(n) FROM cpu LIMIT 3",
        "SELECT floor(used), ceil(used) FROM mem LIMIT 3",
        "SELECT sin(max(n)), cos(max(n)) FROM cpu",
        "SELECT log10(mean(used)) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s)",
        "SELECT atan(load) AS a FROM cpu WHERE region = 'us' LIMIT 2",
        // Transformations (issue 49), of points and of buckets.
        "SELECT derivative(load) FROM cpu WHERE host = 'a'",
        "SELECT derivative(load, 2s) FROM cpu GROUP BY host",
        "SELECT non_negative_derivative(n, 1s) FROM cpu GROUP BY host",
        "SELECT non_negative_derivative(load) AS rate FROM cpu WHERE region = 'eu' GROUP BY host",
        "SELECT difference(n) FROM cpu GROUP BY host",
        "SELECT difference(load) FROM cpu WHERE host = 'b' LIMIT 3",
        "SELECT non_negative_difference(load) FROM cpu GROUP BY region",
        "SELECT cumulative_sum(n) FROM cpu GROUP BY host",
        "SELECT cumulative_sum(load) FROM cpu WHERE host = 'a' LIMIT 4 OFFSET 2",
        "SELECT moving_average(load, 3) FROM cpu GROUP BY host",
        "SELECT moving_average(n, 2) FROM mem",
        "SELECT elapsed(load, 1s) FROM cpu GROUP BY host",
        "SELECT elapsed(used) FROM mem",
        "SELECT derivative(mean(load), 1s) FROM cpu WHERE time >= '2026-01-01T00:00:04Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s)",
        "SELECT derivative(mean(load)) FROM cpu WHERE time >= '2026-01-01T00:00:04Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s)",
        "SELECT non_negative_derivative(max(n), 1s) FROM cpu WHERE time >= '2026-01-01T00:00:04Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(4s), host",
        "SELECT difference(sum(n)) FROM cpu WHERE time >= '2026-01-01T00:00:05Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s)",
        "SELECT non_negative_difference(last(load)) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(3s)",
        "SELECT cumulative_sum(count(load)) FROM cpu WHERE time >= '2026-01-01T00:00:03Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(3s)",
        "SELECT moving_average(mean(load), 2) FROM cpu WHERE time >= '2026-01-01T00:00:04Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(2s)",
        "SELECT elapsed(mean(used), 1s) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(3s)",
        "SELECT derivative(mean(used), 1s) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(2s) fill(0)",
        "SELECT difference(mean(used)) FROM mem WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(2s)",
    ];
    let grid = grid();
    let mut differ = Vec::new();
    for q in queries.iter().copied().chain(grid.iter().map(String::as_str)) {
        let path = format!("/query?db=lab&epoch=ms&q={}", common::enc(q));
        let answers: Vec<serde_json::Value> = [&srv.addr, &influx].iter().map(|a| results(a, &path, q)).collect();
        // Math functions may differ in the last bit (influxd's `exp` and
        // `log` are Go's amd64 assembly): compared to 4 ulp, types exactly.
        let math =
            ["abs(", "round(", "sqrt(", "exp(", "sin(", "floor(", "log10(", "atan("].iter().any(|f| q.contains(f));
        let same = if math { json_close(&answers[0], &answers[1]) } else { answers[0] == answers[1] };
        if !same {
            differ.push(format!("{q}\n  kansoku  {}\n  influxdb {}", answers[0], answers[1]));
        }
    }
    // Times as RFC 3339 (no `epoch`), as influxd writes them; what Grafana
    // asks first.
    let rfc3339 = [
        "SELECT * FROM frac",
        "SELECT load FROM cpu LIMIT 3",
        "SELECT mean(load) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(5s)",
        "SELECT last(v) FROM frac",
        "SHOW RETENTION POLICIES",
        "SHOW RETENTION POLICIES ON lab",
    ];
    for q in rfc3339 {
        let path = format!("/query?db=lab&q={}", common::enc(q));
        let answers: Vec<serde_json::Value> = [&srv.addr, &influx].iter().map(|a| results(a, &path, q)).collect();
        if answers[0] != answers[1] {
            differ.push(format!("{q}\n  kansoku  {}\n  influxdb {}", answers[0], answers[1]));
        }
    }
    // A database that does not exist: 404 on /write, a statement error on
    // /query, the same from both (issue 49).
    let mut seen = Vec::new();
    for a in [&srv.addr, &influx] {
        let (s, body) = post(a, "/write?db=nosuchdb", "", b"m v=1 1767225600000000000\n");
        let (qs, qbody) = http_get(a, &format!("/query?db=nosuchdb&q={}", common::enc("SELECT * FROM cpu")));
        let results = serde_json::from_str::<serde_json::Value>(&qbody).unwrap()["results"].clone();
        seen.push((s, serde_json::from_str::<serde_json::Value>(&body).unwrap(), qs, results));
    }
    assert_eq!(seen[0], seen[1], "kansoku, then influxd");
    assert_eq!(seen[0].0, 404);
    // A measurement qualified by its database needs no `db=`.
    for q in ["SELECT load FROM \"lab\".\"autogen\".\"cpu\" LIMIT 2", "SELECT mean(n) FROM lab..cpu GROUP BY host"] {
        let path = format!("/query?epoch=ms&q={}", common::enc(q));
        let answers: Vec<serde_json::Value> = [&srv.addr, &influx]
            .iter()
            .map(|a| serde_json::from_str::<serde_json::Value>(&http_get(a, &path).1).unwrap()["results"].clone())
            .collect();
        assert_eq!(answers[0], answers[1], "{q}");
        assert!(answers[0][0]["series"].is_array(), "{q}: {}", answers[0]);
    }
    // A statement kansoku does not support is its own error: the others
    // answer as influxd's (issue 49: all were lost); a syntax error fails
    // the request on both.
    let q = "SELECT load FROM cpu LIMIT 2; SELECT sample(load, 2) FROM cpu; SHOW TAG KEYS FROM mem";
    let path = format!("/query?db=lab&epoch=ms&q={}", common::enc(q));
    let answers: Vec<serde_json::Value> = [&srv.addr, &influx].iter().map(|a| results(a, &path, q)).collect();
    assert_eq!((&answers[0][0], &answers[0][2]), (&answers[1][0], &answers[1][2]), "{q}");
    assert!(answers[0][1]["error"].as_str().is_some_and(|e| e.contains("sample() is not supported")), "{}", answers[0]);
    for a in [&srv.addr, &influx] {
        let (s, body) = http_get(a, &format!("/query?db=lab&q={}", common::enc("SELECT load FROM cpu; SELECT FROM")));
        assert_eq!(s, 400, "{a}: {body}");
    }
    // `chunked=true`: the same documents, line for line.
    let chunked = [
        ("SELECT load FROM cpu WHERE time < '2026-01-01T00:00:05Z'; SELECT mean(load) FROM cpu GROUP BY host", 2),
        ("SELECT * FROM mem", 10_000),
        ("SELECT * FROM nosuch; SHOW DATABASES; SHOW TAG VALUES WITH KEY = host", 1),
        ("SELECT n FROM cpu GROUP BY host", 3),
        (
            "SELECT max(load) FROM cpu WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z' GROUP BY time(2s)",
            4,
        ),
    ];
    for (q, size) in chunked {
        let path = format!("/query?db=lab&epoch=ms&chunked=true&chunk_size={size}&q={}", common::enc(q));
        let answers: Vec<Vec<serde_json::Value>> = [&srv.addr, &influx]
            .iter()
            .map(|a| {
                let (s, body) = http_get(a, &path);
                assert_eq!(s, 200, "{a} {q}: {body}");
                let mut docs: Vec<serde_json::Value> =
                    body.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
                // influxd lists its own `_internal` database too.
                for d in &mut docs {
                    if let Some(v) =
                        d.pointer_mut("/results/0/series/0/values").and_then(serde_json::Value::as_array_mut)
                    {
                        v.retain(|r| r[0] != "_internal");
                    }
                }
                docs
            })
            .collect();
        if answers[0] != answers[1] {
            differ.push(format!("chunked {size}: {q}\n  kansoku  {:?}\n  influxdb {:?}", answers[0], answers[1]));
        }
    }
    let total = queries.len() + grid.len() + chunked.len() + rfc3339.len();
    assert!(differ.is_empty(), "{} of {total} queries differ:\n{}", differ.len(), differ.join("\n"));
    eprintln!("influxql differential: {total}/{total} statements identical to influxd 1.6");
}

/// The `results` of a `/query` at `addr` (a 200 with JSON).
fn results(addr: &str, path: &str, q: &str) -> serde_json::Value {
    let (s, body) = http_get(addr, path);
    assert_eq!(s, 200, "{addr} {q}: {body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["results"].clone()
}

/// Equal JSON, numbers within 4 ulp (an integer still an integer).
fn json_close(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::{Array, Number, Object};
    match (a, b) {
        (Number(x), Number(y)) => {
            x.is_f64() == y.is_f64() && {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
            }
        }
        (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_close(x, y)),
        (Object(x), Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_close(v, w)))
        }
        _ => a == b,
    }
}

/// Every function on both fields (a float, an integer) under each kind of
/// condition and grouping: tags, `*`, time buckets with and without tags
/// and fills — the combinations where answers part ways (selectors' times,
/// integer sums, empty buckets, a single point's stddev).
fn grid() -> Vec<String> {
    const RANGE: &str = "time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T00:00:20Z'";
    let functions =
        ["count", "sum", "mean", "median", "min", "max", "first", "last", "spread", "stddev", "percentile", "distinct"];
    let conditions = ["", "host = 'a'", "(region =~ /u/ OR n >= 30) AND load > 0.5"];
    let groupings =
        ["", " GROUP BY host", " GROUP BY *", " GROUP BY time(4s)", " GROUP BY time(6s), region fill(none)"];
    let mut out = Vec::new();
    for f in functions {
        for field in ["load", "n"] {
            let call = match f {
                "percentile" => format!("percentile({field}, 75)"),
                _ => format!("{f}({field})"),
            };
            for cond in conditions {
                for g in groupings {
                    let by_time = g.contains("time(");
                    let mut clause = match (cond, by_time) {
                        ("", false) => String::new(),
                        ("", true) => format!(" WHERE {RANGE}"),
                        (c, false) => format!(" WHERE {c}"),
                        (c, true) => format!(" WHERE {c} AND {RANGE}"),
                    };
                    clause.push_str(g);
                    out.push(format!("SELECT {call} FROM cpu{clause}"));
                }
            }
        }
    }
    out
}
