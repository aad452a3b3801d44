//! An agent's pipelines: its producers' rounds (the host collector's first) to the spooler, the
//! per-CPU sampler's sets of event batches encoded here and spooled as one
//! batch each, and the sender shipping the spool to the server — until a
//! signal, then the last batch to the spool and a few seconds to send the
//! backlog.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use ::agent::Agent;
use codec::events::{Encoding, EventBatch, encode_many, threads_for};
use model::Batch;
use model::producer::Producer;

use crate::{PERF_DRAIN, PERF_QUEUE, QUEUE_ROUNDS};

/// How long a stopping agent keeps sending its backlog.
pub const DRAIN: Duration = Duration::from_secs(5);

/// Runs `agent` with the `producers` (the first, the host collector,
/// straight into the spooler's queue; the others' batches merged into it,
/// each in an id space of its own) and `sampler` (its sets every `batch`)
/// until Ctrl-C or SIGTERM.
pub fn run(
    agent: Arc<Agent>,
    producers: Vec<Box<dyn Producer>>,
    sampler: Option<perf::sampler::Sampler>,
    batch: Duration,
) -> std::io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = sync_channel(QUEUE_ROUNDS);
    let mut producers = producers.into_iter();
    let mut first = producers.next().ok_or_else(|| std::io::Error::other("BUG: an agent with no producer"))?;
    let mut other_threads = Vec::new();
    for (k, p) in producers.enumerate() {
        other_threads.extend(spawn_merged(p, k, &tx, &stop)?);
    }
    let perf_threads = match sampler {
        Some(sampler) => spawn_sampler(&agent, sampler, batch, &stop)?,
        None => Vec::new(),
    };
    // Held until the sampler has finished: the spooler's last batch (written
    // when its queue closes) then carries the sampler's final figures.
    let hold_queue = tx.clone();
    let producer = {
        let stop = Arc::clone(&stop);
        crate::supervise::spawn(first.name(), move || crate::rounds::run(&mut *first, &tx, &stop))?
    };
    let spooler = {
        let agent = Arc::clone(&agent);
        crate::supervise::spawn("spooler", move || agent.spool_rounds(rx))?
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    rt.block_on(async {
        let sender = tokio::spawn({
            let agent = Arc::clone(&agent);
            async move { agent.send(stop_rx, DRAIN).await }
        });
        crate::signal::ready();
        tokio::spawn(crate::signal::on_hangup(None));
        crate::signal::shutdown_signal().await;
        tracing::info!("stopping: last batch to the spool, then up to {DRAIN:?} to send the backlog");
        stop.store(true, Ordering::Relaxed);
        // Producers asleep to a boundary up to a second away wake now.
        for t in other_threads.iter().chain(&perf_threads).chain([&producer]) {
            t.thread().unpark();
        }
        // The spooler ends once the collector's channel closes.
        let _ = tokio::task::spawn_blocking(move || {
            let _ = producer.join();
            for t in other_threads {
                let _ = t.join();
            }
            for t in perf_threads {
                let _ = t.join();
            }
            drop(hold_queue);
            spooler.join()
        })
        .await;
        stop_tx.send_replace(true);
        let _ = sender.await;
    });
    Ok(())
}

/// Producer `k`'s series ids start here: each producer numbers its series
/// from 0, so each gets a space of its own in the spooler's map.
fn id_space(k: usize) -> u32 {
    (k as u32 + 1) << 27
}

/// Runs `produce` on a thread, and a second that moves its batches into
/// the collector's queue with their ids in producer `k`'s space. A batch
/// the queue has no room for is the producer's drop (its own counters say
/// so: the merge waits, so the producer's queue fills).
fn spawn_merged(
    mut p: Box<dyn Producer>,
    k: usize,
    tx: &SyncSender<Batch>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let name = p.name();
    let (own_tx, own_rx) = sync_channel::<Batch>(QUEUE_ROUNDS);
    let run = {
        let stop = Arc::clone(stop);
        crate::supervise::spawn(name, move || crate::rounds::run(&mut *p, &own_tx, &stop))?
    };
    let tx = tx.clone();
    let base = id_space(k);
    let merge = crate::supervise::spawn(format!("{name}-merge"), move || {
        for mut b in own_rx {
            for d in &mut b.defs {
                d.0 += base;
            }
            for p in &mut b.points {
                p.0 += base;
            }
            if tx.send(b).is_err() {
                return;
            }
        }
    })?;
    Ok(vec![run, merge])
}

/// The sampler and its spooler: every CPU's batch of a `batch` period,
/// encoded here (Fast), spooled as one batch, shipped as one Events frame.
fn spawn_sampler(
    agent: &Arc<Agent>,
    sampler: perf::sampler::Sampler,
    batch: Duration,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let (ev_tx, ev_rx) = sync_channel::<Vec<EventBatch>>(PERF_QUEUE);
    let stream = sampler.stream();
    let agent = Arc::clone(agent);
    // Samples that never reach the spool are counted as the sampler's drops
    // (kansoku_perf_dropped_samples_total travels with the batches).
    let stats = Arc::clone(&sampler.stats);
    let drop_samples = move |batches: u64, samples: usize| {
        stats.dropped_batches.fetch_add(batches, Ordering::Relaxed);
        stats.dropped_samples.fetch_add(samples as u64, Ordering::Relaxed);
    };
    let spooler = crate::supervise::spawn("perf-spooler", move || {
        let mut failures = 0u64;
        for mut set in ev_rx {
            let (count, len) = (set.len(), set.iter().map(EventBatch::len).sum::<usize>());
            set.retain_mut(|b| b.validate().is_ok());
            let n: usize = set.iter().map(EventBatch::len).sum();
            if set.len() < count {
                tracing::error!("perf: {} invalid event batches dropped (counted)", count - set.len());
                drop_samples((count - set.len()) as u64, len - n);
            }
            if set.is_empty() {
                continue;
            }
            let t0 = set.iter().map(|b| b.time[0]).min().unwrap_or(0);
            let encoded = encode_many(&set, Encoding::Fast, threads_for(n));
            if let Err(e) = agent.spool_events(&stream, &encoded, n as u32, t0) {
                if failures == 0 {
                    tracing::error!("perf: event batch not spooled (counted): {e}");
                }
                failures += 1;
                drop_samples(set.len() as u64, n);
            }
        }
    })?;
    let stop = Arc::clone(stop);
    let sampling = std::thread::Builder::new()
        .name("perf-sampler".into())
        .spawn(move || sampler.run(ev_tx, None, PERF_DRAIN, batch, stop))?;
    Ok(vec![spooler, sampling])
}
