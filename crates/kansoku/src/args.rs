//! Arguments that more than one command takes, and their parsers: the
//! value parsers clap calls (durations, intervals, disk budgets,
//! tiers, perf events), the per-CPU sampling and kernel tracing
//! flags `up` and `agent` share ([`PerfArgs`], [`TraceArgs`], flattened into
//! both), and the default host
//! name. The commands' own argument structs stay beside what they run.

use std::time::Duration;

use collect::{INTERVAL_MAX, INTERVAL_MIN};
use store::DiskBudget;

/// Per-CPU sampling: `kansoku up` stores it, `kansoku agent` ships it.
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
    #[arg(long, requires = "perf", default_value = "cpu-clock", value_parser = parse_perf_event)]
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

/// Downsampled tiers to write with each block (`--tiers`), in ns.
#[derive(Debug, Clone)]
pub struct Tiers(pub Vec<i64>);

pub fn parse_tiers(s: &str) -> Result<Tiers, String> {
    if s == "none" {
        return Ok(Tiers(Vec::new()));
    }
    s.split(',')
        .map(|t| {
            store::tier::RESOLUTIONS
                .iter()
                .find(|r| r.1 == t.trim())
                .map(|r| r.0)
                .ok_or_else(|| format!("{t:?} is not a tier: use 1s, 1m, 1s,1m or none"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Tiers)
}

pub fn parse_budget(s: &str) -> Result<DiskBudget, String> {
    let bad = || format!("{s:?}: use bytes like 500G, a percentage like 50%, or unlimited");
    if s == "unlimited" {
        return Ok(DiskBudget::Unlimited);
    }
    if let Some(p) = s.strip_suffix('%') {
        let p: f64 = p.parse().map_err(|_| bad())?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(bad());
        }
        return Ok(DiskBudget::FractionOfFilesystem(p / 100.0));
    }
    model::parse_bytes(s).map(DiskBudget::Bytes).map_err(|_| bad())
}

pub fn parse_perf_event(s: &str) -> Result<perf::Event, String> {
    perf::Event::parse(s).ok_or_else(|| format!("{s:?}: use cpu-clock or cycles"))
}

/// `--trace`: how often the kernel's event histograms are read, or `off`.
#[derive(Clone, Debug)]
pub struct TraceEvery(pub Option<Duration>);

pub fn parse_trace(s: &str) -> Result<TraceEvery, String> {
    if s == "off" {
        return Ok(TraceEvery(None));
    }
    let d = parse_dur(s)?;
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&d) {
        return Err(format!("{s} is out of range: 100ms to 60s, or off"));
    }
    Ok(TraceEvery(Some(d)))
}

/// Kernel tracing: `kansoku up` stores it, `kansoku agent` ships it with
/// its rounds.
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

/// Processes: `kansoku up` stores them, `kansoku agent` ships them.
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
    pub fn start(&self, host: &str) -> Option<tasks::Collector> {
        let every = self.processes.0?;
        let mut cfg = tasks::Config::new(every, host.to_owned());
        cfg.min_cpu = self.process_min_cpu;
        cfg.min_rss_bytes = self.process_min_rss;
        cfg.max_processes = self.process_max;
        let (mut c, why) = tasks::Collector::new(cfg, true);
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

pub fn parse_dur(s: &str) -> Result<Duration, String> {
    model::parse_duration(s).map_err(|e| e.to_string())
}

pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_dur(s)?;
    if !(INTERVAL_MIN..=INTERVAL_MAX).contains(&d) {
        return Err(format!("{s} is out of range: use {INTERVAL_MIN:?} to {INTERVAL_MAX:?}"));
    }
    Ok(d)
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_budgets_parse_or_explain() {
        assert_eq!(parse_budget("unlimited"), Ok(DiskBudget::Unlimited));
        assert_eq!(parse_budget("50%"), Ok(DiskBudget::FractionOfFilesystem(0.5)));
        assert_eq!(parse_budget("2G"), Ok(DiskBudget::Bytes(2 << 30)));
        assert_eq!(parse_budget("1234"), Ok(DiskBudget::Bytes(1234)));
        assert_eq!(parse_tiers("1s,1m").unwrap().0, [1_000_000_000, 60_000_000_000]);
        assert!(parse_tiers("none").unwrap().0.is_empty());
        assert!(parse_tiers("5s").unwrap_err().contains("1s,1m"));
        for bad in ["0", "150%", "0%", "12X", "", "-5G", "99999999999T"] {
            let e = parse_budget(bad).unwrap_err();
            assert!(e.contains("500G") && e.contains("unlimited"), "{bad}: {e}");
        }
    }
}
