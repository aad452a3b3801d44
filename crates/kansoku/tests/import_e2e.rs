//! `kansoku import` of a committed `perf record` capture (a shell busy loop,
//! `perf record -e cpu-clock -F 2000 -a`, 2 CPUs): every sample arrives, on
//! the clock asked for, and the busy process is on top; the same capture as
//! `perf script` text imports identically.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kansoku");
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/busy-loop.perf.data");

fn kansoku(args: &[&str], data: &Path) -> String {
    let out = Command::new(BIN).args(args).arg("--data").arg(data).output().unwrap();
    assert!(out.status.success(), "kansoku {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// (time_ns, cpu, pid, tid, ip) of every imported event of `host`.
fn events(data: &Path, host: &str) -> Vec<(i64, u32, u32, u32, u64)> {
    let csv = kansoku(&["export", &format!("{{host=\"{host}\"}}"), "--events", "--format", "csv"], data);
    csv.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
                f[5].parse().unwrap(),
                f[6].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_perf_data_capture_imports_whole() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let start = 1_767_225_600_000_000_000i64; // 2026-01-01T00:00:00Z
    kansoku(&["import", FIXTURE, "--host", "rec", "--start", "2026-01-01T00:00:00Z"], &data);
    let ev = events(&data, "rec");

    // perf itself is the oracle for what the file holds.
    let script =
        Command::new("perf").args(["script", "-F", "cpu,pid,tid,time,ip", "--ns", "-i", FIXTURE]).output().unwrap();
    assert!(script.status.success(), "{}", String::from_utf8_lossy(&script.stderr));
    let text = String::from_utf8(script.stdout).unwrap();
    assert_eq!(ev.len(), text.lines().filter(|l| !l.trim().is_empty()).count());
    assert_eq!(ev.len(), 2041);

    let first = ev.iter().map(|e| e.0).min().unwrap();
    let last = ev.iter().map(|e| e.0).max().unwrap();
    assert_eq!(first, start);
    assert!(last - first < 1_000_000_000, "the capture spans {} ns", last - first);
    let mut by_pid: HashMap<u32, usize> = HashMap::new();
    for e in &ev {
        *by_pid.entry(e.2).or_default() += 1;
    }
    let (&busy, &n) = by_pid.iter().filter(|(p, _)| **p != 0).max_by_key(|(_, n)| **n).unwrap();
    assert!(n * 3 > ev.len(), "the busy loop (pid {busy}) has {n} of {} samples", ev.len());
    assert!(ev.iter().all(|e| e.1 < 2), "2 CPUs");

    // The same capture as text, placed at the same start: identical events.
    let txt = dir.path().join("capture.txt");
    std::fs::write(&txt, &text).unwrap();
    kansoku(&["import", txt.to_str().unwrap(), "--host", "txt", "--start", "2026-01-01T00:00:00Z"], &data);
    let mut a = ev;
    let mut b = events(&data, "txt");
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "not perf output\n").unwrap();
    let out = Command::new(BIN)
        .args(["import", bad.to_str().unwrap(), "--start", "0"])
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("perf script line 1"), "{err}");
    assert!(!data.exists(), "nothing created for bad input");
    // Text with since-boot times far beyond this machine's uptime, no --start.
    std::fs::write(&bad, "  1/1  [000] 500000000.000000000:  ffffffff81000000\n").unwrap();
    let out = Command::new(BIN).args(["import", bad.to_str().unwrap()]).arg("--data").arg(&data).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give --start"));
}
