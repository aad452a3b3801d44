//! WAL segment files: `wal/<seq:010>.wal`, an 8-byte magic, then records.
//! The writer appends whole groups with one positional `write` at the length
//! it knows good and rolls the file back to that length if a write fails (disk
//! full), so a failed append never leaves a torn record for replay to trip
//! over, and the next append lands right after the last good record: never
//! past a hole of zeros (which replay would take for a torn tail, cutting
//! every acknowledged record after it).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A kind of numbered log file: the WAL, or the event logs (`docs/format/events.md`).
#[derive(Debug)]
pub struct LogKind {
    pub magic: &'static [u8; 8],
    pub ext: &'static str,
}

pub const WAL: LogKind = LogKind { magic: b"KSKWAL01", ext: "wal" };
pub const SEGMENT_MAGIC: &[u8; 8] = WAL.magic;

/// Most damaged WAL segments kept in `wal/damaged/` (the oldest go first).
pub const DAMAGED_KEEP: usize = 16;

pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    log_path(&WAL, dir, seq)
}

pub fn log_path(kind: &LogKind, dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:010}.{}", kind.ext))
}

/// Segment files in `dir`, ascending by sequence number.
pub fn list_segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    list_logs(&WAL, dir)
}

/// Log files of `kind` in `dir`, ascending by sequence number.
pub fn list_logs(kind: &LogKind, dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(seq) = name.to_str().and_then(|n| n.strip_suffix(kind.ext)?.strip_suffix('.')?.parse().ok()) else {
            continue;
        };
        out.push((seq, entry.path()));
    }
    out.sort();
    Ok(out)
}

#[derive(Debug)]
pub struct WalWriter {
    kind: &'static LogKind,
    dir: PathBuf,
    seq: u64,
    file: Arc<File>,
    /// Bytes of this file known written (and, after a sync, durable).
    len: u64,
    sync: Arc<GroupSync>,
}

/// Group commit: appenders write under the writer's lock, then call
/// [`GroupSync::sync_to`] outside it. Whoever gets here first fsyncs
/// everything written so far; those who waited meanwhile find their bytes
/// already durable and return without an fsync of their own.
#[derive(Debug)]
pub struct GroupSync {
    /// Bytes appended over all files of this log, ever (a log position).
    written: AtomicU64,
    synced: Mutex<Synced>,
    fsyncs: AtomicU64,
}

#[derive(Debug)]
struct Synced {
    file: Arc<File>,
    durable: u64,
}

impl GroupSync {
    /// Returns once every byte before log position `pos` is durable.
    pub fn sync_to(&self, pos: u64) -> io::Result<()> {
        let mut s = self.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.durable >= pos {
            return Ok(());
        }
        // Bytes written up to here are in `s.file`: a rotation switches files
        // only under this lock, after syncing the old one.
        let target = self.written.load(Ordering::Acquire);
        s.file.sync_data()?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        s.durable = s.durable.max(target);
        Ok(())
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// fsyncs done (fewer than acknowledged appends when commits group).
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }
}

fn create_file(kind: &LogKind, dir: &Path, seq: u64) -> io::Result<File> {
    let path = log_path(kind, dir, seq);
    let mut file = OpenOptions::new().write(true).create_new(true).open(&path)?;
    let init = file.write_all(kind.magic).and_then(|()| file.sync_all()).and_then(|()| File::open(dir)?.sync_all());
    if let Err(e) = init {
        // Leave no half-made segment behind (disk full): the next attempt
        // must be able to create it.
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    Ok(file)
}

impl WalWriter {
    /// Creates segment `seq` (which must not exist) and makes its directory
    /// entry durable.
    pub fn create(dir: &Path, seq: u64) -> io::Result<WalWriter> {
        WalWriter::create_kind(&WAL, dir, seq)
    }

    pub fn create_kind(kind: &'static LogKind, dir: &Path, seq: u64) -> io::Result<WalWriter> {
        let file = Arc::new(create_file(kind, dir, seq)?);
        let sync = Arc::new(GroupSync {
            written: AtomicU64::new(0),
            synced: Mutex::new(Synced { file: Arc::clone(&file), durable: 0 }),
            fsyncs: AtomicU64::new(0),
        });
        Ok(WalWriter { kind, dir: dir.to_path_buf(), seq, file, len: kind.magic.len() as u64, sync })
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Bytes in the file, magic included.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// The group-commit handle, to sync outside the writer's lock.
    pub fn group(&self) -> &Arc<GroupSync> {
        &self.sync
    }

    /// Appends encoded records; returns the log position after them (for
    /// [`GroupSync::sync_to`]). On failure the file is cut back to its prior
    /// length, so the segment stays a clean sequence of records.
    pub fn append(&mut self, records: &[u8]) -> io::Result<u64> {
        // At our own offset, not the file's cursor: after a failed write the
        // cursor sits past the cut, and a write there would leave a hole.
        if let Err(e) = self.file.write_all_at(records, self.len) {
            // Best effort: if even truncation fails, the next append
            // overwrites the partial bytes, and replay's checksum catches them.
            let _ = self.file.set_len(self.len);
            let _ = self.file.sync_data();
            return Err(e);
        }
        self.len += records.len() as u64;
        Ok(self.sync.written.fetch_add(records.len() as u64, Ordering::AcqRel) + records.len() as u64)
    }

    /// Makes everything appended so far durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.sync.sync_to(self.sync.written())
    }

    /// Starts segment `seq + 1` after syncing this one.
    pub fn rotate(&mut self) -> io::Result<()> {
        self.sync()?;
        let file = Arc::new(create_file(self.kind, &self.dir, self.seq + 1)?);
        let mut s = self.sync.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.file = Arc::clone(&file);
        s.durable = s.durable.max(self.sync.written());
        drop(s);
        self.file = file;
        self.seq += 1;
        self.len = self.kind.magic.len() as u64;
        Ok(())
    }
}

/// Where WAL segments that did not replay whole are kept (`docs/format/wal.md`).
pub fn damaged_dir(wal_dir: &Path) -> PathBuf {
    wal_dir.join("damaged")
}

/// Files kept in [`damaged_dir`], oldest (lowest segment number) first.
pub fn list_damaged(wal_dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(damaged_dir(wal_dir))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// Moves a WAL segment that did not replay whole (its magic, a record or a
/// definition damaged) into [`damaged_dir`] instead of deleting it: what
/// replay could not read may still be read by hand. At most
/// [`DAMAGED_KEEP`] files stay there; the oldest beyond that are removed.
/// Returns where the segment went.
pub fn keep_damaged(wal_dir: &Path, path: &Path) -> io::Result<PathBuf> {
    let dir = damaged_dir(wal_dir);
    fs::create_dir_all(&dir)?;
    let name = path.file_name().ok_or_else(|| io::Error::other("a segment path without a file name"))?;
    let mut dest = dir.join(name);
    let mut k = 1;
    while dest.exists() {
        // The same number again (a data directory restored from a copy, say): a suffix.
        dest = dir.join(format!("{}.{k}", name.to_string_lossy()));
        k += 1;
    }
    fs::rename(path, &dest)?;
    let kept = list_damaged(wal_dir);
    for old in &kept[..kept.len().saturating_sub(DAMAGED_KEEP)] {
        tracing::warn!(
            "removing {}: more than {DAMAGED_KEEP} damaged WAL segments are kept, the oldest go",
            old.display()
        );
        let _ = fs::remove_file(old);
    }
    // Best effort: moved or not after a crash, it is never deleted (on
    // open a covered segment that is not whole is moved again).
    let _ = File::open(&dir).and_then(|d| d.sync_all());
    let _ = File::open(wal_dir).and_then(|d| d.sync_all());
    Ok(dest)
}

/// Whether a WAL segment's bytes are whole: its magic, then records that
/// all verify to the end (or the start of a segment being created: a
/// prefix of the magic, nothing in it).
pub fn segment_intact(data: &[u8]) -> bool {
    let magic = SEGMENT_MAGIC.len();
    if data.len() < magic {
        return SEGMENT_MAGIC.starts_with(data);
    }
    &data[..magic] == SEGMENT_MAGIC && super::decode_records(&data[magic..], magic as u64, |_| {}).1.is_none()
}

/// Whether the bytes of a log file from the first record that does not
/// verify to its end look like a write cut short by a crash (the file ends
/// inside a record's header or inside the length it gives, or in a hole of
/// zeros), rather than a record whose bytes are all there but damaged.
pub fn looks_torn(rest: &[u8]) -> bool {
    let Some(head) = rest.first_chunk::<8>() else { return true };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    rest.iter().all(|&b| b == 0) || len > rest.len() - 8
}

/// Deals with a log file that stopped verifying at `damage`: the newest file
/// (`is_last`) has a torn tail from a crash, never acknowledged, so it is cut
/// back to its `valid_len` bytes; in an older file it is corruption, logged,
/// and what follows it is not served. `unit` names what the file holds.
pub fn repair_log(
    path: &Path,
    file_len: u64,
    valid_len: u64,
    damage: &codec::frame::Damage,
    is_last: bool,
    unit: &str,
) -> io::Result<()> {
    if !is_last {
        tracing::error!(
            "{} corrupt at byte {} ({}): keeping the {valid_len} bytes before it; later {unit}s of this file are not served",
            path.display(),
            damage.offset,
            damage.what,
        );
        return Ok(());
    }
    tracing::warn!(
        "{} torn at byte {} ({}): truncating to the last whole {unit}; {} bytes after it were never acknowledged",
        path.display(),
        damage.offset,
        damage.what,
        file_len - valid_len
    );
    let f = OpenOptions::new().write(true).open(path)?;
    f.set_len(valid_len)?;
    f.sync_all()
}
