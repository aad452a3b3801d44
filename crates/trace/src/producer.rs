//! The tracer as a producer: every interval, the distributions as series —
//! `kernel_syscall_seconds_bucket{syscall, le}` (cumulative, one per bucket
//! this call has used, and `+Inf`), `_sum` and `_count`: counters since the
//! tracer started, as Prometheus histograms are, so
//! `histogram_quantile(0.99, rate(kernel_syscall_seconds_bucket[10s]))` is a
//! call's p99 and `rate(kernel_syscall_seconds_sum[1s])` the time spent in
//! it; the same for block I/O per device and operation:
//! `kernel_block_{queue,service}_seconds_*` and `kernel_block_request_bytes_*`;
//! the scheduler's `kernel_runqueue_seconds_*` and
//! `kernel_offcpu_seconds_*{state}`; kernel lock waits'
//! `kernel_lock_wait_seconds_*{kind}`. Where BPF is refused, the
//! tracepoints' counts instead: `kernel_tracepoint_events_total{event}`.
//!
//! A read is written one round late, beside what the next read begins to
//! use, so that every series starts before its first event
//! ([`Tracer::batch`]; docs/trace.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use model::producer::{Producer, ReportFn};
use model::report::Figure;
use model::{Batch, SeriesKey, Timestamp};

use crate::block::{BlockSnapshot, BlockTracer, What};
use crate::bpf::{Dist, Snapshot, SyscallTracer, TraceError};
use crate::counts::EventCounter;
use crate::hist;
use crate::lock::{LockSnapshot, LockTracer};
use crate::mem::{MemSnapshot, MemTracer};
use crate::net::{NetSnapshot, NetTracer};
use crate::sched::{SchedSnapshot, SchedTracer, SchedWhat};

/// The tracer's figures (`trace` in `/api/v1/status`, `kansoku_trace_*`).
#[derive(Debug, Default)]
pub struct TraceStats {
    pub reads: AtomicU64,
    pub read_errors: AtomicU64,
    /// Events (system calls) counted in the kernel since the start.
    pub events: AtomicU64,
    pub samples: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub missed_intervals: AtomicU64,
    /// CPU time of the reads (ns): the user-space share of the cost.
    pub read_cpu_ns: AtomicU64,
    /// System calls not measured (their entry slot was taken; see Snapshot::lost).
    pub lost_calls: AtomicU64,
}

impl TraceStats {
    /// The figures an agent ships with its batches (`kansoku_trace_*`):
    /// what was read, and every drop.
    pub fn figures(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("kansoku_trace_reads_total", self.reads.load(Relaxed) as f64),
            ("kansoku_trace_read_errors_total", self.read_errors.load(Relaxed) as f64),
            ("kansoku_trace_dropped_batches_total", self.dropped_batches.load(Relaxed) as f64),
            ("kansoku_trace_missed_intervals_total", self.missed_intervals.load(Relaxed) as f64),
            ("kansoku_trace_lost_calls_total", self.lost_calls.load(Relaxed) as f64),
        ]
    }

    pub fn report(&self) -> [Figure; 8] {
        [
            Figure::counter("reads", self.reads.load(Relaxed)),
            Figure::counter("read_errors", self.read_errors.load(Relaxed)),
            Figure::counter("events", self.events.load(Relaxed)),
            Figure::counter("samples", self.samples.load(Relaxed)),
            Figure::counter("dropped_batches", self.dropped_batches.load(Relaxed)),
            Figure::counter("missed_intervals", self.missed_intervals.load(Relaxed)),
            Figure::counter("read_cpu_ns", self.read_cpu_ns.load(Relaxed)),
            Figure::counter("lost_calls", self.lost_calls.load(Relaxed)),
        ]
    }
}

/// One read of the kernel's maps: the system calls' snapshot and those
/// beside it (each None where its tracer is off).
#[derive(Clone, Debug, Default)]
pub struct Reading {
    pub syscalls: Snapshot,
    pub block: Option<BlockSnapshot>,
    pub sched: Option<SchedSnapshot>,
    pub lock: Option<LockSnapshot>,
    pub mem: Option<MemSnapshot>,
    pub net: Option<NetSnapshot>,
}

/// How the kernel is traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Latency histograms by BPF; where BPF is refused, counts by
    /// `perf_event_open` (said in the log).
    Auto,
    /// Counts by `perf_event_open` only, as when BPF is refused.
    Counts,
}

/// The kernel's events, read every `interval` into series: histograms by
/// the BPF programs, or (BPF refused) the tracepoints' counts.
#[derive(Debug)]
pub struct Tracer {
    /// None in counting mode.
    tracer: Option<SyscallTracer>,
    counts: Option<EventCounter>,
    block: Option<BlockTracer>,
    sched: Option<SchedTracer>,
    lock: Option<LockTracer>,
    mem: Option<MemTracer>,
    net: Option<NetTracer>,
    /// Network interface names by index, looked up once.
    interfaces: HashMap<u32, String>,
    /// Device names by number, looked up once.
    devices: HashMap<u32, String>,
    interval: Duration,
    /// The `host` label of every series.
    host: String,
    stats: Arc<TraceStats>,
    /// Series ids by slot: no key is formatted or hashed once a series is known.
    ids: rustc_hash::FxHashMap<Slot, u32>,
    next_id: u32,
    /// The last read and its round's time, written at the next round (see
    /// [`Tracer::batch`]).
    held: Option<(Reading, i64)>,
}

impl Tracer {
    /// Attaches the programs; where BPF is refused (no clang at build time,
    /// no privilege, a kernel that will not load them) counts the same
    /// tracepoints with `perf_event_open` instead and says why; an error
    /// when neither works, and the caller goes on without kernel tracing.
    /// Block I/O or scheduler tracing that cannot start is logged and left
    /// out.
    pub fn start(interval: Duration, host: &str) -> Result<Tracer, TraceError> {
        Tracer::start_with(interval, host, Mode::Auto)
    }

    /// [`Tracer::start`] in the given mode.
    pub fn start_with(interval: Duration, host: &str, mode: Mode) -> Result<Tracer, TraceError> {
        let refused = match mode {
            Mode::Auto => match crate::bpf::with_kernel_btf(|| {
                SyscallTracer::start().map(|syscalls| Tracer::with_bpf(syscalls, interval, host))
            }) {
                Ok(tracer) => return Ok(tracer),
                Err(e) => e,
            },
            Mode::Counts => TraceError::CountsAsked,
        };
        let refused = refused.to_string();
        let counts = EventCounter::start().map_err(|counts| TraceError::Neither { bpf: refused.clone(), counts })?;
        let names: Vec<&str> = counts.events().collect();
        tracing::warn!(
            "trace: {refused}; counting tracepoint events with perf_event_open instead ({}): counts, no latency distributions, so the verdicts that read them are absent",
            names.join(", ")
        );
        Ok(Tracer { counts: Some(counts), ..Tracer::empty(interval, host) })
    }

    fn with_bpf(syscalls: SyscallTracer, interval: Duration, host: &str) -> Tracer {
        let block = BlockTracer::start().map_err(|e| tracing::warn!("trace: block I/O tracing is off: {e}")).ok();
        let sched = SchedTracer::start().map_err(|e| tracing::warn!("trace: scheduler tracing is off: {e}")).ok();
        let lock = LockTracer::start().map_err(|e| tracing::warn!("trace: lock contention tracing is off: {e}")).ok();
        let mem = MemTracer::start().map_err(|e| tracing::warn!("trace: allocation stall tracing is off: {e}")).ok();
        let net = NetTracer::start().map_err(|e| tracing::warn!("trace: qdisc wait tracing is off: {e}")).ok();
        Tracer { tracer: Some(syscalls), block, sched, lock, mem, net, ..Tracer::empty(interval, host) }
    }

    /// A tracer with nothing attached yet.
    fn empty(interval: Duration, host: &str) -> Tracer {
        Tracer {
            tracer: None,
            counts: None,
            block: None,
            sched: None,
            lock: None,
            mem: None,
            net: None,
            interfaces: HashMap::new(),
            interval,
            host: host.to_owned(),
            stats: Arc::default(),
            ids: rustc_hash::FxHashMap::default(),
            next_id: 0,
            devices: HashMap::new(),
            held: None,
        }
    }

    /// Whether this tracer only counts events (BPF refused or not asked for).
    pub fn counting(&self) -> bool {
        self.tracer.is_none()
    }

    pub fn stats(&self) -> Arc<TraceStats> {
        Arc::clone(&self.stats)
    }

    /// One histogram as series: `{metric}_count`, `{metric}_sum` (scaled:
    /// ns to seconds, or bytes as they are) and the cumulative
    /// `{metric}_bucket{le}` of each bucket used by `d` or by the next read
    /// (`next`), of every power of four above the lowest of them, and `+Inf`; values divided by `per` (1e9: ns to seconds; 1:
    /// bytes); `d` None is a histogram the next read has first: all zeros. A
    /// bucket at `last` holds everything above: only `+Inf` bounds it.
    /// `family` names the histogram cheaply (metric, a number, a static name);
    /// its series keys are built, from `labels`, only the first time a series
    /// is seen.
    #[allow(clippy::too_many_arguments, reason = "one histogram's parts, each named; a struct would only rename them")]
    fn histogram(
        &mut self,
        b: &mut Batch,
        family: Family,
        labels: impl Fn() -> Vec<(&'static str, String)>,
        d: Option<&Dist>,
        next: Option<&Dist>,
        per: f64,
        last: Option<u32>,
    ) {
        let metric = family.0;
        let key = |suffix: &str, le: Option<String>| {
            let mut l = labels();
            if let Some(le) = le {
                l.push(("le", le));
            }
            SeriesKey::new(format!("{metric}_{suffix}"), l)
        };
        let empty = Dist::default();
        let d = d.unwrap_or(&empty);
        self.push(b, (family, SLOT_COUNT), || key("count", None), d.count as f64);
        self.push(b, (family, SLOT_SUM), || key("sum", None), d.sum_ns as f64 / per);
        // The buckets either read uses, and from the lowest of them up every
        // power of four (`b % 8 == 7`) to the last finite bound: a bucket
        // first used later then lies below one that was there all along, which
        // holds its calls for `increase` over any window, within a factor of
        // four (the cumulative value of a series that did not exist at the
        // window's start is not seen). Every power of two would halve that
        // and double the histograms' series.
        let top = last.map_or(crate::bpf::BUCKETS as u32 - 1, |l| l - 1);
        let next = next.map_or(&d.buckets, |n| &n.buckets);
        let mut used = union(&d.buckets, next).peekable();
        let mut coarse = used.peek().map_or(u32::MAX, |&(first, _, _)| first | 7);
        let mut cumulative = 0;
        loop {
            let bucket = match used.peek() {
                Some(&(k, n, _)) if k <= coarse || coarse > top => {
                    used.next();
                    cumulative += n.copied().unwrap_or(0);
                    if k == coarse {
                        coarse += 8;
                    }
                    if Some(k) == last {
                        continue;
                    }
                    k
                }
                _ if coarse <= top => {
                    coarse += 8;
                    coarse - 8
                }
                _ => break,
            };
            let le = || format_le(hist::bounds(bucket).1 as f64 / per);
            self.push(b, (family, SLOT_BUCKET + bucket), || key("bucket", Some(le())), cumulative as f64);
        }
        self.push(b, (family, SLOT_INF), || key("bucket", Some("+Inf".into())), cumulative as f64);
    }

    /// The batch of series for the read `this`, made at `t`, knowing the
    /// read after it (`next`): every histogram and bucket that `next` uses is
    /// written already, with what `this` holds for it (zero where nothing
    /// yet), so each series begins before its first event and PromQL's
    /// `increase` counts every event (issue 44: a bucket first written with
    /// its calls inside, as a new series, lost them to `increase`, and put a
    /// syscall's max past the last bound).
    pub fn batch(&mut self, this: &Reading, next: &Reading, t: i64) -> Batch {
        self.stats.lost_calls.store(this.syscalls.lost, Relaxed);
        let mut b = Batch::new(Timestamp(t));
        let mut events = 0;
        let host = self.host.clone();
        let host = || ("host", host.clone());
        let last = Some(crate::bpf::BUCKETS as u32 - 1);
        for (nr, d, n) in union(&this.syscalls.syscalls, &next.syscalls.syscalls) {
            events += d.map_or(0, |d| d.count);
            let labels = || vec![host(), ("syscall", crate::syscall_name(nr))];
            self.histogram(&mut b, ("kernel_syscall_seconds", u64::from(nr), ""), labels, d, n, 1e9, last);
        }
        let (futex, futex_next) = (&this.syscalls.futex_waits, &next.syscalls.futex_waits);
        if futex.count > 0 || futex_next.count > 0 {
            let labels = || vec![host()];
            self.histogram(
                &mut b,
                ("kernel_futex_wait_seconds", 0, ""),
                labels,
                Some(futex),
                Some(futex_next),
                1e9,
                last,
            );
        }
        let none = BTreeMap::new();
        for ((dev, what, op), d, n) in union(this.block.as_ref().unwrap_or(&none), next.block.as_ref().unwrap_or(&none))
        {
            let device = self.devices.entry(dev).or_insert_with(|| crate::block::device_name(dev)).clone();
            let labels = || vec![("device", device.clone()), host(), ("op", op.name().to_owned())];
            let (metric, per) = match what {
                What::Queue => ("kernel_block_queue_seconds", 1e9),
                What::Service => {
                    events += d.map_or(0, |d| d.count);
                    ("kernel_block_service_seconds", 1e9)
                }
                What::Bytes => ("kernel_block_request_bytes", 1.0),
            };
            self.histogram(&mut b, (metric, u64::from(dev), op.name()), labels, d, n, per, None);
        }
        let none = BTreeMap::new();
        for (what, d, n) in union(this.sched.as_ref().unwrap_or(&none), next.sched.as_ref().unwrap_or(&none)) {
            match what {
                SchedWhat::RunQueue => {
                    events += d.map_or(0, |d| d.count);
                    let labels = || vec![host()];
                    self.histogram(&mut b, ("kernel_runqueue_seconds", 0, ""), labels, d, n, 1e9, None);
                }
                SchedWhat::OffCpu(state) => {
                    let labels = || vec![host(), ("state", state.to_owned())];
                    self.histogram(&mut b, ("kernel_offcpu_seconds", 0, state), labels, d, n, 1e9, None);
                }
            }
        }
        let none = BTreeMap::new();
        for (kind, d, n) in union(this.lock.as_ref().unwrap_or(&none), next.lock.as_ref().unwrap_or(&none)) {
            let labels = || vec![host(), ("kind", kind.to_owned())];
            self.histogram(&mut b, ("kernel_lock_wait_seconds", 0, kind), labels, d, n, 1e9, None);
        }
        let none = BTreeMap::new();
        for (kind, d, n) in union(this.mem.as_ref().unwrap_or(&none), next.mem.as_ref().unwrap_or(&none)) {
            let labels = || vec![host(), ("kind", kind.to_owned())];
            self.histogram(&mut b, ("kernel_reclaim_stall_seconds", 0, kind), labels, d, n, 1e9, None);
        }
        let none = BTreeMap::new();
        for (ifindex, d, n) in union(this.net.as_ref().unwrap_or(&none), next.net.as_ref().unwrap_or(&none)) {
            let device = self.interfaces.entry(ifindex).or_insert_with(|| crate::net::device_name(ifindex)).clone();
            let labels = || vec![("device", device.clone()), host()];
            self.histogram(&mut b, ("kernel_net_qdisc_seconds", u64::from(ifindex), ""), labels, d, n, 1e9, None);
        }
        self.stats.events.store(events, Relaxed);
        b
    }

    /// The batch of the tracepoints' counts at `t` (counting mode):
    /// `kernel_tracepoint_events_total{host, event}`.
    pub fn counts_batch(&mut self, counts: &[(&'static str, u64)], t: i64) -> Batch {
        let mut b = Batch::new(Timestamp(t));
        let mut events = 0;
        for &(event, n) in counts {
            events += n;
            let host = self.host.clone();
            let key = || SeriesKey::new("kernel_tracepoint_events_total", [("event", event), ("host", host.as_str())]);
            self.push(&mut b, (("kernel_tracepoint_events_total", 0, event), SLOT_COUNT), key, n as f64);
        }
        self.stats.events.store(events, Relaxed);
        b
    }

    /// One read of the kernel at the round `t`: the batch of the read
    /// before it (at its own round's time, one interval back), now that this
    /// one shows which series begin next; the first read writes zeros for
    /// everything it saw, an interval before it (the maps were empty when
    /// attached). Counting mode writes each read at once.
    fn read(&mut self, t: i64) -> Result<Batch, TraceError> {
        if let Some(counts) = &self.counts {
            let counts = counts.read().map_err(TraceError::Counts)?;
            return Ok(self.counts_batch(&counts, t));
        }
        let tracer = self.tracer.as_ref().expect("a tracer has BPF or counts");
        let next = Reading {
            block: self.block.as_ref().map(BlockTracer::read).transpose()?,
            sched: self.sched.as_ref().map(SchedTracer::read).transpose()?,
            lock: self.lock.as_ref().map(LockTracer::read).transpose()?,
            mem: self.mem.as_ref().map(MemTracer::read).transpose()?,
            net: self.net.as_ref().map(NetTracer::read).transpose()?,
            syscalls: tracer.read()?,
        };
        let interval = i64::try_from(self.interval.as_nanos()).unwrap_or(i64::MAX);
        let (this, at) = self.held.take().unwrap_or_else(|| (Reading::default(), t.saturating_sub(interval)));
        let batch = self.batch(&this, &next, at);
        self.held = Some((next, t));
        Ok(batch)
    }

    /// One point of the series `slot` names; its key is built (and the
    /// series declared in this batch) only when the slot is new.
    fn push(&mut self, b: &mut Batch, slot: Slot, key: impl FnOnce() -> SeriesKey, v: f64) {
        let next = &mut self.next_id;
        let id = *self.ids.entry(slot).or_insert_with(|| {
            let id = *next;
            *next += 1;
            b.defs.push((id, key()));
            id
        });
        b.points.push((id, v));
    }
}

impl Producer for Tracer {
    fn name(&self) -> &'static str {
        "trace"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn report(&self) -> Option<ReportFn> {
        let stats = self.stats();
        Some(Arc::new(move || stats.report().to_vec()))
    }

    /// Reads the kernel's maps into a batch; a failed read is counted and
    /// stores nothing this round.
    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        let cpu0 = clock::thread_cpu_ns();
        let stats = Arc::clone(&self.stats);
        stats.reads.fetch_add(1, Relaxed);
        let batch = match self.read(t.0) {
            Ok(batch) => {
                stats.samples.fetch_add(batch.points.len() as u64, Relaxed);
                Some(batch)
            }
            Err(e) => {
                if stats.read_errors.fetch_add(1, Relaxed) == 0 {
                    tracing::warn!("trace: reading the kernel's maps: {e} (counted; logged once)");
                }
                None
            }
        };
        stats.read_cpu_ns.fetch_add((clock::thread_cpu_ns() - cpu0).max(0) as u64, Relaxed);
        batch
    }

    fn missed(&mut self, n: u64) {
        self.stats.missed_intervals.fetch_add(n, Relaxed);
    }

    fn dropped(&mut self) {
        self.stats.dropped_batches.fetch_add(1, Relaxed);
    }
}

/// A histogram named cheaply: its metric, a number (system call, device,
/// interface) and a static name (operation, state, kind).
type Family = (&'static str, u64, &'static str);

/// One series of a histogram: its family and which of its series.
type Slot = (Family, u32);

const SLOT_COUNT: u32 = 0;
const SLOT_SUM: u32 = 1;
const SLOT_INF: u32 = 2;
/// Bucket `i`'s series is `SLOT_BUCKET + i`.
const SLOT_BUCKET: u32 = 3;

/// Two maps' entries by key, in key order: each key with its value in
/// either (a merge of the sorted iterators; nothing allocated).
fn union<'a, K: Ord + Copy, V>(
    a: &'a BTreeMap<K, V>,
    b: &'a BTreeMap<K, V>,
) -> impl Iterator<Item = (K, Option<&'a V>, Option<&'a V>)> + 'a {
    let (mut a, mut b) = (a.iter().peekable(), b.iter().peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(&(ka, _)), Some(&(kb, _))) => Some(match ka.cmp(kb) {
            std::cmp::Ordering::Less => a.next().map(|(k, v)| (*k, Some(v), None)),
            std::cmp::Ordering::Greater => b.next().map(|(k, v)| (*k, None, Some(v))),
            std::cmp::Ordering::Equal => {
                let (k, va) = a.next().expect("peeked");
                b.next().map(|(_, vb)| (*k, Some(va), Some(vb)))
            }
        }?),
        (Some(_), None) => a.next().map(|(k, v)| (*k, Some(v), None)),
        (None, Some(_)) => b.next().map(|(k, v)| (*k, None, Some(v))),
        (None, None) => None,
    })
}

/// An `le` as Prometheus prints one: the shortest decimal that reads back.
fn format_le(v: f64) -> String {
    format!("{v}")
}
