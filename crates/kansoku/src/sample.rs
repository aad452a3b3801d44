//! What a node samples, the same for `up`, `agent` and `server`: one set of
//! flags ([`SampleArgs`]) and one list of producers built from them
//! ([`Sampling`]) — the host collector, the SNMP poller, the kernel tracer,
//! processes, fragmentation — that `up` and `server` store and `agent`
//! ships; the per-CPU sampler beside them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use model::producer::Producer;

use crate::args::{TraceEvery, parse_trace};

/// The flags of what a node samples.
#[derive(clap::Args, Debug)]
pub struct SampleArgs {
    /// Also poll the SNMP targets in this file (see `kansoku snmp --help`),
    /// at --interval.
    #[arg(long, value_name = "FILE")]
    pub snmp_targets: Option<PathBuf>,
    #[command(flatten)]
    pub perf: PerfArgs,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub fragmentation: extents::Args,
    #[command(flatten)]
    pub processes: ProcessArgs,
}

/// The producers a node runs, and what the API shows of them beyond their
/// reports.
pub struct Sampling {
    /// The host collector first, where there is one.
    pub producers: Vec<Box<dyn Producer>>,
    pub sampler: Option<perf::sampler::Sampler>,
    /// The SNMP poller's targets, for `/api/v1/snmp/targets`.
    pub snmp_targets: Option<model::snmp::TargetsFn>,
    /// The fragmentation maps kept and the paths scanned.
    pub fragmentation: Option<(extents::Snapshots, Vec<PathBuf>)>,
    /// Figures an agent ships with every batch, for producers that do not
    /// store their own (the kernel tracer's reads and drops).
    pub shipped: Vec<agent::Figures>,
}

impl Sampling {
    pub fn of(producers: Vec<Box<dyn Producer>>) -> Sampling {
        Sampling { producers, sampler: None, snmp_targets: None, fragmentation: None, shipped: Vec::new() }
    }
}

impl SampleArgs {
    /// Builds the producers these flags ask for. Those of a host (collector,
    /// tracer, processes, fragmentation, per-CPU sampling) need `host`; the
    /// SNMP poller does not (`kansoku server` samples no host of its own).
    pub fn start(&self, host: Option<&str>, interval: Duration, data: &std::path::Path) -> anyhow::Result<Sampling> {
        let mut s = Sampling::of(Vec::new());
        let Some(host) = host else {
            if self.perf.perf.is_some() || self.processes.processes.0.is_some() || !self.fragmentation.paths.is_empty()
            {
                bail!("--perf, --processes and --fragmentation sample this host: give --host NAME to sample it");
            }
            if let Some(path) = &self.snmp_targets {
                s.snmp_targets = Some(push_poller(&mut s.producers, path, interval, None)?);
            }
            return Ok(s);
        };
        s.producers.push(Box::new(collect::Collector::new(&collect::CollectorConfig {
            interval,
            host: host.to_owned(),
            root: "/".into(),
        })));
        if let Some(path) = &self.snmp_targets {
            s.snmp_targets = Some(push_poller(&mut s.producers, path, interval, None)?);
        }
        s.sampler = self.perf.open_sampler(host, data)?;
        if let Some(t) = self.trace.start(host) {
            let stats = t.stats();
            s.shipped.push(Box::new(move || stats.figures()));
            s.producers.push(Box::new(t));
        }
        if let Some(p) = self.processes.start(host) {
            s.producers.push(Box::new(p));
        }
        if let Some(f) = self.fragmentation.scanner(host, data).map_err(anyhow::Error::msg)? {
            s.fragmentation = f.snapshots.clone().map(|snap| (snap, f.paths.clone()));
            tracing::info!(
                "fragmentation: scanning {} every {:?}",
                f.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
                f.interval
            );
            s.producers.push(Box::new(f));
        }
        Ok(s)
    }
}

/// Reads the targets file, discovers each target's OIDs and opens the
/// poller's sockets; the poller goes on `list`.
pub fn push_poller(
    list: &mut Vec<Box<dyn Producer>>,
    path: &std::path::Path,
    interval: Duration,
    timeout: Option<Duration>,
) -> anyhow::Result<model::snmp::TargetsFn> {
    let targets = snmp::targets::load(path)?;
    let mut cfg = snmp::PollerConfig::new(interval);
    if let Some(t) = timeout {
        if t > interval {
            bail!("--timeout {t:?} exceeds --interval {interval:?}: answers must count within their interval");
        }
        cfg.timeout = t;
    }
    let n = targets.len();
    tracing::info!("snmp: discovering {n} targets");
    let (plan, failures) = snmp::plan(targets, Duration::from_secs(1), 2);
    for f in &failures {
        tracing::warn!(
            "snmp: {}: discovery failed ({}); polling sysUpTime.0 and laLoad.1 until a retry (every 60 s) succeeds",
            f.target,
            f.reason
        );
    }
    let poller = snmp::Poller::new(cfg, plan).context("snmp: open UDP sockets")?;
    tracing::info!("snmp: polling {n} targets ({} series) every {interval:?}", poller.n_series());
    let targets = poller.targets_fn();
    list.push(Box::new(poller));
    Ok(targets)
}

/// Per-CPU sampling.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {
    /// Also sample what every CPU executes, HZ times a second (cpu-clock via
    /// perf_event_open; 10000 = every 100 us), into the event columns.
    #[arg(long, value_name = "HZ")]
    pub perf: Option<u64>,
    /// With --perf: also record each sample's call chain (frame pointers,
    /// kernel and user), for flame graphs.
    #[arg(long, requires = "perf")]
    pub perf_callchain: bool,
    /// With --perf: what takes a sample: cpu-clock (a software timer at a
    /// fixed period; every machine has it) or cycles (the hardware cycle
    /// counter at that rate on average; machines with a PMU). Stored as
    /// perf_cpu_clock or perf_cycles.
    #[arg(long, requires = "perf", default_value = "cpu-clock")]
    pub perf_event: perf::Event,
    /// With --perf: most bytes of sampled binaries copied into DATA/buildid
    /// (hard links, where the file system allows them, cost none); past it
    /// the oldest copies go.
    #[arg(long, requires = "perf", default_value = "1G", value_parser = model::parse_bytes)]
    pub perf_cache_size: u64,
}

impl PerfArgs {
    /// The sampler these flags ask for (None without `--perf`), caching the
    /// sampled binaries under `data`.
    pub fn open_sampler(&self, host: &str, data: &std::path::Path) -> anyhow::Result<Option<perf::sampler::Sampler>> {
        use anyhow::Context;
        let Some(hz) = self.perf else { return Ok(None) };
        let cache = data.join(perf::procs::CACHE_DIR);
        let s = perf::sampler::Sampler::open(
            host,
            hz,
            self.perf_event,
            node::PERF_RING_PAGES,
            self.perf_callchain,
            Some((&cache, self.perf_cache_size)),
        );
        Ok(Some(s.context("--perf")?))
    }
}

/// Kernel tracing.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Kernel event distributions: latency histograms of system calls,
    /// block I/O, the scheduler, kernel locks, reclaim and qdiscs,
    /// aggregated in the kernel by eBPF on tracepoints, read every this
    /// long (100ms to 60s), or "off". Needs root; see docs/trace.md.
    #[arg(long, default_value = "1s", value_parser = parse_trace)]
    pub trace: TraceEvery,
    /// Count the same tracepoints' events with perf_event_open instead of
    /// BPF histograms (counts, no latencies): what the tracer does by
    /// itself where BPF is refused.
    #[arg(long)]
    pub trace_counts: bool,
}

impl TraceArgs {
    /// The kernel tracer, always on where the kernel allows it; where it
    /// does not, says why once and goes on without it.
    pub fn start(&self, host: &str) -> Option<trace::Tracer> {
        let every = self.trace.0?;
        let mode = if self.trace_counts { trace::Mode::Counts } else { trace::Mode::Auto };
        match trace::Tracer::start_with(every, host, mode) {
            Ok(t) if t.counting() => {
                tracing::info!("trace: tracepoint event counts every {every:?}");
                Some(t)
            }
            Ok(t) => {
                tracing::info!(
                    "trace: kernel event histograms (system calls, futex waits, block I/O, scheduler, kernel locks, reclaim, qdiscs) every {every:?}"
                );
                Some(t)
            }
            Err(e) => {
                tracing::warn!("trace: kernel tracing is off: {e}");
                None
            }
        }
    }
}

/// Processes.
#[derive(clap::Args, Debug, Clone)]
pub struct ProcessArgs {
    /// Every process's CPU, memory, storage I/O, faults and context
    /// switches, summed per process name (namedprocess_namegroup_*), and
    /// every cgroup's (container_*), with
    /// series of their own for processes above --process-min-cpu or
    /// --process-min-rss; exits accounted from the kernel's taskstats, so
    /// short-lived processes are not lost. Every this long (100ms to 60s;
    /// `--processes` alone: 1s), or off (default). See docs/processes.md.
    #[arg(long, default_value = "off", default_missing_value = "1s", num_args = 0..=1, value_parser = parse_trace)]
    pub processes: TraceEvery,
    /// A process gets series of its own from this share of a core (0.01: 1 %).
    #[arg(long, default_value_t = 0.01)]
    pub process_min_cpu: f64,
    /// …or from this resident size (bytes, K/M/G suffixes).
    #[arg(long, default_value = "256M", value_parser = model::parse_bytes)]
    pub process_min_rss: u64,
    /// Most processes with series of their own at once (the rest counted).
    #[arg(long, default_value_t = 500)]
    pub process_max: usize,
}

impl ProcessArgs {
    /// The processes producer, if asked for; taskstats where the kernel
    /// allows it (root), else said once.
    pub fn start(&self, host: &str) -> Option<tasks::Processes> {
        let every = self.processes.0?;
        let mut cfg = tasks::Config::new(every, host.to_owned());
        cfg.min_cpu = self.process_min_cpu;
        cfg.min_rss_bytes = self.process_min_rss;
        cfg.max_processes = self.process_max;
        let (mut c, why) = tasks::Processes::new(cfg, true);
        match why {
            Some(w) => tracing::warn!("processes: {w}"),
            None => tracing::info!("processes: every process every {every:?}, exits from taskstats"),
        }
        // Which processes ran, from one read of a BPF task iterator rather
        // than a /proc walk and a file per process; without BPF, the walk.
        match trace::tasks::TaskIter::open() {
            Ok(mut it) => c = c.with_runtimes(Box::new(move |out| it.read(out))),
            Err(e) => tracing::info!("processes: walking /proc each round (no BPF task iterator: {e})"),
        }
        Some(c)
    }
}
