//! Counted minutes of the past, kept: a profile over 15 minutes (the top
//! table, the flame graph) counts its whole minutes once and then only the
//! minutes still filling, instead of 1.8 M samples every refresh (issue 44:
//! the host view's profile sections cost the server most of a core).
//!
//! A minute is kept once it ended [`SETTLE_NS`] ago, keyed by what was
//! asked (streams, CPUs, process, shape) and tagged with the source's
//! [`EventSource::generation`], read before counting: when events older
//! than the store's late threshold arrive (an agent's backlog), the
//! generation moves and everything kept is dropped. A source without a
//! generation (ClickHouse counts by SQL) is never cached. Memory is bounded
//! ([`CountCache::new`]); the oldest entries go first.
//!
//! [`parts`] and [`Kept`] serve whatever else is made of settled parts:
//! the API keeps the named flame graph of each settled 10 s with them
//! (symbolising is most of a profile's cost).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::{EventCounts, EventQuery, EventSource, EventsError, Shape};

/// One minute, the unit that is kept.
pub const MINUTE_NS: i64 = 60_000_000_000;

/// Most kept minutes a count is made of: a day (what lies before is
/// counted as one raw part).
pub const MINUTES_MAX: i64 = 1_440;

/// How long after its end a part is taken as complete: the store's event
/// log moves its generation for any batch with events over 30 s old
/// (`store`'s `LATE_NS`), and 5 s more cover a batch found not late
/// while its append was still under way.
pub const SETTLE_NS: i64 = 35_000_000_000;

/// What a kept part answers: the query without its range, and where the
/// part begins.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    streams: String,
    cpus: Vec<u32>,
    pid: Option<u32>,
    /// What is kept of it: counts by address, by stack, or named stacks.
    what: u8,
    minute: i64,
}

impl Key {
    /// The part beginning at `minute` (ns) of `q`'s streams and CPUs for
    /// `pid`, kept as `what` (each user of a [`Kept`] its own numbers).
    pub fn new(q: &EventQuery, pid: Option<u32>, what: u8, minute: i64) -> Key {
        Key { streams: q.streams.to_string(), cpus: q.cpus.clone(), pid, what, minute }
    }
}

/// A part of a range: counted every time, or a settled whole unit (a
/// minute for the counts) that may be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `[from, to]`, ns: the range's edges, and units still filling.
    Raw(i64, i64),
    /// The whole unit beginning here (ns), ended [`SETTLE_NS`] before now.
    Settled(i64),
}

/// `q`'s range in parts, in time order: the whole units of `unit` ns
/// (from the epoch) inside it that ended [`SETTLE_NS`] before `now`, at
/// most the newest `max` of them, and what lies around them (before the
/// newest `max` units, one raw part: a range of 100,000 days is not listed
/// as 144 M minutes before any work).
pub fn parts(q: &EventQuery, now: i64, unit: i64, max: i64) -> Vec<Part> {
    let first = q.from.div_euclid(unit).saturating_add(i64::from(q.from.rem_euclid(unit) != 0)).saturating_mul(unit);
    let end = (q.to.saturating_add(1)).min(now.saturating_sub(SETTLE_NS)).div_euclid(unit) * unit;
    if end <= first {
        return vec![Part::Raw(q.from, q.to)];
    }
    let first = first.max(end.saturating_sub(max.max(1).saturating_mul(unit)));
    let mut out = Vec::new();
    if q.from < first {
        out.push(Part::Raw(q.from, first - 1));
    }
    out.extend((first..end).step_by(unit as usize).map(Part::Settled));
    if end <= q.to {
        out.push(Part::Raw(end, q.to));
    }
    out
}

#[derive(Debug)]
struct State<T> {
    generation: Option<u64>,
    kept: HashMap<Key, (T, usize)>,
    /// Insertion order, for eviction.
    order: VecDeque<Key>,
    bytes: usize,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        State { generation: None, kept: HashMap::new(), order: VecDeque::new(), bytes: 0 }
    }
}

/// Whatever is made of settled minutes, kept across requests under a
/// source's generation (a new generation drops everything) and a memory
/// bound (the oldest go first).
#[derive(Debug)]
pub struct Kept<T> {
    state: Mutex<State<T>>,
    max_bytes: usize,
}

impl<T: Clone> Kept<T> {
    /// Holding at most about `max_bytes`.
    pub fn new(max_bytes: usize) -> Kept<T> {
        Kept { state: Mutex::new(State::default()), max_bytes }
    }

    /// What was kept under `key` in `generation`.
    pub fn get(&self, key: &Key, generation: u64) -> Option<T> {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.generation != Some(generation) {
            *st = State { generation: Some(generation), ..State::default() };
            return None;
        }
        st.kept.get(key).map(|(c, _)| c.clone())
    }

    /// Keeps `value` (about `size` bytes) under `key`, made in
    /// `generation`: not if the generation has moved since (made across a
    /// late arrival), nor if it alone would take a quarter of the bound.
    pub fn put(&self, key: Key, value: T, size: usize, generation: u64) {
        if size > self.max_bytes / 4 {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.generation != Some(generation) {
            return;
        }
        while st.bytes + size > self.max_bytes {
            let Some(old) = st.order.pop_front() else { break };
            if let Some((_, s)) = st.kept.remove(&old) {
                st.bytes -= s;
            }
        }
        if st.kept.insert(key.clone(), (value, size)).is_none() {
            st.order.push_back(key);
            st.bytes += size;
        }
    }
}

/// Counted minutes kept across requests; see the module's documentation.
#[derive(Debug)]
pub struct CountCache {
    kept: Kept<EventCounts>,
}

impl CountCache {
    /// A cache holding at most about `max_bytes` of counts.
    pub fn new(max_bytes: usize) -> CountCache {
        CountCache { kept: Kept::new(max_bytes) }
    }

    /// `src.count(q, pid, shape, max)`, with the whole minutes of `q` that
    /// ended [`SETTLE_NS`] before `now` counted once and kept. The timeline
    /// (buckets that follow the range) is counted directly.
    pub fn count(
        &self,
        src: &dyn EventSource,
        q: &EventQuery,
        pid: Option<u32>,
        shape: Shape,
        max: u64,
        now: i64,
    ) -> Result<EventCounts, EventsError> {
        let what = match shape {
            Shape::Ips => 0,
            Shape::Stacks => 1,
            Shape::Timeline { .. } => return src.count(q, pid, shape, max),
        };
        let Some(generation) = src.generation() else { return src.count(q, pid, shape, max) };
        let part = |from: i64, to: i64| EventQuery { from, to, ..q.clone() };
        let mut out = EventCounts::default();
        for p in parts(q, now, MINUTE_NS, MINUTES_MAX) {
            let counts = match p {
                Part::Raw(from, to) => src.count(&part(from, to), pid, shape, max)?,
                Part::Settled(minute) => {
                    let key = Key::new(q, pid, what, minute);
                    match self.kept.get(&key, generation) {
                        Some(c) => c,
                        None => {
                            let mut c = src.count(&part(minute, minute + MINUTE_NS - 1), pid, shape, max)?;
                            c.procs = latest(std::mem::take(&mut c.procs));
                            self.kept.put(key, c.clone(), size_of(&c), generation);
                            c
                        }
                    }
                }
            };
            merge(&mut out, counts);
        }
        Ok(out)
    }
}

/// The latest description of each process, in their order (what a reader
/// of the whole list would take: the latest wins), not every batch's copy.
fn latest(procs: Vec<codec::events::ProcInfo>) -> Vec<codec::events::ProcInfo> {
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<_> = procs.into_iter().rev().filter(|p| seen.insert(p.pid)).collect();
    out.reverse();
    out
}

/// About how many bytes a count holds.
fn size_of(c: &EventCounts) -> usize {
    let stacks: usize = c.stacks.keys().map(|(_, s)| 64 + 8 * s.len()).sum();
    let procs: usize = c.procs.iter().map(|p| 96 + p.comm.len() + p.maps.len() * 96).sum();
    256 + 48 * c.ips.len() + stacks + procs + 64 * c.boots.len()
}

/// Adds the counts of a later part of the range to `out`.
pub fn merge(out: &mut EventCounts, part: EventCounts) {
    out.events += part.events;
    out.with_chains += part.with_chains;
    out.corrupt += part.corrupt;
    for (k, v) in part.ips {
        *out.ips.entry(k).or_default() += v;
    }
    for (k, v) in part.stacks {
        *out.stacks.entry(k).or_default() += v;
    }
    // Later parts' process tables after the earlier ones (the latest
    // description of a process wins); a boot's newest event over all parts.
    out.procs.extend(part.procs);
    for (t, boot) in part.boots {
        match out.boots.iter_mut().find(|(_, b)| *b == boot) {
            Some(seen) => seen.0 = seen.0.max(t),
            None => out.boots.push((t, boot)),
        }
    }
    out.boots.sort();
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use model::Selector;

    use super::*;

    /// Events one a second with ip = their second, counted by a fake source
    /// that counts how many events it was asked to read.
    #[derive(Debug, Default)]
    struct Seconds {
        read: AtomicU64,
        generation: AtomicU64,
    }

    impl EventSource for Seconds {
        fn count(&self, q: &EventQuery, pid: Option<u32>, shape: Shape, _max: u64) -> Result<EventCounts, EventsError> {
            let mut out = EventCounts::default();
            let first = q.from.div_euclid(1_000_000_000) + i64::from(q.from.rem_euclid(1_000_000_000) != 0);
            for s in first..=q.to.div_euclid(1_000_000_000) {
                self.read.fetch_add(1, Ordering::Relaxed);
                if pid.is_some_and(|p| p != 7) {
                    continue;
                }
                out.events += 1;
                match shape {
                    Shape::Ips => *out.ips.entry((7, s as u64)).or_default() += 1,
                    _ => *out.stacks.entry((7, vec![s as u64 % 3])).or_default() += 1,
                }
            }
            Ok(out)
        }

        fn generation(&self) -> Option<u64> {
            Some(self.generation.load(Ordering::Relaxed))
        }
    }

    const S: i64 = 1_000_000_000;

    fn query(from_s: i64, to_s: i64) -> EventQuery {
        EventQuery {
            streams: Selector::parse("perf_cpu_clock").unwrap(),
            cpus: Vec::new(),
            from: from_s * S,
            to: to_s * S,
        }
    }

    /// The same answer as counting directly, for ranges on and off minute
    /// edges; settled minutes are read once; a late arrival drops them.
    #[test]
    fn kept_minutes_answer_as_the_source() {
        let src = Seconds::default();
        let cache = CountCache::new(1 << 20);
        let now = 1_000 * S;
        for (from, to) in [(0, 900), (15, 615), (60, 119), (61, 61), (100, 1_000), (0, 59)] {
            for shape in [Shape::Ips, Shape::Stacks] {
                let want = src.count(&query(from, to), None, shape, u64::MAX).unwrap();
                let got = cache.count(&src, &query(from, to), None, shape, u64::MAX, now).unwrap();
                assert_eq!(got, want, "{from}..{to} {shape:?}");
            }
        }
        // Every settled minute of 0..900 is kept now: a second ask reads
        // only the unsettled tail (from 900 s: 1,000 s − 60 s, rounded down).
        src.read.store(0, Ordering::Relaxed);
        let got = cache.count(&src, &query(0, 900), None, Shape::Stacks, u64::MAX, now).unwrap();
        assert_eq!(got.events, 901);
        assert_eq!(src.read.load(Ordering::Relaxed), 1, "only 900 s itself read again");
        // A late batch: everything is counted again.
        src.generation.fetch_add(1, Ordering::Relaxed);
        src.read.store(0, Ordering::Relaxed);
        cache.count(&src, &query(0, 900), None, Shape::Stacks, u64::MAX, now).unwrap();
        assert_eq!(src.read.load(Ordering::Relaxed), 901);
        // Another process: its own entries.
        let other = cache.count(&src, &query(0, 900), Some(8), Shape::Ips, u64::MAX, now).unwrap();
        assert_eq!(other.events, 0);
    }

    /// At most `max` settled units, the newest; what lies before them is
    /// one raw part, so the parts still cover the range exactly once.
    #[test]
    fn parts_are_at_most_max_settled_units() {
        let now = 1_000 * S;
        let p = parts(&query(0, 900), now, MINUTE_NS, 3);
        assert_eq!(
            p,
            vec![
                Part::Raw(0, 720 * S - 1),
                Part::Settled(720 * S),
                Part::Settled(780 * S),
                Part::Settled(840 * S),
                Part::Raw(900 * S, 900 * S)
            ]
        );
        // The widest range there is: a handful of parts, not 10^11.
        let wide = EventQuery { from: i64::MIN, to: i64::MAX, ..query(0, 0) };
        let p = parts(&wide, now, MINUTE_NS, MINUTES_MAX);
        assert_eq!(p.len(), MINUTES_MAX as usize + 2);
        assert_eq!(
            p[0],
            Part::Raw(i64::MIN, (now - SETTLE_NS).div_euclid(MINUTE_NS) * MINUTE_NS - MINUTES_MAX * MINUTE_NS - 1)
        );
        // Counted through the cache, the capped range answers as the source.
        let src = Seconds::default();
        let cache = CountCache::new(1 << 20);
        let want = src.count(&query(0, 900), None, Shape::Ips, u64::MAX).unwrap();
        assert_eq!(cache.count(&src, &query(0, 900), None, Shape::Ips, u64::MAX, now).unwrap(), want);
    }

    /// Bounded: a cache of a few entries' bytes keeps answering right.
    #[test]
    fn a_full_cache_evicts_and_stays_right() {
        let src = Seconds::default();
        let cache = CountCache::new(64 * 1024);
        let now = 10_000 * S;
        for _ in 0..3 {
            let want = src.count(&query(0, 5_000), None, Shape::Ips, u64::MAX).unwrap();
            assert_eq!(cache.count(&src, &query(0, 5_000), None, Shape::Ips, u64::MAX, now).unwrap(), want);
        }
        let st = cache.kept.state.lock().unwrap();
        assert!(
            st.bytes <= 64 * 1024 && !st.kept.is_empty() && st.kept.len() < 83,
            "{} bytes, {} minutes",
            st.bytes,
            st.kept.len()
        );
    }
}
