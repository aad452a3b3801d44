//! A run's measurements as bytes (`docs/format/load.md`), so that a load
//! run on another host — an agent's job in `kansoku lab load --agents` —
//! comes back whole: every counter, every histogram bucket and every
//! interval. Merging decoded reports gives the same figures as one run that
//! made all their requests; nothing is summarised on the way.
//!
//! Hand-written rather than serde: histograms are written as their
//! non-empty buckets, (value, count) pairs, which the `hdrhistogram`
//! crate's own serialiser would pull compression and parser crates in for.

use std::time::{Duration, Instant};

use hdrhistogram::{Counter, Histogram};

use crate::record::{Failures, Interval, Recorder};

/// First bytes of a report.
pub const MAGIC: [u8; 4] = *b"KLR1";

/// One host's run.
#[derive(Clone, Debug)]
pub struct Report {
    /// That host's wall clock (ns since the epoch) at the load's first instant.
    pub began_ns: i64,
    /// From the first instant to the last response.
    pub elapsed: Duration,
    /// CPU time of the process that made the load (ns, user + system).
    pub cpu_ns: i64,
    pub recorder: Recorder,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReportError {
    #[error("not a load report (bad magic)")]
    Magic,
    #[error("load report cut short at byte {0}")]
    Short(usize),
    #[error("load report: {0}")]
    Invalid(&'static str),
}

impl Report {
    pub fn encode(&self) -> Vec<u8> {
        let r = &self.recorder;
        let mut out = Vec::with_capacity(1024 + r.intervals.len() * 64);
        out.extend_from_slice(&MAGIC);
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(self.began_ns as u64);
        put(self.elapsed.as_nanos() as u64);
        put(self.cpu_ns as u64);
        put(r.interval().as_nanos() as u64);
        for v in [r.responses, r.body_bytes, r.wire_bytes, r.connects, r.first_sent_ns.unwrap_or(u64::MAX)] {
            put(v);
        }
        for v in r.status {
            put(v);
        }
        let f = &r.failures;
        for v in [f.connect, f.io, f.timeout, f.protocol] {
            put(v);
        }
        for h in [&r.corrected_ns, &r.sent_ns, &r.late_ns] {
            put_hist(&mut out, h);
        }
        out.extend_from_slice(&(r.intervals.len() as u64).to_le_bytes());
        for i in &r.intervals {
            for v in [i.responses, i.failures, i.body_bytes] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            put_hist(&mut out, &i.latency_us);
        }
        out
    }

    /// Reads what [`Report::encode`] wrote; the recorder's intervals count
    /// from `start` (a report carries no `Instant`: they are this process's).
    pub fn decode(data: &[u8], start: Instant) -> Result<Report, ReportError> {
        if data.get(..4) != Some(&MAGIC[..]) {
            return Err(ReportError::Magic);
        }
        let mut r = Reader { data, pos: 4 };
        let began_ns = r.u64()? as i64;
        let elapsed = Duration::from_nanos(r.u64()?);
        let cpu_ns = r.u64()? as i64;
        let interval = Duration::from_nanos(r.u64()?);
        if interval.is_zero() {
            return Err(ReportError::Invalid("an interval of zero"));
        }
        let mut rec = Recorder::new(start, interval);
        rec.responses = r.u64()?;
        rec.body_bytes = r.u64()?;
        rec.wire_bytes = r.u64()?;
        rec.connects = r.u64()?;
        rec.first_sent_ns = Some(r.u64()?).filter(|&v| v != u64::MAX);
        for s in &mut rec.status {
            *s = r.u64()?;
        }
        rec.failures = Failures { connect: r.u64()?, io: r.u64()?, timeout: r.u64()?, protocol: r.u64()? };
        for h in [&mut rec.corrected_ns, &mut rec.sent_ns, &mut rec.late_ns] {
            get_hist(&mut r, h)?;
        }
        let n = r.u64()?;
        // Each interval takes at least 32 bytes: a count beyond the bytes
        // left is refused before allocating for it.
        if n > (r.left() / 32) as u64 {
            return Err(ReportError::Invalid("more intervals than bytes"));
        }
        rec.intervals.reserve(n as usize);
        for _ in 0..n {
            let mut i = Interval::new();
            i.responses = r.u64()?;
            i.failures = r.u64()?;
            i.body_bytes = r.u64()?;
            get_hist(&mut r, &mut i.latency_us)?;
            rec.intervals.push(i);
        }
        if r.left() != 0 {
            return Err(ReportError::Invalid("bytes after the last interval"));
        }
        Ok(Report { began_ns, elapsed, cpu_ns, recorder: rec })
    }
}

fn put_hist<T: Counter>(out: &mut Vec<u8>, h: &Histogram<T>) {
    // Each bucket by its lowest value: its highest may lie past the
    // histogram's bound (a value recorded near it), where decoding refuses it.
    let buckets: Vec<(u64, u64)> =
        h.iter_recorded().map(|v| (h.lowest_equivalent(v.value_iterated_to()), v.count_at_value().as_u64())).collect();
    out.extend_from_slice(&(buckets.len() as u64).to_le_bytes());
    for (value, count) in buckets {
        out.extend_from_slice(&value.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }
}

/// Adds the buckets read into `h` (empty, with the bounds the recorder
/// gives it); a value outside them or a total that overflows is refused.
fn get_hist<T: Counter + TryFrom<u64>>(r: &mut Reader, h: &mut Histogram<T>) -> Result<(), ReportError> {
    let n = r.u64()?;
    if n > (r.left() / 16) as u64 {
        return Err(ReportError::Invalid("more histogram buckets than bytes"));
    }
    let mut total = 0u64;
    for _ in 0..n {
        let (value, count) = (r.u64()?, r.u64()?);
        total = total.checked_add(count).ok_or(ReportError::Invalid("histogram counts overflow"))?;
        if count == 0 || value < h.low() || value > h.high() {
            return Err(ReportError::Invalid("a histogram bucket out of range"));
        }
        let count = T::try_from(count).map_err(|_| ReportError::Invalid("a histogram count too large"))?;
        // Each value's bucket is added to once: a repeated one could
        // overflow the counter, and `encode` never writes one.
        if h.count_at(value).as_u64() != 0 {
            return Err(ReportError::Invalid("a histogram bucket given twice"));
        }
        h.record_n(value, count).map_err(|_| ReportError::Invalid("a histogram bucket out of range"))?;
    }
    Ok(())
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u64(&mut self) -> Result<u64, ReportError> {
        let b = self.data.get(self.pos..self.pos + 8).ok_or(ReportError::Short(self.pos))?;
        self.pos += 8;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn left(&self) -> usize {
        self.data.len() - self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn recorder(events: &[(u64, u64, u16, bool)]) -> (Instant, Recorder) {
        let start = Instant::now();
        let mut r = Recorder::new(start, Duration::from_millis(100));
        for &(at_us, lat_us, status, fail) in events {
            let done = start + Duration::from_micros(at_us);
            if fail {
                r.failure(crate::Failure::Timeout, done);
            } else {
                let intended = done.checked_sub(Duration::from_micros(lat_us)).unwrap_or(start);
                r.response(intended, intended, done, status, lat_us, lat_us + 100);
            }
        }
        (start, r)
    }

    fn same(a: &Recorder, b: &Recorder) {
        assert_eq!(
            (a.responses, a.body_bytes, a.wire_bytes, a.connects),
            (b.responses, b.body_bytes, b.wire_bytes, b.connects)
        );
        assert_eq!((a.status, a.failures, a.interval()), (b.status, b.failures, b.interval()));
        assert_eq!(a.first_sent_ns, b.first_sent_ns);
        assert_eq!(a.corrected_ns, b.corrected_ns);
        assert_eq!(a.sent_ns, b.sent_ns);
        assert_eq!(a.late_ns, b.late_ns);
        assert_eq!(a.intervals.len(), b.intervals.len());
        for (x, y) in a.intervals.iter().zip(&b.intervals) {
            assert_eq!((x.responses, x.failures, x.body_bytes), (y.responses, y.failures, y.body_bytes));
            assert_eq!(x.latency_us, y.latency_us);
        }
    }

    proptest! {
        /// Bytes and back give the same recorder, and two decoded reports
        /// merge to what one recorder of both runs' requests holds.
        #[test]
        fn reports_round_trip_and_merge_exactly(
            a in proptest::collection::vec((0u64..3_000_000, 1u64..5_000_000, 100u16..600, any::<bool>()), 0..200),
            b in proptest::collection::vec((0u64..3_000_000, 1u64..5_000_000, 100u16..600, any::<bool>()), 0..200),
        ) {
            let (start, ra) = recorder(&a);
            let rep = Report { began_ns: 1_700_000_000_123_456_789, elapsed: Duration::from_millis(3001), cpu_ns: 12345, recorder: ra.clone() };
            let back = Report::decode(&rep.encode(), start).unwrap();
            prop_assert_eq!((back.began_ns, back.elapsed, back.cpu_ns), (rep.began_ns, rep.elapsed, rep.cpu_ns));
            same(&back.recorder, &ra);

            let (_, rb) = recorder(&b);
            let both: Vec<_> = a.iter().chain(&b).copied().collect();
            let (_, rboth) = recorder(&both);
            let mut merged = back.recorder;
            merged.merge(&Report::decode(&Report { recorder: rb, ..rep }.encode(), start).unwrap().recorder);
            same(&merged, &rboth);
        }

        /// Any bytes: an error or a report, never a panic.
        #[test]
        fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut data = MAGIC.to_vec();
            data.extend(bytes);
            let _ = Report::decode(&data, Instant::now());
        }
    }

    /// Found by the fuzzer: a value recorded at the histogram's bound sits
    /// in a bucket whose highest value is past it.
    #[test]
    fn a_value_at_the_histogram_s_bound_round_trips() {
        let (start, mut r) = recorder(&[(10, 5, 200, false)]);
        let high = r.corrected_ns.high();
        r.corrected_ns.record(high).unwrap();
        let high = r.intervals[0].latency_us.high();
        r.intervals[0].latency_us.record(high).unwrap();
        let bytes = Report { began_ns: 1, elapsed: Duration::from_secs(1), cpu_ns: 2, recorder: r.clone() }.encode();
        let back = Report::decode(&bytes, start).expect("what was encoded decodes");
        same(&back.recorder, &r);
    }

    #[test]
    fn damage_is_named() {
        let (start, r) = recorder(&[(10, 5, 200, false), (150_000, 9, 500, false)]);
        let bytes = Report { began_ns: 1, elapsed: Duration::from_secs(1), cpu_ns: 2, recorder: r }.encode();
        assert_eq!(Report::decode(b"nope", start).unwrap_err(), ReportError::Magic);
        assert_eq!(Report::decode(&bytes[..40], start).unwrap_err(), ReportError::Short(36));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Report::decode(&longer, start).unwrap_err(), ReportError::Invalid("bytes after the last interval"));
        // The first histogram's first bucket value (u64 number 20, from 0, after the magic), zeroed: below the histogram's lowest.
        let mut low = bytes;
        low[4 + 8 * 20..4 + 8 * 21].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(Report::decode(&low, start).unwrap_err(), ReportError::Invalid("a histogram bucket out of range"));
    }
}
