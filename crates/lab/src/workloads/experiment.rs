//! `kansoku lab run EXPERIMENT.toml` and `kansoku lab compare A.json B.json`
//! (crate `experiment` holds the file format, the environment, the parsers
//! and the statistics): the set-up, every point of the sweep in a
//! randomised order each round (warm-up rounds first, not counted), each
//! run's own output read into metrics, the tear-down always; progress and
//! the time left on the terminal; the result as JSON with the environment
//! and, per run, its time range — the telemetry of the run is that range on
//! the dashboard (`--dashboard URL` prints the links).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use experiment::{Experiment, Point, environment, spec, stats};
use serde_json::{Value, json};

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The experiment file (TOML; docs/experiments.md).
    file: PathBuf,
    /// Where the result goes (default: NAME-UNIXTIME.json here).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The order's seed (printed; the same seed repeats an order).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the commands in the order they would run; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// A kansoku dashboard (http://host:7070) to link each run's time range
    /// to (default: the telemetry server, if any).
    #[arg(long)]
    dashboard: Option<String>,
    /// The host whose view the links open (default: this machine's name,
    /// the `host` label `kansoku up` gives it).
    #[arg(long)]
    dashboard_host: Option<String>,
    /// The kansoku whose series the file's [telemetry] metrics are read
    /// from (overrides telemetry.server).
    #[arg(long)]
    telemetry: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The baseline result.
    a: PathBuf,
    /// The result compared with it.
    b: PathBuf,
    /// A change is called significant below this p-value.
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
}

/// Runs one shell command in `dir` for at most `timeout`; (exit code or
/// None when killed, stdout + stderr). A timeout kills the shell and every
/// process under it: what the command started in the background would
/// otherwise hold the output pipes open, and the run would wait for it past
/// the timeout. (The shell stays in our process group, so a Ctrl-C reaches
/// the workload too.)
fn shell(cmd: &str, dir: &Path, timeout: Duration) -> anyhow::Result<(Option<i32>, String)> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start sh -c {cmd:?}"))?;
    let readers: Vec<_> = [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut r| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    })
    .collect();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let waiter = std::thread::spawn(move || {
        let st = child.wait();
        let _ = tx.send(());
        st
    });
    let killed = rx.recv_timeout(timeout).is_err();
    if killed {
        for p in crate::procs::process_tree(&[pid]) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let status = waiter.join().map_err(|_| anyhow::anyhow!("waiting for {cmd:?}"))??;
    let text: String = readers.into_iter().map(|r| r.join().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    Ok((if killed { None } else { status.code() }, text))
}

/// A run's placeholder values: its point's parameters, `{out}`, `{dir}`, `{rep}`.
fn placeholders<'a>(p: &'a Point, round: usize, out: &Path, dir: &Path) -> BTreeMap<&'a str, String> {
    let mut v: BTreeMap<&str, String> = p.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    v.insert("out", out.display().to_string());
    v.insert("dir", dir.display().to_string());
    v.insert("rep", round.to_string());
    v.insert("kansoku", kansoku());
    v
}

/// This binary, for `{kansoku}`.
fn kansoku() -> String {
    std::env::current_exe().map_or_else(|_| "kansoku".into(), |p| p.display().to_string())
}

fn point_label(p: &Point) -> String {
    if p.is_empty() {
        return "(no parameters)".into();
    }
    p.iter().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join(" ")
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let mut exp = Experiment::load(&args.file).map_err(anyhow::Error::msg)?;
    let dir = args.file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).canonicalize()?;
    let seed = args.seed.unwrap_or_else(|| clock::realtime_ns() as u64);
    if let Some(url) = &args.telemetry {
        match &mut exp.telemetry {
            Some(t) => t.server = Some(url.clone()),
            None => bail!("--telemetry {url}: {} has no [telemetry] metrics to read", args.file.display()),
        }
    }
    let server = exp.telemetry.as_ref().and_then(|t| t.server.clone());
    let dashboard = args.dashboard.clone().or(server).map(|d| {
        let host = args.dashboard_host.clone().unwrap_or_else(model::hostname);
        format!("{}/#view=host&host={}", d.trim_end_matches('/'), client::escape(&host))
    });
    let Some((doc, failed)) = execute(&exp, &args.file, &dir, seed, args.dry_run, dashboard.as_deref())? else {
        return Ok(());
    };
    let runs = doc["runs"].as_array().map_or(0, Vec::len);
    let started = doc["started_ns"].as_i64().unwrap_or(0);
    let out =
        args.out.clone().unwrap_or_else(|| PathBuf::from(format!("{}-{}.json", exp.name, started / 1_000_000_000)));
    std::fs::write(&out, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("write {}", out.display()))?;
    let page = out.with_extension("html");
    let html = crate::report::render(&[(out.display().to_string(), doc.clone())])?;
    std::fs::write(&page, html).with_context(|| format!("write {}", page.display()))?;
    print_summary(doc["summary"].as_array().map_or(&[], Vec::as_slice));
    result!("result: {} and {} ({runs} runs, {failed} failed)", out.display(), page.display());
    if failed > 0 {
        bail!("{failed} of {runs} runs failed (their errors are in {})", out.display());
    }
    Ok(())
}

/// Carries out `exp` (its file at `file`, commands run in `dir`): set-up,
/// the runs in the seeded order, tear-down. Returns the result document
/// and how many runs failed; None for a dry run (the commands printed).
pub fn execute(
    exp: &Experiment,
    file: &Path,
    dir: &Path,
    seed: u64,
    dry_run: bool,
    dashboard: Option<&str>,
) -> anyhow::Result<Option<(Value, usize)>> {
    let points = exp.points();
    let w = &exp.workload;
    let rounds = w.warmup + w.repetitions;
    let order = spec::schedule(points.len(), rounds, w.randomize, seed);
    let timeout = exp.timeout().map_err(anyhow::Error::msg)?;
    eprintln!(
        "experiment {}: {} points x ({} warm-up + {} repetitions) = {} runs, order seed {seed}{}",
        exp.name,
        points.len(),
        w.warmup,
        w.repetitions,
        order.len(),
        if w.randomize { " (randomised each round)" } else { "" }
    );
    let scratch = tempfile::tempdir()?;
    if dry_run {
        for (k, &(round, p)) in order.iter().enumerate() {
            let out = scratch.path().join(format!("run-{k}.out"));
            let cmd = spec::expand(&w.run, &placeholders(&points[p], round, &out, dir)).map_err(anyhow::Error::msg)?;
            result!("[{}/{}] round {round}: {cmd}", k + 1, order.len());
        }
        return Ok(None);
    }
    let telemetry = match &exp.telemetry {
        Some(t) => {
            let server = t
                .server
                .clone()
                .context("[telemetry] names no server: add server = \"http://host:7070\" or give --telemetry URL")?;
            // Refused before any run: a missing observatory is not a run's failure.
            client::get_json(&server, "/api/v1/status", &[]).with_context(|| {
                format!("[telemetry] server {server}: start kansoku there (make up), or give --telemetry URL")
            })?;
            eprintln!("telemetry: {} metrics from {server} over each run's window", t.metrics.len());
            Some((server, &t.metrics))
        }
        None => None,
    };
    let env = environment::capture(&exp.packages, env!("CARGO_PKG_VERSION"));
    let started = clock::realtime_ns();
    let dir_only = BTreeMap::from([("dir", dir.display().to_string()), ("kansoku", kansoku())]);
    for cmd in &exp.setup {
        let cmd = spec::expand(cmd, &dir_only).map_err(anyhow::Error::msg)?;
        eprintln!("setup: {cmd}");
        let (code, text) = shell(&cmd, dir, timeout)?;
        if code != Some(0) {
            teardown(exp, dir, timeout);
            bail!(
                "setup {cmd:?} failed ({}):\n{}",
                code.map_or("timed out".into(), |c| format!("exit {c}")),
                text.trim()
            );
        }
    }
    let t0 = Instant::now();
    let mut runs = Vec::with_capacity(order.len());
    let result = (|| -> anyhow::Result<()> {
        for (k, &(round, p)) in order.iter().enumerate() {
            let out = scratch.path().join(format!("run-{k}.out"));
            let cmd = spec::expand(&w.run, &placeholders(&points[p], round, &out, dir)).map_err(anyhow::Error::msg)?;
            let warm = round < w.warmup;
            let from = clock::realtime_ns();
            let begun = Instant::now();
            let (code, text) = shell(&cmd, dir, timeout)?;
            let took = begun.elapsed();
            let to = clock::realtime_ns();
            let written = std::fs::read_to_string(&out).ok();
            let mut metrics = match code {
                Some(0) => w.parser.read(&text, written.as_deref()),
                Some(c) => Err(format!("exit {c}: {}", text.trim().lines().last().unwrap_or(""))),
                None => Err(format!("killed after {timeout:?}")),
            };
            if let (Ok(m), Some((server, exprs))) = (&mut metrics, &telemetry)
                && let Err(e) = read_telemetry(server, exprs, to, took, m)
            {
                metrics = Err(e);
            }
            let left = t0.elapsed().mul_f64((order.len() - k - 1) as f64 / (k + 1) as f64);
            let shown = match &metrics {
                Ok(m) => m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
                Err(e) => format!("FAILED: {e}"),
            };
            eprintln!(
                "[{}/{}] {} round {}{} {:.1} s: {shown}   (about {:.0} s left)",
                k + 1,
                order.len(),
                point_label(&points[p]),
                round + 1,
                if warm { " (warm-up)" } else { "" },
                took.as_secs_f64(),
                left.as_secs_f64()
            );
            let mut run = json!({
                "point": points[p], "round": round, "warmup": warm, "command": cmd,
                "from_ns": from, "to_ns": to, "seconds": took.as_secs_f64(),
            });
            match metrics {
                Ok(m) => run["metrics"] = json!(m),
                Err(e) => run["error"] = json!(e),
            }
            if let Some(d) = dashboard {
                run["dashboard"] = json!(format!("{d}&from={:.3}&to={:.3}", from as f64 / 1e9, to as f64 / 1e9));
            }
            runs.push(run);
        }
        Ok(())
    })();
    teardown(exp, dir, timeout);
    result?;
    let summary = summarise(&points, &runs);
    let failed = runs.iter().filter(|r| r.get("error").is_some()).count();
    let doc = json!({
        "experiment": exp, "file": file, "seed": seed, "environment": env,
        "started_ns": started, "ended_ns": clock::realtime_ns(), "runs": runs, "summary": summary,
    });
    Ok(Some((doc, failed)))
}

/// Each telemetry metric over a run that ended at `to_ns` after `window`,
/// added to `metrics`: the expression (its `{window}` the run's length) as
/// an instant query at the run's end; exactly one number, or why not.
fn read_telemetry(
    server: &str,
    exprs: &BTreeMap<String, String>,
    to_ns: i64,
    window: Duration,
    metrics: &mut BTreeMap<String, f64>,
) -> Result<(), String> {
    let time = format!("{:.9}", to_ns as f64 / 1e9);
    for (name, expr) in exprs {
        if metrics.contains_key(name) {
            return Err(format!("metric {name} is both the parser's and telemetry's"));
        }
        let query = spec::telemetry_query(expr, window);
        let doc = client::get_json(server, "/prometheus/api/v1/query", &[("query", &query), ("time", &time)])
            .map_err(|e| format!("telemetry {name} ({query}): {e:#}"))?;
        let data = &doc["data"];
        let value = match data["resultType"].as_str() {
            Some("scalar") => data["result"][1].as_str(),
            Some("vector") => match data["result"].as_array().map(Vec::as_slice) {
                Some([one]) => one["value"][1].as_str(),
                Some([]) => return Err(format!("telemetry {name} ({query}): no series in the run's window")),
                Some(more) => {
                    return Err(format!(
                        "telemetry {name} ({query}): {} series; aggregate them to one (sum, avg, max)",
                        more.len()
                    ));
                }
                None => None,
            },
            _ => None,
        };
        let v = value
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("telemetry {name} ({query}): not one number: {data}"))?;
        metrics.insert(name.clone(), v);
    }
    Ok(())
}

fn teardown(exp: &Experiment, dir: &Path, timeout: Duration) {
    let dir_only = BTreeMap::from([("dir", dir.display().to_string()), ("kansoku", kansoku())]);
    for cmd in &exp.teardown {
        let Ok(cmd) = spec::expand(cmd, &dir_only) else { continue };
        eprintln!("teardown: {cmd}");
        match shell(&cmd, dir, timeout) {
            Ok((Some(0), _)) => {}
            Ok((code, text)) => eprintln!("teardown {cmd:?} failed ({code:?}): {}", text.trim()),
            Err(e) => eprintln!("teardown {cmd:?}: {e:#}"),
        }
    }
}

/// Per point and metric, over the counted runs: n, median, min, max and
/// the values themselves (what `lab compare` tests).
fn summarise(points: &[Point], runs: &[Value]) -> Vec<Value> {
    points
        .iter()
        .map(|p| {
            let mut by_metric: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for r in runs.iter().filter(|r| r["point"] == json!(p) && r["warmup"] == json!(false)) {
                for (m, v) in r["metrics"].as_object().into_iter().flatten() {
                    by_metric.entry(m.clone()).or_default().push(v.as_f64().unwrap_or(f64::NAN));
                }
            }
            let metrics: BTreeMap<String, Value> = by_metric
                .into_iter()
                .map(|(m, v)| {
                    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (m, json!({"n": v.len(), "median": stats::median(&v), "min": min, "max": max, "values": v}))
                })
                .collect();
            json!({"point": p, "metrics": metrics})
        })
        .collect()
}

fn print_summary(summary: &[Value]) {
    result!("\n{:<40} {:<20} {:>4} {:>14} {:>14} {:>14}", "point", "metric", "n", "median", "min", "max");
    for s in summary {
        let point: Point = serde_json::from_value(s["point"].clone()).unwrap_or_default();
        for (m, v) in s["metrics"].as_object().into_iter().flatten() {
            result!(
                "{:<40} {m:<20} {:>4} {:>14.4} {:>14.4} {:>14.4}",
                point_label(&point),
                v["n"],
                v["median"].as_f64().unwrap_or(f64::NAN),
                v["min"].as_f64().unwrap_or(f64::NAN),
                v["max"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
}

fn load_result(path: &Path) -> anyhow::Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let doc: Value = serde_json::from_slice(&bytes).with_context(|| format!("{}: not a result", path.display()))?;
    if !doc["summary"].is_array() || !doc["environment"].is_object() {
        bail!("{}: not a result of `kansoku lab run` (no summary or environment)", path.display());
    }
    Ok(doc)
}

pub fn compare(args: &CompareArgs) -> anyhow::Result<()> {
    let (a, b) = (load_result(&args.a)?, load_result(&args.b)?);
    let (na, nb) = (a["experiment"]["name"].as_str().unwrap_or("?"), b["experiment"]["name"].as_str().unwrap_or("?"));
    result!("compare: {} ({na}) -> {} ({nb})", args.a.display(), args.b.display());
    if na != nb {
        eprintln!("note: different experiments; points are matched by their parameters");
    }
    let env = |d: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(d["environment"].clone()).unwrap_or_default()
    };
    let (ea, eb) = (env(&a), env(&b));
    let changed = environment::diff(&ea, &eb);
    if changed.is_empty() {
        result!("environment: the same");
    } else {
        result!("environment: {} differences", changed.len());
        for (k, x, y) in &changed {
            result!("  {k}: {} -> {}", x.unwrap_or("(none)"), y.unwrap_or("(none)"));
        }
    }
    result!(
        "\n{:<36} {:<18} {:>12} {:>12} {:>9} {:>22} {:>9}  verdict (Mann-Whitney U, alpha {})",
        "point",
        "metric",
        "median A",
        "median B",
        "change",
        "95% CI of B-A",
        "p",
        args.alpha
    );
    let mut matched = 0;
    for sa in a["summary"].as_array().into_iter().flatten() {
        let Some(sb) = b["summary"].as_array().into_iter().flatten().find(|s| s["point"] == sa["point"]) else {
            continue;
        };
        matched += 1;
        let point: Point = serde_json::from_value(sa["point"].clone()).unwrap_or_default();
        for (m, va) in sa["metrics"].as_object().into_iter().flatten() {
            let Some(vb) = sb["metrics"].get(m) else { continue };
            let values = |v: &Value| -> Vec<f64> {
                v["values"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect()
            };
            let (xa, xb) = (values(va), values(vb));
            let (ma, mb) = (stats::median(&xa), stats::median(&xb));
            let ci = stats::bootstrap_median_diff(&xa, &xb, 2000, 1);
            let test = stats::mann_whitney(&xa, &xb);
            let verdict = match test {
                Some(t) if t.p < args.alpha => {
                    if mb > ma {
                        "higher"
                    } else {
                        "lower"
                    }
                }
                Some(_) => "no significant change",
                None => "no data",
            };
            result!(
                "{:<36} {m:<18} {ma:>12.4} {mb:>12.4} {:>+8.2}% {:>22} {:>9}  {verdict}{}",
                point_label(&point),
                (mb - ma) / ma.abs() * 100.0,
                ci.map_or("-".into(), |(lo, hi)| format!("[{lo:.4}, {hi:.4}]")),
                test.map_or("-".into(), |t| format!("{:.4}", t.p)),
                test.filter(|t| !t.exact).map_or("", |_| " (normal approx.)")
            );
        }
    }
    if matched == 0 {
        bail!("no point of {} has the parameters of one of {}", args.b.display(), args.a.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that outlives its timeout in the background is killed with
    /// the shell: the call returns (the pipes closed) and the child is gone.
    #[test]
    fn a_timeout_kills_what_the_command_started() {
        let dir = tempfile::tempdir().unwrap();
        let (code, out) = shell("sleep 600 & echo $!; wait", dir.path(), Duration::from_millis(300)).unwrap();
        assert_eq!(code, None, "{out}");
        let pid: u32 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
        // Its output pipe closed, so it was killed: it closes its files on
        // its way out, before it is a zombie. Gone, a zombie, its pid
        // already reused by another program (a busy machine cycles pids
        // fast), or about to exit: its pidfd turns readable on the exit
        // itself.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let still_sleep = stat.contains("(sleep)");
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
        if still_sleep && !matches!(state, None | Some(Some('Z'))) {
            use rustix::event::{PollFd, PollFlags, Timespec, poll};
            let p = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
            if let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let exited = poll(&mut fds, Some(&Timespec { tv_sec: 10, tv_nsec: 0 })).unwrap();
                assert_eq!(exited, 1, "sleep {pid} still runs 10 s after its shell was killed: {state:?}");
            }
        }
        let (code, out) = shell("echo hi; exit 3", dir.path(), Duration::from_secs(60)).unwrap();
        assert_eq!((code, out.trim()), (Some(3), "hi"));
    }
}
