//! `kansoku up --processes`: real processes on this machine. A busy
//! process gets series of its own and its group's CPU rate says one core;
//! three hundred processes born and gone between scans are each accounted
//! by their exit records and stay one group — the store's series do not
//! grow with them. Needs root (taskstats).

mod common;

use std::process::Command;

use common::{Live, enc, http_get, start};

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
    // Every round's points come on the live tail once stored: each wait
    // below is for the round that shows it.
    let mut own = Live::open(a, &format!("kansoku_process_cpu_seconds_total{{pid=\"{pid}\",mode=\"user\"}}"));
    assert!(next_value(&mut own, |_| true).is_some(), "the busy process gets series of its own");
    drop(own);
    // Its group's CPU rate over a second of rounds: about one core (the
    // other core is free, unless the machine is busy: the first second
    // that shows more than half a core).
    let mut group = Live::open(a, "namedprocess_namegroup_cpu_seconds_total{groupname=\"kskbusy\"}");
    let mut points: Vec<(i64, f64)> = Vec::new();
    let mut rate = 0.0;
    for _ in 0..100 {
        let (t, v) = group.next_points();
        if v.iter().all(Option::is_some) {
            points.push((t, v.iter().flatten().sum()));
        }
        if let (Some(&(t0, c0)), Some(&(t1, c1))) = (points.first(), points.last())
            && t1 - t0 >= 1_000_000_000
        {
            rate = (c1 - c0) / ((t1 - t0) as f64 / 1e9);
            if rate > 0.5 {
                break;
            }
            points.remove(0);
        }
    }
    assert!(rate > 0.5 && rate < 1.2, "one busy loop is about a core: {rate}");
    drop(group);
    let v = promql(a, "sum(rate(namedprocess_namegroup_cpu_seconds_total{groupname=\"kskbusy\"}[2s]))").unwrap();
    assert!(v < 1.2, "PromQL: one busy loop is at most one core: {v}");

    // Three hundred processes, each gone long before the next scan.
    let mut exits = Live::open(a, "kansoku_processes_exits_accounted_total");
    let before = next_value(&mut exits, |_| true).unwrap();
    let st =
        Command::new(&fork).args(["-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done"]).status().unwrap();
    assert!(st.success());
    assert!(next_value(&mut exits, |v| v >= before + 300.0).is_some(), "300 exits accounted");
    drop(exits);
    let mut truth = Live::open(a, "namedprocess_namegroup_cpu_seconds_total{groupname=\"true\",mode=\"system\"}");
    assert!(next_value(&mut truth, |_| true).is_some(), "the true group");
    // Three hundred processes, one group's series: no per-process series for them.
    // (A group has 15: ten figures and five states.)
    assert!(series(a, "{groupname=\"true\"}").len() <= 15, "{:?}", series(a, "{groupname=\"true\"}"));
    assert!(series(a, "kansoku_process_cpu_seconds_total{name=\"true\"}").is_empty());
    let status = json(a, "/api/v1/status");
    assert_eq!(status["processes"]["exit_records_dropped"], 0, "{}", status["processes"]);
    assert_eq!(status["processes"]["dropped_batches"], 0);
    drop(child);
}

/// The first value of the live tail's one series that `ok` accepts, within
/// 100 rounds.
fn next_value(live: &mut Live, ok: impl Fn(f64) -> bool) -> Option<f64> {
    (0..100).find_map(|_| live.next_points().1.first().copied().flatten().filter(|&v| ok(v)))
}
