//! `kansoku up --processes`: real processes on this machine. A busy
//! process gets series of its own and its group's CPU rate says one core;
//! three hundred processes born and gone between scans are each accounted
//! by their exit records and stay one group — the store's series do not
//! grow with them. Needs root (taskstats).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{enc, http_get, start, wait};

fn json(addr: &str, q: &str) -> serde_json::Value {
    let (status, body) = http_get(addr, q);
    assert_eq!(status, 200, "{q}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn series(addr: &str, m: &str) -> Vec<serde_json::Value> {
    json(addr, &format!("/api/v1/series?match={}", enc(m)))["series"].as_array().unwrap().clone()
}

/// The newest value of the PromQL `expr`, if any.
fn promql(addr: &str, expr: &str) -> Option<f64> {
    let v = json(addr, &format!("/prometheus/api/v1/query?query={}", enc(expr)));
    v["data"]["result"].as_array()?.first()?["value"][1].as_str()?.parse().ok()
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn processes_busy_and_short_lived_are_accounted() {
    let dir = tempfile::tempdir().unwrap();
    let copy = |name: &str| {
        let p = dir.path().join(name);
        std::fs::copy("/bin/dash", &p).or_else(|_| std::fs::copy("/bin/sh", &p)).unwrap();
        p
    };
    let (busy, fork) = (copy("kskbusy"), copy("kskfork"));
    let up = start(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "1s",
            "--host",
            "procs",
            "--trace",
            "off",
            "--processes",
            "200ms",
        ],
        &dir.path().join("data"),
    );
    let a = &up.addr;
    let child = Kill(Command::new(&busy).args(["-c", "while :; do :; done"]).spawn().unwrap());
    let pid = child.0.id().to_string();
    wait("the busy process's own series", Duration::from_secs(20), || {
        !series(a, &format!("kansoku_process_cpu_seconds_total{{pid=\"{pid}\"}}")).is_empty()
    });
    // Its group's CPU rate: about one core (another core is free).
    wait("a core's worth of CPU in the busy group", Duration::from_secs(20), || {
        promql(a, "sum(rate(namedprocess_namegroup_cpu_seconds_total{groupname=\"kskbusy\"}[2s]))")
            .is_some_and(|v| v > 0.5)
    });
    let v = promql(a, "sum(rate(namedprocess_namegroup_cpu_seconds_total{groupname=\"kskbusy\"}[2s]))").unwrap();
    assert!(v < 1.2, "one busy loop is at most one core: {v}");

    // Three hundred processes, each gone long before the next scan.
    let before = promql(a, "kansoku_processes_exits_accounted_total").unwrap_or(0.0);
    let st =
        Command::new(&fork).args(["-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done"]).status().unwrap();
    assert!(st.success());
    wait("their exits accounted", Duration::from_secs(20), || {
        promql(a, "kansoku_processes_exits_accounted_total").is_some_and(|v| v >= before + 300.0)
    });
    wait("the true group", Duration::from_secs(20), || {
        promql(a, "namedprocess_namegroup_cpu_seconds_total{groupname=\"true\",mode=\"system\"}").is_some()
    });
    // Three hundred processes, one group's series: no per-process series for them.
    assert!(series(a, "{groupname=\"true\"}").len() <= 12, "{:?}", series(a, "{groupname=\"true\"}"));
    assert!(series(a, "kansoku_process_cpu_seconds_total{name=\"true\"}").is_empty());
    let status = json(a, "/api/v1/status");
    assert_eq!(status["processes"]["exit_records_dropped"], 0, "{}", status["processes"]);
    assert_eq!(status["processes"]["dropped_batches"], 0);
    drop(child);
}
