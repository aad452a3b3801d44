//! Column codecs: each column of a batch is written as a codec byte and its
//! values — raw or zstd, narrowed to the bytes its largest value needs, as
//! distances from a base, or as a dictionary and an index — and read back
//! with every length checked against what the header allows.

use super::{BatchError, Encoding};
use crate::varint::{Reader, put_u64, unzigzag, zigzag};

pub(super) const CODEC_RAW: u8 = 0;
pub(super) const CODEC_ZSTD: u8 = 1;
pub(super) const CODEC_PCO: u8 = 2;
/// Raw and zstd of values cut to their `width` low bytes (the width of the
/// column's largest value; signed columns zigzag first): a u8 width follows.
pub(super) const CODEC_RAW_NARROW: u8 = 3;
pub(super) const CODEC_ZSTD_NARROW: u8 = 4;
/// Each value's signed distance from a base (zigzag) in `width` bytes, or
/// where it does not fit an escape (all ones) and the distance as a varint
/// in a tail after the n values; raw or zstd. A u8 width (1..=8) and the base
/// (a varint of the value's bits) follow the codec.
pub(super) const CODEC_OFFSET: u8 = 5;
pub(super) const CODEC_ZSTD_OFFSET: u8 = 6;
/// A dictionary of the column's distinct values, ascending (a nested column
/// of k gaps), and an index into it per value (a nested u32 column).
pub(super) const CODEC_DICT: u8 = 7;

/// A column's number type: fixed-width little-endian; as u64 (zigzag for
/// signed) for narrow columns; as its bits for offsets and
/// dictionaries; and pco-compressible.
pub(super) trait Num: pco::data_types::Number + Copy + Default {
    const WIDTH: usize;
    fn to_u64(self) -> u64;
    /// The inverse of `to_u64` for a `v` of at most `WIDTH` bytes.
    fn from_u64(v: u64) -> Self;
    /// The value's bits: `a.bits().wrapping_sub(b.bits()) as i64` is the
    /// signed distance from `b` to `a` (for any `b`, mod 2^64).
    fn bits(self) -> u64;
    fn from_bits(v: u64) -> Option<Self>;
}

macro_rules! num {
    ($t:ty) => {
        impl Num for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn to_u64(self) -> u64 {
                self.into()
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn bits(self) -> u64 {
                self.into()
            }
            fn from_bits(v: u64) -> Option<Self> {
                <$t>::try_from(v).ok()
            }
        }
    };
}
num!(u32);
num!(u64);

impl Num for i64 {
    const WIDTH: usize = 8;
    fn to_u64(self) -> u64 {
        zigzag(self)
    }
    fn from_u64(v: u64) -> Self {
        unzigzag(v)
    }
    fn bits(self) -> u64 {
        self as u64
    }
    fn from_bits(v: u64) -> Option<Self> {
        Some(v as i64)
    }
}

/// What a column's values are like, which picks its codec in
/// [`Encoding::Fast`] ([`Encoding::Compact`] tries every codec and keeps the
/// smallest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Runs of one value and small values (pids, tid − pid, chain ids,
    /// depths): narrow bytes, which zstd turns into long matches.
    Runs,
    /// Jitter around a typical value (the time deltas of a periodic timer):
    /// varints of each value's distance from the column's median, mostly 1–2
    /// bytes where narrow bytes need 3 for the outliers' sake.
    Jitter,
    /// Few distinct values, each many times (instruction pointers, frames):
    /// a sorted dictionary and a 1–3 byte index per value, where 8-byte
    /// values would each cost zstd a match.
    Repeats,
}

pub(super) fn put_column<T: Num>(out: &mut Vec<u8>, vals: &[T], enc: Encoding, shape: Shape) {
    match enc {
        Encoding::Fast => match shape {
            Shape::Jitter => put_offset(out, vals, median_bits(vals), 1),
            Shape::Repeats if !vals.is_empty() => put_dict(out, vals, 1),
            _ => put_narrow(out, vals, 1),
        },
        Encoding::Compact => {
            let mut best = Vec::new();
            put_narrow(&mut best, vals, 3);
            let mut keep = |c: Vec<u8>| {
                if c.len() < best.len() {
                    best = c;
                }
            };
            let mut c = Vec::new();
            put_offset(&mut c, vals, median_bits(vals), 3);
            keep(c);
            if !vals.is_empty() {
                let mut c = Vec::new();
                put_dict(&mut c, vals, 3);
                keep(c);
            }
            if let Ok(p) = pco::standalone::simple_compress(vals, &pco::ChunkConfig::default()) {
                let mut c = vec![CODEC_PCO];
                put_u64(&mut c, p.len() as u64);
                c.extend_from_slice(&p);
                keep(c);
            }
            out.extend_from_slice(&best);
        }
    }
}

/// Codec 3 or 4: each value's low `width` bytes (the width of the largest),
/// zstd'd when that is smaller.
pub(super) fn put_narrow<T: Num>(out: &mut Vec<u8>, vals: &[T], level: i32) {
    let width = width_of(vals);
    let mut raw = vec![0u8; vals.len() * width];
    if width == T::WIDTH {
        // The full width is the type's own little-endian form (no zigzag).
        put_fixed(&mut raw, vals.iter().map(|&v| v.bits()), width);
    } else {
        put_fixed(&mut raw, vals.iter().map(|&v| v.to_u64()), width);
    }
    let z = crate::zctx::compress(&raw, level).filter(|z| z.len() < raw.len());
    out.push(if z.is_some() { CODEC_ZSTD_NARROW } else { CODEC_RAW_NARROW });
    out.push(width as u8);
    let bytes = z.as_deref().unwrap_or(&raw);
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes each value's low `width` bytes into `raw` (`width` bytes a value),
/// the width a constant in each arm so that the stores are plain moves.
pub(super) fn put_fixed(raw: &mut [u8], vals: impl Iterator<Item = u64>, width: usize) {
    fn put<const W: usize>(raw: &mut [u8], vals: impl Iterator<Item = u64>) {
        for (c, v) in raw.chunks_exact_mut(W).zip(vals) {
            c.copy_from_slice(&v.to_le_bytes()[..W]);
        }
    }
    match width {
        0 => {}
        1 => put::<1>(raw, vals),
        2 => put::<2>(raw, vals),
        3 => put::<3>(raw, vals),
        4 => put::<4>(raw, vals),
        5 => put::<5>(raw, vals),
        6 => put::<6>(raw, vals),
        7 => put::<7>(raw, vals),
        _ => put::<8>(raw, vals),
    }
}

/// Codec 5 or 6: each value's distance from `base` in a width most of them
/// fit (a branch the CPU predicts, where varints of mixed lengths are not),
/// the rest escaped to a tail of varints.
pub(super) fn put_offset<T: Num>(out: &mut Vec<u8>, vals: &[T], base: u64, level: i32) {
    let dist = |v: T| zigzag(v.bits().wrapping_sub(base) as i64);
    // The width that holds ~98% of a spread sample (and the escape).
    let step = vals.len().div_ceil(257).max(1);
    let mut sample: Vec<u64> = vals.iter().step_by(step).map(|&v| dist(v)).collect();
    sample.sort_unstable();
    let q = sample.get(sample.len() * 98 / 100).copied().unwrap_or(0);
    let width = (64 - q.saturating_add(1).leading_zeros() as usize).div_ceil(8).max(1);
    let escape = u64::MAX >> (64 - 8 * width);
    let mut raw = vec![0u8; vals.len() * width];
    let mut tail = Vec::new();
    let fixed = vals.iter().map(|&v| match dist(v) {
        d if d < escape => d,
        d => {
            put_u64(&mut tail, d);
            escape
        }
    });
    put_fixed(&mut raw, fixed, width);
    raw.extend_from_slice(&tail);
    let z = crate::zctx::compress(&raw, level).filter(|z| z.len() < raw.len());
    out.push(if z.is_some() { CODEC_ZSTD_OFFSET } else { CODEC_OFFSET });
    out.push(width as u8);
    put_u64(out, base);
    let bytes = z.as_deref().unwrap_or(&raw);
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Codec 7: the distinct values ascending, as gaps (varints: small where
/// the values cluster, as code addresses do), and each value's index.
pub(super) fn put_dict<T: Num>(out: &mut Vec<u8>, vals: &[T], level: i32) {
    // Ids in order of first sight (one hash lookup per value), renumbered
    // in order of value once the distinct values are known.
    let mut ids: rustc_hash::FxHashMap<u64, u32> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(vals.len() / 2, Default::default());
    let mut seen: Vec<u64> = Vec::with_capacity(vals.len() / 2);
    let index: Vec<u32> = vals
        .iter()
        .map(|v| {
            *ids.entry(v.bits()).or_insert_with(|| {
                seen.push(v.bits());
                seen.len() as u32 - 1
            })
        })
        .collect();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    let mut rank = vec![0u32; seen.len()];
    for (&v, r) in sorted.iter().zip(0..) {
        rank[ids[&v] as usize] = r;
    }
    let index: Vec<u32> = index.iter().map(|&i| rank[i as usize]).collect();
    let mut prev = 0u64;
    let gaps: Vec<u64> = sorted
        .iter()
        .map(|&v| {
            let gap = v.wrapping_sub(prev);
            prev = v;
            gap
        })
        .collect();
    out.push(CODEC_DICT);
    put_u64(out, seen.len() as u64);
    put_offset(out, &gaps, 0, level);
    put_narrow(out, &index, level);
}

/// The median of up to 257 values spread over the column, their bits taken
/// as signed: a base for varints (any base decodes; this one keeps them short).
pub(super) fn median_bits<T: Num>(vals: &[T]) -> u64 {
    if vals.is_empty() {
        return 0;
    }
    let step = vals.len().div_ceil(257);
    let mut b: Vec<i64> = vals.iter().step_by(step).map(|v| v.bits() as i64).collect();
    let mid = b.len() / 2;
    *b.select_nth_unstable(mid).1 as u64
}

/// Bytes needed for the largest value of a column, 0..=8.
pub(super) fn width_of<T: Num>(vals: &[T]) -> usize {
    let max = vals.iter().fold(0u64, |m, &v| m | v.to_u64());
    (64 - max.leading_zeros() as usize).div_ceil(8)
}

/// What [`get_column`] does with a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// Steps over its bytes: an empty vector.
    Skip,
    /// Checks it would decode; the values where they come cheap (an empty
    /// vector for a dictionary, whose values are not looked up).
    Check,
    /// Its values.
    Values,
}

/// Reads one column of `n` values.
pub(super) fn get_column<T: Num>(r: &mut Reader<'_>, n: usize, read: Read) -> Result<Vec<T>, BatchError> {
    get_col(r, n, read, false)
}

/// [`get_column`]; `nested` inside a dictionary, which cannot nest.
fn get_col<T: Num>(r: &mut Reader<'_>, n: usize, read: Read, nested: bool) -> Result<Vec<T>, BatchError> {
    let decode = read != Read::Skip;
    let bad = BatchError::Malformed;
    let codec = r.fixed::<1>().ok_or(bad("column codec"))?[0];
    if codec == CODEC_DICT {
        if nested {
            return Err(bad("dictionary inside a dictionary"));
        }
        // (A column skipped unread may not know its n.)
        let k = r
            .u64()
            .and_then(|k| usize::try_from(k).ok())
            .filter(|&k| !decode || k <= n)
            .ok_or(bad("dictionary size"))?;
        let inner = if decode { Read::Values } else { Read::Skip };
        let gaps: Vec<u64> = get_col(r, k, inner, true)?;
        let index: Vec<u32> = get_col(r, n, inner, true)?;
        if !decode {
            return Ok(Vec::new());
        }
        let mut at = 0u64;
        let dict: Vec<T> = gaps
            .iter()
            .map(|&g| {
                at = at.wrapping_add(g);
                T::from_bits(at).ok_or(bad("dictionary value out of range"))
            })
            .collect::<Result<_, _>>()?;
        if read == Read::Check {
            return if index.iter().all(|&i| (i as usize) < k) {
                Ok(Vec::new())
            } else {
                Err(bad("dictionary index out of range"))
            };
        }
        return index
            .iter()
            .map(|&i| dict.get(i as usize).copied().ok_or(bad("dictionary index out of range")))
            .collect();
    }
    let (mut width, mut base) = (T::WIDTH, 0);
    match codec {
        CODEC_RAW | CODEC_ZSTD | CODEC_PCO => {}
        CODEC_RAW_NARROW | CODEC_ZSTD_NARROW => {
            width = usize::from(r.fixed::<1>().ok_or(bad("column width"))?[0]);
            if width > T::WIDTH {
                return Err(bad("column width exceeds its type"));
            }
        }
        CODEC_OFFSET | CODEC_ZSTD_OFFSET => {
            width = usize::from(r.fixed::<1>().ok_or(bad("column width"))?[0]);
            if !(1..=8).contains(&width) {
                return Err(bad("offset column width out of range"));
            }
            base = r.u64().ok_or(bad("column base"))?;
        }
        _ => return Err(bad("unknown column codec")),
    }
    let len = usize::try_from(r.u64().ok_or(bad("column length"))?).map_err(|_| bad("column length"))?;
    let bytes = r.bytes(len).ok_or(bad("column shorter than its length"))?;
    if !decode {
        return Ok(Vec::new());
    }
    let from_raw = |raw: &[u8]| -> Result<Vec<T>, BatchError> {
        if raw.len() != n * width {
            return Err(bad("column holds the wrong number of values"));
        }
        Ok(if width == T::WIDTH {
            // The type's own little-endian form (no zigzag).
            get_fixed(raw, n, width, |v| T::from_bits(v).expect("BUG: a value of the type's width"))
        } else {
            get_fixed(raw, n, width, T::from_u64)
        })
    };
    match codec {
        CODEC_RAW | CODEC_RAW_NARROW => from_raw(bytes),
        CODEC_ZSTD | CODEC_ZSTD_NARROW => {
            let raw = crate::zctx::decompress(bytes, n * width).ok_or(bad("zstd column does not decode"))?;
            from_raw(&raw)
        }
        CODEC_OFFSET => from_offsets(bytes, n, width, base),
        CODEC_ZSTD_OFFSET => {
            // n values, and a varint of up to 10 bytes for each escaped.
            let raw = crate::zctx::decompress(bytes, n * (width + 10)).ok_or(bad("zstd column does not decode"))?;
            from_offsets(&raw, n, width, base)
        }
        _ => {
            let mut vals = vec![T::default(); n];
            let progress = pco::standalone::simple_decompress_into(bytes, &mut vals)
                .map_err(|_| bad("pco column does not decode"))?;
            if progress.n_processed != n || !progress.finished {
                return Err(bad("pco column holds the wrong number of values"));
            }
            Ok(vals)
        }
    }
}

/// `n` values of `width` bytes each in `raw` (`n * width` bytes), mapped by
/// `f`; the width a constant in each arm so that the loads are plain moves.
pub(super) fn get_fixed<T>(raw: &[u8], n: usize, width: usize, f: impl Fn(u64) -> T) -> Vec<T> {
    fn get<const W: usize, T>(raw: &[u8], f: impl Fn(u64) -> T) -> Vec<T> {
        raw.chunks_exact(W)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..W].copy_from_slice(c);
                f(u64::from_le_bytes(b))
            })
            .collect()
    }
    match width {
        0 => (0..n).map(|_| f(0)).collect(),
        1 => get::<1, T>(raw, f),
        2 => get::<2, T>(raw, f),
        3 => get::<3, T>(raw, f),
        4 => get::<4, T>(raw, f),
        5 => get::<5, T>(raw, f),
        6 => get::<6, T>(raw, f),
        7 => get::<7, T>(raw, f),
        _ => get::<8, T>(raw, f),
    }
}

/// `n` distances from `base` of `width` bytes each, then exactly one varint
/// for each escaped.
pub(super) fn from_offsets<T: Num>(bytes: &[u8], n: usize, width: usize, base: u64) -> Result<Vec<T>, BatchError> {
    let bad = BatchError::Malformed;
    let fixed = bytes.get(..n * width).ok_or(bad("offset column shorter than its count"))?;
    let mut dist = get_fixed(fixed, n, width, |v| v);
    let escape = u64::MAX >> (64 - 8 * width);
    let mut tail = Reader::new(&bytes[n * width..]);
    if tail.remaining() > 0 || dist.contains(&escape) {
        for d in dist.iter_mut().filter(|d| **d == escape) {
            *d = tail.u64().ok_or(bad("offset column misses an escaped value"))?;
        }
        if tail.remaining() != 0 {
            return Err(bad("offset column has bytes beyond its values"));
        }
    }
    let mut out = Vec::with_capacity(n);
    for d in dist {
        out.push(T::from_bits(base.wrapping_add(unzigzag(d) as u64)).ok_or(bad("offset value out of range"))?);
    }
    Ok(out)
}
