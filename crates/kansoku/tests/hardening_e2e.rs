//! `kansoku server` against what an attacker or an unlucky operator sends:
//! a point at the end of time, a flood of new series, a listing of a
//! million series, idle sockets, a regex that would compile for seconds,
//! numbers past their type. Each gets a clear refusal; the data directory,
//! the server and its other clients carry on.

mod common;

use std::io::Read;
use std::net::TcpStream;

use common::{enc, http_get, start};

fn post(addr: &str, path: &str, body: &[u8]) -> (u16, String) {
    common::http_post(addr, path, "", body)
}

fn status(addr: &str) -> serde_json::Value {
    serde_json::from_str(&http_get(addr, "/api/v1/status").1).unwrap()
}

fn server(data: &std::path::Path, extra: &[&str]) -> common::Up {
    let mut args = vec!["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let up = start(&args, data);
    common::create_database(&up.addr, "a", "");
    up
}

#[test]
fn a_point_at_the_end_of_time_is_refused_and_the_directory_stays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let srv = server(&data, &["--block-duration", "1s"]);
    let a = &srv.addr;
    let (code, resp) = post(a, "/write?db=a", b"n v=1 9223372036854775807\nn v=2 1700000000000000000\n");
    assert_eq!(code, 400, "{resp}");
    assert!(resp.contains("outside the range kansoku stores"), "{resp}");
    // The good line is stored; more points make the head span a block.
    for i in 1..=3 {
        let line = format!("n v={i} {}\n", 1_700_000_000_000_000_000i64 + i * 1_000_000_000);
        assert_eq!(post(a, "/write?db=a", line.as_bytes()).0, 204);
    }
    assert_eq!(status(a)["store"]["flush_errors"], 0);
    drop(srv);
    // A restart (which once died replaying that point, every time) reads it all.
    let srv = server(&data, &[]);
    let (code, body) = http_get(&srv.addr, "/query?db=a&q=SELECT%20v%20FROM%20n");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["results"][0]["series"][0]["values"].as_array().unwrap().len(), 4, "{body}");
}

#[test]
fn series_floods_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(&dir.path().join("data"), &["--max-series", "2000"]);
    let a = &srv.addr;
    // One request inventing more than 10,000 series: refused whole.
    let flood: String = (0..10_001).map(|i| format!("m,id={i} v=1 1700000000000000000\n")).collect();
    let (code, resp) = post(a, "/write?db=a", flood.as_bytes());
    assert_eq!(code, 400, "{resp}");
    assert!(resp.contains("more than 10000 new series") && resp.contains("nothing was stored"), "{resp}");
    assert_eq!(status(a)["influx"]["series_limit_refused"], 1);
    // Within the per-request limit but past the store's: the store holds at
    // most its limit, and counts what it refused.
    let before = status(a)["store"]["series"].as_u64().unwrap();
    let many: String = (0..3000).map(|i| format!("m,id={i} v=1 1700000000000000000\n")).collect();
    assert_eq!(post(a, "/write?db=a", many.as_bytes()).0, 204);
    let st = status(a);
    assert_eq!(st["store"]["series"], 2000, "{st}");
    assert_eq!(st["store"]["series_refused"].as_u64().unwrap(), 3000 - (2000 - before), "{st}");
    assert_eq!(st["store"]["series_limit_dropped"], st["store"]["series_refused"]);
    // A listing is cut at its limit, and says so.
    let (code, body) = http_get(a, &format!("/api/v1/series?match={}&limit=5", enc("m_v")));
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["series"].as_array().unwrap().len(), 5);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["total"].as_u64().unwrap(), 2000 - before);
    let (code, body) = http_get(a, "/api/v1/series?limit=1000000");
    assert_eq!(code, 400, "{body}");
}

#[test]
fn bad_numbers_and_heavy_regexes_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(&dir.path().join("data"), &[]);
    let a = &srv.addr;
    let bad = |path: &str, want: &str| {
        let (code, body) = http_get(a, path);
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains(want), "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("JSON error: {body}"));
        assert!(v["error"].is_string());
    };
    let heavy = enc(&format!("{{a=~\"{}\"}}", "(.*){10000}"));
    bad(&format!("/api/v1/query?query={heavy}"), "size limit");
    bad(&format!("/api/v1/series?match={heavy}"), "size limit");
    bad("/api/v1/query?query=m&step=9223372036854775807ns", "step must be from 1ns to 3650d");
    bad("/api/v1/query?query=m&from=2026-02-31T00:00:00Z", "invalid time");
    bad("/api/v1/profile/top?host=h&cpu=4294967297", "past 4294967295");
    // The whole of time in ten points: an answer, not an overflowed count.
    let (code, body) = http_get(a, "/api/v1/query?query=m&from=0&to=9100000000&points=10");
    assert_eq!(code, 200, "{body}");
    // An oversized /write body: the documented JSON error.
    let big = vec![b'x'; (64 << 20) + 1];
    let (code, body) = post(a, "/write?db=a", &big);
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("\"error\""), "{body}");
}

#[test]
fn idle_connections_are_closed_and_cannot_lock_others_out() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(&dir.path().join("data"), &["--http-max-connections", "8", "--http-header-timeout", "500ms"]);
    let a = &srv.addr;
    // Eight sockets that never send a byte take every slot...
    let idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(a.as_str()).unwrap()).collect();
    // ...until the header timeout closes them; then a request is answered
    // (before, it waited forever: http_get would fail on its read timeout).
    let (code, _) = http_get(a, "/ping");
    assert_eq!(code, 204);
    for mut s in idle {
        s.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
        // Closed by the server: EOF (hyper may first answer 408), not a timeout.
        s.read_to_end(&mut Vec::new()).expect("an idle connection stayed open");
    }
    let st = status(a);
    assert!(st["http"]["connections"].as_u64().unwrap() >= 9, "{st}");
}
