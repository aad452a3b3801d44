//! The glogger cycle (`seeds/002_931bea2baf348364.txt`, section 3), for
//! thousands of targets:
//!
//! 1. At each interval boundary, send one GET per target — all its OIDs in one
//!    PDU, pre-encoded at start-up with only the request id patched — through
//!    a few shared UDP sockets, `sendmmsg` in batches, without waiting.
//! 2. Collect responses with `recvmmsg` until every target answered or the
//!    interval's time slice ends. A response counts only if it comes from the
//!    target's address *and* carries the request id of this interval, and its
//!    OIDs are the ones asked. Values are recorded as they arrive, stamped
//!    with the boundary (the round-trip time is its own series).
//! 3. A target silent at the end of the slice gets `kansoku_snmp_up 0` for
//!    the interval. No retries inside a slice.
//! 4. A reply that arrives after its slice is read at the start of the next
//!    interval and counted as late, never recorded as a value.
//!
//! Every reply not recorded is counted by reason (late, duplicate, wrong
//! request id, unknown source, malformed), the kernel's receive-buffer drops
//! are read from `SO_RXQ_OVFL`, and per-target faults are stored as sparse
//! `kansoku_snmp_fault{target,kind}` samples.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use clock::schedule::{Wake, after_round, next_boundary, sleep_until};
use clock::{monotonic_ns, realtime_ns, thread_cpu_ns};
use model::report::Figure;
use model::{Batch, SeriesKey, Timestamp};
use nix::errno::Errno;
use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg, setsockopt,
    sockopt,
};
use rustix::event::{PollFd, PollFlags};

use crate::message::{self, PduKind, PreEncoded, REQUEST_ID_MIN, REQUEST_ID_SPAN, Value, Version, error_status_name};
use crate::mib;
use crate::plan::{Discovered, PlannedOid, PlannedTarget, discover, discovered_oids};
use crate::series::Series;
use crate::targets::TargetSpec;
use crate::track::{self, OidTrack, Raw};

/// Datagrams per `sendmmsg`/`recvmmsg` call.
const MMSG: usize = 64;
/// Largest response we accept (net-snmp's default maximum message size).
const DATAGRAM_MAX: usize = 65_507;
/// Receive buffer per socket: a burst of 10,000 answers must fit while the
/// poller is still sending.
const RECV_BUFFER_BYTES: usize = 16 << 20;
/// Update periods are written when they change and at least this often.
const PERIOD_REPEAT_NS: i64 = 60_000_000_000;

#[derive(Debug, Clone)]
pub struct PollerConfig {
    pub interval: Duration,
    /// Time slice after the boundary in which answers count.
    pub timeout: Duration,
    /// Shared UDP sockets per address family.
    pub sockets: usize,
    /// After a wake-up, let answers accumulate this long before reading
    /// again: fewer wake-ups and larger `recvmmsg` batches. Arrival times
    /// come from kernel timestamps, so round-trip and completion times stay
    /// exact.
    pub coalesce: Duration,
    /// How often targets whose discovery failed are tried again (in the
    /// background; the cycle adopts the result at its next interval).
    pub rediscover_every: Duration,
}

impl PollerConfig {
    pub fn new(interval: Duration) -> PollerConfig {
        PollerConfig {
            interval,
            timeout: interval * 9 / 10,
            sockets: 4,
            coalesce: (interval / 50).min(Duration::from_millis(1)),
            rediscover_every: Duration::from_secs(60),
        }
    }
}

/// Live counters, shared with the HTTP status endpoint.
#[derive(Debug, Default)]
pub struct PollerStats {
    pub targets: AtomicU64,
    pub intervals: AtomicU64,
    pub answers: AtomicU64,
    pub silences: AtomicU64,
    pub late: AtomicU64,
    pub duplicates: AtomicU64,
    pub wrong_request_id: AtomicU64,
    pub unknown_source: AtomicU64,
    pub malformed: AtomicU64,
    pub pdu_errors: AtomicU64,
    pub kernel_drops: AtomicU64,
    pub send_errors: AtomicU64,
    pub restarts: AtomicU64,
    pub stale_values: AtomicU64,
    pub missed_intervals: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub last_answered: AtomicU64,
    pub last_send_ns: AtomicI64,
    pub last_complete_ns: AtomicI64,
    pub last_cpu_ns: AtomicI64,
}

const REPORT_LEN: usize = 20;

impl PollerStats {
    /// The poller's figures, named once: `snmp` in `/api/v1/status`,
    /// `kansoku_snmp_*` in `/metrics`, and the series the poller stores of
    /// itself every interval (in this order; the round's CPU time last, so
    /// that it covers the rest).
    pub fn report(&self) -> [Figure; REPORT_LEN] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let secs = |a: &AtomicI64| (a.load(Ordering::Relaxed) / 1000) as f64 / 1e6;
        [
            Figure::gauge("targets", n(&self.targets)),
            Figure::gauge("answered", n(&self.last_answered)),
            Figure::measure("send_seconds", secs(&self.last_send_ns)),
            Figure::measure("complete_seconds", secs(&self.last_complete_ns)),
            Figure::counter("intervals", n(&self.intervals)),
            Figure::counter("answers", n(&self.answers)),
            Figure::counter("silences", n(&self.silences)),
            Figure::counter("late", n(&self.late)),
            Figure::counter("duplicates", n(&self.duplicates)),
            Figure::counter("unmatched", n(&self.wrong_request_id)).with_label("reason", "wrong_request_id"),
            Figure::counter("unmatched", n(&self.unknown_source)).with_label("reason", "unknown_source"),
            Figure::counter("malformed", n(&self.malformed)),
            Figure::counter("pdu_errors", n(&self.pdu_errors)),
            Figure::counter("kernel_drops", n(&self.kernel_drops)),
            Figure::counter("send_errors", n(&self.send_errors)),
            Figure::counter("restarts", n(&self.restarts)),
            Figure::counter("stale_values", n(&self.stale_values)),
            Figure::counter("missed_intervals", n(&self.missed_intervals)),
            Figure::counter("dropped_batches", n(&self.dropped_batches)),
            Figure::measure("round_cpu_seconds", secs(&self.last_cpu_ns)),
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Late = 0,
    Duplicate = 1,
    WrongRequestId,
    Malformed,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Late => "late",
            Fault::Duplicate => "duplicate",
            Fault::WrongRequestId => "wrong_request_id",
            Fault::Malformed => "malformed",
        }
    }
}

#[derive(Debug)]
struct TargetOid {
    bytes: Vec<u8>,
    /// `ifHCInOctets.2`: the `oid` label of its error and period series.
    display: String,
    key: SeriesKey,
    id_value: u32,
    id_increase: Option<u32>,
    id_period: Option<u32>,
    period_written_ns: i64,
    track: OidTrack,
    /// Why it was dropped from the request (v1 noSuchName fails the whole PDU).
    removed: Option<&'static str>,
    /// `kansoku_snmp_error` series made so far, by error.
    error_ids: Vec<(&'static str, u32)>,
    /// The last answer for it: value, or the error in its place; and whether
    /// the value was an old reading.
    last: Option<Result<f64, &'static str>>,
    last_stale: bool,
}

impl TargetOid {
    fn new(o: &PlannedOid, target_labels: &[(String, String)], series: &mut Series) -> TargetOid {
        let lab = target_labels.iter().chain(&o.labels).map(|(k, v)| (k.as_str(), v.as_str()));
        let key = SeriesKey::new(o.metric.as_str(), lab);
        TargetOid {
            bytes: o.oid.to_bytes(),
            display: mib::display(&o.oid),
            id_value: series.add(key.clone()),
            key,
            id_increase: None,
            id_period: None,
            period_written_ns: i64::MIN,
            track: OidTrack::default(),
            removed: None,
            error_ids: Vec::new(),
            last: None,
            last_stale: false,
        }
    }

    fn error_id(&mut self, series: &mut Series, labels: &[(String, String)], error: &'static str) -> u32 {
        if let Some(&(_, id)) = self.error_ids.iter().find(|(e, _)| *e == error) {
            return id;
        }
        let id = series.get_or_add(error_key(labels, &self.display, error));
        self.error_ids.push((error, id));
        id
    }
}

#[derive(Debug)]
struct Target {
    addr: SocketAddr,
    sockaddr: SockaddrStorage,
    version: Version,
    community: Vec<u8>,
    labels: Vec<(String, String)>,
    request: PreEncoded,
    oids: Vec<TargetOid>,
    /// Indexes into `oids` in the request, in request order.
    active: Vec<usize>,
    /// The active OIDs' encodings, back to back, and each one's range: what
    /// a response must echo, in one allocation.
    expect: Vec<u8>,
    expect_at: Vec<(u32, u32)>,
    /// The first active OID is sysUpTime.0.
    uptime_first: bool,
    rid: i32,
    prev_rid: i32,
    answered: bool,
    prev_answered: bool,
    sent_ns: i64,
    last_rtt_ns: Option<i64>,
    uptime: Option<u32>,
    /// `kansoku_snmp_fault` series made so far, and replies seen this
    /// interval, by [`Fault`].
    fault_ids: [Option<u32>; 4],
    faults: [u32; 4],
    id_up: u32,
    id_rtt: u32,
    id_stale: u32,
}

impl Target {
    fn reencode(&mut self) {
        let oids: Vec<Vec<u8>> = self.active.iter().map(|&i| self.oids[i].bytes.clone()).collect();
        self.request = PreEncoded::new(self.version, &self.community, PduKind::Get, &oids, (0, 0));
        self.expect.clear();
        self.expect_at.clear();
        for o in &oids {
            let start = self.expect.len() as u32;
            self.expect.extend_from_slice(o);
            self.expect_at.push((start, self.expect.len() as u32));
        }
        self.uptime_first = oids.first().is_some_and(|o| o == SYS_UPTIME_BYTES);
    }

    fn key(&self, name: &str, extra: &[(&str, &str)]) -> SeriesKey {
        let labels = self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(extra.iter().copied());
        SeriesKey::new(name, labels)
    }
}

#[derive(Debug)]
pub struct Poller {
    cfg: PollerConfig,
    interval_ns: i64,
    targets: Vec<Target>,
    by_addr: HashMap<SocketAddr, usize, BuildHasherDefault<AddrHasher>>,
    socks: Vec<UdpSocket>,
    /// Target indexes per socket.
    sock_targets: Vec<Vec<usize>>,
    series: Series,
    /// Series ids of the poller's own figures, in [`PollerStats::report`]'s order.
    own: Vec<u32>,
    stats: Arc<PollerStats>,
    seq: u64,
    rid_base: u64,
    drops_seen: Vec<u32>,
    bufs: Vec<Vec<u8>>,
    /// The answer being recorded, parsed.
    parsed: Vec<Parsed>,
    /// (length, source, kernel arrival time) of the datagrams just read.
    received: Vec<(usize, Option<SocketAddr>, i64)>,
    /// Answers this interval and the wall time of the last one.
    n_answered: usize,
    last_answer_ns: i64,
    /// Discoveries that succeeded late: (target index, what was found).
    rediscovered: Option<Receiver<(usize, Discovered)>>,
    rediscover_stop: Arc<AtomicBool>,
    views: Receiver<SyncSender<Arc<Vec<TargetView>>>>,
    views_tx: SyncSender<SyncSender<Arc<Vec<TargetView>>>>,
}

/// One target as of its last interval, for `/api/v1/snmp/targets`.
#[derive(Debug, Clone)]
pub struct TargetView {
    pub target: String,
    pub address: String,
    pub labels: Vec<(String, String)>,
    /// Answered in the last interval.
    pub up: bool,
    pub rtt_seconds: Option<f64>,
    pub oids: Vec<OidView>,
}

#[derive(Debug, Clone)]
pub struct OidView {
    /// `ifHCInOctets.2`, or the dotted number.
    pub oid: String,
    pub series: String,
    /// The last value answered (as stored), if the last answer had one.
    pub value: Option<f64>,
    /// What came instead of a value (`noSuchInstance`, v1 `noSuchName`, ...).
    pub error: Option<&'static str>,
    /// The agent's effective update period, once two changes were seen.
    pub update_period_seconds: Option<f64>,
    /// The last value repeated an old reading (see docs/snmp.md, Staleness).
    pub stale: bool,
}

/// Asks a running poller for its targets' state; answered at the end of the
/// poller's current interval.
#[derive(Debug, Clone)]
pub struct Views(SyncSender<SyncSender<Arc<Vec<TargetView>>>>);

/// Requests for the targets' view waiting for the poller's next interval, at
/// most; past it `Views::get` answers None at once.
const VIEW_REQUESTS_MAX: usize = 64;

impl Views {
    /// Waits up to `limit` for the poller's answer; None if it stopped, or
    /// if [`VIEW_REQUESTS_MAX`] requests already wait.
    pub fn get(&self, limit: Duration) -> Option<Arc<Vec<TargetView>>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.0.try_send(tx).ok()?;
        rx.recv_timeout(limit).ok()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.rediscover_stop.store(true, Ordering::Relaxed);
    }
}

impl Poller {
    pub fn new(cfg: PollerConfig, plan: Vec<PlannedTarget>) -> io::Result<Poller> {
        let n_socks = cfg.sockets.max(1);
        let any_v6 = plan.iter().any(|t| t.spec.address.is_ipv6());
        let mut socks = Vec::new();
        for family in [Some("0.0.0.0:0"), any_v6.then_some("[::]:0")].into_iter().flatten() {
            for _ in 0..n_socks {
                let s = UdpSocket::bind(family)?;
                s.set_nonblocking(true)?;
                // Beyond net.core.rmem_max needs CAP_NET_ADMIN; else take the max.
                if setsockopt(&s, sockopt::RcvBufForce, &RECV_BUFFER_BYTES).is_err() {
                    setsockopt(&s, sockopt::RcvBuf, &RECV_BUFFER_BYTES).map_err(io::Error::from)?;
                }
                setsockopt(&s, sockopt::RxqOvfl, &1).map_err(io::Error::from)?;
                setsockopt(&s, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)?;
                socks.push(s);
            }
        }
        let mut series = Series::default();
        let mut targets = Vec::with_capacity(plan.len());
        let mut undiscovered = Vec::new();
        let mut by_addr = HashMap::with_capacity_and_hasher(plan.len(), BuildHasherDefault::default());
        let mut sock_targets = vec![Vec::new(); socks.len()];
        for (i, p) in plan.into_iter().enumerate() {
            if p.undiscovered {
                undiscovered.push((i, p.spec.clone()));
            }
            let spec = p.spec;
            let mut labels = vec![("target".to_owned(), spec.name.clone())];
            labels.extend(spec.labels.iter().cloned());
            let family_base = if spec.address.is_ipv6() { n_socks } else { 0 };
            let sock = family_base + i % n_socks;
            sock_targets[sock].push(i);
            if by_addr.insert(spec.address, i).is_some() {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is a target twice", spec.address)));
            }
            let oids: Vec<TargetOid> = p.oids.iter().map(|o| TargetOid::new(o, &labels, &mut series)).collect();
            let mut t = Target {
                addr: spec.address,
                sockaddr: SockaddrStorage::from(spec.address),
                version: spec.version,
                community: spec.community.into_bytes(),
                labels,
                request: PreEncoded::new(Version::V1, b"", PduKind::Get, &[], (0, 0)),
                active: (0..oids.len()).collect(),
                expect: Vec::new(),
                expect_at: Vec::new(),
                uptime_first: false,
                oids,
                rid: 0,
                prev_rid: 0,
                answered: false,
                prev_answered: false,
                sent_ns: 0,
                last_rtt_ns: None,
                uptime: None,
                fault_ids: [None; 4],
                faults: [0; 4],
                id_up: 0,
                id_rtt: 0,
                id_stale: 0,
            };
            t.reencode();
            t.id_up = series.add(t.key("kansoku_snmp_up", &[]));
            t.id_rtt = series.add(t.key("kansoku_snmp_rtt_seconds", &[]));
            t.id_stale = series.add(t.key("kansoku_snmp_stale_values", &[]));
            targets.push(t);
        }
        // The poller's own series: its report's figures, in the report's order.
        let own = PollerStats::default()
            .report()
            .iter()
            .map(|f| series.add(SeriesKey::new(f.metric("kansoku_snmp"), f.label)))
            .collect();
        let stats = Arc::new(PollerStats::default());
        stats.targets.store(targets.len() as u64, Ordering::Relaxed);
        let drops_seen = vec![0; socks.len()];
        let (views_tx, views_rx) = std::sync::mpsc::sync_channel(VIEW_REQUESTS_MAX);
        let rediscover_stop = Arc::new(AtomicBool::new(false));
        let rediscovered = (!undiscovered.is_empty())
            .then(|| spawn_rediscovery(undiscovered, cfg.rediscover_every, Arc::clone(&rediscover_stop)))
            .transpose()?;
        Ok(Poller {
            interval_ns: cfg.interval.as_nanos() as i64,
            cfg,
            targets,
            by_addr,
            socks,
            sock_targets,
            series,
            own,
            stats,
            seq: 0,
            rid_base: (realtime_ns() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) % REQUEST_ID_SPAN as u64,
            drops_seen,
            bufs: vec![vec![0; DATAGRAM_MAX]; MMSG],
            received: Vec::with_capacity(MMSG),
            parsed: Vec::new(),
            n_answered: 0,
            last_answer_ns: 0,
            rediscovered,
            rediscover_stop,
            views: views_rx,
            views_tx,
        })
    }

    /// A handle to ask the running poller for [`TargetView`]s.
    pub fn views(&self) -> Views {
        Views(self.views_tx.clone())
    }

    fn answer_views(&mut self) {
        let asks: Vec<_> = self.views.try_iter().collect();
        if asks.is_empty() {
            return;
        }
        let views: Arc<Vec<TargetView>> = Arc::new(
            self.targets
                .iter()
                .map(|t| TargetView {
                    target: t.labels[0].1.clone(),
                    address: t.addr.to_string(),
                    labels: t.labels[1..].to_vec(),
                    up: t.answered,
                    rtt_seconds: t.last_rtt_ns.map(|n| n as f64 / 1e9),
                    oids: t
                        .oids
                        .iter()
                        .map(|o| OidView {
                            oid: o.display.clone(),
                            series: o.key.to_string(),
                            value: o.last.and_then(Result::ok),
                            error: o.removed.or(o.last.and_then(Result::err)),
                            update_period_seconds: o.track.period_ns().map(|p| p as f64 / 1e9),
                            stale: o.last_stale,
                        })
                        .collect(),
                })
                .collect(),
        );
        for ask in asks {
            let _ = ask.try_send(Arc::clone(&views));
        }
    }

    /// Adopts a late discovery: the target's default set replaces its
    /// minimal one; OIDs it already polled keep their series and state.
    fn adopt(&mut self, ti: usize, found: &Discovered) {
        let t = &mut self.targets[ti];
        let planned = discovered_oids(t.version, found);
        let mut old: Vec<Option<TargetOid>> = std::mem::take(&mut t.oids).into_iter().map(Some).collect();
        let mut oids = Vec::with_capacity(planned.len());
        for p in &planned {
            let bytes = p.oid.to_bytes();
            let kept = old.iter_mut().find(|o| o.as_ref().is_some_and(|o| o.bytes == bytes)).and_then(Option::take);
            oids.push(kept.unwrap_or_else(|| TargetOid::new(p, &t.labels, &mut self.series)));
        }
        t.oids = oids;
        t.active = (0..t.oids.len()).collect();
        t.reencode();
        t.request.set_request_id(t.rid);
        tracing::info!(
            "snmp: {}: discovered {} interfaces and {} disks; polling {} OIDs",
            t.addr,
            found.interfaces.len(),
            found.disks.len(),
            t.oids.len()
        );
    }

    pub fn stats(&self) -> Arc<PollerStats> {
        Arc::clone(&self.stats)
    }

    pub fn n_targets(&self) -> usize {
        self.targets.len()
    }

    pub fn n_series(&self) -> usize {
        self.series.len()
    }

    /// One interval: send, collect until all answered or the slice ends,
    /// record. Returns the interval's batch, stamped with `boundary_ns`.
    pub fn poll_once(&mut self, boundary_ns: i64) -> Batch {
        let cpu0 = thread_cpu_ns();
        let mono0 = monotonic_ns();
        let deadline_mono = mono0 + (boundary_ns + self.cfg.timeout.as_nanos() as i64 - realtime_ns());
        let mut batch = Batch::new(Timestamp(boundary_ns));
        batch.points.reserve(self.series.len());
        let cmsg = nix::cmsg_space!(u32, nix::libc::timespec);
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(MMSG, Some(cmsg));
        let late_discoveries: Vec<_> = self.rediscovered.as_ref().map(|rx| rx.try_iter().collect()).unwrap_or_default();
        for (ti, found) in late_discoveries {
            self.adopt(ti, &found);
        }
        // Whatever arrived since the last slice ended is late (or worse).
        let all: Vec<usize> = (0..self.socks.len()).collect();
        self.receive(&mut hdrs, &all, &mut batch, boundary_ns, true);

        self.seq += 1;
        let n = self.targets.len() as u64;
        for (i, t) in self.targets.iter_mut().enumerate() {
            t.prev_rid = t.rid;
            t.prev_answered = t.answered;
            t.answered = false;
            let k = (self.rid_base + self.seq * n + i as u64) % REQUEST_ID_SPAN as u64;
            t.rid = REQUEST_ID_MIN + k as i32;
            t.request.set_request_id(t.rid);
        }
        self.n_answered = 0;
        self.last_answer_ns = boundary_ns;
        self.send_all(deadline_mono);
        let send_ns = realtime_ns() - boundary_ns;

        let coalesce_ns = self.cfg.coalesce.as_nanos() as i64;
        let mut ready = Vec::with_capacity(self.socks.len());
        while self.n_answered < self.targets.len() {
            let left = deadline_mono - monotonic_ns();
            if left <= 0 {
                break;
            }
            ready.clear();
            {
                let mut fds: Vec<PollFd<'_>> = self.socks.iter().map(|s| PollFd::new(s, PollFlags::IN)).collect();
                let ts = rustix::time::Timespec { tv_sec: left / 1_000_000_000, tv_nsec: left % 1_000_000_000 };
                match rustix::event::poll(&mut fds, Some(&ts)) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::error!("poll on SNMP sockets: {e}");
                        break;
                    }
                }
                ready.extend(fds.iter().enumerate().filter(|(_, f)| !f.revents().is_empty()).map(|(i, _)| i));
            }
            // Let more answers queue up, unless that would cross the deadline.
            let pause = coalesce_ns.min(deadline_mono - monotonic_ns());
            if pause > 0 {
                std::thread::sleep(Duration::from_nanos(pause as u64));
                ready.clear();
                ready.extend(0..self.socks.len());
            }
            self.receive(&mut hdrs, &ready, &mut batch, boundary_ns, false);
        }

        let mut silent = 0u64;
        for t in &mut self.targets {
            if !t.answered {
                silent += 1;
                self.series.push(&mut batch, t.id_up, 0.0);
            }
            if t.faults != [0; 4] {
                write_faults(&mut self.series, &mut batch, t);
            }
        }
        let st = &self.stats;
        st.silences.fetch_add(silent, Ordering::Relaxed);
        st.answers.fetch_add(self.n_answered as u64, Ordering::Relaxed);
        st.intervals.fetch_add(1, Ordering::Relaxed);
        st.last_answered.store(self.n_answered as u64, Ordering::Relaxed);
        let complete_ns =
            if silent > 0 { self.cfg.timeout.as_nanos() as i64 } else { self.last_answer_ns - boundary_ns };
        st.last_send_ns.store(send_ns, Ordering::Relaxed);
        st.last_complete_ns.store(complete_ns, Ordering::Relaxed);
        // CPU last, so it covers everything else; it is the round's own cost.
        let (own, cpu_id) = self.own.split_at(self.own.len() - 1);
        for (id, f) in own.iter().zip(st.report()) {
            self.series.push(&mut batch, *id, f.as_f64());
        }
        st.last_cpu_ns.store(thread_cpu_ns() - cpu0, Ordering::Relaxed);
        self.series.push(&mut batch, cpu_id[0], st.report()[REPORT_LEN - 1].as_f64());
        // Outside the round's CPU figure: only when someone asks.
        self.answer_views();
        batch
    }

    fn send_all(&mut self, deadline_mono: i64) {
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(MMSG, None);
        let no_cmsgs: [ControlMessage<'_>; 0] = [];
        for (s, members) in self.sock_targets.iter().enumerate() {
            let fd = self.socks[s].as_raw_fd();
            let mut at = 0;
            while at < members.len() {
                let chunk = &members[at..(at + MMSG).min(members.len())];
                let slices: Vec<[IoSlice<'_>; 1]> =
                    chunk.iter().map(|&i| [IoSlice::new(self.targets[i].request.bytes())]).collect();
                let addrs: Vec<Option<SockaddrStorage>> =
                    chunk.iter().map(|&i| Some(self.targets[i].sockaddr)).collect();
                let now = realtime_ns();
                match sendmmsg(fd, &mut hdrs, slices.iter(), &addrs, no_cmsgs, MsgFlags::MSG_DONTWAIT) {
                    Ok(results) => {
                        let sent = results.count().max(1).min(chunk.len());
                        for &i in &chunk[..sent] {
                            self.targets[i].sent_ns = now;
                        }
                        at += sent;
                    }
                    Err(Errno::EAGAIN) => {
                        // Send buffer full: wait for room, within the slice.
                        let left = deadline_mono - monotonic_ns();
                        if left <= 0 {
                            let rest = (members.len() - at) as u64;
                            self.stats.send_errors.fetch_add(rest, Ordering::Relaxed);
                            break;
                        }
                        let mut fds = [PollFd::new(&self.socks[s], PollFlags::OUT)];
                        let ts = rustix::time::Timespec { tv_sec: 0, tv_nsec: left.min(10_000_000) };
                        let _ = rustix::event::poll(&mut fds, Some(&ts));
                    }
                    Err(Errno::EINTR) => {}
                    Err(e) => {
                        // The first datagram of the chunk failed (unreachable
                        // network, ...): count it, go on with the rest.
                        let t = &self.targets[chunk[0]];
                        if self.stats.send_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            tracing::warn!(
                                "SNMP send to {} failed: {e} (counted in kansoku_snmp_send_errors_total)",
                                t.addr
                            );
                        }
                        at += 1;
                    }
                }
            }
        }
    }

    /// Reads every datagram waiting on every socket and handles it.
    fn receive(
        &mut self,
        hdrs: &mut MultiHeaders<SockaddrStorage>,
        socks: &[usize],
        batch: &mut Batch,
        boundary_ns: i64,
        draining: bool,
    ) {
        for &s in socks {
            loop {
                let got = recv_some(&self.socks[s], hdrs, &mut self.bufs, &mut self.received, &mut self.drops_seen[s]);
                let n = match got {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!("SNMP receive: {e}");
                        0
                    }
                };
                for k in 0..self.received.len() {
                    let (len, from, arrived_ns) = self.received[k];
                    self.handle(k, len, from, arrived_ns, batch, boundary_ns, draining);
                }
                if n < MMSG {
                    break;
                }
            }
        }
        let drops: u64 = self.drops_seen.iter().map(|&d| d as u64).sum();
        self.stats.kernel_drops.store(drops, Ordering::Relaxed);
    }

    #[allow(clippy::too_many_arguments)]
    fn handle(
        &mut self,
        buf: usize,
        len: usize,
        from: Option<SocketAddr>,
        arrived_ns: i64,
        batch: &mut Batch,
        t_ns: i64,
        draining: bool,
    ) {
        let Some(&ti) = from.as_ref().and_then(|a| self.by_addr.get(a)) else {
            self.stats.unknown_source.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let datagram = &self.bufs[buf][..len];
        let t = &mut self.targets[ti];
        // Counted now, written once per interval with the count (see `poll_once`).
        let fault = |_: &mut Series, _: &mut Batch, stats: &PollerStats, t: &mut Target, f: Fault| {
            let counter = match f {
                Fault::Late => &stats.late,
                Fault::Duplicate => &stats.duplicates,
                Fault::WrongRequestId => &stats.wrong_request_id,
                Fault::Malformed => &stats.malformed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            t.faults[f as usize] += 1;
        };
        let Ok((h, vbs)) = message::decode(datagram) else {
            return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
        };
        if h.kind != PduKind::Response {
            return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
        }
        let current = h.request_id == t.rid;
        if draining || !current {
            let f = if current && t.answered || h.request_id == t.prev_rid && t.prev_answered && !draining {
                Fault::Duplicate
            } else if current || h.request_id == t.prev_rid {
                Fault::Late
            } else {
                Fault::WrongRequestId
            };
            return fault(&mut self.series, batch, &self.stats, t, f);
        }
        if t.answered {
            return fault(&mut self.series, batch, &self.stats, t, Fault::Duplicate);
        }
        // Check and parse the whole answer before recording any of it: one
        // pass, OIDs compared with the request's, values made 'static.
        let parsed = &mut self.parsed;
        parsed.clear();
        if h.error_status == 0 {
            for (k, vb) in vbs.enumerate() {
                let Some(expect) = t.expect_at.get(k).map(|&(a, b)| &t.expect[a as usize..b as usize]) else {
                    return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
                };
                match vb {
                    Ok(vb) if same_bytes(expect, vb.oid.0) => parsed.push(Parsed::of(&vb.value)),
                    _ => return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed),
                }
            }
            if parsed.len() != t.active.len() {
                return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
            }
        }
        t.answered = true;
        self.n_answered += 1;
        self.last_answer_ns = self.last_answer_ns.max(arrived_ns);
        let series = &mut self.series;
        series.push(batch, t.id_up, 1.0);
        let rtt_ns = (arrived_ns - t.sent_ns).max(0);
        t.last_rtt_ns = Some(rtt_ns);
        series.push(batch, t.id_rtt, (rtt_ns / 1000) as f64 / 1e6);
        for o in t.oids.iter_mut() {
            if let Some(error) = o.removed {
                let id = o.error_id(series, &t.labels, error);
                series.push(batch, id, 1.0);
            }
        }
        if h.error_status != 0 {
            self.stats.pdu_errors.fetch_add(1, Ordering::Relaxed);
            pdu_error(series, batch, t, h.error_status, h.error_index);
            return;
        }

        // sysUpTime going backwards: the agent restarted, counters with it.
        let mut restarted = false;
        if let (Some(Parsed::Number(Raw::Other(bits), _)), true) = (parsed.first(), t.uptime_first) {
            let now = f64::from_bits(*bits) as u32;
            restarted = t.uptime.is_some_and(|prev| track::restarted(prev, now));
            t.uptime = Some(now);
        }
        if restarted {
            self.stats.restarts.fetch_add(1, Ordering::Relaxed);
            let id = series.get_or_add(t.key("kansoku_snmp_restart", &[]));
            series.push(batch, id, 1.0);
        }
        let mut stale = 0u32;
        for (k, p) in parsed.iter().enumerate() {
            let labels = &t.labels;
            let o = &mut t.oids[t.active[k]];
            let (raw, value) = match *p {
                Parsed::Number(raw, value) => (raw, value),
                Parsed::Missing(error) => {
                    o.last = Some(Err(error));
                    let id = o.error_id(series, labels, error);
                    series.push(batch, id, 1.0);
                    continue;
                }
            };
            series.push(batch, o.id_value, value);
            let obs = o.track.observe(raw, t_ns, restarted, self.interval_ns);
            if let Some(inc) = obs.increase {
                let id = *o.id_increase.get_or_insert_with(|| {
                    let name = format!("{}_increase", o.key.name());
                    series.add(SeriesKey::new(name, o.key.labels().iter().map(|(k, v)| (k.as_str(), v.as_str()))))
                });
                series.push(batch, id, inc as f64);
            }
            stale += obs.stale as u32;
            o.last = Some(Ok(value));
            o.last_stale = obs.stale;
            if let Some(p) = o.track.period_ns()
                && (obs.period_changed || t_ns - o.period_written_ns >= PERIOD_REPEAT_NS)
            {
                let id = *o.id_period.get_or_insert_with(|| {
                    let mut lab: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    lab.push(("oid", &o.display));
                    series.add(SeriesKey::new("kansoku_snmp_update_period_seconds", lab))
                });
                series.push(batch, id, (p / 1000) as f64 / 1e6);
                o.period_written_ns = t_ns;
            }
        }
        series.push(batch, t.id_stale, stale as f64);
        self.stats.stale_values.fetch_add(stale as u64, Ordering::Relaxed);
    }

    /// Runs the cycle for `n` intervals on a thread of its own and returns
    /// their batches: for tests and tools that want the answers, not a store.
    pub fn run_intervals(self, n: usize) -> Vec<Batch> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::sync_channel(n + 1);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || self.run(tx, stop))
        };
        let batches: Vec<Batch> = rx.iter().take(n).collect();
        stop.store(true, Ordering::Relaxed);
        thread.join().expect("the poller thread panicked");
        batches
    }

    /// Runs the cycle on every boundary until `stop`, handing each interval's
    /// batch to `sink` without blocking (a full queue drops and counts it).
    pub fn run(mut self, sink: SyncSender<Batch>, stop: Arc<AtomicBool>) {
        let interval = self.interval_ns;
        let mut scheduled = next_boundary(realtime_ns(), interval);
        while !stop.load(Ordering::Relaxed) {
            match sleep_until(scheduled, interval, &stop) {
                Wake::Reached => {}
                Wake::Stopped => break,
                Wake::ClockSteppedBack => {
                    scheduled = next_boundary(realtime_ns(), interval);
                    continue;
                }
            }
            let batch = self.poll_once(scheduled);
            match sink.try_send(batch) {
                Ok(()) => {}
                Err(TrySendError::Full(b)) => {
                    self.series.undeclare(&b.defs);
                    if self.stats.dropped_batches.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!(
                            "store queue full: dropping SNMP intervals (kansoku_snmp_dropped_batches_total)"
                        );
                    }
                }
                Err(TrySendError::Disconnected(_)) => break,
            }
            let (next, missed) = after_round(scheduled, realtime_ns(), interval);
            if missed > 0 {
                self.stats.missed_intervals.fetch_add(missed, Ordering::Relaxed);
            }
            scheduled = next;
        }
    }
}

/// Retries discovery of `pending` targets every `every` on a thread of its
/// own, sending each success; ends when all are found or `stop` is set.
fn spawn_rediscovery(
    mut pending: Vec<(usize, TargetSpec)>,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> io::Result<Receiver<(usize, Discovered)>> {
    // Each target is sent once at most: room for all, so sending never waits.
    let (tx, rx) = std::sync::mpsc::sync_channel(pending.len().max(1));
    std::thread::Builder::new().name("snmp-rediscover".into()).spawn(move || {
        while !pending.is_empty() {
            let wake = std::time::Instant::now() + every;
            while std::time::Instant::now() < wake {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50).min(every));
            }
            let specs: Vec<&TargetSpec> = pending.iter().map(|(_, s)| s).collect();
            let results = discover(&specs, Duration::from_secs(1), 0);
            let mut still = Vec::new();
            for ((i, spec), r) in pending.into_iter().zip(results) {
                match r {
                    Ok(found) => {
                        if tx.send((i, found)).is_err() {
                            return;
                        }
                    }
                    Err(_) => still.push((i, spec)),
                }
            }
            pending = still;
        }
    })?;
    Ok(rx)
}

const SYS_UPTIME_BYTES: &[u8] = &[0x2b, 6, 1, 2, 1, 1, 3, 0];

/// Hashes source addresses for the per-answer lookup: a multiply-xor over
/// the words written (FxHash's scheme). Not DoS-resistant, and need not be:
/// the keys are the configured targets; a forged source only misses.
#[derive(Debug, Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }

    fn write_u16(&mut self, n: u16) {
        self.add(n as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl AddrHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A varbind's value, checked and detached from the datagram.
#[derive(Debug, Clone, Copy)]
enum Parsed {
    /// The exact value, and as a sample.
    Number(Raw, f64),
    /// An exception (noSuchInstance, ...) or a value that is no number.
    Missing(&'static str),
}

impl Parsed {
    fn of(v: &Value<'_>) -> Parsed {
        match *v {
            Value::Counter32(c) => Parsed::Number(Raw::Counter32(c), c as f64),
            Value::Counter64(c) => Parsed::Number(Raw::Counter64(c), c as f64),
            _ => match v.as_f64() {
                Some(f) => Parsed::Number(Raw::Other(f.to_bits()), f),
                None => Parsed::Missing(v.exception().unwrap_or("notNumeric")),
            },
        }
    }
}

/// Short slices compared in a loop, not a `memcmp` call per OID.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

const FAULTS: [Fault; 4] = [Fault::Late, Fault::Duplicate, Fault::WrongRequestId, Fault::Malformed];

/// One `kansoku_snmp_fault{kind}` sample per kind seen this interval, valued
/// with the number of such replies (one sample per series and interval).
fn write_faults(series: &mut Series, batch: &mut Batch, t: &mut Target) {
    for f in FAULTS {
        let n = std::mem::take(&mut t.faults[f as usize]);
        if n == 0 {
            continue;
        }
        let id = match t.fault_ids[f as usize] {
            Some(id) => id,
            None => {
                let id = series.get_or_add(t.key("kansoku_snmp_fault", &[("kind", f.name())]));
                t.fault_ids[f as usize] = Some(id);
                id
            }
        };
        series.push(batch, id, n as f64);
    }
}

fn error_key(labels: &[(String, String)], oid: &str, error: &str) -> SeriesKey {
    let lab = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain([("oid", oid), ("error", error)]);
    SeriesKey::new("kansoku_snmp_error", lab)
}

/// An error status fails the whole PDU. noSuchName (v1's answer to an
/// object the agent lacks) names the culprit by index: drop it from the
/// request so the others are polled from the next interval on, and keep
/// recording the error for it. Anything else is recorded as is.
fn pdu_error(series: &mut Series, batch: &mut Batch, t: &mut Target, status: i64, index: i64) {
    let name = error_status_name(status);
    let culprit = usize::try_from(index).ok().filter(|&i| i >= 1 && i <= t.active.len()).map(|i| i - 1);
    match (status, culprit) {
        (2, Some(k)) => {
            let o = t.active.remove(k);
            let oid = &mut t.oids[o];
            oid.removed = Some("noSuchName");
            tracing::warn!(
                "{}: noSuchName for {}: polling the target's other OIDs without it (kansoku_snmp_error)",
                t.addr,
                oid.display
            );
            let id = oid.error_id(series, &t.labels, "noSuchName");
            series.push(batch, id, 1.0);
            t.reencode();
            t.request.set_request_id(t.rid);
        }
        _ => {
            let id = series.get_or_add(t.key("kansoku_snmp_pdu_error", &[("error", name)]));
            series.push(batch, id, 1.0);
        }
    }
}

/// One `recvmmsg` on `sock` into `bufs`; fills `received` with (length,
/// source) and updates the socket's kernel drop counter. Returns the count.
fn recv_some(
    sock: &UdpSocket,
    hdrs: &mut MultiHeaders<SockaddrStorage>,
    bufs: &mut [Vec<u8>],
    received: &mut Vec<(usize, Option<SocketAddr>, i64)>,
    drops: &mut u32,
) -> io::Result<usize> {
    received.clear();
    let mut slices: Vec<[IoSliceMut<'_>; 1]> = bufs.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
    let results = match recvmmsg(sock.as_fd().as_raw_fd(), hdrs, slices.iter_mut(), MsgFlags::MSG_DONTWAIT, None) {
        Ok(r) => r,
        Err(Errno::EAGAIN | Errno::EINTR) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    for m in results {
        let mut arrived_ns = None;
        if let Ok(cmsgs) = m.cmsgs() {
            for c in cmsgs {
                match c {
                    ControlMessageOwned::RxqOvfl(n) => *drops = n,
                    ControlMessageOwned::ScmTimestampns(ts) => {
                        arrived_ns = Some(ts.tv_sec() * 1_000_000_000 + ts.tv_nsec());
                    }
                    _ => {}
                }
            }
        }
        received.push((m.bytes, m.address.and_then(to_std), arrived_ns.unwrap_or_else(realtime_ns)));
    }
    Ok(received.len())
}

fn to_std(a: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}
