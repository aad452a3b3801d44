//! WAL record framing.
//!
//! ```text
//! record  = u32 len (LE) | u32 crc32 (LE, of payload) | payload[len]
//! payload = 0x01 varint id | key                      (series definition)
//!         | 0x02 varint zigzag time_ns | varint n | (varint id | f64 LE){n}
//! ```
//! A segment is valid up to the first record whose frame is short, whose
//! length is absurd, or whose checksum or payload does not verify.

use model::SeriesKey;

use codec::frame::{Damage, begin_frame, decode_frames, end_frame};
use codec::varint::{Reader, get_key, put_i64, put_key, put_u64};

const KIND_SERIES: u8 = 1;
const KIND_SAMPLES: u8 = 2;

#[derive(Debug, PartialEq)]
pub enum Record {
    Series { id: u32, key: SeriesKey },
    Samples { time: i64, points: Vec<(u32, f64)> },
}

pub fn encode_series(out: &mut Vec<u8>, id: u32, key: &SeriesKey) {
    let start = begin_frame(out);
    out.push(KIND_SERIES);
    put_u64(out, u64::from(id));
    put_key(out, key);
    end_frame(out, start);
}

pub fn encode_samples(out: &mut Vec<u8>, time: i64, points: impl ExactSizeIterator<Item = (u32, f64)>) {
    let start = begin_frame(out);
    out.push(KIND_SAMPLES);
    put_i64(out, time);
    put_u64(out, points.len() as u64);
    for (id, v) in points {
        put_u64(out, u64::from(id));
        out.extend_from_slice(&v.to_le_bytes());
    }
    end_frame(out, start);
}

/// Decodes records from `data` (which starts at byte `base` of its file),
/// calling `f` for each. Returns the length of the valid prefix and, if it
/// stopped early, why.
pub fn decode_records(data: &[u8], base: u64, mut f: impl FnMut(Record)) -> (usize, Option<Damage>) {
    decode_frames(data, base, |payload| decode_payload(payload).map(&mut f).is_some())
}

/// Whether `payload` is a whole, well-formed WAL record.
pub fn is_record(payload: &[u8]) -> bool {
    decode_payload(payload).is_some()
}

fn decode_payload(payload: &[u8]) -> Option<Record> {
    let mut r = Reader::new(payload);
    let kind = r.fixed::<1>()?[0];
    let rec = match kind {
        KIND_SERIES => Record::Series { id: r.u32()?, key: get_key(&mut r)? },
        KIND_SAMPLES => {
            let time = r.i64()?;
            let n = usize::try_from(r.u64()?).ok()?;
            // Each point takes at least 9 bytes: reject counts the payload cannot hold.
            if n > r.remaining() / 9 {
                return None;
            }
            let mut points = Vec::with_capacity(n);
            for _ in 0..n {
                points.push((r.u32()?, r.f64()?));
            }
            Record::Samples { time, points }
        }
        _ => return None,
    };
    (r.remaining() == 0).then_some(rec)
}

#[cfg(test)]
mod tests {
    use codec::frame::resync;

    use super::*;

    pub(crate) fn sample_log() -> (Vec<u8>, Vec<Record>) {
        let mut out = Vec::new();
        let mut recs = Vec::new();
        let key = SeriesKey::new("node_load1", [("host", "a")]);
        encode_series(&mut out, 0, &key);
        recs.push(Record::Series { id: 0, key });
        for t in 0..20 {
            let points = vec![(0, t as f64 * 0.5), (0, -1.0)];
            encode_samples(&mut out, t * 100, points.iter().copied());
            recs.push(Record::Samples { time: t * 100, points });
        }
        (out, recs)
    }

    #[test]
    fn every_truncation_yields_a_clean_prefix() {
        let (log, recs) = sample_log();
        let mut ends = Vec::new();
        decode_records(&log, 0, |_| {});
        // Record boundaries, from a full decode.
        let mut pos = 0;
        while pos < log.len() {
            let len = u32::from_le_bytes(log[pos..pos + 4].try_into().unwrap()) as usize;
            pos += 8 + len;
            ends.push(pos);
        }
        for cut in 0..=log.len() {
            let mut got = Vec::new();
            let (valid, damage) = decode_records(&log[..cut], 0, |r| got.push(r));
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(got.len(), whole, "cut at {cut}");
            assert_eq!(got[..], recs[..whole]);
            assert_eq!(valid, if whole == 0 { 0 } else { ends[whole - 1] });
            assert_eq!(damage.is_some(), cut != valid, "cut at {cut}");
        }
    }

    #[test]
    fn resync_finds_the_next_whole_record_after_damage() {
        let (log, _) = sample_log();
        let ends: Vec<usize> = {
            let mut pos = 0;
            let mut ends = vec![0];
            while pos < log.len() {
                pos += 8 + u32::from_le_bytes(log[pos..pos + 4].try_into().unwrap()) as usize;
                ends.push(pos);
            }
            ends
        };
        for k in 0..ends.len() - 2 {
            for i in ends[k]..ends[k + 1] {
                let mut bad = log.clone();
                bad[i] ^= 0x10;
                let (valid, damage) = decode_records(&bad, 0, |_| {});
                assert_eq!((valid, damage.is_some()), (ends[k], true), "flip at {i}");
                assert_eq!(resync(&bad, valid, is_record), Some(ends[k + 1]), "flip at {i}");
            }
        }
        // Damage in the last record: nothing verifies after it (a torn tail).
        let mut bad = log.clone();
        let last = ends[ends.len() - 2];
        bad[last + 9] ^= 1;
        assert_eq!(resync(&bad, last, is_record), None);
        assert_eq!(resync(&log[..last + 3], last, is_record), None);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let (log, recs) = sample_log();
        for i in 0..log.len() {
            for bit in [0, 3, 7] {
                let mut bad = log.clone();
                bad[i] ^= 1 << bit;
                let mut got = Vec::new();
                let (valid, damage) = decode_records(&bad, 1000, |r| got.push(r));
                let damage = damage.unwrap_or_else(|| panic!("flip at {i} undetected"));
                assert!(damage.offset >= 1000 && damage.offset as usize - 1000 <= i, "damage reported after the flip");
                assert_eq!(valid as u64, damage.offset - 1000);
                assert_eq!(got[..], recs[..got.len()], "prefix before the flip is intact");
            }
        }
    }
}
