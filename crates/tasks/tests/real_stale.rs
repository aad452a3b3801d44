//! A process above the threshold gets series of its own that end with a
//! staleness marker when it exits (real `/proc`, taskstats; root).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{busy_shell, value};
use tasks::{Config, Processes};

#[test]
fn a_busy_process_gets_series_that_end_stale() {
    let dir = tempfile::tempdir().unwrap();
    let sh = busy_shell(dir.path(), "kskbusy");
    let mut cfg = Config::new(Duration::from_secs(1), "t".into());
    cfg.min_cpu = 0.05;
    let (mut c, _) = Processes::new(cfg, true);
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

#[test]
fn an_exec_moves_a_process_to_its_new_program() {
    let dir = tempfile::tempdir().unwrap();
    let pre = busy_shell(dir.path(), "kskpre");
    let post = busy_shell(dir.path(), "kskpost");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let script = format!(
        "while [ ! -e {a} ]; do :; done; exec {post} -c 'while [ ! -e {b} ]; do :; done'",
        a = a.display(),
        b = b.display(),
        post = post.display()
    );
    let mut child = Command::new(&pre).args(["-c", &script]).spawn().unwrap();
    let (mut c, _) = Processes::new(Config::new(Duration::from_secs(1), "t".into()), true);
    let mut ids = std::collections::HashMap::new();
    let mut history: Vec<(Option<f64>, Option<f64>)> = Vec::new();
    let round = |c: &mut Processes, ids: &mut std::collections::HashMap<u32, model::SeriesKey>| {
        let b = c.round(clock::realtime_ns());
        for (i, k) in &b.defs {
            ids.insert(*i, k.clone());
        }
        let cpu = |g: &str| value(&b, ids, "namedprocess_namegroup_cpu_seconds_total", &[("groupname", g)]);
        (cpu("kskpre"), cpu("kskpost"))
    };
    // Until the first program has used a tenth of a second.
    while history.last().and_then(|h| h.0).is_none_or(|v| v < 0.1) {
        assert!(history.len() < 100_000, "the first program never showed 0.1 s of CPU");
        history.push(round(&mut c, &mut ids));
        std::thread::yield_now();
    }
    std::fs::write(&a, b"").unwrap();
    let before = history.len();
    while history.last().and_then(|h| h.1).is_none_or(|v| v < 0.1) {
        assert!(history.len() - before < 100_000, "the exec'd program never got a group of its own");
        history.push(round(&mut c, &mut ids));
        std::thread::yield_now();
    }
    std::fs::write(&b, b"").unwrap();
    child.wait().unwrap();
    let pre_cpu: Vec<f64> = history.iter().filter_map(|h| h.0).collect();
    assert!(pre_cpu.windows(2).all(|w| w[1] >= w[0]), "the old program's counter never goes back: {pre_cpu:?}");
    // After the exec the old program's counter stops (the last few rounds
    // after the new one appeared are all equal).
    let after: Vec<f64> = history.iter().filter(|h| h.1.is_some()).filter_map(|h| h.0).collect();
    assert!(after.windows(2).skip(1).all(|w| w[0] == w[1]), "kskpre kept growing after the exec: {after:?}");
}
