//! Columnar encoding of a run of collection rounds for the wire and the
//! agent's spool (`docs/format/wire.md`, "Rounds").
//!
//! Rounds of one host mostly carry the same series, so the batch lists the
//! series once, then each round says only whether it has all of them (one
//! byte) or which (a bitmap). Values are stored column by column (series by
//! series), each XORed with the series' previous value, and the resulting
//! 64-bit words are split into eight byte planes: counters that barely move
//! and gauges that do not move at all turn into long runs of zero bytes,
//! which the general-purpose codec after it (zstd or lz4) folds away.
//!
//! ```text
//! body   = u8 codec (0 none, 1 lz4, 2 zstd) | varint raw_len | bytes
//! raw    = varint n_rounds | zigzag t0 | zigzag dod{n_rounds-1}
//!        | varint n_ids | varint first_id | varint (gap-1){n_ids-1}
//!        | (u8 0 | u8 1 bitmap[ceil(n_ids/8)]){n_rounds}
//!        | plane0[n_values] ... plane7[n_values]
//! ```

use codec::varint::{Reader, put_i64, put_u64};
use model::{Batch, Timestamp};

/// Most uncompressed bytes one batch may expand to (a decompression bomb
/// guard): ~8 M samples.
pub const RAW_MAX: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    None,
    Lz4,
    Zstd(i32),
}

impl Codec {
    fn tag(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Lz4 => 1,
            Codec::Zstd(_) => 2,
        }
    }
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Codec, String> {
        match s {
            "none" => Ok(Codec::None),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd(3)),
            _ => s
                .strip_prefix("zstd-")
                .and_then(|l| l.parse().ok())
                .filter(|l| (1..=19).contains(l))
                .map(Codec::Zstd)
                .ok_or_else(|| format!("{s:?}: use lz4, zstd, zstd-N (1..19) or none")),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RoundsError {
    #[error("rounds: unknown codec {0}")]
    Codec(u8),
    #[error("rounds: declared size {0} exceeds the limit")]
    TooLarge(usize),
    #[error("rounds: decompression failed")]
    Decompress,
    #[error("rounds: malformed ({0})")]
    Malformed(&'static str),
}

/// Encodes `rounds` (their `points`; `defs` travel separately) into `out`.
/// Returns the number of samples encoded. A series twice in one round keeps
/// its last value.
pub fn encode(rounds: &[Batch], codec: Codec, out: &mut Vec<u8>) -> usize {
    let mut ids: Vec<u32> = rounds.iter().flat_map(|r| r.points.iter().map(|p| p.0)).collect();
    ids.sort_unstable();
    ids.dedup();
    // Column index of each id; value grid rounds x ids (None: absent).
    let col = |id: u32| ids.binary_search(&id).expect("id listed");
    let mut grid: Vec<Option<u64>> = vec![None; rounds.len() * ids.len()];
    for (r, round) in rounds.iter().enumerate() {
        for &(id, v) in &round.points {
            grid[r * ids.len() + col(id)] = Some(v.to_bits());
        }
    }

    let mut raw = Vec::with_capacity(64 + ids.len() * 2 + grid.len() * 8);
    put_u64(&mut raw, rounds.len() as u64);
    let (mut prev_t, mut prev_d) = (0i64, 0i64);
    for (i, round) in rounds.iter().enumerate() {
        let t = round.time.as_nanos();
        if i == 0 {
            put_i64(&mut raw, t);
        } else {
            let d = t.wrapping_sub(prev_t);
            put_i64(&mut raw, d.wrapping_sub(prev_d));
            prev_d = d;
        }
        prev_t = t;
    }
    put_u64(&mut raw, ids.len() as u64);
    for (i, &id) in ids.iter().enumerate() {
        put_u64(&mut raw, if i == 0 { u64::from(id) } else { u64::from(id - ids[i - 1] - 1) });
    }
    for r in 0..rounds.len() {
        let row = &grid[r * ids.len()..(r + 1) * ids.len()];
        if row.iter().all(Option::is_some) {
            raw.push(0);
        } else {
            raw.push(1);
            let mut bits = vec![0u8; ids.len().div_ceil(8)];
            for (c, v) in row.iter().enumerate() {
                if v.is_some() {
                    bits[c / 8] |= 1 << (c % 8);
                }
            }
            raw.extend_from_slice(&bits);
        }
    }
    let mut words = Vec::with_capacity(grid.len());
    for c in 0..ids.len() {
        let mut prev = 0u64;
        for r in 0..rounds.len() {
            if let Some(bits) = grid[r * ids.len() + c] {
                words.push(bits ^ prev);
                prev = bits;
            }
        }
    }
    for plane in 0..8 {
        raw.extend(words.iter().map(|w| (w >> (plane * 8)) as u8));
    }

    out.push(codec.tag());
    put_u64(out, raw.len() as u64);
    match codec {
        Codec::None => out.extend_from_slice(&raw),
        Codec::Lz4 => out.extend_from_slice(&lz4_flex::block::compress(&raw)),
        Codec::Zstd(level) => {
            out.extend_from_slice(&zstd::bulk::compress(&raw, level).expect("zstd compresses into a Vec"));
        }
    }
    words.len()
}

/// Decodes a body made by [`encode`] into rounds without `defs`.
pub fn decode(body: &[u8]) -> Result<Vec<Batch>, RoundsError> {
    let mut r = Reader::new(body);
    let tag = r.fixed::<1>().ok_or(RoundsError::Malformed("codec"))?[0];
    let raw_len = usize::try_from(r.u64().ok_or(RoundsError::Malformed("length"))?)
        .map_err(|_| RoundsError::TooLarge(usize::MAX))?;
    if raw_len > RAW_MAX {
        return Err(RoundsError::TooLarge(raw_len));
    }
    let data = r.bytes(r.remaining()).unwrap_or_default();
    let raw: std::borrow::Cow<'_, [u8]> = match tag {
        0 => data.into(),
        1 => lz4_flex::block::decompress(data, raw_len).map_err(|_| RoundsError::Decompress)?.into(),
        2 => zstd::bulk::decompress(data, raw_len).map_err(|_| RoundsError::Decompress)?.into(),
        t => return Err(RoundsError::Codec(t)),
    };
    if raw.len() != raw_len {
        return Err(RoundsError::Malformed("length"));
    }
    decode_raw(&raw)
}

fn decode_raw(raw: &[u8]) -> Result<Vec<Batch>, RoundsError> {
    let bad = RoundsError::Malformed;
    let mut r = Reader::new(raw);
    let n_rounds = usize::try_from(r.u64().ok_or(bad("round count"))?).map_err(|_| bad("round count"))?;
    if n_rounds == 0 || n_rounds > r.remaining() {
        return Err(bad("round count"));
    }
    let mut times = Vec::with_capacity(n_rounds);
    let (mut t, mut d) = (0i64, 0i64);
    for i in 0..n_rounds {
        let v = r.i64().ok_or(bad("times"))?;
        if i == 0 {
            t = v;
        } else {
            d = d.wrapping_add(v);
            t = t.wrapping_add(d);
        }
        times.push(t);
    }
    let n_ids = usize::try_from(r.u64().ok_or(bad("series count"))?).map_err(|_| bad("series count"))?;
    if n_ids > r.remaining() {
        return Err(bad("series count"));
    }
    let mut ids = Vec::with_capacity(n_ids);
    for i in 0..n_ids {
        let v = r.u64().ok_or(bad("series ids"))?;
        let id = if i == 0 { v } else { u64::from(ids[i - 1]) + 1 + v };
        ids.push(u32::try_from(id).map_err(|_| bad("series ids"))?);
    }
    // Presence: rounds x ids, from the flags and bitmaps.
    let mut present = Vec::with_capacity(n_rounds);
    let mut n_values = 0usize;
    for _ in 0..n_rounds {
        match r.fixed::<1>().ok_or(bad("presence"))?[0] {
            0 => {
                present.push(None);
                n_values += n_ids;
            }
            1 => {
                let bits = r.bytes(n_ids.div_ceil(8)).ok_or(bad("presence"))?;
                n_values += bits.iter().map(|b| b.count_ones() as usize).sum::<usize>();
                if n_ids % 8 != 0 && bits.last().is_some_and(|b| b >> (n_ids % 8) != 0) {
                    return Err(bad("presence"));
                }
                present.push(Some(bits));
            }
            _ => return Err(bad("presence")),
        }
    }
    if r.remaining() != n_values * 8 {
        return Err(bad("values"));
    }
    let planes = r.bytes(n_values * 8).ok_or(bad("values"))?;
    let has = |round: usize, c: usize| present[round].is_none_or(|bits| bits[c / 8] >> (c % 8) & 1 == 1);

    let mut rounds: Vec<Batch> = times
        .iter()
        .map(|&t| Batch { time: Timestamp(t), defs: Vec::new(), points: Vec::with_capacity(n_ids) })
        .collect();
    let mut k = 0;
    for (c, &id) in ids.iter().enumerate() {
        let mut prev = 0u64;
        for (round, batch) in rounds.iter_mut().enumerate() {
            if !has(round, c) {
                continue;
            }
            let mut w = 0u64;
            for plane in 0..8 {
                w |= u64::from(planes[plane * n_values + k]) << (plane * 8);
            }
            k += 1;
            prev ^= w;
            batch.points.push((id, f64::from_bits(prev)));
        }
    }
    Ok(rounds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round(t: i64, points: &[(u32, f64)]) -> Batch {
        Batch { time: Timestamp(t), defs: Vec::new(), points: points.to_vec() }
    }

    /// Rounds as decode returns them: points ordered by id, last value wins.
    fn normalised(rounds: &[Batch]) -> Vec<Batch> {
        rounds
            .iter()
            .map(|r| {
                let mut m = std::collections::BTreeMap::new();
                for &(id, v) in &r.points {
                    m.insert(id, v.to_bits());
                }
                Batch {
                    time: r.time,
                    defs: Vec::new(),
                    points: m.into_iter().map(|(id, b)| (id, f64::from_bits(b))).collect(),
                }
            })
            .collect()
    }

    fn bits(rounds: &[Batch]) -> Vec<(i64, Vec<(u32, u64)>)> {
        rounds
            .iter()
            .map(|r| (r.time.as_nanos(), r.points.iter().map(|&(id, v)| (id, v.to_bits())).collect()))
            .collect()
    }

    #[test]
    fn boundary_values_and_gaps_round_trip_with_every_codec() {
        let rounds = vec![
            round(i64::MIN, &[(0, f64::NAN), (5, f64::INFINITY), (u32::MAX, -0.0)]),
            round(i64::MAX, &[(0, f64::NEG_INFINITY), (5, f64::MIN_POSITIVE)]),
            round(0, &[(5, 1.0), (5, 2.0)]),
            round(0, &[]),
        ];
        for codec in [Codec::None, Codec::Lz4, Codec::Zstd(3)] {
            let mut out = Vec::new();
            assert_eq!(encode(&rounds, codec, &mut out), 6);
            assert_eq!(bits(&decode(&out).unwrap()), bits(&normalised(&rounds)), "{codec:?}");
        }
    }

    #[test]
    fn damage_is_an_error_not_data() {
        let rounds: Vec<Batch> =
            (0..10).map(|i| round(i * 100, &[(0, i as f64), (1, 7.0), (3, -(i as f64) / 3.0)])).collect();
        let mut out = Vec::new();
        encode(&rounds, Codec::None, &mut out);
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(decode(&[9, 0]).unwrap_err(), RoundsError::Codec(9));
        let mut bomb = vec![2];
        put_u64(&mut bomb, (RAW_MAX + 1) as u64);
        assert_eq!(decode(&bomb).unwrap_err(), RoundsError::TooLarge(RAW_MAX + 1));
    }

    proptest! {
        #[test]
        fn any_rounds_round_trip(
            rounds in proptest::collection::vec(
                (any::<i64>(), proptest::collection::vec((0u32..40, any::<f64>()), 0..30)),
                1..12,
            )
        ) {
            let rounds: Vec<Batch> = rounds.iter().map(|(t, p)| round(*t, p)).collect();
            let mut out = Vec::new();
            encode(&rounds, Codec::Zstd(1), &mut out);
            prop_assert_eq!(bits(&decode(&out).unwrap()), bits(&normalised(&rounds)));
        }
    }
}
