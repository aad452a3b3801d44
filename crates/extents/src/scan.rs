//! One scan of a path: every regular file under it on the same file
//! system (FIEMAP: its extents merged into physically contiguous runs) and
//! the file system's free space (GETFSMAP), into a [`Snapshot`] and its
//! [`Figures`]. Files are not synced first: a scan must not change what it
//! measures, so bytes still waiting for delayed allocation are counted as
//! `pending`, not placed.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{ioctl, parse};

/// At most this many runs are kept in a snapshot's map (the figures count
/// every file): the largest files first.
pub const MAX_RUNS: usize = 1_000_000;

/// A file of `n` bytes needs at least `n / IDEAL_RUN` runs however well it
/// is placed: an ext4 block group of 4 KiB blocks (XFS allocation groups
/// are larger), across which metadata can interrupt a run.
pub const IDEAL_RUN: u64 = 128 << 20;

/// One file's place on the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMap {
    /// Relative to the scanned path.
    pub path: String,
    pub size: u64,
    /// (device byte, length) of each physically contiguous run, in file order.
    pub runs: Vec<(u64, u64)>,
    /// Bytes with no place yet (delayed allocation, inline, unknown).
    #[serde(default)]
    pub pending: u64,
}

impl FileMap {
    /// Runs beyond the fewest the file could have.
    pub fn extra_runs(&self) -> u64 {
        let allocated: u64 = self.runs.iter().map(|r| r.1).sum();
        (self.runs.len() as u64).saturating_sub(allocated.div_ceil(IDEAL_RUN).max(1))
    }
}

/// A file system's fragmentation in figures (each stored as a series).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub files: u64,
    pub file_bytes: u64,
    /// Physically contiguous runs over all files.
    pub runs: u64,
    /// Files with more runs than they need.
    pub fragmented_files: u64,
    /// Runs beyond what the files need: 0 when every file is in one piece.
    pub extra_runs: u64,
    /// Free space: None where the file system has no GETFSMAP.
    pub free_bytes: Option<u64>,
    pub free_extents: Option<u64>,
    pub free_largest_bytes: Option<u64>,
    /// 1 − largest free extent ÷ free bytes: 0 when free space is one piece.
    pub free_fragmentation: Option<f64>,
    /// Files that could not be opened or mapped (counted, named in the log).
    pub skipped_files: u64,
    pub scan_seconds: f64,
}

/// One scan of one path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub time_ns: i64,
    pub path: String,
    /// The device's size as the file system sees it (its map's end).
    pub device_bytes: u64,
    pub block_size: u64,
    pub figures: Figures,
    /// Files, largest first (all of them unless `truncated`).
    pub files: Vec<FileMap>,
    /// Free extents (device byte, length); None without GETFSMAP.
    pub free: Option<Vec<(u64, u64)>>,
    /// Not every file's runs fit in [`MAX_RUNS`].
    #[serde(default)]
    pub truncated: bool,
}

/// Scans `root`: files under it on its file system, and the free map.
pub fn scan(root: &Path, time_ns: i64) -> std::io::Result<Snapshot> {
    let started = clock::monotonic_ns();
    let top = std::fs::metadata(root)?;
    let dev = top.dev();
    let mut figures = Figures::default();
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    if top.is_file() {
        stack.clear();
        map_file(root, root, &mut files, &mut figures);
    }
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!("fragmentation: {}: {e}", dir.display());
                figures.skipped_files += 1;
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else {
                figures.skipped_files += 1;
                continue;
            };
            if meta.dev() != dev {
                continue;
            }
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                map_file(root, &path, &mut files, &mut figures);
            }
        }
    }
    files.sort_by(|a: &FileMap, b| b.size.cmp(&a.size).then_with(|| a.path.cmp(&b.path)));
    let mut kept = 0usize;
    let mut truncated = false;
    for f in &mut files {
        kept += f.runs.len();
        if kept > MAX_RUNS {
            f.runs.clear();
            truncated = true;
        }
    }
    let root_file = File::open(root)?;
    let map = match ioctl::fs_map(&root_file) {
        Ok(m) => Some(m),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL)) => None,
        Err(e) => return Err(e),
    };
    let vfs = rustix::fs::statvfs(root)?;
    let block_size = vfs.f_frsize.max(1);
    let end_of = |m: &[parse::MapRecord]| m.iter().map(|r| r.physical + r.length).max();
    let device_bytes = map.as_deref().and_then(end_of).unwrap_or(vfs.f_blocks * block_size);
    let free: Option<Vec<(u64, u64)>> =
        map.map(|m| m.iter().filter(|r| r.is_free()).map(|r| (r.physical, r.length)).collect());
    if let Some(free) = &free {
        let total: u64 = free.iter().map(|f| f.1).sum();
        let largest = free.iter().map(|f| f.1).max().unwrap_or(0);
        figures.free_bytes = Some(total);
        figures.free_extents = Some(free.len() as u64);
        figures.free_largest_bytes = Some(largest);
        figures.free_fragmentation = Some(if total == 0 { 0.0 } else { 1.0 - largest as f64 / total as f64 });
    }
    figures.scan_seconds = (clock::monotonic_ns() - started) as f64 / 1e9;
    Ok(Snapshot {
        time_ns,
        path: root.display().to_string(),
        device_bytes,
        block_size,
        figures,
        files,
        free,
        truncated,
    })
}

fn open(path: &Path) -> std::io::Result<File> {
    // O_NOATIME: a scan does not touch what it reads (allowed to the
    // file's owner and root; others open without it).
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME | libc::O_NONBLOCK)
        .open(path)
        .or_else(|_| OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path))
}

fn map_file(root: &Path, path: &Path, files: &mut Vec<FileMap>, figures: &mut Figures) {
    let mapped = open(path).and_then(|f| Ok((f.metadata()?.len(), ioctl::file_extents(&f)?)));
    let (size, extents) = match mapped {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!("fragmentation: {}: {e}", path.display());
            figures.skipped_files += 1;
            return;
        }
    };
    let runs = parse::runs(&extents);
    let pending = extents.iter().filter(|e| !e.placed()).map(|e| e.length).sum();
    let rel = path.strip_prefix(root).unwrap_or(path);
    let file = FileMap {
        path: if rel.as_os_str().is_empty() { path.display().to_string() } else { rel.display().to_string() },
        size,
        runs,
        pending,
    };
    figures.files += 1;
    figures.file_bytes += size;
    figures.runs += file.runs.len() as u64;
    let extra = file.extra_runs();
    figures.extra_runs += extra;
    figures.fragmented_files += u64::from(extra > 0);
    files.push(file);
}

/// Bytes `[lo, hi)` of the device in `n` cells. A cell holding any byte of
/// a scanned file shows the file with most bytes there (its index in
/// `snapshot.files`; what was asked about stays visible however large the
/// device); other cells are free ([`FREE`]) when free space holds at least
/// as much of them as anything else, else [`OTHER`] (metadata, files
/// outside the scanned path) — so a cell of a busy disk is not called free
/// for its scattered free blocks.
pub fn cells(snapshot: &Snapshot, n: usize, (lo, hi): (u64, u64)) -> Vec<i32> {
    let n = n.max(1);
    let hi = hi.min(snapshot.device_bytes).max(lo + 1);
    let span = u128::from(hi - lo);
    let edge = |c: usize| lo + (c as u128 * span / n as u128) as u64;
    // Calls `f(cell, bytes)` for each cell `[start, start+len)` touches.
    let each = |start: u64, len: u64, f: &mut dyn FnMut(usize, u64)| {
        let (start, end) = (start.max(lo), start.saturating_add(len).min(hi));
        if start >= end {
            return;
        }
        let first = (u128::from(start - lo) * n as u128 / span) as usize;
        let last = ((u128::from(end - 1 - lo) * n as u128 / span) as usize).min(n - 1);
        for c in first..=last {
            f(c, end.min(edge(c + 1)) - start.max(edge(c)));
        }
    };
    let mut free = vec![0u64; n];
    for &(start, len) in snapshot.free.iter().flatten() {
        each(start, len, &mut |c, b| free[c] += b);
    }
    let mut files = vec![0u64; n];
    let mut best = vec![(0u64, OTHER); n];
    let mut mine: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
    for (i, f) in snapshot.files.iter().enumerate() {
        mine.clear();
        for &(start, len) in &f.runs {
            each(start, len, &mut |c, b| *mine.entry(c).or_default() += b);
        }
        for (&c, &b) in &mine {
            files[c] += b;
            if b > best[c].0 {
                best[c] = (b, i as i32);
            }
        }
    }
    (0..n)
        .map(|c| {
            let size = edge(c + 1) - edge(c);
            let other = size.saturating_sub(free[c] + files[c]);
            let (file_bytes, file) = best[c];
            if file_bytes > 0 {
                file
            } else if free[c] > 0 && free[c] >= other {
                FREE
            } else {
                OTHER
            }
        })
        .collect()
}

/// The device bytes the scanned files occupy, first to last: where the
/// map is worth zooming into on a large device. None without files.
pub fn files_span(snapshot: &Snapshot) -> Option<(u64, u64)> {
    let runs = snapshot.files.iter().flat_map(|f| f.runs.iter());
    let lo = runs.clone().map(|r| r.0).min()?;
    let hi = runs.map(|r| r.0 + r.1).max()?;
    Some((lo, hi))
}

/// A cell of free space.
pub const FREE: i32 = -1;
/// A cell of neither a scanned file nor free space.
pub const OTHER: i32 = -2;

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(files: Vec<FileMap>, free: Vec<(u64, u64)>) -> Snapshot {
        Snapshot {
            time_ns: 0,
            path: "/x".into(),
            device_bytes: 1000,
            block_size: 1,
            figures: Figures::default(),
            files,
            free: Some(free),
            truncated: false,
        }
    }

    #[test]
    fn cells_take_the_largest_piece() {
        let f = |runs: Vec<(u64, u64)>| FileMap { path: "f".into(), size: 0, runs, pending: 0 };
        let s = snap(vec![f(vec![(0, 250), (600, 40)]), f(vec![(620, 80)])], vec![(250, 350)]);
        // Ten cells of 100 bytes: 0,1 file 0; 2 half file 0, half free (a
        // tie goes to the file).
        let c = cells(&s, 10, (0, 1000));
        assert_eq!(c[..3], [0, 0, 0]);
        assert_eq!(c[3..6], [FREE, FREE, FREE]);
        // Cell 6: file 0 has 20 bytes (600..620), file 1 has 80.
        assert_eq!(c[6], 1);
        assert_eq!(c[7..], [OTHER, OTHER, OTHER]);
        // Zoomed into the files' span, 600..700 in two cells.
        assert_eq!(files_span(&s), Some((0, 700)));
        // 600..650: file 0 has 40 bytes, file 1 30; 650..700: file 1 alone.
        assert_eq!(cells(&s, 2, (600, 700)), vec![0, 1]);
    }

    #[test]
    fn scattered_free_blocks_do_not_make_a_busy_cell_free() {
        // One cell of 1000: 100 free bytes in ten pieces, the rest used by
        // files not scanned.
        let free: Vec<(u64, u64)> = (0..10).map(|i| (i * 100, 10)).collect();
        let s = snap(vec![], free);
        assert_eq!(cells(&s, 1, (0, 1000)), vec![OTHER]);
    }

    #[test]
    fn a_file_larger_than_a_group_is_not_fragmented_in_two_runs() {
        let f = FileMap {
            path: "big".into(),
            size: 200 << 20,
            runs: vec![(0, 128 << 20), (1 << 30, 72 << 20)],
            pending: 0,
        };
        assert_eq!(f.extra_runs(), 0);
        let g = FileMap { path: "small".into(), size: 8192, runs: vec![(0, 4096), (40960, 4096)], pending: 0 };
        assert_eq!(g.extra_runs(), 1);
    }
}
