//! The verdict over stored series, end to end through PromQL: a host's
//! counters written as the collector and the tracer write them, in three
//! phases — busy in user space, waiting on the disk, idle — and every
//! window inside a phase gets that phase's verdict.

use diagnose::{Kind, classify, features};
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

const S: i64 = 1_000_000_000;
const T0: i64 = 1_800_000_000 * S;
const MODES: [&str; 4] = ["user", "system", "iowait", "idle"];

#[test]
fn each_phase_gets_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    let mut keys: Vec<SeriesKey> = Vec::new();
    for cpu in 0..2 {
        for m in MODES {
            keys.push(SeriesKey::new(
                "node_cpu_seconds_total",
                [("cpu", cpu.to_string()), ("host", "h".into()), ("mode", m.into())],
            ));
        }
    }
    keys.push(SeriesKey::new("kernel_offcpu_seconds_sum", [("host", "h"), ("state", "D")]));
    // Per second of each phase: seconds added to (user, system, iowait, idle) per CPU, and D-state task-seconds.
    let phases = [((0.93, 0.05, 0.0, 0.02), 0.0), ((0.03, 0.04, 0.7, 0.23), 3.0), ((0.01, 0.01, 0.0, 0.98), 0.0)];
    let mut totals = vec![0.0f64; keys.len()];
    for i in 0..180i64 {
        let ((u, s, w, idle), d) = phases[(i / 60) as usize];
        for cpu in 0..2 {
            for (k, add) in [u, s, w, idle].into_iter().enumerate() {
                totals[cpu * 4 + k] += add;
            }
        }
        totals[8] += d;
        let mut b = Batch::new(Timestamp(T0 + i * S));
        if i == 0 {
            b.defs = keys.iter().cloned().enumerate().map(|(k, key)| (k as u32, key)).collect();
        }
        b.points = totals.iter().enumerate().map(|(k, v)| (k as u32, *v)).collect();
        store.append(&mut app, &b).unwrap();
    }
    let windows = features(&store, "h", T0 + 10 * S, T0 + 179 * S, 10 * S);
    let kinds: Vec<Kind> = windows.iter().map(|f| classify(f).kind).collect();
    for (f, kind) in windows.iter().zip(&kinds) {
        // Windows that straddle a phase change may go either way.
        let phase = (f.t - T0) / S;
        let want = match phase {
            12..=60 => Kind::CpuBusyUser,
            72..=120 => Kind::IoBound,
            132.. => Kind::Healthy,
            _ => continue,
        };
        assert_eq!(*kind, want, "window ending at {phase} s: {f:?}");
    }
    assert_eq!(kinds.len(), 17);
    let io = classify(&windows[9]);
    assert!(io.evidence.iter().any(|e| e.name == "tasks in D state" && (e.value - 3.0).abs() < 1e-9), "{io:?}");
}
