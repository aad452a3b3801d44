//! What a run measured: every response's latency in HDR histograms — from
//! the moment it was *meant* to be sent (coordinated omission corrected, as
//! wrk2 does: a stalled server delays the requests queued behind it, and
//! their wait counts) and from the moment it was sent — plus, per interval
//! of the run (100 ms by default), the requests, errors, bytes and a
//! latency histogram, so a peak or a stall shows instead of an average.
//! Counters are u64 throughout.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Latencies up to an hour are kept exactly (3 significant digits);
/// longer ones count as an hour.
const MAX_NS: u64 = 3_600_000_000_000;

/// Why a request got no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Connect,
    /// Reading or writing failed, or the server closed mid-response.
    Io,
    /// No whole response within the timeout.
    Timeout,
    /// The response could not be read as HTTP.
    Protocol,
}

/// Failures by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Failures {
    pub connect: u64,
    pub io: u64,
    pub timeout: u64,
    pub protocol: u64,
}

impl Failures {
    pub fn total(&self) -> u64 {
        self.connect + self.io + self.timeout + self.protocol
    }

    fn add(&mut self, o: &Failures) {
        self.connect = self.connect.saturating_add(o.connect);
        self.io = self.io.saturating_add(o.io);
        self.timeout = self.timeout.saturating_add(o.timeout);
        self.protocol = self.protocol.saturating_add(o.protocol);
    }
}

/// One interval of the run.
#[derive(Clone, Debug)]
pub struct Interval {
    /// Responses completed in it.
    pub responses: u64,
    /// Requests that failed in it.
    pub failures: u64,
    pub body_bytes: u64,
    /// Corrected latencies (µs) of its responses.
    pub latency_us: Histogram<u32>,
}

impl Interval {
    pub(crate) fn new() -> Interval {
        Interval {
            responses: 0,
            failures: 0,
            body_bytes: 0,
            latency_us: Histogram::new_with_bounds(1, MAX_NS / 1000, 2).expect("valid bounds"),
        }
    }
}

/// A run's measurements (one per worker thread, merged at the end).
#[derive(Clone, Debug)]
pub struct Recorder {
    start: Instant,
    interval: Duration,
    /// Latency from the intended send (ns): what a user waited.
    pub corrected_ns: Histogram<u64>,
    /// Latency from the actual send (ns): what most tools report.
    pub sent_ns: Histogram<u64>,
    /// How late requests left against their schedule (ns; open loop): the
    /// generator's own lateness and the queueing behind a slow response.
    pub late_ns: Histogram<u64>,
    pub responses: u64,
    /// Responses by status class: 1xx (unused) … 5xx, then anything else.
    pub status: [u64; 6],
    pub body_bytes: u64,
    pub wire_bytes: u64,
    pub failures: Failures,
    /// Connections opened.
    pub connects: u64,
    pub intervals: Vec<Interval>,
    /// When the first answered request left, ns after the start: how
    /// promptly the run began (hosts started together compare these).
    pub first_sent_ns: Option<u64>,
}

impl Recorder {
    pub fn new(start: Instant, interval: Duration) -> Recorder {
        let hist = || Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid bounds");
        Recorder {
            start,
            interval,
            corrected_ns: hist(),
            sent_ns: hist(),
            late_ns: hist(),
            responses: 0,
            status: [0; 6],
            body_bytes: 0,
            wire_bytes: 0,
            failures: Failures::default(),
            connects: 0,
            intervals: Vec::new(),
            first_sent_ns: None,
        }
    }

    /// The resolution of [`Recorder::intervals`].
    pub fn interval(&self) -> Duration {
        self.interval
    }

    fn interval_at(&mut self, t: Instant) -> &mut Interval {
        let k = (t.saturating_duration_since(self.start).as_nanos() / self.interval.as_nanos().max(1)) as usize;
        if self.intervals.len() <= k {
            self.intervals.resize_with(k + 1, Interval::new);
        }
        &mut self.intervals[k]
    }

    /// A response meant to leave at `intended`, sent at `sent`, read whole at
    /// `done`.
    pub fn response(&mut self, intended: Instant, sent: Instant, done: Instant, status: u16, body: u64, wire: u64) {
        let corrected = done.saturating_duration_since(intended).as_nanos() as u64;
        let from_sent = done.saturating_duration_since(sent).as_nanos() as u64;
        self.corrected_ns.saturating_record(corrected.max(1));
        self.sent_ns.saturating_record(from_sent.max(1));
        self.late_ns.saturating_record((sent.saturating_duration_since(intended).as_nanos() as u64).max(1));
        let after_start = sent.saturating_duration_since(self.start).as_nanos() as u64;
        self.first_sent_ns = Some(self.first_sent_ns.map_or(after_start, |f| f.min(after_start)));
        self.responses += 1;
        let class = (status / 100) as usize;
        self.status[if (1..=5).contains(&class) { class - 1 } else { 5 }] += 1;
        self.body_bytes += body;
        self.wire_bytes += wire;
        let i = self.interval_at(done);
        i.responses += 1;
        i.body_bytes += body;
        i.latency_us.saturating_record((corrected / 1000).max(1));
    }

    pub fn failure(&mut self, kind: Failure, at: Instant) {
        match kind {
            Failure::Connect => self.failures.connect += 1,
            Failure::Io => self.failures.io += 1,
            Failure::Timeout => self.failures.timeout += 1,
            Failure::Protocol => self.failures.protocol += 1,
        }
        self.interval_at(at).failures += 1;
    }

    /// Adds `o` (same start and interval) to this one. Counters saturate
    /// (as the histograms' own do): a report from another host is outside
    /// bytes, and no sum of them may wrap.
    pub fn merge(&mut self, o: &Recorder) {
        self.corrected_ns.add(&o.corrected_ns).expect("same bounds");
        self.sent_ns.add(&o.sent_ns).expect("same bounds");
        self.late_ns.add(&o.late_ns).expect("same bounds");
        self.responses = self.responses.saturating_add(o.responses);
        for (a, b) in self.status.iter_mut().zip(o.status) {
            *a = a.saturating_add(b);
        }
        self.body_bytes = self.body_bytes.saturating_add(o.body_bytes);
        self.wire_bytes = self.wire_bytes.saturating_add(o.wire_bytes);
        self.failures.add(&o.failures);
        self.connects = self.connects.saturating_add(o.connects);
        self.first_sent_ns = match (self.first_sent_ns, o.first_sent_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.intervals.len() < o.intervals.len() {
            self.intervals.resize_with(o.intervals.len(), Interval::new);
        }
        for (a, b) in self.intervals.iter_mut().zip(&o.intervals) {
            a.responses = a.responses.saturating_add(b.responses);
            a.failures = a.failures.saturating_add(b.failures);
            a.body_bytes = a.body_bytes.saturating_add(b.body_bytes);
            a.latency_us.add(&b.latency_us).expect("same bounds");
        }
    }
}

/// Percentiles of a latency histogram, in µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Summary {
    /// Of a histogram of ns.
    pub fn of_ns(h: &Histogram<u64>) -> Summary {
        let us = |v: u64| v as f64 / 1000.0;
        Summary {
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Open loop at 1,000 requests a second against a server that answers
    /// in 100 µs but stalls for one second once: the client meant to send
    /// a thousand requests in that second. Measured from the send (one
    /// connection waits, so it sends nothing meanwhile) one response is
    /// slow; measured from the intended send, the thousand queued behind
    /// the stall are, with waits spread from 0 to 1 s.
    #[test]
    fn a_stall_shows_in_corrected_latency() {
        let start = Instant::now();
        let mut r = Recorder::new(start, Duration::from_millis(100));
        let ms = |n: u64| Duration::from_micros(n * 1000);
        let mut free = start; // when the connection can send next
        for i in 0..10_000u64 {
            let intended = start + ms(i);
            let sent = intended.max(free);
            let service = if i == 5_000 { ms(1000) } else { Duration::from_micros(100) };
            let done = sent + service;
            r.response(intended, sent, done, 200, 10, 50);
            free = done;
        }
        let sent = Summary::of_ns(&r.sent_ns);
        let corrected = Summary::of_ns(&r.corrected_ns);
        assert!((99.0..=101.0).contains(&sent.p99), "{sent:?}");
        assert!(sent.max > 999_000.0);
        // About 1,000 of 10,000 waited: the p99 is most of a second.
        assert!(corrected.p99 > 800_000.0, "{corrected:?}");
        // Most never met the stall.
        assert!((99.0..=101.0).contains(&corrected.p50), "{corrected:?}");
        // The stall's intervals: nothing completes for a second, then a burst.
        let per: Vec<u64> = r.intervals.iter().map(|i| i.responses).collect();
        assert_eq!(per[..50].iter().sum::<u64>(), 5_000);
        assert_eq!(per[51..60].iter().sum::<u64>(), 0, "{per:?}");
        assert!(per[60] > 900, "{per:?}");
        assert_eq!(r.responses, 10_000);
        assert_eq!(r.status[1], 10_000);
        assert_eq!((r.body_bytes, r.wire_bytes), (100_000, 500_000));
    }

    #[test]
    fn merged_recorders_add_up() {
        let start = Instant::now();
        let mut a = Recorder::new(start, Duration::from_millis(100));
        let mut b = a.clone();
        a.response(start, start, start + Duration::from_millis(1), 200, 1, 2);
        b.response(start, start, start + Duration::from_millis(250), 503, 3, 4);
        b.failure(Failure::Timeout, start + Duration::from_millis(350));
        a.merge(&b);
        assert_eq!((a.responses, a.status[1], a.status[4], a.body_bytes, a.wire_bytes), (2, 1, 1, 4, 6));
        assert_eq!(a.failures.total(), 1);
        let per: Vec<(u64, u64)> = a.intervals.iter().map(|i| (i.responses, i.failures)).collect();
        assert_eq!(per, [(1, 0), (0, 0), (1, 0), (0, 1)]);
        assert_eq!(a.corrected_ns.len(), 2);
    }
}
