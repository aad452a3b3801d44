//! `kansoku lab promql`: PromQL's heavier range queries on the same data in
//! `kansoku server` and a real Prometheus 2.42, over HTTP, in one run: the
//! long `*_over_time` windows the minute tier answers (at 100 ms steps, the
//! case that was slower than Prometheus, issue 43), a raw window beside
//! them, each query's median time of `--repeat` runs on each side, their
//! ratio, and whether the two answers are equal (to 1e-9).
//!
//! The data: `fast` and `gauge` series at 10 Hz, `temp` at 1 Hz, over
//! `--span`, written to kansoku's store (blocks flushed, tiers with them)
//! and to Prometheus by `promtool tsdb create-blocks-from openmetrics`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

use crate::cluster::transfer::Proc;
use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How much data: `fast` and `gauge` at 10 Hz, `temp` at 1 Hz.
    #[arg(long, default_value = "40m", value_parser = model::parse_duration)]
    span: Duration,
    /// Series of each metric.
    #[arg(long, default_value_t = 4)]
    series: usize,
    /// Runs of each query on each side; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Working directory (the two data directories; removed first).
    #[arg(long, default_value = "/tmp/kansoku-lab-promql")]
    dir: PathBuf,
    /// Another `kansoku` binary to measure beside this one (an older
    /// build: the same data directory, one more column).
    #[arg(long)]
    also: Option<PathBuf>,
}

/// `kansoku server` of `binary` on the data directory `data`: (the process,
/// its Prometheus API base URL).
fn serve(binary: &Path, data: &Path, extra: &[&str]) -> anyhow::Result<(Proc, String)> {
    let mut cmd = Command::new(binary);
    cmd.args(["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0", "--data"]).arg(data).args(extra);
    let mut proc = Proc::spawn(cmd)?;
    let line = proc.wait_for("listening on http://")?;
    let http = line.split("listening on http://").nth(1).and_then(|r| r.split([',', ' ']).next()).context("address")?;
    Ok((proc, format!("http://{http}/prometheus")))
}

const SEC: i64 = 1_000_000_000;

/// (metric, samples per second).
const METRICS: [(&str, i64); 3] = [("fast", 10), ("gauge", 10), ("temp", 1)];

/// The value of series `k` of `metric` at sample `i`: a random walk, a wave
/// with noise, a slow drift; decimals, as measurements are.
fn value(metric: &str, k: usize, i: i64, rng: &mut fastrand::Rng) -> f64 {
    let x = match metric {
        "fast" => 50.0 + (i as f64 / 37.0 + k as f64).sin() * 30.0 + rng.f64() * 5.0,
        "gauge" => 1000.0 * (1.0 + (i as f64 / 600.0).sin()) + rng.f64() * 100.0,
        _ => 20.0 + k as f64 + (i as f64 / 900.0).cos() * 3.0,
    };
    (x * 100.0).round() / 100.0
}

/// Writes the data to kansoku's store (flushed) and as OpenMetrics text.
fn write_data(args: &Args, t0: i64, kansoku: &Path, om: &Path) -> anyhow::Result<usize> {
    let store = Store::open(kansoku, Options { fsync: FsyncPolicy::Never, ..Options::default() })?;
    let mut app = Appender::default();
    let mut rng = fastrand::Rng::with_seed(43);
    let span_s = args.span.as_secs() as i64;
    let mut out = std::io::BufWriter::new(std::fs::File::create(om)?);
    let mut samples = 0;
    // One metric at a time for the OpenMetrics text (families are contiguous
    // there), the store in time order per metric.
    for (m, (metric, hz)) in METRICS.iter().enumerate() {
        let mut lines: Vec<Vec<String>> = vec![Vec::new(); args.series];
        for i in 0..span_s * hz {
            let t = t0 + i * SEC / hz;
            let mut b = Batch::new(Timestamp(t));
            if i == 0 {
                b.defs = (0..args.series)
                    .map(|k| ((m * args.series + k) as u32, SeriesKey::new(*metric, [("k", k.to_string())])))
                    .collect();
            }
            for (k, series_lines) in lines.iter_mut().enumerate() {
                let v = value(metric, k, i, &mut rng);
                b.points.push(((m * args.series + k) as u32, v));
                series_lines.push(format!("{metric}{{k=\"{k}\"}} {v} {}.{:03}", t / SEC, t % SEC / 1_000_000));
            }
            samples += args.series;
            store.append(&mut app, &b)?;
        }
        for l in lines.into_iter().flatten() {
            writeln!(out, "{l}")?;
        }
    }
    writeln!(out, "# EOF")?;
    out.flush()?;
    store.flush()?;
    Ok(samples)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A query's answer as labels -> [(time ms, value)], to compare the sides.
fn answer(body: &str) -> anyhow::Result<BTreeMap<String, Vec<(i64, f64)>>> {
    let v: serde_json::Value = serde_json::from_str(body).with_context(|| format!("not JSON: {body:.200}"))?;
    if v["status"] != "success" {
        bail!("query failed: {body:.300}");
    }
    let mut out = BTreeMap::new();
    for s in v["data"]["result"].as_array().context("no result")? {
        let pts = s["values"]
            .as_array()
            .context("no values")?
            .iter()
            .map(|p| {
                let t = (p[0].as_f64().unwrap_or(f64::NAN) * 1000.0).round() as i64;
                (t, p[1].as_str().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN))
            })
            .collect();
        out.insert(s["metric"].to_string(), pts);
    }
    Ok(out)
}

fn equal(a: &BTreeMap<String, Vec<(i64, f64)>>, b: &BTreeMap<String, Vec<(i64, f64)>>) -> bool {
    let close = |x: f64, y: f64| x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs());
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, pa), (kb, pb))| {
            ka == kb && pa.len() == pb.len() && pa.iter().zip(pb).all(|(x, y)| x.0 == y.0 && close(x.1, y.1))
        })
}

/// Runs `path` `n` times; (median ms, the last body).
fn timed(base: &str, path: &str, n: usize) -> anyhow::Result<(f64, String)> {
    let agent = client::agent();
    let mut ms = Vec::with_capacity(n);
    let mut body = String::new();
    for _ in 0..n.max(1) {
        let t = Instant::now();
        let mut r = agent.get(format!("{base}{path}")).call().with_context(|| format!("GET {base}{path}"))?;
        body = r.body_mut().with_config().limit(1 << 30).read_to_string()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok((ms[ms.len() / 2], body))
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    for tool in ["prometheus", "promtool"] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("{tool} is missing: apt-get install prometheus (scripts/deps.sh test installs it)");
        }
    }
    if args.span < Duration::from_secs(35 * 60) {
        bail!("--span must be at least 35m: the longest window is 30 minutes");
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let (kdir, pdir, om) = (args.dir.join("kansoku"), args.dir.join("prometheus"), args.dir.join("data.om"));
    // Whole minutes, ending a minute ago (Prometheus reads the blocks as past).
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() as i64;
    let t0 = (now - args.span.as_secs() as i64 - 60) / 60 * 60 * SEC;
    let end = t0 + args.span.as_secs() as i64 * SEC;
    eprintln!("writing {} s of data …", args.span.as_secs());
    let samples = write_data(args, t0, &kdir, &om)?;
    let out =
        Command::new("promtool").args(["tsdb", "create-blocks-from", "openmetrics"]).arg(&om).arg(&pdir).output()?;
    if !out.status.success() {
        bail!("promtool: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_file(&om);
    let port = free_port()?;
    let config = args.dir.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 15s\n")?;
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", pdir.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--storage.tsdb.retention.time=100y");
    let mut prom = Proc::spawn(cmd)?;
    prom.wait_for("Server is ready to receive web requests")?;
    let exe = std::env::current_exe()?;
    let (kansoku, kbase) = serve(&exe, &kdir, &[])?;
    let pbase = format!("http://127.0.0.1:{port}");
    result!("promql: {samples} samples ({} series), {}", METRICS.len() * args.series, crate::machine_line());
    // (query, range back from the end, step in ms).
    let queries: [(&str, i64, i64); 8] = [
        // Long windows at whole-minute steps: whole tier periods and
        // (nearly) no ragged edges.
        ("avg_over_time(fast[30m])", 600, 60_000),
        ("max_over_time(gauge[30m])", 600, 60_000),
        // Dense steps: the edges cover the range, raw samples answer.
        ("avg_over_time(fast[5m])", 300, 100),
        ("max_over_time(gauge[5m])", 300, 100),
        ("sum_over_time(fast[10m])", 600, 1_000),
        ("max_over_time(temp[30m])", 1_800, 1_000),
        ("count_over_time(gauge[4m])", 300, 100),
        ("avg_over_time(fast[3m])", 300, 100),
    ];
    let ms = |ns: i64| format!("{}.{:03}", ns / SEC, ns % SEC / 1_000_000);
    let mut all_equal = true;
    let mut times = Vec::new();
    for (q, back, step_ms) in queries {
        let path = format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={}",
            client::escape(q),
            ms(end - back * SEC),
            ms(end),
            step_ms as f64 / 1000.0
        );
        // Warm both (page cache, first compilation of the selector).
        timed(&pbase, &path, 1)?;
        timed(&kbase, &path, 1)?;
        let (p_ms, p_body) = timed(&pbase, &path, args.repeat)?;
        let (k_ms, k_body) = timed(&kbase, &path, args.repeat)?;
        let same = equal(&answer(&p_body)?, &answer(&k_body)?);
        all_equal &= same;
        let steps = back * 1000 / step_ms + 1;
        result!(
            "{q:<28} {steps:>5} steps of {step_ms} ms: kansoku {k_ms:>8.1} ms, prometheus {p_ms:>8.1} ms, {:>5.2}x {}",
            p_ms / k_ms,
            if same { "equal" } else { "DIFFERENT" }
        );
        times.push((q, path));
    }
    kansoku.stop();
    // The same build reading raw samples only (`--tiers none`: the tier
    // path must never be slower), then the other build (one server at a
    // time: 2 cores).
    let others = std::iter::once((exe.clone(), "raw samples only", vec!["--tiers", "none"]))
        .chain(args.also.iter().map(|a| (a.clone(), "--also", vec![])));
    for (binary, what, extra) in others {
        let (other, obase) = serve(&binary, &kdir, &extra)?;
        for (q, path) in &times {
            timed(&obase, path, 1)?;
            let (o_ms, o_body) = timed(&obase, path, args.repeat)?;
            let (_, p_body) = timed(&pbase, path, 1)?;
            let same = equal(&answer(&p_body)?, &answer(&o_body)?);
            all_equal &= same || what == "--also";
            result!(
                "{q:<28} {what} ({}): {o_ms:>8.1} ms {}",
                binary.display(),
                if same { "equal" } else { "DIFFERENT" }
            );
        }
        other.stop();
    }
    prom.stop();
    let _ = std::fs::remove_dir_all(&args.dir);
    if !all_equal {
        bail!("kansoku and Prometheus answered differently (above)");
    }
    Ok(())
}
