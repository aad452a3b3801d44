//! Encoding many batches at once, over threads: the agent's half of moving a
//! second of every CPU's samples in one go.

use super::{Encoding, EventBatch};

/// Runs `f` on every item, the items split over up to `threads` threads
/// (scoped; one thread runs it inline). Results in input order.
pub fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let f = &f;
        let parts: Vec<_> =
            items.chunks(per).map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<R>>())).collect();
        parts.into_iter().flat_map(|h| h.join().expect("BUG: par_map worker panicked")).collect()
    })
}

/// Encodes validated batches (a second of every CPU) over up to `threads`
/// threads: the agent's half of moving many cores' samples in one go.
pub fn encode_many(batches: &[EventBatch], enc: Encoding, threads: usize) -> Vec<Vec<u8>> {
    par_map(batches, threads, |b| {
        let mut out = Vec::with_capacity(b.len() * 4 + 64);
        b.encode(&mut out, enc);
        out
    })
}

/// Threads worth using for `events` events: one per 50,000 beyond the first,
/// up to the CPUs here (a thread costs ~20 us to start).
pub fn threads_for(events: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (events / 50_000).clamp(1, cpus)
}
