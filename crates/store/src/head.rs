//! The in-memory head: the samples per series since the last block flush.
//! Each series keeps its newest samples raw (what live charts ask for reads
//! fastest) and seals every [`SEAL`] of them into a compressed chunk (the
//! block chunk format, without zstd, back to back in one buffer per series):
//! 16 bytes a sample raw, about 1–3 sealed, so a five-minute head of a few
//! thousand series stays a few megabytes instead of tens.
//!
//! A point at or before its series' newest time (a backfill, a retry, a
//! second writer, a rewrite) is kept beside the column, in the order it
//! arrived ([`Head::push_late`]); reads and the flush merge the two, the
//! later write winning at an equal time ([`last_wins`]).

use crate::samples::{decode_chunk, encode_chunk_plain_into};

/// Samples a series keeps raw before they are sealed into a chunk.
pub const SEAL: usize = 32;

/// Samples of one head generation, indexed by store series id.
///
/// Invariant: each column's timestamps strictly increase, across its sealed
/// chunks and its raw tail; late points are in `late`, in arrival order.
#[derive(Debug, Default)]
pub struct Head {
    columns: Vec<Column>,
    /// Points that arrived at or before their series' newest time, by
    /// series, in arrival order (each written after every column sample at
    /// its time, so it wins over them).
    late: rustc_hash::FxHashMap<u32, Vec<(i64, f64)>>,
    n_samples: usize,
    min_t: Option<i64>,
    /// Where a chunk is encoded before it is appended to its series'
    /// buffer: no allocation a seal (a head of 100,000 series seals
    /// thousands of chunks a round; growing and shrinking a buffer for each
    /// left the allocator consolidating their scraps).
    scratch: Vec<u8>,
}

/// One series' samples: sealed chunks, oldest first, then the raw tail.
#[derive(Debug, Default)]
pub struct Column {
    /// The sealed chunks back to back, each behind a [`SEALED_HEADER`]-byte
    /// header (first and last timestamp, length): one allocation a series
    /// rather than one a chunk, and no table of them (a boxed chunk and its
    /// table entry cost ~2x its bytes for the slow series most of a head is).
    sealed: Vec<u8>,
    /// The last sealed timestamp (meaningless while `sealed` is empty).
    sealed_last_t: i64,
    ts: Vec<i64>,
    vals: Vec<f64>,
    len: usize,
}

/// First timestamp, last timestamp (i64 LE each), chunk length (u32 LE).
const SEALED_HEADER: usize = 20;

/// The sealed chunks of a column: (first, last timestamp, chunk).
fn sealed_chunks(mut b: &[u8]) -> impl Iterator<Item = (i64, i64, &[u8])> {
    std::iter::from_fn(move || {
        let (h, rest) = b.split_first_chunk::<SEALED_HEADER>()?;
        let first = i64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
        let last = i64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(h[16..].try_into().expect("4 bytes")) as usize;
        let (chunk, rest) = rest.split_at(len);
        b = rest;
        Some((first, last, chunk))
    })
}

impl Column {
    fn last_t(&self) -> Option<i64> {
        self.ts.last().copied().or_else(|| (!self.sealed.is_empty()).then_some(self.sealed_last_t))
    }

    /// Appends the samples in `[from, to]`.
    fn read(&self, from: i64, to: i64, ts: &mut Vec<i64>, vals: &mut Vec<f64>) {
        let (mut st, mut sv) = (Vec::new(), Vec::new());
        for (_, _, chunk) in sealed_chunks(&self.sealed).filter(|&(first, last, _)| last >= from && first <= to) {
            st.clear();
            sv.clear();
            decode_chunk(chunk, &mut st, &mut sv).expect("BUG: a head chunk this process sealed does not decode");
            let lo = st.partition_point(|&x| x < from);
            let hi = st.partition_point(|&x| x <= to).max(lo);
            ts.extend_from_slice(&st[lo..hi]);
            vals.extend_from_slice(&sv[lo..hi]);
        }
        let lo = self.ts.partition_point(|&x| x < from);
        let hi = self.ts.partition_point(|&x| x <= to).max(lo);
        ts.extend_from_slice(&self.ts[lo..hi]);
        vals.extend_from_slice(&self.vals[lo..hi]);
    }
}

impl Head {
    /// Appends if `t` is after the column's last timestamp; returns false
    /// (the caller counts it) otherwise.
    pub fn push(&mut self, id: u32, t: i64, v: f64) -> bool {
        let idx = id as usize;
        if self.columns.len() <= idx {
            self.columns.resize_with(idx + 1, Column::default);
        }
        let col = &mut self.columns[idx];
        if col.last_t().is_some_and(|last| last >= t) {
            return false;
        }
        if col.ts.capacity() == 0 {
            // The tail's whole size at once, not four doublings (each a
            // reallocation) per series and head generation.
            col.ts.reserve_exact(SEAL);
            col.vals.reserve_exact(SEAL);
        }
        col.ts.push(t);
        col.vals.push(v);
        col.len += 1;
        if col.ts.len() >= SEAL {
            self.scratch = encode_chunk_plain_into(&col.ts, &col.vals, std::mem::take(&mut self.scratch));
            let len = u32::try_from(self.scratch.len()).expect("BUG: a chunk of SEAL samples over 4 GiB");
            let need = SEALED_HEADER + self.scratch.len();
            if col.sealed.capacity() - col.sealed.len() < need {
                // A quarter more at a time, not double: a five-minute head
                // ends wherever its series' buffers grew last, and doubling
                // left up to half of each unused.
                col.sealed.reserve_exact(need.max(col.sealed.len() / 4));
            }
            col.sealed.extend_from_slice(&col.ts[0].to_le_bytes());
            col.sealed.extend_from_slice(&t.to_le_bytes());
            col.sealed.extend_from_slice(&len.to_le_bytes());
            col.sealed.extend_from_slice(&self.scratch);
            col.sealed_last_t = t;
            col.ts.clear();
            col.vals.clear();
        }
        self.n_samples += 1;
        self.min_t = Some(self.min_t.map_or(t, |m| m.min(t)));
        true
    }

    /// Keeps a point at or before series `id`'s newest time (the caller
    /// checks): merged with the column on read and flush, winning over an
    /// earlier write at its time.
    pub fn push_late(&mut self, id: u32, t: i64, v: f64) {
        self.late.entry(id).or_default().push((t, v));
        self.n_samples += 1;
    }

    /// Whether series `id` has late points here (its reads merge).
    pub fn has_late(&self, id: u32) -> bool {
        self.late.contains_key(&id)
    }

    /// Samples held, late points included (what bounds the head's memory).
    pub fn n_samples(&self) -> usize {
        self.n_samples
    }

    /// The oldest in-order sample's time: late points do not move it, so a
    /// backfill of last week does not make every append flush.
    pub fn min_t(&self) -> Option<i64> {
        self.min_t
    }

    /// The ids of every series with samples, ascending.
    pub fn ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.len > 0)
            .map(|(i, _)| i as u32)
            .chain(self.late.keys().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Every sample of series `id`, in time order, late points merged.
    pub fn samples(&self, id: u32) -> (Vec<i64>, Vec<f64>) {
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        self.read(id, i64::MIN, i64::MAX, &mut ts, &mut vals);
        (ts, vals)
    }

    /// Appends the series' samples in `[from, to]`, in time order, late
    /// points merged.
    pub fn read(&self, id: u32, from: i64, to: i64, ts: &mut Vec<i64>, vals: &mut Vec<f64>) {
        let start = ts.len();
        if let Some(c) = self.columns.get(id as usize) {
            c.read(from, to, ts, vals);
        }
        if let Some(late) = self.late.get(&id) {
            for &(t, v) in late.iter().filter(|(t, _)| (from..=to).contains(t)) {
                ts.push(t);
                vals.push(v);
            }
            last_wins(ts, vals, start);
        }
    }

    /// A copy (a flush that failed puts its generation back from one).
    pub fn copy(&self) -> Head {
        let mut out = Head::default();
        for (id, c) in self.columns.iter().enumerate() {
            let (mut ts, mut vals) = (Vec::new(), Vec::new());
            c.read(i64::MIN, i64::MAX, &mut ts, &mut vals);
            for (t, v) in ts.into_iter().zip(vals) {
                out.push(id as u32, t, v);
            }
        }
        for (&id, late) in &self.late {
            for &(t, v) in late {
                out.push_late(id, t, v);
            }
        }
        out
    }
}

/// Puts `ts[start..]`/`vals[start..]`, samples in the order they were
/// written, in time order with one sample a time: the last written at it
/// (as InfluxDB keeps the last write of a point). In place.
///
/// What arrives is a few runs that each increase (a block's chunk, the
/// head's column, a backfill's points): a single run is left as it is;
/// runs that do not overlap are put in order by their first times; a few
/// that do are merged run by run, the later run winning at a time; only
/// many runs (points shuffled one by one) are sorted.
pub fn last_wins(ts: &mut Vec<i64>, vals: &mut Vec<f64>, start: usize) {
    /// More runs than this are sorted, not merged.
    const RUNS_MAX: usize = 64;
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    let mut from = start;
    for i in start + 1..=ts.len() {
        if i == ts.len() || ts[i] <= ts[i - 1] {
            runs.push(from..i);
            from = i;
            if runs.len() > RUNS_MAX {
                break;
            }
        }
    }
    if runs.len() <= 1 {
        return;
    }
    let mut merged: Vec<(i64, f64)> = Vec::with_capacity(ts.len() - start);
    if runs.len() <= RUNS_MAX {
        // By first time; ties (and overlaps) need the merge below.
        let mut by_first: Vec<(usize, &std::ops::Range<usize>)> = runs.iter().enumerate().collect();
        by_first.sort_by_key(|(_, r)| ts[r.start]);
        if by_first.windows(2).all(|w| ts[w[0].1.end - 1] < ts[w[1].1.start]) {
            for (_, r) in by_first {
                merged.extend(r.clone().map(|i| (ts[i], vals[i])));
            }
        } else {
            // A k-way merge: the heap's least (time, run), so at a time
            // the later run comes last and wins. The least run gives all it
            // holds before the next run's head at once (runs whose ranges
            // overlap but whose samples do not interleave — a flush of a
            // late stretch and the head's tail — are copied, not popped a
            // sample at a time).
            use std::cmp::Reverse;
            let mut heap: std::collections::BinaryHeap<Reverse<(i64, usize, usize)>> =
                runs.iter().enumerate().map(|(k, r)| Reverse((ts[r.start], k, r.start))).collect();
            while let Some(Reverse((t, k, i))) = heap.pop() {
                let end = runs[k].end;
                let upto = match heap.peek() {
                    None => end,
                    Some(&Reverse((next_t, next_k, _))) => {
                        i + 1 + ts[i + 1..end].partition_point(|&x| x < next_t || (x == next_t && k < next_k))
                    }
                };
                match merged.last_mut() {
                    Some(last) if last.0 == t => last.1 = vals[i],
                    _ => merged.push((t, vals[i])),
                }
                merged.extend((i + 1..upto).map(|j| (ts[j], vals[j])));
                if upto < end {
                    heap.push(Reverse((ts[upto], k, upto)));
                }
            }
        }
    } else {
        let mut order: Vec<usize> = (start..ts.len()).collect();
        // Stable: among equal times, write order stays, and the last is kept.
        order.sort_by_key(|&i| ts[i]);
        for i in order {
            match merged.last_mut() {
                Some(last) if last.0 == ts[i] => last.1 = vals[i],
                _ => merged.push((ts[i], vals[i])),
            }
        }
    }
    ts.truncate(start);
    vals.truncate(start);
    for (t, v) in merged {
        ts.push(t);
        vals.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is pushed reads back, whole or by range, across sealed
        /// chunks and the raw tail, bit for bit; out-of-order pushes are refused.
        #[test]
        fn a_head_reads_back_what_it_took(
            steps in proptest::collection::vec((1i64..5_000, any::<u64>()), 0..700),
            from in 0i64..2_000_000,
            span in 0i64..2_000_000,
        ) {
            let mut h = Head::default();
            let (mut ts, mut vals) = (Vec::new(), Vec::new());
            let mut t = 0;
            for (i, &(dt, bits)) in steps.iter().enumerate() {
                t += dt;
                // Counters, gauges and arbitrary floats (NaN payloads too).
                let v = match i % 3 { 0 => i as f64, 1 => (bits % 1000) as f64 / 10.0, _ => f64::from_bits(bits) };
                prop_assert!(h.push(7, t, v));
                prop_assert!(!h.push(7, t, 0.0));
                ts.push(t);
                vals.push(v);
            }
            prop_assert_eq!(h.n_samples(), ts.len());
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            if let Some(&id) = h.ids().first() {
                prop_assert_eq!(id, 7);
                let (all_t, all_v) = h.samples(id);
                prop_assert_eq!(&all_t, &ts);
                prop_assert_eq!(bits(&all_v), bits(&vals));
            }
            let to = from + span;
            let (mut rt, mut rv) = (Vec::new(), Vec::new());
            h.read(7, from, to, &mut rt, &mut rv);
            let want: Vec<usize> = (0..ts.len()).filter(|&i| ts[i] >= from && ts[i] <= to).collect();
            prop_assert_eq!(rt, want.iter().map(|&i| ts[i]).collect::<Vec<_>>());
            prop_assert_eq!(bits(&rv), want.iter().map(|&i| vals[i].to_bits()).collect::<Vec<_>>());
        }
    }

    proptest! {
        /// Points in any order, rewrites among them, read back as a map
        /// keeps them: one sample a time, the last written.
        #[test]
        fn late_points_merge_the_last_write_winning(
            writes in proptest::collection::vec((0i64..200, 0u8..4), 0..400),
            from in 0i64..200,
            span in 0i64..200,
        ) {
            let mut h = Head::default();
            let mut model = std::collections::BTreeMap::new();
            let mut newest = i64::MIN;
            for (i, &(t, v)) in writes.iter().enumerate() {
                let v = f64::from(v) + i as f64 / 1000.0;
                if t > newest {
                    prop_assert!(h.push(3, t, v));
                    newest = t;
                } else {
                    h.push_late(3, t, v);
                }
                model.insert(t, v);
            }
            prop_assert_eq!(h.n_samples(), writes.len());
            let (ts, vals) = h.samples(3);
            prop_assert_eq!(ts.iter().copied().zip(vals).collect::<Vec<_>>(), model.iter().map(|(&t, &v)| (t, v)).collect::<Vec<_>>());
            let (mut ts, mut vals) = (vec![-1], vec![-1.0]);
            h.read(3, from, from + span, &mut ts, &mut vals);
            let want: Vec<(i64, f64)> = model.range(from..=from + span).map(|(&t, &v)| (t, v)).collect();
            prop_assert_eq!((ts[0], vals[0]), (-1, -1.0), "what was there before is left");
            prop_assert_eq!(ts[1..].iter().copied().zip(vals[1..].iter().copied()).collect::<Vec<_>>(), want);
            prop_assert_eq!(h.copy().samples(3), h.samples(3));
        }
    }

    proptest! {
        /// Runs of any shape (increasing, disjoint, overlapping, many
        /// single points) merge as a map written in order keeps them.
        #[test]
        fn last_wins_is_a_map_written_in_order(
            runs in proptest::collection::vec((0i64..500, 1i64..4, 0usize..40), 0..100),
        ) {
            let (mut ts, mut vals) = (vec![7], vec![7.0]);
            let mut model = std::collections::BTreeMap::new();
            for (k, &(first, step, n)) in runs.iter().enumerate() {
                for j in 0..n as i64 {
                    let (t, v) = (first + j * step, (k * 1000) as f64 + j as f64);
                    ts.push(t);
                    vals.push(v);
                    model.insert(t, v);
                }
            }
            last_wins(&mut ts, &mut vals, 1);
            prop_assert_eq!((ts[0], vals[0]), (7, 7.0));
            let got: Vec<(i64, f64)> = ts[1..].iter().copied().zip(vals[1..].iter().copied()).collect();
            prop_assert_eq!(got, model.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_full_head_is_mostly_sealed() {
        let mut h = Head::default();
        for i in 0..(3 * SEAL as i64 + 5) {
            assert!(h.push(0, 1_000 + i * 100, (i * 3) as f64));
        }
        let c = &h.columns[0];
        assert_eq!((sealed_chunks(&c.sealed).count(), c.ts.len(), c.len), (3, 5, 3 * SEAL + 5));
        // A steady counter on a regular grid: a few bits a sample, sealed.
        let sealed: usize = sealed_chunks(&c.sealed).map(|(_, _, chunk)| chunk.len()).sum();
        assert!(sealed < 3 * SEAL, "{sealed} bytes for {} samples", 3 * SEAL);
    }
}
