//! The read side: which series match, their samples in a range (blocks,
//! then the generation being flushed, then the head, under one snapshot),
//! and their downsampled tiers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use model::{Selector, SeriesKey, Timestamp};

use super::{Block, Store, read_lock};
use crate::block::{read_chunk, read_entry_into};
use crate::tier::{Tier, TierBytes};

impl Store {
    /// How many of `keys` the store does not hold yet (one lock for all).
    pub fn count_new<'a>(&self, keys: impl IntoIterator<Item = &'a SeriesKey>) -> usize {
        let st = read_lock(&self.state);
        keys.into_iter().filter(|k| st.id_of(k).is_none()).count()
    }

    /// Whether the store holds the series `key`.
    pub fn contains(&self, key: &SeriesKey) -> bool {
        read_lock(&self.state).id_of(key).is_some()
    }

    /// Series matching `sel`, with their store ids, sorted by key.
    pub fn series(&self, sel: &Selector) -> Vec<(u32, SeriesKey)> {
        self.series_limited(sel, usize::MAX).0
    }

    /// The first `limit` series matching `sel` (sorted by key) and how many
    /// match in all: a listing of a million series clones only what it lists.
    pub fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize) {
        let st = read_lock(&self.state);
        let name = sel.exact_name();
        let mut ids: Vec<u32> = (0..st.keys.len() as u32)
            .filter(|&i| {
                let k = &st.keys[i as usize];
                name.is_none_or(|n| k.name() == n) && sel.matches(k)
            })
            .collect();
        let total = ids.len();
        if total > limit {
            ids.select_nth_unstable_by(limit, |a, b| st.keys[*a as usize].cmp(&st.keys[*b as usize]));
            ids.truncate(limit);
        }
        ids.sort_unstable_by(|a, b| st.keys[*a as usize].cmp(&st.keys[*b as usize]));
        (ids.into_iter().map(|i| (i, st.keys[i as usize].clone())).collect(), total)
    }

    pub fn key(&self, id: u32) -> Option<SeriesKey> {
        read_lock(&self.state).keys.get(id as usize).cloned()
    }

    /// Samples of series `id` with `from <= t <= to`, in time order. A corrupt
    /// chunk is logged, counted and skipped; its samples are never returned.
    pub fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>) {
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        // Each part decoded in place after the last: no copy.
        self.read_parts(id, from, to, &mut ts, &mut vals, &mut |_, _| {});
        debug_assert!(ts.windows(2).all(|w| w[0] < w[1]), "BUG: read returned unordered samples");
        (ts, vals)
    }

    /// What [`Store::read`] returns, handed to `f` a part at a time (a
    /// block's chunk, the generation being flushed, the head) from buffers
    /// reused between parts: a query bucketing a long range holds its
    /// buckets, never the range's samples.
    pub fn scan(&self, id: u32, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&[i64], &[f64])) {
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        self.read_parts(id, from, to, &mut ts, &mut vals, &mut |ts, vals| {
            if !ts.is_empty() {
                f(ts, vals);
            }
            ts.clear();
            vals.clear();
        });
    }

    /// Series `id`'s parts with samples in `[from, to]`, under one read
    /// lock (a concurrent flush cannot hide data between the block list and
    /// the head), in the order they are to be read; and whether they must
    /// be merged. A series with late points is read in its parts' time order
    /// where they do not overlap (a backfill of disjoint stretches: no merge),
    /// and merged in write order where they do (`head::last_wins`).
    fn parts(&self, id: u32, from: i64, to: i64) -> (Vec<Src>, bool) {
        let (mut parts, merges) = {
            let st = read_lock(&self.state);
            let mut parts: Vec<Src> =
                st.blocks.iter().filter(|b| b.overlaps(id, from, to)).map(|b| Src::Block(Arc::clone(b))).collect();
            if let Some(f) = &st.frozen {
                parts.push(Src::Frozen(Arc::clone(f)));
            }
            let (mut ht, mut hv) = (Vec::new(), Vec::new());
            st.head.read(id, from, to, &mut ht, &mut hv);
            parts.push(Src::Mem(ht, hv));
            (parts, st.merges(id))
        };
        if !merges {
            return (parts, false);
        }
        // Each part's first and last time (a block's from its index).
        let mut spans = Vec::with_capacity(parts.len());
        for p in &mut parts {
            if let Src::Frozen(f) = p {
                let (mut ft, mut fv) = (Vec::new(), Vec::new());
                f.read(id, from, to, &mut ft, &mut fv);
                *p = Src::Mem(ft, fv);
            }
            spans.push(match p {
                Src::Block(b) => {
                    let e = &b.entries[b.by_id[&id]];
                    Some((e.min_t, e.max_t))
                }
                Src::Mem(ts, _) => ts.first().zip(ts.last()).map(|(&a, &b)| (a, b)),
                Src::Frozen(_) => unreachable!("read above"),
            });
        }
        let mut order: Vec<usize> = (0..parts.len()).filter(|&i| spans[i].is_some()).collect();
        order.sort_by_key(|&i| spans[i].map(|s| s.0));
        if order.windows(2).any(|w| spans[w[0]].map(|s| s.1) >= spans[w[1]].map(|s| s.0)) {
            return (parts, true);
        }
        let mut slots: Vec<Option<Src>> = parts.into_iter().map(Some).collect();
        (order.into_iter().filter_map(|i| slots[i].take()).collect(), false)
    }

    /// Appends each part's samples in `[from, to]` to `ts`/`vals` and calls
    /// `part` after each (which may take them away); parts that must be
    /// merged are handed on as one, merged.
    fn read_parts(
        &self,
        id: u32,
        from: Timestamp,
        to: Timestamp,
        ts: &mut Vec<i64>,
        vals: &mut Vec<f64>,
        part: &mut dyn FnMut(&mut Vec<i64>, &mut Vec<f64>),
    ) {
        let (from, to) = (from.as_nanos(), to.as_nanos());
        if from > to {
            // An empty range (`time >= 5s AND time < 3s`): nothing, not a panic.
            return;
        }
        let (parts, merge) = self.parts(id, from, to);
        let start = ts.len();
        for p in parts {
            match p {
                Src::Block(b) => {
                    let e = &b.entries[b.by_id[&id]];
                    let (n_ts, n_vals) = (ts.len(), vals.len());
                    let read = self
                        .open_files
                        .get(&b.path)
                        .map_err(|source| crate::BlockError::Io { path: b.path.clone(), source });
                    if let Err(err) = read.and_then(|f| read_chunk(&f, &b.path, e, from, to, ts, vals)) {
                        ts.truncate(n_ts);
                        vals.truncate(n_vals);
                        self.stats.corrupt_chunks.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("skipping corrupt chunk of {}: {err}", self.series_name(id));
                    }
                }
                Src::Frozen(f) => f.read(id, from, to, ts, vals),
                Src::Mem(t, v) => {
                    ts.extend_from_slice(&t);
                    vals.extend_from_slice(&v);
                }
            }
            if !merge {
                part(ts, vals);
            }
        }
        if merge {
            crate::head::last_wins(ts, vals, start);
            part(ts, vals);
        }
    }

    /// The tiers this store writes (see [`Options::tiers`]) and any found in
    /// its blocks, ascending.
    pub fn tiers(&self) -> Vec<i64> {
        let mut t = self.opts.tiers.clone();
        t.extend(read_lock(&self.state).tiers_seen.iter().copied());
        t.sort_unstable();
        t.dedup();
        t
    }

    /// Tier `res` (one of [`tier::RESOLUTIONS`]) of series `id` for the
    /// periods starting in `[from, to]`: read from blocks where they hold it,
    /// computed from raw samples elsewhere (the head, older blocks).
    pub fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> Tier {
        let mut out = Tier::default();
        self.scan_tier(id, res, from, to, &mut |t| out.extend(t));
        out
    }

    /// What [`Store::read_tier`] returns, handed to `f` a part at a time in
    /// time order (a part's first period may continue the last one's, where
    /// a block boundary falls inside a period).
    /// Block parts are decoded into one tier's buffers, reused.
    pub fn scan_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp, f: &mut dyn FnMut(&Tier)) {
        let (from, to) = (from.as_nanos(), to.as_nanos());
        let from = from.saturating_sub(from.rem_euclid(res));
        let raw_to = to.saturating_add(res - 1 - to.rem_euclid(res));
        let (parts, merge) = self.parts(id, from, raw_to);
        if merge {
            // Parts that overlap (late points): the tier of the merged
            // samples, not of each part (a rewritten point counted twice).
            let (ts, vals) = self.read(id, Timestamp(from), Timestamp(raw_to));
            f(&Tier::build(&ts, &vals, res));
            return;
        }
        let mut part = TierBuffers::default();
        for p in parts {
            match p {
                Src::Block(b) => match self.read_block_tier(&b, id, res, from, to, &mut part) {
                    Ok(()) => f(&part.tier),
                    Err(err) => {
                        self.stats.corrupt_chunks.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("skipping corrupt chunk of {}: {err}", self.series_name(id));
                    }
                },
                Src::Frozen(fr) => {
                    let (mut ft, mut fv) = (Vec::new(), Vec::new());
                    fr.read(id, from, raw_to, &mut ft, &mut fv);
                    f(&Tier::build(&ft, &fv, res));
                }
                Src::Mem(ts, vals) => f(&Tier::build(&ts, &vals, res)),
            }
        }
    }

    /// Series `id`'s key, for a message (blocks keep no keys of their own).
    fn series_name(&self, id: u32) -> String {
        read_lock(&self.state).keys.get(id as usize).map_or_else(|| format!("series #{id}"), ToString::to_string)
    }

    /// Block `b`'s part of tier `res` of series `id` into `out`.
    fn read_block_tier(
        &self,
        b: &Block,
        id: u32,
        res: i64,
        from: i64,
        to: i64,
        out: &mut TierBuffers,
    ) -> Result<(), crate::BlockError> {
        let file =
            self.open_files.get(&b.path).map_err(|source| crate::BlockError::Io { path: b.path.clone(), source })?;
        if let Some(&i) = b.tiers.get(&(id, res)) {
            let e = &b.entries[i];
            let read = read_entry_into(&file, &b.path, e, &mut out.bytes).and_then(|()| {
                out.tier.decode_for_folding(&out.bytes, e.n_samples as usize, from, to).map_err(|err| {
                    crate::BlockError::Corrupt {
                        path: b.path.clone(),
                        offset: e.offset,
                        what: format!("tier of {res} ns: {err}"),
                    }
                })
            });
            match read {
                Ok(()) => return Ok(()),
                // The tier is a copy: its raw samples answer instead.
                Err(err) => {
                    self.stats.corrupt_chunks.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        "corrupt tier chunk of {}, built from raw samples instead: {err}",
                        self.series_name(id)
                    );
                }
            }
        }
        // A block without this tier (or whose tier is damaged): from its raw samples.
        let e = &b.entries[b.by_id[&id]];
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        let raw_to = to.saturating_add(res - 1 - to.rem_euclid(res));
        read_chunk(&file, &b.path, e, from, raw_to, &mut ts, &mut vals)?;
        out.tier = Tier::build(&ts, &vals, res);
        Ok(())
    }
}

/// A tier part and its entry's bytes, reused from block to block.
#[derive(Default)]
struct TierBuffers {
    tier: Tier,
    bytes: Vec<u8>,
}

/// A part of a series' samples, as a read snapshot holds it.
enum Src {
    Block(Arc<Block>),
    /// The generation being flushed.
    Frozen(Arc<crate::head::Head>),
    /// Samples already read (the head's, under the lock).
    Mem(Vec<i64>, Vec<f64>),
}
