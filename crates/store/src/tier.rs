//! Downsampled tiers: per series, min / max / sum / count of the raw samples
//! in each whole second and each whole minute. Written beside the raw chunks
//! when a block is flushed (never instead of them), so a query over a long
//! range reads one tier point where it would read 10 or 600 raw samples.
//!
//! In a block, each (series, resolution) has one entry holding four chunks
//! (min, max, sum, count, each length-prefixed); its key is the empty name
//! with the single label `__tier__="<index of the raw entry>:<resolution>"`,
//! so it costs a few bytes of index, and is never listed as a series
//! (`docs/format/block.md`).

use model::SeriesKey;

use crate::samples::chunk;
use crate::samples::{ChunkError, Grid, decode_values, encode_chunk};
use codec::varint::{Reader, put_u64};

pub const TIER_LABEL: &str = "__tier__";

pub use source::tier::{AGGS, MINUTE, SECOND, Scale, Tier, TierAgg};

/// The tier resolutions a store can keep, finest first.
pub const RESOLUTIONS: [(i64, &str); 2] = [(SECOND, "1s"), (MINUTE, "1m")];

/// `--tiers`: `1s`, `1m`, `1s,1m` or `none`, as resolutions in ns.
pub fn parse_resolutions(s: &str) -> Result<Vec<i64>, String> {
    if s == "none" {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|t| {
            RESOLUTIONS
                .iter()
                .find(|r| r.1 == t.trim())
                .map(|r| r.0)
                .ok_or_else(|| format!("{t:?} is not a tier: use 1s, 1m, 1s,1m or none"))
        })
        .collect()
}

/// The tiers a store writes (`--tiers`), as [`parse_resolutions`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolutions(pub Vec<i64>);

impl std::str::FromStr for Resolutions {
    type Err = String;
    fn from_str(s: &str) -> Result<Resolutions, String> {
        parse_resolutions(s).map(Resolutions)
    }
}

/// The key of the tier entry of the raw entry at `raw_index`.
pub fn tier_key(raw_index: usize, res_name: &str) -> SeriesKey {
    SeriesKey::new("", [(TIER_LABEL, format!("{raw_index}:{res_name}"))])
}

/// If `key` is a tier entry's: (the raw entry's index, resolution in ns).
pub fn parse_tier_key(key: &SeriesKey) -> Option<(usize, i64)> {
    if !key.name().is_empty() || key.labels().len() != 1 {
        return None;
    }
    let (idx, res) = key.get(TIER_LABEL)?.split_once(':')?;
    let res = RESOLUTIONS.iter().find(|r| r.1 == res)?.0;
    Some((idx.parse().ok()?, res))
}

/// A tier's bytes in a block: its four columns as length-prefixed chunks
/// (docs/format/block.md).
pub trait TierBytes {
    fn encode(&self) -> Vec<u8>;
    fn decode_into(&mut self, data: &[u8], n: usize, from: i64, to: i64) -> Result<(), ChunkError>;
    fn decode_for_folding(&mut self, data: &[u8], n: usize, from: i64, to: i64) -> Result<(), ChunkError>;
}

impl TierBytes for Tier {
    /// The four columns as length-prefixed chunks.
    fn encode(&self) -> Vec<u8> {
        debug_assert_eq!(self.scale, Scale::UNIT, "BUG: encoding a tier left undivided");
        let mut out = Vec::new();
        for agg in AGGS {
            let c = encode_chunk(&self.ts, self.column(agg));
            put_u64(&mut out, c.len() as u64);
            out.extend_from_slice(&c);
        }
        out
    }

    /// [`Tier::decode`] into this tier's buffers (emptied first): a reader
    /// going through many entries allocates once.
    fn decode_into(&mut self, data: &[u8], n: usize, from: i64, to: i64) -> Result<(), ChunkError> {
        decode_scaled(self, data, n, from, to, false)
    }

    /// [`Tier::decode_into`], but decimal `min` and `max` columns are left
    /// as integers, their divisors in [`Tier::scale`]: a query folding
    /// periods into buckets divides once a bucket, not once a period.
    fn decode_for_folding(&mut self, data: &[u8], n: usize, from: i64, to: i64) -> Result<(), ChunkError> {
        decode_scaled(self, data, n, from, to, true)
    }
}

/// Decodes a tier entry of `n` periods, keeping those starting in `[from, to]`.
pub fn decode(data: &[u8], n: usize, from: i64, to: i64) -> Result<Tier, ChunkError> {
    let mut t = Tier::default();
    t.decode_into(data, n, from, to)?;
    Ok(t)
}

fn decode_scaled(t: &mut Tier, data: &[u8], n: usize, from: i64, to: i64, fold: bool) -> Result<(), ChunkError> {
    t.scale = Scale::UNIT;
    t.ts.clear();
    for agg in AGGS {
        t.column_mut(agg).clear();
    }
    let mut r = Reader::new(data);
    // The four columns share their timestamps: decoded from the first,
    // and where that is a regular grid, only checked against it in the others.
    let mut grid: Option<Grid> = None;
    let mut other_ts = Vec::new();
    for agg in AGGS {
        let len = usize::try_from(r.u64().ok_or(ChunkError::Truncated)?).map_err(|_| ChunkError::Truncated)?;
        let chunk = r.bytes(len).ok_or(ChunkError::Truncated)?;
        let divide = !(fold && matches!(agg, TierAgg::Min | TierAgg::Max));
        let (ts, column) = t.parts_mut(agg);
        let divisor = match grid {
            Some(g) if g.step != 0 => {
                let (got, divisor) = decode_values(chunk, column, divide)?;
                if got != g {
                    return Err(ChunkError::Header("tier columns disagree"));
                }
                divisor
            }
            Some(_) => {
                other_ts.clear();
                let (_, divisor) = chunk::decode(chunk, Some(&mut other_ts), column, divide)?;
                if other_ts != *ts {
                    return Err(ChunkError::Header("tier columns disagree"));
                }
                divisor
            }
            None => {
                ts.reserve(n);
                let (g, divisor) = chunk::decode(chunk, Some(ts), column, divide)?;
                if ts.len() != n {
                    return Err(ChunkError::Header("tier columns disagree"));
                }
                grid = Some(g);
                divisor
            }
        };
        match agg {
            TierAgg::Min => t.scale.min = divisor,
            TierAgg::Max => t.scale.max = divisor,
            TierAgg::Sum | TierAgg::Count => {}
        }
    }
    if r.remaining() != 0 {
        return Err(ChunkError::Header("trailing bytes after the tier"));
    }
    let lo = t.ts.partition_point(|&x| x < from);
    let hi = t.ts.partition_point(|&x| x <= to);
    for agg in AGGS {
        let c = t.column_mut(agg);
        c.truncate(hi);
        c.drain(..lo);
    }
    t.ts.truncate(hi);
    t.ts.drain(..lo);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoded for folding, a decimal tier's minima and maxima are integers
    /// with their divisors beside them; extended into a tier (what
    /// `read_tier` does) they are the values again, bit for bit.
    #[test]
    fn a_tier_decoded_for_folding_divides_back_to_its_values() {
        let ts: Vec<i64> = (0..50).map(|i| i * 300).collect();
        let vals: Vec<f64> = (0..50).map(|i| f64::from((i * 37) % 101) / 100.0).collect();
        let t = Tier::build(&ts, &vals, 1000);
        let enc = t.encode();
        let mut folded = Tier::default();
        folded.decode_for_folding(&enc, t.ts.len(), i64::MIN, i64::MAX).unwrap();
        assert_eq!(folded.scale, Scale { min: 100.0, max: 100.0 });
        assert_eq!((&folded.sum, &folded.count), (&t.sum, &t.count), "sum and count as they are");
        assert!(folded.min.iter().zip(&t.min).all(|(m, v)| m / 100.0 == *v && m.fract() == 0.0));
        let mut back = Tier::default();
        back.extend(&folded);
        assert_eq!(back, t);
        let mut plain = Tier::default();
        plain.decode_into(&enc, t.ts.len(), i64::MIN, i64::MAX).unwrap();
        assert_eq!(plain, t);
    }

    #[test]
    fn builds_and_merges_periods() {
        let ts = [0, 400, 999, 1000, 2500];
        let vals = [1.0, 5.0, 3.0, 7.0, -2.0];
        let t = Tier::build(&ts, &vals, 1000);
        assert_eq!(t.ts, [0, 1000, 2000]);
        assert_eq!(t.min, [1.0, 7.0, -2.0]);
        assert_eq!(t.max, [5.0, 7.0, -2.0]);
        assert_eq!(t.sum, [9.0, 7.0, -2.0]);
        assert_eq!(t.count, [3.0, 1.0, 1.0]);
        // Split anywhere and merged back: the same tier.
        for cut in 0..=ts.len() {
            let mut a = Tier::build(&ts[..cut], &vals[..cut], 1000);
            a.extend(&Tier::build(&ts[cut..], &vals[cut..], 1000));
            assert_eq!(a, t, "cut at {cut}");
        }
        // A staleness marker is no sample: left out, a period of only one gone.
        let stale = f64::from_bits(model::STALE_NAN);
        let t = Tier::build(&[0, 10, 1000], &[1.0, stale, stale], 1000);
        assert_eq!((t.ts, t.count, t.sum), (vec![0], vec![1.0], vec![1.0]));
        let negative = Tier::build(&[-1500, -1], &[1.0, 2.0], 1000);
        assert_eq!(negative.ts, [-2000, -1000]);
    }

    /// Sums of decimals are the decimals they are, not an ulp off (which
    /// would push the whole sum column from the decimal codec to XOR).
    #[test]
    fn sums_of_decimals_are_decimals() {
        let ts: Vec<i64> = (0..40).map(|i| i * 100).collect();
        let vals: Vec<f64> = (0..40).map(|i| 0.1 * f64::from(i % 3) + 12.34).collect::<Vec<_>>();
        let vals: Vec<f64> = vals.iter().map(|v| (v * 100.0_f64).round() / 100.0).collect();
        let t = Tier::build(&ts, &vals, 1000);
        let naive: Vec<f64> = vals.chunks(10).map(|c| c.iter().sum()).collect();
        assert!(
            naive.iter().any(|&s| codec::decimal::decimal_scale(&[s]) != Some(2)),
            "{naive:?}: the test needs an inexact float sum"
        );
        for (got, want) in t.sum.iter().zip(&naive) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
            assert_eq!(codec::decimal::decimal_scale(&[*got]).map(|k| k <= 2), Some(true), "{got}");
        }
        assert!(t.encode().len() < Tier { sum: naive, ..t.clone() }.encode().len());
    }

    #[test]
    fn the_last_period_of_i64_ends() {
        // Its end is past i64::MAX: once, this looped forever, allocating.
        let t = Tier::build(&[i64::MAX - 5, i64::MAX], &[1.0, 2.0], MINUTE);
        assert_eq!(t.count, [2.0]);
        assert_eq!(t.ts, [i64::MAX - i64::MAX.rem_euclid(MINUTE)]);
    }

    #[test]
    fn tier_keys_and_entries_round_trip() {
        assert_eq!(parse_tier_key(&tier_key(17, "1m")), Some((17, 60_000_000_000)));
        assert_eq!(parse_tier_key(&SeriesKey::new("m", [("host", "a")])), None);
        assert_eq!(parse_tier_key(&SeriesKey::new("m", [(TIER_LABEL, "1:1s")])), None, "a real series");
        assert_eq!(parse_tier_key(&SeriesKey::new("", [(TIER_LABEL, "1:5s")])), None);
        let t = Tier::build(&[0, 400, 1000, 2500, 2600], &[1.0, f64::NAN, -0.0, 1e300, 3.5], 1000);
        let enc = t.encode();
        let back = decode(&enc, 3, i64::MIN, i64::MAX).unwrap();
        assert_eq!(back.ts, t.ts);
        for agg in AGGS {
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(back.column(agg)), bits(t.column(agg)));
        }
        assert_eq!(decode(&enc, 3, 1000, 2000).unwrap().ts, [1000, 2000]);
        assert!(decode(&enc, 4, i64::MIN, i64::MAX).is_err(), "count checked");
        for cut in 0..enc.len() {
            assert!(decode(&enc[..cut], 3, i64::MIN, i64::MAX).is_err());
        }
    }

    /// Decoding into buffers that held a longer entry (or a failed one)
    /// gives what a fresh decode gives.
    #[test]
    fn decoding_into_used_buffers_is_a_fresh_decode() {
        let long = Tier::build(&(0..50).map(|i| i * 100).collect::<Vec<_>>(), &[7.5; 50], 1000);
        let short = Tier::build(&[0, 400, 1000, 2500], &[1.0, 2.0, -3.0, 4.25], 1000);
        let (long_enc, short_enc) = (long.encode(), short.encode());
        let mut scratch = Tier::default();
        scratch.decode_into(&long_enc, long.ts.len(), i64::MIN, i64::MAX).unwrap();
        assert_eq!(scratch, long);
        scratch.decode_into(&short_enc, short.ts.len(), i64::MIN, i64::MAX).unwrap();
        assert_eq!(scratch, short);
        assert!(scratch.decode_into(&short_enc[..short_enc.len() - 1], 3, i64::MIN, i64::MAX).is_err());
        scratch.decode_into(&short_enc, short.ts.len(), 1000, 1000).unwrap();
        assert_eq!(scratch, decode(&short_enc, short.ts.len(), 1000, 1000).unwrap());
        assert_eq!(scratch.ts, [1000]);
    }
}
