//! `kansoku lab trace-cost`: what tracing every system call costs the
//! program making them — a `getppid` loop's CPU time per call with nothing
//! attached, with kansoku's tracer (latency histograms per call, in the
//! kernel), with libbpf-tools' `syscount -L` (the same measurement, the
//! reference) and with `bpftrace` counting calls by id, in rounds that
//! alternate the order, in one run so all see the same machine.
//!
//! Cost per call is the loop thread's CPU time (user + system, from
//! `CLOCK_THREAD_CPUTIME_ID`) over the calls: what a traced program pays.
//! A peer is measured once it says it has attached (its own "Tracing" /
//! "Attaching" line) and a warm-up loop has run. Then the scheduler
//! tracer's cost: two threads handing a token back and forth, untraced,
//! with it, and with libbpf-tools' `runqlat` (the reference).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};
use clock::thread_cpu_ns;

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// getppid calls per measurement.
    #[arg(long, default_value_t = 2_000_000)]
    calls: u64,
    /// Rounds (each measures every side once, in a rotated order).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Side {
    pub name: String,
    /// ns of CPU per getppid, one per round.
    pub ns_per_call: Vec<f64>,
    /// Why it was not measured (tool missing or refused).
    pub skipped: Option<String>,
}

/// CPU ns per call of `n` getppid calls on this thread.
fn getppid_loop(n: u64) -> f64 {
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        std::hint::black_box(std::os::unix::process::parent_id());
    }
    (thread_cpu_ns() - t0) as f64 / n as f64
}

/// CPU ns per round trip of `n` handoffs between two threads through
/// rendezvous channels (each a wakeup and two context switches), both
/// threads' CPU time counted.
fn pingpong(n: u64) -> f64 {
    let (a_tx, a_rx) = std::sync::mpsc::sync_channel::<u64>(0);
    let (b_tx, b_rx) = std::sync::mpsc::sync_channel::<u64>(0);
    let peer = std::thread::spawn(move || {
        let t0 = thread_cpu_ns();
        while let Ok(v) = a_rx.recv() {
            if b_tx.send(v).is_err() {
                break;
            }
        }
        thread_cpu_ns() - t0
    });
    let t0 = thread_cpu_ns();
    for i in 0..n {
        a_tx.send(i).expect("peer alive");
        b_rx.recv().expect("peer alive");
    }
    let mine = thread_cpu_ns() - t0;
    drop(a_tx);
    let theirs = peer.join().expect("peer thread");
    (mine + theirs) as f64 / n as f64
}

/// A peer tracer, started and waited for until its ready line.
struct Peer(Child);

impl Peer {
    fn start(cmd: &str, args: &[&str], ready: &str) -> anyhow::Result<Peer> {
        let mut child = Command::new(cmd)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("start {cmd}"))?;
        // Both tools announce attaching on stdout or stderr: read both.
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(256);
        for out in [
            child.stdout.take().map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                // Drained to the end, so the tool never blocks on a full pipe.
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(std::time::Duration::from_secs(30)) {
                Ok(line) if line.contains(ready) => return Ok(Peer(child)),
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    bail!("{cmd} did not attach: {}", seen.join(" | "));
                }
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGINT);
        let _ = self.0.wait();
    }
}

/// One side's measurement: set up, warm up, measure, tear down.
fn measure(side: &str, calls: u64) -> anyhow::Result<f64> {
    let warm = (calls / 10).max(10_000);
    match side {
        "untraced" => {
            getppid_loop(warm);
            Ok(getppid_loop(calls))
        }
        "kansoku" => {
            let t = trace::SyscallTracer::start().context("kansoku's tracer")?;
            getppid_loop(warm);
            let ns = getppid_loop(calls);
            t.read().context("read kansoku's maps")?;
            Ok(ns)
        }
        "syscount -L" => {
            // stdbuf: its "Tracing" line is otherwise held in a pipe's buffer.
            let _p = Peer::start("stdbuf", &["-oL", "/usr/sbin/syscount", "-L"], "Tracing syscalls")?;
            getppid_loop(warm);
            Ok(getppid_loop(calls))
        }
        "bpftrace count by id" => {
            let _p = Peer::start(
                "/usr/bin/bpftrace",
                &["-e", "tracepoint:raw_syscalls:sys_enter { @[args->id] = count(); }"],
                "Attaching",
            )?;
            getppid_loop(warm);
            Ok(getppid_loop(calls))
        }
        _ => unreachable!("BUG: unknown side {side}"),
    }
}

/// The scheduler tracer's cost per context switch: thread ping-pong
/// untraced, with kansoku's scheduler tracer and with libbpf-tools'
/// `runqlat` (run-queue latency as a histogram: the reference), in rounds
/// that rotate the order.
fn sched_cost(args: &Args) -> anyhow::Result<()> {
    let n = (args.calls / 20).max(10_000);
    let sides = rotate(&["untraced", "kansoku", "runqlat"], args.rounds, "ns per round trip", |name| {
        pingpong(n / 10);
        match name {
            "untraced" => Ok(pingpong(n)),
            "kansoku" => trace::sched::SchedTracer::start().context("kansoku's scheduler tracer").map(|_t| {
                pingpong(n / 10);
                pingpong(n)
            }),
            _ => Peer::start("stdbuf", &["-oL", "/usr/sbin/runqlat"], "Tracing run queue latency").map(|_p| {
                pingpong(n / 10);
                pingpong(n)
            }),
        }
    });
    result!("\nping-pong (2 context switches and a wakeup per round trip, both threads' CPU):");
    print_sides(&sides, "ns per round trip");
    Ok(())
}

/// Measures each side once a round, in an order rotated each round; a side
/// that fails is skipped from then on, with its reason.
fn rotate(
    names: &[&str],
    rounds: usize,
    unit: &str,
    mut measure: impl FnMut(&str) -> anyhow::Result<f64>,
) -> Vec<Side> {
    let mut sides: Vec<Side> = names.iter().map(|n| Side { name: (*n).into(), ..Side::default() }).collect();
    for round in 0..rounds {
        for k in 0..names.len() {
            let i = (k + round) % names.len();
            if sides[i].skipped.is_some() {
                continue;
            }
            match measure(names[i]) {
                Ok(ns) => {
                    eprintln!("  round {}: {:<22} {ns:9.1} {unit}", round + 1, names[i]);
                    sides[i].ns_per_call.push(ns);
                }
                Err(e) => {
                    eprintln!("  {}: skipped: {e:#}", names[i]);
                    sides[i].skipped = Some(format!("{e:#}"));
                }
            }
        }
    }
    sides
}

/// Each side's span and what it adds over the first (untraced).
fn print_sides(sides: &[Side], unit: &str) {
    let base = span(&sides[0].ns_per_call);
    result!("{:<22} {:>19} {:>22}", "", unit, "added over untraced");
    for s in sides {
        if s.ns_per_call.is_empty() {
            result!("{:<22} {}", s.name, s.skipped.as_deref().unwrap_or("not measured"));
            continue;
        }
        let (lo, hi) = span(&s.ns_per_call);
        result!("{:<22} {lo:>8.1} – {hi:<8.1} {:>9.1} – {:<9.1}", s.name, lo - base.1, hi - base.0);
    }
}

/// The smallest and largest of some measurements.
fn span(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.rounds == 0 || args.calls == 0 {
        bail!("--rounds {} --calls {}: nothing to measure", args.rounds, args.calls);
    }
    result!(
        "trace-cost: {} getppid calls per measurement, {} rounds, on {}",
        args.calls,
        args.rounds,
        crate::machine_line()
    );
    let names = ["untraced", "kansoku", "syscount -L", "bpftrace count by id"];
    let sides = rotate(&names, args.rounds, "ns per call", |name| measure(name, args.calls));
    result!();
    print_sides(&sides, "ns per getppid");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&sides)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    sched_cost(args)
}
