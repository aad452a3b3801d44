//! The event logs: `events/<seq:010>.kev`, append-only files of framed
//! records (the WAL's framing), each either a stream definition or one
//! encoded [`EventBatch`]. The log *is* the storage: a batch is written once,
//! compressed, and read in place; an in-memory index of every batch (stream,
//! cpu, time range, where) is rebuilt from the files on open.
//!
//! A *mark* (a sender's sequence number, e.g. an agent spool's) may lead a
//! group of batches written with one write: `mark key, seq, n` then the `n`
//! batches. On open, a group whose batches are not all there (a crash
//! mid-write) is cut whole, mark included, so a mark is stored exactly when
//! its batches are: a resent batch is recognised, never stored twice.

pub use source::EventQuery;
use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use model::{Selector, SeriesKey};

use crate::StoreError;
use crate::store::{FsyncPolicy, lock, read_lock, write_lock};
use codec::events::{BatchError, Column, Encoding, EventBatch, Header, Want};
use codec::frame::{Damage, begin_frame, decode_frames, end_frame};
use codec::varint::{Reader, get_key, put_key, put_u64};

use crate::wal::{LogKind, WalWriter, list_logs, repair_log};

pub const EVENTS: LogKind = LogKind { magic: b"KSKEVT01", ext: "kev" };
const KIND_STREAM: u8 = 1;
const KIND_BATCH: u8 = 2;
const KIND_MARK: u8 = 3;
/// The placeholder stream of batches whose stream definition was lost.
pub const ORPHAN: &str = "kansoku_event_orphan";
/// An entry's stream while its definition is still to come (at open).
const UNDEFINED: u32 = u32::MAX;

/// Counters of the event logs, including everything refused or damaged.
#[derive(Debug, Default)]
pub struct EventStats {
    pub events_appended: AtomicU64,
    pub batches_appended: AtomicU64,
    pub bytes_appended: AtomicU64,
    pub batches_rejected: AtomicU64,
    pub write_errors: AtomicU64,
    pub corrupt_batches: AtomicU64,
    pub damaged_files: AtomicU64,
    /// Batches whose stream definition was lost (every copy damaged), kept
    /// under a `kansoku_event_orphan` placeholder stream.
    pub orphaned_batches: AtomicU64,
    /// Damaged bytes skipped at open to reach the whole frames after them.
    pub skipped_bytes: AtomicU64,
    /// Batches appended whose first event was more than [`LATE_NS`] old
    /// when it arrived (an agent's backlog, an import): what was counted of
    /// the past may have changed ([`source::EventSource::generation`]).
    pub late_batches: AtomicU64,
}

/// How old a batch's first event may be when it is appended before the
/// batch counts as late (a second's batch of a live sampler is not).
pub const LATE_NS: i64 = 30_000_000_000;

/// Whether `payload` is a whole event-log frame: where resync may resume.
fn is_event_frame(payload: &[u8]) -> bool {
    let mut r = Reader::new(payload);
    match r.fixed::<1>().map(|k| k[0]) {
        Some(KIND_STREAM) => r.u32().is_some() && get_key(&mut r).is_some() && r.remaining() == 0,
        Some(KIND_MARK) => {
            get_key(&mut r).is_some() && r.u64().is_some() && r.u64().is_some_and(|n| n > 0) && r.remaining() == 0
        }
        Some(KIND_BATCH) => r.u32().is_some() && Header::read(&payload[payload.len() - r.remaining()..]).is_ok(),
        _ => false,
    }
}

/// Where one stored batch is, and what it covers.
#[derive(Debug, Clone, Copy)]
struct Entry {
    stream: u32,
    cpu: u32,
    n: u32,
    min_t: i64,
    max_t: i64,
    file: u64,
    /// Offset of the record's frame header in its file.
    offset: u64,
    /// Payload length.
    len: u32,
    /// Offset of the encoded batch within the payload.
    skip: u16,
}

#[derive(Debug)]
struct LogFile {
    seq: u64,
    path: PathBuf,
}

#[derive(Debug, Default)]
struct Index {
    streams: Vec<SeriesKey>,
    by_key: HashMap<SeriesKey, u32>,
    files: Vec<Arc<LogFile>>,
    entries: Vec<Entry>,
    /// The newest mark per key (see the module's doc), kept when retention
    /// removes the file that held it.
    marks: HashMap<SeriesKey, u64>,
}

impl Index {
    fn intern(&mut self, key: &SeriesKey) -> u32 {
        if let Some(&id) = self.by_key.get(key) {
            return id;
        }
        let id = self.streams.len() as u32;
        self.streams.push(key.clone());
        self.by_key.insert(key.clone(), id);
        id
    }
}

#[derive(Debug)]
struct Writer {
    log: WalWriter,
    /// Streams defined in the current file (store stream id -> defined).
    declared: Vec<bool>,
    buf: Vec<u8>,
    last_sync: Instant,
}

/// The event half of the store: append encoded per-CPU batches, query them.
#[derive(Debug)]
pub struct EventLog {
    dir: PathBuf,
    fsync: FsyncPolicy,
    /// The current file is closed and the next started past this size, so
    /// retention can remove old events a file at a time.
    file_bytes: u64,
    index: RwLock<Index>,
    writer: Mutex<Option<Writer>>,
    stats: EventStats,
    /// Log files, opened when read; a bounded number stay open.
    open_files: crate::open_files::OpenFiles,
}

/// The answer to [`EventLog::top`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Top {
    /// Events in the range.
    pub total: u64,
    /// Distinct values seen.
    pub distinct: u64,
    /// (value, count), most frequent first, ties by value.
    pub rows: Vec<(u64, u64)>,
    /// Batches that failed their checksum or did not decode: skipped, counted.
    pub corrupt: u64,
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { op, path, source }
}

impl EventLog {
    /// Opens `dir` (created if missing), indexing every stored batch. A torn
    /// tail of the newest file (a crash mid-write) is cut off with a warning;
    /// damage in an older file keeps the records before it and is logged.
    pub(crate) fn open(
        dir: &Path,
        fsync: FsyncPolicy,
        file_bytes: u64,
        writable: bool,
    ) -> Result<EventLog, StoreError> {
        if writable {
            fs::create_dir_all(dir).map_err(io_err("create events directory", dir))?;
        }
        let log = EventLog {
            dir: dir.to_path_buf(),
            fsync,
            file_bytes,
            index: RwLock::new(Index::default()),
            writer: Mutex::new(None),
            stats: EventStats::default(),
            open_files: crate::open_files::OpenFiles::default(),
        };
        let files = match list_logs(&EVENTS, dir) {
            Ok(f) => f,
            Err(e) if !writable && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err("list event logs", dir)(e)),
        };
        let n_files = files.len();
        let mut next = 1;
        for (i, (seq, path)) in files.into_iter().enumerate() {
            log.load_file(seq, &path, writable && i + 1 == n_files, writable)?;
            next = seq + 1;
        }
        if writable {
            let w = WalWriter::create_kind(&EVENTS, dir, next).map_err(io_err("create event log", dir))?;
            log.adopt_file(next)?;
            *lock(&log.writer) =
                Some(Writer { log: w, declared: Vec::new(), buf: Vec::new(), last_sync: Instant::now() });
        }
        Ok(log)
    }

    fn adopt_file(&self, seq: u64) -> Result<(), StoreError> {
        let path = crate::wal::log_path(&EVENTS, &self.dir, seq);
        write_lock(&self.index).files.push(Arc::new(LogFile { seq, path }));
        Ok(())
    }

    fn load_file(&self, seq: u64, path: &Path, is_last: bool, writable: bool) -> Result<(), StoreError> {
        let data = match fs::read(path) {
            Ok(d) => d,
            Err(e) if !writable && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("read event log", path)(e)),
        };
        let magic = EVENTS.magic.len();
        if writable && data.len() == magic && &data[..] == EVENTS.magic {
            // Opened and never written to: nothing to keep.
            return fs::remove_file(path).map_err(io_err("remove empty event log", path));
        }
        let header_damaged = data.len() < magic || &data[..magic] != EVENTS.magic;
        if header_damaged {
            if data.len() < magic && EVENTS.magic.starts_with(&data) {
                // Being created (or a crash while it was): nothing in it yet.
                return Ok(());
            }
            if writable {
                tracing::error!(
                    "event log {} has a damaged header: reading the batches after it (each frame carries its own checksum)",
                    path.display()
                );
            }
        }
        let mut ix = write_lock(&self.index);
        let mut ids: HashMap<u32, u32> = HashMap::new();
        let mut entries: Vec<Entry> = Vec::new();
        // Entries of batches whose stream is not defined (yet), by the
        // file's stream id: the definition's first copy may be damaged and
        // its second come after them.
        let mut undefined: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut marks: Vec<(SeriesKey, u64)> = Vec::new();
        // An open mark group: (its mark, batches still to come, where the
        // mark's frame starts, entries before it).
        let mut group: Option<((SeriesKey, u64), u64, u64, usize)> = None;
        // Damage followed by frames that verify is corruption, not a torn
        // tail: the batches after it were acknowledged, so they are kept and
        // only the damaged bytes skipped (and reported), as in the WAL.
        let body = &data[magic.min(data.len())..];
        let mut at = 0usize;
        let mut skipped = 0u64;
        let torn = loop {
            let mut pos = (magic + at) as u64;
            let (valid, damage) = decode_frames(&body[at..], (magic + at) as u64, |payload| {
                let offset = pos;
                pos += 8 + payload.len() as u64;
                let mut r = Reader::new(payload);
                match r.fixed::<1>().map(|k| k[0]) {
                    Some(KIND_STREAM) => {
                        let (Some(id), Some(key)) = (r.u32(), get_key(&mut r)) else { return false };
                        if r.remaining() != 0 {
                            return false;
                        }
                        let stream = ix.intern(&key);
                        ids.insert(id, stream);
                        for i in undefined.remove(&id).unwrap_or_default() {
                            entries[i].stream = stream;
                        }
                        true
                    }
                    Some(KIND_MARK) => {
                        let (Some(key), Some(seq), Some(n)) = (get_key(&mut r), r.u64(), r.u64()) else { return false };
                        if group.is_some() || n == 0 || r.remaining() != 0 {
                            return false;
                        }
                        group = Some(((key, seq), n, offset, entries.len()));
                        true
                    }
                    Some(KIND_BATCH) => {
                        if let Some((_, left, ..)) = &mut group {
                            *left -= 1;
                            if *left == 0 {
                                marks.push(group.take().expect("open").0);
                            }
                        }
                        let Some(id) = r.u32() else { return false };
                        let skip = payload.len() - r.remaining();
                        let Ok((h, _)) = Header::read(&payload[skip..]) else { return false };
                        let stream = match ids.get(&id) {
                            Some(&stream) => stream,
                            None => {
                                undefined.entry(id).or_default().push(entries.len());
                                UNDEFINED
                            }
                        };
                        entries.push(Entry {
                            stream,
                            cpu: h.cpu,
                            n: h.n as u32,
                            min_t: h.min_t,
                            max_t: h.max_t,
                            file: seq,
                            offset,
                            len: payload.len() as u32,
                            skip: skip as u16,
                        });
                        true
                    }
                    _ => false,
                }
            });
            let Some(damage) = damage else { break None };
            let bad = at + valid;
            match codec::frame::resync(body, bad, is_event_frame) {
                Some(next) => {
                    // A group open at the damage lost some of its batches.
                    if let Some((_, _, _, n_entries)) = group.take() {
                        entries.truncate(n_entries);
                        undefined.values_mut().for_each(|v| v.retain(|&i| i < n_entries));
                    }
                    if writable {
                        tracing::error!(
                            "{} damaged at byte {} ({}): skipping {} bytes to the next whole record at byte {}; the batches after it are kept",
                            path.display(),
                            damage.offset,
                            damage.what,
                            next - bad,
                            magic + next
                        );
                    }
                    skipped += (next - bad) as u64;
                    at = next;
                }
                None => break Some((bad, damage)),
            }
        };
        let (valid, damage) = match torn {
            Some((bad, d)) => (bad, Some(d)),
            None => (body.len(), None),
        };
        // A group cut short (by a crash mid-write, or by damage) is not
        // stored: neither its batches nor its mark.
        let (valid, damage) = match group {
            Some((_, _, mark_at, n_entries)) => {
                entries.truncate(n_entries);
                undefined.values_mut().for_each(|v| v.retain(|&i| i < n_entries));
                let valid = mark_at as usize - magic;
                (valid, damage.or(Some(Damage { offset: mark_at, what: "batch group cut short" })))
            }
            None => (valid, damage),
        };
        // Batches no copy of whose stream definition survived: kept, under a
        // placeholder naming the file and the id, and counted.
        let mut orphans: Vec<(u32, Vec<usize>)> = undefined.into_iter().filter(|u| !u.1.is_empty()).collect();
        orphans.sort_unstable_by_key(|o| o.0);
        let mut orphaned = 0;
        for (id, at) in &orphans {
            let key = SeriesKey::new(ORPHAN, [("file", format!("{seq:010}")), ("stream_id", id.to_string())]);
            let stream = ix.intern(&key);
            for &i in at {
                entries[i].stream = stream;
            }
            orphaned += at.len() as u64;
        }
        if writable && orphaned > 0 {
            self.stats.orphaned_batches.fetch_add(orphaned, Ordering::Relaxed);
            tracing::error!(
                "{}: the definitions of {} streams were lost (every copy damaged): their {orphaned} batches are kept as {ORPHAN}{{file=\"{seq:010}\",stream_id=...}} (counted in event_orphaned_batches)",
                path.display(),
                orphans.len()
            );
        }
        ix.entries.extend(entries);
        for (key, seq) in marks {
            let m = ix.marks.entry(key).or_insert(seq);
            *m = (*m).max(seq);
        }
        // The verified prefix is served even when a writer is mid-append.
        ix.files.push(Arc::new(LogFile { seq, path: path.to_path_buf() }));
        drop(ix);
        if writable && skipped > 0 {
            self.stats.skipped_bytes.fetch_add(skipped, Ordering::Relaxed);
        }
        let Some(damage) = damage else {
            if writable && (skipped > 0 || header_damaged || orphaned > 0) {
                self.stats.damaged_files.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(());
        };
        if !writable {
            return Ok(()); // a writer may be mid-append
        }
        self.stats.damaged_files.fetch_add(1, Ordering::Relaxed);
        let valid_len = (magic + valid) as u64;
        repair_log(path, data.len() as u64, valid_len, &damage, is_last, "batch")
            .map_err(io_err("truncate event log", path))
    }

    pub fn stats(&self) -> &EventStats {
        &self.stats
    }

    /// Validates, encodes and appends one batch of `stream` (e.g.
    /// `perf_cpu_clock{host="a"}`). Returns when it is acknowledged per the
    /// fsync policy.
    pub fn append(&self, stream: &SeriesKey, batch: &mut EventBatch, enc: Encoding) -> Result<usize, StoreError> {
        self.append_many(stream, std::slice::from_mut(batch), enc)
    }

    /// Appends a batch encoded elsewhere (an agent). It is decoded in full
    /// first: nothing that does not decode is stored.
    pub fn append_encoded(&self, stream: &SeriesKey, encoded: &[u8]) -> Result<usize, StoreError> {
        self.append_encoded_many(stream, &[encoded])
    }

    /// Appends batches encoded elsewhere (an agent's second of every CPU)
    /// with one write and one fsync. Every batch is decoded in full first:
    /// if one does not decode, none is stored.
    pub fn append_encoded_many<B: AsRef<[u8]> + Sync>(
        &self,
        stream: &SeriesKey,
        encoded: &[B],
    ) -> Result<usize, StoreError> {
        self.append_encoded_marked(stream, encoded, None)
    }

    /// [`EventLog::append_encoded_many`] with a mark (a sender's sequence
    /// number) written in the same write: after a crash, the mark is there
    /// exactly when all its batches are. [`EventLog::mark`] reads it back.
    pub fn append_encoded_marked<B: AsRef<[u8]> + Sync>(
        &self,
        stream: &SeriesKey,
        encoded: &[B],
        mark: Option<(&SeriesKey, u64)>,
    ) -> Result<usize, StoreError> {
        // Bytes of an encoded event are ~3-4; decoding is split over threads
        // when there are many (a second of many CPUs).
        let bytes: usize = encoded.iter().map(|e| e.as_ref().len()).sum();
        let threads = codec::events::threads_for(bytes / 4);
        let checked = codec::events::par_map(encoded, threads, |e| EventBatch::check(e.as_ref()).map(|_| ()));
        if let Some(Err(e)) = checked.into_iter().find(Result::is_err) {
            self.stats.batches_rejected.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Events(e));
        }
        self.write(stream, encoded, mark)
    }

    /// The newest mark stored under `key` (see the module's doc).
    pub fn mark(&self, key: &SeriesKey) -> Option<u64> {
        read_lock(&self.index).marks.get(key).copied()
    }

    /// Validates, encodes and appends batches (one per CPU, say) with one
    /// write and one fsync; if one is invalid, none is stored.
    pub fn append_many(
        &self,
        stream: &SeriesKey,
        batches: &mut [EventBatch],
        enc: Encoding,
    ) -> Result<usize, StoreError> {
        for b in batches.iter_mut() {
            if let Err(e) = b.validate() {
                self.stats.batches_rejected.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::Events(e));
            }
        }
        let n: usize = batches.iter().map(EventBatch::len).sum();
        let encoded = codec::events::encode_many(batches, enc, codec::events::threads_for(n));
        self.write(stream, &encoded, None)
    }

    fn write<B: AsRef<[u8]>>(
        &self,
        stream: &SeriesKey,
        encoded: &[B],
        mark: Option<(&SeriesKey, u64)>,
    ) -> Result<usize, StoreError> {
        let heads = encoded
            .iter()
            .map(|e| Header::read(e.as_ref()).map(|(h, _)| h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::Events)?;
        if heads.is_empty() {
            return Ok(0);
        }
        let mut guard = lock(&self.writer);
        let w = guard.as_mut().ok_or(StoreError::ReadOnly)?;
        if w.log.bytes() >= self.file_bytes {
            w.log.rotate().map_err(io_err("start next event log", &self.dir))?;
            w.declared.clear();
            self.adopt_file(w.log.seq())?;
        }
        let id = write_lock(&self.index).intern(stream);
        w.buf.clear();
        let newly = w.declared.get(id as usize).is_none_or(|d| !d);
        let define = |buf: &mut Vec<u8>| {
            let start = begin_frame(buf);
            buf.push(KIND_STREAM);
            put_u64(buf, u64::from(id));
            put_key(buf, stream);
            end_frame(buf, start);
        };
        if newly {
            define(&mut w.buf);
        }
        if let Some((key, seq)) = mark {
            let start = begin_frame(&mut w.buf);
            w.buf.push(KIND_MARK);
            put_key(&mut w.buf, key);
            put_u64(&mut w.buf, seq);
            put_u64(&mut w.buf, heads.len() as u64);
            end_frame(&mut w.buf, start);
        }
        let mut entries = Vec::with_capacity(heads.len());
        let late = clock::realtime_ns().saturating_sub(LATE_NS);
        let late = heads.iter().filter(|h| h.min_t < late).count() as u64;
        if late > 0 {
            self.stats.late_batches.fetch_add(late, Ordering::Relaxed);
        }
        for (h, e) in heads.iter().zip(encoded) {
            let frame_at = w.log.bytes() + w.buf.len() as u64;
            let start = begin_frame(&mut w.buf);
            w.buf.push(KIND_BATCH);
            put_u64(&mut w.buf, u64::from(id));
            let skip = w.buf.len() - start;
            w.buf.extend_from_slice(e.as_ref());
            end_frame(&mut w.buf, start);
            let len = (w.buf.len() - start) as u32;
            entries.push(Entry {
                stream: id,
                cpu: h.cpu,
                n: h.n as u32,
                min_t: h.min_t,
                max_t: h.max_t,
                file: w.log.seq(),
                offset: frame_at,
                len,
                skip: skip as u16,
            });
        }
        if newly {
            // A second copy after the batches: a damaged copy costs nothing
            // (docs/format/events.md).
            define(&mut w.buf);
        }
        let pos = match w.log.append(&w.buf) {
            Ok(pos) => pos,
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                return Err(io_err("append to event log", &self.dir)(e));
            }
        };
        if newly {
            if w.declared.len() <= id as usize {
                w.declared.resize(id as usize + 1, false);
            }
            w.declared[id as usize] = true;
        }
        let sync_now = self.fsync.due(w.last_sync);
        if sync_now {
            w.last_sync = Instant::now();
        }
        {
            let mut ix = write_lock(&self.index);
            ix.entries.extend(entries);
            if let Some((key, seq)) = mark {
                match ix.marks.get_mut(key) {
                    Some(m) => *m = (*m).max(seq),
                    None => {
                        ix.marks.insert(key.clone(), seq);
                    }
                }
            }
        }
        let bytes = w.buf.len() as u64;
        let group = Arc::clone(w.log.group());
        drop(guard);
        // Group commit, as for the WAL: fsync outside the lock, shared.
        if sync_now && let Err(e) = group.sync_to(pos) {
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            return Err(io_err("fsync event log", &self.dir)(e));
        }
        let n: usize = heads.iter().map(|h| h.n).sum();
        self.stats.events_appended.fetch_add(n as u64, Ordering::Relaxed);
        self.stats.batches_appended.fetch_add(heads.len() as u64, Ordering::Relaxed);
        self.stats.bytes_appended.fetch_add(bytes, Ordering::Relaxed);
        Ok(n)
    }

    pub(crate) fn fsyncs(&self) -> u64 {
        lock(&self.writer).as_ref().map_or(0, |w| w.log.group().fsyncs())
    }

    /// Syncs the current file (a clean shutdown).
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        if let Some(w) = lock(&self.writer).as_mut() {
            w.log.sync().map_err(io_err("fsync event log", &self.dir))?;
        }
        Ok(())
    }

    /// Streams stored, sorted by key.
    pub fn streams(&self, sel: &Selector) -> Vec<SeriesKey> {
        let ix = read_lock(&self.index);
        let mut out: Vec<SeriesKey> = ix.streams.iter().filter(|k| sel.matches(k)).cloned().collect();
        out.sort();
        out
    }

    /// Events and bytes on disk.
    pub fn usage(&self) -> (u64, u64) {
        let ix = read_lock(&self.index);
        let events = ix.entries.iter().map(|e| u64::from(e.n)).sum();
        let bytes = ix.files.iter().filter_map(|f| fs::metadata(&f.path).ok()).map(|m| m.len()).sum();
        (events, bytes)
    }

    /// The batches a query touches, with their files.
    fn plan(&self, q: &EventQuery) -> Vec<(Entry, Arc<LogFile>)> {
        let ix = read_lock(&self.index);
        let streams: Vec<bool> = ix.streams.iter().map(|k| q.streams.matches(k)).collect();
        let files: HashMap<u64, &Arc<LogFile>> = ix.files.iter().map(|f| (f.seq, f)).collect();
        ix.entries
            .iter()
            .filter(|e| streams[e.stream as usize] && e.max_t >= q.from && e.min_t <= q.to)
            .filter(|e| q.cpus.is_empty() || q.cpus.contains(&e.cpu))
            .filter_map(|e| files.get(&e.file).map(|f| (*e, Arc::clone(f))))
            .collect()
    }

    /// Reads and decodes one batch, verifying its checksum.
    fn load(&self, e: &Entry, f: &LogFile, want: Want, buf: &mut Vec<u8>) -> Result<EventBatch, String> {
        buf.resize(8 + e.len as usize, 0);
        let file = self.open_files.get(&f.path).map_err(|err| format!("open {}: {err}", f.path.display()))?;
        file.read_exact_at(buf, e.offset).map_err(|err| format!("read: {err}"))?;
        let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        if crc32fast::hash(&buf[8..]) != crc {
            return Err("checksum mismatch".into());
        }
        EventBatch::decode(&buf[8 + e.skip as usize..], want).map_err(|err: BatchError| err.to_string())
    }

    /// Calls `f` with every batch of the query, cut to its time range, on up
    /// to `threads` threads. Returns how many batches were corrupt (skipped).
    fn for_each<A: Send>(
        &self,
        q: &EventQuery,
        want: Want,
        threads: usize,
        init: impl Fn() -> A + Sync,
        f: impl Fn(&mut A, &Entry, &EventBatch, std::ops::Range<usize>) + Sync,
    ) -> (Vec<A>, u64) {
        let plan = self.plan(q);
        let threads = threads.clamp(1, plan.len().max(1));
        let per = plan.len().div_ceil(threads).max(1);
        let corrupt = AtomicU64::new(0);
        let out = std::thread::scope(|s| {
            let handles: Vec<_> = plan
                .chunks(per)
                .map(|part| {
                    let (init, f, corrupt) = (&init, &f, &corrupt);
                    s.spawn(move || {
                        let mut acc = init();
                        let mut buf = Vec::new();
                        for (e, file) in part {
                            // A batch wholly inside the range needs no times.
                            let inside = e.min_t >= q.from && e.max_t <= q.to;
                            let want = Want { time: want.time || !inside, ..want };
                            match self.load(e, file, want, &mut buf) {
                                Ok(b) if inside => f(&mut acc, e, &b, 0..e.n as usize),
                                Ok(b) => {
                                    let lo = b.time.partition_point(|&t| t < q.from);
                                    let hi = b.time.partition_point(|&t| t <= q.to);
                                    f(&mut acc, e, &b, lo..hi);
                                }
                                Err(err) => {
                                    corrupt.fetch_add(1, Ordering::Relaxed);
                                    tracing::error!(
                                        "skipping corrupt event batch in {} at byte {}: {err}",
                                        file.path.display(),
                                        e.offset
                                    );
                                }
                            }
                        }
                        acc
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("BUG: event query thread panicked")).collect()
        });
        let corrupt = corrupt.into_inner();
        self.stats.corrupt_batches.fetch_add(corrupt, Ordering::Relaxed);
        (out, corrupt)
    }

    /// Every event of the query, in batches (one CPU each, time-ordered
    /// within a batch) with their stream, in the order they were stored.
    pub fn scan(&self, q: &EventQuery, want: Want) -> (Vec<(SeriesKey, EventBatch)>, u64) {
        let want = Want { time: true, ..want };
        let (parts, corrupt) = self.for_each(q, want, 1, Vec::new, |acc: &mut Vec<(u32, EventBatch)>, e, b, r| {
            if !r.is_empty() {
                acc.push((e.stream, slice(b, r)));
            }
        });
        let ix = read_lock(&self.index);
        let out = parts.into_iter().flatten().map(|(s, b)| (ix.streams[s as usize].clone(), b)).collect();
        (out, corrupt)
    }

    /// Counts events per value of `col` over the query and returns the `n`
    /// most frequent. Runs on every core.
    pub fn top(&self, q: &EventQuery, col: Column, n: usize) -> Top {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (parts, corrupt) =
            self.for_each(q, Want::column(col), threads, FxHashMap::<u64, u64>::default, |acc, e, b, r| {
                let whole = r.len();
                match col {
                    Column::Cpu => *acc.entry(u64::from(e.cpu)).or_default() += whole as u64,
                    Column::Pid => count(acc, &b.pid[r]),
                    Column::Tid => count(acc, &b.tid[r]),
                    Column::Ip => count(acc, &b.ip[r]),
                    Column::Chain if b.chain.is_empty() => {}
                    // Ids are the batch's own: grouped by the stack itself.
                    Column::Chain => {
                        for &c in &b.chain[r] {
                            let key = b.stacks.get(c as usize).map_or(0, |s| stack_hash(s));
                            *acc.entry(key).or_default() += 1;
                        }
                    }
                }
            });
        let mut parts = parts.into_iter();
        let mut all = parts.next().unwrap_or_default();
        for p in parts {
            for (k, v) in p {
                *all.entry(k).or_default() += v;
            }
        }
        let total = all.values().sum();
        let distinct = all.len() as u64;
        let mut rows: Vec<(u64, u64)> = all.into_iter().collect();
        let n = n.min(rows.len());
        if n > 0 && n < rows.len() {
            rows.select_nth_unstable_by(n - 1, |a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            rows.truncate(n);
        }
        rows.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        rows.truncate(n);
        Top { total, distinct, rows, corrupt }
    }

    /// Deletes these log files (retention); the one being written is never
    /// among them. Returns the events removed.
    pub(crate) fn remove_files(&self, seqs: &[u64]) -> u64 {
        let mut ix = write_lock(&self.index);
        for f in ix.files.iter().filter(|f| seqs.contains(&f.seq)) {
            self.open_files.forget(&f.path);
            if let Err(e) = fs::remove_file(&f.path) {
                tracing::warn!("retention: removing {} failed: {e}", f.path.display());
            }
        }
        let events = ix.entries.iter().filter(|e| seqs.contains(&e.file)).map(|e| u64::from(e.n)).sum();
        ix.files.retain(|f| !seqs.contains(&f.seq));
        ix.entries.retain(|e| !seqs.contains(&e.file));
        events
    }

    /// Closed log files as (seq, newest event time, bytes), oldest first.
    pub(crate) fn files_by_age(&self) -> Vec<(u64, i64, u64)> {
        let current = lock(&self.writer).as_ref().map(|w| w.log.seq());
        let ix = read_lock(&self.index);
        let mut newest: HashMap<u64, i64> = HashMap::new();
        for e in &ix.entries {
            let t = newest.entry(e.file).or_insert(i64::MIN);
            *t = (*t).max(e.max_t);
        }
        let mut out: Vec<(u64, i64, u64)> = ix
            .files
            .iter()
            .filter(|f| Some(f.seq) != current)
            .map(|f| {
                (f.seq, newest.get(&f.seq).copied().unwrap_or(i64::MIN), fs::metadata(&f.path).map_or(0, |m| m.len()))
            })
            .collect();
        out.sort_by_key(|x| x.1);
        out
    }
}

/// A 64-bit hash of a call chain: `top` by chain groups by it.
pub fn stack_hash(stack: &[u64]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    stack.hash(&mut h);
    h.finish()
}

fn count<T: Copy + Into<u64>>(acc: &mut FxHashMap<u64, u64>, vals: &[T]) {
    for &v in vals {
        *acc.entry(v.into()).or_default() += 1;
    }
}

fn slice(b: &EventBatch, r: std::ops::Range<usize>) -> EventBatch {
    let cut = |v: &[u32]| if v.is_empty() { Vec::new() } else { v[r.clone()].to_vec() };
    EventBatch {
        cpu: b.cpu,
        time: b.time[r.clone()].to_vec(),
        pid: cut(&b.pid),
        tid: cut(&b.tid),
        ip: if b.ip.is_empty() { Vec::new() } else { b.ip[r.clone()].to_vec() },
        chain: cut(&b.chain),
        stacks: b.stacks.clone(),
        procs: b.procs.clone(),
    }
}
