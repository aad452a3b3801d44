//! Prometheus remote write 1.0 in: a snappy-compressed protobuf
//! `WriteRequest` (the messages of `prometheus/prompb`, derived here with
//! prost) to points for the store. Outside bytes: the decompressed size is
//! checked against a limit before anything is allocated (a snappy bomb is
//! refused on its header), and every decode failure is an error naming it.

use model::SeriesKey;
use prost::Message;

use crate::value::NAME;

#[derive(Clone, PartialEq, Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The largest decompressed request taken (Prometheus sends a few MB at most).
pub const DECODED_MAX: usize = 64 << 20;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("snappy body: {0}")]
    Snappy(String),
    #[error("the body decompresses to {0} bytes; at most {DECODED_MAX}")]
    TooLarge(usize),
    #[error("protobuf WriteRequest: {0}")]
    Protobuf(String),
    #[error("a time series without a {NAME} label")]
    NoName,
    /// What decoding would allocate, known from the body's structure before
    /// it is decoded (empty series and labels cost far more in memory than
    /// the 2 bytes each takes on the wire: 3 MB of snappy made 64 MiB of
    /// them, and gigabytes once decoded).
    #[error(
        "the body holds {series} series, {labels} labels and {samples} samples, {mib} MiB once decoded; at most {DECODED_MEMORY_MAX} bytes: send smaller requests"
    )]
    TooMany { series: usize, labels: usize, samples: usize, mib: usize },
    /// A series Prometheus would not take, or over a size limit.
    #[error("series {0}: {1}")]
    BadSeries(String, String),
}

/// What a decoded request may hold in memory, estimated from its structure.
pub const DECODED_MEMORY_MAX: usize = 256 << 20;

/// The structure of a `WriteRequest`: its series, labels (with their bytes)
/// and samples, counted by walking the protobuf wire format without
/// allocating.
#[derive(Debug, Default, PartialEq)]
struct Shape {
    series: usize,
    labels: usize,
    label_bytes: usize,
    samples: usize,
}

impl Shape {
    /// What decoding allocates, on the safe side: the structs and vectors
    /// prost makes (a series 48 bytes and its key again, a label two
    /// strings, twice), the bytes of the strings, a sample 16 bytes thrice
    /// (decoded, as points, in the store's batches).
    fn memory(&self) -> usize {
        self.series
            .saturating_mul(160)
            .saturating_add(self.labels.saturating_mul(96))
            .saturating_add(self.label_bytes.saturating_mul(2).saturating_add(self.samples.saturating_mul(48)))
    }
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or_else(|| DecodeError::Protobuf("truncated varint".into()))?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err(DecodeError::Protobuf("varint longer than 10 bytes".into()))
}

/// Calls `field(number, body)` for each length-delimited field of the
/// message `b` and skips the others; errors on anything malformed.
fn fields(b: &[u8], mut field: impl FnMut(u64, &[u8]) -> Result<(), DecodeError>) -> Result<(), DecodeError> {
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let len = match key & 7 {
            0 => {
                varint(b, &mut i)?;
                continue;
            }
            1 => 8,
            5 => 4,
            2 => usize::try_from(varint(b, &mut i)?).unwrap_or(usize::MAX),
            w => return Err(DecodeError::Protobuf(format!("wire type {w} is not taken"))),
        };
        let end = i.checked_add(len).filter(|&e| e <= b.len());
        let end = end.ok_or_else(|| DecodeError::Protobuf("a field runs past the message".into()))?;
        if key & 7 == 2 {
            field(key >> 3, &b[i..end])?;
        }
        i = end;
    }
    Ok(())
}

/// The body's [`Shape`], or an error where it is malformed.
fn shape(raw: &[u8]) -> Result<Shape, DecodeError> {
    let mut s = Shape::default();
    fields(raw, |n, ts| {
        if n != 1 {
            return Ok(());
        }
        s.series += 1;
        fields(ts, |n, f| {
            match n {
                1 => (s.labels, s.label_bytes) = (s.labels + 1, s.label_bytes + f.len()),
                2 => s.samples += 1,
                _ => {}
            }
            Ok(())
        })
    })?;
    Ok(s)
}

/// A snappy body decompressed, its claimed size checked first (shared by
/// remote write and remote read).
pub(crate) fn unsnappy(body: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let len = snap::raw::decompress_len(body).map_err(|e| DecodeError::Snappy(e.to_string()))?;
    if len > DECODED_MAX {
        return Err(DecodeError::TooLarge(len));
    }
    snap::raw::Decoder::new().decompress_vec(body).map_err(|e| DecodeError::Snappy(e.to_string()))
}

/// One series of a body and its samples (time in ns, value).
pub type SeriesSamplesNs = (SeriesKey, Vec<(i64, f64)>);

/// The series of a remote-write body, each with its samples.
pub fn decode(body: &[u8]) -> Result<Vec<SeriesSamplesNs>, DecodeError> {
    let raw = unsnappy(body)?;
    let sh = shape(&raw)?;
    if sh.memory() > DECODED_MEMORY_MAX {
        return Err(DecodeError::TooMany {
            series: sh.series,
            labels: sh.labels,
            samples: sh.samples,
            mib: sh.memory() >> 20,
        });
    }
    let req = WriteRequest::decode(raw.as_slice()).map_err(|e| DecodeError::Protobuf(e.to_string()))?;
    let mut out = Vec::with_capacity(req.timeseries.len());
    for ts in req.timeseries {
        let mut name = None;
        let mut labels = Vec::with_capacity(ts.labels.len());
        for l in ts.labels {
            if l.name == NAME {
                name = Some(l.value);
            } else if !l.value.is_empty() {
                labels.push((l.name, l.value));
            }
        }
        let key = SeriesKey::new(name.filter(|n| !n.is_empty()).ok_or(DecodeError::NoName)?, labels);
        // Names the exposition formats can print (a newline in one forged
        // lines of `/federate`), sizes every path holds series to.
        if let Err(e) = key.check_names().and_then(|()| key.check_size()) {
            let shown: String = key.to_string().chars().take(120).collect();
            return Err(DecodeError::BadSeries(shown, e));
        }
        out.push((key, ts.samples.iter().map(|s| (s.timestamp.saturating_mul(1_000_000), s.value)).collect()));
    }
    Ok(out)
}

/// One series to encode: its labels (`__name__` among them) and its
/// (ms, value) samples.
pub type SeriesSamples<'a> = (Vec<(&'a str, &'a str)>, Vec<(i64, f64)>);

/// A remote-write body of `series`: for tests and tools.
pub fn encode(series: &[SeriesSamples<'_>]) -> Vec<u8> {
    let req = WriteRequest {
        timeseries: series
            .iter()
            .map(|(labels, samples)| TimeSeries {
                labels: labels.iter().map(|(n, v)| Label { name: (*n).into(), value: (*v).into() }).collect(),
                samples: samples.iter().map(|&(timestamp, value)| Sample { value, timestamp }).collect(),
            })
            .collect(),
    };
    snap::raw::Encoder::new().compress_vec(&req.encode_to_vec()).expect("snappy compresses any input")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_round_trips_and_bad_bodies_are_named() {
        let body = encode(&[(
            vec![("__name__", "up"), ("job", "node")],
            vec![(1_700_000_000_000, 1.0), (1_700_000_001_000, 0.0)],
        )]);
        let series = decode(&body).unwrap();
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].0, SeriesKey::new("up", [("job", "node")]));
        assert_eq!(series[0].1, [(1_700_000_000_000_000_000, 1.0), (1_700_000_001_000_000_000, 0.0)]);
        assert!(matches!(decode(b"not snappy at all"), Err(DecodeError::Snappy(_) | DecodeError::Protobuf(_))));
        assert_eq!(decode(&encode(&[(vec![("job", "x")], vec![(1, 1.0)])])), Err(DecodeError::NoName));
        // A header claiming 1 GiB is refused before anything is allocated.
        let mut bomb = Vec::new();
        let mut n = 1u64 << 30;
        while n >= 0x80 {
            bomb.push((n as u8) | 0x80);
            n >>= 7;
        }
        bomb.push(n as u8);
        bomb.extend_from_slice(&[0; 16]);
        assert_eq!(decode(&bomb), Err(DecodeError::TooLarge(1 << 30)));
    }

    /// Issue 42: 3.1 MB of snappy decompressed to 64 MiB of empty series
    /// and labels, which prost decoded into gigabytes. The body's structure
    /// is counted first, without allocating.
    #[test]
    fn a_body_of_empty_series_is_refused_by_its_shape_before_decoding() {
        let mut raw = Vec::new();
        for _ in 0..4_000_000 {
            raw.extend_from_slice(&[0x0a, 0x02, 0x0a, 0x00]); // a series holding one empty label
        }
        let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        assert!(body.len() < 1 << 20, "{}", body.len());
        match decode(&body) {
            Err(DecodeError::TooMany { series, labels, .. }) => assert_eq!((series, labels), (4_000_000, 4_000_000)),
            other => panic!("{other:?}"),
        }
        // The counting walks what prost decodes.
        let real = encode(&[
            (vec![("__name__", "up"), ("job", "node")], vec![(1, 1.0), (2, 0.0)]),
            (vec![("__name__", "x")], vec![(1, 1.0)]),
        ]);
        let raw = snap::raw::Decoder::new().decompress_vec(&real).unwrap();
        assert_eq!(shape(&raw).unwrap(), Shape { series: 2, labels: 3, label_bytes: 38, samples: 3 });
        assert!(matches!(shape(&[0x0a, 0x05, 0x00]), Err(DecodeError::Protobuf(_))), "a field past the end");
    }

    /// Issue 42: a series named with a newline printed forged lines in
    /// `/federate`; one with a 30 MB label value cost every query naming it.
    #[test]
    fn series_with_names_prometheus_refuses_or_oversized_labels_are_refused() {
        let forged = "x\ninjected_metric{job=\"forged\"} 1e9";
        for labels in [
            vec![("__name__", forged)],
            vec![("__name__", "ok"), ("bad-label", "1")],
            vec![("__name__", "ok"), ("a", &*"v".repeat(model::LABEL_VALUE_BYTES_MAX + 1))],
        ] {
            let body = encode(&[(labels, vec![(1, 1.0)])]);
            assert!(matches!(decode(&body), Err(DecodeError::BadSeries(..))));
        }
    }
}
