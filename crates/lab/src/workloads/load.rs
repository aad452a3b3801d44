//! `kansoku lab load URL`: HTTP load that tells the truth (crate `load`),
//! with progress each second, the figures per 100 ms (written to a kansoku
//! server as series with `--server`, so the peaks are seen on the
//! dashboard), and, with `--peers wrk,ab`, the same load from `wrk` and
//! ApacheBench in the same run: responses per second, latency percentiles
//! and CPU per response side by side, each tool's CPU taken from the
//! kernel's accounting of the process, as `top` sees it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use load::{Config, Outcome, Progress, Summary};
use serde_json::json;

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The URL to load: http://host[:port][/path].
    url: String,
    /// Connections open at once.
    #[arg(long, short = 'c', default_value_t = 50)]
    connections: usize,
    /// Worker threads (default: one per core).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    #[arg(long, short = 'd', default_value = "10s", value_parser = model::parse_duration)]
    duration: Duration,
    /// Open loop: this many requests per second in all, latency counted
    /// from when each was meant to leave (coordinated omission corrected).
    /// Without it: closed loop, each connection as fast as it is answered.
    #[arg(long, short = 'R')]
    rate: Option<f64>,
    /// A new connection per request (`Connection: close`), its connect
    /// counted in the latency.
    #[arg(long, conflicts_with = "http2")]
    no_keepalive: bool,
    /// HTTP/2 over cleartext TCP with prior knowledge (h2c), each
    /// connection one stream at a time.
    #[arg(long)]
    http2: bool,
    /// With --http2: requests in flight on each connection at once.
    #[arg(long, default_value_t = 1, requires = "http2")]
    streams: usize,
    /// A request without its whole response after this long fails.
    #[arg(long, default_value = "10s", value_parser = model::parse_duration)]
    timeout: Duration,
    /// Resolution of the per-interval figures.
    #[arg(long, default_value = "100ms", value_parser = model::parse_duration)]
    interval: Duration,
    /// An extra request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_parser = load::parse_header)]
    headers: Vec<String>,
    /// A kansoku server (http://host:port) to write the per-interval
    /// figures to, as `load_*{run=NAME}` series.
    #[arg(long)]
    server: Option<String>,
    /// The run's name in those series (default: load-UNIXTIME).
    #[arg(long)]
    run: Option<String>,
    /// The same load from these tools too, in the same run: wrk and ab
    /// (HTTP/1.1), h2load (HTTP/2).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Also write the result as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Run the load on these agents of --server instead of here, all
    /// starting at one instant (each agent started with `--jobs load`);
    /// their histograms are merged into one result. The URL is reached
    /// from each agent.
    #[arg(long, value_delimiter = ',', requires = "server", conflicts_with = "peers")]
    agents: Vec<String>,
    /// With --agents: how far ahead the common start is set (time for the
    /// job to reach every agent and for each to open its connections).
    #[arg(long, default_value = "1s", value_parser = model::parse_duration, requires = "agents")]
    start_in: Duration,
    /// With --agents: how long the server waits for each agent to be
    /// connected (with its clock measured) before giving the run up.
    #[arg(long, default_value = "10s", value_parser = model::parse_duration, requires = "agents")]
    agents_wait: Duration,
}

impl Args {
    /// The job an agent runs ([`load::job::Spec`]): the load itself,
    /// without what only the coordinator does (--server, --run, --peers,
    /// --json, --agents, --start-in, --agents-wait).
    fn spec(&self) -> load::job::Spec {
        load::job::Spec {
            url: self.url.clone(),
            headers: self.headers.clone(),
            connections: self.connections,
            threads: self.threads,
            duration: self.duration,
            rate: self.rate,
            keep_alive: !self.no_keepalive,
            http2: self.http2,
            streams: self.streams,
            timeout: self.timeout,
            interval: self.interval,
        }
    }

    /// The load generator's settings.
    fn config(&self) -> anyhow::Result<Config> {
        self.spec().config().map_err(anyhow::Error::msg)
    }
}
pub fn run(args: &Args) -> anyhow::Result<()> {
    if !args.agents.is_empty() {
        return run_agents(args);
    }
    for p in &args.peers {
        if !["wrk", "ab", "h2load"].contains(&p.as_str()) {
            bail!("--peers {p}: the peers are wrk, ab (HTTP/1.1) and h2load (HTTP/2)");
        }
    }
    let cfg = args.config()?;
    cfg.check().map_err(anyhow::Error::msg)?;
    let threads = cfg.threads;
    let mode = match args.rate {
        Some(r) => format!("open loop at {r} requests/s"),
        None => "closed loop".into(),
    };
    result!(
        "load: {} — {mode}, {} connections on {threads} threads, {:?}, {}; on {}",
        args.url,
        args.connections,
        args.duration,
        if cfg.http2 {
            if cfg.streams > 1 { "HTTP/2 (h2c), several streams a connection" } else { "HTTP/2 (h2c)" }
        } else if cfg.keep_alive {
            "keep-alive on"
        } else {
            "keep-alive off"
        },
        crate::machine_line()
    );
    // Refused before any load, with the reason, rather than a run of failures.
    std::net::TcpStream::connect_timeout(&cfg.target.addr, args.timeout)
        .with_context(|| format!("{}: cannot connect to {}", args.url, cfg.target.addr))?;
    let (out, cpu_ns, wall_start) = measure(&cfg, None, true)?;
    let ours = Side::of_kansoku(&out, cpu_ns);
    print_outcome(&out, cpu_ns, "this process");
    answered(&out, &args.url)?;
    let name = args.run.clone().unwrap_or_else(|| {
        format!("load-{}", wall_start.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()))
    });
    if let Some(server) = &args.server {
        let n = write_series(server, &name, &out, wall_start, args.interval)?;
        result!("series: {n} intervals written to {server} as load_*{{run=\"{name}\"}}");
    }
    let mut sides = vec![ours];
    for p in &args.peers {
        if args.rate.is_some() {
            eprintln!("{p}: skipped — it has no open-loop mode (wrk2 has; it is not packaged here)");
            continue;
        }
        if args.http2 != (p == "h2load") {
            eprintln!("{p}: skipped — it speaks {}", if p == "h2load" { "HTTP/2 only" } else { "HTTP/1.1 only" });
            continue;
        }
        match peer(p, args, threads) {
            Ok(side) => sides.push(side),
            Err(e) => eprintln!("{p}: skipped — {e:#}"),
        }
    }
    if sides.len() > 1 {
        print_sides(&sides);
    }
    if let Some(path) = &args.json {
        let doc = json!({
            "experiment": "load",
            "machine": crate::machine(),
            "url": args.url, "mode": mode, "connections": args.connections, "threads": threads,
            "duration_s": args.duration.as_secs_f64(), "keep_alive": cfg.keep_alive, "run": name,
            "result": outcome_json(&out, cpu_ns),
            "sides": sides.iter().map(Side::json).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// `--agents`: the load from several agents of a server, all starting at
/// one instant; their reports merged into one result, each agent's beside it.
fn run_agents(args: &Args) -> anyhow::Result<()> {
    use base64::Engine;
    let server = args.server.as_deref().context("--agents needs --server")?;
    // The URL is checked where it is reached: on each agent (a name only
    // the agents resolve is fine); a scheme we cannot load is refused here.
    if !args.url.starts_with("http://") {
        bail!("{:?}: give an http:// URL (https is not supported by this load generator yet)", args.url);
    }
    result!(
        "load: {} — from {} agents of {server} ({}), {} connections each, {:?}, starting together in {:?}",
        args.url,
        args.agents.len(),
        args.agents.join(", "),
        args.connections,
        args.duration,
        args.start_in
    );
    let timeout = args.duration + args.timeout + Duration::from_secs(30);
    let body = json!({"agents": args.agents, "args": args.spec().to_fields(), "start_in_s": args.start_in.as_secs_f64(),
                      "connect_timeout_s": args.agents_wait.as_secs_f64(), "timeout_s": timeout.as_secs_f64()});
    let t0 = Instant::now();
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let (start_in, total) = (args.start_in, args.duration);
    let ticker = std::thread::spawn(move || {
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(Duration::from_secs(1)) {
            let t = t0.elapsed().saturating_sub(start_in);
            if t0.elapsed() < start_in {
                eprintln!("  starting: waiting for the agents and the common instant");
            } else if t <= total {
                eprintln!("  {:>5.1} s of {:.0}: the agents are running", t.as_secs_f64(), total.as_secs_f64());
            } else {
                eprintln!("  {:>5.1} s: waiting for the agents' reports", t.as_secs_f64());
            }
        }
    });
    let answer = client::post_json(server, "/api/v1/jobs/load", &body);
    let _ = done_tx.send(());
    let _ = ticker.join();
    let answer = answer.context("the agents' load")?;
    let int = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<i64>().ok()).or_else(|| v.as_i64());
    let start_ns = int(&answer["start_ns"]).context("the server's answer has no start_ns")?;
    let mut agents = Vec::new();
    let mut errors = Vec::new();
    for a in answer["agents"].as_array().context("the server's answer has no agents")? {
        let host = a["host"].as_str().unwrap_or("?").to_owned();
        let Some(b64) = a["report"].as_str() else {
            errors.push(a["error"].as_str().unwrap_or("no report").to_owned());
            continue;
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .with_context(|| format!("agent {host}: its report is not base64"))?;
        let report = load::Report::decode(&bytes, t0).with_context(|| format!("agent {host}"))?;
        let offset_ns = a["offset_ns"].as_i64().unwrap_or(0);
        agents.push(AgentSide { host, offset_ns, rtt_ns: a["rtt_ns"].as_i64().unwrap_or(0), report });
    }
    if !errors.is_empty() {
        bail!("{} of {} agents gave no result: {}", errors.len(), args.agents.len(), errors.join("; "));
    }
    // On the server's clock: each agent's first instant, and its last response.
    let began = |a: &AgentSide| a.report.began_ns - a.offset_ns;
    let first = |a: &AgentSide| a.report.recorder.first_sent_ns.map(|f| began(a) + f as i64);
    let ends = agents.iter().map(|a| began(a) + a.report.elapsed.as_nanos() as i64);
    let elapsed = Duration::from_nanos(ends.max().unwrap_or(start_ns).saturating_sub(start_ns).max(1) as u64);
    let mut merged = load::Recorder::new(t0, args.interval);
    for a in &agents {
        merged.merge(&a.report.recorder);
    }
    let cpu_ns: i64 = agents.iter().map(|a| a.report.cpu_ns).sum();
    let out = Outcome { start: t0, recorder: merged, elapsed };
    let firsts: Vec<i64> = agents.iter().filter_map(first).collect();
    let spread_ms = match (firsts.iter().min(), firsts.iter().max()) {
        (Some(lo), Some(hi)) => Some((hi - lo) as f64 / 1e6),
        _ => None,
    };
    result!(
        "\n{:<16} {:>11} {:>9} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8}",
        "agent",
        "offset µs",
        "rtt µs",
        "late ms",
        "first ms",
        "responses/s",
        "p50 µs",
        "p99 µs",
        "cpu s"
    );
    for a in &agents {
        let m = Summary::of_ns(&a.report.recorder.corrected_ns);
        let rps = a.report.recorder.responses as f64 / a.report.elapsed.as_secs_f64().max(1e-9);
        result!(
            "{:<16} {:>11.1} {:>9.1} {:>10.3} {:>10} {:>12.1} {:>9.0} {:>9.0} {:>8.3}",
            a.host,
            a.offset_ns as f64 / 1e3,
            a.rtt_ns as f64 / 1e3,
            (began(a) - start_ns) as f64 / 1e6,
            first(a).map_or("-".into(), |f| format!("{:.3}", (f - start_ns) as f64 / 1e6)),
            rps,
            m.p50,
            m.p99,
            a.report.cpu_ns as f64 / 1e9
        );
    }
    if let Some(s) = spread_ms {
        result!("first requests of the agents within {s:.3} ms of each other (server clock, offsets applied)");
    }
    print_outcome(&out, cpu_ns, "the agents' processes");
    answered(&out, &args.url)?;
    let wall_start = SystemTime::UNIX_EPOCH + Duration::from_nanos(start_ns as u64);
    let name = args.run.clone().unwrap_or_else(|| format!("load-{}", start_ns / 1_000_000_000));
    let n = write_series(server, &name, &out, wall_start, args.interval)?;
    result!("series: {n} intervals written to {server} as load_*{{run=\"{name}\"}} (all agents merged)");
    if let Some(path) = &args.json {
        let doc = json!({
            "experiment": "load", "machine": crate::machine(),
            "url": args.url, "mode": if args.rate.is_some() { "open loop" } else { "closed loop" },
            "connections": args.connections, "duration_s": args.duration.as_secs_f64(),
            "keep_alive": !args.no_keepalive, "run": name, "start_ns": start_ns.to_string(),
            "first_requests_spread_ms": spread_ms,
            "result": outcome_json(&out, cpu_ns),
            "agents": agents.iter().map(|a| json!({
                "host": a.host, "offset_ns": a.offset_ns, "rtt_ns": a.rtt_ns,
                "began_late_ms": (began(a) - start_ns) as f64 / 1e6,
                "first_request_ms": first(a).map(|f| (f - start_ns) as f64 / 1e6),
                "result": outcome_json(&Outcome { start: t0, recorder: a.report.recorder.clone(), elapsed: a.report.elapsed }, a.report.cpu_ns),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// One agent's part of an `--agents` run.
struct AgentSide {
    host: String,
    offset_ns: i64,
    rtt_ns: i64,
    report: load::Report,
}

/// Runs the load (from `start`, or at once) with a line of progress each
/// second if `show`; returns the outcome, this process's CPU time over it,
/// and the wall-clock time it began.
fn measure(cfg: &Config, start: Option<Instant>, show: bool) -> anyhow::Result<(Outcome, i64, SystemTime)> {
    let progress = Arc::new(Progress::default());
    let cpu0 = clock::process_cpu_ns();
    let wall_start = SystemTime::now();
    let t0 = Instant::now();
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let shown = Arc::clone(&progress);
    let total = cfg.duration;
    let ticker = std::thread::spawn(move || {
        let mut last = 0u64;
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(Duration::from_secs(1)) {
            if !show {
                continue;
            }
            let n = shown.responses();
            let t = t0.elapsed();
            eprintln!(
                "  {:>5.1} s of {:.0}: {} responses/s, {} failures so far",
                t.as_secs_f64(),
                total.as_secs_f64(),
                n - last,
                shown.failures()
            );
            last = n;
        }
    });
    let out = match start {
        Some(at) => load::run_at(cfg, &progress, at),
        None => load::run(cfg, &progress),
    };
    let _ = done_tx.send(());
    let _ = ticker.join();
    let out = out.context("the load run")?;
    // The wall-clock time of the load's first instant.
    let began = wall_start + out.start.saturating_duration_since(t0);
    Ok((out, clock::process_cpu_ns() - cpu0, began))
}

/// Whether the run did what was asked: some responses, and not every one
/// an error status (a path answering 404 made 34,688 responses, "failures
/// 0", exit 0).
fn answered(out: &Outcome, url: &str) -> anyhow::Result<()> {
    let r = &out.recorder;
    if r.responses == 0 {
        bail!("no responses from {url}: {} requests failed (see above)", r.failures.total());
    }
    if r.status[1] + r.status[2] == 0 {
        bail!(
            "every response from {url} was an error status (4xx {}, 5xx {}, other {}): check the URL and the server",
            r.status[3],
            r.status[4],
            r.status[5]
        );
    }
    Ok(())
}

/// `whose`: whose CPU `cpu_ns` is (this process, or the agents').
fn print_outcome(out: &Outcome, cpu_ns: i64, whose: &str) {
    let r = &out.recorder;
    let s = &r.status;
    let f = &r.failures;
    result!(
        "\nresponses   {} (1xx {}, 2xx {}, 3xx {}, 4xx {}, 5xx {}, other {}) in {:.3} s",
        r.responses,
        s[0],
        s[1],
        s[2],
        s[3],
        s[4],
        s[5],
        out.elapsed.as_secs_f64()
    );
    result!(
        "failures    {} (connect {}, i/o {}, timeout {}, protocol {}); {} connections opened",
        f.total(),
        f.connect,
        f.io,
        f.timeout,
        f.protocol,
        r.connects
    );
    result!(
        "throughput  {:.1} responses/s, {:.2} MB/s of bodies ({} bytes), {} bytes on the wire",
        out.responses_per_second(),
        r.body_bytes as f64 / out.elapsed.as_secs_f64() / 1e6,
        r.body_bytes,
        r.wire_bytes
    );
    result!("latency µs  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}", "mean", "p50", "p90", "p99", "p99.9", "max");
    for (name, h) in [("intended", &r.corrected_ns), ("sent", &r.sent_ns), ("late", &r.late_ns)] {
        let m = Summary::of_ns(h);
        result!(
            "  {name:<9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            m.mean,
            m.p50,
            m.p90,
            m.p99,
            m.p999,
            m.max
        );
    }
    let per_s = |n: u64| n as f64 / r.interval().as_secs_f64();
    let full = &r.intervals[..r.intervals.len().saturating_sub(1)];
    if let (Some(lo), Some(hi)) = (full.iter().map(|i| i.responses).min(), full.iter().map(|i| i.responses).max()) {
        let worst = full.iter().enumerate().max_by_key(|(_, i)| i.latency_us.value_at_quantile(0.99));
        result!(
            "per {:?}  {:.0} .. {:.0} responses/s (mean {:.0}){}",
            r.interval(),
            per_s(lo),
            per_s(hi),
            out.responses_per_second(),
            worst.map_or(String::new(), |(k, i)| format!(
                "; worst p99 {} µs at {:.1} s",
                i.latency_us.value_at_quantile(0.99),
                k as f64 * r.interval().as_secs_f64()
            ))
        );
    }
    result!(
        "cpu         {:.3} s of {whose} (user + system): {:.0} responses per CPU-second",
        cpu_ns as f64 / 1e9,
        r.responses as f64 / (cpu_ns as f64 / 1e9).max(1e-9)
    );
}

fn outcome_json(out: &Outcome, cpu_ns: i64) -> serde_json::Value {
    let r = &out.recorder;
    let summary = |h| {
        let m = Summary::of_ns(h);
        json!({"mean": m.mean, "p50": m.p50, "p90": m.p90, "p99": m.p99, "p99.9": m.p999, "max": m.max})
    };
    json!({
        "responses": r.responses, "elapsed_s": out.elapsed.as_secs_f64(),
        "status": {"1xx": r.status[0], "2xx": r.status[1], "3xx": r.status[2], "4xx": r.status[3], "5xx": r.status[4], "other": r.status[5]},
        "failures": {"connect": r.failures.connect, "io": r.failures.io, "timeout": r.failures.timeout, "protocol": r.failures.protocol},
        "connects": r.connects, "body_bytes": r.body_bytes, "wire_bytes": r.wire_bytes,
        "responses_per_s": out.responses_per_second(), "cpu_s": cpu_ns as f64 / 1e9,
        "latency_us": {"from_intended": summary(&r.corrected_ns), "from_sent": summary(&r.sent_ns),
                       "sent_late_by": summary(&r.late_ns)},
        "interval_s": r.interval().as_secs_f64(),
        "intervals": r.intervals.iter().map(|i| json!({
            "responses": i.responses, "failures": i.failures, "body_bytes": i.body_bytes,
            "p50_us": i.latency_us.value_at_quantile(0.5), "p99_us": i.latency_us.value_at_quantile(0.99),
            "max_us": i.latency_us.max(),
        })).collect::<Vec<_>>(),
    })
}

/// The per-interval figures as line protocol to `server`'s `/write`
/// (`load_responses`, `load_failures`, `load_body_bytes`, `load_p50_us`,
/// `load_p99_us`, `load_max_us`, tagged `run`); returns the intervals written.
fn write_series(
    server: &str,
    run: &str,
    out: &Outcome,
    wall_start: SystemTime,
    interval: Duration,
) -> anyhow::Result<usize> {
    let r = &out.recorder;
    let t0 = wall_start.duration_since(SystemTime::UNIX_EPOCH)?.as_nanos() as i64;
    let tag = run.replace([' ', ',', '='], "_");
    let mut body = String::new();
    for (k, i) in r.intervals.iter().enumerate() {
        // Stamped at the interval's start (an end stamp of the last,
        // partial interval would lie in the future).
        let t = t0 + k as i64 * interval.as_nanos() as i64;
        body.push_str(&format!(
            "load,run={tag} responses={}i,failures={}i,body_bytes={}i,p50_us={}i,p99_us={}i,max_us={}i {t}\n",
            i.responses,
            i.failures,
            i.body_bytes,
            i.latency_us.value_at_quantile(0.5),
            i.latency_us.value_at_quantile(0.99),
            i.latency_us.max()
        ));
    }
    // The database first, as InfluxDB's clients do (a write to one that
    // does not exist is a 404); creating it again is harmless.
    let base = server.trim_end_matches('/');
    client::agent()
        .post(format!("{base}/query"))
        .send_form([("q", "CREATE DATABASE lab")])
        .with_context(|| format!("POST {base}/query: is kansoku running there?"))?;
    let url = format!("{base}/write?db=lab&precision=ns");
    let resp =
        ureq::post(&url).send(body.as_bytes()).with_context(|| format!("POST {url}: is kansoku running there?"))?;
    if resp.status().as_u16() != 204 {
        bail!("POST {url}: {}", resp.status());
    }
    Ok(r.intervals.len())
}

/// One tool's figures.
#[derive(Debug)]
struct Side {
    name: String,
    responses_per_s: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    max_us: Option<f64>,
    failures: u64,
    cpu_s: f64,
    responses: u64,
}

impl Side {
    fn of_kansoku(out: &Outcome, cpu_ns: i64) -> Side {
        let m = Summary::of_ns(&out.recorder.corrected_ns);
        Side {
            name: "kansoku".into(),
            responses_per_s: out.responses_per_second(),
            p50_us: Some(m.p50),
            p99_us: Some(m.p99),
            max_us: Some(m.max),
            failures: out.recorder.failures.total(),
            cpu_s: cpu_ns as f64 / 1e9,
            responses: out.recorder.responses,
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({"name": self.name, "responses_per_s": self.responses_per_s, "p50_us": self.p50_us,
               "p99_us": self.p99_us, "max_us": self.max_us, "failures": self.failures, "cpu_s": self.cpu_s,
               "responses": self.responses})
    }
}

fn print_sides(sides: &[Side]) {
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    result!(
        "\n{:<8} {:>12} {:>9} {:>9} {:>10} {:>9} {:>8} {:>14}",
        "tool",
        "responses/s",
        "p50 µs",
        "p99 µs",
        "max µs",
        "failures",
        "cpu s",
        "resp/CPU-s"
    );
    for s in sides {
        result!(
            "{:<8} {:>12.1} {:>9} {:>9} {:>10} {:>9} {:>8.3} {:>14.0}",
            s.name,
            s.responses_per_s,
            opt(s.p50_us),
            opt(s.p99_us),
            opt(s.max_us),
            s.failures,
            s.cpu_s,
            s.responses as f64 / s.cpu_s.max(1e-9)
        );
    }
}

/// The peer's command line for the same load.
fn peer_command(name: &str, args: &Args, threads: usize, secs: &str) -> std::process::Command {
    let c = args.connections.to_string();
    let threads = threads.min(args.connections).to_string();
    let mut cmd = std::process::Command::new(name);
    match name {
        "wrk" => {
            cmd.args(["-t", &threads, "-c", &c, "-d", &format!("{secs}s")]).args([
                "--latency",
                "--timeout",
                &format!("{}s", args.timeout.as_secs().max(1)),
            ]);
            if args.no_keepalive {
                cmd.args(["-H", "Connection: close"]);
            }
        }
        "h2load" => {
            cmd.args(["-c", &c, "-m", &args.streams.to_string(), "-t", &threads, "-D", secs]);
        }
        _ => {
            // -n: enough that the time limit ends the run (ab allocates
            // 32 bytes per request up front: 2e9 would be 64 GB).
            let n = (args.duration.as_secs().max(1) * 200_000).to_string();
            cmd.args(["-q", "-c", &c, "-t", secs, "-n", &n, "-s", &args.timeout.as_secs().max(1).to_string()]);
            if !args.no_keepalive {
                cmd.arg("-k");
            }
        }
    }
    for h in &args.headers {
        cmd.args(["-H", h]);
    }
    cmd.arg(&args.url);
    cmd
}

/// The same load from a peer tool, its CPU from the kernel's accounting of
/// children (`getrusage(RUSAGE_CHILDREN)` around its whole run).
fn peer(name: &str, args: &Args, threads: usize) -> anyhow::Result<Side> {
    let secs = args.duration.as_secs().max(1).to_string();
    let mut cmd = peer_command(name, args, threads, &secs);
    eprintln!("{name}: the same load ({secs} s) …");
    let before = children_cpu_s();
    let out = cmd.output().with_context(|| {
        let package = match name {
            "ab" => "apache2-utils",
            "h2load" => "nghttp2-client",
            other => other,
        };
        format!("run {name} (on Debian: apt-get install {package})")
    })?;
    let cpu_s = children_cpu_s() - before;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("{name} exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let side = match name {
        "wrk" => parse_wrk(&text),
        "h2load" => parse_h2load(&text),
        _ => parse_ab(&text),
    };
    side.map(|s| Side { cpu_s, ..s }).with_context(|| format!("reading {name}'s report:\n{text}"))
}

fn children_cpu_s() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        tv(u.user_time()) + tv(u.system_time())
    })
}

/// A wrk duration (`1.23ms`, `45.6us`, `2.00s`, `1.5m`) in µs.
fn wrk_us(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (v, unit) = s.split_at(split);
    let v: f64 = v.parse().ok()?;
    Some(
        v * match unit {
            "us" => 1.0,
            "ms" => 1e3,
            "s" => 1e6,
            "m" => 60e6,
            "h" => 3600e6,
            _ => return None,
        },
    )
}

/// wrk's report: `Requests/sec:`, the `--latency` distribution, the
/// `requests in` total, errors.
fn parse_wrk(text: &str) -> Option<Side> {
    let field = |prefix: &str| text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(str::trim));
    let responses_per_s = field("Requests/sec:")?.parse().ok()?;
    let responses = text.lines().find(|l| l.contains("requests in"))?.split_whitespace().next()?.parse().ok()?;
    let pct = |p: &str| field(p).and_then(wrk_us);
    let max = text
        .lines()
        .find(|l| l.trim_start().starts_with("Latency") && !l.contains("Distribution"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(wrk_us);
    let failures = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Socket errors:"))
        .map_or(0, |l| l.split(',').filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok()).sum())
        + field("Non-2xx or 3xx responses:").and_then(|v| v.parse().ok()).unwrap_or(0);
    Some(Side {
        name: "wrk".into(),
        responses_per_s,
        p50_us: pct("50%"),
        p99_us: pct("99%"),
        max_us: max,
        failures,
        cpu_s: 0.0,
        responses,
    })
}

/// h2load's report: `finished in …, N req/s`, the `requests:` counts, the
/// `time for request:` max (it prints no percentiles).
fn parse_h2load(text: &str) -> Option<Side> {
    let finished = text.lines().find(|l| l.starts_with("finished in"))?;
    let responses_per_s = finished.split(", ").nth(1)?.strip_suffix(" req/s")?.parse().ok()?;
    let requests = text.lines().find(|l| l.starts_with("requests:"))?;
    let count = |what: &str| -> Option<u64> {
        requests.split(", ").find(|p| p.trim_end().ends_with(what))?.split_whitespace().rev().nth(1)?.parse().ok()
    };
    let (succeeded, failed) = (count("succeeded")?, count("failed")? + count("errored")? + count("timeout")?);
    let max = text
        .lines()
        .find(|l| l.starts_with("time for request:"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(wrk_us);
    Some(Side {
        name: "h2load".into(),
        responses_per_s,
        p50_us: None,
        p99_us: None,
        max_us: max,
        failures: failed,
        cpu_s: 0.0,
        responses: succeeded,
    })
}

/// ApacheBench's report: `Requests per second:`, `Complete requests:`,
/// `Failed requests:`, the percentage table (ms).
fn parse_ab(text: &str) -> Option<Side> {
    let field = |prefix: &str| text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(str::trim));
    let first = |s: &str| s.split_whitespace().next().map(str::to_owned);
    let responses_per_s = first(field("Requests per second:")?)?.parse().ok()?;
    let responses = field("Complete requests:")?.parse().ok()?;
    let failures = field("Failed requests:")?.parse().ok()?;
    let pct = |p: &str| field(p).and_then(first).and_then(|v| v.parse::<f64>().ok()).map(|ms| ms * 1e3);
    Some(Side {
        name: "ab".into(),
        responses_per_s,
        p50_us: pct("50%"),
        p99_us: pct("99%"),
        max_us: pct("100%"),
        failures,
        cpu_s: 0.0,
        responses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_and_ab_reports_are_read() {
        let wrk = "Running 2s test @ http://127.0.0.1:8080/\n  2 threads and 8 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   105.33us   50.20us   2.31ms   90.00%\n    Req/Sec    35.10k     1.20k   38.00k    70.00%\n  Latency Distribution\n     50%   98.00us\n     75%  110.00us\n     90%  130.00us\n     99%  300.00us\n  140000 requests in 2.00s, 80.00MB read\n  Socket errors: connect 0, read 1, write 0, timeout 2\nRequests/sec:  70000.12\nTransfer/sec:     40.00MB\n";
        let s = parse_wrk(wrk).unwrap();
        assert_eq!((s.responses, s.failures), (140_000, 3));
        assert_eq!(
            (s.responses_per_s, s.p50_us, s.p99_us, s.max_us),
            (70000.12, Some(98.0), Some(300.0), Some(2310.0))
        );
        let ab = "Complete requests:      5000\nFailed requests:        2\nRequests per second:    25000.50 [#/sec] (mean)\nPercentage of the requests served within a certain time (ms)\n  50%      1\n  66%      1\n  99%      3\n 100%     12 (longest request)\n";
        let s = parse_ab(ab).unwrap();
        assert_eq!((s.responses, s.failures, s.responses_per_s), (5000, 2, 25000.5));
        assert_eq!((s.p50_us, s.p99_us, s.max_us), (Some(1000.0), Some(3000.0), Some(12000.0)));
        assert!(parse_wrk("nothing").is_none() && parse_ab("nothing").is_none());
        let h2 = "finished in 2.00s, 65610.50 req/s, 39.91MB/s\nrequests: 131221 total, 131225 started, 131221 done, 131220 succeeded, 1 failed, 0 errored, 0 timeout\n                     min         max         mean         sd        +/- sd\ntime for request:       19us      7.48ms        55us        70us    99.20%\n";
        let s = parse_h2load(h2).unwrap();
        assert_eq!((s.responses, s.failures, s.responses_per_s, s.max_us), (131_220, 1, 65610.5, Some(7480.0)));
        assert!(parse_h2load("nothing").is_none());
    }

    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// What the coordinator sends is, on the agent, the same load.
    #[test]
    fn an_agents_job_gets_the_same_load() {
        let cases: [&[&str]; 3] = [
            &["x", "http://127.0.0.1:9/p", "-c", "7", "-t", "3", "-d", "2500ms", "-R", "1234.5", "--no-keepalive"],
            &[
                "x",
                "http://127.0.0.1:1/",
                "--http2",
                "--streams",
                "4",
                "-H",
                "X-A: b c",
                "--timeout",
                "3s",
                "--interval",
                "1s",
            ],
            &[
                "x",
                "http://127.0.0.1:1/",
                "--agents",
                "a,b",
                "--server",
                "http://s:1",
                "--run",
                "r",
                "--json",
                "/tmp/j",
            ],
        ];
        for argv in cases {
            let a = Cli::parse_from(argv).args;
            let b = load::job::Spec::from_fields(&a.spec().to_fields()).unwrap();
            assert_eq!(format!("{:?}", a.config().unwrap()), format!("{:?}", b.config().unwrap()), "{argv:?}");
        }
    }
}
