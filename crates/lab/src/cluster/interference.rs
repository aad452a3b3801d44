//! `kansoku lab interference`: the second experiment of seeds/000. CPU
//! benchmarks (7-Zip's, and stress-ng / sysbench CPU tests standing in for
//! UnixBench's dhrystone and whetstone) run alone and beside per-CPU
//! sampling at each rate, repeated with the configurations interleaved, in
//! a shuffled order each repetition, so drift of the shared machine falls on
//! all alike:
//! - `none`: the benchmark alone;
//! - `kernel`: sampling events open on every CPU at the rate, their rings
//!   never read: the kernel's own cost of sampling, which no reader avoids;
//! - `kansoku`: `kansoku agent --perf RATE` (sampling, encoding, spooling,
//!   shipping; host metrics every 100 ms too) to a `kansoku server` on this
//!   machine;
//! - `perf`: `perf record -e cpu-clock -F RATE -a` around the benchmark, the
//!   peer;
//! - `transfer`: the benchmark beside `lab transfer`'s replay of every CPU
//!   here at 10 kHz (set mode): the transfer's stretch factor is its time to
//!   durable here over the same replay on an idle machine (the paper: 1.04 -
//!   1.38x).
//!
//! Degradation = 1 - median score / median score alone, per benchmark.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use crate::out::result;
use crate::transfer::{Proc, server};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Benchmarks, `;` separated; each is scored from its own output
    /// (7-Zip's total rating, stress-ng's bogo ops/s, sysbench's events/s),
    /// anything else by 1 / its wall time.
    #[arg(
        long,
        value_delimiter = ';',
        default_value = "7z b 1 -mmt2 -md18;stress-ng --cpu 0 --cpu-method int64 -t 6s --metrics-brief;stress-ng --cpu 0 --cpu-method double -t 6s --metrics-brief;sysbench cpu --threads=2 --time=6 run"
    )]
    workload: Vec<String>,
    /// Sampling rates per CPU (Hz); 0 is the benchmark alone.
    #[arg(long, value_delimiter = ',', default_value = "0,1000,10000")]
    rates: Vec<u64>,
    /// Repetitions of every configuration.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Leave out the perf record peer.
    #[arg(long)]
    no_perf: bool,
    /// Leave out the transfer stretch runs.
    #[arg(long)]
    no_transfer: bool,
    /// Scratch directory.
    #[arg(long, default_value = "/tmp/kansoku-lab-interference")]
    dir: std::path::PathBuf,
    /// Write the results as JSON here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, PartialEq)]
enum Config {
    None,
    Kernel(u64),
    Kansoku(u64),
    Perf(u64),
    Transfer,
}

impl Config {
    fn name(&self) -> String {
        match self {
            Config::None => "none".into(),
            Config::Kernel(r) => format!("kernel@{r}"),
            Config::Kansoku(r) => format!("kansoku@{r}"),
            Config::Perf(r) => format!("perf@{r}"),
            Config::Transfer => "transfer@10000".into(),
        }
    }
}

/// The score of a benchmark run from its output (higher is better).
fn score(workload: &str, out: &str, wall: f64) -> anyhow::Result<f64> {
    let prog = workload.split_whitespace().next().unwrap_or("");
    let last_number = |line: &str| line.split_whitespace().filter_map(|w| w.parse::<f64>().ok()).next_back();
    let found = match prog {
        "7z" => out.lines().find(|l| l.starts_with("Tot:")).and_then(last_number),
        // metrc: [pid] cpu  bogo-ops  real  usr  sys  bogo-ops/s-real  bogo-ops/s-usr+sys
        "stress-ng" => out
            .lines()
            .find(|l| l.contains("metrc") && l.split_whitespace().nth(3) == Some("cpu"))
            .and_then(|l| l.split_whitespace().filter_map(|w| w.parse::<f64>().ok()).nth(4)),
        "sysbench" => out.lines().find(|l| l.contains("events per second:")).and_then(last_number),
        _ => return Ok(1.0 / wall),
    };
    found.with_context(|| format!("no score in the output of {workload:?}:\n{out}"))
}

/// Runs `workload` (through `prefix`, e.g. perf record) and scores it.
fn bench(workload: &str, prefix: &[String]) -> anyhow::Result<(f64, f64)> {
    let mut argv: Vec<String> = prefix.to_vec();
    argv.extend(workload.split_whitespace().map(str::to_owned));
    let t0 = Instant::now();
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {} (Debian: p7zip-full, stress-ng, sysbench, linux-perf)", argv[0]))?;
    let wall = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("{workload:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((score(workload, &text, wall)?, wall))
}

fn run_config(args: &Args, workload: &str, cfg: &Config, k: usize, ingest: &str) -> anyhow::Result<serde_json::Value> {
    let mut extra = json!({});
    let (s, wall) = match cfg {
        Config::None => bench(workload, &[])?,
        Config::Kernel(rate) => {
            let pc = perf::Config { period_ns: 1_000_000_000 / rate, ring_pages: 8, ..perf::Config::default() };
            let cap = perf::Capture::open(&pc).context("open sampling events")?;
            let r = bench(workload, &[])?;
            drop(cap);
            r
        }
        Config::Kansoku(rate) => {
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args([
                "agent",
                "--server",
                ingest,
                "--host",
                "interference",
                "--perf",
                &rate.to_string(),
                "--trace",
                "off",
            ])
            .arg("--data")
            .arg(args.dir.join(format!("agent-{k}")));
            let mut agent = Proc::spawn(cmd)?;
            agent.wait_for("perf: sampling every CPU")?;
            let c0 = agent.cpu();
            let r = bench(workload, &[])?;
            extra = json!({ "agent_cpu_share": (agent.cpu() - c0) / r.1 });
            agent.stop();
            r
        }
        Config::Perf(rate) => {
            let data = args.dir.join("perf.data");
            let prefix: Vec<String> = ["perf", "record", "-q", "-e", "cpu-clock", "-F", &rate.to_string(), "-a", "-o"]
                .iter()
                .map(|s| (*s).to_owned())
                .chain([data.display().to_string(), "--".into()])
                .collect();
            bench(workload, &prefix)?
        }
        Config::Transfer => {
            let replay = crate::replay::Background::start(&args.dir, &replay_template(&args.dir)?)?;
            let r = bench(workload, &[])?;
            extra = json!({ "transfer_ms": replay.finish()? * 1e3 });
            r
        }
    };
    Ok(json!({ "config": cfg.name(), "score": s, "seconds": wall, "extra": extra }))
}

fn replay_template(dir: &Path) -> anyhow::Result<codec::events::EventBatch> {
    let path = dir.join("template.txt");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(_) => {
            let t = perf::script::record(dir, 10_000, &["stress-ng", "--cpu", "0", "--timeout", "3s", "--quiet"])?;
            std::fs::write(&path, &t)?;
            t
        }
    };
    crate::replay::core_second(&perf::script::parse(&text, 0)?)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.repeat == 0 || args.workload.is_empty() {
        bail!("--repeat {} with {} workloads: nothing to measure", args.repeat, args.workload.len());
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let mut configs = vec![Config::None];
    for &r in args.rates.iter().filter(|&&r| r > 0) {
        configs.push(Config::Kernel(r));
        configs.push(Config::Kansoku(r));
        if !args.no_perf {
            configs.push(Config::Perf(r));
        }
    }
    let idle_transfer_ms = if args.no_transfer {
        None
    } else {
        configs.push(Config::Transfer);
        let replay = crate::replay::Background::start(&args.dir, &replay_template(&args.dir)?)?;
        std::thread::sleep(Duration::from_secs(5)); // the idle machine's transfer, as long as a benchmark
        Some(replay.finish()? * 1e3)
    };
    if let Some(ms) = idle_transfer_ms {
        result!("transfer on an idle machine (every CPU here at 10 kHz, set mode): {ms:.2} ms to durable");
    }
    let srv = server(&args.dir.join("server"))?;
    let mut results = Vec::new();
    let mut order = configs.clone();
    let mut k = 0;
    for workload in &args.workload {
        let mut runs: Vec<serde_json::Value> = Vec::new();
        for rep in 0..args.repeat {
            // A different order each repetition (rotated), so no
            // configuration always follows the same one.
            order.rotate_left(rep.min(1));
            for cfg in &order {
                k += 1;
                let r = run_config(args, workload, cfg, k, &srv.ingest)?;
                eprintln!(
                    "  {workload:<60} rep {rep} {:<16} score {:.2}",
                    cfg.name(),
                    r["score"].as_f64().unwrap_or(0.0)
                );
                runs.push(r);
            }
        }
        let scores = |name: &str| -> Vec<f64> {
            runs.iter().filter(|r| r["config"] == name).filter_map(|r| r["score"].as_f64()).collect()
        };
        let base = median(&mut scores("none"));
        let mut rows = Vec::new();
        for cfg in &configs {
            let mut s = scores(&cfg.name());
            let m = median(&mut s);
            let degradation = (1.0 - m / base) * 100.0;
            let mut row =
                json!({ "config": cfg.name(), "median_score": m, "scores": s, "degradation_percent": degradation });
            if *cfg == Config::Transfer
                && let Some(idle) = idle_transfer_ms
            {
                let mut t: Vec<f64> = runs
                    .iter()
                    .filter(|r| r["config"] == cfg.name().as_str())
                    .filter_map(|r| r["extra"]["transfer_ms"].as_f64())
                    .collect();
                row["transfer_stretch"] = json!(median(&mut t) / idle);
            }
            if let Config::Kansoku(_) = cfg {
                let mut c: Vec<f64> = runs
                    .iter()
                    .filter(|r| r["config"] == cfg.name().as_str())
                    .filter_map(|r| r["extra"]["agent_cpu_share"].as_f64())
                    .collect();
                row["agent_cpu_share"] = json!(median(&mut c));
            }
            rows.push(row);
        }
        result!("{workload}:");
        for r in &rows {
            result!(
                "  {:<16} median {:>12.2}  degradation {:>6.2} %{}",
                r["config"].as_str().unwrap_or(""),
                r["median_score"].as_f64().unwrap_or(f64::NAN),
                r["degradation_percent"].as_f64().unwrap_or(f64::NAN),
                match (r["transfer_stretch"].as_f64(), r["agent_cpu_share"].as_f64()) {
                    (Some(s), _) => format!("  transfer stretch {s:.2}x"),
                    (_, Some(c)) => format!("  agent CPU {:.2} % of a core", c * 100.0),
                    _ => String::new(),
                }
            );
        }
        results.push(json!({ "workload": workload, "rows": rows, "runs": runs }));
    }
    srv.proc.stop();
    if let Some(out) = &args.out {
        let doc = json!({
            "machine": crate::machine(),
            "repeat": args.repeat,
            "idle_transfer_ms": idle_transfer_ms,
            "results": results,
        });
        std::fs::write(out, serde_json::to_string_pretty(&doc)?).with_context(|| format!("write {}", out.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_come_from_each_benchmarks_output() {
        let z = "Avr:      4548    78   5172   4052  |      30547    98   2512   2470\nTot:              88   3842   3261\n";
        assert_eq!(score("7z b 1", z, 1.0).unwrap(), 3261.0);
        let s = "stress-ng: metrc: [21621] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\n\
                 stress-ng: metrc: [21621] cpu                3562      3.00      3.07      0.00      1185.79        1159.58\n";
        assert_eq!(score("stress-ng --cpu 2", s, 1.0).unwrap(), 1185.79);
        assert_eq!(score("sysbench cpu run", "    events per second:  2459.98\n", 1.0).unwrap(), 2459.98);
        assert_eq!(score("sleep 1", "", 0.5).unwrap(), 2.0);
        assert!(score("7z b", "no total here", 1.0).is_err());
    }
}
