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
//!
//! Here: the configuration, the counters, the per-target state and the
//! cycle. Beside it: the sockets (`net`), what one datagram does (`reply`),
//! per-target samples and errors (`target`), the targets' view for the API
//! (`views`), and retried discovery (`discovery`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Duration;

use clock::{monotonic_ns, realtime_ns, thread_cpu_ns};
use model::producer::{Producer, ReportFn};
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

mod discovery;
mod net;
mod reply;
mod target;
mod views;

use discovery::spawn_rediscovery;
use net::AddrHasher;
use reply::Parsed;
use target::write_faults;
use views::VIEW_REQUESTS_MAX;
pub use views::{OidView, TargetView, Views};

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
                if s.local_addr()?.is_ipv4() {
                    // Don't-fragment on every request (they are ~100
                    // bytes): the kernel then sends IP id 0 (RFC 6864)
                    // instead of hashing a per-destination id for each
                    // datagram, 3 % of the poller's CPU.
                    rustix::net::sockopt::set_ip_mtu_discover(&s, rustix::net::sockopt::Ipv4PathMtuDiscovery::PROBE)?;
                }
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

    /// [`Poller::views`] as the API asks for them, knowing no poller.
    pub fn targets_fn(&self) -> model::snmp::TargetsFn {
        let views = self.views();
        model::snmp::TargetsFn(Arc::new(move |limit| views.get(limit)))
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

        let mut ready = Vec::with_capacity(self.socks.len());
        while self.n_answered < self.targets.len() && self.wait_ready(deadline_mono, &mut ready) {
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

    /// Waits for answers until `deadline_mono`: fills `ready` with the
    /// sockets to read, after letting more answers queue up for the
    /// configured coalescing pause. False when the deadline passed first.
    fn wait_ready(&self, deadline_mono: i64, ready: &mut Vec<usize>) -> bool {
        ready.clear();
        loop {
            let left = deadline_mono - monotonic_ns();
            if left <= 0 {
                return false;
            }
            let mut fds: Vec<PollFd<'_>> = self.socks.iter().map(|s| PollFd::new(s, PollFlags::IN)).collect();
            let ts = rustix::time::Timespec { tv_sec: left / 1_000_000_000, tv_nsec: left % 1_000_000_000 };
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::error!("poll on SNMP sockets: {e}");
                    return false;
                }
            }
            ready.extend(fds.iter().enumerate().filter(|(_, f)| !f.revents().is_empty()).map(|(i, _)| i));
            break;
        }
        // Let more answers queue up, unless that would cross the deadline.
        let pause = (self.cfg.coalesce.as_nanos() as i64).min(deadline_mono - monotonic_ns());
        if pause > 0 {
            std::thread::sleep(Duration::from_nanos(pause as u64));
            ready.clear();
            ready.extend(0..self.socks.len());
        }
        true
    }

    /// The floor of an interval: the same requests sent the same way and
    /// every datagram that comes back read the same way, and nothing else
    /// (no request ids, no decoding, no samples). Returns the datagrams read
    /// by the deadline and the thread's CPU time: what the kernel's send and
    /// receive path costs here before the poller does any work of its own
    /// (`kansoku lab snmp` measures it beside the poller).
    pub fn floor_once(&mut self, boundary_ns: i64) -> (usize, i64) {
        let cpu0 = thread_cpu_ns();
        let deadline_mono = monotonic_ns() + (boundary_ns + self.cfg.timeout.as_nanos() as i64 - realtime_ns());
        let cmsg = nix::cmsg_space!(u32, nix::libc::timespec);
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(MMSG, Some(cmsg));
        self.send_all(deadline_mono);
        let (mut got, mut ready) = (0, Vec::with_capacity(self.socks.len()));
        while got < self.targets.len() && self.wait_ready(deadline_mono, &mut ready) {
            for &s in &ready {
                loop {
                    let n = self.recv_batch(&mut hdrs, s);
                    got += n;
                    if n < MMSG {
                        break;
                    }
                }
            }
        }
        (got, thread_cpu_ns() - cpu0)
    }
}

impl Producer for Poller {
    fn name(&self) -> &'static str {
        "snmp"
    }

    fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns as u64)
    }

    fn report(&self) -> Option<ReportFn> {
        let stats = self.stats();
        Some(Arc::new(move || stats.report().to_vec()))
    }

    /// The cycle of one interval: every request sent at the boundary, the
    /// answers read until the slice ends.
    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        Some(self.poll_once(t.0))
    }

    fn missed(&mut self, n: u64) {
        self.stats.missed_intervals.fetch_add(n, Ordering::Relaxed);
    }

    fn dropped(&mut self) {
        if self.stats.dropped_batches.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("store queue full: dropping SNMP intervals (kansoku_snmp_dropped_batches_total)");
        }
    }

    fn inline(&self) -> bool {
        true
    }
}
