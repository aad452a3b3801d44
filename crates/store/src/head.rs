//! The in-memory head: the samples per series since the last block flush.
//! Each series keeps its newest samples raw (what live charts ask for reads
//! fastest) and seals every [`SEAL`] of them into a compressed chunk (the
//! block chunk format, without zstd, back to back in one buffer per series):
//! 16 bytes a sample raw, about 1–3 sealed, so a five-minute head of a few
//! thousand series stays a few megabytes instead of tens.

use crate::samples::{decode_chunk, encode_chunk_plain_into};

/// Samples a series keeps raw before they are sealed into a chunk.
pub const SEAL: usize = 32;

/// Samples of one head generation, indexed by store series id.
///
/// Invariant: each column's timestamps strictly increase, across its sealed
/// chunks and its raw tail.
#[derive(Debug, Default)]
pub struct Head {
    columns: Vec<Column>,
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

    /// Every sample, in time order.
    pub fn samples(&self) -> (Vec<i64>, Vec<f64>) {
        let (mut ts, mut vals) = (Vec::with_capacity(self.len), Vec::with_capacity(self.len));
        self.read(i64::MIN, i64::MAX, &mut ts, &mut vals);
        (ts, vals)
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

    pub fn n_samples(&self) -> usize {
        self.n_samples
    }

    pub fn min_t(&self) -> Option<i64> {
        self.min_t
    }

    /// (series id, column) for every non-empty column.
    pub fn columns(&self) -> impl Iterator<Item = (u32, &Column)> {
        self.columns.iter().enumerate().filter(|(_, c)| c.len > 0).map(|(i, c)| (i as u32, c))
    }

    /// Appends the column's samples in `[from, to]`.
    pub fn read(&self, id: u32, from: i64, to: i64, ts: &mut Vec<i64>, vals: &mut Vec<f64>) {
        if let Some(c) = self.columns.get(id as usize) {
            c.read(from, to, ts, vals);
        }
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
            if let Some((id, c)) = h.columns().next() {
                prop_assert_eq!(id, 7);
                let (all_t, all_v) = c.samples();
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

    #[test]
    fn a_full_head_is_mostly_sealed() {
        let mut h = Head::default();
        for i in 0..(3 * SEAL as i64 + 5) {
            assert!(h.push(0, 1_000 + i * 100, (i * 3) as f64));
        }
        let (_, c) = h.columns().next().unwrap();
        assert_eq!((sealed_chunks(&c.sealed).count(), c.ts.len(), c.len), (3, 5, 3 * SEAL + 5));
        // A steady counter on a regular grid: a few bits a sample, sealed.
        let sealed: usize = sealed_chunks(&c.sealed).map(|(_, _, chunk)| chunk.len()).sum();
        assert!(sealed < 3 * SEAL, "{sealed} bytes for {} samples", 3 * SEAL);
    }
}
