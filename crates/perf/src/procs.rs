//! The processes behind the samples, kept from the side band (MMAP2, COMM,
//! FORK, EXIT records) and `/proc` (processes that were running before
//! sampling began), so every batch can carry the name and executable
//! mappings of its processes ([`codec::events::ProcInfo`]): a user address
//! then names (build id or file, file offset) and resolves after its
//! process has exited. [`BuildIdCache`] keeps a copy of each file by its
//! build id, as `perf`'s `~/.debug` does, so a binary deleted or replaced
//! since still resolves.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use codec::events::{EventBatch, MAX_BUILD_ID, MAX_COMM, MAX_MAPS, MAX_PATH, MapInfo, ProcInfo};

use crate::Record;

/// User addresses are below this (x86-64 and arm64 canonical lower half).
const KERNEL_MIN: u64 = 0xffff_8000_0000_0000;

/// A side-band record, owned.
#[derive(Debug)]
enum Side {
    Map(u32, MapInfo),
    Comm { pid: u32, tid: u32, comm: String, exec: bool },
    Fork { pid: u32, ppid: u32 },
    Exit(u32),
}

#[derive(Debug, Default)]
struct Proc {
    comm: String,
    /// Sorted by start, not overlapping.
    maps: Vec<MapInfo>,
}

impl Proc {
    fn find(&self, ip: u64) -> Option<usize> {
        let i = self.maps.partition_point(|m| m.start <= ip).checked_sub(1)?;
        (ip < self.maps[i].end).then_some(i)
    }

    /// Adds a mapping; whatever it overlaps was unmapped by it.
    fn map(&mut self, m: MapInfo) {
        self.maps.retain(|o| o.end <= m.start || o.start >= m.end);
        let at = self.maps.partition_point(|o| o.start < m.start);
        self.maps.insert(at, m);
    }
}

/// Every process seen, by pid.
#[derive(Debug, Default)]
pub struct Table {
    procs: HashMap<u32, Proc>,
    /// Processes that exited this period and the last: kept until the
    /// batches that may hold their samples have gone.
    exiting: Vec<u32>,
    exited: Vec<u32>,
    /// Build ids of files read from `/proc`, by device, inode and path.
    ids: HashMap<String, Vec<u8>>,
    /// Side-band records of the current drain, applied in time order by
    /// [`Table::settle`] (each CPU's ring is in order, the rings are not).
    pending: Vec<(u64, Side)>,
    cache: Option<BuildIdCache>,
}

impl Table {
    /// A table that keeps each mapped file in `cache` (by build id).
    pub fn new(cache: Option<BuildIdCache>) -> Table {
        Table { cache, ..Table::default() }
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Reads every running process from `/proc` (those the side band will
    /// not announce: they started before sampling did).
    pub fn seed_all(&mut self) {
        let Ok(dir) = std::fs::read_dir("/proc") else { return };
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                self.seed(pid);
            }
        }
    }

    /// Reads one process from `/proc`; a process already gone is kept as
    /// known-unknown, so it is not looked for again.
    fn seed(&mut self, pid: u32) {
        let comm =
            std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim().to_owned()).unwrap_or_default();
        let mut p = Proc { comm, maps: Vec::new() };
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            for line in text.lines() {
                if let Some((m, key)) = parse_maps_line(line) {
                    let file = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
                    let id = self.ids.entry(key).or_insert_with(|| build_id(Path::new(&file)).unwrap_or_default());
                    let m = MapInfo { build_id: id.clone(), ..m };
                    self.keep(pid, &m);
                    p.map(m);
                }
            }
        }
        self.procs.insert(pid, p);
    }

    fn keep(&mut self, pid: u32, m: &MapInfo) {
        if let Some(c) = &mut self.cache {
            c.keep(pid, m);
        }
    }

    /// Starts the build-id cache's copying (see [`BuildIdCache::start`]).
    pub fn start_cache(&mut self) -> std::io::Result<()> {
        self.cache.as_mut().map_or(Ok(()), BuildIdCache::start)
    }

    /// Takes a side-band record (others are ignored); it applies at the
    /// next [`Table::settle`].
    pub fn record(&mut self, r: &Record<'_>) {
        let side = match *r {
            Record::Mmap2 { time, pid, addr, len, pgoff, build_id, filename, .. } => {
                // Anonymous and special mappings ([vdso], //anon) name no file.
                if !filename.starts_with(b"/") || filename.starts_with(b"//") || len == 0 {
                    return;
                }
                let m = MapInfo {
                    start: addr,
                    end: addr.saturating_add(len),
                    pgoff,
                    build_id: build_id.to_vec(),
                    path: String::from_utf8_lossy(filename).into_owned(),
                };
                let m = if m.build_id.is_empty() {
                    // (While the process lives: read it now.)
                    let file = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
                    MapInfo { build_id: build_id_of(Path::new(&file), &m.path).unwrap_or_default(), ..m }
                } else {
                    m
                };
                self.keep(pid, &m);
                (time, Side::Map(pid, m))
            }
            Record::Comm { time, pid, tid, comm, exec } => {
                (time, Side::Comm { pid, tid, comm: String::from_utf8_lossy(comm).into_owned(), exec })
            }
            Record::Fork { time, pid, ppid, .. } if pid != ppid => (time, Side::Fork { pid, ppid }),
            Record::Exit { time, pid, tid } if pid == tid => (time, Side::Exit(pid)),
            _ => return,
        };
        self.pending.push(side);
    }

    /// Applies the records taken since the last call, in time order.
    pub fn settle(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| p.0);
        for (_, side) in pending.drain(..) {
            self.apply(side);
        }
        self.pending = pending;
    }

    fn apply(&mut self, side: Side) {
        match side {
            Side::Map(pid, m) => self.procs.entry(pid).or_default().map(m),
            Side::Comm { pid, tid, comm, exec } => {
                let p = self.procs.entry(pid).or_default();
                if exec {
                    // A new image: its mappings follow.
                    p.maps.clear();
                }
                if exec || pid == tid {
                    p.comm = comm;
                }
            }
            Side::Fork { pid, ppid } => {
                // A new process: a copy of its parent's address space.
                let child = match self.procs.get(&ppid) {
                    Some(p) => Proc { comm: p.comm.clone(), maps: p.maps.clone() },
                    None => Proc::default(),
                };
                self.procs.insert(pid, child);
                self.exiting.retain(|&p| p != pid);
                self.exited.retain(|&p| p != pid);
            }
            Side::Exit(pid) => self.exiting.push(pid),
        }
    }

    /// The processes of `batch` with the mappings its user addresses (ips
    /// and call chains) fall in; processes not seen yet are read from
    /// `/proc`.
    pub fn infos(&mut self, batch: &EventBatch) -> Vec<ProcInfo> {
        // pid -> indices of the mappings hit.
        let mut hits: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut mark = |table: &mut Table, pid: u32, ips: &[u64]| {
            if pid == 0 {
                return;
            }
            if !table.procs.contains_key(&pid) {
                table.seed(pid);
            }
            let p = &table.procs[&pid];
            let h = hits.entry(pid).or_default();
            let mut last: Option<usize> = None;
            for &ip in ips.iter().filter(|&&ip| ip < KERNEL_MIN) {
                if let Some(i) = last
                    && (p.maps[i].start..p.maps[i].end).contains(&ip)
                {
                    continue;
                }
                if let Some(i) = p.find(ip) {
                    last = Some(i);
                    if !h.contains(&i) {
                        h.push(i);
                    }
                }
            }
        };
        if batch.chain.is_empty() {
            // Runs of one process: a run's addresses in one call.
            let mut i = 0;
            while i < batch.len() {
                let pid = batch.pid[i];
                let j = batch.pid[i..].iter().position(|&p| p != pid).map_or(batch.len(), |k| i + k);
                mark(self, pid, &batch.ip[i..j]);
                i = j;
            }
        } else {
            let distinct: HashSet<(u32, u32)> = batch.pid.iter().copied().zip(batch.chain.iter().copied()).collect();
            for (pid, c) in distinct {
                mark(self, pid, &batch.stacks[c as usize]);
            }
        }
        let mut out: Vec<ProcInfo> = hits
            .into_iter()
            .map(|(pid, mut h)| {
                let p = &self.procs[&pid];
                h.sort_unstable();
                // Within the batch format's bounds (a batch beyond them
                // would be refused, and its samples with it).
                h.truncate(MAX_MAPS);
                let maps = h.iter().map(|&i| bounded(p.maps[i].clone())).collect();
                ProcInfo { pid, comm: cut(p.comm.clone(), MAX_COMM), maps }
            })
            .collect();
        out.sort_by_key(|p| p.pid);
        out
    }

    /// Ends a period (after its batches took their [`ProcInfo`]s): forgets
    /// the processes that exited the period before.
    pub fn end_period(&mut self) {
        for pid in std::mem::take(&mut self.exited) {
            self.procs.remove(&pid);
        }
        self.exited = std::mem::take(&mut self.exiting);
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

fn bounded(mut m: MapInfo) -> MapInfo {
    m.path = cut(m.path, MAX_PATH);
    m.build_id.truncate(MAX_BUILD_ID);
    m
}

/// One line of `/proc/PID/maps` if it is an executable file mapping, with a
/// key naming the file (device, inode, path).
fn parse_maps_line(line: &str) -> Option<(MapInfo, String)> {
    let mut f = line.splitn(6, ' ');
    let (range, perms, off, dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let path = f.next()?.trim_start();
    if !perms.contains('x') || !path.starts_with('/') {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let m = MapInfo {
        start: u64::from_str_radix(a, 16).ok()?,
        end: u64::from_str_radix(b, 16).ok()?,
        pgoff: u64::from_str_radix(off, 16).ok()?,
        build_id: Vec::new(),
        path: path.strip_suffix(" (deleted)").unwrap_or(path).to_owned(),
    };
    (m.end > m.start).then(|| (m, format!("{dev} {inode} {path}")))
}

/// The GNU build id of an ELF file.
pub fn build_id(file: &Path) -> Option<Vec<u8>> {
    #[cfg(feature = "symbols")]
    {
        blazesym::helper::read_elf_build_id(&file).ok().flatten().map(|id| id.to_vec())
    }
    #[cfg(not(feature = "symbols"))]
    {
        let _ = file;
        None
    }
}

/// The build id of a mapped file: through `/proc/PID/map_files` (the very
/// file mapped, even if deleted since), else its path.
fn build_id_of(map_file: &Path, path: &str) -> Option<Vec<u8>> {
    build_id(map_file).or_else(|| build_id(Path::new(path)))
}

/// Hex of a build id: its file name in the cache.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a data directory keeps mapped files by build id (the sampler of
/// `up` and of an agent writes it; profile queries of its store read it).
pub const CACHE_DIR: &str = "buildid";

/// Files larger than this are not cached (named by path only).
pub const CACHE_MAX_FILE: u64 = 512 << 20;

/// Counters of the build-id cache.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub files: AtomicU64,
    /// Bytes copied (hard links copy none).
    pub bytes: AtomicU64,
    /// Files that could not be kept (gone before they were copied, too
    /// large, or their build id differed): their addresses resolve only
    /// while the file stays at its path.
    pub failed: AtomicU64,
    /// Copies dropped (oldest first) to keep the cache within its budget.
    pub evicted: AtomicU64,
}

/// Keeps every mapped file, once per build id, as `DIR/<hex build id>` (a
/// hard link, or a copy across filesystems) on a thread of its own
/// (sampling never waits for a copy).
#[derive(Debug)]
pub struct BuildIdCache {
    dir: PathBuf,
    seen: HashSet<Vec<u8>>,
    tx: SyncSender<(Vec<u8>, Vec<PathBuf>)>,
    /// Until [`BuildIdCache::start`]: files wait in the queue.
    rx: Option<Receiver<(Vec<u8>, Vec<PathBuf>)>>,
    /// Most bytes of copies kept (hard links cost none).
    budget: u64,
    pub stats: Arc<CacheStats>,
}

impl BuildIdCache {
    /// A cache in `dir`; nothing is written before [`BuildIdCache::start`]
    /// (the data directory may not be a store yet).
    pub fn new(dir: &Path) -> BuildIdCache {
        let (tx, rx) = std::sync::mpsc::sync_channel(4096);
        BuildIdCache {
            dir: dir.to_owned(),
            seen: HashSet::new(),
            tx,
            rx: Some(rx),
            budget: u64::MAX,
            stats: Arc::default(),
        }
    }

    /// Keeps the copies in the cache within `bytes`: after each copy the
    /// oldest copies go until they fit (a file that is a hard link of one
    /// still in place elsewhere costs no space and is not counted). A
    /// binary dropped is named only while it stays at its path.
    pub fn with_budget(mut self, bytes: u64) -> BuildIdCache {
        self.budget = bytes;
        self
    }

    /// Creates the directory and starts copying.
    pub fn start(&mut self) -> std::io::Result<()> {
        let Some(rx) = self.rx.take() else { return Ok(()) };
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("build-id cache {}: {e}", self.dir.display())))?;
        let (d, s, budget) = (self.dir.clone(), Arc::clone(&self.stats), self.budget);
        std::thread::Builder::new().name("kansoku-buildid".into()).spawn(move || copier(&d, &rx, &s, budget))?;
        Ok(())
    }

    fn keep(&mut self, pid: u32, m: &MapInfo) {
        if m.build_id.is_empty() || !self.seen.insert(m.build_id.clone()) {
            return;
        }
        let from =
            vec![PathBuf::from(&m.path), PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))];
        if let Err(TrySendError::Full(_)) = self.tx.try_send((m.build_id.clone(), from)) {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn copier(dir: &Path, rx: &Receiver<(Vec<u8>, Vec<PathBuf>)>, stats: &CacheStats, budget: u64) {
    for (id, from) in rx {
        let dest = dir.join(hex(&id));
        if dest.exists() {
            continue;
        }
        let tmp = dir.join(format!(".{}.tmp", hex(&id)));
        let _ = std::fs::remove_file(&tmp);
        // A hard link where the file is on the same filesystem (no copy;
        // the inode stays when the path is deleted or replaced by a new
        // file, as package managers and linkers do), else a copy.
        let copied = from.iter().any(|src| {
            let fits = std::fs::metadata(src).is_ok_and(|m| m.len() <= CACHE_MAX_FILE);
            fits && build_id(src).as_deref() == Some(&id[..])
                && (std::fs::hard_link(src, &tmp).is_ok()
                    || std::fs::copy(src, &tmp).is_ok_and(|n| {
                        stats.bytes.fetch_add(n, Ordering::Relaxed);
                        true
                    }))
                && std::fs::rename(&tmp, &dest).is_ok()
        });
        if copied {
            stats.files.fetch_add(1, Ordering::Relaxed);
            prune(dir, budget, &dest, stats);
        } else {
            let _ = std::fs::remove_file(&tmp);
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("build-id cache: could not keep {} from {from:?}", hex(&id));
        }
    }
}

/// Drops the oldest copies in `dir` (by modification time: when copied)
/// until the copies fit `budget` bytes, never `keep` (just copied). Hard
/// links count at their size too: the budget is what `du` shows of the
/// directory (a link is free only while its other path lives, and
/// `--perf-callchain` on a build machine linked 1.6 GB of binaries past a
/// 1 GB budget that did not count them).
fn prune(dir: &Path, budget: u64, keep: &Path, stats: &CacheStats) {
    if budget == u64::MAX {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut copies: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            (m.is_file() && !e.file_name().to_string_lossy().starts_with('.'))
                .then(|| (m.modified().unwrap_or(std::time::UNIX_EPOCH), m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = copies.iter().map(|c| c.1).sum();
    if total <= budget {
        return;
    }
    copies.sort();
    for (_, len, path) in copies {
        if total <= budget {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= len;
            stats.evicted.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("build-id cache: dropped {} to stay within {budget} bytes", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_beyond_the_budget_go_oldest_first_and_links_count_as_du_counts_them() {
        let dir = std::env::temp_dir().join(format!("kansoku-prune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stats = CacheStats::default();
        let file = |name: &str, age_s: u64| {
            let p = dir.join(name);
            std::fs::write(&p, vec![0u8; 1000]).unwrap();
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(age_s);
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(t).unwrap();
            p
        };
        let (old, mid, new) = (file("aa", 300), file("bb", 200), file("cc", 0));
        // A hard link of a file kept elsewhere (older than all): it counts.
        let elsewhere = dir.join(".outside");
        std::fs::write(&elsewhere, vec![0u8; 5000]).unwrap();
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(400);
        std::fs::File::options().write(true).open(&elsewhere).unwrap().set_modified(t).unwrap();
        std::fs::hard_link(&elsewhere, dir.join("dd")).unwrap();
        prune(&dir, 2000, &new, &stats);
        assert!(!dir.join("dd").exists() && !old.exists() && mid.exists() && new.exists());
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 2);
        // The one just copied stays even alone over the budget.
        prune(&dir, 500, &new, &stats);
        assert!(!mid.exists() && new.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn map(start: u64, end: u64, path: &str) -> MapInfo {
        MapInfo { start, end, pgoff: 0x1000, build_id: vec![1, 2], path: path.into() }
    }

    #[test]
    fn maps_lines_are_read() {
        let (m, _) =
            parse_maps_line("55d0c8a00000-55d0c8a91000 r-xp 00031000 fe:01 1837     /usr/bin/bash (deleted)").unwrap();
        assert_eq!(
            (m.start, m.end, m.pgoff, m.path.as_str()),
            (0x55d0c8a00000, 0x55d0c8a91000, 0x31000, "/usr/bin/bash")
        );
        assert!(parse_maps_line("7ffd1000-7ffd3000 r-xp 00000000 00:00 0          [vdso]").is_none());
        assert!(parse_maps_line("55d0c8a00000-55d0c8a91000 r--p 00000000 fe:01 1837     /usr/bin/bash").is_none());
        assert!(parse_maps_line("garbage").is_none());
    }

    fn mmap<'a>(time: u64, pid: u32, addr: u64, len: u64, name: &'a [u8]) -> Record<'a> {
        Record::Mmap2 { time, pid, tid: pid, addr, len, pgoff: 0x1000, build_id: &[1, 2], filename: name }
    }

    #[test]
    fn the_side_band_builds_each_process_and_batches_carry_what_they_hit() {
        let mut t = Table::new(None);
        // Out of order, as the rings of different CPUs give them.
        t.record(&Record::Fork { time: 6, pid: 9, ppid: 7, tid: 9 });
        t.record(&mmap(1, 7, 0x1000, 0x1000, b"/bin/a"));
        t.record(&mmap(2, 7, 0x4000, 0x2000, b"/lib/b.so"));
        t.record(&mmap(3, 7, 0x9000, 0x1000, b"//anon"));
        t.record(&Record::Comm { time: 4, pid: 7, tid: 7, comm: b"a", exec: false });
        t.record(&Record::Comm { time: 5, pid: 7, tid: 8, comm: b"worker", exec: false });
        t.settle();
        let mut b = EventBatch::default();
        for (pid, ip) in [(7, 0x1100), (7, 0x1200), (7, 0x9100), (9, 0x4100), (9, 0xffff_ffff_8100_0000), (0, 5)] {
            b.push(0, pid, pid, ip);
        }
        let infos = t.infos(&b);
        assert_eq!(
            infos,
            [
                ProcInfo { pid: 7, comm: "a".into(), maps: vec![map(0x1000, 0x2000, "/bin/a")] },
                ProcInfo { pid: 9, comm: "a".into(), maps: vec![map(0x4000, 0x6000, "/lib/b.so")] },
            ]
        );
        // exec: a new image replaces the old.
        t.record(&mmap(8, 9, 0x1800, 0x1000, b"/bin/c"));
        t.record(&Record::Comm { time: 7, pid: 9, tid: 9, comm: b"c", exec: true });
        t.settle();
        let mut b = EventBatch::default();
        b.push(0, 9, 9, 0x1900);
        b.push(1, 9, 9, 0x4100);
        assert_eq!(t.infos(&b), [ProcInfo { pid: 9, comm: "c".into(), maps: vec![map(0x1800, 0x2800, "/bin/c")] }]);
        // An exited process lasts one more period, for its last batch.
        t.record(&Record::Exit { time: 9, pid: 9, tid: 9 });
        t.settle();
        t.end_period();
        assert_eq!(t.infos(&b)[0].comm, "c");
        t.end_period();
        assert!(!t.procs.contains_key(&9));
    }

    #[test]
    fn batches_stay_within_the_format_s_bounds() {
        let mut t = Table::new(None);
        let long = format!("/{}", "é".repeat(MAX_PATH));
        let mut b = EventBatch::default();
        for i in 0..MAX_MAPS as u64 + 10 {
            t.record(&mmap(i, 7, 0x1000 * (i + 1), 0x1000, long.as_bytes()));
            b.push(0, 7, 7, 0x1000 * (i + 1));
        }
        t.record(&Record::Comm { time: 0, pid: 7, tid: 7, comm: "x".repeat(999).as_bytes(), exec: false });
        t.settle();
        b.procs = t.infos(&b);
        assert_eq!(b.procs[0].maps.len(), MAX_MAPS);
        assert!(b.procs[0].maps[0].path.len() <= MAX_PATH && b.procs[0].comm.len() <= MAX_COMM);
        b.validate().unwrap();
    }

    #[test]
    fn overlapping_mappings_replace_what_they_cover() {
        let mut p = Proc::default();
        p.map(map(0x1000, 0x3000, "/a"));
        p.map(map(0x5000, 0x6000, "/b"));
        p.map(map(0x2000, 0x5800, "/c"));
        assert_eq!(p.maps.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(), ["/c"]);
        assert_eq!(p.find(0x2000), Some(0));
        assert_eq!(p.find(0x5800), None);
        assert_eq!(p.find(0x1fff), None);
    }

    #[test]
    fn this_process_is_read_from_proc_with_build_ids() {
        let mut t = Table::new(None);
        let me = std::process::id();
        let mut b = EventBatch::default();
        b.push(0, me, me, this_process_is_read_from_proc_with_build_ids as *const () as usize as u64);
        let infos = t.infos(&b);
        assert_eq!(infos.len(), 1);
        let m = &infos[0].maps[0];
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(Path::new(&m.path), exe);
        assert_eq!(Some(m.build_id.clone()), build_id(&exe), "build id read from the file");
    }
}
