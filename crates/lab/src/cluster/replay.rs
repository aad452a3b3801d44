//! `kansoku lab transfer --cores 1,2,4,8,14,16,28`: the first experiment of
//! seeds/000. One core-second of a real `perf record -e cpu-clock -F 10000
//! -a` recording (the committed one made under stress-ng, `--record` for a
//! fresh one, or `--recording`), replicated to n cores
//! as the paper did, is sent every second to a real `kansoku server`
//! (fsync always) the way each mode sends it:
//! - `single`: one sender encodes every core's batch and sends one frame per
//!   core on one connection (the paper's single sender);
//! - `per-core`: one sender per core, pinned to it (core k on CPU k mod the
//!   CPUs here), its own connection and frame (the paper's parallel
//!   transfer);
//! - `staggered`: per-core, but core k starts k/n of a second later (the
//!   paper's future work: spread the senders over the second);
//! - `set`: one sender, every core's batch in one frame, stored with one
//!   fsync (what `kansoku agent --perf` does).
//!
//! Reported per mode and n: the time from the end of the core-second until
//! every core's batch is durable and queryable (acknowledged after the
//! server's fsync; the server's event index holds it from then on), the
//! mean per core, sender CPU per sample and its load (task-clock / wall
//! time of the transfer, the paper's definition), server CPU per sample and
//! wire bytes per sample. What the server stored is checked against what
//! was sent.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use codec::events::{Encoding, EventBatch};
use model::{SeriesKey, Timestamp};
use serde_json::json;
use wire::{Hello, Msg};

use crate::out::result;
use crate::transfer::{Args, Server, ingest_stat, server};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Single,
    PerCore,
    Staggered,
    Set,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::PerCore => "per-core",
            Mode::Staggered => "staggered",
            Mode::Set => "set",
        }
    }
}

/// A blocking agent connection that speaks just enough of the protocol.
struct Conn {
    tcp: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
    pending: VecDeque<Msg>,
    wire_bytes: u64,
    seq: u64,
}

impl Conn {
    fn open(addr: &str, spool_id: u64) -> anyhow::Result<Conn> {
        let tcp = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
        tcp.set_nodelay(true)?;
        let mut c = Conn { tcp, buf: Vec::new(), out: Vec::new(), pending: VecDeque::new(), wire_bytes: 0, seq: 0 };
        c.send(&Msg::Hello(Hello {
            version: wire::VERSION,
            host: "replay".into(),
            agent_version: "lab".into(),
            spool_id,
            token: String::new(),
            interval_ns: 100_000,
            batch_ns: 1_000_000_000,
        }))?;
        match c.recv()? {
            Msg::Welcome { next_seq, .. } => c.seq = next_seq.saturating_sub(1),
            m => bail!("expected welcome, got {}", m.name()),
        }
        Ok(c)
    }

    fn send(&mut self, m: &Msg) -> anyhow::Result<()> {
        self.out.clear();
        m.encode(&mut self.out);
        self.wire_bytes += self.out.len() as u64;
        self.tcp.write_all(&self.out).context("send")
    }

    fn recv(&mut self) -> anyhow::Result<Msg> {
        loop {
            if let Some(m) = self.pending.pop_front() {
                return Ok(m);
            }
            let mut chunk = [0u8; 4096];
            let n = self.tcp.read(&mut chunk).context("receive")?;
            if n == 0 {
                bail!("the server closed the connection");
            }
            self.buf.extend_from_slice(&chunk[..n]);
            let (msgs, used) = wire::decode_all(&self.buf, wire::FRAME_MAX)?;
            self.buf.drain(..used);
            self.pending.extend(msgs);
        }
    }

    /// Sends `batches` of encoded events as one frame; returns its seq.
    fn events(&mut self, stream: &SeriesKey, batches: Vec<Vec<u8>>) -> anyhow::Result<u64> {
        self.seq += 1;
        self.send(&Msg::Events { seq: self.seq, stream: stream.clone(), batches })?;
        Ok(self.seq)
    }

    fn wait_ack(&mut self, seq: u64) -> anyhow::Result<()> {
        loop {
            match self.recv()? {
                Msg::Ack { seq: a } if a >= seq => return Ok(()),
                Msg::Ack { .. } => {}
                Msg::Ping { id, .. } => self.send(&Msg::Pong { id, time_ns: Timestamp::now().as_nanos() })?,
                Msg::Reject { reason } => bail!("server refused: {reason}"),
                m => bail!("unexpected {} from the server", m.name()),
            }
        }
    }
}

/// CPU time of the sender: its thread's, or in `set` mode (the only sender,
/// encoding on helper threads) this process's.
fn sender_cpu_ns(mode: Mode) -> i64 {
    match mode {
        Mode::Set => clock::process_cpu_ns(),
        _ => clock::thread_cpu_ns(),
    }
}

/// One core-second of the recording: the CPU with the most samples, the
/// second after its first half second (start-up skipped when the recording
/// is long enough), times from 0.
pub(crate) fn core_second(batches: &[EventBatch]) -> anyhow::Result<EventBatch> {
    let b = batches.iter().max_by_key(|b| b.len()).context("the recording holds no samples")?;
    let first = b.time[0];
    let last = *b.time.last().expect("not empty");
    let from = if last - first >= 1_500_000_000 { first + 500_000_000 } else { first };
    let mut out = EventBatch::default();
    for i in 0..b.len() {
        if (from..from + 1_000_000_000).contains(&b.time[i]) {
            out.push(b.time[i] - from, b.pid[i], b.tid[i], b.ip[i]);
        }
    }
    if out.len() < 100 {
        bail!("the busiest CPU of the recording has {} samples in a second; record at a higher rate", out.len());
    }
    Ok(out)
}

/// The committed recording: one core-second (9,959 samples of CPU 1) of
/// `perf record -e cpu-clock -F 10000 -a -- stress-ng --cpu 0` on this
/// class of machine (2 vCPUs, AMD EPYC, Linux 6.18), as `perf script`
/// text, zstd-compressed (57 KB). The default, so the figure is the same
/// capture on every machine and every run.
const COMMITTED: &[u8] = include_bytes!("../../../../experiments/replay/stress-ng-core-second.txt.zst");

/// The committed recording's `perf script` text.
fn committed() -> anyhow::Result<String> {
    let text = zstd::stream::decode_all(COMMITTED).context("the committed recording is damaged")?;
    String::from_utf8(text).context("the committed recording is not text")
}

/// The recording's per-CPU batches: `--recording` (perf.data or `perf
/// script` text), `--record` (recorded now under stress-ng), else the
/// committed one.
fn recording(args: &Args, dir: &Path) -> anyhow::Result<(Vec<EventBatch>, String)> {
    let (text, what) = match &args.recording {
        None if !args.record => (
            committed()?,
            "the committed recording (experiments/replay/stress-ng-core-second.txt.zst; --record for a fresh one)"
                .to_owned(),
        ),
        Some(p) => {
            let head = std::fs::read(p).with_context(|| format!("read {}", p.display()))?;
            if head.starts_with(b"PERFILE2") {
                (perf::script::script(p)?, p.display().to_string())
            } else {
                (
                    String::from_utf8(head).context("the recording is neither perf.data nor text")?,
                    p.display().to_string(),
                )
            }
        }
        None => {
            let workload = ["stress-ng", "--cpu", "0", "--timeout", "3s", "--quiet"];
            let text = perf::script::record(dir, 10_000, &workload)
                .context("record under stress-ng (apt-get install linux-perf stress-ng, or give --recording)")?;
            (text, "perf record -e cpu-clock -F 10000 -a -- stress-ng --cpu 0 --timeout 3s".to_owned())
        }
    };
    Ok((perf::script::parse(&text, 0)?, what))
}

/// What one sender measured.
#[derive(Default)]
struct Sent {
    /// Per round: seconds from the sender's start to its last ack.
    latency: Vec<f64>,
    cpu_ns: i64,
    wire_bytes: u64,
}

/// Runs one sender: its `cores` every round, `delay` after the round starts.
#[allow(clippy::too_many_arguments)]
fn sender(
    addr: &str,
    spool_id: u64,
    template: &EventBatch,
    cores: &[u32],
    mode: Mode,
    pin: Option<usize>,
    delay: Duration,
    begin: Instant,
    base_ns: i64,
    rounds: usize,
    stop: &AtomicBool,
) -> anyhow::Result<Sent> {
    if let Some(cpu) = pin {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu)?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
    }
    let mut conn = Conn::open(addr, spool_id)?;
    let stream = SeriesKey::new("perf_cpu_clock", [("host", "replay")]);
    let mut sent = Sent::default();
    for r in 0..rounds {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // The batches as the sampler holds them when the second ends.
        let shift = base_ns + r as i64 * 1_000_000_000;
        let raw: Vec<EventBatch> = cores
            .iter()
            .map(|&c| {
                let mut b = template.clone();
                b.cpu = c;
                b.time.iter_mut().for_each(|t| *t += shift);
                b
            })
            .collect();
        let at = begin + Duration::from_secs(r as u64) + delay;
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait); // the schedule of the experiment: one core-second per second
        }
        let t0 = Instant::now();
        let c0 = sender_cpu_ns(mode);
        let last = if mode == Mode::Set {
            // As the agent: every core's batch encoded over the CPUs here.
            let n: usize = raw.iter().map(EventBatch::len).sum();
            let encoded = codec::events::encode_many(&raw, Encoding::Fast, codec::events::threads_for(n));
            conn.events(&stream, encoded)?
        } else {
            let mut last = 0;
            for b in &raw {
                let mut out = Vec::with_capacity(b.len() * 4);
                b.encode(&mut out, Encoding::Fast);
                last = conn.events(&stream, vec![out])?;
            }
            last
        };
        conn.wait_ack(last)?;
        sent.latency.push(t0.elapsed().as_secs_f64());
        sent.cpu_ns += sender_cpu_ns(mode) - c0;
    }
    sent.wire_bytes = conn.wire_bytes;
    Ok(sent)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn replay_one(args: &Args, template: &EventBatch, mode: Mode, n: usize) -> anyhow::Result<serde_json::Value> {
    let srv = server(&args.dir.join(format!("replay-{}-{n}", mode.name())))?;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let all: Vec<u32> = (0..n as u32).collect();
    // (cores, pin, delay) per sender.
    let jobs: Vec<(Vec<u32>, Option<usize>, Duration)> = match mode {
        Mode::Single | Mode::Set => vec![(all, None, Duration::ZERO)],
        Mode::PerCore => all.iter().map(|&c| (vec![c], Some(c as usize % cpus), Duration::ZERO)).collect(),
        Mode::Staggered => {
            all.iter().map(|&c| (vec![c], Some(c as usize % cpus), Duration::from_secs(1) * c / n as u32)).collect()
        }
    };
    let base_ns = (Timestamp::now().as_nanos() / 1_000_000_000 - args.rounds as i64 - 60) * 1_000_000_000;
    let events0 = ingest_stat(&srv.http, "events")?;
    let cpu0 = srv.proc.cpu();
    // Senders connect first; the first round starts once all are ready.
    let begin = Instant::now() + Duration::from_millis(500);
    let never = AtomicBool::new(false);
    let results: Vec<anyhow::Result<Sent>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(j, (cores, pin, delay))| {
                let addr = srv.ingest.as_str();
                let never = &never;
                s.spawn(move || {
                    sender(addr, 1 + j as u64, template, cores, mode, *pin, *delay, begin, base_ns, args.rounds, never)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("sender panicked")))).collect()
    });
    let sent = results.into_iter().collect::<anyhow::Result<Vec<Sent>>>()?;
    let server_cpu = srv.proc.cpu() - cpu0;
    let stored = ingest_stat(&srv.http, "events")? - events0;
    srv.proc.stop();
    let samples = (template.len() * n * args.rounds) as f64;
    if (stored - samples).abs() > 0.5 {
        bail!("{} x {n}: sent {samples} samples, the server stored {stored}", mode.name());
    }
    // Per round: the last core durable (from the round's start, delays
    // included), and the mean over cores of each one's own time.
    let all_durable: Vec<f64> = (0..args.rounds)
        .map(|r| jobs.iter().zip(&sent).map(|(j, s)| j.2.as_secs_f64() + s.latency[r]).fold(0.0, f64::max))
        .collect();
    let per_sender: Vec<f64> = sent.iter().flat_map(|s| s.latency.iter().copied()).collect();
    let sender_cpu: f64 = sent.iter().map(|s| s.cpu_ns as f64 / 1e9).sum();
    let loads: Vec<f64> =
        sent.iter().map(|s| s.cpu_ns as f64 / 1e9 / s.latency.iter().sum::<f64>().max(1e-9)).collect();
    let wire: u64 = sent.iter().map(|s| s.wire_bytes).sum();
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let all_sorted = sorted(all_durable.clone());
    Ok(json!({
        "mode": mode.name(),
        "cores": n,
        "rounds": args.rounds,
        "samples_per_core_second": template.len(),
        "all_durable_ms_mean": mean(&all_durable) * 1e3,
        "all_durable_ms_median": all_sorted[all_sorted.len() / 2] * 1e3,
        "all_durable_ms_max": all_sorted.last().copied().unwrap_or(0.0) * 1e3,
        "per_sender_ms_mean": mean(&per_sender) * 1e3,
        "per_sender_ms_max": per_sender.iter().copied().fold(0.0, f64::max) * 1e3,
        "sender_cpu_us_per_sample": sender_cpu / samples * 1e6,
        "sender_load_mean": mean(&loads),
        "server_cpu_us_per_sample": server_cpu / samples * 1e6,
        "end_to_end_cpu_us_per_sample": (sender_cpu + server_cpu) / samples * 1e6,
        "wire_bytes_per_sample": wire as f64 / samples,
        "stored": stored,
    }))
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.rounds == 0 {
        bail!("--rounds 0: nothing to replay");
    }
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let (batches, what) = recording(args, &args.dir)?;
    let template = core_second(&batches)?;
    result!(
        "replay: one core-second of {what}: {} samples (CPU {}), {} rounds a second apart per configuration",
        template.len(),
        batches.iter().max_by_key(|b| b.len()).map_or(0, |b| b.cpu),
        args.rounds
    );
    result!(
        "{:<10} {:>5} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>12} {:>10}",
        "mode",
        "cores",
        "all ms mean",
        "all ms max",
        "sender ms",
        "sender us/s",
        "load",
        "server us/s",
        "e2e us/s",
        "wire B/s"
    );
    let mut rows = Vec::new();
    for &mode in &args.mode {
        for &n in &args.cores {
            let r = replay_one(args, &template, mode, n)?;
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            result!(
                "{:<10} {:>5} {:>12.2} {:>12.2} {:>12.2} {:>12.4} {:>9.1}% {:>12.4} {:>12.4} {:>10.2}",
                mode.name(),
                n,
                f("all_durable_ms_mean"),
                f("all_durable_ms_max"),
                f("per_sender_ms_mean"),
                f("sender_cpu_us_per_sample"),
                f("sender_load_mean") * 100.0,
                f("server_cpu_us_per_sample"),
                f("end_to_end_cpu_us_per_sample"),
                f("wire_bytes_per_sample"),
            );
            rows.push(r);
        }
    }
    if let Some(out) = &args.out {
        let doc = json!({ "machine": crate::machine(), "recording": what, "replay": rows });
        std::fs::write(out, serde_json::to_string_pretty(&doc)?).with_context(|| format!("write {}", out.display()))?;
    }
    Ok(())
}

/// A set-mode replay of every CPU here, a core-second each per second, to
/// a server of its own, until [`Background::finish`]: the transfer of
/// `lab interference`.
pub(crate) struct Background {
    srv: Server,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<anyhow::Result<Sent>>,
}

impl Background {
    pub fn start(dir: &Path, template: &EventBatch) -> anyhow::Result<Background> {
        let srv = server(&dir.join("replay-background"))?;
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get) as u32;
        let (template, addr) = (template.clone(), srv.ingest.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let base_ns = (Timestamp::now().as_nanos() / 1_000_000_000 - 3600) * 1_000_000_000;
        let handle = std::thread::spawn(move || {
            let cores: Vec<u32> = (0..cpus).collect();
            let begin = Instant::now();
            sender(&addr, 1, &template, &cores, Mode::Set, None, Duration::ZERO, begin, base_ns, 3600, &flag)
        });
        Ok(Background { srv, stop, handle })
    }

    /// Stops after the current round; the mean time to durable, seconds.
    pub fn finish(self) -> anyhow::Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.handle.join().map_err(|_| anyhow::anyhow!("replay panicked"))??;
        self.srv.proc.stop();
        if sent.latency.is_empty() {
            bail!("the replay sent nothing");
        }
        Ok(mean(&sent.latency))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default recording is the same core-second everywhere: every
    /// sample of the committed capture, one CPU's second.
    #[test]
    fn the_committed_recording_is_one_core_second() {
        let batches = perf::script::parse(&committed().unwrap(), 0).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!((batches[0].cpu, batches[0].len()), (1, 9959));
        let second = core_second(&batches).unwrap();
        assert_eq!(second.len(), 9959);
        assert!(second.time.iter().all(|&t| (0..1_000_000_000).contains(&t)));
    }
}
