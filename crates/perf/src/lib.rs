//! Per-CPU sampling with `perf_event_open` (issue: per-CPU sampling).
//! - [`ring`]: the records of a perf ring buffer, parsed from bytes (safe,
//!   pure, tested against records that wrap the ring and against losses);
//! - [`mmap`]: the one unsafe module: opening an event per CPU, mapping its
//!   ring, reading `data_head` (acquire) and publishing `data_tail`
//!   (release);
//! - [`procs`]: the processes behind the samples (side band and `/proc`),
//!   so every batch names its processes' mappings, and a build-id cache;
//! - [`Capture`]: every CPU at a fixed period, drained into [`ring::Record`]s
//!   with every loss counted.

pub mod mmap;
#[cfg(feature = "symbols")]
pub mod pprof;
pub mod procs;
pub mod ring;
pub mod sampler;
#[cfg(feature = "symbols")]
pub mod symbols;

use std::io;

pub use ring::{Counts, Record};

/// What to sample.
#[derive(Clone, Debug)]
pub struct Config {
    /// Sampling period of the software `cpu-clock` event, ns (100 µs = 10 kHz).
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

/// Online CPUs, from /sys/devices/system/cpu/online (`0-3,8`).
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {:?}", text.trim()));
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().map_err(|_| bad())?..=b.parse::<u32>().map_err(|_| bad())?),
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(cpus)
}

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
