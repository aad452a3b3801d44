//! The ingest server: accepts agents (TLS and tokens when configured,
//! bounded connections, frames and series), stores their batches, and
//! acknowledges each only once the store made it durable.
//!
//! Exactly once: every batch carries its spool's sequence number. The server
//! stores it in the same write as the batch: for rounds, as the series
//! `kansoku_ingest_seq{host,spool}` in the same WAL append as the samples;
//! for events, as a mark leading the batches in the event log's write (and
//! then in the series, for reading). A batch at or below the higher mark (a
//! resend after a lost ack or a server crash) is acknowledged without being
//! stored again.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use model::report::Figure;
use model::{Batch, Selector, SeriesKey, Timestamp};
use store::{Appended, Appender, Store};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

use crate::hosts::Hosts;
use crate::net::{self, Conn, NetError};
use wire::Msg;
use wire::rounds;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub max_frame: u32,
    pub max_series_per_agent: usize,
    pub max_connections: usize,
    pub tokens: Option<Arc<Tokens>>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Clock probes per connection.
    pub ping_every: Duration,
    /// A connection silent this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_frame: wire::FRAME_MAX,
            max_series_per_agent: 100_000,
            max_connections: 1024,
            tokens: None,
            tls: None,
            ping_every: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Bearer tokens, one per line (`#` comments):
/// - `TOKEN [HOST]`: writes (agents, `/write`) and reads; with a host, it may
///   only send as that host;
/// - `read TOKEN`: reads only (queries, the dashboard, `/metrics`).
///
/// With tokens, every endpoint but `/ping` needs one.
#[derive(Debug, Default)]
pub struct Tokens {
    by_token: HashMap<String, Access>,
}

/// What a token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Read everything; write nothing.
    Read,
    /// Read everything; write as this host, or any host (`None`).
    Write(Option<String>),
}

impl Tokens {
    /// Reads a tokens file, refusing one that others may read: a token is a
    /// password (`chmod 600` it).
    pub fn load(path: &Path) -> anyhow::Result<Tokens> {
        check_private(path, "tokens file")?;
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| anyhow::anyhow!("tokens file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut by_token = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let (token, access) = match words[..] {
                ["read", token] => (token, Access::Read),
                [token] => (token, Access::Write(None)),
                [token, host] => (token, Access::Write(Some(host.to_owned()))),
                _ => return Err(format!("line {}: expected TOKEN [HOST], or read TOKEN", n + 1)),
            };
            if token.len() < 16 {
                return Err(format!("line {}: token shorter than 16 characters", n + 1));
            }
            by_token.insert(token.to_owned(), access);
        }
        if by_token.is_empty() {
            return Err("no tokens (expected TOKEN [HOST], or read TOKEN, per line)".into());
        }
        Ok(Tokens { by_token })
    }

    /// What a known token may do; Err for an unknown one.
    pub fn access(&self, token: &str) -> Result<&Access, &'static str> {
        // Every token is compared, in constant time each, so the time taken
        // tells nothing of which (or whether one) matched.
        let mut found = None;
        for (t, a) in &self.by_token {
            if constant_time_eq(t.as_bytes(), token.as_bytes()) {
                found = Some(a);
            }
        }
        found.ok_or("unknown token")
    }

    /// The host a writing token is bound to: Ok(None) for a token valid for
    /// any host, Err for an unknown or read-only one.
    pub fn host_of(&self, token: &str) -> Result<Option<&str>, &'static str> {
        match self.access(token)? {
            Access::Read => Err("a read-only token cannot write"),
            Access::Write(h) => Ok(h.as_deref()),
        }
    }

    /// Ok when `token` may send as `host`.
    pub fn check(&self, token: &str, host: &str) -> Result<(), &'static str> {
        match self.host_of(token)? {
            Some(h) if h != host => Err("token not valid for this host"),
            _ => Ok(()),
        }
    }
}

/// Refuses a secret file (tokens, a token, a private key) that users other
/// than its owner may read or write.
pub fn check_private(path: &Path, what: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("{what} {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{what} {} is open to other users (mode {mode:04o}): it holds secrets; run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Server-wide ingest counters (`/api/v1/status`, `/metrics`).
#[derive(Debug, Default)]
pub struct IngestStats {
    pub connections_total: AtomicU64,
    pub connections_open: AtomicU64,
    pub rejected_auth: AtomicU64,
    pub rejected_protocol: AtomicU64,
    pub rejected_limits: AtomicU64,
    pub wire_bytes: AtomicU64,
    pub batches: AtomicU64,
    pub samples: AtomicU64,
    pub events: AtomicU64,
    pub duplicate_batches: AtomicU64,
    pub unknown_series: AtomicU64,
    pub store_errors: AtomicU64,
    /// CPU time spent decoding and storing batches (ns), on any thread.
    pub cpu_ns: AtomicU64,
}

impl IngestStats {
    /// The ingest's figures, named once: `ingest.stats` in `/api/v1/status`,
    /// `kansoku_ingest_stats_*` in `/metrics`.
    pub fn report(&self) -> [Figure; 13] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            Figure::counter("connections", n(&self.connections_total)),
            Figure::gauge("connections_open", n(&self.connections_open)),
            Figure::counter("rejected_auth", n(&self.rejected_auth)),
            Figure::counter("rejected_protocol", n(&self.rejected_protocol)),
            Figure::counter("rejected_limits", n(&self.rejected_limits)),
            Figure::counter("wire_bytes", n(&self.wire_bytes)),
            Figure::counter("batches", n(&self.batches)),
            Figure::counter("samples", n(&self.samples)),
            Figure::counter("events", n(&self.events)),
            Figure::counter("duplicate_batches", n(&self.duplicate_batches)),
            Figure::counter("unknown_series", n(&self.unknown_series)),
            Figure::counter("store_errors", n(&self.store_errors)),
            Figure::counter_seconds("cpu_seconds", n(&self.cpu_ns) as f64 / 1e9),
        ]
    }
}

type Mark = Arc<tokio::sync::Mutex<SpoolMark>>;

#[derive(Debug)]
struct SpoolMark {
    /// Every batch up to this sequence number is stored.
    stored: u64,
    /// Bumped by each new connection of this spool: older ones stop.
    generation: u64,
}

/// Shared by every connection.
#[derive(Debug)]
pub struct Ingest {
    pub store: Arc<Store>,
    pub live: broadcast::Sender<Arc<Appended>>,
    pub hosts: Arc<Hosts>,
    pub stats: Arc<IngestStats>,
    cfg: ServerConfig,
    marks: Mutex<HashMap<(String, u64), Mark>>,
    /// Authenticated agents' connections: `max_connections` slots, taken
    /// only after the hello checks out, so sockets that never authenticate
    /// cannot lock agents out.
    agents: Arc<tokio::sync::Semaphore>,
    /// Series each host has created (not in the store before), across all
    /// its connections: what `max_series_per_agent` bounds.
    new_series: Mutex<HashMap<String, usize>>,
}

/// Connections between accept and a verified hello, at most; past it a new
/// connection is closed at once (counted). Each lasts at most the hello
/// timeout.
pub const HANDSHAKES_MAX: usize = 256;

impl Ingest {
    pub fn new(store: Arc<Store>, live: broadcast::Sender<Arc<Appended>>, cfg: ServerConfig) -> Ingest {
        let agents = Arc::new(tokio::sync::Semaphore::new(cfg.max_connections));
        Ingest {
            store,
            live,
            hosts: Arc::default(),
            stats: Arc::default(),
            cfg,
            marks: Mutex::default(),
            agents,
            new_series: Mutex::default(),
        }
    }

    /// Accepts agents on `listener` until `stop` turns true.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, mut stop: tokio::sync::watch::Receiver<bool>) {
        let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES_MAX));
        loop {
            let (tcp, addr) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("ingest: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = crate::net::stopped(&mut stop) => return,
            };
            let _ = tcp.set_nodelay(true);
            let ingest = Arc::clone(&self);
            let handshake = Arc::clone(&handshakes).try_acquire_owned();
            tokio::spawn(async move {
                ingest.stats.connections_total.fetch_add(1, Ordering::Relaxed);
                let Ok(handshake) = handshake else {
                    ingest.stats.rejected_limits.fetch_add(1, Ordering::Relaxed);
                    let mut tcp = tcp;
                    let mut out = Vec::new();
                    Msg::Reject { reason: "too many connections still saying hello".into() }.encode(&mut out);
                    let _ = tcp.write_all(&out).await;
                    return;
                };
                ingest.stats.connections_open.fetch_add(1, Ordering::Relaxed);
                let result = ingest.connection(tcp, addr, handshake).await;
                ingest.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
                match result {
                    Ok(()) | Err(NetError::Closed) => {}
                    Err(e) => tracing::info!("ingest: {addr}: {e}"),
                }
            });
        }
    }

    async fn connection(
        &self,
        tcp: tokio::net::TcpStream,
        addr: std::net::SocketAddr,
        handshake: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(), NetError> {
        let conn: Conn = match &self.cfg.tls {
            Some(tls) => {
                let accept = tokio_rustls::TlsAcceptor::from(Arc::clone(tls)).accept(tcp);
                match tokio::time::timeout(Duration::from_secs(10), accept).await {
                    Ok(Ok(c)) => Box::new(c),
                    Ok(Err(e)) => {
                        self.stats.rejected_auth.fetch_add(1, Ordering::Relaxed);
                        return Err(NetError::Protocol(format!("TLS handshake: {e}")));
                    }
                    Err(_) => {
                        self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                        return Err(NetError::Protocol("TLS handshake timed out".into()));
                    }
                }
            }
            None => Box::new(tcp),
        };
        let (mut rd, wr) = tokio::io::split(conn);
        let mut wr = BufWriter::new(wr);
        let mut buf = Vec::new();
        let hello = match tokio::time::timeout(Duration::from_secs(10), net::read_msg(&mut rd, &mut buf, 4096)).await {
            Ok(Ok(Some(Msg::Hello(h)))) => h,
            Ok(Ok(None)) => return Err(NetError::Closed),
            Ok(Ok(Some(m))) => {
                self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                return reject(&mut wr, &format!("expected hello, got {}", m.name())).await;
            }
            Ok(Err(e)) => {
                self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                return reject(&mut wr, &format!("bad hello: {e}")).await;
            }
            Err(_) => {
                self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                return reject(&mut wr, "no hello within 10 s").await;
            }
        };
        if hello.version != wire::VERSION {
            self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
            let why = format!("protocol version {} (this server speaks {})", hello.version, wire::VERSION);
            return reject(&mut wr, &why).await;
        }
        if let Err(why) = check_host(&hello.host) {
            self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
            return reject(&mut wr, why).await;
        }
        if let Some(tokens) = &self.cfg.tokens
            && let Err(why) = tokens.check(&hello.token, &hello.host)
        {
            self.stats.rejected_auth.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("ingest: {addr}: refused host {:?}: {why}", hello.host);
            return reject(&mut wr, why).await;
        }

        // Authenticated: from here on an agent's slot, not a handshake's.
        drop(handshake);
        let Ok(_slot) = Arc::clone(&self.agents).try_acquire_owned() else {
            self.stats.rejected_limits.fetch_add(1, Ordering::Relaxed);
            return reject(&mut wr, "too many connections").await;
        };
        let host = hello.host.clone();
        let mark = self.mark(&host, hello.spool_id).await;
        let generation = {
            let mut m = mark.lock().await;
            m.generation += 1;
            m.generation
        };
        let next_seq = mark.lock().await.stored + 1;
        let mut out = Vec::new();
        Msg::Welcome { version: wire::VERSION, next_seq }.encode(&mut out);
        wr.write_all(&out).await?;
        wr.flush().await?;
        self.hosts.connected(&host, &hello.agent_version, &addr.to_string(), hello.interval_ns, hello.batch_ns);
        tracing::info!(
            "ingest: {addr}: agent {host:?} ({}) connected, resuming at batch {next_seq}",
            hello.agent_version
        );
        let mut session = Session {
            ingest: self,
            host: host.clone(),
            mark_key: seq_key(&host, &format!("{:016x}", hello.spool_id)),
            n_local: 0,
            pending: Vec::new(),
            work: Some(Work::default()),
            probes: Vec::new(),
        };
        let (mut frames, _reader) = net::spawn_reader(rd, self.cfg.max_frame);
        let result = session.run(&mut frames, &mut wr, &mark, generation).await;
        self.hosts.disconnected(&host);
        if let Err(NetError::Rejected(why)) = &result {
            let _ = reject(&mut wr, why).await;
        }
        result
    }

    /// The stored mark of a spool, read from the store the first time.
    async fn mark(&self, host: &str, spool_id: u64) -> Mark {
        let key = (host.to_owned(), spool_id);
        if let Some(m) = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
            return Arc::clone(m);
        }
        let store = Arc::clone(&self.store);
        let series = seq_key(host, &format!("{spool_id:016x}"));
        // Rounds carry their mark in the WAL, events in the event log: the
        // higher of the two is what is stored.
        let stored = tokio::task::spawn_blocking(move || {
            let rounds = last_value(&store, &series).map_or(0, |v| v as u64);
            rounds.max(store.events().mark(&series).unwrap_or(0))
        })
        .await
        .unwrap_or(0);
        let mut marks = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            marks.entry(key).or_insert_with(|| Arc::new(tokio::sync::Mutex::new(SpoolMark { stored, generation: 0 }))),
        )
    }
}

fn seq_key(host: &str, spool: &str) -> SeriesKey {
    SeriesKey::new("kansoku_ingest_seq", [("host", host), ("spool", spool)])
}

/// The newest value of exactly `key`.
fn last_value(store: &Store, key: &SeriesKey) -> Option<f64> {
    let sel = Selector::parse(&key.to_string()).ok()?;
    let (id, _) = store.series(&sel).into_iter().find(|(_, k)| k == key)?;
    let (_, values) = store.read(id, Timestamp::MIN, Timestamp::MAX);
    values.last().copied()
}

fn check_host(host: &str) -> Result<(), &'static str> {
    if host.is_empty() || host.len() > 253 {
        return Err("host name empty or longer than 253 bytes");
    }
    if host.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("host name with spaces or control characters");
    }
    Ok(())
}

async fn reject<W: tokio::io::AsyncWrite + Unpin>(wr: &mut W, why: &str) -> Result<(), NetError> {
    let mut out = Vec::new();
    Msg::Reject { reason: why.to_owned() }.encode(&mut out);
    let _ = wr.write_all(&out).await;
    let _ = wr.flush().await;
    Err(NetError::Rejected(why.to_owned()))
}

/// One agent connection's state.
struct Session<'a> {
    ingest: &'a Ingest,
    host: String,
    /// `kansoku_ingest_seq{host,spool}`: where this spool's stored mark is kept.
    mark_key: SeriesKey,
    n_local: u32,
    /// Definitions to hand to the store with the next append.
    pending: Vec<(u32, SeriesKey)>,
    work: Option<Work>,
    /// Clock probes: (id, sent at server ns).
    probes: Vec<(u64, i64)>,
}

const SERVER_SERIES: [&str; 3] =
    ["kansoku_ingest_seq", "kansoku_agent_clock_offset_seconds", "kansoku_agent_rtt_seconds"];

impl Session<'_> {
    fn declare_server_series(&mut self) {
        for name in SERVER_SERIES {
            let key = if name == "kansoku_ingest_seq" {
                self.mark_key.clone()
            } else {
                SeriesKey::new(name, [("host", self.host.as_str())])
            };
            self.pending.push((self.n_local, key));
            self.n_local += 1;
        }
    }

    async fn run<W>(
        &mut self,
        frames: &mut net::Frames,
        wr: &mut W,
        mark: &tokio::sync::Mutex<SpoolMark>,
        generation: u64,
    ) -> Result<(), NetError>
    where
        W: tokio::io::AsyncWrite + Unpin,
    {
        self.declare_server_series();
        let cfg = &self.ingest.cfg;
        let stats = &self.ingest.stats;
        let mut out = Vec::new();
        let mut ping = tokio::time::interval(cfg.ping_every);
        let mut probe_id = 0u64;
        let mut last_heard = Instant::now();
        loop {
            let msg = tokio::select! {
                m = frames.recv() => m.unwrap_or(Err(NetError::Closed)),
                _ = ping.tick() => {
                    if last_heard.elapsed() > cfg.idle_timeout {
                        return Err(NetError::Protocol(format!("silent for {:?}; closing", cfg.idle_timeout)));
                    }
                    probe_id += 1;
                    let now = Timestamp::now().as_nanos();
                    self.probes.push((probe_id, now));
                    if self.probes.len() > 8 {
                        self.probes.remove(0);
                    }
                    out.clear();
                    Msg::Ping { id: probe_id, time_ns: now }.encode(&mut out);
                    wr.write_all(&out).await?;
                    wr.flush().await?;
                    continue;
                }
            };
            let (msg, frame_bytes) = match msg {
                Ok(m) => m,
                Err(NetError::Closed) => return Ok(()),
                Err(NetError::Wire(e)) => {
                    match e {
                        wire::WireError::TooLarge { .. } => stats.rejected_limits.fetch_add(1, Ordering::Relaxed),
                        _ => stats.rejected_protocol.fetch_add(1, Ordering::Relaxed),
                    };
                    return Err(NetError::Rejected(e.to_string()));
                }
                Err(e) => return Err(e),
            };
            last_heard = Instant::now();
            let frame_bytes = frame_bytes as u64;
            stats.wire_bytes.fetch_add(frame_bytes, Ordering::Relaxed);
            match msg {
                Msg::Series(defs) => self.define(defs)?,
                Msg::Rounds { seq, body } => {
                    self.store_batch(mark, generation, seq, frame_bytes, Payload::Rounds(body)).await?;
                    out.clear();
                    Msg::Ack { seq }.encode(&mut out);
                    wr.write_all(&out).await?;
                    wr.flush().await?;
                }
                Msg::Events { seq, stream, batches } => {
                    self.store_batch(mark, generation, seq, frame_bytes, Payload::Events(stream, batches)).await?;
                    out.clear();
                    Msg::Ack { seq }.encode(&mut out);
                    wr.write_all(&out).await?;
                    wr.flush().await?;
                }
                Msg::Pong { id, time_ns } => self.pong(id, time_ns).await?,
                m => {
                    stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                    return Err(NetError::Rejected(format!("unexpected {} from an agent", m.name())));
                }
            }
        }
    }

    fn define(&mut self, defs: Vec<(u32, SeriesKey)>) -> Result<(), NetError> {
        let max = self.ingest.cfg.max_series_per_agent;
        for (aid, key) in defs {
            if aid as usize >= max || self.n_local as usize >= max + SERVER_SERIES.len() {
                self.ingest.stats.rejected_limits.fetch_add(1, Ordering::Relaxed);
                return Err(NetError::Rejected(format!("more than {max} series from one agent")));
            }
            // Everything an agent sends is about its own host.
            let mut labels: Vec<(String, String)> = key.labels().to_vec();
            labels.push(("host".into(), self.host.clone()));
            let key = SeriesKey::new(key.name(), labels);
            // New series count per host, across its connections (three
            // connections must not get three times the limit).
            if !self.ingest.store.contains(&key) {
                let mut counts = self.ingest.new_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let n = counts.entry(self.host.clone()).or_insert(0);
                if *n >= max {
                    self.ingest.stats.rejected_limits.fetch_add(1, Ordering::Relaxed);
                    return Err(NetError::Rejected(format!(
                        "more than {max} new series from host {:?} (--max-series-per-agent)",
                        self.host
                    )));
                }
                *n += 1;
            }
            let work = self.work.as_mut().expect("work is put back after each append");
            match key.name() {
                "process_cpu_seconds_total" => work.cpu_id = Some(aid),
                "kansoku_agent_backlog_batches" => work.backlog_id = Some(aid),
                "kansoku_agent_spool_dropped_samples_total" => work.dropped_id = Some(aid),
                "kansoku_agent_spool_bytes" => work.spool_bytes_id = Some(aid),
                _ => {}
            }
            if work.local.len() <= aid as usize {
                work.local.resize(aid as usize + 1, u32::MAX);
            }
            work.local[aid as usize] = self.n_local;
            self.pending.push((self.n_local, key));
            self.n_local += 1;
        }
        Ok(())
    }

    async fn store_batch(
        &mut self,
        mark: &tokio::sync::Mutex<SpoolMark>,
        generation: u64,
        seq: u64,
        frame_bytes: u64,
        payload: Payload,
    ) -> Result<(), NetError> {
        let ingest = self.ingest;
        let stats = &ingest.stats;
        let mut m = mark.lock().await;
        if m.generation != generation {
            return Err(NetError::Protocol("a newer connection of this agent took over".into()));
        }
        if seq <= m.stored {
            stats.duplicate_batches.fetch_add(1, Ordering::Relaxed);
            ingest.hosts.batch(&self.host, 0, 0, frame_bytes, true);
            return Ok(());
        }
        let store = Arc::clone(&ingest.store);
        let mut work = self.work.take().expect("put back after each append");
        work.defs = std::mem::take(&mut self.pending);
        let host = self.host.clone();
        let mark_key = self.mark_key.clone();
        // Decoding and storing run on a blocking thread (the append waits
        // for fsync); their CPU time is the server's cost per sample.
        let (result, work, figures) = tokio::task::spawn_blocking(move || {
            let cpu0 = clock::thread_cpu_ns();
            let mut figures = Figures::default();
            let result = work.store(&store, &host, (&mark_key, seq), payload, &mut figures);
            figures.cpu_ns = clock::thread_cpu_ns() - cpu0;
            (result, work, figures)
        })
        .await
        .map_err(|e| NetError::Protocol(format!("store task: {e}")))?;
        self.work = Some(work);
        stats.cpu_ns.fetch_add(figures.cpu_ns.max(0) as u64, Ordering::Relaxed);
        if figures.unknown > 0 {
            stats.unknown_series.fetch_add(figures.unknown, Ordering::Relaxed);
        }
        ingest.hosts.agent_figures(&self.host, &figures);
        let (n_samples, n_events) = (figures.samples, figures.events);
        match result {
            Ok(appended) => {
                m.stored = seq;
                drop(m);
                for a in appended {
                    let _ = ingest.live.send(Arc::new(a));
                }
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats.samples.fetch_add(n_samples, Ordering::Relaxed);
                stats.events.fetch_add(n_events, Ordering::Relaxed);
                ingest.hosts.batch(&self.host, n_samples, n_events, frame_bytes, false);
                Ok(())
            }
            Err(BatchError::Malformed(e)) => {
                stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                Err(NetError::Rejected(format!("batch {seq}: {e}")))
            }
            Err(BatchError::Store(e)) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("ingest: {}: batch {seq} not stored: {e}", self.host);
                // Not acknowledged: the agent keeps it and sends it again.
                Err(NetError::Rejected(format!("server cannot store batch {seq} now: {e}")))
            }
        }
    }

    async fn pong(&mut self, id: u64, agent_ns: i64) -> Result<(), NetError> {
        let now = Timestamp::now().as_nanos();
        let Some(i) = self.probes.iter().position(|p| p.0 == id) else { return Ok(()) };
        let (_, sent) = self.probes.remove(i);
        let rtt = now - sent;
        let offset = agent_ns - (sent + now) / 2;
        self.ingest.hosts.clock(&self.host, offset, rtt);
        let store = Arc::clone(&self.ingest.store);
        let mut work = self.work.take().expect("work is put back after each append");
        let batch = Batch {
            time: Timestamp(now),
            defs: std::mem::take(&mut self.pending),
            points: vec![(1, offset as f64 / 1e9), (2, rtt as f64 / 1e9)],
        };
        let (result, work) = tokio::task::spawn_blocking(move || (store.append(&mut work.appender, &batch), work))
            .await
            .map_err(|e| NetError::Protocol(format!("store task: {e}")))?;
        self.work = Some(work);
        if let Ok(a) = result {
            let _ = self.ingest.live.send(Arc::new(a));
        }
        Ok(())
    }
}

enum Payload {
    Rounds(Vec<u8>),
    Events(SeriesKey, Vec<Vec<u8>>),
}

#[derive(Debug, thiserror::Error)]
enum BatchError {
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Store(#[from] store::StoreError),
}

/// What a stored batch told about its agent.
#[derive(Debug, Default)]
pub struct Figures {
    pub samples: u64,
    pub events: u64,
    pub unknown: u64,
    pub cpu_ns: i64,
    /// (time ns, the agent's process_cpu_seconds_total)
    pub cpu: Option<(i64, f64)>,
    pub backlog: Option<f64>,
    pub dropped: Option<f64>,
    pub spool_bytes: Option<f64>,
}

/// The part of a session that moves to the blocking thread for an append.
#[derive(Debug, Default)]
struct Work {
    appender: Appender,
    /// Agent's series id -> this connection's sender id (u32::MAX: undeclared).
    local: Vec<u32>,
    /// Definitions to hand to the store with this append.
    defs: Vec<(u32, SeriesKey)>,
    cpu_id: Option<u32>,
    backlog_id: Option<u32>,
    dropped_id: Option<u32>,
    spool_bytes_id: Option<u32>,
}

impl Work {
    fn store(
        &mut self,
        store: &Store,
        host: &str,
        (mark_key, seq): (&SeriesKey, u64),
        payload: Payload,
        fig: &mut Figures,
    ) -> Result<Vec<Appended>, BatchError> {
        // Local id 0 is kansoku_ingest_seq: stored with the rounds, atomically.
        let seq_point = (0u32, seq as f64);
        let defs = std::mem::take(&mut self.defs);
        match payload {
            Payload::Rounds(body) => {
                let mut rounds = rounds::decode(&body).map_err(|e| BatchError::Malformed(e.to_string()))?;
                for r in &mut rounds {
                    let t = r.time.as_nanos();
                    r.points.retain_mut(|p| {
                        let aid = p.0;
                        if Some(aid) == self.cpu_id {
                            fig.cpu = Some((t, p.1));
                        } else if Some(aid) == self.backlog_id {
                            fig.backlog = Some(p.1);
                        } else if Some(aid) == self.dropped_id {
                            fig.dropped = Some(p.1);
                        } else if Some(aid) == self.spool_bytes_id {
                            fig.spool_bytes = Some(p.1);
                        }
                        match self.local.get(aid as usize) {
                            Some(&l) if l != u32::MAX => {
                                p.0 = l;
                                true
                            }
                            _ => {
                                fig.unknown += 1;
                                false
                            }
                        }
                    });
                    fig.samples += r.points.len() as u64;
                }
                // The mark rides on the newest round the store will take (a
                // round at a time outside the storable range is refused and
                // counted there, and must not take the mark with it).
                match rounds.iter_mut().rev().find(|r| r.time.is_storable()) {
                    Some(r) => r.points.push(seq_point),
                    None => rounds.push(Batch { time: Timestamp::now(), defs: Vec::new(), points: vec![seq_point] }),
                }
                rounds[0].defs = defs;
                Ok(store.append_many(&mut self.appender, &rounds)?)
            }
            Payload::Events(stream, encoded) => {
                let mut labels: Vec<(String, String)> = stream.labels().to_vec();
                labels.push(("host".into(), host.to_owned()));
                let stream = SeriesKey::new(stream.name(), labels);
                // The sequence number goes into the event log in the same
                // write as the batches: a crash cannot keep one without the
                // other (the series mark below is for reading; the event
                // log's is what dedup trusts for events).
                fig.events = store.events().append_encoded_marked(&stream, &encoded, Some((mark_key, seq))).map_err(
                    |e| match e {
                        store::StoreError::Events(e) => BatchError::Malformed(format!("event batch: {e}")),
                        e => BatchError::Store(e),
                    },
                )? as u64;
                let mark = Batch { time: Timestamp::now(), defs, points: vec![seq_point] };
                Ok(vec![store.append(&mut self.appender, &mark)?])
            }
        }
    }
}
