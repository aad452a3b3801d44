//! `kansoku lab snmp`: the glogger paper's experiment (241 nodes x 5 values
//! every 100 ms) at 241, 1,000 and 10,000 targets, beside the paper's
//! baseline (a shell loop of `snmpget` in background processes) and
//! Prometheus' `snmp_exporter` scraped for every target at the same interval,
//! in the same run, against the same agents.
//!
//! The agents are the fake farm (`kansoku lab snmp-farm`) in a child process:
//! thousands of real UDP endpoints on 127.0.0.0/8 answering real SNMP. Each
//! target is asked for sysUpTime.0 plus the paper's five values (interface
//! RX/TX octets, disk used/available, load average).
//!
//! Measured for kansoku: interval completion time (boundary to last answer),
//! answers recorded within their slice, CPU time of the poller thread per
//! interval (`CLOCK_THREAD_CPUTIME_ID`, from the poller's own metric), and
//! CPU time of the store writer thread appending every answer to a temporary
//! data directory (WAL, head, blocks) — the paper's "with writing". The
//! WAL is fsynced as `kansoku snmp` does by default (once a second, `--fsync`).
//!
//! The `floor` row is what this machine's kernel charges before any poller
//! work: the poller's sockets send the same requests and read every answer
//! the same way, and nothing is decoded or stored (`Poller::floor_once`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use anyhow::{Context, bail};
use clock::schedule::next_boundary;
use clock::{monotonic_ns, realtime_ns, thread_cpu_ns};
use model::Batch;
use snmp::farm;
use snmp::targets::{OidSet, TargetSpec};
use snmp::{Poller, PollerConfig, Version, mib};

use crate::collector_cost::{sleep_to, spawn_ready};
use crate::machine_line as machine;
use crate::out::result;
use crate::procs::stat_cpu_seconds;

const OIDS: [&str; 6] = ["sysUpTime.0", "ifHCInOctets.2", "ifHCOutOctets.2", "dskUsed.1", "dskAvail.1", "laLoad.1"];

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Target counts to measure, comma-separated.
    #[arg(long, default_value = "241,1000,10000", value_delimiter = ',')]
    targets: Vec<usize>,
    /// Polling interval.
    #[arg(long, default_value = "100ms", value_parser = model::parse_duration)]
    interval: Duration,
    /// How long to measure each side at each count.
    #[arg(long, default_value = "10s", value_parser = model::parse_duration)]
    duration: Duration,
    /// Peers to measure beside kansoku: floor (the same datagrams sent and
    /// read, nothing decoded or stored), snmpget, snmp_exporter, or none.
    #[arg(long, default_value = "floor,snmpget,snmp_exporter", value_delimiter = ',')]
    peers: Vec<String>,
    /// Largest count the snmpget loop is run at (it forks one process per
    /// target per interval).
    #[arg(long, default_value_t = 241)]
    snmpget_max: usize,
    /// First farm address; endpoints take consecutive addresses.
    #[arg(long, default_value = "127.1.0.1")]
    first: Ipv4Addr,
    #[arg(long, default_value_t = 1161)]
    port: u16,
    /// Threads answering in the farm process.
    #[arg(long, default_value_t = 1)]
    farm_threads: usize,
    /// WAL fsync policy of the store kansoku's answers are written to:
    /// always, never or a duration. The default is what `kansoku snmp` and
    /// `kansoku up` do with their own samples (`--local-fsync 1s`); `always`
    /// adds an fsync every interval.
    #[arg(long, default_value = "1s")]
    fsync: store::FsyncPolicy,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct FarmArgs {
    /// Number of endpoints.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// First address; endpoints take consecutive addresses (skipping .0 and .255).
    #[arg(long, default_value = "127.1.0.1")]
    first: Ipv4Addr,
    #[arg(long, default_value_t = 1161)]
    port: u16,
    /// Threads answering.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Give every tenth endpoint a fault (silent, late, duplicate, wrong id,
    /// truncated, counter wrap, restarts, stale values, ...).
    #[arg(long)]
    faults: bool,
}

/// Serves a farm until stdin closes (or the process is killed).
pub fn run_farm(args: &FarmArgs) -> anyhow::Result<()> {
    let mix = [
        farm::Fault::Silent,
        farm::Fault::DropEvery(3),
        farm::Fault::Late(Duration::from_millis(150)),
        farm::Fault::Duplicate,
        farm::Fault::WrongRequestId,
        farm::Fault::Truncated,
        farm::Fault::Counter32Wrap,
        farm::Fault::Counter64Huge,
        farm::Fault::RestartEvery(50),
        farm::Fault::Stale(30),
        farm::Fault::NoSuchInstance,
    ];
    let endpoints: Vec<_> = farm::ips(args.first, args.count)
        .into_iter()
        .enumerate()
        .map(|(i, a)| (a, if args.faults && i % 10 == 9 { mix[(i / 10) % mix.len()] } else { farm::Fault::None }))
        .collect();
    let f = farm::Farm::start(args.port, endpoints, args.threads).context("start the farm")?;
    eprintln!(
        "snmp-farm: serving {} endpoints from {} to {}; close stdin to stop",
        f.addrs.len(),
        f.addrs[0],
        f.addrs[f.addrs.len() - 1]
    );
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}

fn raise_fd_limit(want: usize) -> anyhow::Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|c| (c as usize) < want) {
        lim.current = Some(lim.maximum.map_or(want as u64, |m| m.min(want as u64)));
        setrlimit(Resource::Nofile, lim).context("raise the open-file limit")?;
    }
    let now = getrlimit(Resource::Nofile).current;
    if now.is_some_and(|c| (c as usize) < want) {
        bail!("need {want} open files, the hard limit allows {now:?}; raise it with ulimit -n");
    }
    Ok(())
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Kansoku {
    pub intervals: usize,
    pub recorded_percent: f64,
    pub complete_ms_p50: f64,
    pub complete_ms_p99: f64,
    pub complete_ms_max: f64,
    pub poller_cpu_ms_mean: f64,
    pub poller_cpu_ms_p99: f64,
    pub writer_cpu_ms_mean: f64,
    pub samples_per_interval: f64,
    pub late: u64,
    pub kernel_drops: u64,
    pub missed_intervals: u64,
    pub farm_core_percent: f64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Peer {
    pub name: String,
    /// Answers (or successful scrapes) that arrived within their interval,
    /// of targets x intervals at the requested rate.
    pub recorded_percent: f64,
    /// Mean time for one round of every target.
    pub round_ms: f64,
    pub cpu_ms_per_interval: f64,
    pub note: String,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Row {
    pub targets: usize,
    pub kansoku: Kansoku,
    pub peers: Vec<Peer>,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub interval_ms: f64,
    pub duration_s: f64,
    pub oids_per_target: usize,
    /// The store writer's WAL fsync policy (`--fsync`).
    pub fsync: String,
    pub machine: String,
    pub rows: Vec<Row>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let (interval, duration) = (args.interval, args.duration);
    if args.targets.is_empty() {
        bail!("--targets: no target count to measure");
    }
    for p in &args.peers {
        if !["floor", "snmpget", "snmp_exporter", "none"].contains(&p.as_str()) {
            bail!("--peers {p:?}: use floor, snmpget, snmp_exporter or none");
        }
    }
    let max = args.targets.iter().copied().max().unwrap_or(0);
    raise_fd_limit(max + 256)?;
    let mut report = Report {
        interval_ms: interval.as_secs_f64() * 1e3,
        duration_s: duration.as_secs_f64(),
        oids_per_target: OIDS.len(),
        fsync: format!("{:?}", args.fsync),
        machine: machine(),
        rows: Vec::new(),
    };
    for &k in &args.targets {
        eprintln!("snmp: {k} targets: starting the farm");
        let exe = std::env::current_exe().context("find our own executable")?;
        let mut cmd = Command::new(exe);
        cmd.args(["lab", "snmp-farm", "--count", &k.to_string(), "--first", &args.first.to_string()])
            .args(["--port", &args.port.to_string(), "--threads", &args.farm_threads.to_string()])
            .stdin(Stdio::piped());
        let farm_proc = spawn_ready(cmd, "snmp-farm: serving", "the SNMP farm")?;
        let farm_stat = format!("/proc/{}/stat", farm_proc.child.id());
        let addrs: Vec<SocketAddr> =
            farm::ips(args.first, k).into_iter().map(|ip| SocketAddr::new(ip.into(), args.port)).collect();

        eprintln!("snmp: {k} targets: kansoku for {duration:?}");
        let farm0 = stat_cpu_seconds(&farm_stat)?;
        let mut kansoku = measure_kansoku(&addrs, interval, duration, args.fsync)?;
        if kansoku.intervals == 0 {
            bail!("snmp: {k} targets: no interval measured in --duration {duration:?} (the first two warm up)");
        }
        kansoku.farm_core_percent = (stat_cpu_seconds(&farm_stat)? - farm0) / duration.as_secs_f64() * 100.0;
        let mut row = Row { targets: k, kansoku, peers: Vec::new() };
        if args.peers.iter().any(|p| p == "floor") {
            eprintln!("snmp: {k} targets: the floor (send and receive only) for {duration:?}");
            row.peers.push(measure_floor(&addrs, interval, duration)?);
        }
        if args.peers.iter().any(|p| p == "snmpget") && k <= args.snmpget_max {
            eprintln!("snmp: {k} targets: snmpget loop for {duration:?}");
            row.peers.push(measure_snmpget(&addrs, interval, duration)?);
        }
        if args.peers.iter().any(|p| p == "snmp_exporter") {
            eprintln!("snmp: {k} targets: snmp_exporter for {duration:?}");
            row.peers.push(measure_exporter(&addrs, interval, duration)?);
        }
        drop(farm_proc);
        print_row(&row);
        report.rows.push(row);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
        result!("wrote {}", path.display());
    }
    Ok(())
}

fn specs(addrs: &[SocketAddr]) -> Vec<TargetSpec> {
    let oids: Vec<_> = OIDS.iter().map(|o| mib::parse_instance(o).expect("BUG: known OIDs")).collect();
    addrs
        .iter()
        .map(|a| TargetSpec {
            address: *a,
            name: a.to_string(),
            version: Version::V2c,
            community: "public".into(),
            oids: OidSet::List(oids.clone()),
            labels: vec![],
        })
        .collect()
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn measure_kansoku(
    addrs: &[SocketAddr],
    interval: Duration,
    duration: Duration,
    fsync: store::FsyncPolicy,
) -> anyhow::Result<Kansoku> {
    let (plan, _) = snmp::plan(specs(addrs), Duration::from_secs(1), 0);
    let mut poller = Poller::new(PollerConfig::new(interval), plan).context("open SNMP sockets")?;
    let stats = poller.stats();
    let dir = tempfile::tempdir()?;
    let store = store::Store::open(dir.path(), store::Options::default())?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = sync_channel::<Batch>(256);
    let poll_thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || node::rounds::run(&mut poller, &tx, &stop))
    };
    let writer = std::thread::spawn(move || -> anyhow::Result<_> {
        let mut appender = store::Appender::with_fsync(fsync);
        let mut names: std::collections::HashMap<u32, String> = Default::default();
        let (mut cpu, mut complete, mut answered) = (Vec::new(), Vec::new(), Vec::new());
        let (mut samples, mut batches, mut writer_ns) = (0usize, 0usize, 0i64);
        for (i, b) in rx.iter().enumerate() {
            for (id, k) in &b.defs {
                names.insert(*id, k.name().to_owned());
            }
            // The first two intervals warm up (first sends, page faults).
            if i >= 2 {
                for (id, v) in &b.points {
                    match names.get(id).map(String::as_str) {
                        Some("kansoku_snmp_round_cpu_seconds") => cpu.push(v * 1e3),
                        Some("kansoku_snmp_complete_seconds") => complete.push(v * 1e3),
                        Some("kansoku_snmp_answered") => answered.push(*v),
                        _ => {}
                    }
                }
                samples += b.points.len();
                batches += 1;
            }
            let t0 = thread_cpu_ns();
            store.append(&mut appender, &b)?;
            if i >= 2 {
                writer_ns += thread_cpu_ns() - t0;
            }
        }
        store.close()?;
        Ok((cpu, complete, answered, samples, batches, writer_ns))
    });
    std::thread::sleep(duration + 2 * interval);
    stop.store(true, Ordering::Relaxed);
    poll_thread.join().map_err(|_| anyhow::anyhow!("poller panicked"))?;
    let (mut cpu, mut complete, answered, samples, batches, writer_ns) =
        writer.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
    let n = batches.max(1) as f64;
    Ok(Kansoku {
        intervals: batches,
        recorded_percent: answered.iter().sum::<f64>() / (addrs.len() as f64 * n) * 100.0,
        complete_ms_p50: percentile(&mut complete, 0.5),
        complete_ms_p99: percentile(&mut complete, 0.99),
        complete_ms_max: percentile(&mut complete, 1.0),
        poller_cpu_ms_mean: cpu.iter().sum::<f64>() / n,
        poller_cpu_ms_p99: percentile(&mut cpu, 0.99),
        writer_cpu_ms_mean: writer_ns as f64 / 1e6 / n,
        samples_per_interval: samples as f64 / n,
        late: stats.late.load(Ordering::Relaxed),
        kernel_drops: stats.kernel_drops.load(Ordering::Relaxed),
        missed_intervals: stats.missed_intervals.load(Ordering::Relaxed),
        farm_core_percent: 0.0,
    })
}

/// The kernel's part alone: the poller's sockets send every request and read
/// every answer each interval, nothing decoded or stored. Its CPU is the
/// thread's own clock over the send and the reads, as the poller's figure.
fn measure_floor(addrs: &[SocketAddr], interval: Duration, duration: Duration) -> anyhow::Result<Peer> {
    let (plan, _) = snmp::plan(specs(addrs), Duration::from_secs(1), 0);
    let mut poller = Poller::new(PollerConfig::new(interval), plan).context("open SNMP sockets")?;
    let iv = interval.as_nanos() as i64;
    let rounds = (duration.as_nanos() as i64 / iv).max(1) as usize + 2;
    let (mut cpu, mut got) = (Vec::with_capacity(rounds), 0usize);
    let mut done = 0;
    clock::schedule::every(iv, &AtomicBool::new(false), &AtomicU64::new(0), |t| {
        let (n, ns) = poller.floor_once(t);
        // The first two intervals warm up, as for the poller.
        if done >= 2 {
            cpu.push(ns as f64 / 1e6);
            got += n;
        }
        done += 1;
        done < rounds
    });
    let n = cpu.len().max(1) as f64;
    let mean = cpu.iter().sum::<f64>() / n;
    Ok(Peer {
        name: "floor".into(),
        recorded_percent: got as f64 / (addrs.len() as f64 * n) * 100.0,
        round_ms: f64::NAN,
        cpu_ms_per_interval: mean,
        note: format!(
            "the same datagrams sent and read, nothing decoded or stored; p99 {:.2} ms",
            percentile(&mut cpu, 0.99)
        ),
    })
}

/// The paper's baseline: every round, one `snmpget` per target in the
/// background, then `wait`; as many rounds as fit in the duration.
fn measure_snmpget(addrs: &[SocketAddr], interval: Duration, duration: Duration) -> anyhow::Result<Peer> {
    let oids: Vec<String> = OIDS.iter().map(|o| mib::parse_instance(o).expect("BUG").to_string()).collect();
    let targets: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let timeout = interval.as_secs_f64() * 0.9;
    let script = format!(
        "end=$((SECONDS+{secs})); rounds=0\n\
         while [ $SECONDS -lt $end ]; do\n\
           for t in {targets}; do (snmpget -v2c -c public -m '' -t {timeout} -r 0 -Oqv $t {oids} >/dev/null 2>&1 && echo) & done\n\
           wait; rounds=$((rounds+1))\n\
         done\n\
         echo rounds $rounds >&2; times >&2\n",
        secs = duration.as_secs().max(1),
        targets = targets.join(" "),
        oids = oids.join(" "),
    );
    let out = Command::new("bash").arg("-c").arg(script).stdin(Stdio::null()).output().context("run bash")?;
    let ok = out.stdout.iter().filter(|&&b| b == b'\n').count();
    let err = String::from_utf8_lossy(&out.stderr);
    let rounds: f64 = err
        .lines()
        .find_map(|l| l.strip_prefix("rounds "))
        .and_then(|r| r.trim().parse().ok())
        .context("snmpget loop: no round count (is snmp installed?)")?;
    // `times`: second line is the children's user and system time.
    let child_cpu: f64 = err
        .lines()
        .filter(|l| l.contains('m') && l.ends_with('s'))
        .nth(1)
        .map(|l| l.split_whitespace().filter_map(parse_bash_time).sum())
        .unwrap_or(f64::NAN);
    let wanted_intervals = duration.as_secs().max(1) as f64 / interval.as_secs_f64();
    Ok(Peer {
        name: "snmpget loop".into(),
        recorded_percent: ok as f64 / (addrs.len() as f64 * wanted_intervals) * 100.0,
        round_ms: duration.as_secs().max(1) as f64 * 1e3 / rounds.max(1.0),
        cpu_ms_per_interval: child_cpu * 1e3 / wanted_intervals,
        note: format!("{rounds} rounds in {} s", duration.as_secs().max(1)),
    })
}

fn parse_bash_time(s: &str) -> Option<f64> {
    let (m, rest) = s.split_once('m')?;
    Some(m.parse::<f64>().ok()? * 60.0 + rest.strip_suffix('s')?.parse::<f64>().ok()?)
}

const EXPORTER_LISTEN: &str = "127.0.0.1:19116";

fn exporter_config(interval: Duration) -> String {
    let oids: Vec<String> = OIDS.iter().map(|o| mib::parse_instance(o).expect("BUG").to_string()).collect();
    let mut s = format!(
        "kansoku:\n  version: 2\n  auth:\n    community: public\n  retries: 0\n  timeout: {}ms\n  get:\n",
        (interval.as_millis() * 9 / 10).max(1)
    );
    for o in &oids {
        s.push_str(&format!("    - {o}\n"));
    }
    s.push_str("  metrics:\n");
    let metric = |name: &str, oid: &str, ty: &str, index: Option<&str>| {
        let mut m = format!("    - name: {name}\n      oid: {oid}\n      type: {ty}\n      help: {name}\n");
        if let Some(i) = index {
            m.push_str(&format!("      indexes:\n        - labelname: {i}\n          type: gauge\n"));
        }
        m
    };
    s.push_str(&metric("sysUpTime", "1.3.6.1.2.1.1.3", "gauge", None));
    s.push_str(&metric("ifHCInOctets", "1.3.6.1.2.1.31.1.1.1.6", "counter", Some("ifIndex")));
    s.push_str(&metric("ifHCOutOctets", "1.3.6.1.2.1.31.1.1.1.10", "counter", Some("ifIndex")));
    s.push_str(&metric("dskUsed", "1.3.6.1.4.1.2021.9.1.8", "gauge", Some("dskIndex")));
    s.push_str(&metric("dskAvail", "1.3.6.1.4.1.2021.9.1.7", "gauge", Some("dskIndex")));
    s.push_str(&metric("laLoad", "1.3.6.1.4.1.2021.10.1.3", "DisplayString", Some("laIndex")));
    s
}

/// One scrape of the exporter for `target`; true if it returned sysUpTime.
fn scrape_exporter(target: &str, timeout: Duration) -> bool {
    let go = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect(EXPORTER_LISTEN)?;
        s.set_read_timeout(Some(timeout))?;
        write!(s, "GET /snmp?module=kansoku&target={target} HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        Ok(body.starts_with("HTTP/1.0 200") && body.contains("\nsysUpTime "))
    };
    go().unwrap_or(false)
}

/// snmp_exporter scraped for every target each interval by a pool of
/// threads, as Prometheus would; a scrape counts if it succeeds before the
/// next boundary.
fn measure_exporter(addrs: &[SocketAddr], interval: Duration, duration: Duration) -> anyhow::Result<Peer> {
    let dir = tempfile::tempdir()?;
    let conf = dir.path().join("snmp.yml");
    std::fs::write(&conf, exporter_config(interval))?;
    drop(std::net::TcpListener::bind(EXPORTER_LISTEN).with_context(|| format!("{EXPORTER_LISTEN} is in use"))?);
    let mut cmd = Command::new("prometheus-snmp-exporter");
    cmd.arg(format!("--config.file={}", conf.display())).arg(format!("--web.listen-address={EXPORTER_LISTEN}"));
    let peer = spawn_ready(cmd, "Listening on", "prometheus-snmp-exporter (Debian package prometheus-snmp-exporter)")?;
    let stat = format!("/proc/{}/stat", peer.child.id());
    if !scrape_exporter(&addrs[0].to_string(), Duration::from_secs(2)) {
        bail!("snmp_exporter answers no scrape of {}: check its configuration", addrs[0]);
    }
    let workers = addrs.len().min(128);
    let interval_ns = interval.as_nanos() as i64;
    let start = next_boundary(realtime_ns() + 200_000_000, interval_ns);
    let n_intervals = (duration.as_nanos() as i64 / interval_ns).max(1);
    let ok = Arc::new(AtomicU64::new(0));
    let round_ns = Arc::new(AtomicU64::new(0));
    let cpu0 = stat_cpu_seconds(&stat)?;
    let targets: Arc<Vec<String>> = Arc::new(addrs.iter().map(|a| a.to_string()).collect());
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (ok, round_ns, targets) = (Arc::clone(&ok), Arc::clone(&round_ns), Arc::clone(&targets));
            std::thread::spawn(move || {
                let stop = AtomicBool::new(false);
                let mut k = 0;
                while k < n_intervals {
                    let boundary = start + k * interval_ns;
                    sleep_to(boundary, &stop);
                    let t0 = monotonic_ns();
                    for t in targets.iter().skip(w).step_by(workers) {
                        let left = boundary + interval_ns - realtime_ns();
                        if left <= 0 {
                            break;
                        }
                        if scrape_exporter(t, Duration::from_nanos(left as u64))
                            && realtime_ns() < boundary + interval_ns
                        {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    round_ns.fetch_max((monotonic_ns() - t0) as u64, Ordering::Relaxed);
                    // An overrun skips to the next boundary ahead.
                    k = ((realtime_ns() - start) / interval_ns + 1).max(k + 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| anyhow::anyhow!("scraper panicked"))?;
    }
    let cpu = stat_cpu_seconds(&stat)? - cpu0;
    drop(peer);
    let n = n_intervals as f64;
    Ok(Peer {
        name: "snmp_exporter".into(),
        recorded_percent: ok.load(Ordering::Relaxed) as f64 / (addrs.len() as f64 * n) * 100.0,
        round_ms: round_ns.load(Ordering::Relaxed) as f64 / 1e6,
        cpu_ms_per_interval: cpu * 1e3 / n,
        note: format!("{workers} scraper threads; round_ms is the slowest worker's longest round"),
    })
}

fn print_row(r: &Row) {
    let k = &r.kansoku;
    result!(
        "{:>6} targets  kansoku: {:6.2} % recorded, complete p50 {:.1} ms p99 {:.1} ms, poller CPU {:.2} ms/interval \
         (p99 {:.2}), store writer {:.2} ms/interval, {:.0} samples/interval, late {}, kernel drops {}",
        r.targets,
        k.recorded_percent,
        k.complete_ms_p50,
        k.complete_ms_p99,
        k.poller_cpu_ms_mean,
        k.poller_cpu_ms_p99,
        k.writer_cpu_ms_mean,
        k.samples_per_interval,
        k.late,
        k.kernel_drops
    );
    for p in &r.peers {
        let round = if p.round_ms.is_nan() { String::new() } else { format!(", round {:.1} ms", p.round_ms) };
        result!(
            "{:>6}          {}: {:6.2} % recorded{round}, CPU {:.2} ms/interval ({})",
            "",
            p.name,
            p.recorded_percent,
            p.cpu_ms_per_interval,
            p.note
        );
    }
}
