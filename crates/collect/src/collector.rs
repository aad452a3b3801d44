//! The host collector's round: every source into one batch stamped with the
//! boundary, with the collector's own cost. It is a `model::producer::Producer`;
//! `node::rounds` wakes it on each boundary and hands the batch on without
//! ever blocking.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use model::producer::{Producer, ReportFn};
use model::report::Figure;
use model::{Batch, Timestamp};

use crate::emitter::Emitter;
use crate::own_cost::Rss;
use crate::source::{HostSource, default_sources};
use clock::{process_cpu_ns, thread_cpu_ns};

/// Shortest interval we schedule: below this, wake-up lateness (tens of µs)
/// and the round's own cost become a large share of the interval.
pub const INTERVAL_MIN: Duration = Duration::from_millis(10);
/// Longest interval; beyond a minute, host metrics lose their point.
pub const INTERVAL_MAX: Duration = Duration::from_secs(60);

/// `--interval`: a duration from [`INTERVAL_MIN`] to [`INTERVAL_MAX`].
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = model::parse_duration(s).map_err(|e| e.to_string())?;
    if !(INTERVAL_MIN..=INTERVAL_MAX).contains(&d) {
        return Err(format!("{s} is out of range: use {INTERVAL_MIN:?} to {INTERVAL_MAX:?}"));
    }
    Ok(d)
}

#[derive(Debug, Clone)]
pub struct CollectorConfig {
    pub interval: Duration,
    /// Value of the `host` label on every series.
    pub host: String,
    /// Filesystem root holding `proc/` and `sys/`; `/` except in tests.
    pub root: PathBuf,
}

/// Live counters, shared with the HTTP status endpoint.
#[derive(Debug, Default)]
pub struct CollectorStats {
    pub interval_ns: AtomicI64,
    pub rounds: AtomicU64,
    pub missed_rounds: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub source_errors: AtomicU64,
    pub last_lateness_ns: AtomicI64,
    /// The thread's CPU time since the last round's sources ended: that
    /// round's store append, this one's wake-up and sources.
    pub last_round_cpu_ns: AtomicI64,
    /// The collector thread's CPU time, all rounds.
    pub cpu_ns: AtomicI64,
    pub clock_steps: AtomicU64,
    pub series: AtomicU64,
}

impl CollectorStats {
    /// The collector's figures, named once: `collector` in `/api/v1/status`,
    /// `kansoku_collector_*` in `/metrics`, and (all but `source_errors`,
    /// stored per source instead) the series the collector stores of itself
    /// every round.
    pub fn report(&self) -> [Figure; 10] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let secs = |a: &AtomicI64| micros(a.load(Ordering::Relaxed));
        [
            Figure::measure("interval_seconds", self.interval_ns.load(Ordering::Relaxed) as f64 / 1e9),
            Figure::counter("rounds", n(&self.rounds)),
            Figure::counter("missed_rounds", n(&self.missed_rounds)),
            Figure::counter("dropped_batches", n(&self.dropped_batches)),
            Figure::counter("clock_steps", n(&self.clock_steps)),
            Figure::counter("source_errors", n(&self.source_errors)),
            Figure::measure("lateness_seconds", secs(&self.last_lateness_ns)),
            Figure::measure("round_cpu_seconds", secs(&self.last_round_cpu_ns)),
            Figure::counter_seconds("cpu_seconds", secs(&self.cpu_ns)),
            Figure::gauge("series", n(&self.series)),
        ]
    }
}

#[derive(Debug)]
struct SourceSlot {
    source: Box<dyn HostSource>,
    errors: u64,
    logged: bool,
    /// Time spent in this source, cumulative, by the monotonic clock (a vDSO
    /// call, not a syscall like the thread CPU clock): equal to its CPU time
    /// unless the thread was preempted mid-source.
    busy_ns: i64,
}

#[derive(Debug)]
pub struct Collector {
    interval_ns: i64,
    sources: Vec<SourceSlot>,
    /// Sources this host does not offer, reported as `source_up 0`.
    missing: Vec<&'static str>,
    emitter: Emitter,
    rss: Rss,
    stats: Arc<CollectorStats>,
    /// The metric names of the collector's own figures, as stored.
    own: Vec<(usize, String)>,
    /// Rounds since the start.
    round: u64,
    /// Every this many rounds (a second's worth) the per-source figures and
    /// the process's CPU and memory are emitted: counters and slow gauges
    /// need no more, and they were an eighth of every round's points.
    detail_every: u64,
    /// The thread's CPU clock at the end of the last round.
    cpu_mark: Option<i64>,
}

impl std::fmt::Debug for dyn HostSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Collector {
    pub fn new(cfg: &CollectorConfig) -> Collector {
        assert!((INTERVAL_MIN..=INTERVAL_MAX).contains(&cfg.interval), "BUG: interval must be validated by the caller");
        let (sources, missing) = default_sources(&cfg.root);
        for m in &missing {
            tracing::info!(source = m.source, "source not available on this host, skipped: {}", m.why);
        }
        Collector {
            interval_ns: cfg.interval.as_nanos() as i64,
            sources: sources
                .into_iter()
                .map(|source| SourceSlot { source, errors: 0, logged: false, busy_ns: 0 })
                .collect(),
            missing: missing.into_iter().map(|m| m.source).collect(),
            emitter: Emitter::new(cfg.host.clone()),
            rss: Rss::open(),
            stats: Arc::new(CollectorStats {
                interval_ns: AtomicI64::new(cfg.interval.as_nanos() as i64),
                ..CollectorStats::default()
            }),
            own: CollectorStats::default()
                .report()
                .iter()
                .enumerate()
                .filter(|(_, f)| f.key != "source_errors")
                .map(|(i, f)| (i, f.metric("kansoku_collector")))
                .collect(),
            round: 0,
            detail_every: (1_000_000_000 / cfg.interval.as_nanos()).max(1) as u64,
            cpu_mark: None,
        }
    }

    pub fn stats(&self) -> Arc<CollectorStats> {
        Arc::clone(&self.stats)
    }

    /// Runs one round for the boundary `scheduled`, `lateness_ns` after it.
    pub fn collect_round(&mut self, scheduled: Timestamp, lateness_ns: i64) -> Batch {
        // A round's CPU time runs from the end of the one before: what it
        // costs with its wake-up, for one clock read (a syscall) a round.
        let cpu_start = self.cpu_mark.unwrap_or_else(thread_cpu_ns);
        let mut mark = Instant::now();
        let detail = self.round.is_multiple_of(self.detail_every);
        self.round += 1;
        let e = &mut self.emitter;
        e.begin(scheduled);
        for slot in &mut self.sources {
            let name = slot.source.name();
            let result = slot.source.collect(e);
            let now = Instant::now();
            slot.busy_ns += (now - mark).as_nanos() as i64;
            mark = now;
            if let Err(err) = result {
                slot.errors += 1;
                self.stats.source_errors.fetch_add(1, Ordering::Relaxed);
                if !slot.logged {
                    tracing::warn!(
                        source = name,
                        "source failed (counted in kansoku_collector_source_errors_total; logged once): {err}"
                    );
                    slot.logged = true;
                }
            }
        }
        if detail {
            for slot in &self.sources {
                let source = [("source", slot.source.name())];
                e.emit("kansoku_collector_source_seconds_total", &source, micros(slot.busy_ns));
                e.emit("kansoku_collector_source_errors_total", &source, slot.errors as f64);
                e.emit("kansoku_collector_source_up", &source, 1.0);
            }
            for name in &self.missing {
                e.emit("kansoku_collector_source_up", &[("source", name)], 0.0);
            }
        }
        let cpu_end = thread_cpu_ns();
        self.cpu_mark = Some(cpu_end);
        let round_cpu_ns = cpu_end - cpu_start;
        self.stats.rounds.fetch_add(1, Ordering::Relaxed);
        self.stats.last_lateness_ns.store(lateness_ns, Ordering::Relaxed);
        self.stats.last_round_cpu_ns.store(round_cpu_ns, Ordering::Relaxed);
        self.stats.cpu_ns.store(cpu_end, Ordering::Relaxed);
        let report = self.stats.report();
        for (i, name) in &self.own {
            e.emit(name, &[], report[*i].as_f64());
        }
        if detail {
            e.emit("process_cpu_seconds_total", &[], micros(process_cpu_ns()));
            if let Some(rss) = self.rss.bytes() {
                e.emit("process_resident_memory_bytes", &[], rss as f64);
            }
        }
        let batch = e.finish();
        self.stats.series.store(e.series().len() as u64, Ordering::Relaxed);
        batch
    }

    /// Reads every file a round reads, and does nothing else: no parsing, no
    /// samples, no clocks. The floor of host collection on this machine,
    /// what `kansoku lab up-cost` runs beside `kansoku up`. Returns the
    /// files' bytes.
    pub fn read_round(&mut self) -> std::io::Result<usize> {
        let mut bytes = 0;
        for slot in &mut self.sources {
            for file in slot.source.files() {
                bytes += file.read_raw()?;
            }
        }
        Ok(bytes)
    }
}

impl Producer for Collector {
    fn name(&self) -> &'static str {
        "collector"
    }

    fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns as u64)
    }

    fn report(&self) -> Option<ReportFn> {
        let stats = self.stats();
        Some(Arc::new(move || stats.report().to_vec()))
    }

    fn round(&mut self, t: Timestamp, lateness_ns: i64) -> Option<Batch> {
        Some(self.collect_round(t, lateness_ns))
    }

    fn missed(&mut self, n: u64) {
        self.stats.missed_rounds.fetch_add(n, Ordering::Relaxed);
    }

    fn dropped(&mut self) {
        if self.stats.dropped_batches.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("store queue full: dropping rounds (counted in kansoku_collector_dropped_batches_total)");
        }
    }

    fn clock_stepped(&mut self) {
        self.stats.clock_steps.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "wall clock stepped back: resampling from the next boundary (samples until the clock \
             passes the newest stored one are refused as out of order and counted)"
        );
    }

    fn inline(&self) -> bool {
        true
    }
}

/// Nanoseconds as seconds rounded to whole microseconds: ample for CPU time
/// and lateness, and an exact 6-place decimal the store encodes in ~10 bits
/// per sample instead of ~37 for nanosecond noise.
fn micros(ns: i64) -> f64 {
    ns.div_euclid(1000) as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_on_this_host_has_per_core_cpu_and_own_cost() {
        let cfg = CollectorConfig { interval: Duration::from_millis(100), host: "t".into(), root: "/".into() };
        let mut c = Collector::new(&cfg);
        let b = c.collect_round(Timestamp(1_000), 5);
        let names: std::collections::BTreeSet<&str> = b.defs.iter().map(|(_, k)| k.name()).collect();
        for want in [
            "node_cpu_seconds_total",
            "node_memory_MemTotal_bytes",
            "node_load1",
            "node_context_switches_total",
            "kansoku_collector_round_cpu_seconds",
            "process_resident_memory_bytes",
        ] {
            assert!(names.contains(want), "missing {want}: {names:?}");
        }
        // The collector's own series are its report's figures, under their metric names.
        for f in c.stats().report().iter().filter(|f| f.key != "source_errors") {
            let name = f.metric("kansoku_collector");
            assert!(names.contains(name.as_str()), "missing {name}: {names:?}");
        }
        let ncpu = std::thread::available_parallelism().unwrap().get();
        let cpu_user = b
            .defs
            .iter()
            .filter(|(_, k)| k.name() == "node_cpu_seconds_total" && k.get("mode") == Some("user"))
            .count();
        assert!(cpu_user >= ncpu, "{cpu_user} < {ncpu}");
        assert!(b.defs.iter().all(|(_, k)| k.get("host") == Some("t")));
        assert_eq!(b.points.len(), b.defs.len(), "first round declares every series it emits");
        // The next nine rounds (100 ms each) leave out the per-source and
        // process figures; the tenth, a second on, has them again.
        let detail = |b: &Batch| {
            let names: Vec<&str> = b.defs.iter().map(|(_, k)| k.name()).collect();
            names.iter().filter(|n| n.starts_with("kansoku_collector_source_") || n.starts_with("process_")).count()
        };
        let per_source = detail(&b);
        assert!(per_source >= 3 * 4, "{per_source}");
        for t in 2..=10 {
            let bt = c.collect_round(Timestamp(t * 1_000), 5);
            assert!(bt.defs.is_empty());
            assert_eq!(bt.points.len(), b.points.len() - per_source, "round {t}");
        }
        assert_eq!(c.collect_round(Timestamp(11_000), 5).points.len(), b.points.len());
    }

    #[test]
    fn the_floor_reads_each_file_a_round_reads_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("proc/pressure")).unwrap();
        let loadavg = root.path().join("proc/loadavg");
        let psi = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        for r in ["cpu", "memory", "io"] {
            std::fs::write(root.path().join("proc/pressure").join(r), psi).unwrap();
        }
        let cfg = CollectorConfig { interval: Duration::from_millis(100), host: "t".into(), root: root.path().into() };
        let load = |text: &str| {
            std::fs::write(&loadavg, text).unwrap();
            text.len() + 3 * psi.len()
        };
        let first = load("0.10 0.20 0.30 1/100 42\n");
        let mut c = Collector::new(&cfg);
        assert_eq!(c.read_round().unwrap(), first);
        assert_eq!(c.read_round().unwrap(), first, "read again");
        let longer = load("12.50 10.20 0.30 2/100 43\n");
        assert_eq!(c.read_round().unwrap(), longer, "the new content, not a cached copy");
        // What was read is what a round parses.
        let b = c.collect_round(Timestamp(1_000), 0);
        let load1 = b.defs.iter().find(|(_, k)| k.name() == "node_load1").map(|(id, _)| *id).unwrap();
        assert_eq!(b.points.iter().find(|&&(id, _)| id == load1).map(|&(_, v)| v), Some(12.5));
    }
}
