//! One agent connection after its hello: series declarations mapped to the
//! store's ids, each batch checked and stored in one blocking append with its
//! sequence mark (a resend at or below the mark acknowledged, not stored
//! again), the acknowledgement after the store made it durable, and the
//! clock probes.

use super::*;

pub(super) const SERVER_SERIES: [&str; 3] =
    ["kansoku_ingest_seq", "kansoku_agent_clock_offset_seconds", "kansoku_agent_rtt_seconds"];

impl Session<'_> {
    pub(super) fn declare_server_series(&mut self) {
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

    pub(super) async fn run<W>(
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
                order = next_order(&mut self.orders) => {
                    match order {
                        Some(o) => {
                            out.clear();
                            Msg::Job { id: o.id, kind: o.kind, start_ns: o.start_ns, args: o.args }.encode(&mut out);
                            wr.write_all(&out).await?;
                            wr.flush().await?;
                        }
                        // A newer connection of this host took its offer over.
                        None => self.orders = None,
                    }
                    continue;
                }
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
                    self.ask_sources(&mut out);
                    wr.write_all(&out).await?;
                    wr.flush().await?;
                }
                Msg::Blob { kind, id, offset, total, data } => self.blob(kind, &id, offset, total, data).await?,
                Msg::Lacks { kind, id, reason } => {
                    let (key, symbols) = self.source(kind, &id)?;
                    tracing::info!("ingest: {}: lacks {key}: {reason}", self.host);
                    symbols.lacks(&key, self.owner, &reason);
                }
                Msg::Pong { id, time_ns } => {
                    self.pong(id, time_ns).await?;
                    self.ingest.jobs.touch();
                }
                Msg::Offer { kinds } => {
                    if let Some((n, _)) = self.orders.take() {
                        self.ingest.jobs.withdraw(&self.host, n);
                    }
                    if !kinds.is_empty() {
                        tracing::info!("ingest: agent {:?} takes jobs: {}", self.host, kinds.join(", "));
                    }
                    self.orders = Some(self.ingest.jobs.offer(&self.host, kinds));
                }
                Msg::JobDone { id, ok, body } => {
                    let result = if ok { Ok(body) } else { Err(String::from_utf8_lossy(&body).into_owned()) };
                    self.ingest.jobs.done(&self.host, id, result);
                }
                m => {
                    stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                    return Err(NetError::Rejected(format!("unexpected {} from an agent", m.name())));
                }
            }
        }
    }

    /// The symbol store and `kind`/`id` as a key, or a protocol error
    /// (no agent sends sources it was not asked for).
    fn source(&self, kind: u8, id: &str) -> Result<(symstore::Key, Arc<symstore::SymStore>), NetError> {
        let symbols = self.ingest.cfg.symbols.clone();
        let key = symstore::Kind::from_code(kind).and_then(|k| symstore::Key::new(k, id));
        match (key, symbols) {
            (Some(key), Some(symbols)) => Ok((key, symbols)),
            _ => {
                self.ingest.stats.rejected_protocol.fetch_add(1, Ordering::Relaxed);
                Err(NetError::Rejected(format!("symbol source {kind}/{id:?} was not asked for")))
            }
        }
    }

    /// A chunk of a symbol source: taken on a blocking thread (the last
    /// one decompresses and checks the whole). A refused upload is logged
    /// and counted; the connection carries on.
    async fn blob(&mut self, kind: u8, id: &str, offset: u64, total: u64, data: Vec<u8>) -> Result<(), NetError> {
        let (key, symbols) = self.source(kind, id)?;
        let owner = self.owner;
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || match symbols.receive(&key, owner, offset, total, &data) {
            Ok(Some(bytes)) => tracing::info!("ingest: {host}: received {key} ({bytes} bytes, {total} on the wire)"),
            Ok(None) => {}
            Err(e) => tracing::warn!("ingest: {host}: refused {e}"),
        })
        .await
        .map_err(|e| NetError::Protocol(format!("symbol task: {e}")))
    }

    /// Asks the agent (appended to `out`) for the symbol sources its last
    /// event batch named that no one has sent yet: the binaries of its
    /// mappings by build id, and its boot's kernel symbols unless that is
    /// this machine's boot (whose own table names them).
    fn ask_sources(&mut self, out: &mut Vec<u8>) {
        let (ids, boot) = std::mem::take(&mut self.found);
        let Some(symbols) = &self.ingest.cfg.symbols else { return };
        let this_boot = self.ingest.boot.as_deref();
        let boot = boot.filter(|b| Some(b.as_str()) != this_boot).and_then(|b| symstore::Key::kallsyms(&b));
        let keys = ids.iter().filter_map(|id| symstore::Key::binary(id)).chain(boot);
        let (mut binaries, mut tables) = (Vec::new(), Vec::new());
        for key in keys {
            // Kept (perhaps since this connection sent it): forget having
            // asked, so that one dropped from the store later is asked again.
            if symbols.has(&key) {
                self.sources_seen.remove(&key);
                continue;
            }
            if self.sources_seen.contains(&key) {
                continue; // asked, and arriving or said lacking
            }
            // Another server may have received it: taken from the shared
            // store (in the background) rather than asked of the agent; a
            // source it lacks is asked at the next batch.
            match symbols.lookup(&key) {
                symstore::Lookup::Fetch => {
                    let symbols = Arc::clone(symbols);
                    tokio::task::spawn_blocking(move || symbols.fetch_shared(&key));
                    continue;
                }
                symstore::Lookup::Wait => continue,
                symstore::Lookup::Ask => {}
            }
            if symbols.claim(&key, self.owner) {
                match key.kind {
                    symstore::Kind::Binary => binaries.push(key.id.clone()),
                    symstore::Kind::Kallsyms => tables.push(key.id.clone()),
                }
                self.sources_seen.insert(key);
            }
        }
        for (kind, ids) in [(symstore::Kind::Binary, binaries), (symstore::Kind::Kallsyms, tables)] {
            if !ids.is_empty() {
                tracing::debug!("ingest: {}: asking for {} {}", self.host, ids.len(), kind.name());
                Msg::Need { kind: kind.code(), ids }.encode(out);
            }
        }
    }

    pub(super) fn define(&mut self, defs: Vec<(u32, SeriesKey)>) -> Result<(), NetError> {
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
            let stored = match &self.ingest.cfg.clickhouse {
                Some(ch) => ch.knows(chstore::series_id(&key)),
                None => self.ingest.store.contains(&key),
            };
            if !stored {
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
            match &mut work.ch {
                // The embedded store keeps only the server's own series.
                Some(remote) => remote.define(self.n_local, key),
                None => self.pending.push((self.n_local, key)),
            }
            self.n_local += 1;
        }
        Ok(())
    }

    pub(super) async fn store_batch(
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
        if work.ch.is_none() {
            // (With ClickHouse the pending ones are the server's own series,
            // for the clock probes' appends.)
            work.defs = std::mem::take(&mut self.pending);
        }
        let host = self.host.clone();
        let mark_key = self.mark_key.clone();
        // Decoding and storing run on a blocking thread (the append waits
        // for fsync); their CPU time is the server's cost per sample.
        let (result, work, mut figures) = tokio::task::spawn_blocking(move || {
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
        self.found = (std::mem::take(&mut figures.build_ids), figures.boot.take());
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
            Err(e @ (BatchError::Store(_) | BatchError::Remote(_))) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("ingest: {}: batch {seq} not stored: {e}", self.host);
                // Not acknowledged: the agent keeps it and sends it again.
                Err(NetError::Rejected(format!("server cannot store batch {seq} now: {e}")))
            }
        }
    }

    pub(super) async fn pong(&mut self, id: u64, agent_ns: i64) -> Result<(), NetError> {
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

/// The next job order of a session that offered jobs; never, otherwise.
async fn next_order(
    orders: &mut Option<(u64, tokio::sync::mpsc::Receiver<super::jobs::Order>)>,
) -> Option<super::jobs::Order> {
    match orders {
        Some((_, rx)) => rx.recv().await,
        None => std::future::pending().await,
    }
}

pub(super) enum Payload {
    Rounds(Vec<u8>),
    Events(SeriesKey, Vec<Vec<u8>>),
}

#[derive(Debug, thiserror::Error)]
pub(super) enum BatchError {
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Store(#[from] store::StoreError),
    #[error("{0}")]
    Remote(#[from] chstore::Error),
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
    /// Build ids of the mappings an event batch named, and its stream's
    /// boot (when the server keeps symbol sources).
    pub build_ids: Vec<Vec<u8>>,
    pub boot: Option<String>,
}

/// The part of a session that moves to the blocking thread for an append.
#[derive(Debug, Default)]
pub(super) struct Work {
    appender: Appender,
    /// Agent's series id -> this connection's sender id (u32::MAX: undeclared).
    local: Vec<u32>,
    /// Definitions to hand to the store with this append.
    defs: Vec<(u32, SeriesKey)>,
    cpu_id: Option<u32>,
    backlog_id: Option<u32>,
    dropped_id: Option<u32>,
    spool_bytes_id: Option<u32>,
    /// Read the build ids and boot of event batches (for symbol sources).
    pub(super) sources: bool,
    /// Where agents' batches go instead of the embedded store.
    ch: Option<Remote>,
}

/// A connection's series in ClickHouse.
#[derive(Debug)]
pub(super) struct Remote {
    writer: Arc<chstore::Writer>,
    /// This connection's id -> (ClickHouse series id, key).
    ids: Vec<(u64, SeriesKey)>,
    /// Ids defined since the last batch, for the dictionary.
    fresh: Vec<u32>,
    /// The agent's spool, whose mark each batch moves.
    spool: u64,
}

impl Remote {
    fn define(&mut self, local: u32, key: SeriesKey) {
        let l = local as usize;
        if self.ids.len() <= l {
            self.ids.resize(l + 1, (0, SeriesKey::new("", [("", "")])));
        }
        self.ids[l] = (chstore::series_id(&key), key);
        self.fresh.push(local);
    }

    /// The rounds of a batch: new keys to the dictionary, the samples in the
    /// batch's order (the same rows each time the batch comes, so a resend
    /// is deduplicated), then the spool's mark. Samples at times outside
    /// 1970..2200 are refused and counted, as the embedded store does.
    fn store_rounds(
        &mut self,
        rounds: &[Batch],
        (host, seq): (&str, u64),
        fig: &mut Figures,
    ) -> Result<Vec<Appended>, BatchError> {
        self.write_fresh()?;
        let mut rows = Vec::with_capacity(rounds.iter().map(|r| r.points.len()).sum());
        for r in rounds {
            if !r.time.is_storable() {
                self.writer.refuse(r.points.len() as u64);
                fig.samples -= r.points.len() as u64;
                continue;
            }
            let t = r.time.as_nanos() as u64;
            rows.extend(r.points.iter().map(|p| (self.ids[p.0 as usize].0, t, p.1)));
        }
        self.writer.write_samples(&rows)?;
        self.writer.set_mark(host, self.spool, seq)?;
        Ok(Vec::new())
    }

    fn write_fresh(&mut self) -> Result<(), chstore::Error> {
        let fresh = std::mem::take(&mut self.fresh);
        let written = self.writer.write_series(fresh.iter().map(|&l| &self.ids[l as usize].1));
        if written.is_err() {
            self.fresh = fresh; // again with the next batch
        }
        written
    }
}

impl Work {
    /// `sources`: read the build ids and boot of event batches; `ch`: store
    /// in ClickHouse, marking the agent's spool `spool`.
    pub(super) fn new(sources: bool, ch: Option<Arc<chstore::Writer>>, spool: u64) -> Work {
        let ch = ch.map(|writer| Remote { writer, ids: Vec::new(), fresh: Vec::new(), spool });
        Work { sources, ch, ..Work::default() }
    }

    pub(super) fn store(
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
                if let Some(remote) = &mut self.ch {
                    return remote.store_rounds(&rounds, (host, seq), fig);
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
                if let Some(remote) = &mut self.ch {
                    remote.write_fresh()?;
                    let ch = &remote.writer;
                    let batches = encoded
                        .iter()
                        .map(|e| codec::events::EventBatch::decode(e, codec::events::Want::ALL))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| BatchError::Malformed(format!("event batch: {e}")))?;
                    let batches = storable_events(batches, ch);
                    fig.events = ch.write_events(&stream, &batches)?;
                    if self.sources {
                        // (Decoded whole already: no second decode.)
                        fig.boot = stream.get("boot").map(str::to_owned);
                        fig.build_ids = distinct_build_ids(&batches);
                    }
                    ch.set_mark(host, remote.spool, seq)?;
                    return Ok(Vec::new());
                }
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
                if self.sources {
                    fig.boot = stream.get("boot").map(str::to_owned);
                    fig.build_ids = build_ids(&encoded);
                }
                let mark = Batch { time: Timestamp::now(), defs, points: vec![seq_point] };
                Ok(vec![store.append(&mut self.appender, &mark)?])
            }
        }
    }
}

/// Events at times ClickHouse's UInt64 nanoseconds can hold (1970..2200);
/// the rest refused and counted.
fn storable_events(
    mut batches: Vec<codec::events::EventBatch>,
    ch: &chstore::Writer,
) -> Vec<codec::events::EventBatch> {
    for b in &mut batches {
        let keep: Vec<bool> = b.time.iter().map(|&t| Timestamp(t).is_storable()).collect();
        let refused = keep.iter().filter(|k| !**k).count();
        if refused == 0 {
            continue;
        }
        ch.refuse(refused as u64);
        retain(&mut b.time, &keep);
        retain(&mut b.pid, &keep);
        retain(&mut b.tid, &keep);
        retain(&mut b.ip, &keep);
        if !b.chain.is_empty() {
            retain(&mut b.chain, &keep);
        }
    }
    batches
}

/// Keeps the elements of `v` whose flag in `keep` is set.
fn retain<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut flags = keep.iter();
    v.retain(|_| flags.next().copied().unwrap_or(false));
}

/// The distinct build ids of the mappings stored event batches carry (their
/// processes' side band; the other columns are skipped, not decoded).
fn build_ids(encoded: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let none = codec::events::Want { time: false, pid: false, tid: false, ip: false, chain: false };
    let decoded: Vec<codec::events::EventBatch> = encoded
        .iter()
        // A batch without a process table (kernel samples only) says so
        // in its header: nothing to decode.
        .filter(|e| codec::events::Header::read(e).is_ok_and(|(h, _)| h.has_procs))
        .filter_map(|e| codec::events::EventBatch::decode(e, none).ok())
        .collect();
    distinct_build_ids(&decoded)
}

/// The distinct build ids of decoded batches' mappings.
fn distinct_build_ids(batches: &[codec::events::EventBatch]) -> Vec<Vec<u8>> {
    let mut ids: Vec<Vec<u8>> = batches
        .iter()
        .flat_map(|b| b.procs.iter().flat_map(|p| p.maps.iter().map(|m| m.build_id.clone())))
        .filter(|id| !id.is_empty())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}
