//! The environment a result was measured in, captured without asking:
//! CPU model, flags and cores, memory, kernel and its command line, the
//! CPU frequency governor, the CPU vulnerabilities' mitigations, the
//! sysctls that move benchmark results, disks (model, rotational,
//! scheduler), mounted file systems, network interfaces (speed, MTU), the
//! versions of the packages the experiment names, and kansoku's own — as
//! one flat map, so two environments diff key by key.

use std::collections::BTreeMap;
use std::path::Path;

/// Sysctls that change what a benchmark measures.
const SYSCTLS: &[&str] = &[
    "kernel/sched_autogroup_enabled",
    "kernel/numa_balancing",
    "vm/swappiness",
    "vm/dirty_ratio",
    "vm/dirty_background_ratio",
    "vm/overcommit_memory",
    "net/core/somaxconn",
    "net/core/rmem_max",
    "net/core/wmem_max",
    "net/ipv4/tcp_congestion_control",
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem",
    "net/ipv4/ip_local_port_range",
    "kernel/perf_event_paranoid",
];

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Everything captured, key → value.
pub fn capture(packages: &[String], kansoku_version: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let mut put = |k: String, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            env.insert(k, v);
        }
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_owned())
    };
    put("cpu.model".into(), field("model name"));
    put("cpu.flags".into(), field("flags"));
    put("cpu.cores".into(), std::thread::available_parallelism().ok().map(|n| n.to_string()));
    put("cpu.governor".into(), read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    put(
        "memory.total".into(),
        meminfo.lines().find(|l| l.starts_with("MemTotal:")).map(|l| l["MemTotal:".len()..].trim().to_owned()),
    );
    put("kernel.release".into(), read("/proc/sys/kernel/osrelease"));
    put("kernel.cmdline".into(), read("/proc/cmdline"));
    if let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities") {
        for e in dir.flatten() {
            put(format!("mitigation.{}", e.file_name().to_string_lossy()), read(e.path()));
        }
    }
    for s in SYSCTLS {
        put(format!("sysctl.{}", s.replace('/', ".")), read(format!("/proc/sys/{s}")));
    }
    if let Ok(dir) = std::fs::read_dir("/sys/block") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("loop") || name.starts_with("ram") || name.starts_with("zram") {
                continue;
            }
            let p = e.path();
            put(format!("disk.{name}.model"), read(p.join("device/model")));
            put(format!("disk.{name}.rotational"), read(p.join("queue/rotational")));
            put(format!("disk.{name}.scheduler"), read(p.join("queue/scheduler")));
            put(format!("disk.{name}.size_sectors"), read(p.join("size")));
        }
    }
    for line in std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 && f[0].starts_with('/') {
            put(format!("mount.{}", f[1]), Some(format!("{} {} {}", f[0], f[2], f[3])));
        }
    }
    if let Ok(dir) = std::fs::read_dir("/sys/class/net") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            put(format!("net.{name}.mtu"), read(e.path().join("mtu")));
            put(format!("net.{name}.speed"), read(e.path().join("speed")));
        }
    }
    for p in packages {
        let v = std::process::Command::new("dpkg-query")
            .args(["-W", "-f", "${Version}", p])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        put(format!("package.{p}"), Some(v.unwrap_or_else(|| "not installed".into())));
    }
    put("kansoku.version".into(), Some(kansoku_version.to_owned()));
    env
}

/// Keys whose values differ (or exist on one side only): (key, a, b).
pub fn diff<'a>(
    a: &'a BTreeMap<String, String>,
    b: &'a BTreeMap<String, String>,
) -> Vec<(&'a str, Option<&'a str>, Option<&'a str>)> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (a.get(k).map(String::as_str), b.get(k).map(String::as_str));
            (x != y).then_some((k.as_str(), x, y))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_captured() {
        let env = capture(&["coreutils".into(), "no-such-package-here".into()], "0.1.0");
        for key in
            ["cpu.model", "cpu.cores", "memory.total", "kernel.release", "kernel.cmdline", "sysctl.vm.swappiness"]
        {
            assert!(env.contains_key(key), "{key} missing: {env:?}");
        }
        assert!(env["package.coreutils"].chars().next().is_some_and(|c| c.is_ascii_digit()), "{env:?}");
        assert_eq!(env["package.no-such-package-here"], "not installed");
        assert!(env.keys().any(|k| k.starts_with("net.lo.")));
    }

    #[test]
    fn diffs_name_each_change() {
        let a = BTreeMap::from([("x".to_owned(), "1".to_owned()), ("y".to_owned(), "2".to_owned())]);
        let b = BTreeMap::from([
            ("x".to_owned(), "1".to_owned()),
            ("y".to_owned(), "3".to_owned()),
            ("z".to_owned(), "4".to_owned()),
        ]);
        assert_eq!(diff(&a, &b), [("y", Some("2"), Some("3")), ("z", None, Some("4"))]);
    }
}
