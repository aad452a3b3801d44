//! The agent's side of the transport: a spooler thread turns collection
//! rounds into compressed batches in the spool (durable before they are
//! sent), and a sender task ships them to the server oldest first, keeps a
//! bounded window of unacknowledged batches in flight, and reconnects with
//! backoff. Sampling never waits on the network: the spool absorbs outages
//! and slow servers, and drops (counted) only when it is full.
//!
//! Here: the sender and the jobs the server hands this agent ([`JobRunner`]);
//! [`spool`] is the bounded on-disk queue of unacknowledged batches. The
//! connection itself (TCP or TLS, frames) is the `link` crate's.

pub mod spool;

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use model::{Batch, SeriesKey, Timestamp};
use tokio::io::{AsyncWriteExt, BufWriter};

use crate::spool::{Kind, Spool};
use link::net::{self, NetError};
use wire::rounds::{self, Codec};
use wire::{Hello, Msg};

#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Where the server's ingest listens: `host:port`, `tcp://host:port` or
    /// `tls://host:port` (TLS also when `tls` is set); several, separated
    /// by commas, for servers in front of one ClickHouse store: a server
    /// that cannot be reached or cannot store hands the agent to the next.
    pub server: String,
    pub host: String,
    pub token: Option<String>,
    pub interval: Duration,
    /// Rounds are shipped in batches spanning this long.
    pub batch: Duration,
    pub codec: Codec,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Spool size: None sizes it for 26 h of this host's data (at least
    /// 64 MiB, at most a quarter of its filesystem).
    pub spool_limit: Option<u64>,
    /// Most batches in flight (sent, not yet acknowledged).
    pub window: usize,
    /// A connection whose oldest batch waits longer than this for its ack is
    /// given up and made anew.
    pub ack_timeout: Duration,
    /// Jobs this agent takes from the server (`--jobs`); None: none.
    pub jobs: Option<JobRunner>,
    /// The data directory whose symbol sources (`symstore`'s layout: the
    /// sampler's build-id cache, each boot's kernel table) the server may
    /// ask for; None: it is told they are not kept.
    pub symbols: Option<std::path::PathBuf>,
}

/// What runs a job the server hands the agent: `(kind, start_ns on this
/// host's wall clock, args) -> result bytes, or why it failed`. It blocks
/// (a thread of its own runs it) and must not begin before `start_ns`.
pub type RunJob = Arc<dyn Fn(&str, i64, &[String]) -> JobResult + Send + Sync>;

pub use wire::JobResult;

/// The kinds of job an agent takes and what runs them.
#[derive(Clone)]
pub struct JobRunner {
    pub kinds: Vec<String>,
    pub run: RunJob,
}

impl std::fmt::Debug for JobRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRunner").field("kinds", &self.kinds).finish_non_exhaustive()
    }
}

/// One job at a time; its result waits here until a connection sends it
/// (the next one, if the connection it came on dropped meanwhile).
#[derive(Debug, Default)]
struct JobSlot {
    /// The job running, if any.
    running: Mutex<Option<u64>>,
    /// Finished, not yet sent: (id, result).
    finished: Mutex<Option<(u64, JobResult)>>,
    ended: tokio::sync::Notify,
}

impl AgentConfig {
    pub fn new(server: impl Into<String>, host: impl Into<String>, interval: Duration) -> AgentConfig {
        AgentConfig {
            server: server.into(),
            host: host.into(),
            token: None,
            interval,
            batch: Duration::from_secs(1).max(interval),
            codec: Codec::Zstd(3),
            tls: None,
            spool_limit: None,
            window: 64,
            ack_timeout: Duration::from_secs(10),
            jobs: None,
            symbols: None,
        }
    }
}

/// The sender's counters (the spool keeps its own).
#[derive(Debug, Default)]
pub struct SenderStats {
    pub connected: AtomicBool,
    pub connects: AtomicU64,
    pub sent_batches: AtomicU64,
    pub sent_samples: AtomicU64,
    pub wire_bytes: AtomicU64,
    pub acked_batches: AtomicU64,
    /// Symbol sources sent whole, and their compressed bytes.
    pub symbols_sent: AtomicU64,
    pub symbols_bytes: AtomicU64,
    pub last_error: Mutex<String>,
}

/// Figures another part of the agent (the perf sampler) reports with
/// every batch: (series name, value); the host label is added.
pub type Figures = Box<dyn Fn() -> Vec<(&'static str, f64)> + Send + Sync>;

pub struct Agent {
    cfg: AgentConfig,
    spool: Arc<Spool>,
    sender: Arc<SenderStats>,
    figures: Vec<Figures>,
    job: Arc<JobSlot>,
    /// Which of the servers the next connection goes to.
    server_at: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("cfg", &self.cfg).field("figures", &self.figures.len()).finish_non_exhaustive()
    }
}

/// The agent's own series, sent with every batch.
const OWN: [&str; 12] = [
    "kansoku_agent_spool_bytes",
    "kansoku_agent_spool_limit_bytes",
    "kansoku_agent_spool_dropped_batches_total",
    "kansoku_agent_spool_dropped_samples_total",
    "kansoku_agent_backlog_batches",
    "kansoku_agent_backlog_seconds",
    "kansoku_agent_wire_bytes_total",
    "kansoku_agent_connects_total",
    "kansoku_agent_connected",
    "kansoku_agent_sent_samples_total",
    "kansoku_agent_symbols_sent_total",
    "kansoku_agent_symbols_wire_bytes_total",
];

impl Agent {
    /// Opens the spool in `spool_dir`.
    pub fn new(cfg: AgentConfig, spool_dir: &std::path::Path) -> io::Result<Agent> {
        let spool = Spool::open(spool_dir, cfg.spool_limit.unwrap_or(crate::spool::MIN_BYTES))?;
        Ok(Agent {
            cfg,
            spool: Arc::new(spool),
            sender: Arc::default(),
            figures: Vec::new(),
            job: Arc::default(),
            server_at: Default::default(),
        })
    }

    /// Adds figures read at every batch, beside the agent's own.
    pub fn add_figures(&mut self, f: Figures) {
        self.figures.push(f);
    }

    pub fn spool(&self) -> &Arc<Spool> {
        &self.spool
    }

    pub fn sender_stats(&self) -> &Arc<SenderStats> {
        &self.sender
    }

    /// Spools the rounds from `rx` until it closes (the collector stopped):
    /// batches of `cfg.batch`, plus the agent's own series.
    pub fn spool_rounds(&self, rx: Receiver<Batch>) -> io::Result<()> {
        // Producer ids (each producer's own, spaced apart by the merge in
        // node::agent) -> spool ids.
        let mut ids: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let own: Vec<u32> = OWN
            .iter()
            .map(|n| self.spool.intern(&SeriesKey::new(*n, [("host", self.cfg.host.as_str())])))
            .collect::<io::Result<_>>()?;
        let started = Instant::now();
        let mut pending: Vec<Batch> = Vec::new();
        let mut buf = Vec::new();
        let batch_ns = self.cfg.batch.as_nanos() as i64;
        let interval_ns = self.cfg.interval.as_nanos() as i64;
        let mut failures = 0u64;
        for round in rx {
            for (cid, key) in &round.defs {
                ids.insert(*cid, self.spool.intern(key)?);
            }
            let points = round.points.iter().filter_map(|&(cid, v)| Some((*ids.get(&cid)?, v)));
            pending.push(Batch { time: round.time, defs: Vec::new(), points: points.collect() });
            let span = round.time.as_nanos() - pending[0].time.as_nanos() + interval_ns;
            if span >= batch_ns {
                match self.flush(&mut pending, &own, &mut buf, started) {
                    Ok(()) if failures > 0 => {
                        tracing::info!("spool writes resumed after {failures} failed batches");
                        failures = 0;
                    }
                    Ok(()) => {}
                    Err(e) => {
                        // Kept in `pending`: retried with the next round.
                        if failures == 0 {
                            tracing::error!("spool write failed (rounds kept in memory, retrying): {e}");
                        }
                        failures += 1;
                        if pending.len() > 3600 {
                            pending.drain(..pending.len() - 3600);
                        }
                    }
                }
            }
        }
        // A last batch, even without rounds: the final figures (the sampler's
        // last count, the spool's state) are its points.
        if pending.is_empty() {
            pending.push(Batch::new(Timestamp::now()));
        }
        self.flush(&mut pending, &own, &mut buf, started)?;
        Ok(())
    }

    fn flush(&self, pending: &mut Vec<Batch>, own: &[u32], buf: &mut Vec<u8>, started: Instant) -> io::Result<()> {
        let st = self.spool.stats();
        let now = Timestamp::now().as_nanos();
        let oldest = st.oldest_unacked_ns.load(Ordering::Relaxed) as i64;
        let values = [
            st.bytes.load(Ordering::Relaxed) as f64,
            st.limit_bytes.load(Ordering::Relaxed) as f64,
            st.dropped_batches.load(Ordering::Relaxed) as f64,
            st.dropped_samples.load(Ordering::Relaxed) as f64,
            st.backlog_batches.load(Ordering::Relaxed) as f64,
            if oldest > 0 { (now - oldest).max(0) as f64 / 1e9 } else { 0.0 },
            self.sender.wire_bytes.load(Ordering::Relaxed) as f64,
            self.sender.connects.load(Ordering::Relaxed) as f64,
            f64::from(u8::from(self.sender.connected.load(Ordering::Relaxed))),
            self.sender.sent_samples.load(Ordering::Relaxed) as f64,
            self.sender.symbols_sent.load(Ordering::Relaxed) as f64,
            self.sender.symbols_bytes.load(Ordering::Relaxed) as f64,
        ];
        let last = pending.last_mut().expect("pending rounds");
        last.points.extend(own.iter().copied().zip(values));
        for f in &self.figures {
            for (name, v) in f() {
                // Interned once: the spool's dictionary answers repeats from memory.
                let id = self.spool.intern(&SeriesKey::new(name, [("host", self.cfg.host.as_str())]))?;
                last.points.push((id, v));
            }
        }
        buf.clear();
        let samples = rounds::encode(pending, self.cfg.codec, buf);
        self.spool.push(Kind::Rounds, samples as u32, pending[0].time.as_nanos(), buf)?;
        pending.clear();
        if self.cfg.spool_limit.is_none() {
            self.size_spool(started);
        }
        Ok(())
    }

    /// Automatic sizing: 26 h at the rate written so far (at least 64 MiB,
    /// at most a quarter of the spool's filesystem).
    fn size_spool(&self, started: Instant) {
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed < 10.0 {
            return;
        }
        let written = self.spool.stats().written_batches.load(Ordering::Relaxed);
        if written == 0 {
            return;
        }
        let bytes = self.spool.stats().bytes.load(Ordering::Relaxed).max(1) as f64;
        let backlog = self.spool.stats().backlog_batches.load(Ordering::Relaxed).max(1) as f64;
        // Bytes per batch from what is held, batches per second since start.
        let per_batch = bytes / backlog.max(1.0);
        let rate = per_batch * written as f64 / elapsed;
        let want = (rate * 26.0 * 3600.0) as u64;
        let cap = rustix::fs::statvfs(self.spool.dir())
            .map(|s| s.f_blocks.saturating_mul(s.f_frsize) / 4)
            .unwrap_or(u64::MAX);
        self.spool.set_limit(want.min(cap));
    }

    /// Ships spooled batches until `stop` turns true; then gives the backlog
    /// up to `drain` to reach the server.
    pub async fn send(&self, mut stop: tokio::sync::watch::Receiver<bool>, drain: Duration) {
        let mut backoff = Duration::from_millis(100);
        let mut failures = 0u64;
        loop {
            if *stop.borrow() {
                break;
            }
            let connects = self.sender.connects.load(Ordering::Relaxed);
            let result = tokio::select! {
                r = self.session(false) => r,
                _ = link::net::stopped(&mut stop) => break,
            };
            self.sender.connected.store(false, Ordering::Relaxed);
            if self.sender.connects.load(Ordering::Relaxed) > connects {
                // It was welcomed: a new outage starts afresh.
                backoff = Duration::from_millis(100);
                failures = 0;
            }
            match result {
                Ok(true) => {
                    backoff = Duration::from_millis(100);
                    failures = 0;
                }
                Ok(false) => {}
                Err(e) => {
                    *self.sender.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = e.to_string();
                    let server = self.server().to_owned();
                    let n = self.servers().len();
                    if n > 1 {
                        // The next server, at once; the backoff only once
                        // every one of them failed in a row.
                        self.server_at.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!("agent: {server}: {e}; trying {} (spooling meanwhile)", self.server());
                        failures += 1;
                        if !failures.is_multiple_of(n as u64) {
                            continue;
                        }
                    } else {
                        if failures == 0 {
                            tracing::warn!("agent: {server}: {e}; retrying (spooling meanwhile)");
                        } else if failures.is_multiple_of(100) {
                            tracing::warn!("agent: {server}: still failing after {failures} attempts: {e}");
                        }
                        failures += 1;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = link::net::stopped(&mut stop) => break,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        // Stopping: one more session to drain what is left, briefly.
        if self.spool.stats().backlog_batches.load(Ordering::Relaxed) > 0 {
            match tokio::time::timeout(drain, self.session(true)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("agent: final send: {e}; the backlog stays in the spool"),
                Err(_) => tracing::warn!("agent: final send timed out; the backlog stays in the spool"),
            }
        }
    }

    /// The servers `--server` lists.
    fn servers(&self) -> Vec<&str> {
        let list: Vec<&str> = self.cfg.server.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if list.is_empty() { vec![self.cfg.server.as_str()] } else { list }
    }

    /// The server the next connection goes to.
    fn server(&self) -> &str {
        let servers = self.servers();
        servers[self.server_at.load(Ordering::Relaxed) % servers.len()]
    }

    /// One connection. Ok(true): it was welcomed (reset the backoff).
    /// With `drain`, returns once the backlog is empty.
    async fn session(&self, drain: bool) -> Result<bool, NetError> {
        let conn = net::connect(self.server(), self.cfg.tls.clone()).await?;
        let (rd, wr) = tokio::io::split(conn);
        let mut wr = BufWriter::with_capacity(256 << 10, wr);
        let mut out = Vec::new();
        Msg::Hello(Hello {
            version: wire::VERSION,
            host: self.cfg.host.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            spool_id: self.spool.spool_id(),
            token: self.cfg.token.clone().unwrap_or_default(),
            interval_ns: self.cfg.interval.as_nanos() as u64,
            batch_ns: self.cfg.batch.as_nanos() as u64,
        })
        .encode(&mut out);
        wr.write_all(&out).await?;
        wr.flush().await?;

        let (mut rx, _reader) = net::spawn_reader(rd, wire::FRAME_MAX);
        let next_seq = match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Err(_) => return Err(NetError::Protocol("no welcome within 10 s".into())),
            Ok(None) => return Err(NetError::Closed),
            Ok(Some(Err(e))) => return Err(e),
            Ok(Some(Ok((Msg::Welcome { next_seq, version }, _)))) => {
                // Every agent says which jobs it takes, none included: the
                // server can then tell "not connected" from "not willing".
                if version >= 3 {
                    out.clear();
                    let kinds = self.cfg.jobs.as_ref().map(|j| j.kinds.clone()).unwrap_or_default();
                    Msg::Offer { kinds }.encode(&mut out);
                    wr.write_all(&out).await?;
                    wr.flush().await?;
                }
                next_seq
            }
            Ok(Some(Ok((Msg::Reject { reason }, _)))) => return Err(NetError::Rejected(reason)),
            Ok(Some(Ok((m, _)))) => return Err(NetError::Protocol(format!("expected welcome, got {}", m.name()))),
        };
        self.sender.connects.fetch_add(1, Ordering::Relaxed);
        self.sender.connected.store(true, Ordering::Relaxed);
        if next_seq > 1 {
            self.spool.ack(next_seq - 1)?;
        }
        let mut cursor = next_seq.max(self.spool.acked() + 1);
        let mut declared = 0usize;
        let mut inflight: std::collections::VecDeque<(u64, Instant)> = Default::default();
        let mut newest = self.spool.watch();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // Symbol sources packed on blocking threads, sent from here (a
        // packer waits while two it packed wait to be sent).
        let (packed_tx, mut packed) = tokio::sync::mpsc::channel(2);
        // The source being sent: (kind, id, its packed bytes, bytes sent).
        let mut upload: Option<(u8, String, Vec<u8>, usize)> = None;
        // A result left by an earlier connection.
        self.job.ended.notify_one();
        loop {
            // Fill the window.
            let mut wrote = false;
            while inflight.len() < self.cfg.window {
                let Some(rec) = self.spool.read_from(cursor)? else { break };
                let n = self.spool.dict_len();
                if n > declared {
                    for chunk in self.spool.dict_from(declared).chunks(4096) {
                        out.clear();
                        Msg::Series(chunk.to_vec()).encode(&mut out);
                        wr.write_all(&out).await?;
                        self.sender.wire_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
                    }
                    declared = n;
                }
                out.clear();
                match rec.kind {
                    Kind::Rounds => Msg::Rounds { seq: rec.seq, body: rec.body },
                    Kind::Events => {
                        let (stream, batches) = split_events(&rec.body)?;
                        Msg::Events { seq: rec.seq, stream, batches }
                    }
                }
                .encode(&mut out);
                wr.write_all(&out).await?;
                self.sender.wire_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
                self.sender.sent_batches.fetch_add(1, Ordering::Relaxed);
                self.sender.sent_samples.fetch_add(u64::from(rec.samples), Ordering::Relaxed);
                inflight.push_back((rec.seq, Instant::now()));
                cursor = rec.seq + 1;
                wrote = true;
            }
            if wrote {
                wr.flush().await?;
            }
            if drain && inflight.is_empty() && self.spool.read_from(cursor)?.is_none() {
                return Ok(true);
            }
            let window_open = inflight.len() < self.cfg.window;
            tokio::select! {
                msg = rx.recv() => match msg {
                    None => return Err(NetError::Closed),
                    Some(Err(e)) => return Err(e),
                    Some(Ok((Msg::Ack { seq }, _))) => {
                        self.spool.ack(seq)?;
                        while inflight.front().is_some_and(|f| f.0 <= seq) {
                            inflight.pop_front();
                            self.sender.acked_batches.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Some(Ok((Msg::Ping { id, .. }, _))) => {
                        out.clear();
                        Msg::Pong { id, time_ns: Timestamp::now().as_nanos() }.encode(&mut out);
                        wr.write_all(&out).await?;
                        wr.flush().await?;
                    }
                    Some(Ok((Msg::Job { id, kind, start_ns, args }, _))) => {
                        if let Err(why) = self.start_job(id, &kind, start_ns, args) {
                            out.clear();
                            Msg::JobDone { id, ok: false, body: why.into_bytes() }.encode(&mut out);
                            wr.write_all(&out).await?;
                            wr.flush().await?;
                        }
                    }
                    Some(Ok((Msg::Need { kind, ids }, _))) => self.pack(kind, ids, packed_tx.clone()),
                    Some(Ok((Msg::Reject { reason }, _))) => return Err(NetError::Rejected(reason)),
                    Some(Ok((m, _))) => return Err(NetError::Protocol(format!("unexpected {} from the server", m.name()))),
                },
                Some((kind, id, result)) = packed.recv(), if upload.is_none() => match result {
                    Ok(bytes) => upload = Some((kind, id, bytes, 0)),
                    Err(reason) => {
                        tracing::info!("agent: the server asked for {id}: {reason}");
                        out.clear();
                        Msg::Lacks { kind, id, reason }.encode(&mut out);
                        wr.write_all(&out).await?;
                        wr.flush().await?;
                    }
                },
                // One chunk of the source being sent per turn of the loop:
                // acknowledgements, pings and batches keep flowing on a
                // slow link (a source of many chunks would otherwise hold
                // the loop past the ack timeout).
                () = std::future::ready(()), if upload.is_some() => {
                    let (kind, id, bytes, at) = upload.as_mut().expect("checked");
                    let end = (*at + symstore::CHUNK).min(bytes.len());
                    out.clear();
                    Msg::Blob { kind: *kind, id: id.clone(), offset: *at as u64, total: bytes.len() as u64, data: bytes[*at..end].to_vec() }
                        .encode(&mut out);
                    wr.write_all(&out).await?;
                    wr.flush().await?;
                    self.sender.wire_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
                    *at = end;
                    if end == bytes.len() {
                        self.sender.symbols_sent.fetch_add(1, Ordering::Relaxed);
                        self.sender.symbols_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        upload = None;
                    }
                },
                _ = self.job.ended.notified() => {
                    // Copied, and taken only once sent: a connection that
                    // drops first leaves it for the next.
                    let done = self.job.finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                    if let Some((id, result)) = done {
                        out.clear();
                        let (ok, body) = match result {
                            Ok(b) => (true, b),
                            Err(why) => (false, why.into_bytes()),
                        };
                        Msg::JobDone { id, ok, body }.encode(&mut out);
                        wr.write_all(&out).await?;
                        wr.flush().await?;
                        let mut slot = self.job.finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        if slot.as_ref().is_some_and(|(i, _)| *i == id) {
                            *slot = None;
                        }
                    }
                },
                _ = newest.changed(), if window_open => {}
                _ = tick.tick() => {
                    if let Some((seq, at)) = inflight.front()
                        && at.elapsed() > self.cfg.ack_timeout
                    {
                        return Err(NetError::Protocol(format!(
                            "batch {seq} unacknowledged for {:?}; reconnecting", self.cfg.ack_timeout
                        )));
                    }
                }
            }
        }
    }

    /// Packs the sources `ids` of `kind` the server asked for, one after
    /// another (smallest first) on a blocking thread, each handed to `done`
    /// (bytes, or why not).
    fn pack(&self, kind: u8, ids: Vec<String>, done: tokio::sync::mpsc::Sender<Packed>) {
        let root = self.cfg.symbols.clone();
        tokio::task::spawn_blocking(move || {
            let key_of = |id: &str| symstore::Kind::from_code(kind).and_then(|k| symstore::Key::new(k, id));
            let mut ids = ids;
            if let Some(root) = &root {
                ids.sort_by_cached_key(|id| key_of(id).map_or(0, |k| symstore::size(root, &k)));
            }
            for id in ids {
                let key = key_of(&id);
                let result = match (&root, key) {
                    (_, None) => Err(format!("not a symbol source this agent knows: {kind}/{id:?}")),
                    (None, _) => Err("this agent keeps no symbol sources (it does not sample)".to_owned()),
                    (Some(root), Some(key)) => symstore::pack(root, &key),
                };
                if done.blocking_send((kind, id, result)).is_err() {
                    return; // The connection closed: the next one is asked anew.
                }
            }
        });
    }

    /// Starts job `id` on a thread of its own, or says why not.
    fn start_job(&self, id: u64, kind: &str, start_ns: i64, args: Vec<String>) -> Result<(), String> {
        let Some(jobs) = &self.cfg.jobs else { return Err("this agent takes no jobs (start it with --jobs)".into()) };
        if !jobs.kinds.iter().any(|k| k == kind) {
            return Err(format!("this agent does not take {kind} jobs (it takes {})", jobs.kinds.join(", ")));
        }
        let mut running = self.job.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(other) = *running {
            return Err(format!("busy with job {other}"));
        }
        *running = Some(id);
        let (run, slot, kind) = (Arc::clone(&jobs.run), Arc::clone(&self.job), kind.to_owned());
        tracing::info!("agent: job {id} ({kind}) starts at {start_ns} ns: {}", args.join(" "));
        let spawned = std::thread::Builder::new().name(format!("job-{id}")).spawn(move || {
            let result = run(&kind, start_ns, &args);
            if let Err(why) = &result {
                tracing::warn!("agent: job {id} ({kind}) failed: {why}");
            }
            *slot.finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((id, result));
            *slot.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            slot.ended.notify_one();
        });
        if let Err(e) = spawned {
            *running = None;
            return Err(format!("cannot start a thread for it: {e}"));
        }
        Ok(())
    }

    /// Spools encoded event batches of `stream` (per-CPU samples, one
    /// batch per CPU) as one batch of the spool: sent in one frame, stored
    /// with one fsync.
    pub fn spool_events(&self, stream: &SeriesKey, encoded: &[Vec<u8>], events: u32, time_ns: i64) -> io::Result<u64> {
        let mut body = Vec::with_capacity(encoded.iter().map(|e| e.len() + 4).sum::<usize>() + 64);
        wire::put_events(&mut body, stream, encoded);
        self.spool.push(Kind::Events, events, time_ns, &body)
    }
}

/// A symbol source packed for the server: (kind, id, bytes or why not).
type Packed = (u8, String, Result<Vec<u8>, String>);

/// The stream and batches of a spooled event record (`spool_events`).
fn split_events(body: &[u8]) -> Result<(SeriesKey, Vec<Vec<u8>>), NetError> {
    wire::get_events(body).ok_or_else(|| NetError::Protocol("spooled event batches are damaged".into()))
}
