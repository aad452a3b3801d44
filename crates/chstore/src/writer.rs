//! What a kansoku server writes: series keys, samples, event batches and
//! each agent spool's mark, one INSERT per table per batch.
//!
//! **Exactly once.** An agent resends every batch no server acknowledged,
//! to whichever server it reaches next. The rows of a batch are a function
//! of the batch alone — ids are hashes of keys, rows in the batch's order —
//! so a resent batch makes the very same blocks, and a replicated table
//! drops a block whose hash it has seen among its last [`DEDUP_WINDOW`]
//! (ZooKeeper keeps the hashes, so any replica knows). A server that died
//! after storing a batch but before its ack therefore costs a resend, never
//! a duplicate. The mark is written after the rows: lost with its server, it
//! only makes the next server ask for batches that are then deduplicated.
//! On one server (no `--cluster`) MergeTree tables do not deduplicate on
//! 18.16: there a batch stored just before its server died is stored twice.
//!
//! [`DEDUP_WINDOW`]: crate::schema::DEDUP_WINDOW

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use codec::events::EventBatch;
use model::SeriesKey;
use model::report::Figure;

use crate::client::{Client, Error, Target};
use crate::schema::Layout;

/// A series' (or an event stream's) id: the 64-bit XXH3 of its key's text.
/// Every server computes the same id for the same key.
pub fn series_id(key: &SeriesKey) -> u64 {
    twox_hash::XxHash3_64::oneshot(key.to_string().as_bytes())
}

/// The id of a call chain within its stream: XXH3 of its frames.
pub fn stack_id(frames: &[u64]) -> u64 {
    let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_le_bytes()).collect();
    twox_hash::XxHash3_64::oneshot(&bytes)
}

/// The writer's counters, reported as `kansoku_clickhouse_*` series.
#[derive(Debug, Default)]
pub struct Stats {
    pub inserts: AtomicU64,
    pub rows: AtomicU64,
    pub bytes: AtomicU64,
    pub failed: AtomicU64,
    pub insert_ns: AtomicU64,
    /// Samples and events at times UInt64 nanoseconds cannot hold.
    pub refused: AtomicU64,
    /// Day partitions retention asked ClickHouse to drop.
    pub dropped_partitions: AtomicU64,
}

/// What one retention pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Retained {
    /// (table, day) asked to be dropped.
    pub dropped: Vec<(String, u64)>,
    /// Drops ClickHouse did not confirm in time (a replica down: it carries
    /// them out when it is back).
    pub errors: Vec<String>,
}

#[derive(Debug)]
pub struct Writer {
    client: Client,
    layout: Layout,
    stats: Stats,
    /// Ids of the series this server wrote to the dictionary: not written
    /// again.
    known: std::sync::Mutex<std::collections::HashSet<u64>>,
    /// Replicas of a shard each insert must reach (`insert_quorum`); 0: one.
    quorum: u32,
}

impl Writer {
    /// Connects to `url` (`clickhouse://HOST:PORT[,HOST:PORT…]/DB`), checks
    /// that the server answers, and makes the schema where it is missing.
    pub fn open(url: &str, cluster: Option<&str>, timeout: Duration) -> Result<Writer, OpenError> {
        let target = Target::parse(url).map_err(OpenError::Url)?;
        if let Some(c) = cluster
            && (c.is_empty() || !c.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            return Err(OpenError::Url(format!("--cluster {c:?}: letters, digits and _ only")));
        }
        let layout = Layout { db: target.db.clone(), cluster: cluster.map(str::to_owned) };
        let client = Client::new(target, timeout);
        let version = client.query("SELECT version()")?;
        tracing::info!("clickhouse: {} answers, version {}", client.target().hosts.join(","), version.trim());
        for sql in layout.statements() {
            client.query(&sql).map_err(|e| OpenError::Schema(sql.clone(), e))?;
        }
        Ok(Writer { client, layout, stats: Stats::default(), known: Default::default(), quorum: 0 })
    }

    /// Every insert from now on waits for `n` replicas of its shard
    /// (ClickHouse's `insert_quorum`; 0 or 1: the replica that takes it).
    pub fn set_insert_quorum(&mut self, n: u32) {
        self.quorum = n;
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A reader of what this writer's store holds (its own connection).
    pub fn reader(&self) -> crate::Reader {
        crate::Reader::new(Client::new(self.client.target().clone(), Duration::from_secs(60)))
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts samples or events refused for their time (before 1970 or
    /// after 2200).
    pub fn refuse(&self, n: u64) {
        self.stats.refused.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether this server already wrote series `id` to the dictionary.
    pub fn knows(&self, id: u64) -> bool {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&id)
    }

    /// Writes to the dictionary the keys this server has not written yet.
    pub fn write_series<'a>(&self, keys: impl IntoIterator<Item = &'a SeriesKey>) -> Result<(), Error> {
        let new: Vec<&SeriesKey> = keys.into_iter().filter(|k| !self.knows(series_id(k))).collect();
        self.insert("series", &series_rows(new.iter().copied()), new.len())?;
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(new.iter().map(|k| series_id(k)));
        Ok(())
    }

    /// Writes samples as (series id, t ns, value), in the order given.
    pub fn write_samples(&self, samples: &[(u64, u64, f64)]) -> Result<(), Error> {
        let mut rows = Vec::with_capacity(samples.len() * 24);
        for &(s, t, v) in samples {
            put_u64(&mut rows, s);
            put_u64(&mut rows, t);
            rows.extend_from_slice(&v.to_le_bytes());
        }
        self.insert("samples", &rows, samples.len())
    }

    /// Writes one stream's event batches (its key to the dictionary, the
    /// events, their distinct chains, their process tables); returns how
    /// many events. Times before 1970 are refused by the caller.
    pub fn write_events(&self, stream: &SeriesKey, batches: &[EventBatch]) -> Result<u64, Error> {
        let sid = series_id(stream);
        self.write_series([stream])?;
        let (mut events, mut stacks, mut procs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut n_events, mut n_stacks, mut n_procs) = (0, 0, 0);
        let mut seen = std::collections::HashSet::new();
        for b in batches {
            let ids: Vec<u64> = b.stacks.iter().map(|s| stack_id(s)).collect();
            for (s, &id) in b.stacks.iter().zip(&ids) {
                if seen.insert(id) {
                    put_u64(&mut stacks, sid);
                    put_u64(&mut stacks, id);
                    put_len(&mut stacks, s.len());
                    for &f in s {
                        put_u64(&mut stacks, f);
                    }
                    n_stacks += 1;
                }
            }
            for i in 0..b.time.len() {
                put_u64(&mut events, sid);
                events.extend_from_slice(&(b.cpu as u16).to_le_bytes());
                put_u64(&mut events, b.time[i] as u64);
                events.extend_from_slice(&b.pid[i].to_le_bytes());
                events.extend_from_slice(&b.tid[i].to_le_bytes());
                put_u64(&mut events, b.ip[i]);
                let stack = b.chain.get(i).and_then(|&c| ids.get(c as usize)).copied().unwrap_or(0);
                put_u64(&mut events, stack);
            }
            n_events += b.time.len();
            let t0 = b.time.first().copied().unwrap_or(0) as u64;
            for p in &b.procs {
                put_u64(&mut procs, sid);
                put_u64(&mut procs, t0);
                put_proc(&mut procs, p);
                n_procs += 1;
            }
        }
        // Chains and processes first: an event is never stored without
        // what names it.
        self.insert("stacks", &stacks, n_stacks)?;
        self.insert("procs", &procs, n_procs)?;
        self.insert("events", &events, n_events)?;
        Ok(n_events as u64)
    }

    /// The newest batch of `host`'s spool `spool` stored by any server (0:
    /// none).
    pub fn mark(&self, host: &str, spool: u64) -> Result<u64, Error> {
        let sql =
            format!("SELECT max(seq) FROM {}.marks WHERE host = {} AND spool = {spool}", self.layout.db, quote(host));
        let text = self.client.query(&sql)?;
        text.trim().parse().map_err(|_| Error::Answer {
            host: self.client.target().hosts.join(","),
            what: "the newest mark".into(),
            message: text.clone(),
        })
    }

    pub fn set_mark(&self, host: &str, spool: u64, seq: u64) -> Result<(), Error> {
        let mut row = Vec::new();
        put_str(&mut row, host);
        put_u64(&mut row, spool);
        put_u64(&mut row, seq);
        self.insert("marks", &row, 1)
    }

    /// Drops every day partition wholly older than `cutoff_ns` from the
    /// partitioned tables (on a cluster `ON CLUSTER`: each replica carries it
    /// out, one that is down when it comes back). Returns the (table, day)
    /// asked to be dropped, and the errors of those ClickHouse did not
    /// confirm in `ddl_timeout` (a replica down: it drops them when it is
    /// back). Idempotent: several servers may run it.
    pub fn drop_before(&self, cutoff_ns: u64, ddl_timeout: Duration) -> Result<Retained, Error> {
        let db = &self.layout.db;
        let parts = match &self.layout.cluster {
            Some(_) => format!("{db}.cluster_parts"),
            None => "system.parts".to_owned(),
        };
        let tables: Vec<String> = Layout::partitioned().map(|t| quote(&self.layout.local(t))).collect();
        let sql = format!(
            "SELECT DISTINCT table, partition FROM {parts} WHERE database = {} AND active AND table IN ({})",
            quote(db),
            tables.join(",")
        );
        let cutoff_day = cutoff_ns / crate::schema::DAY_NS;
        let mut old: Vec<(String, u64)> = self
            .client
            .query(&sql)?
            .lines()
            .filter_map(|l| {
                let (table, day) = l.split_once('\t')?;
                Some((table.to_owned(), day.trim_matches('\'').parse::<u64>().ok()?))
            })
            .filter(|(_, day)| *day < cutoff_day)
            .collect();
        old.sort();
        old.dedup();
        let on = self.layout.cluster.as_ref().map(|c| format!(" ON CLUSTER {c}")).unwrap_or_default();
        let timeout = ddl_timeout.as_secs().max(1).to_string();
        let mut errors = Vec::new();
        for (table, day) in &old {
            let sql = format!("ALTER TABLE {db}.{table}{on} DROP PARTITION {day}");
            match self.client.query_with(&sql, &[("distributed_ddl_task_timeout", &timeout)]) {
                Ok(_) => tracing::info!("clickhouse: dropped {table} day {day} (retention)"),
                Err(e) => {
                    tracing::warn!("clickhouse: dropping {table} day {day} (retention): {e}");
                    errors.push(format!("{table} day {day}: {e}"));
                }
            }
        }
        self.stats.dropped_partitions.fetch_add(old.len() as u64, Ordering::Relaxed);
        Ok(Retained { dropped: old, errors })
    }

    /// Keeps a symbol source (`kind` "binary" or "kallsyms", its id, its
    /// packed bytes) for every server.
    pub fn put_symbol(&self, kind: &str, id: &str, packed: &[u8]) -> Result<(), Error> {
        let mut row = Vec::with_capacity(packed.len() + 64);
        put_str(&mut row, kind);
        put_str(&mut row, id);
        put_len(&mut row, packed.len());
        row.extend_from_slice(packed);
        self.insert("symbols", &row, 1)
    }

    /// The packed bytes of a symbol source, if any server kept it.
    pub fn get_symbol(&self, kind: &str, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let sql = format!(
            "SELECT packed FROM {}.symbols WHERE kind = {} AND id = {} LIMIT 1 FORMAT RowBinary",
            self.layout.db,
            quote(kind),
            quote(id)
        );
        let bytes = self.client.query_bytes(&sql)?;
        if bytes.is_empty() {
            return Ok(None);
        }
        let mut r = crate::reader::Rows(&bytes);
        match r.bytes() {
            Some(packed) if r.is_empty() => Ok(Some(packed)),
            _ => Err(Error::Answer {
                host: self.client.target().hosts.join(","),
                what: format!("the symbol source {kind} {id}"),
                message: "the row does not decode".into(),
            }),
        }
    }

    fn insert(&self, table: &str, rows: &[u8], n: usize) -> Result<(), Error> {
        if n == 0 {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        // Into the Distributed table, synchronously: the insert returns once
        // every shard's replica took its part (an asynchronous one would
        // merge blocks in the background, and deduplication needs the blocks
        // a batch makes to be the same each time it is sent).
        let quorum = self.quorum.to_string();
        let mut settings: Vec<(&str, &str)> = Vec::new();
        if self.layout.cluster.is_some() {
            settings.push(("insert_distributed_sync", "1"));
            if self.quorum > 1 {
                settings.push(("insert_quorum", &quorum));
            }
        }
        let result = self.client.insert(table, rows, &settings);
        self.stats.insert_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match &result {
            Ok(()) => {
                self.stats.inserts.fetch_add(1, Ordering::Relaxed);
                self.stats.rows.fetch_add(n as u64, Ordering::Relaxed);
                self.stats.bytes.fetch_add(rows.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// The writer's figures (prefix `kansoku_clickhouse`).
    pub fn report(&self) -> Vec<Figure> {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            Figure::counter("inserts", get(&s.inserts)),
            Figure::counter("rows", get(&s.rows)),
            Figure::counter("sent_bytes", get(&s.bytes)),
            Figure::counter("failed_inserts", get(&s.failed)),
            Figure::counter_seconds("insert_seconds", get(&s.insert_ns) as f64 / 1e9),
            Figure::counter("refused_times", get(&s.refused)),
            Figure::counter("dropped_partitions", get(&s.dropped_partitions)),
        ]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("--store: {0}")]
    Url(String),
    #[error("--store: {0}")]
    Client(#[from] Error),
    #[error("--store: making the schema: {1} (statement: {0})")]
    Schema(String, Error),
}

/// Dictionary rows in RowBinary: (id, name, label names, label values).
pub fn series_rows<'a>(keys: impl IntoIterator<Item = &'a SeriesKey>) -> Vec<u8> {
    let mut rows = Vec::new();
    for key in keys {
        put_u64(&mut rows, series_id(key));
        put_str(&mut rows, key.name());
        put_len(&mut rows, key.labels().len());
        for (k, _) in key.labels() {
            put_str(&mut rows, k);
        }
        put_len(&mut rows, key.labels().len());
        for (_, v) in key.labels() {
            put_str(&mut rows, v);
        }
    }
    rows
}

/// A process table's row after its (stream, t): pid, comm, and the
/// mappings as five arrays (start, end, pgoff, build id, path) — the
/// order `chstore::events::decode_procs` reads.
pub fn put_proc(out: &mut Vec<u8>, p: &codec::events::ProcInfo) {
    out.extend_from_slice(&p.pid.to_le_bytes());
    put_str(out, &p.comm);
    let fields: [fn(&codec::events::MapInfo) -> u64; 3] = [|m| m.start, |m| m.end, |m| m.pgoff];
    for field in fields {
        put_len(out, p.maps.len());
        for m in &p.maps {
            put_u64(out, field(m));
        }
    }
    put_len(out, p.maps.len());
    for m in &p.maps {
        put_len(out, m.build_id.len());
        out.extend_from_slice(&m.build_id);
    }
    put_len(out, p.maps.len());
    for m in &p.maps {
        put_str(out, &m.path);
    }
}

/// A string literal for ClickHouse SQL.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// RowBinary's lengths: unsigned LEB128.
fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_same_wherever_they_are_computed() {
        let a = SeriesKey::new("m", [("host", "a"), ("cpu", "0")]);
        let b = SeriesKey::new("m", [("cpu", "0"), ("host", "a")]);
        assert_eq!(series_id(&a), series_id(&b));
        assert_ne!(series_id(&a), series_id(&SeriesKey::new("m", [("host", "b"), ("cpu", "0")])));
        // Pinned: a change of hash would split every stored series in two.
        assert_eq!(series_id(&SeriesKey::new("up", [("host", "a")])), 8_180_892_723_227_679_345);
    }

    #[test]
    fn lengths_are_leb128() {
        for (n, bytes) in [(0usize, vec![0u8]), (127, vec![0x7f]), (128, vec![0x80, 1]), (300, vec![0xac, 2])] {
            let mut out = Vec::new();
            put_len(&mut out, n);
            assert_eq!(out, bytes, "{n}");
        }
    }

    #[test]
    fn quoting_escapes_quotes_and_backslashes() {
        assert_eq!(quote(r"a'b\c"), r"'a\'b\\c'");
    }
}
