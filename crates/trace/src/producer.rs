//! The tracer as a producer: every interval, the distributions as series —
//! `kernel_syscall_seconds_bucket{syscall, le}` (cumulative, one per bucket
//! this call has used, and `+Inf`), `_sum` and `_count`: counters since the
//! tracer started, as Prometheus histograms are, so
//! `histogram_quantile(0.99, rate(kernel_syscall_seconds_bucket[10s]))` is a
//! call's p99 and `rate(kernel_syscall_seconds_sum[1s])` the time spent in it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

use model::report::Figure;
use model::{Batch, SeriesKey, Timestamp};

use crate::bpf::{Snapshot, SyscallTracer, TraceError};
use crate::hist;

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
}

impl TraceStats {
    pub fn report(&self) -> [Figure; 7] {
        [
            Figure::counter("reads", self.reads.load(Relaxed)),
            Figure::counter("read_errors", self.read_errors.load(Relaxed)),
            Figure::counter("events", self.events.load(Relaxed)),
            Figure::counter("samples", self.samples.load(Relaxed)),
            Figure::counter("dropped_batches", self.dropped_batches.load(Relaxed)),
            Figure::counter("missed_intervals", self.missed_intervals.load(Relaxed)),
            Figure::counter("read_cpu_ns", self.read_cpu_ns.load(Relaxed)),
        ]
    }
}

/// The system call tracer, read every `interval` into series.
#[derive(Debug)]
pub struct Tracer {
    tracer: SyscallTracer,
    interval: Duration,
    /// The `host` label of every series.
    host: String,
    stats: Arc<TraceStats>,
    ids: HashMap<SeriesKey, u32>,
    next_id: u32,
}

impl Tracer {
    /// Attaches the programs; an error says why (no clang at build time, no
    /// privilege) and the caller goes on without kernel tracing.
    pub fn start(interval: Duration, host: &str) -> Result<Tracer, TraceError> {
        Ok(Tracer {
            tracer: SyscallTracer::start()?,
            interval,
            host: host.to_owned(),
            stats: Arc::default(),
            ids: HashMap::new(),
            next_id: 0,
        })
    }

    pub fn stats(&self) -> Arc<TraceStats> {
        Arc::clone(&self.stats)
    }

    /// The batch of series for the snapshot at `t`.
    pub fn batch(&mut self, snap: &Snapshot, t: i64) -> Batch {
        let mut b = Batch::new(Timestamp(t));
        let mut events = 0;
        let host = self.host.clone();
        for (&nr, d) in &snap.syscalls {
            events += d.count;
            let name = crate::syscall_name(nr);
            let key = |metric: &str, le: Option<String>| {
                let mut l = vec![("host", host.clone()), ("syscall", name.clone())];
                if let Some(le) = le {
                    l.push(("le", le));
                }
                SeriesKey::new(metric, l)
            };
            self.push(&mut b, key("kernel_syscall_seconds_count", None), d.count as f64);
            self.push(&mut b, key("kernel_syscall_seconds_sum", None), d.sum_ns as f64 / 1e9);
            let mut cumulative = 0;
            for (&bucket, &n) in &d.buckets {
                cumulative += n;
                // The last bucket holds everything longer: only +Inf bounds it.
                if bucket as usize == crate::bpf::BUCKETS - 1 {
                    continue;
                }
                self.push(
                    &mut b,
                    key("kernel_syscall_seconds_bucket", Some(format_le(hist::le(bucket)))),
                    cumulative as f64,
                );
            }
            self.push(&mut b, key("kernel_syscall_seconds_bucket", Some("+Inf".into())), cumulative as f64);
        }
        self.stats.events.store(events, Relaxed);
        b
    }

    fn push(&mut self, b: &mut Batch, key: SeriesKey, v: f64) {
        let next = &mut self.next_id;
        let id = *self.ids.entry(key).or_insert_with_key(|k| {
            let id = *next;
            *next += 1;
            b.defs.push((id, k.clone()));
            id
        });
        b.points.push((id, v));
    }

    /// Reads on every boundary of the interval until `stop`, handing each
    /// batch to `sink` without blocking (a full queue drops and counts).
    pub fn run(mut self, sink: SyncSender<Batch>, stop: Arc<AtomicBool>) {
        let stats = Arc::clone(&self.stats);
        clock::schedule::every(self.interval.as_nanos() as i64, &stop, &stats.missed_intervals, |t| {
            let cpu0 = clock::thread_cpu_ns();
            stats.reads.fetch_add(1, Relaxed);
            let go_on = match self.tracer.read() {
                Ok(snap) => {
                    let batch = self.batch(&snap, t);
                    stats.samples.fetch_add(batch.points.len() as u64, Relaxed);
                    match sink.try_send(batch) {
                        Ok(()) => true,
                        Err(TrySendError::Full(b)) => {
                            // Its series are declared again with the next batch.
                            for (_, key) in &b.defs {
                                self.ids.remove(key);
                            }
                            stats.dropped_batches.fetch_add(1, Relaxed);
                            true
                        }
                        Err(TrySendError::Disconnected(_)) => false,
                    }
                }
                Err(e) => {
                    if stats.read_errors.fetch_add(1, Relaxed) == 0 {
                        tracing::warn!("trace: reading the kernel's maps: {e} (counted; logged once)");
                    }
                    true
                }
            };
            stats.read_cpu_ns.fetch_add((clock::thread_cpu_ns() - cpu0).max(0) as u64, Relaxed);
            go_on
        });
    }
}

/// An `le` as Prometheus prints one: the shortest decimal that reads back.
fn format_le(v: f64) -> String {
    format!("{v}")
}
