//! Every cgroup's CPU, memory, storage I/O, tasks and pressure stalls —
//! v2, and v1 where a machine still mounts its controllers separately
//! (this VM is hybrid: cpuacct, memory, blkio, pids as v1; cgroup2 with
//! cpu.stat and the pressure files) — under cAdvisor's `container_*` names
//! with the cgroup's path as `id`, so its dashboards carry over. Pure
//! parsers of each file (fuzzed), the hierarchies found in
//! `/proc/self/mountinfo`, a walk per round.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};

/// One cgroup's figures; what its hierarchies do not offer stays None.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Figures {
    pub cpu_s: Option<f64>,
    pub user_s: Option<f64>,
    pub system_s: Option<f64>,
    pub memory_bytes: Option<f64>,
    pub working_set_bytes: Option<f64>,
    pub rss_bytes: Option<f64>,
    pub read_bytes: Option<f64>,
    pub write_bytes: Option<f64>,
    pub tasks: Option<f64>,
    /// Pressure stall totals, seconds: (some, full) for cpu, memory, io.
    pub cpu_pressure: Option<(f64, f64)>,
    pub memory_pressure: Option<(f64, f64)>,
    pub io_pressure: Option<(f64, f64)>,
}

/// The series of [`Figures`] in order: (name, one field).
pub const SERIES: [&str; 15] = [
    "container_cpu_usage_seconds_total",
    "container_cpu_user_seconds_total",
    "container_cpu_system_seconds_total",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_memory_rss",
    "container_fs_reads_bytes_total",
    "container_fs_writes_bytes_total",
    "container_processes",
    "container_pressure_cpu_waiting_seconds_total",
    "container_pressure_cpu_stalled_seconds_total",
    "container_pressure_memory_waiting_seconds_total",
    "container_pressure_memory_stalled_seconds_total",
    "container_pressure_io_waiting_seconds_total",
    "container_pressure_io_stalled_seconds_total",
];

impl Figures {
    /// The values in [`SERIES`] order.
    pub fn values(&self) -> [Option<f64>; 15] {
        let p = |x: Option<(f64, f64)>| (x.map(|v| v.0), x.map(|v| v.1));
        let (cs, cf) = p(self.cpu_pressure);
        let (ms, mf) = p(self.memory_pressure);
        let (is, iff) = p(self.io_pressure);
        [
            self.cpu_s,
            self.user_s,
            self.system_s,
            self.memory_bytes,
            self.working_set_bytes,
            self.rss_bytes,
            self.read_bytes,
            self.write_bytes,
            self.tasks,
            cs,
            cf,
            ms,
            mf,
            is,
            iff,
        ]
    }
}

/// `key value` lines (`memory.stat`, `cpu.stat`): the value of `key`.
pub fn kv(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `blkio.throttle.io_service_bytes` (v1): Read and Write summed over devices.
pub fn blkio_bytes(text: &str) -> Option<(u64, u64)> {
    let (mut r, mut w, mut any) = (0u64, 0u64, false);
    for l in text.lines() {
        let mut f = l.split_ascii_whitespace();
        let (Some(dev), Some(op), Some(v)) = (f.next(), f.next(), f.next()) else { continue };
        if !dev.contains(':') {
            continue;
        }
        let v: u64 = v.parse().ok()?;
        match op {
            "Read" => r = r.saturating_add(v),
            "Write" => w = w.saturating_add(v),
            _ => {}
        }
        any = true;
    }
    any.then_some((r, w)).or_else(|| text.trim().starts_with("Total").then_some((0, 0)))
}

/// `io.stat` (v2): rbytes and wbytes summed over devices.
pub fn io_stat_bytes(text: &str) -> Option<(u64, u64)> {
    let (mut r, mut w) = (0u64, 0u64);
    for l in text.lines() {
        for kv in l.split_ascii_whitespace().skip(1) {
            match kv.split_once('=') {
                Some(("rbytes", v)) => r = r.saturating_add(v.parse().ok()?),
                Some(("wbytes", v)) => w = w.saturating_add(v.parse().ok()?),
                _ => {}
            }
        }
    }
    Some((r, w))
}

/// A pressure file: the `some` and `full` totals (µs) as seconds; a file
/// without `full` (cpu on older kernels) gives 0 for it.
pub fn pressure(text: &str) -> Option<(f64, f64)> {
    let total = |kind: &str| {
        text.lines().find(|l| l.starts_with(kind)).and_then(|l| {
            l.split_ascii_whitespace().find_map(|f| f.strip_prefix("total=")).and_then(|v| v.parse::<u64>().ok())
        })
    };
    Some((total("some ")? as f64 / 1e6, total("full ").unwrap_or(0) as f64 / 1e6))
}

/// A mounted hierarchy: cgroup2, or v1 with its controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub root: PathBuf,
    /// Empty for cgroup2.
    pub controllers: Vec<String>,
}

/// The cgroup hierarchies in a `/proc/self/mountinfo`.
pub fn hierarchies(mountinfo: &str) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for l in mountinfo.lines() {
        let Some((left, right)) = l.split_once(" - ") else { continue };
        let mut r = right.split_ascii_whitespace();
        let (Some(fstype), Some(_src), Some(opts)) = (r.next(), r.next(), r.next()) else { continue };
        let Some(mnt) = left.split_ascii_whitespace().nth(4) else { continue };
        match fstype {
            "cgroup2" => out.push(Hierarchy { root: mnt.into(), controllers: Vec::new() }),
            "cgroup" => {
                let controllers: Vec<String> = opts
                    .split(',')
                    .filter(|o| ["cpuacct", "memory", "blkio", "pids"].contains(o))
                    .map(str::to_owned)
                    .collect();
                if !controllers.is_empty() {
                    out.push(Hierarchy { root: mnt.into(), controllers });
                }
            }
            _ => {}
        }
    }
    out
}

/// Cgroup files kept open between rounds — a `pread` regenerates a
/// cgroup file, with no path walk, open or close — at most [`OPEN_MAX`]
/// (past that, read by path), and the cgroup directories, walked anew every
/// [`WALK_EVERY`] rounds (a cgroup created meanwhile appears within that
/// many rounds; one removed reads as gone at once). Each directory keeps
/// its own few files by name: a round joins no paths and hashes none.
#[derive(Debug, Default)]
pub struct Reader {
    /// Per hierarchy, its directories (the root first), as last walked.
    dirs: Vec<Vec<Dir>>,
    /// Files open now, over every directory.
    open: usize,
    rounds: u64,
    buf: Vec<u8>,
}

/// One cgroup directory: its path, its path from the hierarchy's root
/// (`/` for the root), and its files by name — open, or absent (this
/// kernel does not have it: not looked for again).
#[derive(Debug)]
struct Dir {
    path: PathBuf,
    rel: String,
    files: Vec<(&'static str, Option<std::fs::File>)>,
}

/// Most cgroup files kept open (the process's descriptors are shared with
/// the per-process files and the store).
pub const OPEN_MAX: usize = 256;
/// Rounds between walks of the cgroup directories.
pub const WALK_EVERY: u64 = 10;

impl Dir {
    /// File `name` of this directory, read whole into `buf`.
    fn read<'b>(&mut self, name: &'static str, buf: &'b mut Vec<u8>, open: &mut usize) -> Option<&'b str> {
        let at = match self.files.iter().position(|(n, _)| *n == name) {
            Some(at) => at,
            None if *open >= OPEN_MAX => {
                let text = std::fs::read(self.path.join(name)).ok()?;
                *buf = text;
                return std::str::from_utf8(buf).ok();
            }
            None => {
                let file = std::fs::File::open(self.path.join(name)).ok();
                *open += usize::from(file.is_some());
                self.files.push((name, file));
                self.files.len() - 1
            }
        };
        let file = self.files[at].1.as_ref()?;
        buf.resize(64 << 10, 0);
        match rustix::io::pread(file, &mut buf[..], 0) {
            Ok(n) => std::str::from_utf8(&buf[..n]).ok(),
            Err(_) => {
                // The cgroup is gone (ENODEV): forget its descriptor.
                self.files.swap_remove(at);
                *open -= 1;
                None
            }
        }
    }
}

/// Hierarchy `i`'s directories under `root` into `dirs[i]`, walked anew
/// on its turn: a directory still there keeps its open files, one gone
/// closes them.
fn walk(dirs: &mut Vec<Vec<Dir>>, open: &mut usize, rounds: u64, i: usize, root: &Path) {
    if dirs.len() <= i {
        dirs.resize_with(i + 1, Vec::new);
    }
    if !dirs[i].is_empty() && !rounds.is_multiple_of(WALK_EVERY) {
        return;
    }
    let mut old: HashMap<PathBuf, Dir> = dirs[i].drain(..).map(|d| (d.path.clone(), d)).collect();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        let d = old.remove(&dir).unwrap_or_else(|| {
            let rel = dir.strip_prefix(root).map_or_else(|_| "/".into(), |r| format!("/{}", r.display()));
            Dir { path: dir, rel, files: Vec::new() }
        });
        dirs[i].push(d);
    }
    *open -= old.values().map(|d| d.files.iter().filter(|f| f.1.is_some()).count()).sum::<usize>();
}

/// Every cgroup's figures, by path from its hierarchy's root (`/` for the
/// root), at most `max` cgroups (the rest counted in the second value).
/// A controller mounted as v1 is read there; cgroup2 fills what v1 does
/// not offer.
pub fn read_all(hs: &[Hierarchy], max: usize, user_hz: f64, r: &mut Reader) -> (BTreeMap<String, Figures>, u64) {
    let mut out: BTreeMap<String, Figures> = BTreeMap::new();
    let mut over = 0u64;
    let v1 = |c: &str| hs.iter().any(|h| h.controllers.iter().any(|x| x == c));
    // v1 first, so cgroup2 only fills gaps.
    let mut ordered: Vec<(usize, &Hierarchy)> = hs.iter().enumerate().filter(|h| !h.1.controllers.is_empty()).collect();
    ordered.extend(hs.iter().enumerate().filter(|h| h.1.controllers.is_empty()));
    let Reader { dirs, open, buf, rounds } = r;
    for (i, h) in ordered {
        walk(dirs, open, *rounds, i, &h.root);
        let has = |c: &str| h.controllers.iter().any(|x| x == c);
        for dir in &mut dirs[i] {
            if !out.contains_key(&dir.rel) && out.len() >= max {
                over += 1;
                continue;
            }
            let known = out.contains_key(&dir.rel);
            let f = out.entry(dir.rel.clone()).or_default();
            // A file's text, borrowed from the one buffer until the next read.
            macro_rules! read {
                ($name:literal) => {
                    dir.read($name, buf, open)
                };
            }
            let number = |t: Option<&str>| t.and_then(|t| t.trim().parse::<u64>().ok());
            if has("cpuacct") {
                f.cpu_s = number(read!("cpuacct.usage")).map(|ns| ns as f64 / 1e9);
                if let Some(t) = read!("cpuacct.stat") {
                    f.user_s = kv(t, "user").map(|v| v as f64 / user_hz);
                    f.system_s = kv(t, "system").map(|v| v as f64 / user_hz);
                }
            }
            if has("memory") {
                let usage = number(read!("memory.usage_in_bytes"));
                f.memory_bytes = usage.map(|u| u as f64);
                let stat = read!("memory.stat");
                let inactive = stat.and_then(|s| kv(s, "total_inactive_file").or_else(|| kv(s, "inactive_file")));
                f.working_set_bytes = usage.map(|u| u.saturating_sub(inactive.unwrap_or(0)) as f64);
                f.rss_bytes = stat.and_then(|s| kv(s, "total_rss").or_else(|| kv(s, "rss"))).map(|v| v as f64);
            }
            if has("blkio")
                && let Some((r, w)) = read!("blkio.throttle.io_service_bytes").and_then(blkio_bytes)
            {
                f.read_bytes = Some(r as f64);
                f.write_bytes = Some(w as f64);
            }
            if has("pids") {
                f.tasks = number(read!("pids.current")).map(|v| v as f64);
            }
            if h.controllers.is_empty() {
                if !v1("cpuacct")
                    && let Some(t) = read!("cpu.stat")
                {
                    f.cpu_s = kv(t, "usage_usec").map(|v| v as f64 / 1e6);
                    f.user_s = kv(t, "user_usec").map(|v| v as f64 / 1e6);
                    f.system_s = kv(t, "system_usec").map(|v| v as f64 / 1e6);
                }
                if !v1("memory")
                    && let Some(cur) = number(read!("memory.current"))
                {
                    f.memory_bytes = Some(cur as f64);
                    let stat = read!("memory.stat").unwrap_or_default();
                    f.working_set_bytes = Some(cur.saturating_sub(kv(stat, "inactive_file").unwrap_or(0)) as f64);
                    f.rss_bytes = kv(stat, "anon").map(|v| v as f64);
                }
                if !v1("blkio")
                    && let Some((r, w)) = read!("io.stat").and_then(io_stat_bytes)
                {
                    f.read_bytes = Some(r as f64);
                    f.write_bytes = Some(w as f64);
                }
                if !v1("pids") && f.tasks.is_none() {
                    f.tasks = number(read!("pids.current")).map(|v| v as f64);
                }
                f.cpu_pressure = read!("cpu.pressure").and_then(pressure);
                f.memory_pressure = read!("memory.pressure").and_then(pressure);
                f.io_pressure = read!("io.pressure").and_then(pressure);
            }
            // Nothing read: the cgroup is gone since the last walk.
            if !known && *f == Figures::default() {
                out.remove(&dir.rel);
            }
        }
    }
    *rounds += 1;
    (out, over)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_both_versions() {
        assert_eq!(kv("user 120\nsystem 30\n", "system"), Some(30));
        assert_eq!(kv("usage_usec 5\nuser_usec 3", "user_usec"), Some(3));
        let blk = "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:16 Read 100\nTotal 12388\n";
        assert_eq!(blkio_bytes(blk), Some((4196, 8192)));
        assert_eq!(blkio_bytes("Total 0\n"), Some((0, 0)));
        assert_eq!(io_stat_bytes("8:0 rbytes=10 wbytes=20 rios=1 wios=2\n8:16 rbytes=1 wbytes=2\n"), Some((11, 22)));
        let psi = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=500000\n";
        assert_eq!(pressure(psi), Some((1.5, 0.5)));
        assert_eq!(pressure("garbage"), None);
    }

    #[test]
    fn hybrid_mounts_are_found() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpuacct\n\
                  31 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory\n\
                  32 25 0:28 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n\
                  33 25 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                  34 25 0:30 / /tmp rw - tmpfs tmpfs rw\n";
        let h = hierarchies(mi);
        assert_eq!(h.len(), 3, "freezer and tmpfs are not read: {h:?}");
        assert_eq!(h[0].controllers, ["cpuacct"]);
        assert!(h[2].controllers.is_empty());
    }
}
