//! The agent's spool: every batch is written here (and fsynced) before it is
//! sent, and stays until the server acknowledges it. Bounded: when full, the
//! oldest segment goes, and what it held that was never acknowledged is
//! counted as dropped (`docs/format/wire.md`, "Spool").
//!
//! ```text
//! spool/state            spool_id=<16 hex>\nacked=<seq>\n   (tmp + rename)
//! spool/series.ksd       "KSDICT1\n" | frame{ u32 id | key }*
//! spool/<first seq>.ksp  "KSPOOL1\n" | frame{ u64 seq | u8 kind | u32 samples | i64 t_ns | body }*
//! frame = u32 len | u32 crc32 | payload   (as the store's WAL)
//! ```
//! A damaged tail (crash mid-write) is cut off at open, and counted.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use codec::frame::{begin_frame, decode_frames, end_frame};
use codec::varint::{Reader, get_key, put_key};
use model::SeriesKey;

const SEGMENT_MAGIC: &[u8; 8] = b"KSPOOL1\n";
const DICT_MAGIC: &[u8; 8] = b"KSDICT1\n";
/// A segment is closed and a new one begun past this size.
pub const SEGMENT_BYTES: u64 = 4 << 20;
/// The smallest spool: 64 MiB.
pub const MIN_BYTES: u64 = 64 << 20;

/// What a spooled batch carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Rounds = 1,
    Events = 2,
}

/// One spooled batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub kind: Kind,
    pub samples: u32,
    /// Time of its first sample (ns): the backlog's age.
    pub time_ns: i64,
    pub body: Vec<u8>,
}

/// Counters, readable without the lock.
#[derive(Debug, Default)]
pub struct SpoolStats {
    pub bytes: AtomicU64,
    pub limit_bytes: AtomicU64,
    pub written_batches: AtomicU64,
    pub written_samples: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub dropped_samples: AtomicU64,
    /// Batches written but not yet acknowledged.
    pub backlog_batches: AtomicU64,
    pub backlog_samples: AtomicU64,
    /// Time of the oldest unacknowledged sample (ns; 0: none).
    pub oldest_unacked_ns: AtomicU64,
    /// Damaged tails cut off at open.
    pub repaired: AtomicU64,
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: File,
    bytes: u64,
    /// (seq, payload offset, payload length, samples, time)
    index: Vec<(u64, u64, u32, u32, i64)>,
    /// Samples of `index[..=i]`: the backlog in O(log n) per segment, so
    /// acknowledging a long backlog batch by batch stays linear.
    cum: Vec<u64>,
}

impl Segment {
    fn add(&mut self, entry: (u64, u64, u32, u32, i64)) {
        self.cum.push(self.cum.last().copied().unwrap_or(0) + u64::from(entry.3));
        self.index.push(entry);
    }
}

#[derive(Debug)]
struct Inner {
    segments: VecDeque<Segment>,
    next_seq: u64,
    acked: u64,
    dict: Vec<SeriesKey>,
    dict_ids: HashMap<SeriesKey, u32>,
    dict_file: File,
    /// Bytes of the dictionary file known good: the next definition goes
    /// here (a positional write), so a failed one leaves no hole.
    dict_bytes: u64,
    dict_dirty: bool,
    limit: u64,
    state_acked: u64,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    spool_id: u64,
    inner: Mutex<Inner>,
    stats: SpoolStats,
    /// The newest written seq: the sender waits on it.
    newest: tokio::sync::watch::Sender<u64>,
}

fn io_ctx(what: &str, path: &Path) -> impl FnOnce(io::Error) -> io::Error {
    let msg = format!("{what} {}", path.display());
    move |e| io::Error::new(e.kind(), format!("{msg}: {e}"))
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, holding at most `limit` bytes.
    pub fn open(dir: &Path, limit: u64) -> io::Result<Spool> {
        fs::create_dir_all(dir).map_err(io_ctx("create spool", dir))?;
        let stats = SpoolStats::default();
        let state_path = dir.join("state");
        let (spool_id, acked) = match fs::read_to_string(&state_path) {
            Ok(s) => parse_state(&s).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: not a spool state file; move the spool directory away", state_path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A new spool: a fresh id, so the server does not take its
                // sequence numbers for those of an earlier spool.
                let id = fastrand::u64(1..);
                write_state(dir, id, 0)?;
                (id, 0)
            }
            Err(e) => return Err(io_ctx("read", &state_path)(e)),
        };

        // Dictionary.
        let dict_path = dir.join("series.ksd");
        let mut dict = Vec::new();
        let mut dict_ids = HashMap::new();
        let data = read_or_empty(&dict_path)?;
        let valid = if data.len() >= 8 && &data[..8] == DICT_MAGIC {
            let (valid, damage) = decode_frames(&data[8..], 8, |p| {
                let mut r = Reader::new(p);
                let Some(id) = r.fixed::<4>().map(u32::from_le_bytes) else { return false };
                let Some(key) = get_key(&mut r) else { return false };
                if id as usize != dict.len() || r.remaining() != 0 {
                    return false;
                }
                dict_ids.insert(key.clone(), id);
                dict.push(key);
                true
            });
            if let Some(d) = damage {
                tracing::warn!("spool: {} damaged at byte {} ({}); cut there", dict_path.display(), d.offset, d.what);
                stats.repaired.fetch_add(1, Ordering::Relaxed);
            }
            8 + valid
        } else {
            0
        };
        let dict_file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&dict_path)
            .map_err(io_ctx("open", &dict_path))?;
        dict_file.set_len(valid as u64).map_err(io_ctx("truncate", &dict_path))?;
        if valid == 0 {
            dict_file.write_all_at(DICT_MAGIC, 0).map_err(io_ctx("write", &dict_path))?;
        }
        let dict_bytes = if valid == 0 { DICT_MAGIC.len() as u64 } else { valid as u64 };

        // Segments, oldest first.
        let mut paths: Vec<(u64, PathBuf)> = fs::read_dir(dir)
            .map_err(io_ctx("list spool", dir))?
            .filter_map(|e| {
                let p = e.ok()?.path();
                let seq = p.file_name()?.to_str()?.strip_suffix(".ksp")?.parse().ok()?;
                Some((seq, p))
            })
            .collect();
        paths.sort();
        let mut segments = VecDeque::new();
        let mut next_seq = acked + 1;
        for (_, path) in paths {
            let data = read_or_empty(&path)?;
            let mut index = Vec::new();
            let valid = if data.len() >= 8 && &data[..8] == SEGMENT_MAGIC {
                let mut off = 8u64;
                let (valid, damage) = decode_frames(&data[8..], 8, |p| {
                    let Some((seq, _, samples, t, _)) = parse_record(p) else { return false };
                    if seq < next_seq && !index.is_empty() {
                        return false;
                    }
                    index.push((seq, off + 8, p.len() as u32, samples, t));
                    off += 8 + p.len() as u64;
                    next_seq = next_seq.max(seq + 1);
                    true
                });
                if let Some(d) = damage {
                    tracing::warn!("spool: {} damaged at byte {} ({}); cut there", path.display(), d.offset, d.what);
                    stats.repaired.fetch_add(1, Ordering::Relaxed);
                }
                8 + valid as u64
            } else {
                0
            };
            if index.is_empty() || index.last().is_some_and(|r| r.0 <= acked) {
                fs::remove_file(&path).map_err(io_ctx("remove", &path))?;
                continue;
            }
            let file = OpenOptions::new().read(true).write(true).open(&path).map_err(io_ctx("open", &path))?;
            file.set_len(valid).map_err(io_ctx("truncate", &path))?;
            let mut seg = Segment { path, file, bytes: valid, index: Vec::with_capacity(index.len()), cum: Vec::new() };
            index.into_iter().for_each(|e| seg.add(e));
            segments.push_back(seg);
        }
        let spool = Spool {
            dir: dir.to_path_buf(),
            spool_id,
            inner: Mutex::new(Inner {
                segments,
                next_seq,
                acked,
                dict,
                dict_ids,
                dict_file,
                dict_bytes,
                dict_dirty: false,
                limit: limit.max(MIN_BYTES),
                state_acked: acked,
            }),
            stats,
            newest: tokio::sync::watch::channel(next_seq - 1).0,
        };
        spool.refresh(&spool.lock());
        Ok(spool)
    }

    pub fn spool_id(&self) -> u64 {
        self.spool_id
    }

    pub fn stats(&self) -> &SpoolStats {
        &self.stats
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Changes the size limit (the agent's automatic sizing); takes effect
    /// with the next write.
    pub fn set_limit(&self, limit: u64) {
        self.lock().limit = limit.max(MIN_BYTES);
        self.stats.limit_bytes.store(limit.max(MIN_BYTES), Ordering::Relaxed);
    }

    /// Subscribes to the newest written sequence number.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// The spool's id for `key`, defining it when new.
    pub fn intern(&self, key: &SeriesKey) -> io::Result<u32> {
        let mut g = self.lock();
        if let Some(&id) = g.dict_ids.get(key) {
            return Ok(id);
        }
        let id = g.dict.len() as u32;
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf);
        buf.extend_from_slice(&id.to_le_bytes());
        put_key(&mut buf, key);
        end_frame(&mut buf, start);
        let path = self.dir.join("series.ksd");
        if let Err(e) = g.dict_file.write_all_at(&buf, g.dict_bytes) {
            // Cut what part of it was written (disk full); the next definition goes in its place.
            let _ = g.dict_file.set_len(g.dict_bytes);
            return Err(io_ctx("write", &path)(e));
        }
        g.dict_bytes += buf.len() as u64;
        // Synced with the next batch, which is the first that can refer to it.
        g.dict_dirty = true;
        g.dict.push(key.clone());
        g.dict_ids.insert(key.clone(), id);
        Ok(id)
    }

    pub fn dict_len(&self) -> usize {
        self.lock().dict.len()
    }

    /// Series definitions from index `from` on.
    pub fn dict_from(&self, from: usize) -> Vec<(u32, SeriesKey)> {
        let g = self.lock();
        g.dict.iter().enumerate().skip(from).map(|(i, k)| (i as u32, k.clone())).collect()
    }

    /// Appends a batch and makes it durable; returns its sequence number.
    /// When the spool is over its limit afterwards, whole segments go,
    /// oldest first; their unacknowledged batches are counted as dropped.
    pub fn push(&self, kind: Kind, samples: u32, time_ns: i64, body: &[u8]) -> io::Result<u64> {
        let mut g = self.lock();
        if g.dict_dirty {
            let path = self.dir.join("series.ksd");
            g.dict_file.sync_data().map_err(io_ctx("fsync", &path))?;
            g.dict_dirty = false;
        }
        let seq = g.next_seq;
        if g.segments.back().is_none_or(|s| s.bytes >= SEGMENT_BYTES) {
            let path = self.dir.join(format!("{seq:020}.ksp"));
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_ctx("create", &path))?;
            file.write_all_at(SEGMENT_MAGIC, 0).map_err(io_ctx("write", &path))?;
            g.segments.push_back(Segment { path, file, bytes: 8, index: Vec::new(), cum: Vec::new() });
        }
        let mut buf = Vec::with_capacity(body.len() + 40);
        let start = begin_frame(&mut buf);
        buf.extend_from_slice(&seq.to_le_bytes());
        buf.push(kind as u8);
        buf.extend_from_slice(&samples.to_le_bytes());
        buf.extend_from_slice(&time_ns.to_le_bytes());
        buf.extend_from_slice(body);
        end_frame(&mut buf, start);
        let seg = g.segments.back_mut().expect("a segment");
        if let Err(e) = seg.file.write_all_at(&buf, seg.bytes) {
            let _ = seg.file.set_len(seg.bytes); // no partial record left behind (disk full)
            return Err(io_ctx("write", &seg.path)(e));
        }
        seg.file.sync_data().map_err(io_ctx("fsync", &seg.path))?;
        let entry = (seq, seg.bytes + 8, (buf.len() - 8) as u32, samples, time_ns);
        seg.add(entry);
        seg.bytes += buf.len() as u64;
        g.next_seq += 1;
        self.stats.written_batches.fetch_add(1, Ordering::Relaxed);
        self.stats.written_samples.fetch_add(u64::from(samples), Ordering::Relaxed);

        let mut total: u64 = g.segments.iter().map(|s| s.bytes).sum();
        while total > g.limit && g.segments.len() > 1 {
            let old = g.segments.pop_front().expect("more than one");
            total -= old.bytes;
            let lost: Vec<_> = old.index.iter().filter(|r| r.0 > g.acked).collect();
            if !lost.is_empty() {
                let samples: u64 = lost.iter().map(|r| u64::from(r.3)).sum();
                self.stats.dropped_batches.fetch_add(lost.len() as u64, Ordering::Relaxed);
                self.stats.dropped_samples.fetch_add(samples, Ordering::Relaxed);
                tracing::warn!(
                    "spool full ({} bytes): dropped {} unacknowledged batches ({samples} samples), oldest first",
                    g.limit,
                    lost.len()
                );
            }
            let last = old.index.last().map_or(g.acked, |r| r.0);
            g.acked = g.acked.max(last);
            let _ = fs::remove_file(&old.path);
        }
        self.refresh(&g);
        drop(g);
        self.newest.send_replace(seq);
        Ok(seq)
    }

    /// The first batch with sequence number >= `seq` (batches may have been
    /// dropped), or None when there is none yet.
    pub fn read_from(&self, seq: u64) -> io::Result<Option<Record>> {
        let g = self.lock();
        let seq = seq.max(g.acked + 1);
        for seg in &g.segments {
            let Some(last) = seg.index.last() else { continue };
            if last.0 < seq {
                continue;
            }
            let i = seg.index.partition_point(|r| r.0 < seq);
            let (_, off, len, _, _) = seg.index[i];
            let mut buf = vec![0; len as usize];
            seg.file.read_exact_at(&mut buf, off).map_err(io_ctx("read", &seg.path))?;
            let (seq, kind, samples, time_ns, body) = parse_record(&buf).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: record at {off} changed", seg.path.display()))
            })?;
            return Ok(Some(Record { seq, kind, samples, time_ns, body: body.to_vec() }));
        }
        Ok(None)
    }

    /// Everything up to `seq` is durable on the server: forget it.
    pub fn ack(&self, seq: u64) -> io::Result<()> {
        let mut g = self.lock();
        if seq <= g.acked {
            return Ok(());
        }
        g.acked = seq.min(g.next_seq - 1);
        // Whole segments acknowledged go, except the one being written.
        while g.segments.len() > 1 && g.segments.front().and_then(|s| s.index.last()).is_some_and(|r| r.0 <= g.acked) {
            let old = g.segments.pop_front().expect("checked");
            let _ = fs::remove_file(&old.path);
        }
        // The state file only saves resending: written at most every 64 acks
        // or when the backlog empties (the server drops what it already has).
        if g.acked >= g.state_acked + 64 || g.acked + 1 == g.next_seq {
            write_state(&self.dir, self.spool_id, g.acked)?;
            g.state_acked = g.acked;
        }
        self.refresh(&g);
        Ok(())
    }

    pub fn acked(&self) -> u64 {
        self.lock().acked
    }

    fn refresh(&self, g: &Inner) {
        let bytes: u64 = g.segments.iter().map(|s| s.bytes).sum();
        self.stats.bytes.store(bytes, Ordering::Relaxed);
        self.stats.limit_bytes.store(g.limit, Ordering::Relaxed);
        let mut batches = 0u64;
        let mut samples = 0u64;
        let mut oldest = 0i64;
        for seg in &g.segments {
            let first = seg.index.partition_point(|r| r.0 <= g.acked);
            if first == seg.index.len() {
                continue;
            }
            if batches == 0 {
                oldest = seg.index[first].4;
            }
            batches += (seg.index.len() - first) as u64;
            let before = if first == 0 { 0 } else { seg.cum[first - 1] };
            samples += seg.cum.last().copied().unwrap_or(0) - before;
        }
        self.stats.backlog_batches.store(batches, Ordering::Relaxed);
        self.stats.backlog_samples.store(samples, Ordering::Relaxed);
        self.stats.oldest_unacked_ns.store(oldest.max(0) as u64, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn parse_record(p: &[u8]) -> Option<(u64, Kind, u32, i64, &[u8])> {
    if p.len() < 21 {
        return None;
    }
    let seq = u64::from_le_bytes(p[..8].try_into().ok()?);
    let kind = match p[8] {
        1 => Kind::Rounds,
        2 => Kind::Events,
        _ => return None,
    };
    let samples = u32::from_le_bytes(p[9..13].try_into().ok()?);
    let t = i64::from_le_bytes(p[13..21].try_into().ok()?);
    Some((seq, kind, samples, t, &p[21..]))
}

fn parse_state(s: &str) -> Option<(u64, u64)> {
    let mut id = None;
    let mut acked = None;
    for line in s.lines() {
        match line.split_once('=')? {
            ("spool_id", v) => id = u64::from_str_radix(v, 16).ok(),
            ("acked", v) => acked = v.parse().ok(),
            _ => {}
        }
    }
    Some((id?, acked?))
}

fn write_state(dir: &Path, id: u64, acked: u64) -> io::Result<()> {
    let tmp = dir.join("state.tmp");
    fs::write(&tmp, format!("spool_id={id:016x}\nacked={acked}\n")).map_err(io_ctx("write", &tmp))?;
    fs::rename(&tmp, dir.join("state")).map_err(io_ctx("rename", &tmp))
}

fn read_or_empty(path: &Path) -> io::Result<Vec<u8>> {
    match fs::read(path) {
        Ok(d) => Ok(d),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_ctx("read", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> SeriesKey {
        SeriesKey::new("m", [("i", i.to_string())])
    }

    #[test]
    fn batches_survive_reopen_until_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let id;
        {
            let s = Spool::open(dir.path(), MIN_BYTES).unwrap();
            id = s.spool_id();
            assert_eq!(s.intern(&key(0)).unwrap(), 0);
            assert_eq!(s.intern(&key(1)).unwrap(), 1);
            assert_eq!(s.intern(&key(0)).unwrap(), 0);
            for i in 0..10u8 {
                assert_eq!(s.push(Kind::Rounds, 3, i64::from(i), &[i; 5]).unwrap(), u64::from(i) + 1);
            }
            s.ack(4).unwrap();
            assert_eq!(s.stats().backlog_batches.load(Ordering::Relaxed), 6);
        }
        let s = Spool::open(dir.path(), MIN_BYTES).unwrap();
        assert_eq!(s.spool_id(), id);
        assert_eq!(s.dict_from(0), vec![(0, key(0)), (1, key(1))]);
        // The state file lags acks (resends are deduplicated by the server);
        // what was never acknowledged is all there.
        let first = s.read_from(0).unwrap().unwrap();
        assert!(first.seq <= 5);
        let r = s.read_from(5).unwrap().unwrap();
        assert_eq!((r.seq, r.kind, r.samples, r.time_ns, r.body), (5, Kind::Rounds, 3, 4, vec![4; 5]));
        assert_eq!(s.read_from(11).unwrap(), None);
        assert_eq!(s.push(Kind::Events, 1, 0, b"x").unwrap(), 11);
        s.ack(11).unwrap();
        assert_eq!(s.read_from(0).unwrap(), None);
        assert_eq!(s.stats().backlog_batches.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_torn_tail_is_cut_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Spool::open(dir.path(), MIN_BYTES).unwrap();
            for i in 0..3u8 {
                s.push(Kind::Rounds, 1, 0, &[i; 100]).unwrap();
            }
        }
        let seg = dir.path().join(format!("{:020}.ksp", 1));
        let len = fs::metadata(&seg).unwrap().len();
        for cut in [len - 1, len - 60, 9] {
            let f = OpenOptions::new().write(true).open(&seg).unwrap();
            f.set_len(cut).unwrap();
            let s = Spool::open(dir.path(), MIN_BYTES).unwrap();
            assert_eq!(s.stats().repaired.load(Ordering::Relaxed), 1, "cut at {cut}");
            // Writing goes on after the clean prefix.
            let seq = s.push(Kind::Rounds, 1, 0, b"after").unwrap();
            let mut got = Vec::new();
            let mut next = 1;
            while let Some(r) = s.read_from(next).unwrap() {
                next = r.seq + 1;
                got.push(r.body);
            }
            assert_eq!(got.last().unwrap(), b"after", "cut at {cut}, seq {seq}");
            drop(s);
            let s = Spool::open(dir.path(), MIN_BYTES).unwrap();
            assert_eq!(s.stats().repaired.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn a_full_spool_drops_the_oldest_and_counts_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(dir.path(), 0).unwrap();
        let body = vec![7u8; 1 << 20];
        let n = (MIN_BYTES / (1 << 20)) * 2;
        for _ in 0..n {
            s.push(Kind::Rounds, 10, 0, &body).unwrap();
        }
        let st = s.stats();
        let dropped = st.dropped_batches.load(Ordering::Relaxed);
        assert!(dropped > 0);
        assert_eq!(st.dropped_samples.load(Ordering::Relaxed), dropped * 10);
        assert!(st.bytes.load(Ordering::Relaxed) <= MIN_BYTES);
        assert_eq!(st.backlog_batches.load(Ordering::Relaxed) + dropped, n);
        // Reading resumes at the oldest batch still held.
        assert_eq!(s.read_from(1).unwrap().unwrap().seq, dropped + 1);
    }
}
