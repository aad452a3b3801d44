//! The sampling loop of `kansoku up --perf HZ` and `kansoku agent --perf HZ`:
//! drains every CPU's ring every `drain` interval into per-CPU event batches
//! on the wall clock; at each multiple of `batch` on the wall clock (a
//! second by default) hands every CPU's batch, as one set, to a bounded
//! queue (full: the set is dropped and counted, sampling never waits), and
//! reports its own figures once a second as series. One set is one write
//! and one fsync downstream, however many CPUs (`kansoku lab transfer
//! --cores`: the paper's per-core sending measured against this).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};

use codec::events::EventBatch;
use model::{Batch, SeriesKey, Timestamp};

use crate::procs::{BuildIdCache, CacheStats, Table};
use crate::{Capture, Config, Event, Record};

/// Counters, readable while the sampler runs.
#[derive(Debug, Default)]
pub struct SamplerStats {
    pub samples: AtomicU64,
    /// Samples the kernel could not write (ring full), from LOST records.
    pub lost: AtomicU64,
    pub throttled: AtomicU64,
    /// Sets of batches (and their samples) dropped because the queue was full.
    pub dropped_batches: AtomicU64,
    pub dropped_samples: AtomicU64,
    /// CPU time of the sampling thread.
    pub cpu_ns: AtomicU64,
    /// The build-id cache's own counters (files kept, files that could
    /// not be), read as they are: its copier thread keeps them.
    pub cache: Option<Arc<CacheStats>>,
}

impl SamplerStats {
    /// The sampler's figures as (series name, value), for `up` (a round of
    /// its own every second) and the agent (with every batch).
    pub fn figures(&self) -> Vec<(&'static str, f64)> {
        let max_rate = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        let values = [
            self.samples.load(Ordering::Relaxed) as f64,
            self.lost.load(Ordering::Relaxed) as f64,
            self.throttled.load(Ordering::Relaxed) as f64,
            self.dropped_samples.load(Ordering::Relaxed) as f64,
            self.cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
            max_rate,
            self.cache.as_ref().map_or(0.0, |c| c.files.load(Ordering::Relaxed) as f64),
            self.cache.as_ref().map_or(0.0, |c| c.failed.load(Ordering::Relaxed) as f64),
            self.cache.as_ref().map_or(0.0, |c| c.evicted.load(Ordering::Relaxed) as f64),
        ];
        OWN.into_iter().zip(values).collect()
    }
}

/// Nanoseconds to add to a CLOCK_MONOTONIC time (perf's, with
/// `use_clockid`) to get wall-clock time.
pub fn monotonic_to_wall() -> i64 {
    clock::realtime_ns() - clock::monotonic_ns()
}

/// The sampler's own series (labelled with the host).
const OWN: [&str; 9] = [
    "kansoku_perf_samples_total",
    "kansoku_perf_lost_samples_total",
    "kansoku_perf_throttled_total",
    "kansoku_perf_dropped_samples_total",
    "kansoku_perf_sampler_cpu_seconds_total",
    "kansoku_perf_max_sample_rate",
    "kansoku_perf_buildid_cached_total",
    "kansoku_perf_buildid_failed_total",
    "kansoku_perf_buildid_evicted_total",
];

#[derive(Debug)]
pub struct Sampler {
    cap: Capture,
    host: String,
    hz: u64,
    event: Event,
    procs: Table,
    pub stats: Arc<SamplerStats>,
}

impl Sampler {
    /// Opens `event` on every online CPU at `hz` samples per second each,
    /// with the processes' side band; `buildid_cache`: keep each mapped
    /// file there by build id, copies within the byte budget given.
    pub fn open(
        host: &str,
        hz: u64,
        event: Event,
        ring_pages: usize,
        callchain: bool,
        buildid_cache: Option<(&Path, u64)>,
    ) -> std::io::Result<Sampler> {
        if !(1..=100_000).contains(&hz) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("--perf {hz}: use 1 to 100000 Hz"),
            ));
        }
        let cfg =
            Config { event, period_ns: 1_000_000_000 / hz, ring_pages, callchain, sideband: true, ..Config::default() };
        let cap = Capture::open(&cfg)?;
        let cache = buildid_cache.map(|(dir, budget)| BuildIdCache::new(dir).with_budget(budget));
        let stats =
            Arc::new(SamplerStats { cache: cache.as_ref().map(|c| Arc::clone(&c.stats)), ..Default::default() });
        // The side band announces what starts from now; the rest is in /proc.
        let mut procs = Table::new(cache);
        procs.seed_all();
        Ok(Sampler { cap, host: host.to_owned(), hz, event, procs, stats })
    }

    pub fn hz(&self) -> u64 {
        self.hz
    }

    pub fn event(&self) -> Event {
        self.event
    }

    /// The event stream its samples are stored as: the event's name, the
    /// host, and this machine's boot (whose kernel and processes name them,
    /// see [`crate::boot_id`]).
    pub fn stream(&self) -> SeriesKey {
        let boot = crate::boot_id().unwrap_or_default();
        SeriesKey::new(self.event.stream(), [("host", self.host.as_str()), ("boot", boot.as_str())])
    }

    /// Runs until `stop`: sets of per-CPU batches to `events` (every
    /// `batch` of the wall clock, rings drained every `drain`), its figures
    /// to `series` once a second when given (an agent reads
    /// [`SamplerStats::figures`] with its batches instead).
    pub fn run(
        mut self,
        events: SyncSender<Vec<EventBatch>>,
        series: Option<SyncSender<Batch>>,
        drain: Duration,
        batch: Duration,
        stop: Arc<AtomicBool>,
    ) {
        if let Err(e) = self.procs.start_cache() {
            tracing::error!("perf: {e}; user frames of processes gone resolve only while their files stay");
        }
        let batch_ns = (batch.as_nanos() as i64).max(1);
        let mut period_end = (Timestamp::now().as_nanos() / batch_ns + 1) * batch_ns;
        let host = self.host.clone();
        let mut defs: Vec<(u32, SeriesKey)> =
            OWN.iter().enumerate().map(|(i, n)| (i as u32, SeriesKey::new(*n, [("host", host.as_str())]))).collect();
        let mut per_cpu: Vec<EventBatch> = Vec::new();
        // Per CPU: the stacks of its current batch, by content.
        let mut stack_ids: Vec<std::collections::HashMap<Vec<u64>, u32>> = Vec::new();
        let mut stack = Vec::new();
        let mut last_report = Instant::now();
        let started_cpu = clock::thread_cpu_ns();
        let mut failures = 0u64;
        loop {
            let done = stop.load(Ordering::Relaxed);
            let offset = monotonic_to_wall();
            let st = &self.stats;
            let procs = &mut self.procs;
            let result = self.cap.drain(|cpu, r| match r {
                Record::Sample { ip, pid, tid, time, chain, .. } => {
                    let slot = cpu as usize;
                    if per_cpu.len() <= slot {
                        per_cpu.resize_with(slot + 1, EventBatch::default);
                        stack_ids.resize_with(slot + 1, Default::default);
                    }
                    let b = &mut per_cpu[slot];
                    b.cpu = cpu;
                    let t = time as i64 + offset;
                    crate::ring::chain_ips(chain, &mut stack);
                    if stack.is_empty() && b.chain.is_empty() {
                        b.push(t, pid, tid, ip);
                    } else {
                        if b.chain.is_empty() && !b.is_empty() {
                            // The batch's first chain: the events before it
                            // get their ip as theirs (every event has one).
                            let ids = &mut stack_ids[slot];
                            for i in 0..b.len() {
                                let next = b.stacks.len() as u32;
                                let id = *ids.entry(vec![b.ip[i]]).or_insert(next);
                                if id == next {
                                    b.stacks.push(vec![b.ip[i]]);
                                }
                                b.chain.push(id);
                            }
                        }
                        if stack.is_empty() {
                            stack.push(ip);
                        }
                        b.push_chain(t, pid, tid, &stack, &mut stack_ids[slot]);
                    }
                }
                Record::Throttle { .. } => {
                    st.throttled.fetch_add(1, Ordering::Relaxed);
                }
                Record::Mmap2 { .. } | Record::Comm { .. } | Record::Fork { .. } | Record::Exit { .. } => {
                    procs.record(&r);
                }
                _ => {}
            });
            self.procs.settle();
            if let Err(e) = result {
                if failures == 0 {
                    tracing::error!("perf: a ring held a damaged record; its remaining records were skipped: {e}");
                }
                failures += 1;
            }
            let c = &self.cap.counts;
            st.samples.store(c.samples, Ordering::Relaxed);
            st.lost.store(c.lost, Ordering::Relaxed);
            let now = Timestamp::now().as_nanos();
            if done || now >= period_end {
                period_end = (now / batch_ns + 1) * batch_ns;
                let mut set: Vec<EventBatch> =
                    per_cpu.iter_mut().filter(|b| !b.is_empty()).map(std::mem::take).collect();
                for b in &mut set {
                    b.procs = self.procs.infos(b);
                }
                self.procs.end_period();
                stack_ids.iter_mut().for_each(std::collections::HashMap::clear);
                let n: u64 = set.iter().map(|b| b.len() as u64).sum();
                if n > 0 {
                    match events.try_send(set) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_)) => {
                            st.dropped_batches.fetch_add(1, Ordering::Relaxed);
                            st.dropped_samples.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(TrySendError::Disconnected(_)) => return,
                    }
                }
            }
            st.cpu_ns.store((clock::thread_cpu_ns() - started_cpu).max(0) as u64, Ordering::Relaxed);
            if let Some(series) = &series
                && (done || last_report.elapsed() >= Duration::from_secs(1))
            {
                last_report = Instant::now();
                let batch = Batch {
                    time: Timestamp::now(),
                    defs: std::mem::take(&mut defs),
                    points: st.figures().into_iter().enumerate().map(|(i, (_, v))| (i as u32, v)).collect(),
                };
                if let Err(TrySendError::Full(b)) = series.try_send(batch) {
                    // Declarations must not be lost with a dropped round.
                    defs = b.defs;
                }
            }
            if done {
                return;
            }
            std::thread::sleep(drain);
        }
    }
}
