//! Per-CPU sampling with `perf_event_open` (issue: per-CPU sampling).
//! - [`ring`]: the records of a perf ring buffer, parsed from bytes (safe,
//!   pure, tested against records that wrap the ring and against losses);
//! - [`mmap`]: the one unsafe module: opening an event per CPU, mapping its
//!   ring, reading `data_head` (acquire) and publishing `data_tail`
//!   (release);
//! - [`procs`]: the processes behind the samples (side band and `/proc`),
//!   so every batch names its processes' mappings, and a build-id cache;
//! - [`Capture`]: every CPU at a fixed period, drained into [`ring::Record`]s
//!   with every loss counted;
//! - [`script`]: `perf record` captures read through `perf script` into
//!   per-CPU event batches (`kansoku import`, and the lab's replays);
//! - `sampler`: the sampling loop, every ring drained into per-CPU event
//!   batches and handed on a second at a time;
//! - `symbols`: symbolisation (`symbols::Procs`), flame graphs and folded
//!   stacks; `pprof`: profiles in pprof's format.

pub mod mmap;
#[cfg(feature = "symbols")]
pub mod pprof;
pub mod procs;
pub mod ring;
pub mod sampler;
pub mod script;
#[cfg(feature = "symbols")]
pub mod symbols;

use std::io;

pub use ring::{Counts, Record};

/// The event whose overflow takes a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Event {
    /// The software `cpu-clock` timer, at a fixed period: every machine has
    /// it, and every sample is the same slice of time.
    #[default]
    CpuClock,
    /// The CPU's hardware cycle counter, at a frequency (the kernel adjusts
    /// the period in cycles to keep the rate): where the machine has a PMU;
    /// virtual machines often have none.
    Cycles,
}

impl std::str::FromStr for Event {
    type Err = String;
    /// `--perf-event`.
    fn from_str(s: &str) -> Result<Event, String> {
        Event::parse(s).ok_or_else(|| format!("{s:?}: use cpu-clock or cycles"))
    }
}

impl Event {
    pub fn parse(s: &str) -> Option<Event> {
        match s {
            "cpu-clock" => Some(Event::CpuClock),
            "cycles" => Some(Event::Cycles),
            _ => None,
        }
    }

    /// The name `perf` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Event::CpuClock => "cpu-clock",
            Event::Cycles => "cycles",
        }
    }

    /// The event stream its samples are stored as (with a host label).
    pub fn stream(self) -> &'static str {
        match self {
            Event::CpuClock => "perf_cpu_clock",
            Event::Cycles => "perf_cycles",
        }
    }
}

/// What to sample.
#[derive(Clone, Debug)]
pub struct Config {
    /// What takes a sample.
    pub event: Event,
    /// Sampling period, ns (100 µs = 10 kHz): of `cpu-clock` exactly, of
    /// `cycles` on average.
    pub period_ns: u64,
    /// Ring data pages per CPU (a power of two).
    pub ring_pages: usize,
    /// CPUs to sample; empty: every online CPU.
    pub cpus: Vec<u32>,
    /// A ring is readable for [`Capture::wait`] once this many bytes wait
    /// in it; 0: a quarter of the ring.
    pub wakeup_bytes: usize,
    /// Also record each sample's call chain (kernel and user, frame
    /// pointers; at most 127 frames).
    pub callchain: bool,
    /// Also record the processes' side band: executable mappings (MMAP2,
    /// with build ids), names (COMM), FORK and EXIT.
    pub sideband: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            event: Event::CpuClock,
            period_ns: 100_000,
            ring_pages: 64,
            cpus: Vec::new(),
            wakeup_bytes: 0,
            callchain: false,
            sideband: false,
        }
    }
}

/// One sampling event per CPU.
#[derive(Debug)]
pub struct Capture {
    events: Vec<mmap::CpuEvent>,
    scratch: Vec<u8>,
    /// Non-sample records end in their sample id (with the side band).
    sample_id_all: bool,
    pub counts: Counts,
}

/// This boot of this machine's kernel (`/proc/sys/kernel/random/boot_id`):
/// the `boot` label of the event streams sampled here, so that a server
/// names kernel addresses (and asks live processes) only for samples of
/// the kernel it runs on — another boot's kernel sits at other addresses
/// (KASLR), another machine's processes are not this one's.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty())
}

pub use clock::online_cpus;

impl Capture {
    /// Opens and enables an event on every CPU of `cfg`.
    pub fn open(cfg: &Config) -> io::Result<Capture> {
        let cpus = if cfg.cpus.is_empty() { online_cpus()? } else { cfg.cpus.clone() };
        let events = cpus.iter().map(|&c| mmap::CpuEvent::open(c, cfg)).collect::<io::Result<Vec<_>>>()?;
        for e in &events {
            e.enable()?;
        }
        Ok(Capture { events, scratch: Vec::new(), sample_id_all: cfg.sideband, counts: Counts::default() })
    }

    /// Hands every record written since the last call to `f` with the CPU
    /// of its ring, CPU by CPU, and frees the ring space they used.
    pub fn drain(&mut self, mut f: impl FnMut(u32, Record<'_>)) -> Result<(), ring::RingError> {
        for e in &mut self.events {
            self.scratch.clear();
            e.read(&mut self.scratch);
            let cpu = e.cpu;
            ring::parse_records(&self.scratch, self.sample_id_all, &mut self.counts, |r| f(cpu, r))?;
        }
        Ok(())
    }

    /// Blocks until some ring holds `Config::wakeup_bytes` (or `timeout`
    /// passes); returns whether one does.
    pub fn wait(&self, timeout: std::time::Duration) -> io::Result<bool> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut fds: Vec<PollFd<'_>> =
            self.events.iter().map(|e| PollFd::from_borrowed_fd(e.fd(), PollFlags::IN)).collect();
        let ts = Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: i64::from(timeout.subsec_nanos()) };
        Ok(poll(&mut fds, Some(&ts))? > 0)
    }

    pub fn cpus(&self) -> Vec<u32> {
        self.events.iter().map(|e| e.cpu).collect()
    }
}
