//! `kansoku lab soak`: a server under a hostile client mix for a while, a
//! healthy agent beside it. The mix is what broke servers before (issue
//! 18's list): anonymous and wrong-token requests, floods of new series,
//! points at the end of time, oversized bodies, regexes that compile for
//! seconds, series listings of everything, idle and half-sent HTTP
//! connections, ingest sockets that never say hello, hellos followed by a
//! 1 GiB frame header, garbage — and every class of issue 42
//! ([`crate::hostile`]: queries that grow with steps², answers past their
//! size, decompression and protobuf bombs, deep expressions, trickling
//! bodies, forged names), each checked to be refused as it must be. Every
//! client loop is bounded in time and talks to loopback only.
//!
//! Pass means: the server's resident memory and descriptors stay bounded
//! (the peak of the second half at most 1.25 x the first half's plus
//! 64 MiB; descriptors below its limits), and the agent loses nothing: its
//! 100 ms grid has no hole its collector did not report, its spool dropped
//! nothing, the server still answers. The figures are printed as JSON; the
//! exit status is 1 on a failed bound.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long the hostile mix runs.
    #[arg(long, default_value = "10m", value_parser = model::parse_duration)]
    duration: Duration,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

const TOKEN: &str = "soak-writer-token-0123456789";
const AGENT_TOKEN: &str = "soak-agent-token-0123456789";
const AGENT_HOST: &str = "soak-agent";
const MAX_SERIES: usize = 200_000;
const HTTP_MAX_CONNECTIONS: usize = 256;

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub duration_s: f64,
    pub requests: u64,
    pub refused: u64,
    pub rss_mib_first_half_max: f64,
    pub rss_mib_second_half_max: f64,
    /// The server's peak resident set over the whole run (VmHWM).
    pub rss_mib_peak: f64,
    pub fds_max: u64,
    pub fds_limit: u64,
    pub agent_rounds_stored: u64,
    pub agent_holes: i64,
    pub agent_missed_reported: f64,
    pub agent_spool_dropped: f64,
    pub server_store_series: u64,
    pub server_status: serde_json::Value,
    pub failures: Vec<String>,
}

use crate::hostile::http;
use crate::out::result;

fn auth() -> String {
    format!("Authorization: Token {TOKEN}\r\n")
}

fn status(addr: &str) -> serde_json::Value {
    serde_json::from_str(&http(addr, "GET", "/api/v1/status", &auth(), b"").1).unwrap_or_default()
}

fn rss_and_fds(pid: u32) -> (u64, u64) {
    let rss = crate::procs::rss_bytes(pid);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (rss, fds)
}

fn private_file(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let duration = args.duration;
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens");
    private_file(&tokens, &format!("{TOKEN}\n{AGENT_TOKEN} {AGENT_HOST}\n"))?;
    let agent_token = dir.path().join("agent.token");
    private_file(&agent_token, AGENT_TOKEN)?;
    let data = dir.path().join("server");
    let max_series = MAX_SERIES.to_string();
    let http_max = HTTP_MAX_CONNECTIONS.to_string();
    let tokens_path = tokens.to_str().context("path")?;
    let server = crate::transfer::server_with(
        &data,
        &[
            "--tokens",
            tokens_path,
            "--max-series",
            &max_series,
            "--http-max-connections",
            &http_max,
            "--http-header-timeout",
            "5s",
        ],
    )?;
    let (addr, ingest) = (server.http.clone(), server.ingest.clone());
    // The database the mix writes to exists: its writes are refused for
    // what they carry, not for a missing database.
    let created = http(
        &addr,
        "POST",
        "/query",
        &format!("{}Content-Type: application/x-www-form-urlencoded\r\n", auth()),
        b"q=CREATE+DATABASE+x",
    );
    if created.0 != 200 {
        anyhow::bail!("CREATE DATABASE x: {} {}", created.0, created.1);
    }
    let agent_data = dir.path().join("agent");
    let mut agent = Command::new(std::env::current_exe()?);
    agent
        .args(["agent", "--server", &ingest, "--host", AGENT_HOST, "--interval", "100ms", "--trace", "off"])
        .arg("--token-file")
        .arg(&agent_token)
        .arg("--data")
        .arg(&agent_data);
    let agent = crate::transfer::Proc::spawn(agent).context("start the agent")?;
    let pid = server.proc.pid();
    eprintln!("soak: server pid {pid} on http://{addr}, agents on {ingest}; hostile mix for {duration:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    type Client = fn(&str, &str, u64) -> bool;
    // Each returns whether the server refused (4xx/5xx) what it sent.
    let mix: [(&str, Client); 10] = [
        ("anonymous", |a, _, _| http(a, "GET", "/api/v1/series", "", b"").0 == 401),
        ("wrong token", |a, _, _| {
            http(a, "POST", "/write?db=x", "Authorization: Token wrong-token-0123456789\r\n", b"m v=1\n").0 == 401
        }),
        ("new-series flood", |a, _, i| {
            let body: String = (0..5000).map(|k| format!("flood,id={i}-{k} v=1 1700000000000000000\n")).collect();
            http(a, "POST", "/write?db=x", &auth(), body.as_bytes()).0 >= 400
        }),
        ("end of time", |a, _, _| http(a, "POST", "/write?db=x", &auth(), b"n v=1 9223372036854775807\n").0 == 400),
        ("oversized body", |a, _, i| {
            // Every 20th round: the 64 MiB limit plus one.
            if i % 20 != 0 {
                return http(a, "GET", "/ping", "", b"").0 == 204;
            }
            http(a, "POST", "/write?db=x", &auth(), &vec![b'x'; (64 << 20) + 1]).0 == 413
        }),
        ("regex bomb", |a, _, _| {
            let q = "/api/v1/query?query=%7Ba%3D~%22(.*)%7B10000%7D%22%7D";
            http(a, "GET", q, &auth(), b"").0 == 400
        }),
        ("list everything", |a, _, _| {
            let (code, body) = http(a, "GET", "/api/v1/series?limit=100000", &auth(), b"");
            code == 200 && body.contains("\"truncated\"")
        }),
        ("idle sockets", |a, _, _| {
            // Forty sockets that never send, held for a second, then dropped.
            let held: Vec<_> = (0..40).filter_map(|_| TcpStream::connect(a).ok()).collect();
            std::thread::sleep(Duration::from_secs(1));
            drop(held);
            true
        }),
        ("silent ingest", |_, ing, _| {
            let held: Vec<_> = (0..40).filter_map(|_| TcpStream::connect(ing).ok()).collect();
            std::thread::sleep(Duration::from_secs(1));
            drop(held);
            true
        }),
        ("frame bomb", |_, ing, i| {
            let Ok(mut s) = TcpStream::connect(ing) else { return false };
            let mut out = Vec::new();
            wire::Msg::Hello(wire::Hello {
                version: wire::VERSION,
                host: format!("bomber-{}", i % 7),
                agent_version: "soak".into(),
                spool_id: i,
                token: TOKEN.into(),
                interval_ns: 100_000_000,
                batch_ns: 1_000_000_000,
            })
            .encode(&mut out);
            // A frame header claiming 1 GiB, then garbage, then silence.
            out.extend_from_slice(&(1u32 << 30).to_le_bytes());
            out.extend_from_slice(&[0xab; 4]);
            out.extend_from_slice(&[0xff; 512]);
            let _ = s.write_all(&out);
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            true
        }),
    ];
    let deadline = Instant::now() + duration;
    // Issue 42's classes, one loop cycling through them; a class answered
    // otherwise than it must be is a failure.
    let wrong = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    {
        let (stop, requests, refused, wrong) =
            (Arc::clone(&stop), Arc::clone(&requests), Arc::clone(&refused), Arc::clone(&wrong));
        let addr = addr.clone();
        clients.push(std::thread::Builder::new().name("soak issue-42".into()).spawn(move || {
            let classes = crate::hostile::classes();
            let mut i = 0usize;
            while !stop.load(Relaxed) && Instant::now() < deadline {
                let c = &classes[i % classes.len()];
                match (c.send)(&addr, &auth()) {
                    Ok(()) => {
                        refused.fetch_add(1, Relaxed);
                    }
                    Err(e) => {
                        let mut w = wrong.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        if w.len() < 20 {
                            w.push(format!("{}: {e}", c.name));
                        }
                    }
                }
                requests.fetch_add(1, Relaxed);
                i += 1;
            }
        })?);
    }
    for (name, f) in mix {
        let (stop, requests, refused) = (Arc::clone(&stop), Arc::clone(&requests), Arc::clone(&refused));
        let (addr, ingest) = (addr.clone(), ingest.clone());
        clients.push(std::thread::Builder::new().name(format!("soak {name}")).spawn(move || {
            let mut i = 0u64;
            while !stop.load(Relaxed) && Instant::now() < deadline {
                if f(&addr, &ingest, i) {
                    refused.fetch_add(1, Relaxed);
                }
                requests.fetch_add(1, Relaxed);
                i += 1;
            }
        })?);
    }

    // Watch the server as `top` would: resident memory and descriptors.
    let started = Instant::now();
    let (mut first_half, mut second_half, mut fds_max) = (0u64, 0u64, 0u64);
    while Instant::now() < deadline {
        let (rss, fds) = rss_and_fds(pid);
        if rss == 0 {
            bail!("the server (pid {pid}) is gone");
        }
        if started.elapsed() < duration / 2 {
            first_half = first_half.max(rss);
        } else {
            second_half = second_half.max(rss);
        }
        fds_max = fds_max.max(fds);
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Relaxed);
    for c in clients {
        let _ = c.join();
    }

    // The agent: stop it, then read what the server stored of it.
    drop(agent);
    let mut report = Report {
        duration_s: duration.as_secs_f64(),
        requests: requests.load(Relaxed),
        refused: refused.load(Relaxed),
        rss_mib_first_half_max: first_half as f64 / 1048576.0,
        rss_mib_second_half_max: second_half as f64 / 1048576.0,
        fds_max,
        ..Report::default()
    };
    let fds_limit = (HTTP_MAX_CONNECTIONS + cluster_limits()) as u64 + 256;
    report.fds_limit = fds_limit;
    let series = |name: &str| -> (Vec<i64>, Vec<f64>) {
        let sel = format!("{name}{{host=\"{AGENT_HOST}\"}}");
        let path = format!("/api/v1/query?query={}&from=0&time_unit=ns", client::escape(&sel));
        let (_, body) = http(&addr, "GET", &path, &auth(), b"");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let times = v["times"].as_array().map(|t| t.iter().filter_map(|x| x.as_i64()).collect()).unwrap_or_default();
        let vals = v["series"][0]["values"]
            .as_array()
            .map(|t| t.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        (times, vals)
    };
    let last = |name: &str| series(name).1.last().copied().unwrap_or(0.0);
    let (times, _) = series("node_load1");
    report.agent_rounds_stored = times.len() as u64;
    if times.len() > 1 {
        let span = (times[times.len() - 1] - times[0]) / 100_000_000 + 1;
        report.agent_holes = span - times.len() as i64;
    }
    report.agent_missed_reported =
        last("kansoku_collector_missed_rounds_total") + last("kansoku_collector_dropped_batches_total");
    report.agent_spool_dropped = last("kansoku_agent_spool_dropped_samples_total");
    let st = status(&addr);
    report.server_store_series = st["store"]["series"].as_u64().unwrap_or(0);
    report.server_status = serde_json::json!({ "http": st["http"], "ingest": st["ingest"], "store": st["store"] });

    let expected_rounds = (duration.as_secs_f64() * 10.0 * 0.8) as u64;
    if report.agent_rounds_stored < expected_rounds {
        report
            .failures
            .push(format!("agent: {} rounds stored, expected {expected_rounds}+", report.agent_rounds_stored));
    }
    if report.agent_holes as f64 > report.agent_missed_reported {
        report.failures.push(format!(
            "agent: {} rounds missing, its collector reported {}",
            report.agent_holes, report.agent_missed_reported
        ));
    }
    if report.agent_spool_dropped > 0.0 {
        report.failures.push(format!("agent: its spool dropped {} samples", report.agent_spool_dropped));
    }
    if second_half as f64 > first_half as f64 * 1.25 + 64.0 * 1048576.0 {
        report.failures.push(format!(
            "server memory grew: {:.0} MiB peak in the first half, {:.0} MiB in the second",
            report.rss_mib_first_half_max, report.rss_mib_second_half_max
        ));
    }
    if fds_max > fds_limit {
        report.failures.push(format!("server descriptors: {fds_max}, over {fds_limit}"));
    }
    if report.server_store_series as usize > MAX_SERIES {
        report.failures.push(format!("store series {} past --max-series {MAX_SERIES}", report.server_store_series));
    }
    report.failures.extend(wrong.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..));
    report.rss_mib_peak = crate::procs::peak_rss_bytes(pid) as f64 / 1048576.0;
    if http(&addr, "GET", "/ping", "", b"").0 != 204 {
        report.failures.push("the server no longer answers /ping".into());
    }
    drop(server);
    let json = serde_json::to_string_pretty(&report)?;
    result!("{json}");
    if let Some(out) = &args.out {
        std::fs::write(out, &json).with_context(|| format!("write {}", out.display()))?;
    }
    if !report.failures.is_empty() {
        bail!("soak failed: {}", report.failures.join("; "));
    }
    Ok(())
}

/// Descriptors the ingest side may hold: handshakes and agents' connections
/// (the server's defaults).
fn cluster_limits() -> usize {
    256 + 1024
}
