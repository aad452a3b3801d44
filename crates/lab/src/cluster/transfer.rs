//! `kansoku lab transfer`: the cost of moving host metrics from agents to a
//! server (the setting of seeds/000), every figure from real processes:
//! 1. agents: N real `kansoku agent` processes at each interval to one
//!    `kansoku server`; server CPU, agent CPU (total and without the
//!    collector) and wire bytes per sample, from /proc and the server's
//!    counters;
//! 2. capacity: this process plays M agents sending pre-encoded batches as
//!    fast as acknowledgements allow: samples per server CPU-second;
//! 3. line protocol: the samples of (1) as InfluxDB line protocol, POSTed in
//!    5,000-line requests to kansoku's `/write` and to a real `influxd`
//!    (Debian's influxdb), same run: server CPU and bytes per sample.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use model::{Batch, SeriesKey, Timestamp};
use serde_json::json;
use wire::rounds::{self, Codec};
use wire::{Hello, Msg};

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Agent counts to run, comma separated.
    #[arg(long, default_value = "1,5,20", value_delimiter = ',')]
    agents: Vec<usize>,
    /// Sampling intervals, comma separated.
    #[arg(long, default_value = "100ms,10ms", value_delimiter = ',', value_parser = model::parse_duration)]
    intervals: Vec<Duration>,
    /// Measured time per configuration (after all agents are live).
    #[arg(long, default_value = "20s", value_parser = model::parse_duration)]
    duration: Duration,
    /// Simulated agents in the capacity run (0: skip it).
    #[arg(long, default_value_t = 4)]
    blast_agents: usize,
    /// Cores per simulated host in the capacity run.
    #[arg(long, default_value_t = 64)]
    blast_cores: usize,
    /// Compression of the agents' batches (as `kansoku agent --codec`).
    #[arg(long, default_value = "zstd")]
    codec: String,
    /// Skip the line-protocol comparison (needs `influxd` on PATH).
    #[arg(long)]
    no_influx: bool,
    /// Scratch directory (data of servers and agents).
    #[arg(long, default_value = "/tmp/kansoku-lab-transfer")]
    pub dir: PathBuf,
    /// Write the results as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Instead of the above: replay one core-second of per-CPU samples
    /// replicated to each of these core counts (the paper's first
    /// experiment), e.g. 1,2,4,8,14,16,28.
    #[arg(long, value_delimiter = ',')]
    pub cores: Vec<usize>,
    /// How the replayed cores send (with --cores).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "single,per-core,staggered,set")]
    pub mode: Vec<crate::replay::Mode>,
    /// The recording to replay (perf.data or `perf script` text); default:
    /// the committed one (experiments/replay/, carried in the binary: one
    /// core-second of `perf record -e cpu-clock -F 10000 -a` under
    /// stress-ng on this class of machine), so the figure is reproducible.
    #[arg(long, conflicts_with = "record")]
    pub recording: Option<PathBuf>,
    /// Record a fresh core-second now instead (under stress-ng; needs perf
    /// and stress-ng): the figure then depends on what else runs.
    #[arg(long)]
    pub record: bool,
    /// Core-seconds sent per configuration, a second apart (with --cores).
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
}

/// A child process whose stderr is collected.
pub(crate) struct Proc {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Proc {
    pub fn spawn(mut cmd: Command) -> anyhow::Result<Proc> {
        let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().context("spawn")?;
        let log = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&log);
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                l.push_str(&line);
                l.push('\n');
            }
        });
        Ok(Proc { child, log })
    }

    pub fn wait_for(&mut self, needle: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if let Some(line) = log.lines().find(|l| l.contains(needle)) {
                return Ok(line.to_owned());
            }
            if let Some(st) = self.child.try_wait()? {
                bail!("exited ({st}) before {needle:?}:\n{log}");
            }
            if Instant::now() > deadline {
                bail!("no {needle:?} within 60 s:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn cpu(&self) -> f64 {
        crate::procs::process_cpu_seconds(self.child.id()).unwrap_or(0.0)
    }

    pub fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time of a process, seconds, from its CPU-time clock (nanosecond
/// resolution; /proc's ticks are 10 ms).
pub(crate) struct Server {
    pub proc: Proc,
    pub http: String,
    pub ingest: String,
}

pub(crate) fn server(data: &Path) -> anyhow::Result<Server> {
    server_with(data, &["--tiers", "none"])
}

/// `kansoku server` on loopback ports of its choosing, with `extra` options,
/// on a fresh `data` directory; returns once it says where it listens.
pub(crate) fn server_with(data: &Path, extra: &[&str]) -> anyhow::Result<Server> {
    let _ = std::fs::remove_dir_all(data);
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"]).args(extra).arg("--data").arg(data);
    let mut proc = Proc::spawn(cmd)?;
    let line = proc.wait_for("listening on http://")?;
    let field = |after: &str| line.split(after).nth(1).and_then(|r| r.split([',', ' ']).next()).map(str::to_owned);
    let http = field("listening on http://").context("server address")?;
    let ingest = field("agents on ").context("ingest address")?;
    Ok(Server { proc, http, ingest })
}

/// The JSON of `path` on a server at `addr` (the read commands' client).
fn get_json(addr: &str, path: &str, params: &[(&str, &str)]) -> anyhow::Result<serde_json::Value> {
    client::get_json(&format!("http://{addr}"), path, params)
}

pub(crate) fn ingest_stat(addr: &str, field: &str) -> anyhow::Result<f64> {
    get_json(addr, "/api/v1/status", &[])?["ingest"][field].as_f64().context("ingest figures")
}

/// Sum over hosts of the last value of `name{host=~"lab-.*"}` in [from, to].
fn sum_last(addr: &str, name: &str, at: Timestamp) -> anyhow::Result<f64> {
    let sel = format!("{name}{{host=~\"lab-.*\"}}");
    let from = format!("{}", (at.as_nanos() - 5_000_000_000) as f64 / 1e9);
    let to = format!("{}", at.as_nanos() as f64 / 1e9);
    let v = get_json(addr, "/api/v1/query", &[("query", &sel), ("from", &from), ("to", &to)])?;
    let mut sum = 0.0;
    for s in v["series"].as_array().into_iter().flatten() {
        if let Some(last) = s["values"].as_array().and_then(|vs| vs.iter().rev().find_map(serde_json::Value::as_f64)) {
            sum += last;
        }
    }
    Ok(sum)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if !args.cores.is_empty() {
        return crate::replay::run(args);
    }
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let mut results = json!({ "machine": crate::machine(), "agents": [], "capacity": null, "line_protocol": null });
    let mut last_data = None;
    for &interval in &args.intervals {
        for &n in &args.agents {
            let r = agents_run(args, interval, n)?;
            result!(
                "agents: {n:>3} x {interval:?}: {:>9.0} samples/s, wire {:.2} B/sample, server {:.3} us/sample \
                 (ingest path {:.3}), agents {:.3} us/sample ({:.3} without collecting)",
                r["samples_per_second"].as_f64().unwrap_or(0.0),
                r["wire_bytes_per_sample"].as_f64().unwrap_or(0.0),
                r["server_cpu_us_per_sample"].as_f64().unwrap_or(0.0),
                r["server_ingest_cpu_us_per_sample"].as_f64().unwrap_or(0.0),
                r["agent_cpu_us_per_sample"].as_f64().unwrap_or(0.0),
                r["agent_transfer_cpu_us_per_sample"].as_f64().unwrap_or(0.0),
            );
            last_data = Some((r["data"].as_str().unwrap_or_default().to_owned(), r["window"].clone()));
            results["agents"].as_array_mut().expect("array").push(r);
        }
    }
    if args.blast_agents > 0 {
        let r = capacity(args)?;
        result!(
            "capacity: {} simulated agents x {} cores: {:.0} samples/s, server {:.3} us/sample = {:.2} M samples per server CPU-second",
            args.blast_agents,
            args.blast_cores,
            r["samples_per_second"].as_f64().unwrap_or(0.0),
            r["server_cpu_us_per_sample"].as_f64().unwrap_or(0.0),
            r["samples_per_server_cpu_second"].as_f64().unwrap_or(0.0) / 1e6
        );
        results["capacity"] = r;
    }
    if !args.no_influx
        && let Some((data, window)) = last_data
    {
        let r = line_protocol(args, Path::new(&data), &window)?;
        result!("line protocol: {r}");
        results["line_protocol"] = r;
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("write {}", out.display()))?;
    }
    Ok(())
}

fn agents_run(args: &Args, interval: Duration, n: usize) -> anyhow::Result<serde_json::Value> {
    let base = args.dir.join(format!("agents-{n}-{}ms", interval.as_millis()));
    let _ = std::fs::remove_dir_all(&base);
    let srv = server(&base.join("server"))?;
    let exe = std::env::current_exe()?;
    let mut agents = Vec::new();
    for k in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(["agent", "--server", &srv.ingest, "--host", &format!("lab-{k:03}"), "--trace", "off"])
            .args(["--interval", &format!("{}ms", interval.as_millis()), "--batch", "1s", "--codec", &args.codec])
            .arg("--data")
            .arg(base.join(format!("agent-{k}")));
        agents.push(Proc::spawn(cmd)?);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live = get_json(&srv.http, "/api/v1/hosts", &[])?["hosts"]
            .as_array()
            .map_or(0, |h| h.iter().filter(|h| h["state"] == "live").count());
        if live == n {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {live} of {n} agents live after 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Warm-up: series declarations and the first batches are behind us.
    std::thread::sleep(Duration::from_secs(2));
    let snap = |t: Timestamp| -> anyhow::Result<[f64; 7]> {
        Ok([
            srv.proc.cpu(),
            agents.iter().map(Proc::cpu).sum(),
            ingest_stat(&srv.http, "samples")?,
            ingest_stat(&srv.http, "wire_bytes")?,
            ingest_stat(&srv.http, "cpu_seconds")?,
            sum_last(&srv.http, "kansoku_collector_cpu_seconds_total", t)?,
            t.as_nanos() as f64,
        ])
    };
    let t0 = Timestamp::now();
    let a = snap(t0)?;
    std::thread::sleep(args.duration);
    // Wait for the batch holding t1's samples, so the collector figures line up.
    let t1 = Timestamp::now();
    std::thread::sleep(Duration::from_millis(1500));
    let b = snap(t1)?;
    let wall = (b[6] - a[6]) / 1e9;
    let samples = b[2] - a[2];
    let per = |x: f64| x / samples * 1e6;
    let agent_cpu = b[1] - a[1];
    let collector_cpu = b[5] - a[5];
    for ag in agents {
        ag.stop();
    }
    srv.proc.stop();
    Ok(json!({
        "agents": n,
        "codec": args.codec,
        "interval_ms": interval.as_millis() as u64,
        "seconds": wall,
        "samples": samples,
        "samples_per_second": samples / wall,
        "wire_bytes_per_sample": (b[3] - a[3]) / samples,
        "server_cpu_us_per_sample": per(b[0] - a[0]),
        "server_ingest_cpu_us_per_sample": per(b[4] - a[4]),
        "server_cpu_share": (b[0] - a[0]) / wall,
        "agent_cpu_us_per_sample": per(agent_cpu),
        "agent_transfer_cpu_us_per_sample": per(agent_cpu - collector_cpu),
        "agent_cpu_share_each": agent_cpu / wall / n as f64,
        "data": base.join("server").display().to_string(),
        "window": [a[6], b[6]],
    }))
}

/// Pre-encoded batches from simulated hosts, sent as fast as acks allow.
fn capacity(args: &Args) -> anyhow::Result<serde_json::Value> {
    let srv = server(&args.dir.join("capacity"))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let duration = args.duration;
    let cores = args.blast_cores;
    let ingest = srv.ingest.clone();
    let cpu0 = srv.proc.cpu();
    let s0 = ingest_stat(&srv.http, "samples")?;
    let started = Instant::now();
    let sent = rt.block_on(async move {
        let mut tasks = Vec::new();
        for k in 0..args.blast_agents {
            let ingest = ingest.clone();
            tasks.push(tokio::spawn(async move { blaster(&ingest, k, cores, duration).await }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.map_err(|e| anyhow::anyhow!("blaster: {e}"))??;
        }
        Ok::<u64, anyhow::Error>(total)
    });
    let sent = sent.map_err(|e| {
        let log = srv.proc.log.lock().map(|l| l.clone()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        anyhow::anyhow!("{e:#}; the server's last words: {}", tail.join(" | "))
    })?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = srv.proc.cpu() - cpu0;
    let samples = ingest_stat(&srv.http, "samples")? - s0;
    srv.proc.stop();
    if (samples - sent as f64).abs() > 0.5 {
        bail!("capacity: sent {sent} samples, the server stored {samples}");
    }
    Ok(json!({
        "agents": args.blast_agents,
        "cores_per_host": cores,
        "seconds": wall,
        "samples": samples,
        "samples_per_second": samples / wall,
        "server_cpu_seconds": cpu,
        "server_cpu_us_per_sample": cpu / samples * 1e6,
        "samples_per_server_cpu_second": samples / cpu,
    }))
}

async fn blaster(ingest: &str, k: usize, cores: usize, duration: Duration) -> anyhow::Result<u64> {
    use tokio::io::AsyncWriteExt;
    let conn = link::net::connect(ingest, None).await?;
    let (mut rd, mut wr) = tokio::io::split(conn);
    let host = format!("blast-{k:02}");
    let mut out = Vec::new();
    Msg::Hello(Hello {
        version: wire::VERSION,
        host: host.clone(),
        agent_version: "lab".into(),
        spool_id: 1000 + k as u64,
        token: String::new(),
        interval_ns: 100_000_000,
        batch_ns: 1_000_000_000,
    })
    .encode(&mut out);
    let synth_args = synth::Args { hosts: 1, cores, seed: k as u64 + 1 };
    let mut synth = synth::Synth::new(&synth_args, Duration::from_millis(100));
    let defs: Vec<(u32, SeriesKey)> = synth.keys().into_iter().enumerate().map(|(i, k)| (i as u32, k)).collect();
    Msg::Series(defs).encode(&mut out);
    wr.write_all(&out).await?;
    let mut buf = Vec::new();
    match link::net::read_msg(&mut rd, &mut buf, wire::FRAME_MAX).await? {
        Some(Msg::Welcome { .. }) => {}
        other => bail!("blaster {k}: expected welcome, got {other:?}"),
    }
    // A year ago onwards: timestamps only grow, far from live data.
    let mut t = Timestamp::now().as_nanos() - 365 * 86_400_000_000_000;
    let (mut seq, mut acked, mut samples) = (0u64, 0u64, 0u64);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1024);
    let reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Ok(Some(m)) = link::net::read_msg(&mut rd, &mut buf, wire::FRAME_MAX).await {
            if let Msg::Ack { seq } = m
                && tx.send(seq).await.is_err()
            {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut counts = std::collections::VecDeque::new();
    while start.elapsed() < duration || acked < seq {
        while start.elapsed() < duration && seq - acked < 32 {
            let mut rounds_v = Vec::with_capacity(10);
            for _ in 0..10 {
                let mut b = Batch::new(Timestamp(t));
                synth.round(Timestamp(t), &mut b);
                t += 100_000_000;
                rounds_v.push(b);
            }
            let mut body = Vec::new();
            let n = rounds::encode(&rounds_v, Codec::Zstd(3), &mut body) as u64;
            seq += 1;
            counts.push_back((seq, n));
            out.clear();
            Msg::Rounds { seq, body }.encode(&mut out);
            wr.write_all(&out).await?;
        }
        wr.flush().await?;
        let Some(a) = rx.recv().await else { bail!("blaster {k}: connection closed") };
        acked = a;
        while counts.front().is_some_and(|c| c.0 <= acked) {
            samples += counts.pop_front().expect("checked").1;
        }
    }
    reader.abort();
    Ok(samples)
}

/// The samples stored in `data` during `window`, as InfluxDB line protocol,
/// to kansoku's /write and to influxd's.
fn line_protocol(args: &Args, data: &Path, window: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let (from, to) = (window[0].as_f64().unwrap_or(0.0) / 1e9, window[1].as_f64().unwrap_or(0.0) / 1e9);
    let lp_path = args.dir.join("samples.lp");
    let out = Command::new(std::env::current_exe()?)
        .args([
            "export",
            "{host=~\"lab-.*\"}",
            "--format",
            "influx-lp",
            "--from",
            &format!("{from}"),
            "--to",
            &format!("{to}"),
        ])
        .arg("--data")
        .arg(data)
        .arg("-o")
        .arg(&lp_path)
        .output()?;
    if !out.status.success() {
        bail!("export: {}", String::from_utf8_lossy(&out.stderr));
    }
    let lp = std::fs::read_to_string(&lp_path)?;
    let lines: Vec<&str> = lp.lines().collect();
    let bytes = lp.len() as f64;
    let n = lines.len() as f64;
    let chunks: Vec<String> = lines.chunks(5000).map(|c| c.join("\n") + "\n").collect();

    let post_all = |url: &str, cpu: &dyn Fn() -> f64| -> anyhow::Result<(f64, f64)> {
        let c0 = cpu();
        let t0 = Instant::now();
        for c in &chunks {
            ureq::post(url).send(c.as_bytes()).with_context(|| format!("POST {url}"))?;
        }
        Ok((cpu() - c0, t0.elapsed().as_secs_f64()))
    };
    let k = server(&args.dir.join("lp-kansoku"))?;
    ureq::post(format!("http://{}/query", k.http)).send_form([("q", "CREATE DATABASE lab")])?;
    let (k_cpu, k_wall) = post_all(&format!("http://{}/write?db=lab", k.http), &|| k.proc.cpu())?;
    k.proc.stop();

    let influx_dir = args.dir.join("lp-influxd");
    let _ = std::fs::remove_dir_all(&influx_dir);
    std::fs::create_dir_all(&influx_dir)?;
    let conf = influx_dir.join("influxdb.conf");
    let d = influx_dir.display();
    std::fs::write(
        &conf,
        format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:18188\"\n[meta]\n  dir = \"{d}/meta\"\n[data]\n  dir = \"{d}/data\"\n  wal-dir = \"{d}/wal\"\n[http]\n  bind-address = \"127.0.0.1:18186\"\n  log-enabled = false\n"
        ),
    )?;
    let mut cmd = Command::new("influxd");
    cmd.arg("-config").arg(&conf);
    let influxd = Proc::spawn(cmd).context("start influxd (apt-get install influxdb, or --no-influx)")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ureq::get("http://127.0.0.1:18186/ping").call().is_err() {
        if Instant::now() > deadline {
            bail!("influxd did not answer within 30 s:\n{}", influxd.log.lock().map(|l| l.clone()).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    ureq::post("http://127.0.0.1:18186/query").send_form([("q", "CREATE DATABASE lab")])?;
    let (i_cpu, i_wall) = post_all("http://127.0.0.1:18186/write?db=lab", &|| influxd.cpu())?;
    influxd.stop();
    Ok(json!({
        "samples": n,
        "bytes_per_sample": bytes / n,
        "kansoku_write_cpu_us_per_sample": k_cpu / n * 1e6,
        "kansoku_write_seconds": k_wall,
        "influxd_cpu_us_per_sample": i_cpu / n * 1e6,
        "influxd_seconds": i_wall,
    }))
}
