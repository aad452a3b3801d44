//! Prometheus remote read (the samples response): a snappy protobuf
//! `ReadRequest` of queries — a time range and label matchers each — in,
//! a `ReadResponse` of every matching series' raw samples out, so a
//! Prometheus can read kansoku's data as its own. Outside bytes: size
//! checked before decompression, every failure an error naming it.

use model::{MatchOp, Matcher, Selector, SeriesKey};
use prost::Message;

use crate::remote_write::{DecodeError, Label, Sample, TimeSeries};

#[derive(Clone, PartialEq, Message)]
pub struct ReadRequest {
    #[prost(message, repeated, tag = "1")]
    pub queries: Vec<Query>,
    #[prost(int32, repeated, tag = "2")]
    pub accepted_response_types: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Query {
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
}

#[derive(Clone, PartialEq, Message)]
pub struct LabelMatcher {
    /// 0 `=`, 1 `!=`, 2 `=~`, 3 `!~`.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ReadResponse {
    #[prost(message, repeated, tag = "1")]
    pub results: Vec<QueryResult>,
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryResult {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// The queries of a remote-read body: (selector, from ns, to ns), both ends
/// included.
pub fn decode_request(body: &[u8]) -> Result<Vec<(Selector, i64, i64)>, DecodeError> {
    let raw = crate::remote_write::unsnappy(body)?;
    let req = ReadRequest::decode(raw.as_slice()).map_err(|e| DecodeError::Protobuf(e.to_string()))?;
    req.queries
        .into_iter()
        .map(|q| {
            let matchers = q
                .matchers
                .into_iter()
                .map(|m| {
                    let op = match m.r#type {
                        0 => MatchOp::Equal,
                        1 => MatchOp::NotEqual,
                        2 => MatchOp::Regex,
                        3 => MatchOp::NotRegex,
                        t => return Err(DecodeError::Protobuf(format!("matcher type {t}"))),
                    };
                    Matcher::new(m.name, op, m.value).map_err(|e| DecodeError::Protobuf(format!("matcher regex: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let ns = |ms: i64| ms.saturating_mul(1_000_000);
            Ok((Selector { matchers }, ns(q.start_timestamp_ms), ns(q.end_timestamp_ms)))
        })
        .collect()
}

/// One query's answer: each series and its (ns, value) samples.
pub type Answer = Vec<(SeriesKey, Vec<i64>, Vec<f64>)>;

/// The snappy protobuf `ReadResponse` of `answers`, one per query.
pub fn encode_response(answers: &[Answer]) -> Vec<u8> {
    let resp = ReadResponse {
        results: answers
            .iter()
            .map(|series| QueryResult {
                timeseries: series
                    .iter()
                    .map(|(key, t, v)| {
                        let mut labels = vec![Label { name: crate::value::NAME.into(), value: key.name().into() }];
                        labels.extend(key.labels().iter().map(|(n, v)| Label { name: n.clone(), value: v.clone() }));
                        labels.sort_by(|a, b| a.name.cmp(&b.name));
                        let samples = t
                            .iter()
                            .zip(v)
                            .map(|(&t, &value)| Sample { value, timestamp: t.div_euclid(1_000_000) })
                            .collect();
                        TimeSeries { labels, samples }
                    })
                    .collect(),
            })
            .collect(),
    };
    snap::raw::Encoder::new().compress_vec(&resp.encode_to_vec()).expect("snappy compresses any input")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_decode_to_selectors_and_answers_encode() {
        let req = ReadRequest {
            queries: vec![Query {
                start_timestamp_ms: 1000,
                end_timestamp_ms: 2000,
                matchers: vec![
                    LabelMatcher { r#type: 0, name: "__name__".into(), value: "up".into() },
                    LabelMatcher { r#type: 2, name: "job".into(), value: "n.*".into() },
                ],
            }],
            accepted_response_types: vec![0],
        };
        let body = snap::raw::Encoder::new().compress_vec(&req.encode_to_vec()).unwrap();
        let q = decode_request(&body).unwrap();
        assert_eq!((q[0].1, q[0].2), (1_000_000_000, 2_000_000_000));
        assert!(q[0].0.matches(&SeriesKey::new("up", [("job", "node")])));
        assert!(!q[0].0.matches(&SeriesKey::new("up", [("job", "api")])));
        let out = encode_response(&[vec![(SeriesKey::new("up", [("job", "node")]), vec![1_500_000_000], vec![1.0])]]);
        let raw = snap::raw::Decoder::new().decompress_vec(&out).unwrap();
        let resp = ReadResponse::decode(raw.as_slice()).unwrap();
        let ts = &resp.results[0].timeseries[0];
        assert_eq!(ts.labels[0].name, "__name__");
        assert_eq!((ts.samples[0].timestamp, ts.samples[0].value), (1500, 1.0));
        let bad = snap::raw::Encoder::new()
            .compress_vec(
                &ReadRequest {
                    queries: vec![Query {
                        matchers: vec![LabelMatcher { r#type: 9, ..Default::default() }],
                        ..Default::default()
                    }],
                    accepted_response_types: vec![],
                }
                .encode_to_vec(),
            )
            .unwrap();
        assert!(decode_request(&bad).is_err());
    }
}
