//! `kansoku lab up-cost`: what a user's `top` sees. The whole `kansoku up`
//! process (collector, store and WAL fsyncs, kernel tracer, API idle) beside
//! the peers a user would run instead, all at the same interval in the same
//! time window: Performance Co-Pilot (pmcd with its PMDAs, and pmlogger
//! writing an archive), collectd (the same plugins, writing CSV) and
//! node_exporter (the same collectors, scraped; the scraper's own cost is
//! not charged to it). Each side's CPU is the sum of its processes' CPU
//! clocks (`clock_getcpuclockid`: nanoseconds, every thread, alive or
//! exited), not `/proc` ticks; its memory the sum of their resident sets.
//! Several `kansoku up` variants (e.g. fsync policies) can run side by side.
//! The `floor` side is what any collector of the same data pays here: a
//! process that wakes on the same boundaries and reads the same procfs and
//! sysfs files, and does nothing else (`kansoku lab read-floor`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clock::schedule::{after_round, next_boundary};
use clock::{realtime_ns, thread_cpu_ns};
use model::Timestamp;

use crate::collector_cost::{Peer, sleep_to, spawn_ready};
use crate::out::result;
use crate::procs::{process_cpu_seconds, process_tree, rss_bytes, stat_cpu_seconds};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Sampling interval of every side (kansoku's collector, pmlogger,
    /// collectd, the node_exporter scrape).
    #[arg(long, default_value = "100ms", value_parser = model::parse_duration)]
    interval: Duration,
    /// How long to measure, after every side is up and has settled.
    #[arg(long, default_value = "60s", value_parser = model::parse_duration)]
    duration: Duration,
    /// A `kansoku up` to measure, as NAME=EXTRA-ARGUMENTS (e.g.
    /// `fsync-1s=--fsync 1s`); repeat to run several side by side. Arguments
    /// starting with `@PATH` run that kansoku binary instead of this one (a
    /// build to compare against in the same window, e.g.
    /// `before=@/tmp/kansoku-old --trace off`). Default: one with up's
    /// defaults.
    #[arg(long = "variant")]
    variants: Vec<String>,
    /// Peers to run in the same window: floor (the collector's files read
    /// and nothing else), pcp, collectd, node_exporter (or none); for
    /// `--processes`: pidstat, pcp-proc (PCP's proc PMDA logged),
    /// netdata-apps (Netdata's apps.plugin), which take whole seconds.
    #[arg(long, value_delimiter = ',', default_value = "floor,pcp,collectd,node_exporter")]
    peers: Vec<String>,
    /// Idle processes (sleep) to keep alive through the window, so the
    /// per-process collectors have that many more to read.
    #[arg(long, default_value_t = 0)]
    idle_processes: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One side's cost over the window.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cost {
    pub name: String,
    /// What ran: the command lines of its processes at the end.
    pub processes: Vec<String>,
    pub cpu_seconds: f64,
    /// CPU time as a share of one core over the window (what `top` shows).
    pub core_percent: f64,
    /// CPU time per interval.
    pub cpu_us_per_interval: f64,
    /// Sum of the processes' resident sets at the end (kB).
    pub rss_kb: u64,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub interval_ms: f64,
    pub duration_s: f64,
    pub machine: String,
    pub sides: Vec<Cost>,
    /// Where the first kansoku variant's CPU went, by thread name (from
    /// `/proc` ticks: 10 ms resolution, so only a rough split).
    pub kansoku_threads_percent: BTreeMap<String, f64>,
    /// The collector's round in a tight loop on this process's thread.
    pub hot: Hot,
}

/// One collector round's work repeated in a tight loop, caches warm: what
/// the same code costs when it does not sleep an interval between rounds
/// (µs of this thread's CPU a round). Beside the sides' figures it shows how
/// much of a round at 100 ms is the wake-up and cold caches.
#[derive(Debug, serde::Serialize)]
pub struct Hot {
    pub rounds: usize,
    /// The files read, nothing else (the floor's work).
    pub read_us: f64,
    /// A whole round: the files read, parsed and emitted as a batch.
    pub collect_us: f64,
    /// Storing a round's batch (WAL write, head), as `kansoku up` does inline.
    pub store_us: f64,
    pub values_per_round: usize,
}

fn hot(interval: Duration, rounds: usize) -> anyhow::Result<Hot> {
    let cfg = collect::CollectorConfig { interval, host: "hot".into(), root: "/".into() };
    let mut collector = collect::Collector::new(&cfg);
    let dir = tempfile::Builder::new().prefix("kansoku-up-cost-hot-").tempdir()?;
    let store = store::Store::open(dir.path(), store::Options::default())?;
    let mut appender = store::Appender::with_fsync(store::FsyncPolicy::Never);
    let iv = interval.as_nanos() as i64;
    let t0 = next_boundary(realtime_ns(), iv);
    let at = |i: usize| Timestamp(t0 + i as i64 * iv);
    // Warm up: series declared, buffers grown.
    for i in 0..rounds / 10 {
        store.append(&mut appender, &collector.collect_round(at(i), 0))?;
    }
    let per = |ns: i64| ns as f64 / rounds as f64 / 1e3;
    let c0 = thread_cpu_ns();
    for _ in 0..rounds {
        collector.read_round().context("read the collector's files")?;
    }
    let c1 = thread_cpu_ns();
    let batches: Vec<_> = (rounds..2 * rounds).map(|i| collector.collect_round(at(i), 0)).collect();
    let c2 = thread_cpu_ns();
    for b in &batches {
        store.try_append(&mut appender, b)?.context("BUG: the store's writer is busy with no other user")?;
    }
    let c3 = thread_cpu_ns();
    store.close()?;
    Ok(Hot {
        rounds,
        read_us: per(c1 - c0),
        collect_us: per(c2 - c1),
        store_us: per(c3 - c2),
        values_per_round: batches.iter().map(|b| b.points.len()).sum::<usize>() / rounds,
    })
}

/// A side under measurement: its root processes (their descendants count too).
struct Side {
    name: String,
    roots: Vec<u32>,
    _running: Vec<Peer>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let (interval, duration) = (args.interval, args.duration);
    if duration.is_zero() {
        bail!("--duration 0: nothing would be measured");
    }
    let dir = tempfile::Builder::new().prefix("kansoku-up-cost-").tempdir()?;
    let variants: Vec<Variant> = if args.variants.is_empty() {
        vec![Variant { name: "kansoku up".into(), exe: None, args: Vec::new() }]
    } else {
        args.variants.iter().map(|v| parse_variant(v)).collect::<anyhow::Result<_>>()?
    };
    eprintln!(
        "starting {} kansoku variant(s) and peers {:?} on {} ...",
        variants.len(),
        args.peers,
        crate::machine_line()
    );
    let _idle = Idle::spawn(args.idle_processes)?;
    // Before any side starts, so neither disturbs the other.
    let hot = hot(interval, 2000)?;
    let mut sides = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        sides.push(start_kansoku(v, interval, &dir.path().join(format!("kansoku-{i}")))?);
    }
    let mut scrape = None;
    for p in args.peers.iter().filter(|p| p.as_str() != "none") {
        match p.as_str() {
            "floor" => {
                let mut cmd = Command::new(std::env::current_exe().context("find this kansoku binary")?);
                cmd.args(["lab", "read-floor", "--interval"]).arg(format!("{}ms", interval.as_millis()));
                let peer = spawn_ready(cmd, "reading", "kansoku lab read-floor")?;
                sides.push(Side {
                    name: "floor: the same files read".into(),
                    roots: vec![peer.child.id()],
                    _running: vec![peer],
                });
            }
            "pcp" => sides.push(start_pcp(interval, &dir.path().join("pcp"), HOST_METRICS, "PCP pmcd + pmlogger")?),
            "pcp-proc" => sides.push(start_pcp(
                interval,
                &dir.path().join("pcp-proc"),
                PROC_METRICS,
                "PCP pmcd + pmlogger, proc.*",
            )?),
            "pidstat" => {
                let mut cmd = Command::new("pidstat");
                cmd.args(["-p", "ALL", "-u", "-r", "-d", "-w", "-h", &whole_seconds(interval)?]);
                let peer = spawn_quiet(cmd, "pidstat (apt-get install sysstat)")?;
                sides.push(Side {
                    name: "pidstat -p ALL -urdw".into(),
                    roots: vec![peer.child.id()],
                    _running: vec![peer],
                });
            }
            "netdata-apps" => {
                let mut cmd = Command::new("/usr/lib/netdata/plugins.d/apps.plugin");
                // It exits when its stdin (netdata, normally) closes: a pipe
                // held open by the child handle.
                cmd.arg(whole_seconds(interval)?).stdin(std::process::Stdio::piped());
                let peer = spawn_quiet(cmd, "netdata's apps.plugin (apt-get install netdata-core)")?;
                sides.push(Side {
                    name: "Netdata apps.plugin".into(),
                    roots: vec![peer.child.id()],
                    _running: vec![peer],
                });
            }
            "collectd" => sides.push(start_collectd(interval, &dir.path().join("collectd"))?),
            "node_exporter" => {
                let (side, addr) = start_node_exporter()?;
                sides.push(side);
                scrape = Some(addr);
            }
            other => bail!(
                "unknown peer {other:?}: use floor, pcp, collectd, node_exporter, pidstat, pcp-proc, netdata-apps or none"
            ),
        }
    }
    let report = measure(&sides, interval, duration, scrape.as_deref(), hot)?;
    print(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// `kansoku lab read-floor`: the floor of host collection on this machine.
#[derive(clap::Args, Debug)]
pub struct FloorArgs {
    /// Wake on this interval's wall-clock boundaries, as the collector does.
    #[arg(long, default_value = "100ms", value_parser = model::parse_duration)]
    interval: Duration,
}

/// Wakes on every boundary and reads the files `kansoku up`'s collector reads
/// each round, through the same code (`collect::Collector::read_round`), and
/// nothing else, until killed: what collecting this data costs before any
/// parsing or storing. `lab up-cost` runs it as its `floor` side.
pub fn read_floor(args: &FloorArgs) -> anyhow::Result<()> {
    let interval = args.interval;
    if !(collect::INTERVAL_MIN..=collect::INTERVAL_MAX).contains(&interval) {
        bail!("--interval {interval:?}: must be 10ms to 60s, as for kansoku up");
    }
    let mut collector =
        collect::Collector::new(&collect::CollectorConfig { interval, host: String::new(), root: "/".into() });
    let bytes = collector.read_round().context("read the collector's files")?;
    eprintln!("reading {bytes} bytes of procfs and sysfs every {interval:?} until stopped");
    let mut failed = None;
    clock::schedule::every(interval.as_nanos() as i64, &AtomicBool::new(false), &AtomicU64::new(0), |_| {
        collector.read_round().map_err(|e| failed = Some(e)).is_ok()
    });
    Err(failed.map_or_else(|| anyhow::anyhow!("BUG: the floor's loop ended"), anyhow::Error::from))
        .context("read the collector's files")
}

/// One `kansoku up` to run: its name in the report, the binary (this one
/// unless given) and its extra arguments.
#[derive(Debug, PartialEq)]
struct Variant {
    name: String,
    exe: Option<PathBuf>,
    args: Vec<String>,
}

/// `NAME=ARGS` (ARGS split at spaces, a first `@PATH` the binary), or ARGS
/// alone (named by them).
fn parse_variant(v: &str) -> anyhow::Result<Variant> {
    let (name, args) = v.split_once('=').unwrap_or((v, v));
    let mut args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    let exe = match args.first().and_then(|a| a.strip_prefix('@')) {
        Some(path) => {
            let exe = PathBuf::from(path);
            if !exe.is_file() {
                bail!("variant {v:?}: {} is not a kansoku binary (no such file)", exe.display());
            }
            args.remove(0);
            Some(exe)
        }
        None => None,
    };
    for reserved in ["--data", "--listen", "--interval"] {
        if args.iter().any(|a| a == reserved || a.starts_with(&format!("{reserved}="))) {
            bail!("variant {v:?}: {reserved} is set by lab up-cost");
        }
    }
    Ok(Variant { name: format!("kansoku up {}", name.trim()).trim().to_owned(), exe, args })
}

fn start_kansoku(v: &Variant, interval: Duration, data: &Path) -> anyhow::Result<Side> {
    let exe = match &v.exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe().context("find this kansoku binary")?,
    };
    let name = &v.name;
    let mut cmd = Command::new(exe);
    cmd.arg("up").arg("--data").arg(data).args(["--listen", "127.0.0.1:0", "--interval"]);
    cmd.arg(format!("{}ms", interval.as_millis())).args(&v.args);
    let peer = spawn_ready(cmd, "listening on", name)?;
    Ok(Side { name: name.to_owned(), roots: vec![peer.child.id()], _running: vec![peer] })
}

/// pmcd (its PMDAs as child processes, per Debian's pmcd.conf) on a port of
/// its own, and pmlogger writing the same kinds of metrics kansoku collects
/// into an archive at the interval.
fn start_pcp(interval: Duration, dir: &Path, metrics: &[&str], name: &str) -> anyhow::Result<Side> {
    let pmcd = Path::new("/usr/lib/pcp/bin/pmcd");
    if !pmcd.exists() {
        bail!("PCP is not installed ({} missing): scripts/deps.sh bench, or --peers without pcp", pmcd.display());
    }
    if !Path::new("/var/lib/pcp/pmns/root").exists() {
        // Debian's package builds the namespace when its service first starts.
        let ok = Command::new("/var/lib/pcp/pmns/Rebuild").arg("-u").current_dir("/var/lib/pcp/pmns").status();
        if !matches!(ok, Ok(s) if s.success()) {
            bail!("PCP's metric namespace /var/lib/pcp/pmns/root is missing and Rebuild failed");
        }
    }
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let mut cmd = Command::new(pmcd);
    cmd.args(["-f", "-A", "-i", "127.0.0.1", "-p", &port.to_string(), "-s"]).arg(dir.join("pmcd.sock"));
    cmd.arg("-l").arg(dir.join("pmcd.log")).current_dir(dir);
    let pmcd = spawn_quiet(cmd, "pmcd")?;
    wait_for(&format!("pmcd listening on 127.0.0.1:{port}"), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })?;
    let config = dir.join("pmlogger.config");
    std::fs::write(&config, pmlogger_config(interval, metrics))?;
    let mut cmd = Command::new("pmlogger");
    // Through the unix socket: the proc PMDA serves other processes' values
    // only to a client whose credentials it can check.
    let host = format!("unix:{}", dir.join("pmcd.sock").display());
    cmd.args(["-h", &host, "-c"]).arg(&config).arg("-l").arg(dir.join("pmlogger.log"));
    cmd.arg(dir.join("archive")).current_dir(dir);
    let logger = spawn_quiet(cmd, "pmlogger")?;
    let volume = dir.join("archive.0");
    wait_for("pmlogger's first archive records", || volume.metadata().is_ok_and(|m| m.len() > 4096))?;
    Ok(Side { name: name.into(), roots: vec![pmcd.child.id(), logger.child.id()], _running: vec![pmcd, logger] })
}

/// The metrics kansoku's collector records, as PCP names them.
const HOST_METRICS: &[&str] = &[
    "kernel.percpu.cpu.user",
    "kernel.percpu.cpu.nice",
    "kernel.percpu.cpu.sys",
    "kernel.percpu.cpu.idle",
    "kernel.percpu.cpu.wait.total",
    "kernel.percpu.cpu.irq.soft",
    "kernel.percpu.cpu.irq.hard",
    "kernel.percpu.cpu.steal",
    "mem.util",
    "network.interface.in.bytes",
    "network.interface.in.packets",
    "network.interface.in.errors",
    "network.interface.in.drops",
    "network.interface.out.bytes",
    "network.interface.out.packets",
    "network.interface.out.errors",
    "network.interface.out.drops",
    "disk.dev.read",
    "disk.dev.write",
    "disk.dev.read_bytes",
    "disk.dev.write_bytes",
    "disk.dev.avactive",
    "kernel.all.load",
    "kernel.all.pressure.cpu.some.total",
    "kernel.all.pressure.memory.some.total",
    "kernel.all.pressure.memory.full.total",
    "kernel.all.pressure.io.some.total",
    "kernel.all.pressure.io.full.total",
];

/// What `--processes` records of every process, as PCP's proc PMDA names it.
const PROC_METRICS: &[&str] = &[
    "proc.psinfo.utime",
    "proc.psinfo.stime",
    "proc.psinfo.maj_flt",
    "proc.psinfo.rss",
    "proc.psinfo.threads",
    "proc.psinfo.vctxsw",
    "proc.psinfo.nvctxsw",
    "proc.io.read_bytes",
    "proc.io.write_bytes",
];

fn pmlogger_config(interval: Duration, metrics: &[&str]) -> String {
    format!("log mandatory on {} msec {{\n  {}\n}}\n", interval.as_millis(), metrics.join("\n  "))
}

/// collectd with the plugins that match kansoku's sources, writing CSV.
fn start_collectd(interval: Duration, dir: &Path) -> anyhow::Result<Side> {
    let bin = perf::script::find_program("collectd")
        .or_else(|_| perf::script::find_program("/usr/sbin/collectd"))
        .context("collectd is not installed: scripts/deps.sh bench (collectd-core), or --peers without collectd")?;
    std::fs::create_dir_all(dir.join("csv"))?;
    let conf = dir.join("collectd.conf");
    std::fs::write(&conf, collectd_config(interval, dir))?;
    let mut cmd = Command::new(bin);
    cmd.arg("-f").arg("-C").arg(&conf);
    let peer = spawn_quiet(cmd, "collectd")?;
    let csv = dir.join("csv");
    wait_for("collectd's first CSV files", || std::fs::read_dir(&csv).is_ok_and(|mut d| d.next().is_some()))?;
    Ok(Side { name: "collectd".into(), roots: vec![peer.child.id()], _running: vec![peer] })
}

fn collectd_config(interval: Duration, dir: &Path) -> String {
    let d = dir.display();
    format!(
        "Interval {}\nBaseDir \"{d}\"\nPIDFile \"{d}/collectd.pid\"\nPluginDir \"/usr/lib/collectd\"\n\
         TypesDB \"/usr/share/collectd/types.db\"\n\
         LoadPlugin logfile\n<Plugin logfile>\n  File \"{d}/collectd.log\"\n</Plugin>\n\
         LoadPlugin cpu\n<Plugin cpu>\n  ReportByCpu true\n  ReportByState true\n  ValuesPercentage false\n</Plugin>\n\
         LoadPlugin memory\nLoadPlugin interface\nLoadPlugin disk\nLoadPlugin load\n\
         LoadPlugin csv\n<Plugin csv>\n  DataDir \"{d}/csv\"\n  StoreRates false\n</Plugin>\n",
        interval.as_secs_f64()
    )
}

/// node_exporter with the collectors that match kansoku's sources.
fn start_node_exporter() -> anyhow::Result<(Side, String)> {
    let bin = "/usr/bin/prometheus-node-exporter";
    if !Path::new(bin).exists() {
        bail!("{bin} is not installed: scripts/deps.sh bench, or --peers without node_exporter");
    }
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--web.listen-address={addr}")).arg("--collector.disable-defaults");
    for c in ["cpu", "meminfo", "netdev", "diskstats", "loadavg", "pressure"] {
        cmd.arg(format!("--collector.{c}"));
    }
    let peer = spawn_ready(cmd, "Listening on", "node_exporter")?;
    Ok((Side { name: "node_exporter (scraped)".into(), roots: vec![peer.child.id()], _running: vec![peer] }, addr))
}

/// An interval in whole seconds, for the peers that take no less.
fn whole_seconds(interval: Duration) -> anyhow::Result<String> {
    if interval.subsec_nanos() != 0 || interval.is_zero() {
        bail!("pidstat and apps.plugin take whole seconds: --interval {interval:?}");
    }
    Ok(interval.as_secs().to_string())
}

/// Idle processes kept alive for the measurement, killed on drop.
struct Idle(Vec<std::process::Child>);

impl Idle {
    fn spawn(n: usize) -> anyhow::Result<Idle> {
        let mut kids = Vec::with_capacity(n);
        for _ in 0..n {
            kids.push(Command::new("sleep").arg("100000").spawn().context("start an idle process (sleep)")?);
        }
        if n > 0 {
            eprintln!("{n} idle processes started");
        }
        Ok(Idle(kids))
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

fn spawn_quiet(mut cmd: Command, what: &str) -> anyhow::Result<Peer> {
    use std::process::Stdio;
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().with_context(|| format!("start {what}"))?;
    Ok(Peer { child })
}

/// Polls `ready` every 20 ms for 10 s at most: the peers say nothing on a
/// pipe when they are up, so their files and sockets are watched instead.
fn wait_for(what: &str, ready: impl Fn() -> bool) -> anyhow::Result<()> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > Duration::from_secs(10) {
            bail!("waited 10 s for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let s: Vec<String> =
        raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect();
    let line = s.join(" ");
    if line.len() > 100 { format!("{}...", &line[..line.floor_char_boundary(100)]) } else { line }
}

/// CPU seconds by thread name of one process (`/proc/PID/task/*/stat`:
/// ticks, so only a rough split).
fn thread_cpu(pid: u32) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_owned();
        let Ok(cpu) = stat_cpu_seconds(&e.path().join("stat").to_string_lossy()) else { continue };
        *out.entry(name).or_default() += cpu;
    }
    out
}

fn measure(
    sides: &[Side],
    interval: Duration,
    duration: Duration,
    scrape: Option<&str>,
    hot: Hot,
) -> anyhow::Result<Report> {
    let iv = interval.as_nanos() as i64;
    // Every side has started; the window opens on a boundary three seconds
    // out so start-up work (BPF loading, archive headers) is outside it.
    let start = next_boundary(realtime_ns(), 1_000_000_000) + 3_000_000_000;
    let end = start + duration.as_nanos() as i64;
    let never = AtomicBool::new(false);
    let scraper = scrape.map(|addr| {
        let addr = addr.to_owned();
        let never = &never;
        move || -> anyhow::Result<()> {
            let mut next = start;
            while next < end {
                sleep_to(next, never);
                crate::collector_cost::scrape(&addr).with_context(|| format!("scrape node_exporter at {addr}"))?;
                next = after_round(next, realtime_ns(), iv).0;
            }
            Ok(())
        }
    });
    let (before, after, threads0, threads1) = std::thread::scope(|s| -> anyhow::Result<_> {
        let scraping = scraper.map(|f| s.spawn(f));
        sleep_to(start, &never);
        let trees: Vec<Vec<u32>> = sides.iter().map(|side| process_tree(&side.roots)).collect();
        let before: Vec<Vec<(u32, f64)>> = trees.iter().map(|t| cpu_of(t)).collect();
        let kansoku = sides.first().map(|s| s.roots[0]);
        let threads0 = kansoku.map(thread_cpu).unwrap_or_default();
        sleep_to(end, &never);
        let after: Vec<Vec<(u32, f64)>> = trees.iter().map(|t| cpu_of(t)).collect();
        let threads1 = kansoku.map(thread_cpu).unwrap_or_default();
        if let Some(h) = scraping {
            h.join().expect("scraper thread")?;
        }
        Ok((before, after, threads0, threads1))
    })?;
    let secs = duration.as_secs_f64();
    let rounds = (secs / interval.as_secs_f64()).max(1.0);
    let mut costs = Vec::new();
    for ((side, b), a) in sides.iter().zip(&before).zip(&after) {
        for &(pid, _) in b {
            if !a.iter().any(|&(p, _)| p == pid) {
                bail!("{}: process {pid} ended during the measurement (see its log in the lab's directory)", side.name);
            }
        }
        let cpu: f64 =
            a.iter().filter_map(|&(pid, t1)| b.iter().find(|&&(p, _)| p == pid).map(|&(_, t0)| t1 - t0)).sum();
        costs.push(Cost {
            name: side.name.clone(),
            processes: a.iter().map(|&(pid, _)| cmdline(pid)).collect(),
            cpu_seconds: cpu,
            core_percent: cpu / secs * 100.0,
            cpu_us_per_interval: cpu / rounds * 1e6,
            rss_kb: a.iter().map(|&(pid, _)| rss_bytes(pid) / 1024).sum(),
        });
    }
    let kansoku_threads_percent = threads1
        .iter()
        .map(|(name, &t1)| {
            let t0 = threads0.get(name).copied().unwrap_or(0.0);
            (name.clone(), (t1 - t0).max(0.0) / secs * 100.0)
        })
        .filter(|(_, p)| *p > 0.0)
        .collect();
    Ok(Report {
        interval_ms: interval.as_secs_f64() * 1e3,
        duration_s: secs,
        machine: crate::machine_line(),
        sides: costs,
        kansoku_threads_percent,
        hot,
    })
}

fn cpu_of(pids: &[u32]) -> Vec<(u32, f64)> {
    pids.iter().filter_map(|&p| process_cpu_seconds(p).map(|t| (p, t))).collect()
}

fn print(r: &Report) {
    result!("whole-process cost at {} ms for {} s on {}", r.interval_ms, r.duration_s, r.machine);
    result!("{:<34} {:>6} {:>9} {:>14} {:>9}", "", "procs", "% core", "CPU us/interval", "RSS MB");
    for c in &r.sides {
        result!(
            "{:<34} {:>6} {:>9.3} {:>14.1} {:>9.1}",
            c.name,
            c.processes.len(),
            c.core_percent,
            c.cpu_us_per_interval,
            c.rss_kb as f64 / 1024.0
        );
    }
    if let Some(k) = r.sides.first() {
        for c in &r.sides[1..] {
            result!("{} / {}: {:.2}x CPU", c.name, k.name, c.core_percent / k.core_percent.max(1e-9));
        }
    }
    let h = &r.hot;
    result!(
        "the collector's round in a tight loop here (caches warm, {} rounds): the files read {:.1} us, read, parsed \
         and emitted {:.1} us, stored {:.1} us ({} values)",
        h.rounds,
        h.read_us,
        h.collect_us,
        h.store_us,
        h.values_per_round
    );
    let threads: Vec<String> = r.kansoku_threads_percent.iter().map(|(n, p)| format!("{n} {p:.3}")).collect();
    result!("{} by thread (% core, from 10 ms ticks): {}", r.sides.first().map_or("", |s| &s.name), threads.join(", "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_name_their_arguments_and_keep_the_lab_s_own() {
        let v = parse_variant("fsync-1s=--fsync 1s --trace off").unwrap();
        assert_eq!(
            v,
            Variant {
                name: "kansoku up fsync-1s".into(),
                exe: None,
                args: vec!["--fsync".into(), "1s".into(), "--trace".into(), "off".into()]
            }
        );
        assert_eq!(parse_variant("--trace off").unwrap().args, ["--trace", "off"]);
        assert!(parse_variant("x=--data /tmp/y").unwrap_err().to_string().contains("--data is set by lab up-cost"));
        // Another build, to compare against in the same window.
        let this = std::env::current_exe().unwrap();
        let v = parse_variant(&format!("before=@{} --trace off", this.display())).unwrap();
        assert_eq!(
            (v.exe.as_deref(), v.args.as_slice()),
            (Some(this.as_path()), ["--trace".to_owned(), "off".to_owned()].as_slice())
        );
        let err = parse_variant("before=@/no/such/kansoku").unwrap_err().to_string();
        assert!(err.contains("/no/such/kansoku is not a kansoku binary"), "{err}");
    }

    /// Durations are typed and read by `model::parse_duration` (issue 46:
    /// one vocabulary), defaults included; a bare number is refused.
    #[test]
    fn durations_are_parsed_where_the_flags_are() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |argv: &[&str]| <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args);
        let a = parse(&["up-cost"]).unwrap();
        assert_eq!((a.interval, a.duration), (Duration::from_millis(100), Duration::from_secs(60)));
        let a = parse(&["up-cost", "--interval", "1s", "--duration", "1m30s"]).unwrap();
        assert_eq!((a.interval, a.duration), (Duration::from_secs(1), Duration::from_secs(90)));
        let err = parse(&["up-cost", "--duration", "90"]).err().unwrap().to_string();
        assert!(err.contains("expected a number with a unit"), "{err}");
    }

    #[test]
    fn configs_name_the_interval() {
        assert!(pmlogger_config(Duration::from_millis(100), HOST_METRICS).starts_with("log mandatory on 100 msec {"));
        let c = collectd_config(Duration::from_millis(100), Path::new("/tmp/x"));
        assert!(c.starts_with("Interval 0.1\n"), "{c}");
        assert!(c.contains("DataDir \"/tmp/x/csv\""));
    }
}
