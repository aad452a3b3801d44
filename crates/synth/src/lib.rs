//! Synthetic hosts: realistic series for many hosts, fed into the store
//! through the same path as the real collector (bounded queue -> store
//! writer -> live tail) by `kansoku lab synth`, so the dashboard and
//! queries can be measured at cluster scale on one machine; and the rounds
//! the store benchmarks ingest. A producer, not benchmark code: the binary
//! runs it without the lab.
//!
//! Each host runs a workload that changes every few seconds (idle, a batch
//! job on some cores, everything busy, I/O bound); per-core busy time moves
//! around it with noise and is accounted in USER_HZ ticks like
//! `/proc/stat`, so rates look like the real thing, steps included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use model::producer::{Producer, ReportFn};
use model::{Batch, SeriesKey, Timestamp};

const MODES: [&str; 8] = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];
const USER_HZ: f64 = 100.0;

#[derive(clap::Args, Debug, Clone)]
#[group(id = "synth_flags")]
pub struct Args {
    /// Synthetic hosts (host label `synth-NNN`).
    #[arg(long, default_value_t = 256)]
    pub hosts: usize,
    /// CPU cores per host.
    #[arg(long, default_value_t = 16)]
    pub cores: usize,
    /// Seed of the workload generator: the same seed gives the same data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Counts what the generator produced and dropped (queue full).
#[derive(Debug, Default)]
pub struct SynthStats {
    pub rounds: AtomicU64,
    pub samples: AtomicU64,
    pub dropped_batches: AtomicU64,
}

impl SynthStats {
    /// The figures of `/api/v1/status`'s `synth` part.
    pub fn report(&self) -> Vec<model::report::Figure> {
        use model::report::Figure;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            Figure::counter("rounds", n(&self.rounds)),
            Figure::counter("samples", n(&self.samples)),
            Figure::counter("dropped_batches", n(&self.dropped_batches)),
        ]
    }
}

/// The generator: a `model::producer::Producer` (`node::rounds` runs it).
#[derive(Debug)]
pub struct Synth {
    hosts: Vec<Host>,
    interval_ns: i64,
    rng: Rng,
    stats: Arc<SynthStats>,
    n_series: u32,
    /// The first round declared every series.
    declared: bool,
}

#[derive(Debug)]
struct Host {
    name: String,
    /// First series id of this host; ids are laid out in [`Synth::keys`] order.
    base: u32,
    phase: Phase,
    phase_left: u32,
    /// Busy fraction per core (user+system+...), 0..1.
    busy: Vec<f64>,
    /// Cumulative USER_HZ ticks per (core, mode), whole numbers: stored as
    /// ticks / USER_HZ, the exact decimals the collector stores from
    /// `/proc/stat` (a running sum of fractions would drift off them).
    cpu: Vec<f64>,
    rx: [f64; 2],
    tx: [f64; 2],
    disk_read: f64,
    disk_written: f64,
    load: [f64; 3],
    mem_used: f64,
    psi_cpu: f64,
    psi_io: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Idle,
    /// A job on the first `n` cores.
    Batch(usize),
    AllBusy,
    IoBound,
}

const MEM_TOTAL: f64 = 64.0 * (1u64 << 30) as f64;
const NICS: [&str; 2] = ["eth0", "eth1"];

impl Synth {
    pub fn new(args: &Args, interval: Duration) -> Synth {
        let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let per_host = per_host_series(args.cores);
        let hosts = (0..args.hosts)
            .map(|h| Host {
                name: format!("synth-{h:03}"),
                base: (h * per_host) as u32,
                phase: Phase::Idle,
                phase_left: 0,
                busy: (0..args.cores).map(|_| rng.f64() * 0.1).collect(),
                cpu: vec![0.0; args.cores * MODES.len()],
                rx: [0.0; 2],
                tx: [0.0; 2],
                disk_read: 0.0,
                disk_written: 0.0,
                load: [0.0; 3],
                mem_used: MEM_TOTAL * (0.2 + 0.3 * rng.f64()),
                psi_cpu: 0.0,
                psi_io: 0.0,
            })
            .collect();
        Synth {
            hosts,
            interval_ns: interval.as_nanos() as i64,
            rng,
            stats: Arc::default(),
            declared: false,
            n_series: (args.hosts * per_host) as u32,
        }
    }

    pub fn stats(&self) -> Arc<SynthStats> {
        Arc::clone(&self.stats)
    }

    pub fn n_series(&self) -> u32 {
        self.n_series
    }

    /// Every series' key, in id order.
    pub fn keys(&self) -> Vec<SeriesKey> {
        let mut keys = Vec::with_capacity(self.n_series as usize);
        for h in &self.hosts {
            let host = h.name.as_str();
            let cores = h.busy.len();
            for cpu in 0..cores {
                for mode in MODES {
                    keys.push(SeriesKey::new(
                        "node_cpu_seconds_total",
                        [("host", host), ("cpu", &cpu.to_string()), ("mode", mode)],
                    ));
                }
            }
            for nic in NICS {
                keys.push(SeriesKey::new("node_network_receive_bytes_total", [("host", host), ("device", nic)]));
                keys.push(SeriesKey::new("node_network_transmit_bytes_total", [("host", host), ("device", nic)]));
            }
            keys.push(SeriesKey::new("node_disk_read_bytes_total", [("host", host), ("device", "nvme0n1")]));
            keys.push(SeriesKey::new("node_disk_written_bytes_total", [("host", host), ("device", "nvme0n1")]));
            for name in ["node_load1", "node_load5", "node_load15"] {
                keys.push(SeriesKey::new(name, [("host", host)]));
            }
            for name in ["node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes", "node_memory_Cached_bytes"] {
                keys.push(SeriesKey::new(name, [("host", host)]));
            }
            keys.push(SeriesKey::new("node_pressure_cpu_waiting_seconds_total", [("host", host)]));
            keys.push(SeriesKey::new("node_pressure_io_waiting_seconds_total", [("host", host)]));
        }
        debug_assert_eq!(keys.len(), self.n_series as usize);
        keys
    }

    /// One round at `time`: advances every host by one interval.
    pub fn round(&mut self, time: Timestamp, batch: &mut Batch) {
        let dt = self.interval_ns as f64 / 1e9;
        let rng = &mut self.rng;
        for h in &mut self.hosts {
            h.step(dt, rng);
            let mut id = h.base;
            let mut push = |v: f64| {
                batch.points.push((id, v));
                id += 1;
            };
            for v in &h.cpu {
                push(*v / USER_HZ);
            }
            for i in 0..NICS.len() {
                push(h.rx[i]);
                push(h.tx[i]);
            }
            push(h.disk_read);
            push(h.disk_written);
            for v in h.load {
                push(v);
            }
            push(MEM_TOTAL);
            push(MEM_TOTAL - h.mem_used);
            push((MEM_TOTAL - h.mem_used) * 0.6);
            push(h.psi_cpu);
            push(h.psi_io);
        }
        batch.time = time;
    }
}

impl Producer for Synth {
    fn name(&self) -> &'static str {
        "synth"
    }

    fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns as u64)
    }

    fn report(&self) -> Option<ReportFn> {
        let stats = self.stats();
        Some(Arc::new(move || stats.report()))
    }

    /// Every host advanced one interval; the first round declares every
    /// series.
    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        let mut batch = Batch::new(t);
        if !self.declared {
            batch.defs = self.keys().into_iter().enumerate().map(|(i, k)| (i as u32, k)).collect();
            self.declared = true;
        }
        batch.points.reserve(self.n_series as usize);
        Synth::round(self, t, &mut batch);
        self.stats.rounds.fetch_add(1, Ordering::Relaxed);
        self.stats.samples.fetch_add(batch.points.len() as u64, Ordering::Relaxed);
        Some(batch)
    }

    fn dropped(&mut self) {
        if self.stats.dropped_batches.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("synth: store queue full, dropping rounds (counted)");
        }
    }
}

/// Series per synthetic host with `cores` cores.
/// `rounds` rounds of `hosts` synthetic 16-core hosts at `interval`, ending
/// at the last whole second: (keys, first round's time, rounds; the first
/// round declares every key). What the store benchmarks ingest.
pub fn rounds(hosts: usize, rounds: usize, interval: Duration) -> (Vec<SeriesKey>, i64, Vec<Batch>) {
    let mut synth = Synth::new(&Args { hosts, cores: 16, seed: 1 }, interval);
    let keys = synth.keys();
    let step = interval.as_nanos() as i64;
    let start = Timestamp::now().as_nanos() / 1_000_000_000 * 1_000_000_000 - rounds as i64 * step;
    let mut batches = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let mut b = Batch::new(Timestamp(start + i as i64 * step));
        b.points.reserve(keys.len());
        if i == 0 {
            b.defs = keys.iter().cloned().enumerate().map(|(i, k)| (i as u32, k)).collect();
        }
        synth.round(b.time, &mut b);
        batches.push(b);
    }
    (keys, start, batches)
}

pub fn per_host_series(cores: usize) -> usize {
    cores * MODES.len() + NICS.len() * 2 + 2 + 3 + 3 + 2
}

impl Host {
    fn step(&mut self, dt: f64, rng: &mut Rng) {
        if self.phase_left == 0 {
            let cores = self.busy.len();
            self.phase = match rng.below(10) {
                0..=3 => Phase::Idle,
                4..=6 => Phase::Batch(1 + rng.below(cores as u64) as usize),
                7..=8 => Phase::AllBusy,
                _ => Phase::IoBound,
            };
            // 3 to 60 s at 100 ms.
            self.phase_left = 30 + rng.below(570) as u32;
        }
        self.phase_left -= 1;
        let cores = self.busy.len();
        let mut running = 0.0;
        for c in 0..cores {
            let target = match self.phase {
                Phase::Idle => 0.03,
                Phase::Batch(n) if c < n => 0.95,
                Phase::Batch(_) => 0.05,
                Phase::AllBusy => 0.9,
                Phase::IoBound => 0.25,
            };
            let b = &mut self.busy[c];
            *b += (target - *b) * 0.3 + (rng.f64() - 0.5) * 0.08;
            *b = b.clamp(0.0, 1.0);
            running += *b;
            let iowait = if self.phase == Phase::IoBound { (1.0 - *b) * 0.6 } else { 0.0 };
            // Split busy time over the modes like a typical server, then
            // account it in whole ticks as /proc/stat does.
            let shares = [0.70, 0.01, 0.22, 0.0, 0.0, 0.02, 0.05, 0.0];
            let row = &mut self.cpu[c * MODES.len()..(c + 1) * MODES.len()];
            for (m, share) in shares.iter().enumerate() {
                let s = match MODES[m] {
                    "idle" => (1.0 - *b - iowait).max(0.0),
                    "iowait" => iowait,
                    _ => *b * share,
                };
                row[m] += ticks(s * dt, rng);
            }
        }
        let io = if self.phase == Phase::IoBound { 1.0 } else { 0.05 };
        for i in 0..NICS.len() {
            let scale = if i == 0 { 1.0 } else { 0.1 };
            self.rx[i] += (running * 12e6 * scale * (0.8 + 0.4 * rng.f64()) * dt).round();
            self.tx[i] += (running * 4e6 * scale * (0.8 + 0.4 * rng.f64()) * dt).round();
        }
        self.disk_read += (io * 400e6 * rng.f64() * dt / 4096.0).round() * 4096.0;
        self.disk_written += (io * 150e6 * rng.f64() * dt / 4096.0).round() * 4096.0;
        for (l, tau) in self.load.iter_mut().zip([60.0, 300.0, 900.0]) {
            *l += (running - *l) * (dt / tau);
        }
        self.mem_used = (self.mem_used + (rng.f64() - 0.5) * 2e7 + running * 1e5).clamp(0.1 * MEM_TOTAL, MEM_TOTAL);
        self.psi_cpu += (running - cores as f64 * 0.8).max(0.0) / cores as f64 * dt;
        self.psi_io += if self.phase == Phase::IoBound { 0.3 * dt } else { 0.0 };
    }
}

/// Seconds as whole USER_HZ ticks, with the fraction rounded at random
/// (what the tick-based accounting does on average).
fn ticks(seconds: f64, rng: &mut Rng) -> f64 {
    let t = seconds * USER_HZ;
    let whole = t.floor();
    whole + if rng.f64() < t - whole { 1.0 } else { 0.0 }
}

/// xorshift64*: fast and reproducible; nothing here needs more.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_cover_every_series_and_counters_only_grow() {
        let args = Args { hosts: 3, cores: 4, seed: 7 };
        let mut s = Synth::new(&args, Duration::from_millis(100));
        let keys = s.keys();
        assert_eq!(keys.len(), 3 * per_host_series(4));
        let mut prev: Option<Vec<f64>> = None;
        for i in 0..200 {
            let mut b = Batch::new(Timestamp(0));
            s.round(Timestamp(i * 100_000_000), &mut b);
            let ids: Vec<u32> = b.points.iter().map(|p| p.0).collect();
            assert_eq!(ids, (0..keys.len() as u32).collect::<Vec<_>>());
            let vals: Vec<f64> = b.points.iter().map(|p| p.1).collect();
            if let Some(p) = &prev {
                for (k, (a, b)) in keys.iter().zip(p.iter().zip(&vals)) {
                    if k.name().ends_with("_total") {
                        assert!(b >= a, "{k} went back: {a} -> {b}");
                    }
                }
            }
            prev = Some(vals);
        }
        // CPU seconds are whole ticks over USER_HZ, as parsed from /proc/stat:
        // exact hundredths, bit for bit.
        let last = prev.unwrap();
        for (k, v) in keys.iter().zip(&last).filter(|(k, _)| k.name() == "node_cpu_seconds_total") {
            assert_eq!(((v * 100.0).round() / 100.0).to_bits(), v.to_bits(), "{k} = {v}");
        }
        // A core's modes add up to the elapsed time, within a tick per mode.
        let cpu0: f64 = last[..MODES.len()].iter().sum();
        assert!((cpu0 - 20.0).abs() < 0.5, "cpu0 accounted {cpu0} s over 20 s");
    }

    #[test]
    fn same_seed_same_data() {
        let args = Args { hosts: 2, cores: 2, seed: 3 };
        let run = || {
            let mut s = Synth::new(&args, Duration::from_millis(100));
            let mut b = Batch::new(Timestamp(0));
            for i in 0..50 {
                b.points.clear();
                s.round(Timestamp(i), &mut b);
            }
            b.points
        };
        assert_eq!(run(), run());
    }
}
