//! `kansoku lab latency`: seed 003's degradation curve for a workload on
//! this machine (crate `latency`). The injector is calibrated first —
//! every requested step measured per call, steps it cannot honour within
//! the tolerance reported and left out — then the workload runs at each
//! honoured step through `lab run`'s machinery (set-up, steps in a random
//! order each round, warm-up, repetitions, the environment), and the
//! curve, its knee and the tier budget come from the runs' throughput.
//!
//! Workloads: `pgbench` (PostgreSQL in a cluster of its own, the server's
//! `pread`/`pwrite`/`fdatasync` delayed — what its storage costs it),
//! `redis` (a Redis server reached through the network injector, a TCP
//! relay adding the step one way each direction, by `redis-benchmark`), or
//! any command (`--run`, its throughput read by `--parser`/`--metric`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use experiment::Experiment;
use experiment::metrics::{Parser, Spec};
use experiment::spec::Workload;
use latency::calibrate::{self, Step};
use latency::curve;
use serde_json::{Value, json};

use crate::out::result;

/// The PostgreSQL helper of `experiments/pg/pg.sh`, carried in the binary.
const PG_SH: &str = include_str!("../../../../experiments/pg/pg.sh");

#[derive(clap::Args, Debug)]
pub struct Args {
    /// `pgbench` (PostgreSQL), `fio` (random reads, --inject storage),
    /// `redis` (Redis across the delaying relay: the network), or give --run.
    #[arg(long, default_value = "pgbench", conflicts_with = "run")]
    workload: String,
    /// Where the delay goes: `preload` (the workload's own pread, pwrite,
    /// fdatasync… calls, in-process), `storage` (every I/O of a block
    /// device: a FUSE file under a loop device with ext4, the workload's
    /// data on it), `network` (a TCP relay). Default: network for redis,
    /// else preload.
    #[arg(long, value_parser = ["preload", "storage", "network"])]
    inject: Option<String>,
    /// With --inject storage: the delayed device's size.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    disk_size: u64,
    /// With --workload fio: I/Os in flight (fio's iodepth, libaio).
    #[arg(long, default_value_t = 1)]
    iodepth: u32,
    /// A command to run at each step instead (`sh -c`; preload: the
    /// injector is in its environment, LD_PRELOAD and KANSOKU_DELAY_NS;
    /// storage: KANSOKU_DISK is the delayed file system's folder).
    #[arg(long)]
    run: Option<String>,
    /// With --run: how its output is read — a preset (wrk, ab, pgbench,
    /// kansoku-load) or a regex whose first group is the throughput.
    #[arg(long, default_value = r"([0-9.]+)")]
    parser: String,
    /// The metric of throughput P (default: tps for pgbench; the parser's
    /// first otherwise).
    #[arg(long)]
    metric: Option<String>,
    /// Latency added per call at each step (0 is added if missing).
    #[arg(long, value_delimiter = ',', default_value = "0,1us,2us,5us,10us,20us,50us,100us,200us,500us,1ms")]
    steps: Vec<String>,
    /// The calls delayed.
    #[arg(long, default_value = "pread,pwrite,fdatasync")]
    calls: String,
    #[arg(long, default_value_t = 5)]
    repetitions: usize,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// How long pgbench or fio runs each time, in whole seconds (`10s`).
    #[arg(long, default_value = "10s", value_parser = parse_whole_seconds)]
    seconds: u64,
    /// Requests of redis-benchmark per run (--workload redis).
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// A step is honoured when its added median is this close to it.
    #[arg(long, default_value_t = 0.1)]
    tolerance: f64,
    /// Use the steps the calibration could not honour too (reported).
    #[arg(long)]
    keep_unhonoured: bool,
    /// Only calibrate the injector.
    #[arg(long)]
    calibrate_only: bool,
    /// Probe calls per calibration measurement.
    #[arg(long, default_value_t = 20_000)]
    probe_calls: usize,
    /// Latency of one hop (a switch tier), for the budget.
    #[arg(long, default_value = "300ns", value_parser = model::parse_duration)]
    hop: std::time::Duration,
    /// Degradation budget, per cent.
    #[arg(long, default_value_t = 5.0)]
    budget: f64,
    /// The closed-loop model to compare with: N,K — N requests in flight
    /// (clients), K delayed calls per operation. By Little's law
    /// throughput is N / (N/P0 + K·x), so PD[x] = K·x·P0 / (N + K·x·P0).
    /// Default: fio iodepth,K and pgbench (--inject storage) 8,K with K the
    /// device requests per operation measured at 0; redis 4,2; none for
    /// --run and preload pgbench.
    #[arg(long, value_parser = parse_model)]
    model: Option<(f64, f64)>,
    #[arg(long)]
    seed: Option<u64>,
    /// A kansoku collecting this machine (`make up`: http://127.0.0.1:7070):
    /// each run's CPU busy, disk reads and writes and context switches
    /// over its window go into the result beside the throughput, and each
    /// run links to its range on that dashboard.
    #[arg(long)]
    telemetry: Option<String>,
    /// Write everything as JSON here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let b = model::parse_bytes(s).map_err(|e| format!("{s:?}: {e}"))?;
    if b < 64 << 20 {
        return Err(format!("{s:?}: at least 64M (ext4 and the workload's data)"));
    }
    Ok(b)
}

fn parse_model(s: &str) -> Result<(f64, f64), String> {
    let (n, k) =
        s.split_once(',').ok_or_else(|| format!("{s:?}: N,K (requests in flight, delayed calls per operation)"))?;
    match (n.trim().parse::<f64>(), k.trim().parse::<f64>()) {
        (Ok(n), Ok(k)) if n > 0.0 && k > 0.0 => Ok((n, k)),
        _ => Err(format!("{s:?}: N and K are positive numbers")),
    }
}

#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
}

/// `kansoku lab latency-probe`: the calibration's probe (timed `pread`s),
/// run under the injector by `lab latency`; prints p50 and p99 in ns.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    let d = calibrate::probe(args.calls)?;
    // The probe's answer to its parent, on stdout.
    result!("{} {}", calibrate::quantile(&d, 0.5), calibrate::quantile(&d, 0.99));
    Ok(())
}

/// Runs the probe, with the injector at `delay` when given; (p50, p99).
fn run_probe(calls: usize, shim: Option<(&Path, u64)>) -> anyhow::Result<(u64, u64)> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["lab", "latency-probe", "--calls", &calls.to_string()]);
    if let Some((lib, ns)) = shim {
        cmd.env("LD_PRELOAD", lib).env("KANSOKU_DELAY_NS", ns.to_string()).env("KANSOKU_DELAY_CALLS", "pread");
    }
    let out = cmd.output().context("run the calibration probe")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut f = text.split_whitespace().map(str::parse::<u64>);
    match (out.status.success(), f.next(), f.next()) {
        (true, Some(Ok(p50)), Some(Ok(p99))) => Ok((p50, p99)),
        _ => bail!("the calibration probe failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
    }
}

/// One calibration measurement: the injector set to `set_ns`, judged
/// against `requested_ns`; the median of three, the base measured beside
/// each (the machine drifts).
fn measure(lib: &Path, calls: usize, requested_ns: u64, set_ns: u64, allowed_ns: f64) -> anyhow::Result<Step> {
    let med = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    // Long steps take fewer calls: about 0.2 s of injected delay a probe.
    let calls = calls.min((200_000_000 / set_ns.max(1)).max(500) as usize);
    let (mut b50, mut b99, mut w50, mut w99) = (vec![], vec![], vec![], vec![]);
    for _ in 0..3 {
        let b = run_probe(calls, None)?;
        let w = run_probe(calls, Some((lib, set_ns)))?;
        b50.push(b.0);
        b99.push(b.1);
        w50.push(w.0);
        w99.push(w.1);
    }
    Ok(calibrate::judge(requested_ns, (med(b50), med(b99)), (med(w50), med(w99)), allowed_ns))
}

/// Each step's calibration through the relay: round trips of 64 bytes to an
/// echo server, through a relay at the step against one at zero, halved
/// (one way). The relay's own floor (a relay at zero against none) is said.
fn calibrate_relay(steps: &[u64], round_trips: usize, tolerance: f64) -> anyhow::Result<Vec<(Step, u64)>> {
    result!(
        "calibration ({round_trips} round trips of 64 bytes per step, through the relay at the step against the relay at 0, halved):"
    );
    calibration_head("one way");
    let mut out = Vec::new();
    for &ns in steps {
        let ((p50, p99), floor) = latency::relay::calibrate(std::time::Duration::from_nanos(ns), round_trips)?;
        if ns == 0 {
            result!("(the relay's own floor, one way: {floor:.0} ns, subtracted by measuring against the relay at 0)");
        }
        let s = calibrate::judge(
            ns,
            (0, 0),
            (p50.max(0.0) as u64, p99.max(0.0) as u64),
            calibrate::allowance_ns(ns, steps, tolerance),
        );
        let s = Step { added_p50_ns: p50, added_p99_ns: p99, ..s };
        calibration_row(ns, ns, &s);
        out.push((s, ns));
    }
    Ok(out)
}

/// A Redis server of our own on a free loopback port, no persistence;
/// stopped on drop.
struct Redis {
    port: u16,
    child: std::process::Child,
}

impl Redis {
    fn start(dir: &Path) -> anyhow::Result<Redis> {
        use std::io::BufRead;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("start redis-server (apt-get install redis-server redis-tools)")?;
        let out = child.stdout.take().expect("piped");
        let mut lines = std::io::BufReader::new(out).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("Ready to accept connections") => break,
                Some(Ok(_)) => {}
                _ => {
                    let _ = child.kill();
                    bail!("redis-server exited before it was ready");
                }
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        eprintln!("redis-server on 127.0.0.1:{port}");
        Ok(Redis { port, child })
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Redis's GET throughput through the relay at each step: `redis-benchmark`
/// with 4 clients, one request in flight each.
fn redis_experiment(args: &Args, port: u16, steps: &[u64]) -> anyhow::Result<Experiment> {
    let exe = std::env::current_exe()?;
    let run = format!(
        "{} lab latency-relay --to 127.0.0.1:{port} --delay-ns {{delay_ns}} -- redis-benchmark -p {{{{port}}}} -t get -n {} -c 4 -q",
        exe.display(),
        args.requests
    );
    let parser = Parser::Spec(Spec {
        kind: "regex".into(),
        metrics: [("rps".to_owned(), r"GET: ([0-9.]+) requests per second".to_owned())].into(),
        from: None,
    });
    let description = "seed 003's degradation curve across the network: Redis GETs through a relay adding the step one way each direction";
    let packages = vec!["redis-server".into(), "redis-tools".into()];
    Ok(sweep(args, "latency-network", description.into(), packages, (Vec::new(), Vec::new()), steps, run, parser))
}

#[derive(clap::Args, Debug)]
pub struct RelayArgs {
    /// Where connections go.
    #[arg(long)]
    to: std::net::SocketAddr,
    /// Added one way, each direction, ns.
    #[arg(long)]
    delay_ns: u64,
    /// The command to run while relaying; `{port}` in it is the relay's port.
    #[arg(trailing_var_arg = true, required = true)]
    command: Vec<String>,
}

/// `kansoku lab latency-relay`: relays to `--to` with the delay while the
/// command runs (its output passed through), and exits with its status.
pub fn relay(args: &RelayArgs) -> anyhow::Result<()> {
    let r = latency::relay::Relay::start("127.0.0.1:0", args.to, std::time::Duration::from_nanos(args.delay_ns))?;
    let port = r.local.port().to_string();
    let cmd: Vec<String> = args.command.iter().map(|a| a.replace("{port}", &port)).collect();
    let status = Command::new(&cmd[0]).args(&cmd[1..]).status().with_context(|| format!("run {}", cmd[0]))?;
    drop(r);
    if !status.success() {
        bail!("{} failed: {status}", cmd[0]);
    }
    Ok(())
}

/// Each step's calibration. The busy-wait overshoots by a fixed amount (its
/// last clock read and the loop): measured at 10 µs first and subtracted
/// from every setting, then each step measured as set (and, if not
/// honoured, once more with the error it measured taken off). Returns
/// (step, the setting used).
fn calibrate_steps(steps: &[u64], lib: &Path, calls: usize, tolerance: f64) -> anyhow::Result<Vec<(Step, u64)>> {
    let reference = measure(lib, calls, 10_000, 10_000, 10_000.0)?;
    let overshoot = (reference.added_p50_ns - 10_000.0).max(0.0).round() as u64;
    result!(
        "calibration (up to {calls} timed pread calls per measurement, about 0.2 s of delay at most; medians of 3); the busy-wait overshoots by {overshoot} ns (at 10 us), subtracted from each setting:"
    );
    calibration_head("requested");
    let mut out = Vec::new();
    for &ns in steps {
        let allowed = calibrate::allowance_ns(ns, steps, tolerance);
        let mut set = if ns == 0 { 0 } else { ns.saturating_sub(overshoot).max(1) };
        let mut s = measure(lib, calls, ns, set, allowed)?;
        // The overshoot measured at 10 us is not quite a short step's
        // (a 1 us step once added 871 ns, set to 815): a step not honoured
        // is set again once, corrected by the error it measured, and the
        // closer of the two kept.
        if ns > 0 && !s.honoured {
            let again = (set as f64 + (ns as f64 - s.added_p50_ns)).round().max(1.0) as u64;
            let t = measure(lib, calls, ns, again, allowed)?;
            if (t.added_p50_ns - ns as f64).abs() < (s.added_p50_ns - ns as f64).abs() {
                (s, set) = (t, again);
            }
        }
        calibration_row(ns, set, &s);
        out.push((s, set));
    }
    Ok(out)
}

/// The calibration table's head and one row per step (the same columns for
/// every injector: the relay's setting is the step itself).
fn calibration_head(first: &str) {
    result!("{first:>12} {:>12} {:>14} {:>14} {:>10}", "set", "added p50", "added p99", "honoured");
}

fn calibration_row(ns: u64, set: u64, s: &Step) {
    result!(
        "{:>9} ns {:>9} ns {:>11.0} ns {:>11.0} ns {:>10}",
        ns,
        set,
        s.added_p50_ns,
        s.added_p99_ns,
        if s.honoured { "yes" } else { "NO" }
    );
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let mut steps: Vec<u64> =
        args.steps.iter().map(|s| calibrate::parse_ns(s)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    if !steps.contains(&0) {
        steps.push(0);
    }
    steps.sort_unstable();
    steps.dedup();
    let hop = args.hop.as_nanos() as f64;
    if args.run.is_none() && !["pgbench", "redis", "fio"].contains(&args.workload.as_str()) {
        bail!("--workload {}: the workloads are pgbench, fio and redis, or give --run 'COMMAND'", args.workload);
    }
    let inject = match (&args.inject, args.run.is_none() && args.workload == "redis") {
        (Some(i), _) => i.as_str(),
        (None, true) => "network",
        (None, false) => "preload",
    };
    match (inject, args.run.as_deref().map_or(args.workload.as_str(), |_| "run")) {
        ("network", "redis") | ("storage" | "preload", "pgbench" | "run") | ("storage", "fio") => {}
        (i, w) => bail!(
            "--inject {i} with --workload {w}: redis goes with network, fio with storage, pgbench and --run with storage or preload"
        ),
    }
    // The workload's tools, before anything is calibrated (a missing fio
    // or redis was found only after minutes of calibration).
    let tools: &[&str] = match (args.run.is_some(), args.workload.as_str()) {
        (true, _) => &[],
        (false, "redis") => &["redis-server", "redis-benchmark"],
        (false, "fio") => &["fio"],
        (false, _) => &["pgbench"],
    };
    for t in tools {
        perf::script::find_program(t)?;
    }
    let dir = tempfile::Builder::new().prefix("kansoku-latency-").tempdir()?;
    let lib = latency::install(dir.path())?;
    let stack = if inject == "storage" {
        result!(
            "latency: the storage injector (FUSE, {} threads) under a loop device with ext4, {} bytes, on {}",
            latency::disk::THREADS,
            args.disk_size,
            crate::machine_line()
        );
        let d = dir.path().join("disk");
        std::fs::create_dir(&d)?;
        Some(latency::disk::Stack::build(&d, args.disk_size).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let calibration = match (inject, &stack) {
        ("network", _) => {
            result!("latency: the network injector (a TCP relay on loopback) on {}", crate::machine_line());
            calibrate_relay(&steps, args.probe_calls.min(2000), args.tolerance)?
        }
        (_, Some(stack)) => calibrate_disk(&steps, stack, args.probe_calls.min(4000), args.tolerance)?,
        _ => {
            result!("latency: injector {} on {}", lib.display(), crate::machine_line());
            calibrate_steps(&steps, &lib, args.probe_calls, args.tolerance)?
        }
    };
    let network = inject == "network";
    let calib_json: Vec<Value> = calibration
        .iter()
        .map(|(s, set)| {
            json!({"requested_ns": s.requested_ns, "set_ns": set, "added_p50_ns": s.added_p50_ns,
                   "added_p99_ns": s.added_p99_ns, "honoured": s.honoured})
        })
        .collect();
    let mut doc = json!({"experiment": "latency", "machine": crate::machine(), "tolerance": args.tolerance,
                         "calibration": calib_json});
    if args.calibrate_only {
        return write(args, &doc);
    }
    // The settings run, each with the x it stands for on the curve: the
    // request when honoured, else (kept) what it really adds. The zero
    // step is the reference, at 0 whatever its calibration's noise.
    let used: BTreeMap<u64, f64> = calibration
        .iter()
        .filter(|(s, _)| s.honoured || s.requested_ns == 0 || args.keep_unhonoured)
        .map(|(s, set)| {
            (*set, if s.honoured || s.requested_ns == 0 { s.requested_ns as f64 } else { s.added_p50_ns.max(0.0) })
        })
        .collect();
    for (s, _) in calibration.iter().filter(|(s, _)| !s.honoured && s.requested_ns > 0) {
        result!(
            "step {} ns: the injector adds {:.0} ns ({:+.1} %) — {}",
            s.requested_ns,
            s.added_p50_ns,
            (s.added_p50_ns / s.requested_ns as f64 - 1.0) * 100.0,
            if args.keep_unhonoured { "kept (--keep-unhonoured), plotted at what it adds" } else { "left out" }
        );
    }
    if used.len() < 2 {
        bail!("no step but 0 could be honoured within {} %", args.tolerance * 100.0);
    }
    let settings: Vec<u64> = used.keys().copied().collect();
    let redis = if network { Some(Redis::start(dir.path())?) } else { None };
    let (exp, metric) = match (&redis, &stack) {
        (Some(r), _) => {
            (redis_experiment(args, r.port, &settings)?, args.metric.clone().unwrap_or_else(|| "rps".into()))
        }
        (None, Some(stack)) => disk_experiment(args, stack, &settings, dir.path())?,
        (None, None) => experiment_for(args, &lib, &settings, dir.path())?,
    };
    let seed = args.seed.unwrap_or_else(|| clock::realtime_ns() as u64);
    let (result, failed) = crate::experiment::execute(
        &exp,
        Path::new("(kansoku lab latency)"),
        dir.path(),
        seed,
        false,
        args.telemetry.as_deref(),
    )?
    .expect("not a dry run");
    if failed > 0 {
        eprintln!("{failed} runs failed; the curve uses the others");
    }
    let mut series: Vec<(f64, Vec<f64>)> = Vec::new();
    for s in result["summary"].as_array().into_iter().flatten() {
        let Some(ns) = s["point"]["delay_ns"].as_str().and_then(|v| v.parse::<u64>().ok()) else { continue };
        let values: Vec<f64> =
            s["metrics"][&metric]["values"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
        series.push((used.get(&ns).copied().unwrap_or(ns as f64), values));
    }
    series.sort_by(|a, b| a.0.total_cmp(&b.0));
    let points = curve::curve(&series, 2000).context("no runs at 0 to compare with")?;
    let xs: Vec<f64> = points.iter().map(|p| p.x_ns).collect();
    let pds: Vec<f64> = points.iter().map(|p| p.pd).collect();
    let knee = curve::knee(&xs, &pds);
    let knee_ci = curve::knee_interval(&series, 1000);
    let pairs: Vec<(f64, f64)> = xs.iter().copied().zip(pds.iter().copied()).collect();
    let budget = curve::tier_budget(&pairs, hop, args.budget);
    let p0 = points[0].throughput;
    // The model: the operator's N,K, else what the workload is by
    // construction — fio: iodepth reads in flight, one delayed request
    // each; redis-benchmark: 4 clients, each GET delayed on its way there
    // and back. pgbench's K (device requests per transaction, most of them
    // hidden by caches and group commit) is not known before the run.
    // On the delayed device K is measured: the device requests a run at 0
    // made per operation (its throughput times its seconds) — every
    // request, so an upper bound on those an operation waits for.
    let measured_k = stack.as_ref().and_then(|_| {
        let at0 = result["summary"].as_array()?.iter().find(|s| s["point"]["delay_ns"] == "0")?;
        let median = |m: &str| {
            let v: Vec<f64> = at0["metrics"][m]["values"].as_array()?.iter().filter_map(Value::as_f64).collect();
            (!v.is_empty()).then(|| experiment::stats::median(&v))
        };
        let ops = median(&metric)? * args.seconds as f64;
        (ops > 0.0).then(|| median("device_requests").map(|r| r / ops))?
    });
    let model = args.model.or(match (args.run.is_none(), args.workload.as_str(), measured_k) {
        (true, "fio", k) => Some((f64::from(args.iodepth), k.unwrap_or(1.0))),
        (true, "pgbench", Some(k)) => Some((8.0, k)),
        (true, "redis", _) => Some((4.0, 2.0)),
        _ => None,
    });
    if let Some(k) = measured_k {
        result!("device requests per operation at 0 (the model's K, an upper bound on those waited for): {k:.2}");
    }
    let predicted = |x: f64| model.map(|(n, k)| curve::closed_loop_pd(p0, n, k, x));
    result!("\n{:>12} {:>14} {:>9} {:>22} {:>12}", "x (ns)", metric, "PD %", "95% interval", "model PD %");
    for p in &points {
        result!(
            "{:>12.0} {:>14.2} {:>9.2} {:>22} {:>12}",
            p.x_ns,
            p.throughput,
            p.pd,
            p.pd_interval.map_or("-".into(), |(a, b)| format!("[{a:.2}, {b:.2}]")),
            predicted(p.x_ns).map_or("-".into(), |m| format!("{m:.2}"))
        );
    }
    match knee {
        Some(k) => result!(
            "knee (kneedle): {k:.0} ns{}",
            knee_ci.map_or(String::new(), |(a, b)| format!(", 95 % bootstrap interval [{a:.0}, {b:.0}] ns"))
        ),
        None => result!("knee: none (the curve does not stay flat and then climb)"),
    }
    let shape = curve::shape(&pairs, knee);
    match shape {
        Some((k, at, past)) => result!(
            "beside the paper (seed 003, OLTP over PCIe switch hops: knee {:.0} ns, PD under {:.0} % to it, ~{:.0} % at {:.1} x it): knee {k:.0} ns, PD {} at it, {} at {:.1} x it",
            curve::PAPER_KNEE_NS,
            curve::PAPER_PD_AT_KNEE,
            curve::PAPER_PD_PAST_KNEE,
            curve::PAPER_PAST_KNEE,
            at.map_or("-".into(), |v| format!("{v:.1} %")),
            past.map_or("- (past the last step)".into(), |v| format!("{v:.1} %")),
            curve::PAPER_PAST_KNEE
        ),
        None => result!(
            "beside the paper (seed 003: a knee at {:.0} ns): no knee here to set beside it",
            curve::PAPER_KNEE_NS
        ),
    }
    result!(
        "tier budget: {}{} hops of {hop:.0} ns within {} % degradation{}",
        if budget.at_least { "at least " } else { "" },
        budget.tiers,
        args.budget,
        if budget.at_least { " (the last step measured is still within it)" } else { "" }
    );
    doc["metric"] = json!(metric);
    doc["curve"] = json!(
        points
            .iter()
            .map(|p| json!({"x_ns": p.x_ns, "throughput": p.throughput, "pd": p.pd,
        "pd_interval": p.pd_interval.map(|(a, b)| [a, b]), "model_pd": predicted(p.x_ns)}))
            .collect::<Vec<_>>()
    );
    doc["model"] = json!(model.map(|(n, k)| json!({"in_flight": n, "calls_per_operation": k,
        "given": args.model.is_some(), "measured_device_requests_per_operation": measured_k})));
    doc["knee_ns"] = json!(knee);
    doc["paper"] = json!({
        "knee_ns": curve::PAPER_KNEE_NS, "pd_at_knee_below": curve::PAPER_PD_AT_KNEE,
        "pd_past_knee": curve::PAPER_PD_PAST_KNEE, "past_knee_factor": curve::PAPER_PAST_KNEE,
        "here": shape.map(|(k, at, past)| json!({"knee_ns": k, "pd_at_knee": at, "pd_past_knee": past})),
    });
    doc["knee_interval_ns"] = json!(knee_ci.map(|(a, b)| [a, b]));
    doc["budget"] = json!({"hop_ns": hop, "percent": args.budget, "tiers": budget.tiers, "at_least": budget.at_least});
    doc["runs"] = result;
    doc["inject"] = json!(inject);
    if let Some(stack) = &stack {
        let c = stack.injector().counts();
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        doc["device"] = json!({"size_bytes": args.disk_size, "reads": n(&c.reads), "writes": n(&c.writes),
            "syncs": n(&c.syncs), "read_bytes": n(&c.read_bytes), "written_bytes": n(&c.written_bytes),
            "errors": n(&c.errors)});
        result!(
            "the delayed device served {} reads, {} writes and {} syncs ({} errors)",
            n(&c.reads),
            n(&c.writes),
            n(&c.syncs),
            n(&c.errors)
        );
    }
    drop(stack);
    write(args, &doc)
}

/// The storage injector's calibration: 4 KiB reads of its image through
/// FUSE (direct I/O: each one a request) at each step, against reads at
/// 0 measured beside it; the FUSE round trip itself (at 0, against the
/// backing file) is the floor, said and not part of any step.
fn calibrate_disk(
    steps: &[u64],
    stack: &latency::disk::Stack,
    reads: usize,
    tolerance: f64,
) -> anyhow::Result<Vec<(Step, u64)>> {
    use std::time::Duration;
    let inj = stack.injector();
    let image = inj.image();
    let q = |v: &[u64]| (calibrate::quantile(v, 0.5), calibrate::quantile(v, 0.99));
    // What `set` adds at the median: reads at `set` against reads at 0
    // measured just before (the machine drifts).
    let measure = |set: u64, n: usize| -> anyhow::Result<((u64, u64), (u64, u64))> {
        inj.set_delay(Duration::ZERO);
        let base = latency::disk::probe(&image, n)?;
        inj.set_delay(Duration::from_nanos(set));
        let with = latency::disk::probe(&image, n);
        inj.set_delay(Duration::ZERO);
        Ok((q(&base), q(&with?)))
    };
    let reads_for = |ns: u64| if ns == 0 { reads } else { (200_000_000 / ns as usize).clamp(20, reads) };
    // A delayed request's thread sleeps and wakes: the wakeup and the cold
    // reply path add a few µs over the wait itself, measured at 500 µs and
    // taken off every setting that sleeps, as the preload injector's
    // overshoot is.
    // Warmed first: the first reads of a fresh mount are slower (caches,
    // the threads' first wakeups), and would hide the overshoot.
    measure(500_000, reads_for(500_000))?;
    let (base, with) = measure(500_000, reads_for(500_000))?;
    let overshoot = (with.0 as i64 - base.0 as i64 - 500_000).max(0) as u64;
    result!(
        "calibration (4 KiB reads of the delayed image, up to {reads} per step, about 0.2 s of delay at most, against reads at 0 beside each); the FUSE round trip at 0: p50 {} ns, p99 {} ns (the injector's floor); a delayed request that sleeps overshoots by {overshoot} ns (at 500 us), subtracted from each such setting:",
        base.0,
        base.1
    );
    calibration_head("requested");
    let mut out = Vec::new();
    for &ns in steps {
        // Only a wait that sleeps pays the wakeup; one within the spin
        // window is a busy-wait and is set as asked.
        let spin = latency::relay::SPIN.as_nanos() as u64;
        let set = if ns <= spin { ns } else { ns.saturating_sub(overshoot).max(spin) };
        let (base, with) = measure(set, reads_for(ns))?;
        let s = calibrate::judge(ns, base, with, calibrate::allowance_ns(ns, steps, tolerance));
        calibration_row(ns, set, &s);
        out.push((s, set));
    }
    Ok(out)
}

/// The experiment on the delayed device: each run first writes its step
/// to the injector's delay file, then runs the workload with its data on
/// the device's ext4.
fn disk_experiment(
    args: &Args,
    stack: &latency::disk::Stack,
    steps: &[u64],
    dir: &Path,
) -> anyhow::Result<(Experiment, String)> {
    let fs = stack.fs().display().to_string();
    let set = format!("echo {{delay_ns}} > {}", stack.injector().image().with_file_name("delay_ns").display());
    // The device requests of the workload alone: the injector's count
    // read before and after it (K of the model comes from these).
    let requests = stack.injector().image().with_file_name("requests").display().to_string();
    let count0 = format!("r0=$(cat {requests})");
    let count1 = format!("echo device_requests=$(( $(cat {requests}) - r0 ))");
    let with_requests = |m: &[(&str, &str)]| {
        let mut metrics: std::collections::BTreeMap<String, String> =
            m.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        metrics.insert("device_requests".into(), r"device_requests=(\d+)".into());
        Parser::Spec(Spec { kind: "regex".into(), metrics, from: None })
    };
    let (setup, teardown, run, parser, metric, packages) = match (&args.run, args.workload.as_str()) {
        (Some(cmd), _) => {
            let (parser, first) = run_parser(args)?;
            let cmd = cmd.replace('{', "{{").replace('}', "}}");
            (Vec::new(), Vec::new(), format!("{set} && export KANSOKU_DISK={fs}; {cmd}"), parser, first, Vec::new())
        }
        (None, "fio") => {
            // Laid out at 0 before the sweep; each run reads it back.
            let file = format!("{fs}/fio.dat");
            let size = (args.disk_size / 2).min(512 << 20);
            let layout = format!(
                "fio --name=layout --filename={file} --size={size} --rw=write --bs=1M --direct=1 --output=/dev/null"
            );
            // fio's JSON on stdout: the first "iops" is its read section's.
            let run = format!(
                "{set} && {count0} && fio --name=randread --filename={file} --size={size} --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth={} --time_based --runtime={} --output-format=json && {count1}",
                args.iodepth, args.seconds
            );
            let parser = with_requests(&[("iops", r#""iops" : ([0-9.]+)"#)]);
            (vec![layout], Vec::new(), run, parser, "iops".to_owned(), vec!["fio".to_owned()])
        }
        (None, _) => {
            let pg = dir.join("pg.sh");
            std::fs::write(&pg, PG_SH)?;
            std::fs::set_permissions(&pg, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let state = format!("{fs}/pg");
            let pg = format!("KANSOKU_PG_STATE={state} {}", pg.display());
            (
                vec![format!("{pg} init 10")],
                vec![format!("{pg} destroy")],
                format!(
                    "{set} && {pg} start '' && {count0} && pgbench -h {state} -p 15432 -U postgres -n -c 8 -j 2 -T {} bench; rc=$?; {count1}; {pg} stop; exit $rc",
                    args.seconds
                ),
                with_requests(&[("tps", r"tps = ([0-9.]+)"), ("latency_ms", r"latency average = ([0-9.]+) ms")]),
                "tps".to_owned(),
                vec!["postgresql".to_owned()],
            )
        }
    };
    let metric = args.metric.clone().unwrap_or(metric);
    let description = format!(
        "seed 003's degradation curve on a delayed block device (FUSE under a loop device, ext4): {}",
        args.run.as_deref().unwrap_or(&args.workload)
    );
    let exp = sweep(args, "latency-storage", description, packages, (setup, teardown), steps, run, parser);
    Ok((exp, metric))
}

/// `--run`'s parser (a preset or a regex) and the metric it gives first.
fn run_parser(args: &Args) -> anyhow::Result<(Parser, String)> {
    let parser = if ["wrk", "ab", "pgbench", "kansoku-load"].contains(&args.parser.as_str()) {
        Parser::Preset(args.parser.clone())
    } else {
        Parser::Spec(Spec {
            kind: "regex".into(),
            metrics: [(args.metric.clone().unwrap_or_else(|| "throughput".into()), args.parser.clone())].into(),
            from: None,
        })
    };
    let first = parser.spec().map_err(anyhow::Error::msg)?.metrics.keys().next().cloned().unwrap_or_default();
    Ok((parser, args.metric.clone().unwrap_or(first)))
}

fn write(args: &Args, doc: &Value) -> anyhow::Result<()> {
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_vec_pretty(doc)?).with_context(|| format!("write {}", path.display()))?;
        if doc.get("curve").is_some() {
            let page = path.with_extension("html");
            let html = crate::report::render(&[(path.display().to_string(), doc.clone())])?;
            std::fs::write(&page, html).with_context(|| format!("write {}", page.display()))?;
            result!("result: {} and {}", path.display(), page.display());
        } else {
            result!("result: {}", path.display());
        }
    }
    Ok(())
}

/// The experiment for the workload: parameter `delay_ns` over `steps`.
fn experiment_for(args: &Args, lib: &Path, steps: &[u64], dir: &Path) -> anyhow::Result<(Experiment, String)> {
    let env = format!(
        "export LD_PRELOAD={} KANSOKU_DELAY_NS={{delay_ns}} KANSOKU_DELAY_CALLS={};",
        lib.display(),
        args.calls
    );
    let (setup, teardown, run, parser, metric) = match &args.run {
        None => {
            let pg = dir.join("pg.sh");
            std::fs::write(&pg, PG_SH)?;
            std::fs::set_permissions(&pg, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let pg = pg.display().to_string();
            (
                vec![format!("{pg} init 10")],
                vec![format!("{pg} destroy")],
                // The server gets the injector; pgbench and the stop do not.
                format!(
                    "({env} {pg} start '') && pgbench -h /tmp/kansoku-exp-pg -p 15432 -U postgres -n -c 8 -j 2 -T {} bench; rc=$?; {pg} stop; exit $rc",
                    args.seconds
                ),
                Parser::Preset("pgbench".into()),
                args.metric.clone().unwrap_or_else(|| "tps".into()),
            )
        }
        Some(cmd) => {
            let (parser, metric) = run_parser(args)?;
            let cmd = cmd.replace('{', "{{").replace('}', "}}");
            (Vec::new(), Vec::new(), format!("{env} {cmd}"), parser, metric)
        }
    };
    let description = format!(
        "seed 003's degradation curve: {} with {} delayed",
        args.run.as_deref().unwrap_or("pgbench"),
        args.calls
    );
    let packages = if args.run.is_none() { vec!["postgresql".into()] } else { Vec::new() };
    let exp = sweep(args, "latency", description, packages, (setup, teardown), steps, run, parser);
    Ok((exp, metric))
}

/// The sweep of `delay_ns` over `steps` as an experiment, with the host's
/// telemetry over each run when `--telemetry` names a kansoku.
#[allow(clippy::too_many_arguments, reason = "one constructor for the three injectors' sweeps, each argument named")]
fn sweep(
    args: &Args,
    name: &str,
    description: String,
    packages: Vec<String>,
    (setup, teardown): (Vec<String>, Vec<String>),
    steps: &[u64],
    run: String,
    parser: Parser,
) -> Experiment {
    let telemetry = args.telemetry.as_ref().map(|server| experiment::spec::Telemetry {
        server: Some(server.clone()),
        metrics: [
            ("host_cpu_busy", r#"sum(rate(node_cpu_seconds_total{mode!="idle"}[{window}]))"#),
            ("host_iowait", r#"sum(rate(node_cpu_seconds_total{mode="iowait"}[{window}]))"#),
            ("host_disk_reads_per_s", "sum(rate(node_disk_reads_completed_total[{window}]))"),
            ("host_disk_writes_per_s", "sum(rate(node_disk_writes_completed_total[{window}]))"),
            ("host_context_switches_per_s", "sum(rate(node_context_switches_total[{window}]))"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    });
    Experiment {
        name: name.into(),
        description,
        packages,
        setup,
        teardown,
        parameters: [("delay_ns".to_owned(), steps.iter().map(|&s| toml::Value::Integer(s as i64)).collect())].into(),
        workload: Workload {
            run,
            parser,
            repetitions: args.repetitions,
            warmup: args.warmup,
            randomize: true,
            timeout: Some("10m".into()),
        },
        telemetry,
    }
}

/// A duration of whole seconds, at least one, as pgbench's `-T` and fio's
/// `--runtime` take it; written like every other duration (`10s`, `1m`).
fn parse_whole_seconds(s: &str) -> Result<u64, String> {
    if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
        return Err(format!("{s}: give a duration with its unit, e.g. {s}s"));
    }
    let d = model::parse_duration(s).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        return Err(format!("{s}: whole seconds, at least 1s (pgbench and fio take seconds)"));
    }
    Ok(d.as_secs())
}

#[cfg(test)]
mod tests {
    /// `--seconds` is a duration like every other (issue 46: it alone took
    /// a bare number), in whole seconds as pgbench and fio take them.
    #[test]
    fn seconds_are_a_duration_of_whole_seconds() {
        assert_eq!(super::parse_whole_seconds("10s"), Ok(10));
        assert_eq!(super::parse_whole_seconds("1m"), Ok(60));
        assert!(super::parse_whole_seconds("3").unwrap_err().contains("e.g. 3s"));
        assert!(super::parse_whole_seconds("1500ms").unwrap_err().contains("whole seconds"));
        assert!(super::parse_whole_seconds("0s").is_err());
    }
}
