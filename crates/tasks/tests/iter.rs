//! With the BPF task iterator as the run-time source (`trace::tasks`) the
//! collector finds the same processes and the same figures as by walking
//! `/proc`: two collectors side by side on the real machine (root, BPF),
//! one of each kind, agree on a group's members and a busy process's CPU;
//! and the iterator's collector reads nothing of processes that did not run.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{busy_shell, spawn, value};
use tasks::{Config, Processes};

#[test]
fn the_iterator_s_collector_agrees_with_the_proc_walk() {
    let dir = tempfile::tempdir().unwrap();
    let sh = busy_shell(dir.path(), "kskiter");
    let cfg = || {
        let mut c = Config::new(Duration::from_secs(1), "t".into());
        c.min_cpu = 0.05;
        c
    };
    let (mut walk, _) = Processes::new(cfg(), false);
    let mut it = trace::tasks::TaskIter::open().expect("the task iterator loads (root, BTF)");
    let (iter, _) = Processes::new(cfg(), false);
    let mut iter = iter.with_runtimes(Box::new(move |out| it.read(out)));
    let busy = spawn(Command::new(&sh).args(["-c", "while :; do :; done"]));
    let _idle: Vec<common::Kill> =
        (0..3).map(|_| spawn(Command::new(&sh).args(["-c", "read x"]).stdin(std::process::Stdio::piped()))).collect();
    let pid = busy.0.id().to_string();
    let group = [("groupname", "kskiter")];
    let (mut ids_w, mut ids_i) = (std::collections::HashMap::new(), std::collections::HashMap::new());
    let mut last = String::new();
    for _ in 0..100_000 {
        let t = clock::realtime_ns();
        let (bw, bi) = (walk.round(t), iter.round(t));
        for (id, key) in &bw.defs {
            ids_w.insert(*id, key.clone());
        }
        for (id, key) in &bi.defs {
            ids_i.insert(*id, key.clone());
        }
        let cpu = |b, ids| value(b, ids, "kansoku_process_cpu_seconds_total", &[("pid", &pid)]);
        let procs = |b, ids| value(b, ids, "namedprocess_namegroup_num_procs", &group);
        let (cw, ci) = (cpu(&bw, &ids_w), cpu(&bi, &ids_i));
        last = format!(
            "walk: cpu {cw:?} procs {:?}; iterator: cpu {ci:?} procs {:?}",
            procs(&bw, &ids_w),
            procs(&bi, &ids_i)
        );
        if let (Some(cw), Some(ci)) = (cw, ci)
            && cw > 0.05
        {
            assert_eq!(procs(&bw, &ids_w), Some(4.0), "{last}");
            assert_eq!(procs(&bi, &ids_i), Some(4.0), "{last}");
            // Read a moment apart (the walk's round first): within a tick
            // or two of each other.
            assert!((ci - cw).abs() <= 0.03, "{last}");
            assert_eq!(iter.stats().runtime_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
            return;
        }
        std::thread::yield_now();
    }
    panic!("not seen: {last}");
}

/// Kernel threads with the iterator: their run time is their system time
/// and their state the iterator's (`given.rs`: with no `stat` read once known). Over
/// every kernel thread of the machine the `[kernel]` group's CPU agrees
/// with the walk's tick-sampled figure (`/proc` rounds each thread's run
/// time to a tick), its members agree, and idle kernel threads count as
/// `Other` in both.
#[test]
fn kernel_threads_agree_with_the_proc_walk() {
    let cfg = || Config::new(Duration::from_secs(1), "t".into());
    let (mut walk, _) = Processes::new(cfg(), false);
    let mut it = trace::tasks::TaskIter::open().expect("the task iterator loads (root, BTF)");
    let (iter, _) = Processes::new(cfg(), false);
    let mut iter = iter.with_runtimes(Box::new(move |out| it.read(out)));
    let kernel = [("groupname", tasks::KERNEL_GROUP)];
    let (mut ids_w, mut ids_i) = (std::collections::HashMap::new(), std::collections::HashMap::new());
    let kthreads = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat"))
                .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)) == Some("2"))
        })
        .count() as f64;
    // Three rounds: the first reads every stat, the next ones none of a
    // kernel thread already known.
    for k in 0..3 {
        let t = clock::realtime_ns() + k;
        let (bw, bi) = (walk.round(t), iter.round(t));
        for (id, key) in &bw.defs {
            ids_w.insert(*id, key.clone());
        }
        for (id, key) in &bi.defs {
            ids_i.insert(*id, key.clone());
        }
        let cpu = |b, ids| value(b, ids, "namedprocess_namegroup_cpu_seconds_total", &kernel).unwrap();
        let procs = |b, ids| value(b, ids, "namedprocess_namegroup_num_procs", &kernel).unwrap();
        let other = |b, ids| {
            value(b, ids, "namedprocess_namegroup_states", &[("groupname", tasks::KERNEL_GROUP), ("state", "Other")])
                .unwrap()
        };
        let (cw, ci) = (cpu(&bw, &ids_w), cpu(&bi, &ids_i));
        assert!(cw > 0.0 && ci > 0.0, "kernel CPU walk {cw} iterator {ci}");
        // At most a tick (10 ms) a thread apart, plus what ran between the reads.
        assert!((ci - cw).abs() <= 0.01 * kthreads + 0.05, "kernel CPU walk {cw} iterator {ci}, {kthreads} threads");
        let (pw, pi) = (procs(&bw, &ids_w), procs(&bi, &ids_i));
        assert!((pw - pi).abs() <= 2.0, "kernel threads walk {pw} iterator {pi}");
        assert!(other(&bw, &ids_w) > 0.0 && other(&bi, &ids_i) > 0.0, "idle kernel threads are Other");
    }
}
