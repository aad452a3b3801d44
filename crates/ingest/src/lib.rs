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
//!
//! Here: the configuration, counters, the listener and a connection's
//! handshake. Beside it: a connection's life after its hello (`session`),
//! jobs handed to agents (`jobs`), what the server knows of each agent
//! (`hosts`), symbol sources shared through ClickHouse (`shared`). Who may
//! connect is the `access` crate's; the connection itself, `link`'s.

use std::collections::HashMap;
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
use link::net::{self, Conn, NetError};
use wire::Msg;
use wire::rounds;

mod args;
pub mod hosts;
mod jobs;
mod session;
mod shared;

pub use args::{Args, Setup, setup};
pub use jobs::{AgentRun, JobError, JobTimes, Jobs};

use access::TokenFile;
pub use session::Figures;
use session::Work;
pub use shared::SharedSymbols;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub max_frame: u32,
    pub max_series_per_agent: usize,
    pub max_connections: usize,
    pub tokens: Option<Arc<TokenFile>>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Clock probes per connection.
    pub ping_every: Duration,
    /// A connection silent this long is closed.
    pub idle_timeout: Duration,
    /// Where symbol sources from agents are kept; None: agents are asked
    /// for none (their frames are named only where this machine can).
    pub symbols: Option<Arc<symstore::SymStore>>,
    /// `--store clickhouse://…`: agents' samples and events go to ClickHouse
    /// (the embedded store keeps only this server's own series), and the
    /// spool marks are read from there, so any server may take any agent.
    pub clickhouse: Option<Arc<chstore::Writer>>,
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
            symbols: None,
            clickhouse: None,
        }
    }
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
    /// Jobs handed to agents (`kansoku agent --jobs load`).
    pub jobs: Arc<Jobs>,
    cfg: ServerConfig,
    marks: Mutex<HashMap<(String, u64), Mark>>,
    /// Authenticated agents' connections: `max_connections` slots, taken
    /// only after the hello checks out, so sockets that never authenticate
    /// cannot lock agents out.
    agents: Arc<tokio::sync::Semaphore>,
    /// Series each host has created (not in the store before), across all
    /// its connections: what `max_series_per_agent` bounds.
    new_series: Mutex<HashMap<String, usize>>,
    /// This machine's boot: samples of it are named by its own kernel table.
    boot: Option<String>,
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
            jobs: Arc::default(),
            cfg,
            marks: Mutex::default(),
            agents,
            new_series: Mutex::default(),
            boot: std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|b| b.trim().to_owned()),
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
                _ = link::net::stopped(&mut stop) => return,
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
        if !(wire::VERSION_MIN..=wire::VERSION).contains(&hello.version) {
            self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
            let why = format!(
                "protocol version {} (this server speaks {} to {})",
                hello.version,
                wire::VERSION_MIN,
                wire::VERSION
            );
            return reject(&mut wr, &why).await;
        }
        if let Err(why) = check_host(&hello.host) {
            self.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
            return reject(&mut wr, why).await;
        }
        if let Some(tokens) = &self.cfg.tokens
            && let Err(why) = tokens.get().check(&hello.token, &hello.host)
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
        let mark = match self.mark(&host, hello.spool_id).await {
            Ok(m) => m,
            Err(why) => {
                self.stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("ingest: {addr}: agent {host:?}: {why}");
                return reject(&mut wr, &why).await;
            }
        };
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
            owner: CONNECTIONS.fetch_add(1, Ordering::Relaxed),
            sources_seen: std::collections::HashSet::new(),
            mark_key: seq_key(&host, &format!("{:016x}", hello.spool_id)),
            n_local: 0,
            pending: Vec::new(),
            work: Some(Work::new(
                self.cfg.symbols.is_some() && hello.version >= wire::VERSION_SYMBOLS,
                self.cfg.clickhouse.clone(),
                hello.spool_id,
            )),
            found: (Vec::new(), None),
            probes: Vec::new(),
            orders: None,
        };
        let (mut frames, _reader) = net::spawn_reader(rd, self.cfg.max_frame);
        let result = session.run(&mut frames, &mut wr, &mark, generation).await;
        if let Some(symbols) = &self.cfg.symbols {
            symbols.release(session.owner);
        }
        if let Some((n, _)) = &session.orders {
            self.jobs.withdraw(&host, *n);
        }
        self.hosts.disconnected(&host);
        if let Err(NetError::Rejected(why)) = &result {
            let _ = reject(&mut wr, why).await;
        }
        result
    }

    /// The stored mark of a spool, read from the store the first time; from
    /// ClickHouse every time (another server may have stored since).
    async fn mark(&self, host: &str, spool_id: u64) -> Result<Mark, String> {
        let key = (host.to_owned(), spool_id);
        let cached = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
        let stored = match (&self.cfg.clickhouse, &cached) {
            (None, Some(m)) => return Ok(Arc::clone(m)),
            (Some(ch), _) => {
                let (ch, host) = (Arc::clone(ch), host.to_owned());
                tokio::task::spawn_blocking(move || ch.mark(&host, spool_id))
                    .await
                    .map_err(|e| format!("reading the mark: {e}"))?
                    .map_err(|e| format!("cannot read where this agent's batches stand: {e}"))?
            }
            (None, None) => {
                let store = Arc::clone(&self.store);
                let series = seq_key(host, &format!("{spool_id:016x}"));
                // Rounds carry their mark in the WAL, events in the event
                // log: the higher of the two is what is stored.
                tokio::task::spawn_blocking(move || {
                    let rounds = last_value(&store, &series).map_or(0, |v| v as u64);
                    rounds.max(store.events().mark(&series).unwrap_or(0))
                })
                .await
                .unwrap_or(0)
            }
        };
        if let Some(m) = cached {
            let mut g = m.lock().await;
            g.stored = g.stored.max(stored);
            drop(g);
            return Ok(m);
        }
        let mut marks = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(Arc::clone(
            marks.entry(key).or_insert_with(|| Arc::new(tokio::sync::Mutex::new(SpoolMark { stored, generation: 0 }))),
        ))
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

/// Numbers connections, for the symbol sources each was asked for.
static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

/// One agent connection's state.
struct Session<'a> {
    ingest: &'a Ingest,
    host: String,
    /// This connection among all (symbol sources asked of it are its claims).
    owner: u64,
    /// Symbol sources asked of this connection and not kept yet (arriving,
    /// or said lacking): not asked again on it.
    sources_seen: std::collections::HashSet<symstore::Key>,
    /// The build ids and boot the last event batch named.
    found: (Vec<Vec<u8>>, Option<String>),
    /// `kansoku_ingest_seq{host,spool}`: where this spool's stored mark is kept.
    mark_key: SeriesKey,
    n_local: u32,
    /// Definitions to hand to the store with the next append.
    pending: Vec<(u32, SeriesKey)>,
    work: Option<Work>,
    /// Clock probes: (id, sent at server ns).
    probes: Vec<(u64, i64)>,
    /// Once the agent offered jobs: its session number with [`Jobs`] and
    /// the orders to send it.
    orders: Option<(u64, tokio::sync::mpsc::Receiver<jobs::Order>)>,
}
