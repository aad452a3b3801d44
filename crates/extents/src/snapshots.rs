//! The kept maps: one file per round (`TIME_NS.json.zst`: the round's
//! snapshots as zstd-compressed JSON, docs/format/extents.md), written to a
//! temporary name and renamed, the oldest removed beyond `keep`.

use std::io;
use std::path::{Path, PathBuf};

use crate::Snapshot;

/// The directory of kept snapshots.
#[derive(Debug, Clone)]
pub struct Snapshots {
    dir: PathBuf,
    keep: usize,
}

/// Snapshot files are refused beyond this size when read back (a JSON
/// bomb from a bad disk or a hand-made file).
const MAX_DECODED: u64 = 1 << 30;

impl Snapshots {
    /// The directory is created by the first write (a data directory is
    /// opened by the store first, and refused if something else made it).
    pub fn open(dir: PathBuf, keep: usize) -> Snapshots {
        Snapshots { dir, keep: keep.max(1) }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keeps the round at `time_ns`; removes the oldest beyond `keep`.
    pub fn write(&self, time_ns: i64, snaps: &[Snapshot]) -> io::Result<PathBuf> {
        let json = serde_json::to_vec(snaps).map_err(io::Error::other)?;
        let packed = zstd::bulk::compress(&json, 3)?;
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(format!("{time_ns}.json.zst"));
        let tmp = self.dir.join(format!(".{time_ns}.tmp"));
        std::fs::write(&tmp, packed)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        let times = self.times()?;
        for old in times.iter().take(times.len().saturating_sub(self.keep)) {
            std::fs::remove_file(self.path(*old))?;
        }
        Ok(path)
    }

    fn path(&self, time_ns: i64) -> PathBuf {
        self.dir.join(format!("{time_ns}.json.zst"))
    }

    /// The rounds kept, oldest first.
    pub fn times(&self) -> io::Result<Vec<i64>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out: Vec<i64> =
            entries.flatten().filter_map(|e| e.file_name().to_str()?.strip_suffix(".json.zst")?.parse().ok()).collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The round at `time_ns`.
    pub fn read(&self, time_ns: i64) -> io::Result<Vec<Snapshot>> {
        decode(&std::fs::read(self.path(time_ns))?)
    }
}

/// A snapshot file's bytes; damage is an error naming what is wrong.
pub fn decode(bytes: &[u8]) -> io::Result<Vec<Snapshot>> {
    let mut json = Vec::new();
    let mut reader = zstd::stream::read::Decoder::new(bytes)?;
    io::copy(&mut io::Read::take(&mut reader, MAX_DECODED + 1), &mut json)?;
    if json.len() as u64 > MAX_DECODED {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot larger than 1 GiB decoded"));
    }
    serde_json::from_slice(&json).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Figures, FileMap};

    fn snap(t: i64) -> Snapshot {
        Snapshot {
            time_ns: t,
            path: "/mnt".into(),
            device_bytes: 1 << 20,
            block_size: 4096,
            figures: Figures { files: 1, runs: 2, ..Figures::default() },
            files: vec![FileMap { path: "a".into(), size: 8192, runs: vec![(0, 4096), (65536, 4096)], pending: 0 }],
            free: Some(vec![(4096, 61440)]),
            truncated: false,
        }
    }

    #[test]
    fn kept_rounds_read_back_and_the_oldest_go() {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshots::open(dir.path().join("extents"), 2);
        assert_eq!(s.times().unwrap(), Vec::<i64>::new());
        for t in [30, 10, 20] {
            s.write(t, &[snap(t)]).unwrap();
        }
        // 10 was the oldest when 20 came.
        assert_eq!(s.times().unwrap(), vec![20, 30]);
        assert_eq!(s.read(20).unwrap(), vec![snap(20)]);
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let good = zstd::bulk::compress(&serde_json::to_vec(&[snap(1)]).unwrap(), 3).unwrap();
        assert_eq!(decode(&good).unwrap(), vec![snap(1)]);
        for cut in [0, 5, good.len() - 1] {
            let e = decode(&good[..cut]).unwrap_err();
            assert!(
                matches!(e.kind(), io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof | io::ErrorKind::Other),
                "{e}"
            );
        }
    }
}
