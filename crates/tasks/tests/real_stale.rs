//! A process above the threshold gets series of its own that end with a
//! staleness marker when it exits (real `/proc`, taskstats; root).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{busy_shell, value};
use tasks::{Collector, Config};

#[test]
fn a_busy_process_gets_series_that_end_stale() {
    let dir = tempfile::tempdir().unwrap();
    let sh = busy_shell(dir.path(), "kskbusy");
    let mut cfg = Config::new(Duration::from_secs(1), "t".into());
    cfg.min_cpu = 0.05;
    let (mut c, _) = Collector::new(cfg, true);
    let mut child = Command::new(&sh).args(["-c", "while :; do :; done"]).spawn().unwrap();
    let pid = child.id().to_string();
    let mut ids = std::collections::HashMap::new();
    let mut seen = None;
    // Scans at the real time: its CPU share is near a core.
    for _ in 0..100_000 {
        let b = c.round(clock::realtime_ns());
        for (id, key) in &b.defs {
            ids.insert(*id, key.clone());
        }
        if let Some(v) = value(&b, &ids, "kansoku_process_cpu_seconds_total", &[("pid", &pid), ("name", "kskbusy")]) {
            seen = Some(v);
            break;
        }
        std::thread::yield_now();
    }
    assert!(seen.is_some(), "a process busy on a core is tracked");
    child.kill().unwrap();
    child.wait().unwrap();
    let stale = model::STALE_NAN;
    let mut ended = false;
    for _ in 0..1000 {
        let b = c.round(clock::realtime_ns());
        let mine: Vec<f64> = b
            .points
            .iter()
            .filter(|(id, _)| ids.get(id).is_some_and(|key| key.get("pid") == Some(pid.as_str())))
            .map(|p| p.1)
            .collect();
        if !mine.is_empty() && mine.iter().all(|v| v.to_bits() == stale) {
            ended = true;
            break;
        }
        std::thread::yield_now();
    }
    assert!(ended, "its series end with staleness markers");
}
