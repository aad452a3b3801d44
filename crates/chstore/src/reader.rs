//! What queries read on a server in front of ClickHouse: series by
//! selector from the dictionary (held in memory, reloaded when it grew),
//! samples and tiers by SQL, as `source::Source`, so PromQL, InfluxQL, the
//! range API and the diagnosis run unchanged. `Both` puts the server's own
//! embedded series (its ingest figures, the agents' clock offsets) beside
//! them.
//!
//! A query ClickHouse cannot answer is logged and counted
//! (`kansoku_clickhouse_read_errors_total`) and reads as no samples.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use model::{Selector, SeriesKey, Timestamp};
use source::Agg;
use source::Buckets;
use source::Source;
use source::tier::Tier;

use crate::client::{Client, Error};
use crate::schema::TIERS;

/// The dictionary is asked whether it grew at most this often.
const RELOAD_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct Catalogue {
    /// By local id: the ClickHouse id and the key. Local ids never change.
    series: Vec<(u64, SeriesKey)>,
    by_id: HashMap<u64, u32>,
    /// Rows the dictionary had at the last load, and when it was asked.
    rows: u64,
    checked: Option<Instant>,
}

#[derive(Debug)]
pub struct Reader {
    client: Client,
    db: String,
    catalogue: RwLock<Catalogue>,
    /// One reload at a time.
    loading: Mutex<()>,
    pub read_errors: AtomicU64,
    pub queries: AtomicU64,
}

impl Reader {
    pub fn new(client: Client) -> Reader {
        let db = client.target().db.clone();
        Reader {
            client,
            db,
            catalogue: RwLock::default(),
            loading: Mutex::new(()),
            read_errors: AtomicU64::new(0),
            queries: AtomicU64::new(0),
        }
    }

    /// The reader's figures (prefix `kansoku_clickhouse`).
    pub fn report(&self) -> Vec<model::report::Figure> {
        vec![
            model::report::Figure::counter("queries", self.queries.load(Ordering::Relaxed)),
            model::report::Figure::counter("read_errors", self.read_errors.load(Ordering::Relaxed)),
        ]
    }

    pub(crate) fn failed(&self, what: &str, e: &Error) {
        self.read_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!("clickhouse: {what}: {e}");
    }

    pub(crate) fn query_bytes(&self, sql: &str) -> Result<Vec<u8>, Error> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.client.query_bytes(sql)
    }

    /// Reloads the dictionary if it grew since the last look (asked at most
    /// every [`RELOAD_EVERY`]).
    pub(crate) fn refresh(&self) {
        let _one = self.loading.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (rows, checked) = {
            let c = self.catalogue.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            (c.rows, c.checked)
        };
        if checked.is_some_and(|t| t.elapsed() < RELOAD_EVERY) {
            return;
        }
        let now = match self.client.query(&format!("SELECT count() FROM {}.series", self.db)) {
            Ok(t) => t.trim().parse::<u64>().unwrap_or(u64::MAX),
            Err(e) => return self.failed("counting the series", &e),
        };
        if now == rows {
            self.catalogue.write().unwrap_or_else(std::sync::PoisonError::into_inner).checked = Some(Instant::now());
            return;
        }
        let sql = format!("SELECT id, name, label_names, label_values FROM {}.series FORMAT RowBinary", self.db);
        let bytes = match self.query_bytes(&sql) {
            Ok(b) => b,
            Err(e) => return self.failed("reading the series", &e),
        };
        let mut found = Vec::new();
        let mut r = Rows(&bytes);
        while !r.0.is_empty() {
            let Some(row) = r.series() else {
                self.read_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("clickhouse: the series dictionary's rows do not decode");
                return;
            };
            found.push(row);
        }
        let mut c = self.catalogue.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (id, key) in found {
            if !c.by_id.contains_key(&id) {
                let local = c.series.len() as u32;
                c.by_id.insert(id, local);
                c.series.push((id, key));
            }
        }
        c.rows = now;
        c.checked = Some(Instant::now());
    }

    /// The ClickHouse ids and keys of the series (or event streams)
    /// matching `sel`, from a fresh look at the dictionary.
    pub(crate) fn matching(&self, sel: &Selector) -> Vec<(u64, SeriesKey)> {
        self.refresh();
        let c = self.catalogue.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        c.series.iter().filter(|(_, k)| sel.matches(k)).cloned().collect()
    }

    pub(crate) fn db(&self) -> &str {
        &self.db
    }

    fn id(&self, local: u32) -> Option<u64> {
        let c = self.catalogue.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        c.series.get(local as usize).map(|s| s.0)
    }
}

fn bounds(from: Timestamp, to: Timestamp) -> (u64, u64) {
    (from.as_nanos().max(0) as u64, to.as_nanos().max(0) as u64)
}

impl Source for Reader {
    fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize) {
        self.refresh();
        let c = self.catalogue.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = sel.exact_name();
        let mut found: Vec<(u32, SeriesKey)> = c
            .series
            .iter()
            .enumerate()
            .filter(|(_, (_, k))| name.is_none_or(|n| k.name() == n) && sel.matches(k))
            .map(|(i, (_, k))| (i as u32, k.clone()))
            .collect();
        found.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        let total = found.len();
        found.truncate(limit);
        (found, total)
    }

    fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>) {
        let (Some(series), (from, to)) = (self.id(id), bounds(from, to)) else { return (Vec::new(), Vec::new()) };
        if from > to {
            return (Vec::new(), Vec::new());
        }
        let sql = format!(
            "SELECT t, v FROM {}.samples WHERE series = {series} AND t >= {from} AND t <= {to} ORDER BY t FORMAT RowBinary",
            self.db
        );
        let bytes = match self.query_bytes(&sql) {
            Ok(b) => b,
            Err(e) => {
                self.failed("reading samples", &e);
                return (Vec::new(), Vec::new());
            }
        };
        let (mut ts, mut vals) = (Vec::with_capacity(bytes.len() / 16), Vec::with_capacity(bytes.len() / 16));
        for row in bytes.chunks_exact(16) {
            let t = u64::from_le_bytes(row[..8].try_into().expect("8 bytes")) as i64;
            // One server without deduplication may hold a batch twice.
            if ts.last() == Some(&t) {
                continue;
            }
            ts.push(t);
            vals.push(f64::from_le_bytes(row[8..].try_into().expect("8 bytes")));
        }
        (ts, vals)
    }

    /// One query for every series: `series IN (…)`, at most `limit + 1`
    /// rows. Rows come in parts' order (each part sorted by series and
    /// time); sorted here per series, which costs less than ClickHouse's
    /// ORDER BY over all of them.
    fn read_many(&self, ids: &[u32], from: Timestamp, to: Timestamp, limit: usize) -> Vec<(Vec<i64>, Vec<f64>)> {
        let mut out = vec![(Vec::new(), Vec::new()); ids.len()];
        let (lo, hi) = bounds(from, to);
        let mut at: HashMap<u64, Vec<usize>> = HashMap::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            if let Some(series) = self.id(id) {
                at.entry(series).or_default().push(i);
            }
        }
        if at.is_empty() || lo > hi {
            return out;
        }
        let list: Vec<String> = at.keys().map(u64::to_string).collect();
        let sql = format!(
            "SELECT series, t, v FROM {}.samples WHERE series IN ({}) AND t >= {lo} AND t <= {hi} \
             LIMIT {} FORMAT RowBinary",
            self.db,
            list.join(","),
            limit.saturating_add(1).min(i64::MAX as usize)
        );
        let bytes = match self.query_bytes(&sql) {
            Ok(b) => b,
            Err(e) => {
                self.failed("reading samples", &e);
                return out;
            }
        };
        let mut rows: HashMap<u64, Vec<(i64, f64)>> = HashMap::with_capacity(at.len());
        let mut current: Option<(u64, Vec<(i64, f64)>)> = None;
        for row in bytes.chunks_exact(24) {
            let word = |i: usize| u64::from_le_bytes(row[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            let series = word(0);
            let sample = (word(1) as i64, f64::from_bits(word(2)));
            match &mut current {
                Some((s, v)) if *s == series => v.push(sample),
                _ => {
                    if let Some((s, v)) = current.take() {
                        rows.insert(s, v);
                    }
                    let mut v = rows.remove(&series).unwrap_or_default();
                    v.push(sample);
                    current = Some((series, v));
                }
            }
        }
        if let Some((s, v)) = current.take() {
            rows.insert(s, v);
        }
        for (series, mut samples) in rows {
            let Some(slots) = at.get(&series) else { continue };
            samples.sort_unstable_by_key(|s| s.0);
            // One server without deduplication may hold a batch twice.
            samples.dedup_by_key(|s| s.0);
            let read: (Vec<i64>, Vec<f64>) = samples.into_iter().unzip();
            for &i in &slots[1..] {
                out[i] = read.clone();
            }
            out[slots[0]] = read;
        }
        out
    }

    fn tiers(&self) -> Vec<i64> {
        TIERS.iter().map(|t| t.1 as i64).collect()
    }

    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier {
        let from = Timestamp(from.as_nanos().saturating_sub(from.as_nanos().rem_euclid(res)));
        let Some(&(table, _)) = TIERS.iter().find(|t| t.1 as i64 == res) else {
            // Not a kept tier: computed from the raw samples.
            let raw_to = Timestamp(to.as_nanos().saturating_add(res - 1 - to.as_nanos().rem_euclid(res)));
            let (ts, vals) = self.read(id, from, raw_to);
            return Tier::build(&ts, &vals, res);
        };
        let (Some(series), (lo, hi)) = (self.id(id), bounds(from, to)) else { return Tier::default() };
        let sql = format!(
            "SELECT t, minMerge(min), maxMerge(max), sumMerge(sum), countMerge(count) FROM {}.{table} \
             WHERE series = {series} AND t >= {lo} AND t <= {hi} GROUP BY t ORDER BY t FORMAT RowBinary",
            self.db
        );
        let bytes = match self.query_bytes(&sql) {
            Ok(b) => b,
            Err(e) => {
                self.failed("reading a tier", &e);
                return Tier::default();
            }
        };
        let mut tier = Tier::default();
        for row in bytes.chunks_exact(40) {
            let word = |i: usize| u64::from_le_bytes(row[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            tier.ts.push(word(0) as i64);
            tier.min.push(f64::from_bits(word(1)));
            tier.max.push(f64::from_bits(word(2)));
            tier.sum.push(f64::from_bits(word(3)));
            tier.count.push(word(4) as f64);
        }
        tier
    }

    /// One GROUP BY for every series: ClickHouse buckets where the samples
    /// are, and only the buckets travel.
    fn buckets(
        &self,
        ids: &[u32],
        from: Timestamp,
        to: Timestamp,
        start: i64,
        step: i64,
        n: usize,
        aggs: &[Agg],
    ) -> Option<Buckets> {
        let (lo, hi) = bounds(from, to);
        let mut out: Buckets = ids.iter().map(|_| aggs.iter().map(|_| vec![None; n]).collect()).collect();
        let mut at: HashMap<u64, usize> = HashMap::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            at.insert(self.id(id)?, i);
        }
        if at.is_empty() || lo > hi || start < 0 {
            return Some(out);
        }
        let list: Vec<String> = at.keys().map(u64::to_string).collect();
        let sql = format!(
            "SELECT series, intDiv(t - {start}, {step}) AS b, min(v), max(v), sum(v), count(), argMax(v, t)              FROM {}.samples WHERE series IN ({}) AND t >= {lo} AND t <= {hi} GROUP BY series, b FORMAT RowBinary",
            self.db,
            list.join(",")
        );
        let bytes = match self.query_bytes(&sql) {
            Ok(b) => b,
            Err(e) => {
                self.failed("bucketing samples", &e);
                return Some(out);
            }
        };
        for row in bytes.chunks_exact(56) {
            let word = |i: usize| u64::from_le_bytes(row[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            let (Some(&s), b) = (at.get(&word(0)), word(1) as usize) else { continue };
            if b >= n {
                continue;
            }
            let (min, max, sum, count, last) = (
                f64::from_bits(word(2)),
                f64::from_bits(word(3)),
                f64::from_bits(word(4)),
                word(5),
                f64::from_bits(word(6)),
            );
            for (col, agg) in out[s].iter_mut().zip(aggs) {
                col[b] = Some(match agg {
                    Agg::Min => min,
                    Agg::Max => max,
                    Agg::Avg => sum / count as f64,
                    Agg::Last => last,
                    Agg::Count => count as f64,
                });
            }
        }
        Some(out)
    }
}

/// Two sources as one: the first's ids as they are, the second's with the
/// top bit set. A key both hold is read from the first.
#[derive(Debug)]
pub struct Both<A, B>(pub A, pub B);

const SECOND: u32 = 1 << 31;

impl<A: Source, B: Source> Source for Both<A, B> {
    fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize) {
        let mut all = self.0.series(sel);
        let first: std::collections::HashSet<SeriesKey> = all.iter().map(|s| s.1.clone()).collect();
        all.extend(self.1.series(sel).into_iter().filter(|s| !first.contains(&s.1)).map(|(i, k)| (i | SECOND, k)));
        all.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        let total = all.len();
        all.truncate(limit);
        (all, total)
    }

    fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>) {
        if id & SECOND == 0 { self.0.read(id, from, to) } else { self.1.read(id & !SECOND, from, to) }
    }

    fn read_many(&self, ids: &[u32], from: Timestamp, to: Timestamp, limit: usize) -> Vec<(Vec<i64>, Vec<f64>)> {
        let (first, second): (Vec<usize>, Vec<usize>) = (0..ids.len()).partition(|&i| ids[i] & SECOND == 0);
        let mut out = vec![(Vec::new(), Vec::new()); ids.len()];
        let a = self.0.read_many(&first.iter().map(|&i| ids[i]).collect::<Vec<_>>(), from, to, limit);
        let b = self.1.read_many(&second.iter().map(|&i| ids[i] & !SECOND).collect::<Vec<_>>(), from, to, limit);
        for (i, r) in first.into_iter().zip(a).chain(second.into_iter().zip(b)) {
            out[i] = r;
        }
        out
    }

    fn tiers(&self) -> Vec<i64> {
        let mut t = self.0.tiers();
        t.retain(|r| self.1.tiers().contains(r));
        t
    }

    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier {
        if id & SECOND == 0 {
            self.0.read_tier(id, res, from, to)
        } else {
            self.1.read_tier(id & !SECOND, res, from, to)
        }
    }
}

/// Two event sources as one: both counted, the counts added.
impl<A: source::EventSource, B: source::EventSource> source::EventSource for Both<A, B> {
    fn count(
        &self,
        q: &source::EventQuery,
        pid: Option<u32>,
        shape: source::Shape,
        max: u64,
    ) -> Result<source::EventCounts, source::EventsError> {
        let mut a = self.0.count(q, pid, shape, max)?;
        a.merge(self.1.count(q, pid, shape, max)?);
        Ok(a)
    }
}

/// RowBinary rows being read.
pub(crate) struct Rows<'a>(pub &'a [u8]);

impl Rows<'_> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    /// An `Array(UInt64)`.
    pub fn u64s(&mut self) -> Option<Vec<u64>> {
        let n = self.len()?;
        if n > self.0.len() / 8 {
            return None;
        }
        (0..n).map(|_| self.u64()).collect()
    }

    /// A `String` that may hold any bytes.
    pub fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.len()?;
        Some(self.take(n)?.to_vec())
    }

    /// An `Array(String)` of any bytes.
    pub fn byte_strings(&mut self) -> Option<Vec<Vec<u8>>> {
        let n = self.len()?;
        if n > self.0.len() {
            return None;
        }
        (0..n).map(|_| self.bytes()).collect()
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn len(&mut self) -> Option<usize> {
        let mut n = 0usize;
        for shift in (0..64).step_by(7) {
            let b = *self.take(1)?.first()?;
            n |= ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    pub fn string(&mut self) -> Option<String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    pub fn strings(&mut self) -> Option<Vec<String>> {
        let n = self.len()?;
        if n > self.0.len() {
            return None;
        }
        (0..n).map(|_| self.string()).collect()
    }

    /// A row of the dictionary: (id, key).
    fn series(&mut self) -> Option<(u64, SeriesKey)> {
        let id = self.u64()?;
        let name = self.string()?;
        let names = self.strings()?;
        let values = self.strings()?;
        (names.len() == values.len()).then(|| (id, SeriesKey::new(name, names.into_iter().zip(values))))
    }
}

/// Decodes dictionary rows (for the fuzzer): None where they do not decode.
pub fn decode_series(bytes: &[u8]) -> Option<Vec<(u64, SeriesKey)>> {
    let mut r = Rows(bytes);
    let mut out = Vec::new();
    while !r.0.is_empty() {
        out.push(r.series()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_rows_decode_as_written() {
        let keys =
            [SeriesKey::new("m", [("host", "a"), ("cpu", "0")]), SeriesKey::new("n", Vec::<(String, String)>::new())];
        let bytes = crate::writer::series_rows(&keys);
        let rows = decode_series(&bytes).unwrap();
        assert_eq!(rows.iter().map(|r| &r.1).collect::<Vec<_>>(), keys.iter().collect::<Vec<_>>());
        assert_eq!(rows[0].0, crate::series_id(&keys[0]));
        // Cut anywhere, it does not decode (and does not panic).
        for n in 0..bytes.len() - 1 {
            assert!(decode_series(&bytes[..n]).is_none_or(|r| r.len() < 2), "{n}");
        }
    }
}
