//! Processes (`kansoku up --processes 1s`, and `kansoku agent`'s): every
//! process's CPU, memory, storage I/O, faults, context switches and threads
//! from `/proc/PID/{stat,io,status}` (`procfs`), summed per process name as
//! process-exporter's `namedprocess_namegroup_*` series, plus
//! `kansoku_process_*` series for each process above a CPU or memory
//! threshold. Exits are accounted from the kernel's taskstats records
//! (`taskstats`, read on a thread of its own): a process that lived 30 ms
//! between two scans still adds its CPU to its group, and a group's counters
//! never go back when members exit. A process that execs another program
//! moves to that program's group from then on. Every cgroup too (`cgroups`:
//! v2, and v1 controllers where mounted), as cAdvisor's `container_*` series.
//! Cardinality stays bounded: per-process series only above the threshold and
//! at most `max_processes` at once (a process's series end with a staleness
//! marker when it exits), at most `max_groups` names (the rest in `other`);
//! everything past a bound is counted. Kernel threads are one group,
//! `[kernel]`.
//!
//! The `/proc` parsers (`procfs::{parse_stat, parse_io, parse_status,
//! parse_pss}`) and taskstats' records (generic netlink, parsed from bytes by
//! `taskstats::parse`, into `taskstats::Exit`s) are fuzzed; an ended
//! process's series ids are reused. `cgroups::hierarchies` finds the
//! mounted cgroup hierarchies. Counters are written as they stood at the
//! round's stamp, not when the scan reached them (`align`): a late round
//! does not make a rate exceed what happened.

pub mod align;
pub mod cgroups;
pub mod procfs;
pub mod taskstats;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, TrySendError, sync_channel};
use std::time::Duration;

use model::producer::{Producer, ReportFn};
use model::{Batch, SeriesKey, Timestamp};

/// Exit records waiting for the next round, at most.
const EXIT_QUEUE: usize = 1 << 16;
/// Rounds a vanished process waits for its exit record before its last
/// figures are taken as final.
const GRACE_ROUNDS: u8 = 2;

#[derive(Debug, Clone)]
pub struct Config {
    pub interval: Duration,
    pub host: String,
    /// A process gets series of its own from this share of a core…
    pub min_cpu: f64,
    /// …or this resident size.
    pub min_rss_bytes: u64,
    pub max_processes: usize,
    pub max_groups: usize,
    /// `/proc` (a fixture tree in tests).
    pub proc: std::path::PathBuf,
    /// Also every cgroup (`cgroups`), at most this many (0: none).
    pub max_cgroups: usize,
}

impl Config {
    pub fn new(interval: Duration, host: String) -> Config {
        Config {
            interval,
            host,
            min_cpu: 0.01,
            min_rss_bytes: 256 << 20,
            max_processes: 500,
            max_groups: 1000,
            proc: "/proc".into(),
            max_cgroups: 1000,
        }
    }
}

/// What the collector counts of itself (`/api/v1/status`, and as series).
#[derive(Debug, Default)]
pub struct Stats {
    pub rounds: AtomicU64,
    pub scan_ns: AtomicU64,
    /// Processes that ended with an exit record (their final figures).
    pub exits_accounted: AtomicU64,
    /// Of those, processes born and gone between two scans.
    pub exits_between_scans: AtomicU64,
    /// Processes gone with no exit record in time: their last scanned figures kept.
    pub exits_unaccounted: AtomicU64,
    /// Exit records the queue had no room for.
    pub exit_records_dropped: AtomicU64,
    /// Times the kernel dropped exit records (the socket overran).
    pub exit_overruns: AtomicU64,
    /// Processes above the threshold left without series of their own.
    pub over_max_processes: AtomicU64,
    /// Names folded into `other`.
    pub over_max_groups: AtomicU64,
    /// Cgroups past `max_cgroups`, left out (last round).
    pub over_max_cgroups: AtomicU64,
    pub cgroups: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub missed_intervals: AtomicU64,
    pub tracked: AtomicU64,
    /// Rounds whose run times could not be read from the task iterator
    /// (walked `/proc` instead).
    pub runtime_errors: AtomicU64,
}

impl Stats {
    /// The figures of `/api/v1/status`'s `processes` part.
    pub fn report(&self) -> Vec<model::report::Figure> {
        use model::report::Figure;
        vec![
            Figure::counter("rounds", self.rounds.load(Relaxed)),
            Figure::counter_seconds("scan_seconds", self.scan_ns.load(Relaxed) as f64 / 1e9),
            Figure::counter("exits_accounted", self.exits_accounted.load(Relaxed)),
            Figure::counter("exits_between_scans", self.exits_between_scans.load(Relaxed)),
            Figure::counter("exits_unaccounted", self.exits_unaccounted.load(Relaxed)),
            Figure::counter(
                "exit_records_dropped",
                self.exit_records_dropped.load(Relaxed) + self.exit_overruns.load(Relaxed),
            ),
            Figure::counter("over_max_processes", self.over_max_processes.load(Relaxed)),
            Figure::counter("runtime_errors", self.runtime_errors.load(Relaxed)),
            Figure::counter("over_max_groups", self.over_max_groups.load(Relaxed)),
            Figure::gauge("cgroups", self.cgroups.load(Relaxed)),
            Figure::gauge("over_max_cgroups", self.over_max_cgroups.load(Relaxed)),
            Figure::counter("dropped_batches", self.dropped_batches.load(Relaxed)),
            Figure::counter("missed_intervals", self.missed_intervals.load(Relaxed)),
        ]
    }
}

/// Counters of a process or a group.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub user_s: f64,
    pub system_s: f64,
    pub majflt: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub voluntary: u64,
    pub nonvoluntary: u64,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.user_s += o.user_s;
        self.system_s += o.system_s;
        self.majflt += o.majflt;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.voluntary += o.voluntary;
        self.nonvoluntary += o.nonvoluntary;
    }

    fn of_exit(e: &taskstats::Exit) -> Counters {
        Counters {
            user_s: e.utime_us as f64 / 1e6,
            system_s: e.stime_us as f64 / 1e6,
            majflt: e.majflt,
            read_bytes: e.read_bytes,
            write_bytes: e.write_bytes,
            voluntary: e.nvcsw,
            nonvoluntary: e.nivcsw,
        }
    }

    /// Field by field what `self` has beyond `o` (never below zero).
    fn minus(&self, o: &Counters) -> Counters {
        Counters {
            user_s: (self.user_s - o.user_s).max(0.0),
            system_s: (self.system_s - o.system_s).max(0.0),
            majflt: self.majflt.saturating_sub(o.majflt),
            read_bytes: self.read_bytes.saturating_sub(o.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(o.write_bytes),
            voluntary: self.voluntary.saturating_sub(o.voluntary),
            nonvoluntary: self.nonvoluntary.saturating_sub(o.nonvoluntary),
        }
    }

    /// Field by field the larger: an exit record's totals can trail the
    /// last scan by a tick of rounding; a counter must not go back.
    fn max(&self, o: &Counters) -> Counters {
        Counters {
            user_s: self.user_s.max(o.user_s),
            system_s: self.system_s.max(o.system_s),
            majflt: self.majflt.max(o.majflt),
            read_bytes: self.read_bytes.max(o.read_bytes),
            write_bytes: self.write_bytes.max(o.write_bytes),
            voluntary: self.voluntary.max(o.voluntary),
            nonvoluntary: self.nonvoluntary.max(o.nonvoluntary),
        }
    }
}

#[derive(Debug, Clone)]
struct Proc {
    start: u64,
    group: String,
    name: String,
    last: Counters,
    rss: u64,
    threads: u64,
    /// utime + stime at the last scan, in ticks.
    ticks: u64,
    /// Run time (ns, schedstat) at the last read, if single-threaded.
    runtime: u64,
    /// Rounds since it was last seen in `/proc`.
    gone: u8,
    /// Its own series, once it crossed the threshold.
    tracked: bool,
    /// Their ids, once declared.
    ids: Vec<u32>,
    /// Open descriptors at the last count (NaN: not counted yet).
    fds: f64,
    /// Proportional set size at the last read, bytes (NaN: not read yet).
    pss: f64,
    /// Its resident bytes when its PSS was read.
    pss_rss: u64,
    /// Its state letter at the last read of its `stat` (or the iterator's).
    state: u8,
    /// A kernel thread (kthreadd and its children).
    kernel: bool,
    /// Its counters when it became the program it is now (an exec): what
    /// it did before is its old group's.
    base: Counters,
}

impl Proc {
    /// A copy without its series ids (the ended list carries those).
    fn clone_shell(&self) -> Proc {
        Proc { ids: Vec::new(), ..self.clone() }
    }
}

#[derive(Debug, Default)]
struct Group {
    /// Final figures of members that are gone.
    dead: Counters,
    /// Its series' ids, once declared.
    ids: Vec<u32>,
    /// This round's live members: their counters (since their exec), how
    /// many, threads, resident bytes.
    live: (Counters, u64, u64, u64),
    /// This round's live members by state ([`procfs::STATES`]).
    states: [u64; 5],
}

pub use model::task::Thread;

/// Every thread, from a source cheaper than `/proc`, into the vector given.
pub type Runtimes = Box<dyn FnMut(&mut Vec<Thread>) -> std::io::Result<()> + Send>;

/// The processes producer.
pub struct Processes {
    /// Where the round's processes and their run times come from, if not
    /// from a `/proc` walk and a schedstat per process.
    runtimes: Option<Runtimes>,
    tasks: Vec<Thread>,
    cfg: Config,
    stats: Arc<Stats>,
    exits: Option<Receiver<taskstats::Exit>>,
    procs: HashMap<u32, Proc>,
    groups: HashMap<String, Group>,
    own_ids: Vec<u32>,
    free_ids: Vec<u32>,
    next_id: u32,
    ticks_per_s: f64,
    page: u64,
    last_t: Option<i64>,
    /// Processes taken as ended at their last scan, no exit record seen
    /// (yet): if one comes late, only what it adds is added. Forgotten
    /// after [`RECENT_ROUNDS`].
    recent: HashMap<u32, (String, Counters, u32)>,
    /// Each process's `/proc/PID/stat`, kept open.
    fds: HashMap<u32, std::fs::File>,
    /// And its schedstat (single-threaded processes).
    sched_fds: HashMap<u32, std::fs::File>,
    buf: Vec<u8>,
    round_no: u64,
    hierarchies: Vec<cgroups::Hierarchy>,
    /// Each cgroup's series ids, by [`cgroups::SERIES`] slot, once declared.
    cgroup_ids: HashMap<String, [Option<u32>; 15]>,
    /// The cgroup files kept open and the directories last walked.
    cgroup_files: cgroups::Reader,
    /// This round's CPU share per process (kept for its allocation).
    cpu_now: HashMap<u32, f64>,
    /// The counters' last readings, to write them as they stood at the
    /// stamp (`align`).
    aligner: align::Aligner,
    /// When this round's process scan began (realtime ns).
    scanned_at: i64,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("cfg", &self.cfg)
            .field("runtimes", &self.runtimes.is_some())
            .field("processes", &self.procs.len())
            .finish_non_exhaustive()
    }
}

/// What a scan of one process found.
enum Sample {
    /// Known, and it has not run since the last read.
    Unchanged,
    /// Its stat, its counters, its run time (`u64::MAX`: not gated).
    Fresh(procfs::Stat, Counters, u64),
}

/// A process whose CPU time did not move has its io and status read on
/// its turn, once in this many rounds.
const FULL_EVERY: u64 = 30;

/// With the task iterator (which gives every process's run time,
/// switches, storage bytes and state each round), a process that did not
/// run has its `stat` read on its turn once in this many rounds: for its
/// resident set, which moves without it running only when the kernel
/// reclaims or swaps its pages (five minutes at 1 s).
const GIVEN_FULL_EVERY: u64 = 300;

/// A tracked process's proportional set size is re-read on its turn once
/// in this many rounds (sooner when its resident set moves by an eighth).
const PSS_EVERY: u64 = 300;

/// A kernel thread's counters from the task iterator: its run time is
/// system time (the tick-sampled split `stat` gives is all system too).
fn kernel_counters(g: &Thread) -> Counters {
    Counters {
        user_s: 0.0,
        system_s: g.runtime_ns as f64 / 1e9,
        majflt: 0,
        read_bytes: g.read_bytes,
        write_bytes: g.write_bytes,
        voluntary: g.voluntary,
        nonvoluntary: g.nonvoluntary,
    }
}

/// The group of every kernel thread.
pub const KERNEL_GROUP: &str = "[kernel]";

/// Rounds a process taken as ended without its exit record is remembered.
const RECENT_ROUNDS: u32 = 60;

/// The ticks of `/proc/PID/stat` (USER_HZ).
fn user_hz() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

impl Processes {
    /// A collector; `exits` on (root) listens for taskstats records on a
    /// thread of its own. Without them (not root, an old kernel) the
    /// collector still works: a process is accounted to its last scan, and
    /// the reason is returned to be logged.
    pub fn new(cfg: Config, exits: bool) -> (Processes, Option<String>) {
        let stats = Arc::new(Stats::default());
        let (rx, why) = if exits {
            match listen(&stats) {
                Ok(rx) => (Some(rx), None),
                Err(e) => (None, Some(format!("taskstats: {e} (exits are accounted to their last scan)"))),
            }
        } else {
            (None, None)
        };
        let c = Processes {
            runtimes: None,
            tasks: Vec::new(),
            cfg,
            stats,
            exits: rx,
            procs: HashMap::default(),
            groups: HashMap::default(),
            own_ids: Vec::new(),
            free_ids: Vec::new(),
            next_id: 0,
            ticks_per_s: user_hz(),
            page: rustix::param::page_size() as u64,
            last_t: None,
            recent: HashMap::default(),
            fds: HashMap::default(),
            sched_fds: HashMap::default(),
            buf: Vec::with_capacity(4096),
            round_no: 0,
            hierarchies: std::fs::read_to_string("/proc/self/mountinfo")
                .map(|m| cgroups::hierarchies(&m))
                .unwrap_or_default(),
            cgroup_ids: HashMap::default(),
            cgroup_files: cgroups::Reader::default(),
            cpu_now: HashMap::default(),
            aligner: align::Aligner::default(),
            scanned_at: 0,
        };
        (c, why)
    }

    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    fn group_for(&mut self, name: &str) -> String {
        if self.groups.contains_key(name) {
            return name.to_owned();
        }
        if self.groups.len() >= self.cfg.max_groups {
            self.stats.over_max_groups.fetch_add(1, Relaxed);
            self.groups.entry("other".into()).or_default();
            return "other".into();
        }
        self.groups.insert(name.to_owned(), Group::default());
        name.to_owned()
    }

    /// A process's figures are final: into its group's dead sum.
    fn bury(&mut self, group: &str, c: &Counters) {
        if let Some(g) = self.groups.get_mut(group) {
            g.dead.add(c);
        }
    }

    fn take_exits(&mut self, ended: &mut Vec<(u32, Proc)>) {
        let Some(rx) = &self.exits else { return };
        let mut got = Vec::new();
        while let Ok(e) = rx.try_recv() {
            got.push(e);
        }
        for e in got {
            let Some(tgid) = e.process() else { continue };
            let fin = Counters::of_exit(&e);
            self.stats.exits_accounted.fetch_add(1, Relaxed);
            if let Some((group, buried, _)) = self.recent.remove(&tgid) {
                // Late: its last scan is in already; add the rest.
                self.bury(&group, &fin.minus(&buried));
                self.stats.exits_unaccounted.fetch_sub(1, Relaxed);
                continue;
            }
            match self.procs.remove(&tgid) {
                Some(p) => {
                    let c = fin.max(&p.last).minus(&p.base);
                    self.bury(&p.group.clone(), &c);
                    ended.push((tgid, p));
                }
                None => {
                    self.stats.exits_between_scans.fetch_add(1, Relaxed);
                    let g = self.group_for(if e.comm.is_empty() { "[unnamed]" } else { &e.comm });
                    self.bury(&g, &fin);
                }
            }
        }
    }

    /// `/proc/PID/FILE` into the reused buffer; its length.
    fn read_file(&mut self, pid: &str, file: &str) -> Option<usize> {
        use std::io::Read;
        let mut f = std::fs::File::open(self.cfg.proc.join(pid).join(file)).ok()?;
        self.buf.clear();
        f.read_to_end(&mut self.buf).ok()
    }

    /// Reads `pid`'s stat through a descriptor kept open from round to
    /// round (a pread regenerates it: no open and close, a third of the
    /// cost), and its io and status only when its CPU time moved, when it
    /// is new, or on its turn every [`FULL_EVERY`] rounds — an idle process
    /// costs one pread.
    fn sample(&mut self, pid: u32, pid_s: &str, given: Option<Thread>) -> Option<Sample> {
        // Its run time says whether it ran at all: as given (every process,
        // from the task iterator; `round` has passed over those that did
        // not run already), else a single-threaded process's schedstat (its
        // run time in ns, three numbers to format instead of fifty-two).
        let turn = (self.round_no + u64::from(pid)).is_multiple_of(FULL_EVERY);
        let single = self.procs.get(&pid).is_some_and(|p| p.threads == 1);
        let runtime = match given {
            Some(g) => Some(g.runtime_ns),
            None if single => self.runtime(pid, pid_s),
            None => None,
        };
        if !turn
            && let Some(rt) = runtime
            && self.procs.get(&pid).is_some_and(|p| p.runtime == rt)
        {
            return Some(Sample::Unchanged);
        }
        // A known kernel thread that ran: the iterator says all its stat
        // would (its run time is its system time; it has no memory, faults
        // or storage bytes of its own), unless its run time went back (a
        // new thread under a dead one's pid: read its stat).
        if let Some(g) = given
            && g.kernel
            && let Some(p) = self.procs.get(&pid)
            && p.kernel
            && (p.runtime == u64::MAX || g.runtime_ns >= p.runtime)
        {
            let stat = procfs::Stat {
                pid,
                comm: p.name.clone(),
                state: if g.state == 0 { p.state } else { g.state },
                ppid: if pid == 2 { 0 } else { 2 },
                majflt: 0,
                utime: 0,
                stime: p.ticks,
                num_threads: 1,
                starttime: p.start,
                rss_pages: 0,
            };
            return Some(Sample::Fresh(stat, kernel_counters(&g), g.runtime_ns));
        }
        let mut stat = None;
        for attempt in 0..2 {
            if !self.fds.contains_key(&pid) {
                let f = std::fs::File::open(self.cfg.proc.join(pid_s).join("stat")).ok()?;
                self.fds.insert(pid, f);
            }
            let mut buf = std::mem::take(&mut self.buf);
            buf.resize(1024, 0);
            let n = rustix::io::pread(&self.fds[&pid], &mut buf[..], 0).ok();
            let parsed = n.and_then(|n| std::str::from_utf8(&buf[..n]).ok()).and_then(procfs::parse_stat);
            self.buf = buf;
            match parsed {
                Some(s) => {
                    stat = Some(s);
                    break;
                }
                // The descriptor's process is gone (the pid may be a new
                // one's now): once more with a fresh descriptor.
                None if attempt == 0 => {
                    self.fds.remove(&pid);
                }
                None => {
                    self.fds.remove(&pid);
                    return None;
                }
            }
        }
        let stat = stat?;
        if let Some(g) = given
            && g.kernel
        {
            return Some(Sample::Fresh(stat, kernel_counters(&g), g.runtime_ns));
        }
        let ticks = stat.utime + stat.stime;
        let known = self.procs.get(&pid).filter(|p| p.start == stat.starttime);
        let full =
            known.is_none_or(|p| p.ticks != ticks) || (self.round_no + u64::from(pid)).is_multiple_of(FULL_EVERY);
        // Kernel threads do no storage I/O of their own (writeback is
        // accounted to whoever dirtied the pages): no io file to read.
        let kernel = stat.pid == 2 || stat.ppid == 2;
        let (io, sw) = if let Some(g) = given {
            // The iterator counted them: no file to read.
            (
                procfs::Io { read_bytes: g.read_bytes, write_bytes: g.write_bytes },
                procfs::Switches { voluntary: g.voluntary, nonvoluntary: g.nonvoluntary },
            )
        } else if full {
            let io = if kernel {
                None
            } else {
                self.read_file(pid_s, "io").and_then(|_| procfs::parse_io(std::str::from_utf8(&self.buf).ok()?))
            };
            let sw = self
                .read_file(pid_s, "status")
                .and_then(|_| procfs::parse_status(std::str::from_utf8(&self.buf).ok()?));
            (io.unwrap_or_default(), sw.unwrap_or_default())
        } else {
            let l = known.map(|p| p.last).unwrap_or_default();
            (
                procfs::Io { read_bytes: l.read_bytes, write_bytes: l.write_bytes },
                procfs::Switches { voluntary: l.voluntary, nonvoluntary: l.nonvoluntary },
            )
        };
        let c = Counters {
            user_s: stat.utime as f64 / self.ticks_per_s,
            system_s: stat.stime as f64 / self.ticks_per_s,
            majflt: stat.majflt,
            read_bytes: io.read_bytes,
            write_bytes: io.write_bytes,
            voluntary: sw.voluntary,
            nonvoluntary: sw.nonvoluntary,
        };
        // The gate's reference for the next round (a process that just
        // became single-threaded gets one).
        let runtime = match runtime {
            Some(r) => Some(r),
            None if stat.num_threads == 1 => self.runtime(pid, pid_s),
            None => None,
        };
        Some(Sample::Fresh(stat, c, runtime.unwrap_or(u64::MAX)))
    }

    /// The run time (ns) in `/proc/PID/schedstat`, through a kept descriptor.
    fn runtime(&mut self, pid: u32, pid_s: &str) -> Option<u64> {
        if !self.sched_fds.contains_key(&pid) {
            let f = std::fs::File::open(self.cfg.proc.join(pid_s).join("schedstat")).ok()?;
            self.sched_fds.insert(pid, f);
        }
        let mut b = [0u8; 96];
        let got = rustix::io::pread(&self.sched_fds[&pid], &mut b[..], 0)
            .ok()
            .and_then(|n| std::str::from_utf8(&b[..n]).ok()?.split_ascii_whitespace().next()?.parse().ok());
        if got.is_none() {
            self.sched_fds.remove(&pid);
        }
        got
    }

    /// Process `pid` runs another program now (an exec; or it was seen
    /// between its fork and its exec): what it did so far stays with its
    /// old group, from here on it counts in the new program's, and its own
    /// series (named by program) end.
    fn exec(&mut self, pid: u32, comm: &str, ended: &mut Vec<(u32, Proc)>) {
        let group = self.group_for(comm);
        let Some(p) = self.procs.get_mut(&pid) else { return };
        let so_far = p.last.minus(&p.base);
        let old_group = std::mem::replace(&mut p.group, group);
        p.base = p.last;
        p.name = comm.to_owned();
        if p.tracked {
            // Its series end as if it had exited; it may qualify again.
            let ids = std::mem::take(&mut p.ids);
            p.tracked = false;
            p.fds = f64::NAN;
            p.pss = f64::NAN;
            ended.push((pid, Proc { ids, ..p.clone_shell() }));
        }
        self.bury(&old_group, &so_far);
    }

    /// Takes every task's run time from `runtimes` (a BPF task iterator)
    /// instead of walking `/proc` and reading a schedstat per process: a
    /// process whose time did not move costs nothing. A failed read falls
    /// back to the walk for that round (counted).
    pub fn with_runtimes(mut self, runtimes: Runtimes) -> Processes {
        self.runtimes = Some(runtimes);
        self
    }

    /// This round's processes: from the run-time source (each with its
    /// threads' figures summed), else from the `/proc` walk (none given).
    fn pids(&mut self) -> Vec<(u32, Option<Thread>)> {
        let mut out: Vec<(u32, Option<Thread>)> = Vec::with_capacity(self.procs.len() + 16);
        if let Some(read) = &mut self.runtimes {
            match read(&mut self.tasks) {
                Ok(()) => {
                    self.tasks.sort_unstable_by_key(|t| t.tgid);
                    for t in &self.tasks {
                        match out.last_mut() {
                            Some((g, Some(sum))) if *g == t.tgid => sum.add(t),
                            _ => out.push((t.tgid, Some(*t))),
                        }
                    }
                    return out;
                }
                Err(e) => {
                    if self.stats.runtime_errors.fetch_add(1, Relaxed) == 0 {
                        tracing::warn!("processes: {e}; walking /proc instead this round");
                    }
                }
            }
        }
        if let Ok(dir) = std::fs::read_dir(&self.cfg.proc) {
            for entry in dir.flatten() {
                let name = entry.file_name();
                let Some(pid) =
                    name.to_str().filter(|s| s.bytes().all(|b| b.is_ascii_digit())).and_then(|s| s.parse().ok())
                else {
                    continue;
                };
                out.push((pid, None));
            }
        }
        out
    }

    /// One round at `t` (wall-clock ns): exits, a scan of `/proc`, the batch.
    pub fn round(&mut self, t: i64) -> Batch {
        let started = clock::monotonic_ns();
        let secs = self.last_t.map_or(self.cfg.interval.as_secs_f64(), |l| ((t - l) as f64 / 1e9).max(1e-3));
        self.last_t = Some(t);
        self.round_no += 1;
        let mut ended: Vec<(u32, Proc)> = Vec::new();
        self.take_exits(&mut ended);
        for p in self.procs.values_mut() {
            p.gone = p.gone.saturating_add(1);
        }
        // Reused round to round (cleared): no table built per round.
        let mut cpu_now = std::mem::take(&mut self.cpu_now);
        cpu_now.clear();
        self.scanned_at = clock::realtime_ns();
        let pids = self.pids();
        let mut pid_s = String::new();
        for &(pid, given) in &pids {
            use std::fmt::Write;
            // Most processes, most rounds: the iterator says it did not run
            // (one lookup, nothing formatted or read).
            if let Some(g) = given
                && !(self.round_no + u64::from(pid)).is_multiple_of(GIVEN_FULL_EVERY)
                && let Some(p) = self.procs.get_mut(&pid)
                && p.runtime == g.runtime_ns
            {
                p.gone = 0;
                // The leader's state (a group whose leader is gone has
                // none: not running, as it used no CPU).
                match g.state {
                    0 if p.state == b'R' => p.state = b'S',
                    0 => {}
                    s => p.state = s,
                }
                if self.cfg.min_cpu <= 0.0 {
                    cpu_now.insert(pid, 0.0);
                }
                continue;
            }
            pid_s.clear();
            let _ = write!(pid_s, "{pid}");
            let pid_s = pid_s.as_str();
            let (stat, c, runtime) = match self.sample(pid, pid_s, given) {
                None => continue,
                Some(Sample::Unchanged) => {
                    if let Some(p) = self.procs.get_mut(&pid) {
                        p.gone = 0;
                        // No CPU since: not running now (if it was). With
                        // the iterator, the path above took this process.
                        if p.state == b'R' {
                            p.state = b'S';
                        }
                        cpu_now.insert(pid, 0.0);
                    }
                    continue;
                }
                Some(Sample::Fresh(stat, c, runtime)) => (stat, c, runtime),
            };
            // A zombie has exited (its record, if any, is in or on its
            // way); its figures stay in /proc until its parent reaps it.
            if stat.state == b'Z' || stat.state == b'X' {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.state = b'Z';
                }
                self.fds.remove(&pid);
                self.sched_fds.remove(&pid);
                continue;
            }
            if let Some(p) = self.procs.get(&pid)
                && p.start != stat.starttime
            {
                // The pid was reused: the old process is gone.
                let old = self.procs.remove(&pid).expect("present");
                self.stats.exits_unaccounted.fetch_add(1, Relaxed);
                self.bury(&old.group.clone(), &old.last.minus(&old.base));
                self.recent.remove(&pid);
                ended.push((pid, old));
            }
            let prev_cpu = self.procs.get(&pid).map(|p| p.last.user_s + p.last.system_s);
            if !self.procs.contains_key(&pid) {
                // Kernel threads (kthreadd's children) are one group, as
                // Netdata's apps has them: their names carry numbers.
                let kernel = stat.pid == 2 || stat.ppid == 2 || given.is_some_and(|g| g.kernel);
                let group = self.group_for(if kernel { KERNEL_GROUP } else { &stat.comm });
                self.procs.insert(
                    pid,
                    Proc {
                        start: stat.starttime,
                        group,
                        name: stat.comm.clone(),
                        last: c,
                        rss: 0,
                        threads: 0,
                        ticks: 0,
                        runtime: u64::MAX,
                        gone: 0,
                        tracked: false,
                        ids: Vec::new(),
                        fds: f64::NAN,
                        pss: f64::NAN,
                        pss_rss: 0,
                        state: stat.state,
                        kernel,
                        base: Counters::default(),
                    },
                );
            }
            let kernel = self.procs.get(&pid).is_some_and(|p| p.kernel);
            if !kernel && self.procs.get(&pid).is_some_and(|p| p.name != stat.comm) {
                self.exec(pid, &stat.comm, &mut ended);
            }
            let p = self.procs.get_mut(&pid).expect("inserted");
            p.last = p.last.max(&c);
            p.rss = stat.rss_pages * self.page;
            p.threads = stat.num_threads;
            p.state = stat.state;
            p.ticks = stat.utime + stat.stime;
            p.runtime = runtime;
            p.gone = 0;
            if let Some(prev) = prev_cpu {
                cpu_now.insert(pid, (c.user_s + c.system_s - prev) / secs);
            }
        }
        // Gone from /proc and no exit record within the grace: the last
        // scan's figures are final.
        let late: Vec<u32> = self.procs.iter().filter(|(_, p)| p.gone > GRACE_ROUNDS).map(|(&pid, _)| pid).collect();
        for pid in late {
            let p = self.procs.remove(&pid).expect("present");
            if self.exits.is_some() {
                self.stats.exits_unaccounted.fetch_add(1, Relaxed);
                self.recent.insert(pid, (p.group.clone(), p.last, 0));
            }
            self.bury(&p.group.clone(), &p.last.minus(&p.base));
            ended.push((pid, p));
        }
        self.recent.retain(|_, r| {
            r.2 += 1;
            r.2 <= RECENT_ROUNDS
        });
        // Who gets series of their own.
        let mut tracked = self.procs.values().filter(|p| p.tracked).count();
        let mut candidates: Vec<(u32, f64)> = self
            .procs
            .iter()
            .filter(|(pid, p)| {
                !p.tracked
                    && (cpu_now.get(pid).is_some_and(|&c| c >= self.cfg.min_cpu) || p.rss >= self.cfg.min_rss_bytes)
            })
            .map(|(&pid, _)| (pid, cpu_now.get(&pid).copied().unwrap_or(0.0)))
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (pid, _) in candidates {
            if tracked >= self.cfg.max_processes {
                self.stats.over_max_processes.fetch_add(1, Relaxed);
                continue;
            }
            if let Some(p) = self.procs.get_mut(&pid) {
                p.tracked = true;
                tracked += 1;
            }
        }
        self.stats.tracked.store(tracked as u64, Relaxed);
        for (pid, _) in &ended {
            if !self.procs.contains_key(pid) {
                self.fds.remove(pid);
                self.sched_fds.remove(pid);
            }
        }
        self.cpu_now = cpu_now;
        let mut batch = self.emit(t, &ended);
        if self.cfg.max_cgroups > 0 {
            self.emit_cgroups(&mut batch);
        }
        self.stats.rounds.fetch_add(1, Relaxed);
        self.stats.scan_ns.fetch_add((clock::monotonic_ns() - started).max(0) as u64, Relaxed);
        batch
    }

    fn emit(&mut self, t: i64, ended: &[(u32, Proc)]) -> Batch {
        let mut b = Batch::new(Timestamp(t));
        let host = self.cfg.host.clone();
        // Per group: the dead members' finals plus the live members' last,
        // summed in place (one lookup a process, nothing allocated).
        let mut groups = std::mem::take(&mut self.groups);
        for g in groups.values_mut() {
            g.live = (Counters::default(), 0, 0, 0);
            g.states = [0; 5];
        }
        for p in self.procs.values() {
            if let Some(g) = groups.get_mut(&p.group) {
                g.live.0.add(&p.last.minus(&p.base));
                g.live.1 += 1;
                g.live.2 += p.threads;
                g.live.3 += p.rss;
                g.states[procfs::state_index(p.state)] += 1;
            }
        }
        for (name, g) in &mut groups {
            if g.ids.is_empty() {
                let keys = series_keys("namedprocess_namegroup", &[("groupname", name), ("host", &host)], false);
                g.ids = self.declare(keys, &mut b);
            }
            let (lc, procs, threads, rss) = g.live;
            let mut c = g.dead;
            c.add(&lc);
            let values = values(&c, threads, rss, Some(procs), None);
            let states = g.states.map(|n| n as f64);
            let (aligner, read) = (&mut self.aligner, self.scanned_at);
            b.points.extend(
                g.ids
                    .iter()
                    .copied()
                    .zip(values.into_iter().chain(states))
                    .enumerate()
                    .map(|(k, (id, v))| (id, if k < COUNTERS { aligner.at(id, read, v, t) } else { v })),
            );
        }
        self.groups = groups;
        let mut procs = std::mem::take(&mut self.procs);
        for (pid, p) in procs.iter_mut().filter(|(_, p)| p.tracked) {
            let pid_s = pid.to_string();
            if p.ids.is_empty() {
                let keys = series_keys("kansoku_process", &[("pid", &pid_s), ("name", &p.name), ("host", &host)], true);
                p.ids = self.declare(keys, &mut b);
            }
            // Counting descriptors reads a directory as long as the process
            // has descriptors: on its turn only (and when first tracked).
            let turn = (self.round_no + u64::from(*pid)).is_multiple_of(FULL_EVERY);
            let dir = || self.cfg.proc.join(&pid_s);
            if p.fds.is_nan() || turn {
                p.fds = std::fs::read_dir(dir().join("fd")).map_or(f64::NAN, |d| d.count() as f64);
            }
            // Its proportional set size costs the kernel a walk of its page
            // tables (milliseconds for a process of gigabytes): read when
            // first tracked, when its resident set moved by an eighth since,
            // else on its turn every PSS_EVERY rounds.
            let moved = p.rss.abs_diff(p.pss_rss) > p.pss_rss / 8;
            if p.pss.is_nan() || moved || (self.round_no + u64::from(*pid)).is_multiple_of(PSS_EVERY) {
                p.pss = std::fs::read_to_string(dir().join("smaps_rollup"))
                    .ok()
                    .and_then(|t| procfs::parse_pss(&t))
                    .map_or(f64::NAN, |b| b as f64);
                p.pss_rss = p.rss;
            }
            let values = values(&p.last, p.threads, p.rss, None, Some(p.fds));
            let values = values.into_iter().chain([p.pss]);
            let (aligner, read) = (&mut self.aligner, self.scanned_at);
            b.points.extend(
                p.ids
                    .iter()
                    .copied()
                    .zip(values)
                    .enumerate()
                    .filter(|(_, (_, v))| !v.is_nan())
                    .map(|(k, (id, v))| (id, if k < COUNTERS { aligner.at(id, read, v, t) } else { v })),
            );
        }
        self.procs = procs;
        if self.own_ids.is_empty() {
            let keys = OWN.iter().map(|m| SeriesKey::new(*m, [("host", host.as_str())])).collect();
            self.own_ids = self.declare(keys, &mut b);
        }
        let s = &self.stats;
        let own = [
            s.scan_ns.load(Relaxed) as f64 / 1e9,
            s.exits_accounted.load(Relaxed) as f64,
            s.exits_unaccounted.load(Relaxed) as f64,
            (s.exit_records_dropped.load(Relaxed) + s.exit_overruns.load(Relaxed)) as f64,
            s.tracked.load(Relaxed) as f64,
        ];
        b.points.extend(self.own_ids.iter().copied().zip(own));
        // Series of processes that ended: a staleness marker, then their ids
        // are free for new series.
        let stale = f64::from_bits(model::STALE_NAN);
        for (_, p) in ended {
            for &id in &p.ids {
                b.points.push((id, stale));
                self.free_ids.push(id);
                self.aligner.forget(id);
            }
        }
        b
    }

    /// Every cgroup's figures into `b`; a cgroup gone ends its series with
    /// staleness markers.
    fn emit_cgroups(&mut self, b: &mut Batch) {
        let read = clock::realtime_ns();
        let (all, over) =
            cgroups::read_all(&self.hierarchies, self.cfg.max_cgroups, self.ticks_per_s, &mut self.cgroup_files);
        self.stats.over_max_cgroups.store(over, Relaxed);
        self.stats.cgroups.store(all.len() as u64, Relaxed);
        let host = self.cfg.host.clone();
        for (path, f) in &all {
            let mut ids = self.cgroup_ids.remove(path).unwrap_or([None; 15]);
            for (slot, v) in f.values().into_iter().enumerate() {
                let Some(v) = v else { continue };
                let id = match ids[slot] {
                    Some(id) => id,
                    None => {
                        let key =
                            SeriesKey::new(cgroups::SERIES[slot], [("id", path.as_str()), ("host", host.as_str())]);
                        let id = self.declare(vec![key], b)[0];
                        ids[slot] = Some(id);
                        id
                    }
                };
                let v =
                    if cgroups::SERIES[slot].ends_with("_total") { self.aligner.at(id, read, v, b.time.0) } else { v };
                b.points.push((id, v));
            }
            self.cgroup_ids.insert(path.clone(), ids);
        }
        let stale = f64::from_bits(model::STALE_NAN);
        let gone: Vec<String> = self.cgroup_ids.keys().filter(|p| !all.contains_key(*p)).cloned().collect();
        for p in gone {
            for id in self.cgroup_ids.remove(&p).into_iter().flatten().flatten() {
                b.points.push((id, stale));
                self.free_ids.push(id);
                self.aligner.forget(id);
            }
        }
    }

    /// Ids for `keys`, declared in `b`: freed ones first.
    fn declare(&mut self, keys: Vec<SeriesKey>, b: &mut Batch) -> Vec<u32> {
        keys.into_iter()
            .map(|key| {
                let id = self.free_ids.pop().unwrap_or_else(|| {
                    self.next_id += 1;
                    self.next_id - 1
                });
                b.defs.push((id, key));
                id
            })
            .collect()
    }
}

impl Producer for Processes {
    fn name(&self) -> &'static str {
        "processes"
    }

    fn interval(&self) -> Duration {
        self.cfg.interval
    }

    fn report(&self) -> Option<ReportFn> {
        let stats = self.stats();
        Some(Arc::new(move || stats.report()))
    }

    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        Some(Processes::round(self, t.0))
    }

    fn missed(&mut self, n: u64) {
        self.stats.missed_intervals.fetch_add(n, Relaxed);
    }

    fn dropped(&mut self) {
        self.stats.dropped_batches.fetch_add(1, Relaxed);
    }
}

/// The collector's own series.
const OWN: [&str; 5] = [
    "kansoku_processes_scan_seconds_total",
    "kansoku_processes_exits_accounted_total",
    "kansoku_processes_exits_unaccounted_total",
    "kansoku_processes_exit_records_dropped_total",
    "kansoku_processes_tracked",
];

/// The series of a group (`prefix` namedprocess_namegroup, with its
/// members by state) or a process (kansoku_process, with open descriptors
/// and its proportional set size), in the order [`values`] gives and then
/// the states (a group) or the PSS (a process).
fn series_keys(prefix: &str, labels: &[(&str, &str)], process: bool) -> Vec<SeriesKey> {
    let key = |m: &str, extra: Option<(&str, &str)>| {
        let mut l = labels.to_vec();
        l.extend(extra);
        SeriesKey::new(format!("{prefix}_{m}"), l)
    };
    let mut keys = vec![
        key("cpu_seconds_total", Some(("mode", "user"))),
        key("cpu_seconds_total", Some(("mode", "system"))),
        key("major_page_faults_total", None),
        key("read_bytes_total", None),
        key("write_bytes_total", None),
        key("context_switches_total", Some(("ctxswitchtype", "voluntary"))),
        key("context_switches_total", Some(("ctxswitchtype", "nonvoluntary"))),
        key("num_threads", None),
        key("memory_bytes", Some(("memtype", "resident"))),
    ];
    if process {
        keys.push(key("open_filedesc", None));
        keys.push(key("memory_bytes", Some(("memtype", "proportionalResident"))));
    } else {
        keys.push(key("num_procs", None));
        keys.extend(procfs::STATES.iter().map(|s| key("states", Some(("state", s)))));
    }
    keys
}

/// How many of [`values`] lead with counters (CPU, faults, I/O, context
/// switches): written as they stood at the round's stamp (`align`).
const COUNTERS: usize = 7;

/// The values of [`series_keys`], in its order.
fn values(c: &Counters, threads: u64, rss: u64, procs: Option<u64>, fds: Option<f64>) -> [f64; 10] {
    [
        c.user_s,
        c.system_s,
        c.majflt as f64,
        c.read_bytes as f64,
        c.write_bytes as f64,
        c.voluntary as f64,
        c.nonvoluntary as f64,
        threads as f64,
        rss as f64,
        procs.map_or_else(|| fds.unwrap_or(f64::NAN), |p| p as f64),
    ]
}

/// The taskstats listener on its thread, feeding a bounded queue.
fn listen(stats: &Arc<Stats>) -> std::io::Result<Receiver<taskstats::Exit>> {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let l = taskstats::Listener::open(cpus.trim())?;
    let (tx, rx) = sync_channel(EXIT_QUEUE);
    let stats = Arc::clone(stats);
    std::thread::Builder::new().name("taskstats".into()).spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match l.recv(&mut buf) {
                Ok(exits) => {
                    for e in exits {
                        match tx.try_send(e) {
                            Ok(()) => {}
                            Err(TrySendError::Full(_)) => {
                                stats.exit_records_dropped.fetch_add(1, Relaxed);
                            }
                            Err(TrySendError::Disconnected(_)) => return,
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc_enobufs()) => {
                    stats.exit_overruns.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::warn!("taskstats: {e}; exits are accounted to their last scan from now on");
                    return;
                }
            }
        }
    })?;
    Ok(rx)
}

fn libc_enobufs() -> i32 {
    rustix::io::Errno::NOBUFS.raw_os_error()
}
