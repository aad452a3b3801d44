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

use crate::codec::varint::{Reader, get_key, put_i64, put_key, put_u64};

const KIND_SERIES: u8 = 1;
const KIND_SAMPLES: u8 = 2;
/// Frames larger than this are corruption, not data: a batch of 100k points is ~1.2 MB.
pub const RECORD_BYTES_MAX: u32 = 64 << 20;

#[derive(Debug, PartialEq)]
pub enum Record {
    Series { id: u32, key: SeriesKey },
    Samples { time: i64, points: Vec<(u32, f64)> },
}

/// Where and why a segment stopped verifying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first record that did not verify.
    pub offset: u64,
    pub what: &'static str,
}

/// Reserves a frame header; returns where the payload starts.
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(&[0; 8]);
    out.len()
}

/// Fills in the header reserved by [`begin_frame`] for the payload after it.
pub fn end_frame(out: &mut [u8], payload_start: usize) {
    let len = (out.len() - payload_start) as u32;
    let crc = crc32fast::hash(&out[payload_start..]);
    out[payload_start - 8..payload_start - 4].copy_from_slice(&len.to_le_bytes());
    out[payload_start - 4..payload_start].copy_from_slice(&crc.to_le_bytes());
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

/// Walks the frames of `data` (which starts at byte `base` of its file),
/// handing each verified payload to `f`, which returns false if the payload
/// does not parse. Returns the length of the valid prefix and, if it stopped
/// early, why.
pub fn decode_frames(data: &[u8], base: u64, mut f: impl FnMut(&[u8]) -> bool) -> (usize, Option<Damage>) {
    let mut pos = 0;
    while pos < data.len() {
        let damage = |what| Some(Damage { offset: base + pos as u64, what });
        let Some(head) = data.get(pos..pos + 8) else {
            return (pos, damage("truncated record header"));
        };
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len == 0 || len > RECORD_BYTES_MAX {
            return (pos, damage("invalid record length"));
        }
        let Some(payload) = data.get(pos + 8..pos + 8 + len as usize) else {
            return (pos, damage("truncated record"));
        };
        if crc32fast::hash(payload) != crc {
            return (pos, damage("checksum mismatch"));
        }
        if !f(payload) {
            return (pos, damage("malformed record"));
        }
        pos += 8 + len as usize;
    }
    (pos, None)
}

/// After a frame that did not verify at `from`, the first offset past it at
/// which a whole frame verifies (its length sane, its checksum right, and
/// `parses` accepting its payload): where valid records resume after damage
/// in the middle of a file. `None`: nothing after `from` verifies, so the
/// damage is a torn tail. A random match needs a 32-bit checksum to agree by
/// chance; garbage lengths are refused before any checksum is computed.
pub fn resync(data: &[u8], from: usize, parses: impl Fn(&[u8]) -> bool) -> Option<usize> {
    (from + 1..data.len().saturating_sub(8)).find(|&p| {
        let len = u32::from_le_bytes(data[p..p + 4].try_into().expect("4 bytes"));
        if len == 0 || len > RECORD_BYTES_MAX || (len as usize) > data.len() - p - 8 {
            return false;
        }
        let crc = u32::from_le_bytes(data[p + 4..p + 8].try_into().expect("4 bytes"));
        let payload = &data[p + 8..p + 8 + len as usize];
        crc32fast::hash(payload) == crc && parses(payload)
    })
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
