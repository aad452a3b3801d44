//! WAL segment files: `wal/<seq:010>.wal`, an 8-byte magic, then records.
//! The writer appends whole groups with one `write` and rolls the file back to
//! its last good length if a write fails (disk full), so a failed append never
//! leaves a torn record for replay to trip over.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub const SEGMENT_MAGIC: &[u8; 8] = b"KSKWAL01";

pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:010}.wal"))
}

/// Segment files in `dir`, ascending by sequence number.
pub fn list_segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(seq) = name.to_str().and_then(|n| n.strip_suffix(".wal")).and_then(|n| n.parse().ok()) else {
            continue;
        };
        out.push((seq, entry.path()));
    }
    out.sort();
    Ok(out)
}

#[derive(Debug)]
pub struct WalWriter {
    dir: PathBuf,
    seq: u64,
    file: File,
    /// Bytes known written (and, after `sync`, durable).
    len: u64,
}

impl WalWriter {
    /// Creates segment `seq` (which must not exist) and makes its directory
    /// entry durable.
    pub fn create(dir: &Path, seq: u64) -> io::Result<WalWriter> {
        let path = segment_path(dir, seq);
        let mut file = OpenOptions::new().write(true).create_new(true).open(&path)?;
        let init =
            file.write_all(SEGMENT_MAGIC).and_then(|()| file.sync_all()).and_then(|()| File::open(dir)?.sync_all());
        if let Err(e) = init {
            // Leave no half-made segment behind (disk full): the next attempt
            // must be able to create it.
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok(WalWriter { dir: dir.to_path_buf(), seq, file, len: SEGMENT_MAGIC.len() as u64 })
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Appends encoded records. On failure the file is cut back to its prior
    /// length, so the segment stays a clean sequence of records.
    pub fn append(&mut self, records: &[u8]) -> io::Result<()> {
        if let Err(e) = self.file.write_all(records) {
            // Best effort: if even truncation fails, replay's checksum catches the tail.
            let _ = self.file.set_len(self.len);
            let _ = self.file.sync_data();
            return Err(e);
        }
        self.len += records.len() as u64;
        Ok(())
    }

    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Starts segment `seq + 1` after syncing this one.
    pub fn rotate(&mut self) -> io::Result<()> {
        self.sync()?;
        *self = WalWriter::create(&self.dir, self.seq + 1)?;
        Ok(())
    }
}
