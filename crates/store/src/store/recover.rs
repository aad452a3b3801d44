//! Opening a data directory: blocks are listed and verified (a compacted
//! block's leftover sources removed), then the WAL is replayed into the head
//! — a torn tail cut, damage in the middle skipped to the next whole record
//! and reported, times outside the storable range dropped and counted.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use model::Timestamp;

use super::{Block, State, Store, write_lock};
use crate::StoreError;
use crate::block::{list_blocks, read_block_meta};
use crate::dir;
use crate::wal::{self, Record, decode_records, list_segments};

impl Store {
    /// Loads blocks and replays the WAL; returns the next WAL sequence number.
    pub(super) fn load(&self, read_only: bool) -> Result<u64, StoreError> {
        let wal_dir = dir::wal_dir(&self.root);
        let blocks_dir = dir::blocks_dir(&self.root);
        let io = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { op, path, source }
        };
        // Read WAL contents before listing blocks: a concurrent writer may
        // flush a block and delete segments in between; reading in this order
        // we see each sample in a segment, a block, or both (deduplicated).
        let mut segments = Vec::new();
        for (seq, path) in list_segments(&wal_dir).map_err(io("list WAL", &wal_dir))? {
            match fs::read(&path) {
                Ok(data) => segments.push((seq, path, data)),
                Err(e) if read_only && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("read WAL segment", &path)(e)),
            }
        }
        let mut st = write_lock(&self.state);
        let mut covered: Option<u64> = None;
        let mut replaced = Vec::new();
        for (gens, path) in list_blocks(&blocks_dir).map_err(io("list blocks", &blocks_dir))? {
            // A compacted block's sources, if a crash left them: its samples
            // are in the compacted block, which was read (and verified) first.
            if crate::block::replaces(covered, gens) {
                replaced.push(path);
                continue;
            }
            let meta = match read_block_meta(&path) {
                Ok(m) => m,
                Err(crate::block::BlockError::Io { source, .. })
                    if read_only && source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(e) => {
                    self.stats.corrupt_blocks.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("skipping corrupt block (its samples are not served): {e}");
                    continue;
                }
            };
            covered = Some(covered.map_or(meta.wal_seq_covered, |c: u64| c.max(meta.wal_seq_covered)));
            let block = Block::new(meta, &mut st, None);
            st.blocks.push(Arc::new(block));
        }
        if !read_only {
            for path in replaced {
                tracing::info!("removing {}: a compacted block holds its samples", path.display());
                fs::remove_file(&path).map_err(io("remove replaced block", &path))?;
            }
            for entry in fs::read_dir(&blocks_dir).map_err(io("list blocks", &blocks_dir))?.flatten() {
                if entry.path().extension().is_some_and(|x| x == "tmp") {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let last_seq = segments.last().map(|s| s.0);
        let n_segments = segments.len();
        for (i, (seq, path, data)) in segments.into_iter().enumerate() {
            if covered.is_some_and(|c| seq <= c) {
                if !read_only {
                    fs::remove_file(&path).map_err(io("remove covered WAL segment", &path))?;
                }
                continue;
            }
            let is_last = i + 1 == n_segments;
            self.replay_segment(&mut st, &path, &data, is_last, read_only)?;
        }
        let next = last_seq.max(covered).map_or(1, |s| s + 1);
        Ok(next)
    }

    fn replay_segment(
        &self,
        st: &mut State,
        path: &Path,
        data: &[u8],
        is_last: bool,
        read_only: bool,
    ) -> Result<(), StoreError> {
        let magic = wal::SEGMENT_MAGIC.len();
        if data.len() < magic || &data[..magic] != wal::SEGMENT_MAGIC {
            if read_only {
                return Ok(()); // a writer may be creating it right now
            }
            self.stats.wal_damaged_segments.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("WAL segment {} has no valid header; ignoring it", path.display());
            return Ok(());
        }
        // This segment's ids -> store ids.
        let mut ids: HashMap<u32, u32> = HashMap::new();
        let mut replayed = 0u64;
        let mut on_record = |rec| match rec {
            Record::Series { id, key } => {
                ids.insert(id, st.intern(&key));
            }
            Record::Samples { time, points } => {
                if !Timestamp(time).is_storable() {
                    // Written before such times were refused at append.
                    self.stats.out_of_range_dropped.fetch_add(points.len() as u64, Ordering::Relaxed);
                    return;
                }
                for (wid, v) in points {
                    let Some(&id) = ids.get(&wid) else { continue };
                    if st.last_t[id as usize] < time && st.head.push(id, time, v) {
                        st.last_t[id as usize] = time;
                        replayed += 1;
                    }
                }
            }
        };
        // Damage followed by records that verify is corruption, not a torn
        // tail: the records after it were acknowledged, so they are replayed
        // and only the damaged bytes skipped (and reported).
        let body = &data[magic..];
        let mut pos = 0;
        let torn = loop {
            let (valid, damage) = decode_records(&body[pos..], (magic + pos) as u64, &mut on_record);
            let Some(damage) = damage else { break None };
            let at = pos + valid;
            match codec::frame::resync(body, at, wal::is_record) {
                Some(next) if !read_only => {
                    self.stats.wal_damaged_segments.fetch_add(1, Ordering::Relaxed);
                    self.stats.wal_skipped_bytes.fetch_add((next - at) as u64, Ordering::Relaxed);
                    tracing::error!(
                        "{} damaged at byte {} ({}): skipping {} bytes to the next whole record at byte {}; the records after it are kept",
                        path.display(),
                        damage.offset,
                        damage.what,
                        next - at,
                        magic + next
                    );
                    pos = next;
                }
                Some(next) => pos = next,
                None => break Some((at, damage)),
            }
        };
        self.stats.wal_replayed_samples.fetch_add(replayed, Ordering::Relaxed);
        let Some((valid, damage)) = torn else { return Ok(()) };
        if read_only {
            // A writer may be mid-append; what it has not finished is not yet acknowledged.
            return Ok(());
        }
        self.stats.wal_damaged_segments.fetch_add(1, Ordering::Relaxed);
        let valid_len = (magic + valid) as u64;
        wal::repair_log(path, data.len() as u64, valid_len, &damage, is_last, "record")
            .map_err(|source| StoreError::Io { op: "truncate WAL segment", path: path.to_path_buf(), source })
    }
}
