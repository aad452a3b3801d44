//! What the server knows of each agent: connection, progress, clock offset,
//! overhead; and each host's state (live, late, gone) for the cluster view.

use std::collections::BTreeMap;
use std::sync::Mutex;

use model::Timestamp;

/// A host whose last batch is older than this many batch periods (and at
/// least [`LIVE_MIN_NS`]) is late.
const LIVE_PERIODS: i64 = 3;
const LIVE_MIN_NS: i64 = 5_000_000_000;
/// A host disconnected this long is gone.
const GONE_NS: i64 = 60_000_000_000;

#[derive(Clone, Debug, Default)]
pub struct HostInfo {
    pub host: String,
    pub state: &'static str,
    pub agent_version: String,
    pub addr: String,
    pub connections: u32,
    pub connected_since_ns: i64,
    pub last_seen_ns: i64,
    pub last_batch_ns: i64,
    pub interval_ns: u64,
    pub batch_ns: u64,
    pub batches: u64,
    pub samples: u64,
    pub events: u64,
    pub wire_bytes: u64,
    pub duplicate_batches: u64,
    /// Agent clock minus server clock (ns), from the best of the last probes.
    pub clock_offset_ns: Option<i64>,
    pub rtt_ns: Option<i64>,
    /// True when |clock offset| exceeds the agent's sampling interval.
    pub clock_off: bool,
    /// The agent process's CPU time per wall second (its overhead).
    pub agent_cpu: Option<f64>,
    pub backlog_batches: Option<f64>,
    pub spool_dropped_samples: Option<f64>,
    pub spool_bytes: Option<f64>,
    cpu_last: Option<(i64, f64)>,
}

#[derive(Debug, Default)]
pub struct Hosts {
    map: Mutex<BTreeMap<String, HostInfo>>,
}

impl Hosts {
    fn with<R>(&self, host: &str, f: impl FnOnce(&mut HostInfo) -> R) -> R {
        let mut m = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let h = m.entry(host.to_owned()).or_insert_with(|| HostInfo { host: host.to_owned(), ..HostInfo::default() });
        f(h)
    }

    pub fn connected(&self, host: &str, agent_version: &str, addr: &str, interval_ns: u64, batch_ns: u64) {
        let now = Timestamp::now().as_nanos();
        self.with(host, |h| {
            h.agent_version = agent_version.to_owned();
            h.addr = addr.to_owned();
            h.connections += 1;
            h.connected_since_ns = now;
            h.last_seen_ns = now;
            h.interval_ns = interval_ns;
            h.batch_ns = batch_ns;
        });
    }

    pub fn disconnected(&self, host: &str) {
        let now = Timestamp::now().as_nanos();
        self.with(host, |h| {
            h.connections = h.connections.saturating_sub(1);
            h.last_seen_ns = now;
        });
    }

    /// A batch was stored (or recognised as a duplicate).
    pub fn batch(&self, host: &str, samples: u64, events: u64, wire_bytes: u64, duplicate: bool) {
        let now = Timestamp::now().as_nanos();
        self.with(host, |h| {
            h.last_seen_ns = now;
            h.last_batch_ns = now;
            h.wire_bytes += wire_bytes;
            if duplicate {
                h.duplicate_batches += 1;
            } else {
                h.batches += 1;
                h.samples += samples;
                h.events += events;
            }
        });
    }

    /// The agent's own figures, as found in its batches.
    pub fn agent_figures(&self, host: &str, fig: &crate::Figures) {
        self.with(host, |h| {
            if let Some((t, c)) = fig.cpu {
                if let Some((t0, c0)) = h.cpu_last
                    && t > t0
                {
                    h.agent_cpu = Some((c - c0) / ((t - t0) as f64 / 1e9));
                }
                h.cpu_last = Some((t, c));
            }
            h.backlog_batches = fig.backlog.or(h.backlog_batches);
            h.spool_dropped_samples = fig.dropped.or(h.spool_dropped_samples);
            h.spool_bytes = fig.spool_bytes.or(h.spool_bytes);
        });
    }

    /// One clock probe. NTP's clock filter, simplified: a probe counts when
    /// its round trip is at most twice the one trusted so far (less
    /// queueing, a tighter bound on the offset).
    pub fn clock(&self, host: &str, offset_ns: i64, rtt_ns: i64) {
        self.with(host, |h| {
            if h.rtt_ns.is_none_or(|best| rtt_ns <= best.saturating_mul(2)) {
                h.clock_offset_ns = Some(offset_ns);
                h.rtt_ns = Some(rtt_ns);
            }
        });
    }

    /// Every host with its state as of now.
    pub fn snapshot(&self) -> Vec<HostInfo> {
        let now = Timestamp::now().as_nanos();
        let m = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.values()
            .map(|h| {
                let mut h = h.clone();
                h.state = state(&h, now);
                h.clock_off = h.clock_offset_ns.is_some_and(|o| o.unsigned_abs() > h.interval_ns);
                h
            })
            .collect()
    }
}

fn state(h: &HostInfo, now: i64) -> &'static str {
    let live_for = (h.batch_ns as i64).saturating_mul(LIVE_PERIODS).max(LIVE_MIN_NS);
    if h.connections > 0 && now - h.last_batch_ns <= live_for {
        "live"
    } else if h.connections == 0 && now - h.last_seen_ns > GONE_NS {
        "gone"
    } else {
        "late"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_batches_and_connections() {
        let now = 1_000_000_000_000;
        let mut h = HostInfo { batch_ns: 1_000_000_000, connections: 1, last_batch_ns: now - 1, ..HostInfo::default() };
        assert_eq!(state(&h, now), "live");
        h.last_batch_ns = now - 6_000_000_000;
        assert_eq!(state(&h, now), "late");
        h.connections = 0;
        h.last_seen_ns = now - 30_000_000_000;
        assert_eq!(state(&h, now), "late");
        h.last_seen_ns = now - 61_000_000_000;
        assert_eq!(state(&h, now), "gone");
    }

    #[test]
    fn overhead_and_clock_are_reported() {
        let hosts = Hosts::default();
        hosts.connected("a", "0.1.0", "127.0.0.1:5", 100_000_000, 1_000_000_000);
        let fig = |cpu, backlog| crate::Figures { cpu: Some(cpu), backlog, ..Default::default() };
        hosts.agent_figures("a", &fig((0, 1.0), None));
        hosts.agent_figures("a", &fig((2_000_000_000, 1.02), Some(3.0)));
        hosts.clock("a", -150_000_000, 1_000_000);
        // A probe stuck in a queue (10x the round trip) does not move the offset.
        hosts.clock("a", 5_000_000_000, 10_000_000);
        let snap = hosts.snapshot();
        assert!((snap[0].agent_cpu.unwrap() - 0.01).abs() < 1e-9);
        assert_eq!(snap[0].backlog_batches, Some(3.0));
        assert!(snap[0].clock_off, "150 ms off at a 100 ms interval");
    }
}
