//! Retention: the oldest whole blocks and closed event files go first, past
//! `--retention-time` or over the disk budget; never the head, the WAL or
//! the event file being written. Counted in `retention_removed_*`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use model::Timestamp;

use super::{DiskBudget, Store, read_lock, write_lock};

impl Store {
    /// Applies [`Retention`] as of `now` (ns): removes blocks and closed event
    /// files past the age limit, then the oldest of them while the data
    /// directory is over its disk budget. Returns the bytes removed.
    pub fn enforce_retention(&self, now: i64) -> u64 {
        let cutoff = self.opts.retention.max_age.map(|a| now.saturating_sub(a.as_nanos() as i64));
        // Candidates, oldest first by their newest sample: (newest t, bytes, what).
        enum Unit {
            Block(PathBuf),
            Events(u64),
        }
        let mut units: Vec<(i64, u64, Unit)> = {
            let st = read_lock(&self.state);
            st.blocks
                .iter()
                .map(|b| {
                    let max_t = b.entries.iter().map(|e| e.max_t).max().unwrap_or(i64::MIN);
                    (max_t, b.file_bytes, Unit::Block(b.path.clone()))
                })
                .collect()
        };
        units.extend(self.events.files_by_age().into_iter().map(|(seq, t, bytes)| (t, bytes, Unit::Events(seq))));
        units.sort_by_key(|u| u.0);
        let du = self.disk_usage();
        let mut used = du.block_bytes + du.wal_bytes + self.events.usage().1;
        let mut removed = 0;
        for (max_t, bytes, unit) in units {
            let too_old = cutoff.is_some_and(|c| max_t < c);
            let over = self.budget.is_some_and(|b| used > b);
            if !too_old && !over {
                break;
            }
            match unit {
                Unit::Block(path) => {
                    let mut st = write_lock(&self.state);
                    let Some(i) = st.blocks.iter().position(|b| b.path == path) else { continue };
                    let b = st.blocks.remove(i);
                    drop(st);
                    self.open_files.forget(&path);
                    if let Err(e) = fs::remove_file(&path) {
                        tracing::warn!("retention: removing {} failed: {e}", path.display());
                    }
                    self.stats.retention_removed_samples.fetch_add(b.raw_samples, Ordering::Relaxed);
                }
                Unit::Events(seq) => {
                    let n = self.events.remove_files(&[seq]);
                    self.stats.retention_removed_events.fetch_add(n, Ordering::Relaxed);
                }
            }
            tracing::info!(
                "retention removed {bytes} bytes of data ending {} ({})",
                Timestamp(max_t),
                if too_old { "past the age limit" } else { "over the disk budget" }
            );
            used = used.saturating_sub(bytes);
            removed += bytes;
        }
        self.stats.retention_removed_bytes.fetch_add(removed, Ordering::Relaxed);
        removed
    }
}

pub(super) fn resolve_budget(root: &Path, budget: DiskBudget) -> Option<u64> {
    match budget {
        DiskBudget::Bytes(b) => Some(b),
        DiskBudget::Unlimited => None,
        DiskBudget::FractionOfFilesystem(f) => match rustix::fs::statvfs(root) {
            Ok(s) => Some((s.f_blocks as f64 * s.f_frsize as f64 * f) as u64),
            Err(e) => {
                tracing::warn!("cannot size the filesystem of {} ({e}); no disk budget applies", root.display());
                None
            }
        },
    }
}
