//! Producers into the store: each on its own thread with a bounded queue to a
//! store writer thread of its own (the store serialises appends; each writer
//! keeps its producer's series ids), every stored round also sent to the live
//! broadcast; the per-CPU sampler's sets of event batches into the event log.
//! [`Jobs::stop_and_join`] stops the producers, lets the writers drain their
//! queues, and joins them all.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use codec::events::{Encoding, EventBatch};
use model::Batch;
use store::{Appended, Appender, FsyncPolicy, Store};

use crate::{PERF_BATCH, PERF_DRAIN, PERF_QUEUE, QUEUE_ROUNDS};

/// The live broadcast every stored round goes to.
pub type Live = tokio::sync::broadcast::Sender<Arc<Appended>>;

/// A thread that panicked, by name.
#[derive(Debug, thiserror::Error)]
#[error("the {0} thread panicked")]
pub struct Panicked(pub String);

/// The running producers and writers of one store.
#[derive(Debug)]
pub struct Jobs {
    store: Arc<Store>,
    live: Live,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The producers' fsync policy, where it differs from the store's.
    fsync: Option<FsyncPolicy>,
}

impl Jobs {
    pub fn new(store: Arc<Store>, live: Live) -> Jobs {
        Jobs { store, live, stop: Arc::new(AtomicBool::new(false)), threads: Vec::new(), fsync: None }
    }

    /// The producers' batches (this host's own samples) are fsynced by
    /// `policy` rather than the store's, which stays for what clients write.
    pub fn with_fsync(mut self, policy: FsyncPolicy) -> Jobs {
        self.fsync = Some(policy);
        self
    }

    /// Starts `produce` on a thread named `name` with a bounded queue to a
    /// store writer thread (`name-writer`); `produce` returns once the flag
    /// it is given is set.
    pub fn spawn(
        &mut self,
        name: &'static str,
        produce: impl FnOnce(SyncSender<Batch>, Arc<AtomicBool>) + Send + 'static,
    ) -> std::io::Result<()> {
        let (tx, rx) = sync_channel::<Batch>(QUEUE_ROUNDS);
        let stop = Arc::clone(&self.stop);
        self.threads.push(std::thread::Builder::new().name(name.into()).spawn(move || produce(tx, stop))?);
        let store = Arc::clone(&self.store);
        let live = self.live.clone();
        let fsync = self.fsync;
        self.threads.push(std::thread::Builder::new().name(format!("{name}-writer")).spawn(move || {
            let mut appender = fsync.map_or_else(Appender::default, Appender::with_fsync);
            let mut failures = 0u64;
            for batch in rx {
                match store.append(&mut appender, &batch) {
                    Ok(appended) => {
                        if failures > 0 {
                            tracing::info!("{name}: store writes resumed after {failures} failed rounds");
                            failures = 0;
                        }
                        let _ = live.send(Arc::new(appended));
                    }
                    Err(e) => {
                        // Counted in the store's write_errors; log the first of a run.
                        if failures == 0 {
                            tracing::error!(
                                "{name}: store write failed, round not stored (will retry with the next): {e}"
                            );
                        }
                        failures += 1;
                    }
                }
            }
        })?);
        Ok(())
    }

    /// Starts the per-CPU sampler: its sets of event batches (a second of
    /// every CPU each) to an event writer thread, one write and one fsync a
    /// set; its own figures as series, like any producer.
    pub fn spawn_sampler(&mut self, sampler: perf::sampler::Sampler) -> std::io::Result<()> {
        let (ev_tx, ev_rx) = sync_channel::<Vec<EventBatch>>(PERF_QUEUE);
        let stream = sampler.stream();
        let store = Arc::clone(&self.store);
        self.threads.push(std::thread::Builder::new().name("perf-writer".into()).spawn(move || {
            let mut failures = 0u64;
            for mut set in ev_rx {
                // Counted in the event log's write errors; log the first.
                if let Err(e) = store.events().append_many(&stream, &mut set, Encoding::Fast) {
                    if failures == 0 {
                        tracing::error!("perf: event batch not stored (counted): {e}");
                    }
                    failures += 1;
                }
            }
        })?);
        self.spawn("perf-sampler", move |tx, stop| sampler.run(ev_tx, Some(tx), PERF_DRAIN, PERF_BATCH, stop))
    }

    /// Tells the producers to stop, then joins them and their writers (which
    /// end once their queues are drained); the first panic is the error.
    pub fn stop_and_join(self) -> Result<(), Panicked> {
        self.stop.store(true, Ordering::Relaxed);
        // A producer asleep to its next boundary (up to a second away) ends
        // the sleep now (`clock::schedule::sleep_until` parks).
        for t in &self.threads {
            t.thread().unpark();
        }
        let mut first = None;
        for t in self.threads {
            let name = t.thread().name().unwrap_or("unnamed").to_owned();
            if t.join().is_err() && first.is_none() {
                first = Some(Panicked(name));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// A producer storing a component's report as series (`prefix_key`, and
/// `_total` for counters, as `/metrics` names them) at every boundary of
/// `interval`, until `stop`: for components that have no thread of their
/// own to put their figures in a batch (the server's symbol store).
pub fn report_series(
    prefix: &'static str,
    interval: std::time::Duration,
    report: impl Fn() -> Vec<model::report::Figure>,
    sink: &SyncSender<Batch>,
    stop: &AtomicBool,
) {
    let missed = std::sync::atomic::AtomicU64::new(0);
    let mut declared = false;
    clock::schedule::every(interval.as_nanos() as i64, stop, &missed, |t| {
        let figures = report();
        let mut b = Batch::new(model::Timestamp(t));
        if !declared {
            b.defs = figures
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let labels: Vec<(&str, &str)> = f.label.into_iter().collect();
                    (i as u32, model::SeriesKey::new(f.metric(prefix), labels))
                })
                .collect();
        }
        b.points = figures.iter().enumerate().map(|(i, f)| (i as u32, f.as_f64())).collect();
        // A full queue loses this round's figures only: the next one
        // carries them all (and the definitions, until they went through).
        match sink.try_send(b) {
            Ok(()) => declared = true,
            Err(std::sync::mpsc::TrySendError::Full(_)) => {}
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return false,
        }
        true
    });
}
