//! Producers into the store: each on its own thread with a bounded queue to a
//! store writer thread of its own (the store serialises appends; each writer
//! keeps its producer's series ids), every stored round also sent to the live
//! broadcast; the per-CPU sampler's sets of event batches into the event log.
//! The 100 ms producers (collector, SNMP poller) store their rounds on their
//! own thread instead when the store is free ([`Pipelines::spawn_inline`]); their
//! writer thread then only waits out a busy store and fsyncs once a period.
//! [`Pipelines::stop_and_join`] stops the producers, lets the writers drain their
//! queues, and joins them all.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use codec::events::{Encoding, EventBatch};
use model::producer::Producer;
use model::{Batch, Sink};
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
pub struct Pipelines {
    store: Arc<Store>,
    live: Live,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The producers' fsync policy, where it differs from the store's.
    fsync: Option<FsyncPolicy>,
    /// Batches whose append panicked, over all writers.
    pub panicked: Arc<AtomicU64>,
}

impl Pipelines {
    pub fn new(store: Arc<Store>, live: Live) -> Pipelines {
        Pipelines {
            store,
            live,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            fsync: None,
            panicked: Arc::default(),
        }
    }

    /// The producers' batches (this host's own samples) are fsynced by
    /// `policy` rather than the store's, which stays for what clients write.
    pub fn with_fsync(mut self, policy: FsyncPolicy) -> Pipelines {
        self.fsync = Some(policy);
        self
    }

    /// Runs `p` in the round loop (`crate::rounds`) on a thread of its own
    /// named as it is: stored inline while the store is free if it asks to
    /// be ([`Pipelines::spawn_inline`]), else through its writer thread.
    pub fn add(&mut self, mut p: Box<dyn Producer>) -> std::io::Result<()> {
        let name = p.name();
        if p.inline() {
            self.spawn_inline(name, move |sink, stop| crate::rounds::run(&mut *p, &sink, &stop))
        } else {
            self.spawn(name, move |tx, stop| crate::rounds::run(&mut *p, &tx, &stop))
        }
    }

    /// Starts `produce` on a thread named `name` with a bounded queue to a
    /// store writer thread (`name-writer`); `produce` returns once the flag
    /// it is given is set.
    fn spawn(
        &mut self,
        name: &'static str,
        produce: impl FnOnce(SyncSender<Batch>, Arc<AtomicBool>) + Send + 'static,
    ) -> std::io::Result<()> {
        let (tx, rx) = sync_channel::<Batch>(QUEUE_ROUNDS);
        let stop = Arc::clone(&self.stop);
        self.threads.push(crate::supervise::spawn(name, move || produce(tx, stop))?);
        let shared = self.shared(name);
        self.threads.push(crate::supervise::spawn(format!("{name}-writer"), move || {
            for batch in rx {
                shared.append(&batch);
            }
        })?);
        Ok(())
    }

    /// What a producer named `name` and its writer thread share.
    fn shared(&self, name: &'static str) -> Arc<Shared> {
        Arc::new(Shared {
            name,
            store: Arc::clone(&self.store),
            live: self.live.clone(),
            appender: Mutex::new(self.fsync.map_or_else(Appender::default, Appender::with_fsync)),
            queued: AtomicUsize::new(0),
            failures: AtomicU64::new(0),
            panicked: Arc::clone(&self.panicked),
        })
    }

    /// Like [`Pipelines::spawn`], but `produce` stores its rounds on its own
    /// thread when it can ([`InlineSink`]): no wake-up of the writer thread
    /// a round. The writer thread takes a round only when the store is busy
    /// (another append, a flush) or rounds are already waiting, and wakes
    /// once an fsync period (a second by default) to fsync what was written
    /// inline and write out a block that came due. Under
    /// [`FsyncPolicy::Always`] every round goes through the writer, which
    /// fsyncs before the next.
    fn spawn_inline(
        &mut self,
        name: &'static str,
        produce: impl FnOnce(InlineSink, Arc<AtomicBool>) + Send + 'static,
    ) -> std::io::Result<()> {
        let policy = self.fsync.unwrap_or_else(|| self.store.fsync_policy());
        let (tx, rx) = sync_channel::<Batch>(QUEUE_ROUNDS);
        let shared = self.shared(name);
        let sink = InlineSink { shared: Arc::clone(&shared), queue: tx, inline: policy != FsyncPolicy::Always };
        let stop = Arc::clone(&self.stop);
        self.threads.push(crate::supervise::spawn(name, move || produce(sink, stop))?);
        let period = match policy {
            FsyncPolicy::Every(d) => d,
            FsyncPolicy::Always | FsyncPolicy::Never => MAINTAIN_EVERY,
        };
        self.threads.push(crate::supervise::spawn(format!("{name}-writer"), move || {
            let mut failing = false;
            let mut maintain = || {
                // Counted in the store's write_errors; logged once a run.
                match shared.store.maintain(policy != FsyncPolicy::Never) {
                    Ok(()) if failing => {
                        tracing::info!("{name}: store fsync and flush work again");
                        failing = false;
                    }
                    Err(e) if !failing => {
                        tracing::error!("{name}: {e} (retried every {period:?})");
                        failing = true;
                    }
                    Ok(()) | Err(_) => {}
                }
            };
            loop {
                match rx.recv_timeout(period) {
                    Ok(batch) => {
                        // Published before the producer may go inline again:
                        // the live stream keeps the rounds' order.
                        shared.append(&batch);
                        shared.queued.fetch_sub(1, Ordering::AcqRel);
                    }
                    Err(RecvTimeoutError::Timeout) => maintain(),
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            // What the inline appends left, before the writer ends.
            maintain();
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
        self.threads.push(crate::supervise::spawn("perf-writer", move || {
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

/// How often the writer of an inline producer without an fsync period
/// looks for a flush that came due.
const MAINTAIN_EVERY: Duration = Duration::from_secs(1);

/// What a producer and its writer thread share.
#[derive(Debug)]
struct Shared {
    name: &'static str,
    store: Arc<Store>,
    live: Live,
    /// The producer's series ids, used by one side at a time: the producer
    /// appends only while nothing is queued.
    appender: Mutex<Appender>,
    /// Rounds an inline producer handed to the writer and that are not yet
    /// stored: while any are, later rounds queue behind them (a series'
    /// samples are stored in order).
    queued: AtomicUsize,
    /// Failed appends in a row, to log the first of a run.
    failures: AtomicU64,
    /// Appends that panicked (their batch lost, the writer went on).
    panicked: Arc<AtomicU64>,
}

impl Shared {
    /// Appends one batch and publishes it. An append that panics loses that
    /// batch only (counted in `panicked_appends`; the panic is recorded by
    /// [`crate::supervise`]): the writer goes on with the next, so one bad
    /// round does not silently end a producer's series.
    fn append(&self, batch: &Batch) {
        match crate::supervise::catch(|| self.store.append(&mut lock(&self.appender), batch)) {
            Some(result) => self.stored(result),
            None => {
                self.panicked.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn stored(&self, result: Result<Appended, store::StoreError>) {
        let name = self.name;
        match result {
            Ok(appended) => {
                let failures = self.failures.swap(0, Ordering::Relaxed);
                if failures > 0 {
                    tracing::info!("{name}: store writes resumed after {failures} failed rounds");
                }
                let _ = self.live.send(Arc::new(appended));
            }
            Err(e) => {
                // Counted in the store's write_errors; log the first of a run.
                if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::error!("{name}: store write failed, round not stored (will retry with the next): {e}");
                }
            }
        }
    }
}

/// A producer's sink that stores each round on the producer's thread
/// ([`Store::try_append`]) and hands it to the writer thread only when the
/// store is busy or earlier rounds are still queued ([`Pipelines::spawn_inline`]).
#[derive(Debug)]
pub struct InlineSink {
    shared: Arc<Shared>,
    queue: SyncSender<Batch>,
    inline: bool,
}

impl Sink for InlineSink {
    fn try_send(&self, batch: Batch) -> Result<(), TrySendError<Batch>> {
        let s = &self.shared;
        if self.inline && s.queued.load(Ordering::Acquire) == 0 {
            let Some(tried) = crate::supervise::catch(|| s.store.try_append(&mut lock(&s.appender), &batch)) else {
                s.panicked.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            };
            match tried {
                Ok(Some(appended)) => {
                    s.stored(Ok(appended));
                    return Ok(());
                }
                Ok(None) => {} // busy: the writer thread waits for it
                Err(e) => {
                    s.stored(Err(e));
                    return Ok(());
                }
            }
        }
        s.queued.fetch_add(1, Ordering::AcqRel);
        self.queue.try_send(batch).inspect_err(|_| {
            s.queued.fetch_sub(1, Ordering::AcqRel);
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{Selector, SeriesKey, Timestamp};

    const T0: i64 = 1_800_000_000_000_000_000;

    fn round(i: i64) -> Batch {
        let mut b = Batch::new(Timestamp(T0 + i * 100_000_000));
        if i == 0 {
            b.defs.push((0, SeriesKey::new("m", [("host", "h")])));
        }
        b.points.push((0, i as f64));
        b
    }

    fn open(dir: &std::path::Path) -> Arc<Store> {
        Arc::new(Store::open(dir, store::Options::default()).unwrap())
    }

    fn stored(store: &Store) -> Vec<f64> {
        store
            .series(&Selector::all())
            .first()
            .map_or(vec![], |(id, _)| store.read(*id, Timestamp::MIN, Timestamp::MAX).1)
    }

    /// A sink with no writer thread behind it: what reaches its queue stays
    /// there for the test to see.
    fn sink(store: &Arc<Store>, inline: bool, capacity: usize) -> (InlineSink, std::sync::mpsc::Receiver<Batch>) {
        let (tx, rx) = sync_channel(capacity);
        let pipes = Pipelines::new(Arc::clone(store), tokio::sync::broadcast::channel(4).0);
        (InlineSink { shared: pipes.shared("test"), queue: tx, inline }, rx)
    }

    /// A round is stored on the producer's thread while nothing is queued;
    /// once one waits for the writer, the rounds after it queue too (a
    /// series' samples are stored in order); a full queue gives the round
    /// back and leaves the count as it was.
    #[test]
    fn rounds_are_stored_inline_until_one_waits_for_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (s, rx) = sink(&store, true, 1);
        s.try_send(round(0)).unwrap();
        s.try_send(round(1)).unwrap();
        assert_eq!(stored(&store), [0.0, 1.0]);
        assert!(rx.try_recv().is_err(), "nothing went to the writer");

        // As if the store had been busy for round 2.
        s.shared.queued.store(1, Ordering::Release);
        s.try_send(round(3)).unwrap();
        assert_eq!(rx.try_recv().unwrap().time, round(3).time, "queued behind the waiting round");
        assert_eq!(s.shared.queued.load(Ordering::Acquire), 2);
        assert_eq!(stored(&store), [0.0, 1.0]);

        s.try_send(round(4)).unwrap();
        let full = s.try_send(round(5));
        assert!(matches!(full, Err(TrySendError::Full(ref b)) if b.time == round(5).time), "{full:?}");
        assert_eq!(s.shared.queued.load(Ordering::Acquire), 3, "the refused round is not counted as queued");
    }

    /// Under `always` no round is stored inline: the writer fsyncs each.
    #[test]
    fn under_fsync_always_every_round_goes_to_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (s, rx) = sink(&store, false, 4);
        s.try_send(round(0)).unwrap();
        assert_eq!(rx.try_recv().unwrap().time, round(0).time);
        assert!(stored(&store).is_empty());
    }

    /// Through `Pipelines`: every round stored in order, and once the producer
    /// ends, what it wrote inline is fsynced (the writer's last `maintain`).
    #[test]
    fn an_inline_producer_stores_every_round_and_ends_synced() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let live = tokio::sync::broadcast::channel(64).0;
        let mut watch = live.subscribe();
        let mut pipes =
            Pipelines::new(Arc::clone(&store), live).with_fsync(FsyncPolicy::Every(Duration::from_secs(3600)));
        let fsyncs = store.fsyncs().0;
        pipes
            .spawn_inline("test", |sink, _stop| {
                for i in 0..50 {
                    sink.try_send(round(i)).unwrap();
                }
            })
            .unwrap();
        pipes.stop_and_join().unwrap();
        assert_eq!(stored(&store), (0..50).map(|i| i as f64).collect::<Vec<_>>());
        assert!(store.fsyncs().0 > fsyncs, "what was written inline is fsynced when the writer ends");
        let mut seen = 0;
        while let Ok(appended) = watch.try_recv() {
            assert_eq!(appended.time, round(seen).time, "the live stream in order");
            seen += 1;
        }
        assert_eq!(seen, 50, "every stored round on the live stream");
    }
}
