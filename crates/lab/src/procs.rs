//! Other processes as the lab measures them: CPU time from a process's
//! CPU clock (nanoseconds) or its `stat` ticks, its resident set, and its
//! descendants.

use anyhow::Context;

/// A process's CPU time from its CPU clock (every thread, those exited
/// included; nanoseconds, not ticks); None once it is gone.
pub(crate) fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let id = nix::time::ClockId::pid_cpu_clock_id(nix::unistd::Pid::from_raw(pid as i32)).ok()?;
    nix::time::clock_gettime(id).ok().map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// CPU seconds (utime + stime) of a process or thread from its `stat` file
/// (`/proc/PID/stat`); 10 ms ticks, so only meaningful over many rounds. The
/// sum is exact; the split between the two is sampled at ticks, so unused.
pub(crate) fn stat_cpu_seconds(path: &str) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    // Fields after the parenthesised comm; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').context("malformed stat file")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Ok((f[11].parse::<f64>()? + f[12].parse::<f64>()?) / hz)
}

/// A process's resident set (`VmRSS` of `/proc/PID/status`), bytes; 0 once
/// it is gone.
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:") * 1024
}

/// A process's peak resident set (`VmHWM`), in bytes; 0 when it is gone.
pub fn peak_rss_bytes(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:") * 1024
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Every process of `roots` and their descendants.
pub(crate) fn process_tree(roots: &[u32]) -> Vec<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some(ppid) = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| stat_ppid(&s)) {
            parent.push((pid, ppid));
        }
    }
    let mut tree: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    tree
}

fn stat_ppid(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_seconds_sees_our_own_work() {
        let before = stat_cpu_seconds("/proc/thread-self/stat").unwrap();
        let c0 = clock::thread_cpu_ns();
        let mut x = 0u64;
        while clock::thread_cpu_ns() - c0 < 50_000_000 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let after = stat_cpu_seconds("/proc/thread-self/stat").unwrap();
        let spent = after - before;
        assert!(spent >= 0.03, "{before:?} -> {after:?} ({x})");
    }

    #[test]
    fn a_process_cpu_clock_counts_its_exited_threads_and_its_tree_holds_it() {
        let me = std::process::id();
        let t0 = process_cpu_seconds(me).unwrap();
        std::thread::spawn(|| {
            let c = clock::thread_cpu_ns();
            while clock::thread_cpu_ns() - c < 30_000_000 {}
        })
        .join()
        .unwrap();
        // The thread has exited: its 30 ms stay in the process's clock.
        assert!(process_cpu_seconds(me).unwrap() - t0 >= 0.03);
        assert!(rss_bytes(me) > 0);
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let tree = process_tree(&[me]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(tree.contains(&me) && tree.contains(&child.id()), "{tree:?}");
    }
}
