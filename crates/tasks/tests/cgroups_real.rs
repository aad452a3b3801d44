//! Cgroups made by the test on this machine's hierarchies (root): the CPU
//! of a group holding one busy process equals that process's own run time
//! (its schedstat) over the same window; a memory group holding a process
//! that touched 64 MiB shows them; a removed group ends its series stale.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Kill, busy_shell, value};
use tasks::{Config, Processes};

/// A cgroup made for the test, removed (its processes moved out first) on drop.
struct Group(PathBuf);

impl Group {
    fn make(root: &str, name: &str) -> Option<Group> {
        let root = Path::new(root);
        if !root.exists() {
            return None;
        }
        let p = root.join(name);
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        Some(Group(p))
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let parent = self.0.parent().unwrap().join("cgroup.procs");
        for pid in std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default().lines() {
            let _ = std::fs::write(&parent, pid);
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A process's own run time, seconds (schedstat, ns).
fn runtime(pid: u32) -> f64 {
    let t = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    t.split_whitespace().next().unwrap().parse::<f64>().unwrap() / 1e9
}

#[test]
fn cgroups_of_both_versions_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("kansoku-test-{}", std::process::id());
    let id = format!("/{name}");
    // v1 where mounted (this VM), and cgroup2.
    let cpu1 = Group::make("/sys/fs/cgroup/cpuacct", &name);
    let mem1 = Group::make("/sys/fs/cgroup/memory", &name);
    let v2 = Group::make("/sys/fs/cgroup/unified", &name).or_else(|| Group::make("/sys/fs/cgroup", &name));
    assert!(cpu1.is_some() || v2.is_some(), "no cgroup hierarchy to test on");

    let busy = Kill(Command::new(busy_shell(dir.path(), "kskcg")).args(["-c", "while :; do :; done"]).spawn().unwrap());
    // 64 MiB touched and held, in the memory group: touched only once the
    // process is in it (pages are charged where they were first touched;
    // touched before the move, they stayed with the old group).
    let mut holder = Kill(
        Command::new("python3")
            .args([
                "-c",
                "import sys\nsys.stdin.readline()\nb = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n\
                 print('held', flush=True)\nsys.stdin.read()",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let busy_pid = busy.0.id();
    for g in [&cpu1, &v2].into_iter().flatten() {
        g.add(busy_pid);
    }
    if let Some(g) = &mem1 {
        g.add(holder.0.id());
    }
    {
        use std::io::{BufRead, Write};
        let stdin = holder.0.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(holder.0.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "held", "the holder touched its memory");
    }
    let mut cfg = Config::new(Duration::from_secs(1), "t".into());
    cfg.min_cpu = 10.0; // no per-process series needed here
    let (mut c, _) = Processes::new(cfg, false);
    let mut ids = HashMap::new();
    let mut first: Option<(f64, f64)> = None;
    let mut got = None;
    // Rounds until the group has used half a second of CPU; the process's
    // own run time read right after each round.
    for _ in 0..100_000 {
        let b = c.round(clock::realtime_ns());
        let own = runtime(busy_pid);
        for (i, k) in &b.defs {
            ids.insert(*i, k.clone());
        }
        let Some(cpu) = value(&b, &ids, "container_cpu_usage_seconds_total", &[("id", &id)]) else { continue };
        match first {
            None => first = Some((cpu, own)),
            Some((c0, o0)) if cpu - c0 > 0.5 => {
                got = Some((cpu - c0, own - o0));
                break;
            }
            _ => std::thread::yield_now(),
        }
    }
    let (group, own) = got.expect("the group's CPU grows");
    assert!((group - own).abs() <= 0.02 + 0.05 * own, "the group used {group} s, its one process {own} s");
    if mem1.is_some() {
        let b = c.round(clock::realtime_ns());
        for (i, k) in &b.defs {
            ids.insert(*i, k.clone());
        }
        let mem = value(&b, &ids, "container_memory_usage_bytes", &[("id", &id)]).unwrap();
        assert!(mem >= 64.0 * 1048576.0, "memory group: {mem} bytes");
        let rss = value(&b, &ids, "container_memory_rss", &[("id", &id)]).unwrap();
        assert!(rss >= 60.0 * 1048576.0, "rss {rss}");
    }
    drop(busy);
    drop(holder.0.stdin.take());
    holder.0.wait().unwrap();
    drop((cpu1, mem1, v2));
    let b = c.round(clock::realtime_ns());
    let stale: Vec<f64> = b
        .points
        .iter()
        .filter(|(i, _)| ids.get(i).is_some_and(|k| k.get("id") == Some(id.as_str())))
        .map(|p| p.1)
        .collect();
    assert!(!stale.is_empty() && stale.iter().all(|v| v.to_bits() == model::STALE_NAN), "removed groups end stale");
}
