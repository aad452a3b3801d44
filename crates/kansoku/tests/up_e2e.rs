//! The real binary, end to end: `kansoku up` samples every core at 100 ms,
//! serves it live and by range; after SIGKILL and a restart every sample it
//! had acknowledged (pushed on the live tail) is still there. Plus the
//! one-line errors users get for bad input.

mod common;

use common::{http_get, live_times, query, run, up};

#[test]
fn samples_every_core_at_100ms_and_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cores = std::thread::available_parallelism().unwrap().get();
    let sel = r#"node_cpu_seconds_total{mode="user"}"#;

    let mut first = up(&data);
    let seen = live_times(&first.addr, sel, 25);
    assert!(seen.windows(2).all(|w| w[1] > w[0]));
    assert!(seen.iter().all(|t| t % 100_000_000 == 0), "samples on absolute 100 ms boundaries: {seen:?}");

    let frame = query(&first.addr, sel, seen[0], seen[seen.len() - 1]);
    let series = frame["series"].as_array().unwrap();
    assert_eq!(series.len(), cores, "one user-mode series per core");
    let times: Vec<i64> = frame["times"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
    for t in &seen {
        assert!(times.contains(t), "live sample {t} missing from range query");
    }
    // Mostly 100 ms apart; a rare overrun skips a boundary (counted), never drifts.
    let regular = times.windows(2).filter(|w| w[1] - w[0] == 100_000_000).count();
    assert!(regular * 10 >= (times.len() - 1) * 9, "spacing: {times:?}");
    for s in series {
        assert_eq!(s["values"].as_array().unwrap().iter().filter(|v| v.is_null()).count(), 0, "gap in {s}");
    }

    // Its files are its owner's alone: they name processes and devices.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "data directory");
    let wal = std::fs::read_dir(data.join("wal")).unwrap().next().unwrap().unwrap().path();
    assert_eq!(mode(&wal), 0o600, "{}", wal.display());

    // While it runs, read-only CLI reads of its data directory work.
    let out = run(&["series", "node_cpu_seconds_total{mode=\"idle\"}", "--data", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), cores);
    // And a second writer is refused with the pid of the first.
    let out = run(&["up", "--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("in use by another kansoku"), "{err}");

    // kill -9: every sample pushed on the live tail was acknowledged (durable).
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);

    let second = up(&data);
    let frame = query(&second.addr, sel, seen[0], seen[seen.len() - 1]);
    let times: Vec<i64> = frame["times"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
    for t in &seen {
        assert!(times.contains(t), "acknowledged sample {t} lost across SIGKILL");
    }
    assert_eq!(frame["series"].as_array().unwrap().len(), cores);
    // New samples keep arriving after the restart.
    let after = live_times(&second.addr, sel, 3);
    assert!(after[0] > seen[seen.len() - 1]);

    // CSV from the CLI, against the server.
    let server = format!("http://{}", second.addr);
    let out = run(&["query", sel, "--since", "2s", "--server", &server]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = String::from_utf8(out.stdout).unwrap();
    assert_eq!(csv.lines().next(), Some("series,time_ns,value"));
    assert!(csv.lines().count() > cores, "{csv}");
}

#[test]
fn bad_input_gets_one_line_errors_and_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let check = |args: &[&str], want: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        let ours = err.lines().filter(|l| l.starts_with("kansoku:")).count();
        assert!(ours <= 1, "{args:?}: more than one error line: {err}");
    };
    let data = dir.path().join("d");
    let d = data.to_str().unwrap();
    check(&["query", "node_load1{", "--data", d], "invalid selector");
    check(&["query", "node_load1", "--since", "5 parsecs", "--data", d], "invalid duration");
    check(&["query", "node_load1", "--data", d], "does not exist");
    check(&["up", "--interval", "5ms", "--data", d], "out of range");
    check(&["up", "--listen", "nonsense", "--data", d], "expected IP:PORT");
    // ClickHouse's flags without a ClickHouse store.
    let server = ["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0", "--data", d];
    check(&[&server[..], &["--cluster", "c"]].concat(), "give --store clickhouse://");
    check(&[&server[..], &["--live-delay", "2s"]].concat(), "give --store clickhouse://");
    check(&[&server[..], &["--insert-quorum", "2"]].concat(), "give --store clickhouse://");
    check(
        &[&server[..], &["--store", "clickhouse://127.0.0.1:1/db", "--insert-quorum", "2"]].concat(),
        "--cluster NAME",
    );
    check(&[&server[..], &["--store", "postgres://x/y"]].concat(), "clickhouse://");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("precious.txt"), "keep me").unwrap();
    check(&["up", "--listen", "127.0.0.1:0", "--data", d], "not a kansoku data directory");
    assert_eq!(std::fs::read_to_string(data.join("precious.txt")).unwrap(), "keep me");

    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().to_string();
    check(&["up", "--listen", &port, "--data", dir.path().join("e").to_str().unwrap()], "address in use");

    // A real store, then selectors and durations that are wrong.
    let fresh = dir.path().join("fresh");
    let mut u = up(&fresh);
    let (status, body) = http_get(&u.addr, "/api/v1/query?query=m%7B");
    assert_eq!(status, 400);
    assert!(body.contains("invalid selector"), "{body}");
    let (status, body) = http_get(&u.addr, "/api/v1/query?query=node_load1&since=yesterday");
    assert_eq!(status, 400, "{body}");
    let (status, _) = http_get(&u.addr, "/nope");
    assert_eq!(status, 404);
    let (status, body) = http_get(&u.addr, "/");
    assert_eq!(status, 200);
    assert!(body.contains("kansoku"));
    u.child.kill().unwrap();
    u.child.wait().unwrap();
    let f = fresh.to_str().unwrap();
    check(&["query", "no_such_metric", "--data", f], "no series matches");
}

/// `lab up-cost`'s floor side runs beside `kansoku up` and is measured the
/// same way: its process reads the collector's files on the same boundaries.
#[test]
fn up_cost_measures_kansoku_beside_the_floor_of_reading_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("up-cost.json");
    let o = run(&["lab", "up-cost", "--duration", "1s", "--peers", "floor", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = common::read_json(&json);
    let sides = report["sides"].as_array().unwrap();
    let names: Vec<&str> = sides.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["kansoku up", "floor: the same files read"]);
    for s in sides {
        assert!(s["cpu_seconds"].as_f64().unwrap() > 0.0, "{s}");
    }
    // The same round in a tight loop, measured before the sides start.
    let hot = &report["hot"];
    for k in ["read_us", "collect_us", "store_us"] {
        assert!(hot[k].as_f64().unwrap() > 0.0, "{k}: {hot}");
    }
    assert!(hot["values_per_round"].as_u64().unwrap() > 0, "{hot}");
    let floor = sides[1]["processes"][0].as_str().unwrap();
    assert!(floor.contains("lab read-floor --interval 100ms"), "{floor}");

    let o = run(&["lab", "read-floor", "--interval", "5ms"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--interval 5ms: must be 10ms to 60s"));
}
