//! `kansoku lab collector-cost`: what sampling this host costs, per interval
//! and per sample, beside node_exporter scraped at the same interval in the
//! same time window (so both see the same machine noise).
//!
//! Measured: CPU time of the collector thread (sources, parsing, batching and
//! its sleeps' syscalls) from `CLOCK_THREAD_CPUTIME_ID`; CPU time of a store
//! thread appending every batch (WAL write + fsync, head) to a temporary data
//! directory; and node_exporter's whole-process CPU time from
//! `/proc/PID/stat` (utime + stime), with the scraper's own cost reported
//! apart. Wall-clock lateness of each round is reported as jitter.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use anyhow::{Context, bail};
use clock::schedule::{after_round, next_boundary, sleep_until};
use clock::{realtime_ns, thread_cpu_ns};
use collect::{Collector, CollectorConfig};
use model::{Batch, Timestamp};

use crate::out::result;
use crate::procs::stat_cpu_seconds;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Sampling (and scraping) interval.
    #[arg(long, default_value = "100ms", value_parser = model::parse_duration)]
    interval: Duration,
    /// How long to measure.
    #[arg(long, default_value = "60s", value_parser = model::parse_duration)]
    duration: Duration,
    /// node_exporter binary to run beside us; "none" measures kansoku alone.
    #[arg(long, default_value = "/usr/bin/prometheus-node-exporter")]
    peer: String,
    /// Where node_exporter listens (loopback).
    #[arg(long, default_value = "127.0.0.1:19100")]
    peer_listen: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Side {
    pub name: String,
    pub rounds: u64,
    pub missed_rounds: u64,
    pub cpu_seconds: f64,
    pub samples_per_round: f64,
    pub cpu_us_per_round: f64,
    pub core_percent: f64,
    pub ns_per_sample: f64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub interval_ms: f64,
    pub duration_s: f64,
    pub machine: String,
    pub kansoku_collector: Side,
    pub kansoku_store_append: Side,
    pub peer: Option<Side>,
    pub peer_scraper_cpu_us_per_round: Option<f64>,
    pub lateness_us_p50: f64,
    pub lateness_us_p99: f64,
    pub lateness_us_max: f64,
}

fn side(name: &str, rounds: u64, missed: u64, cpu_s: f64, samples: u64, interval: Duration) -> Side {
    let r = rounds.max(1) as f64;
    let per_round = cpu_s / r;
    Side {
        name: name.into(),
        rounds,
        missed_rounds: missed,
        cpu_seconds: cpu_s,
        samples_per_round: samples as f64 / r,
        cpu_us_per_round: per_round * 1e6,
        core_percent: per_round / interval.as_secs_f64() * 100.0,
        ns_per_sample: if samples > 0 { cpu_s * 1e9 / samples as f64 } else { 0.0 },
    }
}

pub(crate) struct Peer {
    pub(crate) child: Child,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sleeps to a wall-clock instant, however far ahead (the lab starts a
/// couple of seconds out, which the collector's clock-step check would flag).
pub(crate) fn sleep_to(deadline_ns: i64, stop: &AtomicBool) {
    let _ = sleep_until(deadline_ns, i64::MAX / 4, stop);
}

/// One HTTP/1.0 GET; returns the body.
pub(crate) fn scrape(addr: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

/// Spawns `cmd` and waits (10 s at most) for a line containing `ready` on
/// its stderr, read on a thread so the wait is bounded.
pub(crate) fn spawn_ready(mut cmd: Command, ready: &'static str, what: &str) -> anyhow::Result<Peer> {
    let mut child =
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().with_context(|| format!("start {what}"))?;
    let stderr = child.stderr.take().expect("piped");
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(ready) {
                let _ = ready_tx.try_send(());
            }
        }
    });
    let mut peer = Peer { child };
    if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
        if let Some(status) = peer.child.try_wait()? {
            bail!("{what} exited ({status}) before it was ready");
        }
        bail!("{what} did not report {ready:?} within 10 s");
    }
    Ok(peer)
}

fn start_peer(bin: &str, listen: &str) -> anyhow::Result<Peer> {
    // An occupied port would have us scrape someone else's exporter.
    drop(std::net::TcpListener::bind(listen).with_context(|| {
        format!("peer address {listen} is in use (a node_exporter left running?); stop it or pass --peer-listen")
    })?);
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--web.listen-address={listen}"));
    let what = format!("{bin} (install prometheus-node-exporter, or pass --peer none)");
    let peer = spawn_ready(cmd, "Listening on", &what)?;
    if scrape(listen).map(|b| b.is_empty()).unwrap_or(true) {
        bail!("{bin} listens on {listen} but its /metrics answered nothing");
    }
    Ok(peer)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let (interval, duration) = (args.interval, args.duration);
    if interval < collect::INTERVAL_MIN {
        bail!("--interval {:?} is below the collector's minimum {:?}", interval, collect::INTERVAL_MIN);
    }
    let report =
        measure(interval, duration, (args.peer != "none").then_some((args.peer.as_str(), args.peer_listen.as_str())))?;
    if report.kansoku_collector.rounds == 0 {
        bail!("no round was measured: --duration {duration:?} holds no --interval {interval:?}");
    }
    print(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

pub fn measure(interval: Duration, duration: Duration, peer: Option<(&str, &str)>) -> anyhow::Result<Report> {
    let iv = interval.as_nanos() as i64;
    let peer = peer.map(|(bin, listen)| start_peer(bin, listen).map(|p| (p, listen.to_owned()))).transpose()?;
    let data = std::env::temp_dir().join(format!("kansoku-lab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let store = store::Store::open(&data, store::Options::default())?;
    eprintln!("measuring {duration:?} at {interval:?} on {} ...", crate::machine_line());

    let start = next_boundary(realtime_ns(), 1_000_000_000) + 1_000_000_000;
    let end = start + duration.as_nanos() as i64;
    let never_flag = AtomicBool::new(false);
    let never = &never_flag;
    let (tx, rx) = sync_channel::<Batch>(1024);

    let (collector_side, lateness, store_side, peer_side) = std::thread::scope(|s| {
        let collector = s.spawn(|| {
            let mut c = Collector::new(&CollectorConfig { interval, host: "lab".into(), root: "/".into() });
            sleep_to(start - iv, never);
            c.collect_round(Timestamp(start - iv), 0); // declare series outside the measurement
            let (mut rounds, mut missed, mut samples) = (0u64, 0u64, 0u64);
            let mut lateness = Vec::new();
            let cpu0 = thread_cpu_ns();
            let mut next = start;
            while next < end {
                sleep_to(next, never);
                let late = realtime_ns() - next;
                let b = c.collect_round(Timestamp(next), late);
                samples += b.points.len() as u64;
                rounds += 1;
                lateness.push(late);
                let _ = tx.try_send(b);
                let (n, m) = after_round(next, realtime_ns(), iv);
                missed += m;
                next = n;
            }
            drop(tx);
            let cpu = (thread_cpu_ns() - cpu0) as f64 / 1e9;
            (side("kansoku collector", rounds, missed, cpu, samples, interval), lateness)
        });
        let writer = s.spawn(|| {
            let mut app = store::Appender::default();
            let mut first = true;
            let (mut rounds, mut samples, mut cpu) = (0u64, 0u64, 0i64);
            for b in rx {
                let c0 = thread_cpu_ns();
                let ok = store.append(&mut app, &b).is_ok();
                if !first && ok {
                    cpu += thread_cpu_ns() - c0;
                    rounds += 1;
                    samples += b.points.len() as u64;
                }
                first = false;
            }
            side("kansoku store append (fsync always)", rounds, 0, cpu as f64 / 1e9, samples, interval)
        });
        let scraper = peer.as_ref().map(|(p, listen)| {
            let pid = p.child.id();
            s.spawn(move || -> anyhow::Result<(Side, f64)> {
                sleep_to(start - iv, never);
                let stat = format!("/proc/{pid}/stat");
                let peer0 = stat_cpu_seconds(&stat)?;
                let cpu0 = thread_cpu_ns();
                let (mut rounds, mut missed, mut samples) = (0u64, 0u64, 0u64);
                let mut next = start;
                while next < end {
                    sleep_to(next, never);
                    let body = scrape(listen)?;
                    samples += body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count() as u64;
                    rounds += 1;
                    let (n, m) = after_round(next, realtime_ns(), iv);
                    missed += m;
                    next = n;
                }
                let scraper_cpu = (thread_cpu_ns() - cpu0) as f64 / 1e9;
                let peer1 = stat_cpu_seconds(&stat)?;
                Ok((
                    side("node_exporter", rounds, missed, peer1 - peer0, samples, interval),
                    scraper_cpu / rounds.max(1) as f64 * 1e6,
                ))
            })
        });
        let (c, lat) = collector.join().expect("collector thread");
        let w = writer.join().expect("writer thread");
        let p = scraper.map(|h| h.join().expect("scraper thread"));
        (c, lat, w, p)
    });
    drop(store);
    let _ = std::fs::remove_dir_all(&data);
    let peer_side = peer_side.transpose()?;
    let mut lat = lateness;
    lat.sort_unstable();
    let pct = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0) as f64 / 1e3;
    Ok(Report {
        interval_ms: interval.as_secs_f64() * 1e3,
        duration_s: duration.as_secs_f64(),
        machine: crate::machine_line(),
        kansoku_collector: collector_side,
        kansoku_store_append: store_side,
        peer_scraper_cpu_us_per_round: peer_side.as_ref().map(|p| p.1),
        peer: peer_side.map(|p| p.0),
        lateness_us_p50: pct(0.5),
        lateness_us_p99: pct(0.99),
        lateness_us_max: pct(1.0),
    })
}

fn print(r: &Report) {
    result!("collector cost at {} ms for {} s on {}", r.interval_ms, r.duration_s, r.machine);
    result!(
        "{:<38} {:>7} {:>6} {:>12} {:>8} {:>8} {:>9}",
        "",
        "rounds",
        "missed",
        "CPU us/round",
        "% core",
        "samples",
        "ns/sample"
    );
    let row = |s: &Side| {
        result!(
            "{:<38} {:>7} {:>6} {:>12.1} {:>8.3} {:>8.0} {:>9.1}",
            s.name,
            s.rounds,
            s.missed_rounds,
            s.cpu_us_per_round,
            s.core_percent,
            s.samples_per_round,
            s.ns_per_sample
        );
    };
    row(&r.kansoku_collector);
    row(&r.kansoku_store_append);
    if let Some(p) = &r.peer {
        row(p);
        if let Some(s) = r.peer_scraper_cpu_us_per_round {
            result!("  (scraping node_exporter cost a further {s:.1} us/round in our scraper, not counted above)");
        }
        let k = r.kansoku_collector.cpu_us_per_round.max(1e-9);
        result!(
            "node_exporter / kansoku collector: {:.1}x CPU per round, {:.1}x per sample",
            p.cpu_us_per_round / k,
            p.ns_per_sample / r.kansoku_collector.ns_per_sample.max(1e-9)
        );
    }
    result!(
        "round lateness (jitter): p50 {:.0} us, p99 {:.0} us, max {:.0} us",
        r.lateness_us_p50,
        r.lateness_us_p99,
        r.lateness_us_max
    );
}
