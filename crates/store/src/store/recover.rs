//! Opening a data directory: blocks are listed and verified (a compacted
//! block's leftover sources removed), then the WAL is replayed into the head
//! — a torn tail cut, damage in the middle skipped to the next whole record
//! and reported, times outside the storable range dropped and counted.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use model::{SeriesKey, Timestamp};

use super::{Block, State, Store, write_lock};
use crate::StoreError;
use crate::block::{list_blocks, read_block_meta, recover_block};
use crate::dir;
use crate::wal::{self, Record, decode_records, list_segments};

impl Store {
    /// Loads blocks and replays the WAL; returns the next WAL sequence number
    /// and the segments that did not replay whole (never to be deleted).
    pub(super) fn load(&self, read_only: bool) -> Result<(u64, Vec<u64>), StoreError> {
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
        let listed = list_blocks(&blocks_dir).map_err(io("list blocks", &blocks_dir))?;
        // Every generation a block file names, read or not: the next WAL
        // segment (and so the next flush's block) is numbered past them all,
        // so no block file is ever written over.
        let newest_gen = listed.iter().map(|(g, _)| g.last).max();
        for (k, (gens, path)) in listed.iter().enumerate() {
            let (gens, path) = (*gens, path.clone());
            // A compacted block's sources, if a crash left them: its samples
            // are in the compacted block, which was read (and verified) first.
            if crate::block::replaces(covered, gens) {
                replaced.push(path);
                continue;
            }
            let (meta, verified) = match read_block_meta(&path) {
                Ok(m) => (m, true),
                Err(crate::block::BlockError::Io { source, .. })
                    if read_only && source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(e) => {
                    // A compaction whose sources are still there (a crash
                    // before their removal): they serve, verified, and the
                    // next compaction writes the merge again.
                    let sources = listed[k + 1..].iter().any(|(g, _)| g.first >= gens.first && g.last <= gens.last);
                    match recover_block(&path) {
                        Ok(r) if !sources => {
                            // Its entries verify as they are read, like any block's.
                            self.stats.recovered_blocks.fetch_add(1, Ordering::Relaxed);
                            self.stats.corrupt_chunks.fetch_add(r.lost, Ordering::Relaxed);
                            if !read_only {
                                tracing::error!("{e}: block read {}", r.how);
                            }
                            (r.meta, false)
                        }
                        recovered => {
                            self.stats.corrupt_blocks.fetch_add(1, Ordering::Relaxed);
                            let why = match recovered {
                                Ok(_) => "the blocks it merged serve instead".to_owned(),
                                Err(scan) => format!("its samples are not served: {scan}"),
                            };
                            tracing::error!("skipping corrupt block: {e}; {why}");
                            continue;
                        }
                    }
                }
            };
            if verified {
                // A block read without its index may lack what was damaged:
                // the WAL segments it covers, if still there, are replayed
                // (each sample newer than its series' last one in a block).
                covered = Some(covered.map_or(meta.wal_seq_covered, |c: u64| c.max(meta.wal_seq_covered)));
            }
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
        let mut damaged = Vec::new();
        for (i, (seq, path, data)) in segments.into_iter().enumerate() {
            if covered.is_some_and(|c| seq <= c) {
                if !read_only {
                    // Its samples are in a block. Deleted only if it is
                    // whole: one that was not (damage a crash kept from the
                    // move after the flush) goes aside, never away.
                    if wal::segment_intact(&data) {
                        fs::remove_file(&path).map_err(io("remove covered WAL segment", &path))?;
                    } else if !self.keep_damaged_segment(&wal_dir, &path) {
                        damaged.push(seq);
                    }
                }
                continue;
            }
            let is_last = i + 1 == n_segments;
            if self.replay_segment(&mut st, seq, &path, &data, is_last, read_only)? {
                damaged.push(seq);
            }
        }
        let next = last_seq.max(covered).max(newest_gen).map_or(1, |s| s + 1);
        Ok((next, damaged))
    }

    /// Moves a WAL segment that did not replay whole into `wal/damaged/`
    /// (counted in `wal_damaged_kept`); if that fails it stays where it is
    /// (and false is returned: never deleted, it is tried again).
    pub(super) fn keep_damaged_segment(&self, wal_dir: &Path, path: &Path) -> bool {
        match wal::keep_damaged(wal_dir, path) {
            Ok(dest) => {
                self.stats.wal_damaged_kept.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "{} did not replay whole: kept as {} (what replay read of it is in a block now)",
                    path.display(),
                    dest.display()
                );
                true
            }
            Err(e) => {
                tracing::error!("{} did not replay whole; moving it aside failed ({e}): it stays", path.display());
                false
            }
        }
    }

    /// Replays one segment into the head; returns whether it was damaged
    /// (its magic, bytes skipped, a damaged tail that is no crash's, or
    /// samples whose definition no copy of survived): such a segment is
    /// never deleted, but kept aside once a block holds what was read.
    fn replay_segment(
        &self,
        st: &mut State,
        seq: u64,
        path: &Path,
        data: &[u8],
        is_last: bool,
        read_only: bool,
    ) -> Result<bool, StoreError> {
        let magic = wal::SEGMENT_MAGIC.len();
        let mut damaged = false;
        if data.len() < magic || &data[..magic] != wal::SEGMENT_MAGIC {
            if data.len() < magic && wal::SEGMENT_MAGIC.starts_with(data) {
                // Being created (or a crash while it was): nothing in it yet.
                return Ok(false);
            }
            damaged = true;
            if !read_only {
                tracing::error!(
                    "WAL segment {} has a damaged header: reading the records after it (each carries its own checksum)",
                    path.display()
                );
            }
        }
        // This segment's ids -> store ids.
        let mut ids: HashMap<u32, u32> = HashMap::new();
        // Samples of ids not defined (yet): the definition's first copy may
        // be damaged and its second come after them; pushed when it does.
        let mut undefined: HashMap<u32, Vec<(i64, f64)>> = HashMap::new();
        let mut replayed = 0u64;
        let mut push = |st: &mut State, id: u32, time: i64, v: f64| {
            // As the append did: in order, late, or a repeat of the newest.
            if st.push(id, time, v) != super::Pushed::Repeat {
                replayed += 1;
            }
        };
        let mut on_record = |rec| match rec {
            Record::Series { id, key } => {
                let sid = st.intern(&key);
                ids.insert(id, sid);
                for (t, v) in undefined.remove(&id).unwrap_or_default() {
                    push(st, sid, t, v);
                }
            }
            Record::Samples { time, points } => {
                if !Timestamp(time).is_storable() {
                    // Written before such times were refused at append.
                    self.stats.out_of_range_dropped.fetch_add(points.len() as u64, Ordering::Relaxed);
                    return;
                }
                for (wid, v) in points {
                    match ids.get(&wid) {
                        Some(&id) => push(st, id, time, v),
                        None => undefined.entry(wid).or_default().push((time, v)),
                    }
                }
            }
        };
        // Damage followed by records that verify is corruption, not a torn
        // tail: the records after it were acknowledged, so they are replayed
        // and only the damaged bytes skipped (and reported).
        let body = &data[magic.min(data.len())..];
        let base = magic.min(data.len());
        let mut pos = 0;
        let torn = loop {
            let (valid, damage) = decode_records(&body[pos..], (base + pos) as u64, &mut on_record);
            let Some(damage) = damage else { break None };
            let at = pos + valid;
            match codec::frame::resync(body, at, wal::is_record) {
                Some(next) => {
                    damaged = true;
                    if !read_only {
                        self.stats.wal_skipped_bytes.fetch_add((next - at) as u64, Ordering::Relaxed);
                        tracing::error!(
                            "{} damaged at byte {} ({}): skipping {} bytes to the next whole record at byte {}; the records after it are kept (a series whose definition was in the damage is defined by its second copy, or kept as kansoku_wal_orphan)",
                            path.display(),
                            damage.offset,
                            damage.what,
                            next - at,
                            base + next
                        );
                    }
                    pos = next;
                }
                None => break Some((at, damage)),
            }
        };
        // Samples no copy of whose definition survived: kept, under a
        // placeholder naming the segment and the id, and counted.
        let mut orphans: Vec<(u32, Vec<(i64, f64)>)> = undefined.into_iter().collect();
        orphans.sort_unstable_by_key(|o| o.0);
        let mut orphaned = 0u64;
        for (wid, samples) in &orphans {
            let key = SeriesKey::new(ORPHAN, [("segment", format!("{seq:010}")), ("wal_id", wid.to_string())]);
            let id = st.intern(&key);
            for &(t, v) in samples {
                push(st, id, t, v);
            }
            orphaned += samples.len() as u64;
        }
        self.stats.wal_replayed_samples.fetch_add(replayed, Ordering::Relaxed);
        if !orphans.is_empty() {
            damaged = true;
            if !read_only {
                self.stats.wal_orphaned_samples.fetch_add(orphaned, Ordering::Relaxed);
                tracing::error!(
                    "{}: the definitions of {} series were lost (every copy damaged): their {orphaned} samples are kept as {ORPHAN}{{segment=\"{seq:010}\",wal_id=...}} (counted in wal_orphaned_samples)",
                    path.display(),
                    orphans.len(),
                );
            }
        }
        let Some((valid, damage)) = torn else {
            if damaged && !read_only {
                self.stats.wal_damaged_segments.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(damaged);
        };
        if read_only {
            // A writer may be mid-append; what it has not finished is not yet acknowledged.
            return Ok(damaged);
        }
        self.stats.wal_damaged_segments.fetch_add(1, Ordering::Relaxed);
        let valid_len = (base + valid) as u64;
        if is_last && wal::looks_torn(&body[valid..]) {
            // A crash mid-write: never acknowledged, cut.
            wal::repair_log(path, data.len() as u64, valid_len, &damage, true, "record")
                .map_err(|source| StoreError::Io { op: "truncate WAL segment", path: path.to_path_buf(), source })?;
            return Ok(damaged);
        }
        tracing::error!(
            "{} damaged at byte {} ({}) with nothing after it that verifies: the {valid_len} bytes before it are replayed, the file is kept (moved to wal/damaged/ once a block holds them)",
            path.display(),
            damage.offset,
            damage.what,
        );
        Ok(true)
    }
}

/// The name of the placeholder series of samples whose definition was lost.
const ORPHAN: &str = "kansoku_wal_orphan";
