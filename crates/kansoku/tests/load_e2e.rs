//! `kansoku lab load` as a user runs it: against a running kansoku server
//! (its own status page as the target), its per-100 ms figures written back
//! to that server as series; the stored intervals add up to the responses
//! the run reported, and bad arguments are refused with the reason.

mod common;

use common::{enc, http_get, read_json, run, start};

#[test]
fn a_load_run_writes_its_intervals_as_series() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(&["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &dir.path().join("k"));
    let base = format!("http://{}", srv.addr);
    let json = dir.path().join("load.json");
    let out = run(&[
        "lab",
        "load",
        &format!("{base}/api/v1/status"),
        "-c",
        "4",
        "-d",
        "1s",
        "--server",
        &base,
        "--run",
        "e2e",
        "--json",
        json.to_str().unwrap(),
    ]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // The results on stdout (`> result.txt` keeps them), progress on stderr.
    let results = String::from_utf8_lossy(&out.stdout);
    assert!(results.contains("responses/s") && results.contains("written to"), "{results}\n{log}");
    assert!(!log.contains("written to"), "results are not repeated on stderr: {log}");
    let doc = read_json(&json);
    let responses = doc["result"]["responses"].as_u64().unwrap();
    assert!(responses > 10, "{doc}");
    assert_eq!(doc["result"]["status"]["2xx"].as_u64(), Some(responses));
    let per: u64 =
        doc["result"]["intervals"].as_array().unwrap().iter().map(|i| i["responses"].as_u64().unwrap()).sum();
    assert_eq!(per, responses);
    // The stored series: one point per interval, adding up to the same.
    let q = format!("/prometheus/api/v1/query?query={}", enc("sum_over_time(load_responses{run=\"e2e\"}[1h])"));
    let (status, body) = http_get(&srv.addr, &q);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let stored: f64 = v["data"]["result"][0]["value"][1].as_str().unwrap().parse().unwrap();
    assert_eq!(stored as u64, responses, "{body}");

    // A path that answers 404 to everything: a run that did not do what
    // was asked exits non-zero and says why (issue 46: it exited 0,
    // "failures 0").
    let missing = run(&["lab", "load", &format!("{base}/no/such/path"), "-c", "2", "-d", "300ms"]);
    let log = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && log.contains("every response") && log.contains("4xx"), "{log}");

    // Refused with the reason, before any load.
    let bad = run(&["lab", "load", "https://127.0.0.1/"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("https is not supported"));
    // Port 1: privileged, and nothing here listens on it.
    let bad = run(&["lab", "load", "http://127.0.0.1:1/", "-d", "1s"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("cannot connect to"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = run(&["lab", "load", &format!("{base}/"), "-H", "no colon"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Name: value"));
}
