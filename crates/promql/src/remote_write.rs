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
}
