//! Compaction: runs of blocks that start in one window merge into one block
//! (`docs/format/block.md`, "Compaction"), on a thread of its own, outside
//! the writer's lock. Only the number of files changes: samples, tiers and
//! retention are as before — except that blocks whose samples overlap
//! (late points flushed) become one column in time order, the later
//! block winning at a time, and the merged block's tiers are built from it.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use model::SeriesKey;

use super::{Block, Store, lock, read_lock, write_lock};
use crate::StoreError;
use crate::block::{Generations, read_chunk, write_block};
use crate::dir;

/// Flushed blocks of one window merged even while the window goes on.
const RUN_MERGE_MIN: usize = 12;

impl Store {
    /// Starts the compactor: a thread that runs [`Store::compact`] after
    /// flushes (and once a minute), for as long as the store lives.
    pub fn spawn_compactor(self: &Arc<Store>) -> std::io::Result<std::thread::JoinHandle<()>> {
        // Holds the store only while compacting: waiting, it holds the
        // wake-up alone, so the store closes when its owners drop it.
        let store = Arc::downgrade(self);
        let wake = Arc::clone(&self.wake);
        std::thread::Builder::new().name("store-compactor".into()).spawn(move || {
            loop {
                let flushed = {
                    let state = lock(&wake.state);
                    let (mut state, _) = wake
                        .cv
                        .wait_timeout_while(state, Duration::from_secs(60), |s| !s.0 && !s.1)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if state.1 {
                        return;
                    }
                    std::mem::take(&mut state.0)
                };
                let Some(s) = store.upgrade() else { return };
                let merged = s.compact().unwrap_or(0);
                drop(s);
                if flushed || merged > 0 {
                    // A flush or a merge freed megabytes the allocator
                    // would otherwise keep (`heap`).
                    crate::heap::give_back_free();
                }
            }
        })
    }

    /// Merges runs of blocks that start in one compaction window, once data
    /// has moved past it, into one block each; returns how many merges ran.
    /// Reads and writes without the writer's lock (appends and flushes go
    /// on); the merged block is written whole before the blocks it replaces
    /// are removed, and a crash in between leaves them to be ignored and
    /// removed on open (`block::replaces`). Samples, tiers and retention
    /// are as before: only the number of files changes.
    pub fn compact(&self) -> Result<usize, StoreError> {
        let Some(window) = self.opts.compaction_window else { return Ok(0) };
        if lock(&self.writer).is_none() {
            return Err(StoreError::ReadOnly);
        }
        let window = i64::try_from(window.as_nanos()).unwrap_or(i64::MAX).max(1);
        let _one = lock(&self.compacting);
        let mut merges = 0;
        loop {
            // The oldest run of at least two blocks in one window, with a
            // block of a later window after it.
            let run: Vec<Arc<Block>> = {
                let st = read_lock(&self.state);
                let win = |b: &Block| b.start.div_euclid(window);
                let mut found = Vec::new();
                let mut i = 0;
                while i < st.blocks.len() {
                    let w = win(&st.blocks[i]);
                    let j = i + st.blocks[i..].iter().take_while(|b| win(b) == w).count();
                    if j - i >= 2 && j < st.blocks.len() {
                        found = st.blocks[i..j].to_vec();
                        break;
                    }
                    // A window that never ends (every new block starts in
                    // it: a sender far behind, or one writing old times
                    // beside current ones) still merges, a dozen flushes
                    // at a time, so its files do not grow without bound.
                    let fresh = st.blocks[i..j].iter().rev().take_while(|b| b.flushed).count();
                    if fresh >= RUN_MERGE_MIN {
                        found = st.blocks[j - fresh..j].to_vec();
                        break;
                    }
                    i = j;
                }
                found
            };
            if run.is_empty() {
                return Ok(merges);
            }
            match self.merge(&run) {
                Ok(()) => merges += 1,
                Err(e) => {
                    self.stats.compaction_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("compaction of {} blocks failed; they stay as they are: {e}", run.len());
                    return Err(e);
                }
            }
        }
    }

    fn merge(&self, run: &[Arc<Block>]) -> Result<(), StoreError> {
        let gens = |b: &Block| crate::block::parse_block_name(&b.path).expect("BUG: a listed block has a block name");
        let merged_gens = Generations { first: gens(&run[0]).first, last: gens(&run[run.len() - 1]).last };
        // Every raw series of the run, by store id (each block finds its
        // entry of an id in its own map: no search over entries).
        let mut ids: Vec<u32> = run.iter().flat_map(|b| b.by_id.keys().copied()).collect();
        ids.sort_unstable();
        ids.dedup();
        let keys: Vec<(u32, SeriesKey)> = {
            let st = read_lock(&self.state);
            ids.iter().map(|&id| (id, st.keys[id as usize].clone())).collect()
        };
        let files = run
            .iter()
            .map(|b| {
                self.open_files.get(&b.path).map_err(|source| crate::BlockError::Io { path: b.path.clone(), source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut failed = None;
        let series = keys.iter().map(|(id, key)| {
            let (mut ts, mut vals) = (Vec::new(), Vec::new());
            for (b, f) in run.iter().zip(&files) {
                let Some(e) = b.by_id.get(id).map(|&i| &b.entries[i]) else { continue };
                if let Err(e) = read_chunk(f, &b.path, e, i64::MIN, i64::MAX, &mut ts, &mut vals) {
                    failed.get_or_insert(e);
                }
            }
            // Blocks that overlap (late points flushed) become one column
            // in time order, the later block's sample winning at a time.
            crate::head::last_wins(&mut ts, &mut vals, 0);
            (key, ts, vals)
        });
        let written =
            write_block(&dir::blocks_dir(&self.root), merged_gens, series, |i, ts, vals| self.tiers_of(i, ts, vals));
        let meta = match (written, failed) {
            (Ok(meta), None) => meta,
            (Ok(meta), Some(e)) => {
                // A chunk did not verify: keep the blocks, whose good chunks
                // still serve, rather than a merge without it.
                let _ = fs::remove_file(&meta.path);
                return Err(e.into());
            }
            (Err(e), _) => return Err(e.into()),
        };
        let merged_path = meta.path.clone();
        let mut st = write_lock(&self.state);
        let at = st.blocks.iter().position(|b| Arc::ptr_eq(b, &run[0]));
        let intact = at.is_some_and(|at| {
            st.blocks.len() >= at + run.len()
                && st.blocks[at..at + run.len()].iter().zip(run).all(|(a, b)| Arc::ptr_eq(a, b))
        });
        let Some(at) = at.filter(|_| intact) else {
            // Retention removed one of them meanwhile: the merge is moot.
            drop(st);
            let _ = fs::remove_file(&merged_path);
            return Ok(());
        };
        let ids: Vec<u32> = keys.iter().map(|(id, _)| *id).collect();
        let block = Block::new(meta, &mut st, Some(&ids));
        st.blocks.splice(at..at + run.len(), [Arc::new(block)]);
        st.find_overlaps();
        drop(st);
        for b in run {
            self.open_files.forget(&b.path);
            if let Err(e) = fs::remove_file(&b.path) {
                tracing::warn!(
                    "compaction: removing {} failed ({e}); it is ignored and removed on the next open",
                    b.path.display()
                );
            }
        }
        self.stats.compactions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("compacted {} blocks into {}", run.len(), merged_path.display());
        Ok(())
    }
}
