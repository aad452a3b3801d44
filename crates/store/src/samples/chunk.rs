//! One series' samples, compressed: Gorilla (Pelkonen et al., VLDB 2015)
//! delta-of-delta timestamps, and values either as delta-of-delta of exact
//! decimals or Gorilla XOR floats, whichever the chunk's values allow.
//!
//! Why decimals: host counters are integers or exact decimals (`/proc/stat`
//! ticks / 100, ms / 1000). XOR of a steadily growing counter costs 20–40 bits
//! per sample; the delta-of-delta of its scaled integer is usually 0–9 bits.
//! Timestamps are interval boundaries, so their delta-of-delta is 0: one bit.
//!
//! ```text
//! chunk   = varint n | u8 codec | u8 scale | [varint g] | i64 t0 (LE) | [varint step] | stream
//!           (g only for the decimal codec; step only when codec has 0x80:
//!           t_i = t0 + i * step, and the bit stream has no timestamps)
//! stream  = bits, or with codec flag 0x40: varint len | zstd frame of bits
//! bits    = per sample i >= 1: [dod(t_i)] ; value_i     (sample 0's value
//!           leads the bit stream: 64 raw bits)
//! dod(x)  = '0' (x = 0) | '10' 7b | '110' 9b | '1110' 12b | '11110' 32b | '11111' 64b
//!           (two's complement in that many bits)
//! decimal = dod of q_i = (m_i - m_0) / g, m_i = round(v_i * 10^scale),
//!           g = gcd of all m_i - m_0 (memory in 4 KiB pages: g = 4096)
//! xor     = '0' (same) | '10' meaningful bits in the previous window
//!         | '11' 6b leading zeros, 6b (length - 1), bits
//! ```
//! See `docs/format/chunk.md`.

use super::bits::{BitReader, BitWriter};
use codec::decimal::{POW10, SCALE_MAX, decimal_scale, round};
use codec::varint::{Reader, put_u64};

const CODEC_XOR: u8 = 0;
const CODEC_DECIMAL: u8 = 1;
/// Flag in the codec byte: timestamps are `t0 + i * step` (a varint after
/// t0), so the bit stream carries values only. Samples stamped with their
/// interval boundary make nearly every chunk regular: 0 bits per timestamp.
const FLAG_REGULAR: u8 = 0x80;
/// Flag in the codec byte: the bit stream is zstd-compressed (as a varint
/// length then the frame). Set only when it saves bytes: runs of identical
/// deltas (constant gauges, steady counters) are long runs of equal bits,
/// which zstd shrinks 2-4x more.
const FLAG_ZSTD: u8 = 0x40;
const ZSTD_LEVEL: i32 = 3;
/// Bodies shorter than this are not offered to zstd: on a few dozen bytes
/// of an already packed bit stream it saves little past its ~12-byte frame
/// (`lab store`'s tiers: 0.382 → 0.395 B a sample without it), and
/// building its tables per chunk was a third of flushing a head of 100,000
/// short series (151 → 107 ns a sample).
const ZSTD_MIN_BODY: usize = 128;
/// A sample takes at most 69 bits of delta-of-delta and 78 of XOR value.
const BITS_PER_SAMPLE_MAX: usize = 147;
/// Samples per chunk accepted from disk; more means corruption.
pub const CHUNK_SAMPLES_MAX: usize = 1 << 24;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkError {
    #[error("chunk truncated")]
    Truncated,
    #[error("chunk header invalid: {0}")]
    Header(&'static str),
}

/// Encodes samples; `ts` strictly increasing, same length as `vals`.
pub fn encode_chunk(ts: &[i64], vals: &[f64]) -> Vec<u8> {
    encode(ts, vals, true, Vec::with_capacity(16 + ts.len()))
}

/// [`encode_chunk`] without trying zstd on the bit stream, into `buf`
/// (emptied first), returned: for chunks kept briefly in memory (the
/// head's), where the CPU matters more than the last bytes; a caller
/// sealing many chunks grows one buffer once instead of one per chunk.
pub fn encode_chunk_plain_into(ts: &[i64], vals: &[f64], mut buf: Vec<u8>) -> Vec<u8> {
    buf.clear();
    encode(ts, vals, false, buf)
}

fn encode(ts: &[i64], vals: &[f64], zstd: bool, mut out: Vec<u8>) -> Vec<u8> {
    assert_eq!(ts.len(), vals.len(), "BUG: columns differ in length");
    assert!(ts.windows(2).all(|w| w[0] < w[1]), "BUG: chunk timestamps must strictly increase");
    put_u64(&mut out, ts.len() as u64);
    let scale = decimal_scale(vals);
    // Regular: two or more samples, evenly spaced.
    let step_of = |w: &[i64]| w[1].checked_sub(w[0]);
    let regular = ts.len() >= 2 && {
        let d = step_of(&ts[..2]);
        d.is_some() && ts.windows(2).all(|w| step_of(w) == d)
    };
    let flag = if regular { FLAG_REGULAR } else { 0 };
    let codec_at = out.len();
    out.push(flag | if scale.is_some() { CODEC_DECIMAL } else { CODEC_XOR });
    out.push(scale.unwrap_or(0));
    let step = scale.map(|k| decimal_step(vals, POW10[k as usize]));
    if let Some(g) = step {
        put_u64(&mut out, g);
    }
    let Some(&t0) = ts.first() else { return out };
    out.extend_from_slice(&t0.to_le_bytes());
    if regular {
        put_u64(&mut out, (ts[1] - ts[0]) as u64);
    }
    let header = out.len();
    let mut w = BitWriter::new(out);
    let mut values = ValueEncoder::new(scale.zip(step), vals[0], &mut w);
    let mut prev_t = t0;
    let mut prev_dt: i64 = 0;
    for i in 1..ts.len() {
        if !regular {
            let dt = ts[i].wrapping_sub(prev_t);
            put_dod(&mut w, dt.wrapping_sub(prev_dt));
            prev_dt = dt;
            prev_t = ts[i];
        }
        values.push(vals[i], &mut w);
    }
    let mut out = w.finish();
    if !zstd || out.len() - header < ZSTD_MIN_BODY {
        return out;
    }
    let packed = codec::zctx::compress(&out[header..], ZSTD_LEVEL);
    if let Some(z) = packed {
        let mut lenbuf = Vec::new();
        put_u64(&mut lenbuf, z.len() as u64);
        if lenbuf.len() + z.len() + 8 < out.len() - header {
            out.truncate(header);
            out.extend_from_slice(&lenbuf);
            out.extend_from_slice(&z);
            out[codec_at] |= FLAG_ZSTD;
        }
    }
    out
}

/// Decodes a chunk, appending to `ts` and `vals`.
pub fn decode_chunk(data: &[u8], ts: &mut Vec<i64>, vals: &mut Vec<f64>) -> Result<Grid, ChunkError> {
    decode(data, Some(ts), vals, true).map(|(grid, _)| grid)
}

/// A chunk's timestamps when they are a regular grid: `n` samples from `t0`
/// every `step` ns (`step` 0: irregular, timestamps in the bit stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub n: usize,
    pub t0: i64,
    pub step: i64,
}

/// Decodes a chunk's values only, appending them to `vals`; its timestamps
/// are checked but not kept. Returns their grid, so chunks known to share
/// timestamps (a tier entry's four columns) decode them once, and the
/// divisor of the values: 1 when `divide`; otherwise a decimal chunk's
/// values are left as its integers and the divisor is `10^k`.
pub fn decode_values(data: &[u8], vals: &mut Vec<f64>, divide: bool) -> Result<(Grid, f64), ChunkError> {
    decode(data, None, vals, divide)
}

/// Decodes a chunk, its timestamps into `ts` when given; returns its grid
/// and the divisor its values are to be divided by: 1 when `divide`, or for
/// an XOR chunk. Not `divide`: a decimal chunk's values are left as its
/// integers `m` (`v × 10^k` as floats, exact below 2^53) and the divisor is
/// `10^k`. Dividing is monotone, so a minimum or a maximum of many values
/// can be taken first and divided once: a division a bucket where there was
/// one a value.
pub(crate) fn decode(
    data: &[u8],
    mut ts: Option<&mut Vec<i64>>,
    vals: &mut Vec<f64>,
    divide: bool,
) -> Result<(Grid, f64), ChunkError> {
    let mut r = Reader::new(data);
    let n = usize::try_from(r.u64().ok_or(ChunkError::Truncated)?).map_err(|_| ChunkError::Header("count"))?;
    if n > CHUNK_SAMPLES_MAX {
        return Err(ChunkError::Header("sample count too large"));
    }
    let [codec, scale] = r.fixed::<2>().ok_or(ChunkError::Truncated)?;
    let regular = codec & FLAG_REGULAR != 0;
    let zstd = codec & FLAG_ZSTD != 0;
    let decimal = match codec & !(FLAG_REGULAR | FLAG_ZSTD) {
        CODEC_DECIMAL if scale <= SCALE_MAX => {
            let g = r.u64().ok_or(ChunkError::Truncated)?;
            // Values are below 2^53 in magnitude, so steps are below 2^54.
            if g == 0 || g >= 1 << 54 {
                return Err(ChunkError::Header("decimal step out of range"));
            }
            Some((scale, g))
        }
        CODEC_XOR if scale == 0 => None,
        _ => return Err(ChunkError::Header("unknown value codec")),
    };
    let divisor = match decimal {
        Some((k, _)) if !divide => POW10[k as usize],
        _ => 1.0,
    };
    if n == 0 {
        return Ok((Grid { n: 0, t0: 0, step: 0 }, divisor));
    }
    let t0 = i64::from_le_bytes(r.fixed::<8>().ok_or(ChunkError::Truncated)?);
    let step = if regular {
        let d = r.u64().ok_or(ChunkError::Truncated)?;
        // Strictly increasing, and the last timestamp must not overflow
        // (t0 may be negative: the span alone may exceed i64).
        let last = i64::try_from(d).ok().filter(|&d| d > 0).map(|d| i128::from(t0) + i128::from(d) * (n as i128 - 1));
        if n < 2 || last.is_none_or(|l| l > i128::from(i64::MAX)) {
            return Err(ChunkError::Header("regular step out of range"));
        }
        d as i64
    } else {
        0
    };
    let unpacked;
    let stream = if zstd {
        let len = usize::try_from(r.u64().ok_or(ChunkError::Truncated)?).map_err(|_| ChunkError::Truncated)?;
        let frame = r.bytes(len).ok_or(ChunkError::Truncated)?;
        if r.remaining() != 0 {
            return Err(ChunkError::Header("bytes after the compressed stream"));
        }
        let bound = (n * BITS_PER_SAMPLE_MAX).div_ceil(8) + 16;
        unpacked = codec::zctx::decompress(frame, bound).ok_or(ChunkError::Header("zstd stream does not decode"))?;
        &unpacked[..]
    } else {
        &data[r.pos..]
    };
    let mut bits = BitReader::new(stream);
    vals.reserve(n);
    let mut values = ValueDecoder::new(decimal, divide, &mut bits).ok_or(ChunkError::Truncated)?;
    vals.push(values.current());
    if regular {
        if let Some(ts) = ts {
            ts.reserve(n);
            ts.extend((0..n as i64).map(|i| t0.wrapping_add(i.wrapping_mul(step))));
        }
        values.decode_rest(&mut bits, n - 1, vals).ok_or(ChunkError::Truncated)?;
        return Ok((Grid { n, t0, step }, divisor));
    }
    if let Some(ts) = ts.as_mut() {
        ts.reserve(n);
        ts.push(t0);
    }
    let mut prev_t = t0;
    let mut prev_dt: i64 = 0;
    for _ in 1..n {
        let dod = get_dod(&mut bits).ok_or(ChunkError::Truncated)?;
        prev_dt = prev_dt.wrapping_add(dod);
        prev_t = prev_t.wrapping_add(prev_dt);
        if let Some(ts) = ts.as_mut() {
            ts.push(prev_t);
        }
        vals.push(values.next(&mut bits).ok_or(ChunkError::Truncated)?);
    }
    Ok((Grid { n, t0, step: 0 }, divisor))
}

/// The largest g dividing every `round(v * p) - round(v0 * p)`; 1 if all are equal.
fn decimal_step(vals: &[f64], p: f64) -> u64 {
    let Some(&v0) = vals.first() else { return 1 };
    let m0 = round(v0 * p) as i64;
    let mut g: u64 = 0;
    for &v in &vals[1..] {
        g = gcd(g, (round(v * p) as i64).abs_diff(m0));
        if g == 1 {
            break;
        }
    }
    g.max(1)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn put_dod(w: &mut BitWriter, x: i64) {
    const BUCKETS: [(u64, u32, u32); 4] = [(0b10, 2, 7), (0b110, 3, 9), (0b1110, 4, 12), (0b11110, 5, 32)];
    if x == 0 {
        w.bit(false);
        return;
    }
    for (prefix, plen, bits) in BUCKETS {
        let lim = 1i64 << (bits - 1);
        if (-lim..lim).contains(&x) {
            w.write(prefix, plen);
            w.write(x as u64, bits);
            return;
        }
    }
    w.write(0b11111, 5);
    w.write(x as u64, 64);
}

#[inline(always)]
fn get_dod(r: &mut BitReader<'_>) -> Option<i64> {
    // The prefix (up to five 1s, then a 0 unless there are five) and, for the
    // short forms, the payload come out of one 57-bit window.
    let w = r.peek();
    let ones = (!w).leading_zeros().min(5);
    let (prefix, bits) = match ones {
        0 => {
            r.consume(1)?;
            return Some(0);
        }
        1 => (2, 7),
        2 => (3, 9),
        3 => (4, 12),
        4 => (5, 32),
        _ => (5, 64),
    };
    let raw = if prefix + bits <= 56 {
        let raw = (w << prefix) >> (64 - bits);
        r.consume(prefix + bits)?;
        raw
    } else {
        r.consume(prefix)?;
        r.read(bits)?
    };
    // Sign-extend from `bits`.
    let shift = 64 - bits;
    Some(((raw << shift) as i64) >> shift)
}

enum ValueEncoder {
    /// Encodes q = (m - m0) / g.
    Decimal {
        p: f64,
        m0: i64,
        g: i64,
        prev: i64,
        prev_d: i64,
    },
    Xor {
        prev: u64,
        lead: u32,
        trail: u32,
    },
}

impl ValueEncoder {
    fn new(decimal: Option<(u8, u64)>, v0: f64, w: &mut BitWriter) -> ValueEncoder {
        w.write(v0.to_bits(), 64);
        match decimal {
            Some((k, g)) => {
                let p = POW10[k as usize];
                ValueEncoder::Decimal { p, m0: round(v0 * p) as i64, g: g as i64, prev: 0, prev_d: 0 }
            }
            None => ValueEncoder::Xor { prev: v0.to_bits(), lead: u32::MAX, trail: 0 },
        }
    }

    fn push(&mut self, v: f64, w: &mut BitWriter) {
        match self {
            ValueEncoder::Decimal { p, m0, g, prev, prev_d } => {
                let diff = (round(v * *p) as i64).wrapping_sub(*m0);
                debug_assert_eq!(diff % *g, 0, "BUG: step does not divide a value");
                let m = diff / *g;
                let d = m.wrapping_sub(*prev);
                put_dod(w, d.wrapping_sub(*prev_d));
                *prev = m;
                *prev_d = d;
            }
            ValueEncoder::Xor { prev, lead, trail } => {
                let x = v.to_bits() ^ *prev;
                *prev = v.to_bits();
                if x == 0 {
                    w.bit(false);
                    return;
                }
                let l = x.leading_zeros().min(63);
                let t = x.trailing_zeros();
                if *lead != u32::MAX && l >= *lead && t >= *trail {
                    w.write(0b10, 2);
                    let len = 64 - *lead - *trail;
                    w.write(x >> *trail, len);
                } else {
                    w.write(0b11, 2);
                    let len = 64 - l - t;
                    w.write(u64::from(l), 6);
                    w.write(u64::from(len - 1), 6);
                    w.write(x >> t, len);
                    *lead = l;
                    *trail = t;
                }
            }
        }
    }
}

enum ValueDecoder {
    Decimal { p: f64, m0: i64, g: i64, prev: i64, prev_d: i64, cur: f64 },
    Xor { prev: u64, lead: u32, trail: u32 },
}

impl ValueDecoder {
    /// `divide` false: a decimal chunk's values come out as its integers
    /// (see [`decode`]).
    fn new(decimal: Option<(u8, u64)>, divide: bool, r: &mut BitReader<'_>) -> Option<ValueDecoder> {
        let v0 = f64::from_bits(r.read(64)?);
        Some(match decimal {
            Some((k, g)) => {
                let p = POW10[k as usize];
                // Saturating: a corrupt v0 (NaN, huge) must not panic the cast.
                let m0 = round(v0 * p) as i64;
                let (p, cur) = if divide { (p, v0) } else { (1.0, m0 as f64) };
                ValueDecoder::Decimal { p, m0, g: g as i64, prev: 0, prev_d: 0, cur }
            }
            None => ValueDecoder::Xor { prev: v0.to_bits(), lead: u32::MAX, trail: 0 },
        })
    }

    /// Decodes `n` more values into `out` (a regular chunk: values only in
    /// the stream). Decimal values are taken from one 57-bit window at a
    /// time, as many whole symbols as it holds (six of the common 9-bit
    /// form), and runs of zero deltas-of-delta (a counter at a steady rate,
    /// a constant gauge) all at once: one load per window, not per value.
    fn decode_rest(&mut self, r: &mut BitReader<'_>, n: usize, out: &mut Vec<f64>) -> Option<()> {
        match self {
            // Integers (scale 0, or left undivided): no division a value.
            ValueDecoder::Decimal { p, .. } if *p == 1.0 => self.decode_decimals::<false>(r, n, out),
            ValueDecoder::Decimal { .. } => self.decode_decimals::<true>(r, n, out),
            ValueDecoder::Xor { .. } => {
                for _ in 0..n {
                    out.push(self.next(r)?);
                }
                Some(())
            }
        }
    }

    /// [`ValueDecoder::decode_rest`] of a decimal chunk; `DIVIDE` false when
    /// its divisor is 1.
    #[inline(always)]
    fn decode_decimals<const DIVIDE: bool>(
        &mut self,
        r: &mut BitReader<'_>,
        n: usize,
        out: &mut Vec<f64>,
    ) -> Option<()> {
        let ValueDecoder::Decimal { p, m0, g, prev, prev_d, cur } = self else {
            unreachable!("BUG: decode_decimals on an XOR chunk");
        };
        // Written into place, the state in locals: no push that could
        // reallocate (and so spill every register) per value.
        let base = out.len();
        out.resize(base + n, 0.0);
        let dst = &mut out[base..];
        let (p, m0, g) = (*p, *m0, *g);
        let value = |m: i64| {
            let m = m0.wrapping_add(m.wrapping_mul(g)) as f64;
            if DIVIDE { m / p } else { m }
        };
        let (mut m, mut d) = (*prev, *prev_d);
        let mut i = 0;
        while i < n {
            let w = r.peek();
            let valid = r.remaining().min(57) as u32;
            let mut used = 0;
            while i < n && used < valid {
                let x = w << used;
                let room = valid - used;
                if x >> 63 == 0 {
                    // A run of zeros: the delta stays.
                    let zeros = (x.leading_zeros().min(room) as usize).min(n - i);
                    if d == 0 {
                        // A constant (a tier's count, a gauge at rest): one value.
                        dst[i..i + zeros].fill(value(m));
                    } else {
                        for v in &mut dst[i..i + zeros] {
                            m = m.wrapping_add(d);
                            *v = value(m);
                        }
                    }
                    used += zeros as u32;
                    i += zeros;
                    continue;
                }
                // The prefix's ones (1-4) pick the form: the symbol's length
                // and payload bits from a byte of a constant, not a table in
                // memory (the load would sit on the chain from one symbol to
                // the next).
                let ones = (!x).leading_zeros();
                if ones > 4 {
                    break; // 64 bits: longer than any window
                }
                let shift = (ones - 1) * 8;
                let len = ((0x25_10_0c_09_u64 >> shift) & 0xff) as u32;
                let bits = ((0x20_0c_09_07_u64 >> shift) & 0xff) as u32;
                if len > room {
                    break;
                }
                let dod = (((x << (len - bits)) >> (64 - bits)) << (64 - bits)) as i64 >> (64 - bits);
                d = d.wrapping_add(dod);
                m = m.wrapping_add(d);
                dst[i] = value(m);
                used += len;
                i += 1;
            }
            if used > 0 {
                if r.consume(used).is_none() {
                    out.truncate(base + i);
                    return None;
                }
                continue;
            }
            // A symbol past the window (a 64-bit delta) or past the end.
            let Some(dod) = get_dod(r) else {
                out.truncate(base + i);
                return None;
            };
            d = d.wrapping_add(dod);
            m = m.wrapping_add(d);
            dst[i] = value(m);
            i += 1;
        }
        (*prev, *prev_d) = (m, d);
        if n > 0 {
            *cur = dst[n - 1];
        }
        Some(())
    }

    fn current(&self) -> f64 {
        match self {
            ValueDecoder::Decimal { cur, .. } => *cur,
            ValueDecoder::Xor { prev, .. } => f64::from_bits(*prev),
        }
    }

    #[inline]
    fn next(&mut self, r: &mut BitReader<'_>) -> Option<f64> {
        match self {
            ValueDecoder::Decimal { p, m0, g, prev, prev_d, cur } => {
                let dod = get_dod(r)?;
                *prev_d = prev_d.wrapping_add(dod);
                *prev = prev.wrapping_add(*prev_d);
                *cur = m0.wrapping_add(prev.wrapping_mul(*g)) as f64 / *p;
            }
            ValueDecoder::Xor { prev, lead, trail } => {
                // The control bits (and a new window's 12 bits) from one peek.
                let w = r.peek();
                if w >> 63 == 0 {
                    r.consume(1)?;
                } else {
                    if (w >> 62) & 1 == 1 {
                        *lead = ((w >> 56) & 0x3f) as u32;
                        let len = ((w >> 50) & 0x3f) as u32 + 1;
                        if *lead + len > 64 {
                            return None;
                        }
                        *trail = 64 - *lead - len;
                        r.consume(14)?;
                    } else if *lead == u32::MAX {
                        return None; // a window reference before any window
                    } else {
                        r.consume(2)?;
                    }
                    let len = 64 - *lead - *trail;
                    *prev ^= r.read(len)? << *trail;
                }
            }
        }
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codec::decimal::EXACT_INT_MAX;
    use proptest::prelude::*;

    fn round_trip(ts: &[i64], vals: &[f64]) -> usize {
        let enc = encode_chunk(ts, vals);
        let (mut t2, mut v2) = (Vec::new(), Vec::new());
        decode_chunk(&enc, &mut t2, &mut v2).unwrap();
        assert_eq!(t2, ts);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&v2), bits(vals));
        enc.len()
    }

    #[test]
    fn regular_counter_costs_about_two_bits_per_sample() {
        let n = 3000;
        let ts: Vec<i64> = (0..n).map(|i| 1_700_000_000_000_000_000 + i * 100_000_000).collect();
        // CPU seconds in ticks/100, growing 3..5 ticks per interval.
        let vals: Vec<f64> = (0..n).map(|i| (123_456 + i * 4 + (i % 3)) as f64 / 100.0).collect();
        let bytes = round_trip(&ts, &vals);
        assert!(bytes * 8 < n as usize * 8, "{bytes} bytes for {n} samples");
    }

    #[test]
    fn regular_timestamps_cost_nothing() {
        let n = 4000;
        let ts: Vec<i64> = (0..n).map(|i| 1_700_000_000_000_000_000 + i * 100_000_000).collect();
        let bytes = round_trip(&ts, &vec![42.0; n as usize]);
        // One bit per value (its delta-of-delta is 0), none per timestamp.
        assert!(bytes <= n as usize / 8 + 32, "{bytes} bytes for {n} samples");
        // One gap makes the chunk irregular, and it still round-trips.
        let mut gap = ts.clone();
        gap.remove(7);
        round_trip(&gap, &vec![42.0; gap.len()]);
        round_trip(&[i64::MIN, 0], &[1.0, 2.0]);
        round_trip(&[i64::MAX - 1, i64::MAX], &[1.0, 2.0]);
    }

    #[test]
    fn page_sized_steps_cost_few_bits() {
        let n = 3000;
        let ts: Vec<i64> = (0..n).map(|i| i * 100_000_000).collect();
        // Free memory moving by whole 4 KiB pages, irregularly.
        let vals: Vec<f64> = (0..n).map(|i| (1_000_000 + (i * 7919) % 13 - 6) as f64 * 4096.0).collect();
        let bytes = round_trip(&ts, &vals);
        assert!(bytes * 8 < n as usize * 14, "{} bits/sample", bytes * 8 / n as usize);
    }

    #[test]
    fn edge_values() {
        round_trip(&[], &[]);
        round_trip(&[5], &[f64::NAN]);
        round_trip(&[1, 2, 3, 4], &[0.0, -0.0, f64::INFINITY, f64::MIN_POSITIVE]);
        round_trip(&[i64::MIN, 0, i64::MAX], &[1.0, 2.0, 3.0]);
        round_trip(&[1, 2, 3], &[1e300, -1e300, 0.1]);
        round_trip(&[1, 2, 3], &[9.007e15, -9.007e15, 0.0]);
        // Found by the chunk fuzz target: -0.0 after the first sample.
        round_trip(&[1, 2, 3], &[-0.0, -0.0, -0.0]);
        round_trip(&[1, 2, 3], &[0.0, -0.0, 1.0]);
        // Found by the chunk fuzz target in CI: a step above 2^53.
        round_trip(&[1, 2], &[-9.0e15, 9.0e15]);
        // Found by the chunk fuzz target in CI: a regular grid spanning more
        // than i64 (t0 negative), each step within it.
        let t = [-7134209784043003900, -2513516566360875004, 2107176651321253892];
        round_trip(&t, &[1.0, 2.0, 3.0]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(decode_chunk(&[], &mut vec![], &mut vec![]), Err(ChunkError::Truncated));
        assert_eq!(decode_chunk(&[3, 7, 0], &mut vec![], &mut vec![]), Err(ChunkError::Header("unknown value codec")));
        let enc = encode_chunk(&[1, 2, 30], &[1.5, 2.25, 3.0]);
        for cut in 0..enc.len() {
            assert!(decode_chunk(&enc[..cut], &mut vec![], &mut vec![]).is_err(), "cut {cut}");
        }
    }

    /// The inline rounding is `f64::round`, bit for bit: halves, zeros of
    /// either sign, the edges of 2^52 and 2^53, infinities, NaN.
    #[test]
    fn round_is_f64_round_at_the_edges() {
        let two52 = 4_503_599_627_370_496.0_f64;
        let mut xs = vec![0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994, -0.49999999999999994];
        xs.extend([0.3, -0.3, two52 - 0.5, -(two52 - 0.5), two52 + 1.0, EXACT_INT_MAX - 1.0, EXACT_INT_MAX]);
        xs.extend([-EXACT_INT_MAX, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN_POSITIVE, -f64::MIN_POSITIVE]);
        for x in xs {
            assert_eq!(round(x).to_bits(), x.round().to_bits(), "{x:e}");
        }
        assert!(round(f64::NAN).is_nan());
    }

    proptest! {
        #[test]
        fn round_is_f64_round(bits: u64, small in -1e7f64..1e7) {
            for x in [f64::from_bits(bits), small, small * 100.0 + 0.5] {
                prop_assert!(round(x).to_bits() == x.round().to_bits() || (x.is_nan() && round(x).is_nan()), "{:e}", x);
            }
        }

        #[test]
        fn any_floats_round_trip(start: i64, deltas in proptest::collection::vec(1i64..1_000_000_000_000, 0..300), seed: u64) {
            let mut ts = vec![start];
            for d in deltas {
                let Some(t) = ts.last().unwrap().checked_add(d) else { break };
                ts.push(t);
            }
            let mut x = seed;
            let vals: Vec<f64> = ts.iter().map(|_| { x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); f64::from_bits(x) }).collect();
            round_trip(&ts, &vals);
        }

        #[test]
        fn decimals_round_trip(vals in proptest::collection::vec(-1_000_000_000i64..1_000_000_000, 1..300), scale in 0u32..7) {
            let ts: Vec<i64> = (0..vals.len() as i64).collect();
            let vals: Vec<f64> = vals.iter().map(|&v| v as f64 / 10f64.powi(scale as i32)).collect();
            round_trip(&ts, &vals);
        }

        /// Steady rates with occasional changes: long runs of zero
        /// deltas-of-delta, which the decoder takes a window at a time.
        #[test]
        fn steady_counters_round_trip(runs in proptest::collection::vec((0i64..50, 1usize..200), 1..12), scale in 0u32..4) {
            let mut vals = vec![0f64];
            let mut m = 0i64;
            for (rate, len) in runs {
                for _ in 0..len {
                    m += rate;
                    vals.push(m as f64 / 10f64.powi(scale as i32));
                }
            }
            let ts: Vec<i64> = (0..vals.len() as i64).map(|i| 1_000 + i * 100).collect();
            round_trip(&ts, &vals);
            let enc = encode_chunk(&ts, &vals);
            let mut only = Vec::new();
            let (grid, one) = decode_values(&enc, &mut only, true).unwrap();
            prop_assert_eq!(one, 1.0);
            prop_assert_eq!(grid, Grid { n: ts.len(), t0: 1_000, step: 100 });
            prop_assert_eq!(&only, &vals);
            // Left undivided: integers, which the divisor turns into the
            // same values bit for bit.
            let mut ints = Vec::new();
            let (grid_ints, divisor) = decode_values(&enc, &mut ints, false).unwrap();
            prop_assert_eq!(grid_ints, grid);
            prop_assert!(ints.iter().all(|m| m.fract() == 0.0), "{:?}", ints);
            prop_assert_eq!(ints.iter().map(|m| (m / divisor).to_bits()).collect::<Vec<_>>(), vals.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }

        /// The windowed decoder takes the same symbols as one at a time
        /// would, and fails where it would, on any bit stream.
        #[test]
        fn windows_decode_as_symbols_do(stream in proptest::collection::vec(any::<u8>(), 8..200), n in 0usize..400, g in 1u64..5000, scale in 0u8..4, divide: bool) {
            let mut a = BitReader::new(&stream);
            let mut b = a.clone();
            let mut fast = ValueDecoder::new(Some((scale, g)), divide, &mut a).unwrap();
            let mut slow = ValueDecoder::new(Some((scale, g)), divide, &mut b).unwrap();
            let mut got = Vec::new();
            let ok = fast.decode_rest(&mut a, n, &mut got).is_some();
            let mut want = Vec::new();
            let want_ok = (0..n).try_for_each(|_| { want.push(slow.next(&mut b)?); Some(()) }).is_some();
            prop_assert_eq!(ok, want_ok);
            if ok {
                prop_assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                prop_assert_eq!(a.remaining(), b.remaining());
                prop_assert_eq!(fast.current().to_bits(), slow.current().to_bits());
            }
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_chunk(&data, &mut vec![], &mut vec![]);
        }
    }
}
