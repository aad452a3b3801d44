//! With a run-time source (the task iterator's records, given here by the
//! test) over a `/proc` the test writes: a kernel thread that ran is not
//! read again — its CPU is its run time and its state the source's — while
//! a user process that ran is read, and one that did not takes its state
//! from the source.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::value;
use tasks::{Config, Processes, Thread};

fn stat(pid: u32, comm: &str, state: char, ppid: u32, utime: u64, stime: u64) -> String {
    format!("{pid} ({comm}) {state} {ppid} 0 0 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 1000 0 0 0\n")
}

#[test]
fn a_known_kernel_thread_is_not_read_and_states_come_from_the_source() {
    let proc = tempfile::tempdir().unwrap();
    let write = |pid: u32, text: String| {
        std::fs::create_dir_all(proc.path().join(pid.to_string())).unwrap();
        // In place (same inode): a kept descriptor reads the new text.
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(proc.path().join(pid.to_string()).join("stat"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .unwrap();
    };
    write(2, stat(2, "kthreadd", 'S', 0, 0, 10));
    write(50, stat(50, "kworker/0:1", 'I', 2, 0, 200));
    write(100, stat(100, "daemon", 'S', 1, 30, 20));
    let threads = Arc::new(Mutex::new(Vec::<Thread>::new()));
    let set = |v: Vec<(u32, u8, bool, u64)>| {
        *threads.lock().unwrap() = v
            .into_iter()
            .map(|(tgid, state, kernel, runtime_ns)| Thread { tgid, state, kernel, runtime_ns, ..Thread::default() })
            .collect();
    };
    let mut cfg = Config::new(Duration::from_secs(1), "t".into());
    cfg.proc = proc.path().to_owned();
    cfg.max_cgroups = 0;
    let (c, _) = Processes::new(cfg, false);
    let source = Arc::clone(&threads);
    let mut c = c.with_runtimes(Box::new(move |out| {
        out.clone_from(&source.lock().unwrap());
        Ok(())
    }));
    let mut ids = std::collections::HashMap::new();
    let mut round = |k: i64| {
        let b = c.round(k * 1_000_000_000);
        for (id, key) in &b.defs {
            ids.insert(*id, key.clone());
        }
        let v = |name: &str, labels: &[(&str, &str)]| value(&b, &ids, name, labels);
        let kernel_cpu = v("namedprocess_namegroup_cpu_seconds_total", &[("groupname", tasks::KERNEL_GROUP)]);
        let state = |group: &str, state: &str| {
            v("namedprocess_namegroup_states", &[("groupname", group), ("state", state)]).unwrap()
        };
        let daemon_cpu = v("namedprocess_namegroup_cpu_seconds_total", &[("groupname", "daemon")]);
        (
            kernel_cpu.unwrap(),
            daemon_cpu.unwrap(),
            state(tasks::KERNEL_GROUP, "Waiting"),
            state("daemon", "Waiting"),
            state("daemon", "Other"),
        )
    };
    set(vec![(2, b'S', true, 100_000_000), (50, b'I', true, 2_000_000_000), (100, b'S', false, 500_000_000)]);
    let (kcpu, dcpu, ..) = round(1);
    // Read once: a kernel thread's CPU is its run time (2.1 s), not its ticks.
    assert!((kcpu - 2.1).abs() < 1e-9, "{kcpu}");
    assert!((dcpu - 0.5).abs() < 1e-9, "user + system ticks at 100 Hz: {dcpu}");
    // Both ran; their stat files now say D (and the daemon 10 more ticks).
    write(50, stat(50, "kworker/0:1", 'D', 2, 0, 300));
    write(100, stat(100, "daemon", 'D', 1, 40, 20));
    set(vec![(2, b'S', true, 100_000_000), (50, b'S', true, 3_000_000_000), (100, b'S', false, 600_000_000)]);
    let (kcpu, dcpu, k_waiting, d_waiting, _) = round(2);
    assert!((kcpu - 3.1).abs() < 1e-9, "the kernel thread's run time: {kcpu}");
    assert_eq!(k_waiting, 0.0, "the kernel thread's stat was read");
    assert!((dcpu - 0.6).abs() < 1e-9, "the daemon's stat was read: {dcpu}");
    assert_eq!(d_waiting, 1.0, "the daemon's stat was read");
    // The daemon did not run; the source says it is stopped.
    set(vec![(2, b'S', true, 100_000_000), (50, b'I', true, 3_000_000_000), (100, b'T', false, 600_000_000)]);
    let (_, _, _, d_waiting, d_other) = round(3);
    assert_eq!((d_waiting, d_other), (0.0, 1.0), "the source's state of a process that did not run");
}
