//! TCP payload throughput between two network namespaces over a veth pair
//! whose sending side is shaped by `tc tbf` to a line rate — Ethernet's
//! payload limit as seed 004 measured it, reproducible on any Linux box
//! without a second machine. The namespaces are our own (`ip netns`),
//! addressed inside themselves only, and removed on drop.
//!
//! The two ends are `kansoku lab limits-stream serve|send` run inside the
//! namespaces ([`serve`], [`send`]): N connections, each read by its own
//! thread; after all N connected and a warm-up, the receiver counts the
//! bytes over the measured window.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The receiver's address inside its namespace, and the sender's.
pub const RECEIVER: &str = "10.213.58.2";
const SENDER: &str = "10.213.58.1";
pub const PORT: u16 = 5201;

/// Two namespaces joined by a veth pair, the sender's end shaped.
#[derive(Debug)]
pub struct Pair {
    pub sender: String,
    pub receiver: String,
    dev: String,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("run ip (apt-get install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim(),
            if nix_is_root() { "" } else { " — network namespaces need root" }
        );
    }
    Ok(())
}

fn nix_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

impl Pair {
    /// Creates the namespaces and the veth pair with `mtu`; shaping is set
    /// per run by [`Pair::shape`].
    pub fn create(mtu: u64) -> anyhow::Result<Pair> {
        let id = std::process::id();
        let pair =
            Pair { sender: format!("ksk-snd-{id}"), receiver: format!("ksk-rcv-{id}"), dev: format!("ksks{id}") };
        let peer = format!("kskr{id}");
        let mtu = mtu.to_string();
        ip(&["netns", "add", &pair.sender])?;
        ip(&["netns", "add", &pair.receiver])?;
        for args in [
            vec![
                "-n",
                &pair.sender,
                "link",
                "add",
                &pair.dev,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
                "netns",
                &pair.receiver,
            ],
            vec!["-n", &pair.sender, "link", "set", &pair.dev, "mtu", &mtu, "up"],
            vec!["-n", &pair.receiver, "link", "set", &peer, "mtu", &mtu, "up"],
            vec!["-n", &pair.sender, "link", "set", "lo", "up"],
            vec!["-n", &pair.receiver, "link", "set", "lo", "up"],
        ] {
            ip(&args)?;
        }
        ip(&["-n", &pair.sender, "addr", "add", &format!("{SENDER}/30"), "dev", &pair.dev])?;
        ip(&["-n", &pair.receiver, "addr", "add", &format!("{RECEIVER}/30"), "dev", &peer])?;
        Ok(pair)
    }

    /// Shapes the sender's egress with tbf at `rate_bps` (None: unshaped).
    /// The bucket holds 10 ms at the rate (at least 64 KiB), so a TSO burst
    /// is segmented rather than refused.
    pub fn shape(&self, rate_bps: Option<f64>) -> anyhow::Result<()> {
        let _ = Command::new("ip")
            .args(["netns", "exec", &self.sender, "tc", "qdisc", "del", "dev", &self.dev, "root"])
            .output();
        let Some(rate) = rate_bps else { return Ok(()) };
        let burst = ((rate / 8.0 / 100.0) as u64).max(64 << 10).to_string();
        let rate = format!("{}bit", rate as u64);
        let out = Command::new("ip")
            .args(["netns", "exec", &self.sender, "tc", "qdisc", "add", "dev", &self.dev, "root", "tbf", "rate", &rate])
            .args(["burst", &burst, "latency", "50ms"])
            .output()
            .context("run tc")?;
        if !out.status.success() {
            bail!("tc qdisc add tbf rate {rate}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    /// `cmd` run inside namespace `ns`.
    pub fn exec(ns: &str, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(cmd.get_program()).args(cmd.get_args());
        c
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it the pair.
        let _ = Command::new("ip").args(["netns", "del", &self.sender]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.receiver]).output();
    }
}

/// What the receiver measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Received {
    pub streams: usize,
    /// Payload bytes over the window, all streams.
    pub bytes: u64,
    pub seconds: f64,
    pub bytes_per_second: f64,
    /// Each stream's share of the bytes (fairness).
    pub per_stream: Vec<u64>,
}

/// The receiver: accepts `streams` connections on `listen`, prints
/// "listening" to stderr once bound, reads them all, and after `warmup`
/// counts the bytes over `window`; then closes them (the senders stop).
pub fn serve(listen: &str, streams: usize, warmup: Duration, window: Duration) -> anyhow::Result<Received> {
    let l = TcpListener::bind(listen).with_context(|| format!("listen on {listen}"))?;
    eprintln!("listening on {listen}");
    let counts: Vec<Arc<AtomicU64>> = (0..streams).map(|_| Arc::default()).collect();
    let mut socks = Vec::new();
    for c in &counts {
        let (s, _) = l.accept().context("accept")?;
        socks.push(s.try_clone()?);
        let c = Arc::clone(c);
        std::thread::spawn(move || {
            let mut s = s;
            let mut buf = vec![0u8; 256 << 10];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
    }
    // The measurement's own window: a sleep is what measures a rate.
    std::thread::sleep(warmup);
    let snap = || counts.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<u64>>();
    let (c0, t0) = (snap(), Instant::now());
    std::thread::sleep(window);
    let (c1, secs) = (snap(), t0.elapsed().as_secs_f64());
    for s in &socks {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    let per_stream: Vec<u64> = c1.iter().zip(&c0).map(|(a, b)| a - b).collect();
    let bytes = per_stream.iter().sum();
    Ok(Received { streams, bytes, seconds: secs, bytes_per_second: bytes as f64 / secs, per_stream })
}

/// The sender: `streams` connections to `addr`, each writing 128 KiB
/// buffers until the receiver closes or `limit` passes.
pub fn send(addr: &str, streams: usize, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    let handles: Vec<_> = (0..streams)
        .map(|_| {
            let addr = addr.to_owned();
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut s = TcpStream::connect(&addr)?;
                let buf = vec![0x42u8; 128 << 10];
                while Instant::now() < deadline {
                    if s.write_all(&buf).is_err() {
                        break;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| anyhow::anyhow!("a sender thread panicked"))?.context("connect")?;
    }
    Ok(())
}

/// One measurement through the pair: the receiver (`serve_cmd`, a command
/// that runs [`serve`]) started in its namespace, then the sender
/// (`send_cmd`, running [`send`]) once the receiver says it listens.
pub fn run(pair: &Pair, serve_cmd: &Command, send_cmd: &Command) -> anyhow::Result<Received> {
    let mut rx = Pair::exec(&pair.receiver, serve_cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("start the receiver")?;
    let mut lines = BufReader::new(rx.stderr.take().expect("piped")).lines();
    let mut said = String::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("listening on") => break,
            Some(Ok(l)) => said.push_str(&l),
            _ => {
                let _ = rx.wait();
                bail!("the receiver exited before listening: {said}");
            }
        }
    }
    let mut tx: Child = Pair::exec(&pair.sender, send_cmd).stdout(Stdio::null()).spawn().context("start the sender")?;
    let mut out = String::new();
    rx.stdout.take().expect("piped").read_to_string(&mut out)?;
    let status = rx.wait()?;
    let _ = tx.wait();
    if !status.success() {
        bail!("the receiver failed: {}", out.trim());
    }
    serde_json::from_str(out.trim()).with_context(|| format!("the receiver's answer {out:?}"))
}
