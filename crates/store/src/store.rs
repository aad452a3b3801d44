//! The store: one writer appends batches (WAL first, then head); any number
//! of readers query series and ranges; head generations become immutable
//! blocks; a crashed or killed writer loses nothing it acknowledged.
//!
//! Locking: `writer` (a mutex) serialises appends and flushes; `state` (a
//! rwlock) is held only for short in-memory updates and snapshots, never
//! across file I/O, so queries never wait for an fsync.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use model::report::Figure;
use model::{Batch, SeriesKey, Timestamp};

use crate::StoreError;
use crate::block::{Blob, BlockEntry, BlockMeta, Generations, Loc, write_block};
use crate::dir;
use crate::events::EventLog;
use crate::head::Head;
use crate::open_files::OpenFiles;
use crate::tier::{self, Tier, TierBytes};
use crate::wal::{WalWriter, encode_samples, encode_series, list_segments};

mod compact;
mod read;
mod recover;
mod retention;

/// When the WAL is fsynced relative to acknowledging an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before every acknowledgement: an acknowledged sample survives power
    /// loss. At a 100 ms interval that is 10 fsyncs/s.
    Always,
    /// At most this long after the write: power loss may lose up to this
    /// window; `kill -9` loses nothing (the page cache survives the process).
    Every(Duration),
    /// Never explicitly: the kernel writes back within ~30 s.
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;

    /// `always`, `never`, or a duration (`1s`, `250ms`).
    fn from_str(s: &str) -> Result<FsyncPolicy, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            d => model::parse_duration(d)
                .map(FsyncPolicy::Every)
                .map_err(|_| format!("{d:?}: use always, never, or a duration like 1s")),
        }
    }
}

impl FsyncPolicy {
    /// Whether an append made now, `since` the last fsync, must fsync.
    pub(crate) fn due(self, since: Instant) -> bool {
        match self {
            FsyncPolicy::Always => true,
            FsyncPolicy::Every(d) => since.elapsed() >= d,
            FsyncPolicy::Never => false,
        }
    }
}

/// A raw column of at most this many samples gets no tiers: reading it
/// costs about what reading its tier would (a few microseconds), and a
/// tier entry's fixed bytes (four column headers, its index entry) were
/// more than the raw chunk's for series read once a second in a
/// five-minute block: the kernel tracer's histogram buckets were 62 % of
/// the blocks' bytes, 1.1 B of tiers a raw sample beside 0.6 raw (issue
/// 48). Readers build a missing tier from the raw samples; a block
/// compacted over an hour holds 3,600 samples of such a series, and its
/// tiers.
pub const TIER_MIN_SAMPLES: usize = 1024;

#[derive(Debug, Clone)]
pub struct Options {
    pub fsync: FsyncPolicy,
    /// Head time span after which it is written out as a block.
    pub block_duration: Duration,
    /// Head size (samples) after which it is written out regardless of span;
    /// bounds head memory to about 16 bytes per sample.
    pub head_samples_max: usize,
    pub retention: Retention,
    /// An event log file is closed and the next started past this size; the
    /// unit in which retention removes events.
    pub event_file_bytes: u64,
    /// Downsampled tiers written with each block, in ns, from
    /// [`tier::RESOLUTIONS`]. Default: 1 min only, which costs ~1 % of the raw
    /// data; a 1 s tier speeds up hour-long bucketed queries ~3x but, for
    /// 100 ms host metrics, costs ~75 % of the raw size (`docs/benchmarks.md`).
    pub tiers: Vec<i64>,
    /// Most series the store holds. A definition past it is refused: its
    /// samples are dropped and counted (`series_limit_dropped`), so a
    /// client inventing series cannot exhaust memory (each costs about 2 KB
    /// of index, head and block metadata).
    pub series_max: usize,
    /// Blocks whose samples start in one window of this span (aligned to
    /// the epoch) are merged into one block once data has moved past the
    /// window ([`Store::compact`]); `None`: never. Default: an hour, so a
    /// day of 5-minute blocks becomes 24 files.
    pub compaction_window: Option<Duration>,
    /// What "now" is to retention: the system's clock, or in tests one they
    /// drive (`clock::Manual`).
    pub clock: Arc<dyn clock::Clock>,
}

/// [`Options::series_max`] by default.
pub const SERIES_MAX_DEFAULT: usize = 1_000_000;

/// An appender's mark for a series the store refused (past `series_max`).
const REFUSED: u32 = u32::MAX;

impl Default for Options {
    fn default() -> Options {
        Options {
            fsync: FsyncPolicy::Always,
            block_duration: Duration::from_secs(300),
            head_samples_max: 4 << 20,
            retention: Retention::default(),
            event_file_bytes: 64 << 20,
            tiers: vec![tier::MINUTE],
            series_max: SERIES_MAX_DEFAULT,
            compaction_window: Some(Duration::from_secs(3600)),
            clock: Arc::new(clock::System),
        }
    }
}

/// How long raw data is kept. Whole blocks and event files are removed,
/// oldest first, never the head, the WAL or the event file being written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// Remove data whose newest sample is older than this; `None`: no limit.
    pub max_age: Option<Duration>,
    pub budget: DiskBudget,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention { max_age: None, budget: DiskBudget::FractionOfFilesystem(0.5) }
    }
}

/// The most disk the data directory may use before the oldest data goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskBudget {
    Bytes(u64),
    /// This share of the size of the filesystem holding the data directory
    /// (measured at open). The default, 0.5, leaves room for everything else.
    FractionOfFilesystem(f64),
    Unlimited,
}

impl std::str::FromStr for DiskBudget {
    type Err = String;
    /// Bytes with an optional K/M/G/T suffix, a percentage of the file
    /// system (`50%`), or `unlimited` (`--retention-size`).
    fn from_str(s: &str) -> Result<DiskBudget, String> {
        let bad = || format!("{s:?}: use bytes like 500G, a percentage like 50%, or unlimited");
        if s == "unlimited" {
            return Ok(DiskBudget::Unlimited);
        }
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p.parse().map_err(|_| bad())?;
            if !(p > 0.0 && p <= 100.0) {
                return Err(bad());
            }
            return Ok(DiskBudget::FractionOfFilesystem(p / 100.0));
        }
        model::parse_bytes(s).map(DiskBudget::Bytes).map_err(|_| bad())
    }
}

/// Counters of what the store did, including everything it refused or lost.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub samples_appended: AtomicU64,
    pub batches_appended: AtomicU64,
    /// Samples that arrived at or before their series' newest time (a
    /// backfill, a retry, a rewrite): kept, merged on read and at flush.
    pub late_samples: AtomicU64,
    /// Samples refused for a time outside [`Timestamp::is_storable`].
    pub out_of_range_dropped: AtomicU64,
    /// Samples of series refused past [`Options::series_max`].
    pub series_limit_dropped: AtomicU64,
    /// Series definitions refused past [`Options::series_max`].
    pub series_refused: AtomicU64,
    pub unknown_series_dropped: AtomicU64,
    pub write_errors: AtomicU64,
    pub flushes: AtomicU64,
    pub flush_errors: AtomicU64,
    /// Blocks merged into larger ones, and merges that failed (counted,
    /// logged; the blocks stay as they were).
    pub compactions: AtomicU64,
    pub compaction_errors: AtomicU64,
    /// Blocks skipped whole: neither their index nor a scan of their
    /// chunks' frames found anything to serve.
    pub corrupt_blocks: AtomicU64,
    pub corrupt_chunks: AtomicU64,
    /// Blocks whose index (or footer, or magic) did not verify, read by
    /// scanning their chunks' frames instead (`docs/format/block.md`).
    pub recovered_blocks: AtomicU64,
    pub wal_damaged_segments: AtomicU64,
    pub wal_replayed_samples: AtomicU64,
    /// Damaged WAL bytes skipped to reach the valid records after them.
    pub wal_skipped_bytes: AtomicU64,
    /// WAL segments that did not replay whole, moved to `wal/damaged/`
    /// instead of deleted once a block held what was read of them.
    pub wal_damaged_kept: AtomicU64,
    /// Samples replayed from the WAL whose series definition was lost (every
    /// copy damaged), kept under a `kansoku_wal_orphan` placeholder series.
    pub wal_orphaned_samples: AtomicU64,
    /// Removed on purpose by retention (age or disk budget), not lost.
    pub retention_removed_samples: AtomicU64,
    pub retention_removed_events: AtomicU64,
    pub retention_removed_bytes: AtomicU64,
}

/// Bytes and samples on disk, for bytes-per-sample accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Whole block files, tiers included.
    pub block_bytes: u64,
    /// Of which the downsampled tiers' chunks.
    pub tier_bytes: u64,
    pub block_samples: u64,
    pub blocks: u64,
    /// WAL segments, those kept aside as damaged (`wal/damaged/`) included.
    pub wal_bytes: u64,
    pub head_samples: u64,
}

/// What an append stored, in store series ids, for live subscribers; and
/// how many of its points were late.
#[derive(Debug, Clone)]
pub struct Appended {
    pub time: Timestamp,
    pub points: Vec<(u32, f64)>,
    /// Points stored that were at or before their series' newest time with
    /// another value (out of order, or a rewrite): kept, the last write of
    /// a time winning, but not in `points` (live subscribers follow the
    /// newest time). Counted in `late_samples` too. A repeat of the newest
    /// point with the same value is already kept: neither.
    pub late: u32,
}

/// `State::last_v` where the newest value is not known (a NaN no writer
/// sends: all bits set).
const UNKNOWN_VALUE: u64 = u64::MAX;

/// Maps one sender's series ids (see [`model::Batch`]) to store ids.
#[derive(Debug, Default)]
pub struct Appender {
    ids: Vec<Option<u32>>,
    /// This producer's fsync policy, where it differs from the store's.
    fsync: Option<FsyncPolicy>,
}

impl Appender {
    /// An appender whose batches are fsynced by `policy` instead of the
    /// store's: a host's own samples can ride on a periodic fsync while
    /// what clients write (and are acknowledged) keeps the store's policy.
    /// An fsync made for anyone covers every append written before it.
    pub fn with_fsync(policy: FsyncPolicy) -> Appender {
        Appender { ids: Vec::new(), fsync: Some(policy) }
    }
}

#[derive(Debug)]
struct Block {
    path: PathBuf,
    file_bytes: u64,
    /// Each entry's place in the file, in index order; the keys are the
    /// store's, interned once (`docs/format/block.md`).
    entries: Vec<Loc>,
    /// Store series id -> index into `entries` (ids are the store's
    /// own: FxHash, looked up for every block a query's series touches).
    by_id: rustc_hash::FxHashMap<u32, usize>,
    /// (series id, tier resolution ns) -> index into `entries`.
    tiers: rustc_hash::FxHashMap<(u32, i64), usize>,
    /// Raw samples (tier columns excluded).
    raw_samples: u64,
    /// Bytes of the tier columns' chunks.
    tier_bytes: u64,
    /// The first raw sample time (what compaction groups blocks by).
    start: i64,
    /// Whether it holds one flush (not a compaction), from its name.
    flushed: bool,
}

impl Block {
    /// Indexes a block's entries, interning the series it holds. `ids`,
    /// where the caller knows them (a flush, a merge), are the store ids of
    /// its raw entries in order: then no key is hashed (at 100,000 series a
    /// flush, hashing and comparing every key was a tenth of the flush).
    fn new(meta: BlockMeta, st: &mut State, ids: Option<&[u32]>) -> Block {
        let n_raw = meta.entries.iter().filter(|e| tier::parse_tier_key(&e.key).is_none()).count();
        let ids = ids.filter(|ids| ids.len() == n_raw);
        let mut by_id = rustc_hash::FxHashMap::with_capacity_and_hasher(n_raw, Default::default());
        let mut tiers = rustc_hash::FxHashMap::default();
        let (mut raw_samples, mut tier_bytes) = (0, 0);
        // The id of each raw entry by its index, for the tiers naming it.
        let mut id_at = vec![None; meta.entries.len()];
        let mut rank = 0;
        for (i, e) in meta.entries.iter().enumerate() {
            if let Some((raw, res)) = tier::parse_tier_key(&e.key) {
                // The raw entry comes first; a tier naming anything else is ignored.
                if let Some(id) = id_at.get(raw).copied().flatten().filter(|_| raw < i) {
                    tiers.insert((id, res), i);
                    st.tiers_seen.insert(res);
                }
                tier_bytes += u64::from(e.len);
                continue;
            }
            let id = match ids {
                Some(ids) => {
                    debug_assert_eq!(
                        st.keys[ids[rank] as usize], e.key,
                        "BUG: a block's ids out of step with its keys"
                    );
                    ids[rank]
                }
                None => st.intern(&e.key),
            };
            rank += 1;
            id_at[i] = Some(id);
            st.block_span(id, e.min_t, e.max_t);
            if e.max_t > st.last_t[id as usize] {
                st.last_t[id as usize] = e.max_t;
                st.last_v[id as usize] = UNKNOWN_VALUE;
            }
            by_id.insert(id, i);
            raw_samples += u64::from(e.n_samples);
        }
        let start = by_id.values().map(|&i| meta.entries[i].min_t).min().unwrap_or(i64::MAX);
        let flushed = crate::block::parse_block_name(&meta.path).is_some_and(|g| g.first == g.last);
        let entries = meta.entries.iter().map(BlockEntry::loc).collect();
        Block {
            path: meta.path,
            file_bytes: meta.file_bytes,
            entries,
            by_id,
            tiers,
            raw_samples,
            tier_bytes,
            start,
            flushed,
        }
    }

    fn overlaps(&self, id: u32, from: i64, to: i64) -> bool {
        self.by_id.get(&id).is_some_and(|&i| self.entries[i].max_t >= from && self.entries[i].min_t <= to)
    }
}

#[derive(Debug, Default)]
struct State {
    /// Every series' key, once, by store id.
    keys: Vec<SeriesKey>,
    /// Store id by the key's 64-bit hash ([`State::key_hash`]): the key
    /// itself is not held a second time as a map key (a key with its
    /// strings is ~150–250 bytes; at 100,000 series that copy was ~20 MB).
    by_hash: rustc_hash::FxHashMap<u64, u32>,
    /// SipHash with this store's random keys, as std's maps hash: a client
    /// writing series cannot choose keys whose hashes crowd the table.
    hasher: std::hash::RandomState,
    /// Keys whose hash an earlier, different key already holds in `by_hash`
    /// (never seen in practice; a crafted key only lands here).
    collided: HashMap<SeriesKey, u32>,
    /// Newest timestamp stored per series, across head and blocks.
    last_t: Vec<i64>,
    /// Newest timestamp per series across blocks only (what tells a
    /// flushed block's series overlapping an earlier block's).
    block_last_t: Vec<i64>,
    /// Series whose samples in two blocks overlap in time (late points
    /// flushed): their reads merge every part, the last write winning, and
    /// their tiers are built from the merged samples.
    overlapping: rustc_hash::FxHashSet<u32>,
    /// The bits of the value stored at `last_t` by this process
    /// ([`UNKNOWN_VALUE`] when it came from a block).
    last_v: Vec<u64>,
    head: Head,
    /// The generation being written to a block; still queryable meanwhile.
    frozen: Option<Arc<Head>>,
    blocks: Vec<Arc<Block>>,
    /// Tier resolutions present in some block.
    tiers_seen: std::collections::BTreeSet<i64>,
}

impl State {
    /// A key's hash for `by_hash` (a collision only costs a lookup in
    /// `collided`).
    fn key_hash(&self, key: &SeriesKey) -> u64 {
        #[cfg(test)]
        if tests::COLLIDE.get() {
            return 7;
        }
        std::hash::BuildHasher::hash_one(&self.hasher, key)
    }

    /// The store id of `key`, if the store holds it.
    fn id_of(&self, key: &SeriesKey) -> Option<u32> {
        match self.by_hash.get(&self.key_hash(key)) {
            Some(&id) if self.keys[id as usize] == *key => Some(id),
            Some(_) => self.collided.get(key).copied(),
            None => None,
        }
    }

    fn intern(&mut self, key: &SeriesKey) -> u32 {
        if let Some(id) = self.id_of(key) {
            return id;
        }
        let id = u32::try_from(self.keys.len()).expect("BUG: over 2^32 series");
        self.keys.push(key.clone());
        let hash = self.key_hash(key);
        match self.by_hash.entry(hash) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.collided.insert(key.clone(), id);
            }
        }
        self.last_t.push(i64::MIN);
        self.block_last_t.push(i64::MIN);
        self.last_v.push(UNKNOWN_VALUE);
        id
    }

    /// Stores series `id`'s point at `time` in the head (appends and WAL
    /// replay alike): after its newest time in order; at or before it as
    /// a late point, unless it repeats the newest point exactly.
    fn push(&mut self, id: u32, time: i64, v: f64) -> Pushed {
        let i = id as usize;
        if self.last_t[i] < time && self.head.push(id, time, v) {
            self.last_t[i] = time;
            self.last_v[i] = v.to_bits();
            return Pushed::Newest;
        }
        if self.last_t[i] == time {
            if self.last_v[i] == v.to_bits() {
                return Pushed::Repeat;
            }
            self.last_v[i] = v.to_bits();
        }
        self.head.push_late(id, time, v);
        Pushed::Late
    }

    /// Whether series `id`'s reads must merge their parts (late points in
    /// the head or the generation being flushed, or blocks that overlap).
    fn merges(&self, id: u32) -> bool {
        self.overlapping.contains(&id) || self.head.has_late(id) || self.frozen.as_ref().is_some_and(|f| f.has_late(id))
    }

    /// Finds the overlapping series again from the blocks, in order (after
    /// a merge, whose block overlaps nothing it replaced).
    fn find_overlaps(&mut self) {
        self.block_last_t.fill(i64::MIN);
        self.overlapping.clear();
        for b in std::mem::take(&mut self.blocks) {
            for (&id, &i) in &b.by_id {
                self.block_span(id, b.entries[i].min_t, b.entries[i].max_t);
            }
            self.blocks.push(b);
        }
    }

    /// A block after those seen holds series `id` from `min_t` to `max_t`:
    /// the series overlaps if it starts at or before what they hold.
    fn block_span(&mut self, id: u32, min_t: i64, max_t: i64) {
        let last = &mut self.block_last_t[id as usize];
        if min_t <= *last {
            self.overlapping.insert(id);
        }
        *last = (*last).max(max_t);
    }
}

/// Where [`State::push`] put a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    /// After its series' newest time: in order.
    Newest,
    /// At or before it: kept beside, merged on read and at flush.
    Late,
    /// The newest point again, the same value: already kept.
    Repeat,
}

#[derive(Debug)]
struct Writer {
    wal: WalWriter,
    /// Series whose definition is in the current WAL segment.
    declared: Vec<bool>,
    buf: Vec<u8>,
    /// An append's batches as store ids: every batch's points in one
    /// buffer, and per batch its time and range in it. Kept between appends
    /// (at 100,000 series a round, two fresh megabytes an append otherwise).
    points: Vec<(u32, f64)>,
    rounds: Vec<(i64, std::ops::Range<usize>)>,
    last_sync: Instant,
    unsynced: bool,
    /// A flush came due in an inline append ([`Store::try_append`]), which
    /// leaves it to [`Store::maintain`].
    flush_due: bool,
    /// WAL segments that did not replay whole at open: once a flush covers
    /// them they are kept aside (`wal/damaged/`), not deleted.
    damaged_wal: Vec<u64>,
}

#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    opts: Options,
    state: RwLock<State>,
    writer: Mutex<Option<Writer>>,
    _lock: Option<File>,
    stats: StoreStats,
    events: EventLog,
    /// The disk budget in bytes, resolved at open.
    budget: Option<u64>,
    /// Block files, opened when read; a bounded number stay open.
    open_files: OpenFiles,
    /// One compaction at a time.
    compacting: Mutex<()>,
    /// Wakes the compactor thread: after a flush, and when the store closes.
    wake: Arc<Wake>,
}

#[derive(Debug, Default)]
struct Wake {
    /// (a flush happened, the store is gone)
    state: Mutex<(bool, bool)>,
    cv: std::sync::Condvar,
}

impl Drop for Store {
    fn drop(&mut self) {
        lock(&self.wake.state).1 = true;
        self.wake.cv.notify_all();
    }
}

pub(crate) fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Store {
    /// Opens (creating if new or empty) a data directory for writing. Fails if
    /// another process writes it. Recovers from a crash: replays the WAL,
    /// truncating a torn tail with a warning.
    pub fn open(root: &Path, opts: Options) -> Result<Store, StoreError> {
        dir::prepare(root, true)?;
        let lock_file = dir::lock(root)?;
        let events = EventLog::open(&dir::events_dir(root), opts.fsync, opts.event_file_bytes, true)?;
        let budget = retention::resolve_budget(root, opts.retention.budget);
        let store = Store {
            root: root.to_path_buf(),
            opts,
            state: RwLock::new(State::default()),
            writer: Mutex::new(None),
            _lock: Some(lock_file),
            stats: StoreStats::default(),
            events,
            budget,
            open_files: OpenFiles::default(),
            compacting: Mutex::new(()),
            wake: Arc::default(),
        };
        let (next_seq, damaged_wal) = store.load(false)?;
        let wal = WalWriter::create(&dir::wal_dir(root), next_seq).map_err(|source| StoreError::Io {
            op: "create WAL segment",
            path: dir::wal_dir(root),
            source,
        })?;
        *lock(&store.writer) = Some(Writer {
            wal,
            declared: Vec::new(),
            buf: Vec::new(),
            points: Vec::new(),
            rounds: Vec::new(),
            last_sync: Instant::now(),
            unsynced: false,
            flush_due: false,
            damaged_wal,
        });
        store.enforce_retention(store.opts.clock.now_ns());
        Ok(store)
    }

    /// Opens a data directory for reading only, while a writer may be running:
    /// sees everything the writer had written when this was called.
    pub fn open_read_only(root: &Path) -> Result<Store, StoreError> {
        dir::prepare(root, false)?;
        let store = Store {
            root: root.to_path_buf(),
            opts: Options::default(),
            state: RwLock::new(State::default()),
            writer: Mutex::new(None),
            _lock: None,
            stats: StoreStats::default(),
            events: EventLog::open(&dir::events_dir(root), FsyncPolicy::Never, u64::MAX, false)?,
            budget: None,
            open_files: OpenFiles::default(),
            compacting: Mutex::new(()),
            wake: Arc::default(),
        };
        store.load(true)?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// The fsync policy appends get unless their [`Appender`] has its own.
    pub fn fsync_policy(&self) -> FsyncPolicy {
        self.opts.fsync
    }

    /// The event columns (per-CPU samples) kept beside the series.
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// Appends one batch: WAL write, head, then fsync per policy (outside the
    /// writer's lock, shared by concurrent appends: group commit). When this
    /// returns Ok the batch is acknowledged: it survives `kill -9`, and with
    /// [`FsyncPolicy::Always`] power loss. Queries may see a batch a moment
    /// before its fsync completes; if that fsync fails the append returns the
    /// error and the batch may or may not survive a crash.
    pub fn append(&self, appender: &mut Appender, batch: &Batch) -> Result<Appended, StoreError> {
        let mut out = self.append_many(appender, std::slice::from_ref(batch))?;
        Ok(out.pop().expect("one batch in, one out"))
    }

    /// Appends several batches (rounds) from one sender with one WAL write
    /// and one fsync: how the ingest server stores an agent's wire batch.
    /// Acknowledged as a whole like [`Store::append`]; after a crash a prefix
    /// of the rounds may survive, and replaying the same rounds again stores
    /// only what is missing (a sample is stored only when it is newer than
    /// its series' last one).
    pub fn append_many(&self, appender: &mut Appender, batches: &[Batch]) -> Result<Vec<Appended>, StoreError> {
        self.append_locked(lock(&self.writer), appender, batches, false)
    }

    /// Appends `batch` at once if no other append, flush or fsync holds the
    /// writer; `None`, without waiting, if one does. For a producer's own
    /// thread, which must never wait on the store: it saves the hand-off to
    /// a writer thread, a wake-up a round (~40 µs on a VM: `kansoku up`
    /// spent 11 % less with it gone, docs/benchmarks.md).
    ///
    /// It neither fsyncs nor flushes: the batch is written to the WAL (it
    /// survives `kill -9` once this returns) and to the head, and the fsync
    /// and any flush that came due are left to [`Store::maintain`], which
    /// the producer's writer thread calls on a timer.
    pub fn try_append(&self, appender: &mut Appender, batch: &Batch) -> Result<Option<Appended>, StoreError> {
        let guard = match self.writer.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
        };
        let mut out = self.append_locked(guard, appender, std::slice::from_ref(batch), true)?;
        Ok(out.pop())
    }

    /// What inline appends ([`Store::try_append`]) left: fsyncs what they
    /// wrote (when `sync` and anything is unsynced) and writes the head out
    /// as a block if a flush came due.
    pub fn maintain(&self, sync: bool) -> Result<(), StoreError> {
        let mut guard = lock(&self.writer);
        let w = guard.as_mut().ok_or(StoreError::ReadOnly)?;
        let sync_now = sync && w.unsynced;
        if sync_now {
            w.last_sync = Instant::now();
            w.unsynced = false;
        }
        if w.flush_due {
            // A failed flush keeps the data in head and WAL; it is counted,
            // and the next inline append finds it due again.
            let _ = self.flush_locked(w);
        }
        let group = Arc::clone(w.wal.group());
        let pos = group.written();
        drop(guard);
        if sync_now && let Err(source) = group.sync_to(pos) {
            return Err(self.fsync_failed(source));
        }
        Ok(())
    }

    /// [`Store::append_many`] under the writer's lock; `inline` leaves the
    /// fsync and the flush to [`Store::maintain`].
    fn append_locked(
        &self,
        mut guard: MutexGuard<'_, Option<Writer>>,
        appender: &mut Appender,
        batches: &[Batch],
        inline: bool,
    ) -> Result<Vec<Appended>, StoreError> {
        let w = guard.as_mut().ok_or(StoreError::ReadOnly)?;
        let (mut points, mut rounds) = (std::mem::take(&mut w.points), std::mem::take(&mut w.rounds));
        points.clear();
        rounds.clear();
        let (mut unknown, mut out_of_range, mut refused) = (0u64, 0u64, 0u64);
        for batch in batches {
            if !batch.defs.is_empty() {
                let mut st = write_lock(&self.state);
                for (sid, key) in &batch.defs {
                    let id = if st.keys.len() < self.opts.series_max || st.id_of(key).is_some() {
                        st.intern(key)
                    } else {
                        if self.stats.series_refused.fetch_add(1, Ordering::Relaxed) == 0 {
                            tracing::warn!(
                                "the store holds {} series, its limit: refusing new ones (counted in series_refused)",
                                st.keys.len()
                            );
                        }
                        REFUSED
                    };
                    let slot = *sid as usize;
                    if appender.ids.len() <= slot {
                        appender.ids.resize(slot + 1, None);
                    }
                    appender.ids[slot] = Some(id);
                }
            }
            if !batch.time.is_storable() {
                // Refused before the WAL: one such time would make every
                // later flush (and every replay of it) do arithmetic at the
                // edge of i64.
                out_of_range += batch.points.len() as u64;
                rounds.push((batch.time.as_nanos(), points.len()..points.len()));
                continue;
            }
            let first = points.len();
            for &(sid, v) in &batch.points {
                match appender.ids.get(sid as usize).copied().flatten() {
                    Some(REFUSED) => refused += 1,
                    Some(id) => points.push((id, v)),
                    None => unknown += 1,
                }
            }
            rounds.push((batch.time.as_nanos(), first..points.len()));
        }
        if unknown > 0 {
            self.stats.unknown_series_dropped.fetch_add(unknown, Ordering::Relaxed);
        }
        if out_of_range > 0 {
            self.stats.out_of_range_dropped.fetch_add(out_of_range, Ordering::Relaxed);
        }
        if refused > 0 {
            self.stats.series_limit_dropped.fetch_add(refused, Ordering::Relaxed);
        }

        w.buf.clear();
        let mut newly_declared = Vec::new();
        {
            let st = read_lock(&self.state);
            if w.declared.len() < st.keys.len() {
                w.declared.resize(st.keys.len(), false);
            }
            for (time, range) in rounds.iter().filter(|r| !r.1.is_empty()) {
                let points = &points[range.clone()];
                for &(id, _) in points {
                    if !w.declared[id as usize] {
                        encode_series(&mut w.buf, id, &st.keys[id as usize]);
                        w.declared[id as usize] = true;
                        newly_declared.push(id);
                    }
                }
                encode_samples(&mut w.buf, *time, points.iter().copied());
            }
            // Each definition twice, the second copy after the samples: a
            // damaged copy costs nothing (`docs/format/wal.md`).
            for &id in &newly_declared {
                encode_series(&mut w.buf, id, &st.keys[id as usize]);
            }
        }
        let pos = match w.wal.append(&w.buf) {
            Ok(pos) => pos,
            Err(source) => {
                // Not written: those definitions must be written with the next append.
                for id in newly_declared {
                    w.declared[id as usize] = false;
                }
                (w.points, w.rounds) = (points, rounds);
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::Io { op: "append to WAL", path: dir::wal_dir(&self.root), source });
            }
        };
        w.unsynced = true;
        let sync_now = !inline && appender.fsync.unwrap_or(self.opts.fsync).due(w.last_sync);
        if sync_now {
            w.last_sync = Instant::now();
            w.unsynced = false;
        }

        let mut out = Vec::with_capacity(rounds.len());
        let mut n_stored = 0u64;
        let (late, flush_due) = {
            let mut st = write_lock(&self.state);
            let mut late = 0u64;
            for (batch, (time, range)) in batches.iter().zip(&rounds) {
                let mut stored = Vec::with_capacity(range.len());
                let mut late_here = 0u32;
                for &(id, v) in &points[range.clone()] {
                    match st.push(id, *time, v) {
                        Pushed::Newest => stored.push((id, v)),
                        Pushed::Late => late_here += 1,
                        Pushed::Repeat => {}
                    }
                }
                late += u64::from(late_here);
                n_stored += stored.len() as u64 + u64::from(late_here);
                out.push(Appended { time: batch.time, points: stored, late: late_here });
            }
            let last = rounds.iter().filter(|r| !r.1.is_empty()).map(|r| r.0).max().unwrap_or(i64::MIN);
            // Late points (older than the head's oldest) do not make it due.
            let span = st.head.min_t().map_or(0, |m| last.saturating_sub(m)).max(0);
            let due = span as u128 >= self.opts.block_duration.as_nanos()
                || st.head.n_samples() >= self.opts.head_samples_max;
            (late, due)
        };
        if late > 0 {
            self.stats.late_samples.fetch_add(late, Ordering::Relaxed);
        }
        (w.points, w.rounds) = (points, rounds);
        if flush_due && inline {
            w.flush_due = true;
        } else if flush_due {
            // A failed flush keeps the data in head and WAL; appends go on.
            let _ = self.flush_locked(w);
        }
        let group = Arc::clone(w.wal.group());
        drop(guard);
        // Group commit: fsync outside the writer's lock, shared with every
        // append that finished writing meanwhile.
        if sync_now && let Err(source) = group.sync_to(pos) {
            return Err(self.fsync_failed(source));
        }
        self.stats.samples_appended.fetch_add(n_stored, Ordering::Relaxed);
        self.stats.batches_appended.fetch_add(batches.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// A failed WAL fsync, counted in `write_errors`.
    fn fsync_failed(&self, source: std::io::Error) -> StoreError {
        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
        StoreError::Io { op: "fsync WAL", path: dir::wal_dir(&self.root), source }
    }

    fn sync_writer(&self, w: &mut Writer) -> Result<(), StoreError> {
        if let Err(source) = w.wal.sync() {
            return Err(self.fsync_failed(source));
        }
        w.last_sync = Instant::now();
        w.unsynced = false;
        Ok(())
    }

    /// Writes the head out as a block now (normally done by `append`).
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut guard = lock(&self.writer);
        let w = guard.as_mut().ok_or(StoreError::ReadOnly)?;
        self.flush_locked(w)
    }

    fn flush_locked(&self, w: &mut Writer) -> Result<(), StoreError> {
        w.flush_due = false;
        if read_lock(&self.state).head.n_samples() == 0 {
            return Ok(());
        }
        let covered = w.wal.seq();
        let wal_dir = dir::wal_dir(&self.root);
        if let Err(source) = w.wal.rotate() {
            self.stats.flush_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                "flush: starting a new WAL segment in {} failed, keeping samples in the WAL and memory: {source}",
                wal_dir.display()
            );
            return Err(StoreError::Io { op: "rotate WAL", path: wal_dir, source });
        }
        w.declared.clear();
        w.unsynced = false;
        let (frozen, ids, keys) = {
            let mut st = write_lock(&self.state);
            let head = Arc::new(std::mem::take(&mut st.head));
            st.frozen = Some(Arc::clone(&head));
            // The keys of the series in this generation only: cloning every
            // key the store knows, per flush, cost O(all series) each time.
            let ids: Vec<u32> = head.ids();
            let keys: Vec<SeriesKey> = ids.iter().map(|&id| st.keys[id as usize].clone()).collect();
            (head, ids, keys)
        };
        let blocks_dir = dir::blocks_dir(&self.root);
        let written = write_block(
            &blocks_dir,
            Generations { first: covered, last: covered },
            ids.iter().zip(&keys).map(|(&id, key)| {
                let (ts, vals) = frozen.samples(id);
                (key, ts, vals)
            }),
            |raw_index, ts, vals| self.tiers_of(raw_index, ts, vals),
        );
        let mut st = write_lock(&self.state);
        st.frozen = None;
        match written {
            Ok(meta) => {
                let block = Block::new(meta, &mut st, Some(&ids));
                st.blocks.push(Arc::new(block));
                drop(st);
                self.stats.flushes.fetch_add(1, Ordering::Relaxed);
                lock(&self.wake.state).0 = true;
                self.wake.cv.notify_all();
                for (seq, path) in list_segments(&wal_dir).unwrap_or_default() {
                    if seq > covered {
                        continue;
                    }
                    if w.damaged_wal.contains(&seq) {
                        // Never deleted: what replay could not read of it may
                        // still be read by hand. Kept aside (or, if that
                        // fails, where it is, to be tried again).
                        if self.keep_damaged_segment(&wal_dir, &path) {
                            w.damaged_wal.retain(|&s| s != seq);
                        }
                    } else {
                        let _ = fs::remove_file(path);
                    }
                }
                self.enforce_retention(self.opts.clock.now_ns());
                Ok(())
            }
            Err(e) => {
                // Put the generation back; its WAL segments stay until a flush succeeds.
                debug_assert_eq!(st.head.n_samples(), 0, "BUG: appends ran during a flush");
                st.head = Arc::try_unwrap(frozen).unwrap_or_else(|shared| shared.copy());
                self.stats.flush_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("writing block failed, keeping samples in the WAL and memory: {e}");
                Err(StoreError::Block(e))
            }
        }
    }

    /// Tiers beside a raw column: one entry per (series, resolution) that
    /// has a period. A column of only staleness markers (a process's series
    /// ended just after a flush: its generation holds the marker alone) has
    /// none, and gets no entry: readers build such a tier from the raw
    /// chunk, which is empty of samples too. Nor does a column of at most
    /// [`TIER_MIN_SAMPLES`] (issue 48).
    fn tiers_of(&self, raw_index: usize, ts: &[i64], vals: &[f64]) -> Vec<Blob> {
        if ts.len() <= TIER_MIN_SAMPLES {
            return Vec::new();
        }
        tier::RESOLUTIONS
            .into_iter()
            .filter(|r| self.opts.tiers.contains(&r.0))
            .filter_map(|(res, res_name)| {
                let t = Tier::build(ts, vals, res);
                if t.ts.is_empty() {
                    return None;
                }
                Some(Blob {
                    key: tier::tier_key(raw_index, res_name),
                    min_t: t.ts[0],
                    max_t: t.ts[t.ts.len() - 1],
                    n: t.ts.len() as u32,
                    bytes: t.encode(),
                })
            })
            .collect()
    }

    /// Syncs the WAL and writes the head out: a clean shutdown.
    pub fn close(&self) -> Result<(), StoreError> {
        let mut guard = lock(&self.writer);
        let Some(w) = guard.as_mut() else {
            return Ok(());
        };
        if w.unsynced {
            self.sync_writer(w)?;
        }
        self.events.sync()?;
        self.flush_locked(w)
    }

    /// Block files open now (at most [`crate::open_files::OPEN_MAX`] stay open).
    pub fn open_block_files(&self) -> usize {
        self.open_files.len()
    }

    /// fsyncs of the WAL and of the event logs since open; fewer than
    /// appends when concurrent appends share them (group commit).
    pub fn fsyncs(&self) -> (u64, u64) {
        let wal = lock(&self.writer).as_ref().map_or(0, |w| w.wal.group().fsyncs());
        (wal, self.events.fsyncs())
    }

    pub fn disk_usage(&self) -> DiskUsage {
        let st = read_lock(&self.state);
        let wal_dir = dir::wal_dir(&self.root);
        let wal_bytes = list_segments(&wal_dir)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, p)| p)
            .chain(crate::wal::list_damaged(&wal_dir))
            .filter_map(|p| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        DiskUsage {
            block_bytes: st.blocks.iter().map(|b| b.file_bytes).sum(),
            block_samples: st.blocks.iter().map(|b| b.raw_samples).sum(),
            tier_bytes: st.blocks.iter().map(|b| b.tier_bytes).sum(),
            blocks: st.blocks.len() as u64,
            wal_bytes,
            head_samples: st.head.n_samples() as u64,
        }
    }

    /// The store's figures, named once: `store` in `/api/v1/status` and
    /// `kansoku_store_*` in `/metrics`. Reads the directory (sizes), so
    /// it is for a status request, not a hot path.
    pub fn report(&self) -> Vec<Figure> {
        let (s, du) = (&self.stats, self.disk_usage());
        let ev = self.events.stats();
        let (events, event_bytes) = self.events.usage();
        let (wal_fsyncs, event_fsyncs) = self.fsyncs();
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let per_sample =
            |bytes: u64| if du.block_samples > 0 { bytes as f64 / du.block_samples as f64 } else { f64::NAN };
        vec![
            Figure::gauge("series", self.n_series() as u64),
            Figure::counter("samples_appended", n(&s.samples_appended)),
            Figure::counter("batches_appended", n(&s.batches_appended)),
            Figure::counter("late_samples", n(&s.late_samples)),
            Figure::counter("out_of_range_dropped", n(&s.out_of_range_dropped)),
            Figure::counter("series_refused", n(&s.series_refused)),
            Figure::counter("series_limit_dropped", n(&s.series_limit_dropped)),
            Figure::counter("unknown_series_dropped", n(&s.unknown_series_dropped)),
            Figure::counter("write_errors", n(&s.write_errors)),
            Figure::counter("flushes", n(&s.flushes)),
            Figure::counter("flush_errors", n(&s.flush_errors)),
            Figure::counter("compactions", n(&s.compactions)),
            Figure::counter("compaction_errors", n(&s.compaction_errors)),
            Figure::counter("corrupt_blocks", n(&s.corrupt_blocks)),
            Figure::counter("corrupt_chunks", n(&s.corrupt_chunks)),
            Figure::counter("recovered_blocks", n(&s.recovered_blocks)),
            Figure::counter("wal_damaged_segments", n(&s.wal_damaged_segments)),
            Figure::counter("wal_replayed_samples", n(&s.wal_replayed_samples)),
            Figure::counter("wal_skipped_bytes", n(&s.wal_skipped_bytes)),
            Figure::counter("wal_damaged_kept", n(&s.wal_damaged_kept)),
            Figure::counter("wal_orphaned_samples", n(&s.wal_orphaned_samples)),
            Figure::gauge("blocks", du.blocks),
            Figure::gauge("block_files_open", self.open_block_files() as u64),
            Figure::gauge("block_bytes", du.block_bytes),
            Figure::gauge("block_samples", du.block_samples),
            Figure::measure("block_bytes_per_sample", per_sample(du.block_bytes)),
            Figure::gauge("tier_bytes", du.tier_bytes),
            Figure::measure("raw_bytes_per_sample", per_sample(du.block_bytes - du.tier_bytes)),
            Figure::gauge("wal_bytes", du.wal_bytes),
            Figure::counter("wal_fsyncs", wal_fsyncs),
            Figure::gauge("head_samples", du.head_samples),
            Figure::counter("retention_removed_samples", n(&s.retention_removed_samples)),
            Figure::counter("retention_removed_events", n(&s.retention_removed_events)),
            Figure::counter("retention_removed_bytes", n(&s.retention_removed_bytes)),
            Figure::gauge("events", events),
            Figure::gauge("event_bytes", event_bytes),
            Figure::counter("events_appended", n(&ev.events_appended)),
            Figure::counter("event_batches_rejected", n(&ev.batches_rejected)),
            Figure::counter("event_write_errors", n(&ev.write_errors)),
            Figure::counter("event_corrupt_batches", n(&ev.corrupt_batches)),
            Figure::counter("event_damaged_files", n(&ev.damaged_files)),
            Figure::counter("event_orphaned_batches", n(&ev.orphaned_batches)),
            Figure::counter("event_skipped_bytes", n(&ev.skipped_bytes)),
            Figure::counter("event_late_batches", n(&ev.late_batches)),
            Figure::counter("event_fsyncs", event_fsyncs),
        ]
    }

    pub fn n_series(&self) -> usize {
        read_lock(&self.state).keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Makes every key hash alike, on this thread.
        pub(super) static COLLIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// An inline append stores the round, in the WAL (it is there after a
    /// reopen) and the head, but fsyncs nothing and flushes nothing, even
    /// under `always` and past the block duration: both wait for
    /// `maintain`. With the writer held elsewhere it says busy at once.
    #[test]
    fn an_inline_append_leaves_fsync_and_flush_to_maintain() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options { fsync: FsyncPolicy::Always, block_duration: Duration::from_secs(1), ..Options::default() };
        let store = Store::open(dir.path(), opts.clone()).unwrap();
        let key = SeriesKey::new("m", [("host", "h")]);
        let t0 = 1_800_000_000_000_000_000;
        let batch = |i: i64| {
            let mut b = Batch::new(Timestamp(t0 + i * 500_000_000));
            if i == 0 {
                b.defs.push((0, key.clone()));
            }
            b.points.push((0, i as f64));
            b
        };
        let mut app = Appender::default();
        let fsyncs = store.fsyncs().0;
        for i in 0..4 {
            let appended = store.try_append(&mut app, &batch(i)).unwrap().expect("nothing else holds the writer");
            assert_eq!(appended.points, [(0, i as f64)]);
        }
        let id = store.series(&model::Selector::all())[0].0;
        let read = || store.read(id, Timestamp::MIN, Timestamp::MAX);
        assert_eq!(read().1, [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(store.fsyncs().0, fsyncs, "an inline append fsyncs nothing");
        assert_eq!(store.stats().flushes.load(Ordering::Relaxed), 0, "nor flushes, though 1.5 s > 1 s is due");

        let held = lock(&store.writer);
        assert!(store.try_append(&mut app, &batch(4)).unwrap().is_none(), "busy: the writer is held");
        drop(held);

        store.maintain(true).unwrap();
        assert_eq!(store.fsyncs().0, fsyncs + 1);
        assert_eq!(store.stats().flushes.load(Ordering::Relaxed), 1, "the flush that came due");
        store.maintain(true).unwrap();
        assert_eq!(store.fsyncs().0, fsyncs + 1, "nothing unsynced: no second fsync");
        assert_eq!(read().1, [0.0, 1.0, 2.0, 3.0], "the busy round was not stored");

        store.try_append(&mut app, &batch(5)).unwrap().expect("free again");
        drop(store);
        let reopened = Store::open(dir.path(), opts).unwrap();
        let id = reopened.series(&model::Selector::all())[0].0;
        assert_eq!(reopened.read(id, Timestamp::MIN, Timestamp::MAX).1, [0.0, 1.0, 2.0, 3.0, 5.0], "from the WAL");
    }

    /// What `--fsync` and `--local-fsync` take, and what a bad one is told.
    /// A series of over [`TIER_MIN_SAMPLES`] samples in a block gets its
    /// tier, one of fewer none; the tier queries of both answer as tiers
    /// built from their raw samples.
    #[test]
    fn short_columns_get_no_tiers_and_answer_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open(dir.path(), Options { tiers: vec![tier::SECOND, tier::MINUTE], ..Options::default() }).unwrap();
        let mut app = Appender::default();
        let t0 = 1_700_000_000_000_000_000i64;
        let (fast, slow) = (SeriesKey::new("fast", [("a", "1")]), SeriesKey::new("slow", [("a", "1")]));
        let value = |r: i64| ((r * 7919) % 101) as f64 / 10.0;
        for r in 0..2_000i64 {
            let mut b = Batch::new(Timestamp(t0 + r * 100_000_000));
            if r == 0 {
                b.defs = vec![(0, fast.clone()), (1, slow.clone())];
            }
            b.points.push((0, value(r)));
            if r % 10 == 0 {
                b.points.push((1, value(r)));
            }
            store.append(&mut app, &b).unwrap();
        }
        store.flush().unwrap();
        let blocks = crate::block_files(dir.path()).unwrap();
        assert_eq!(blocks.len(), 1);
        let meta = crate::read_block_meta(&blocks[0]).unwrap();
        let tiers_of = |k: &SeriesKey| {
            let i = meta.entries.iter().position(|e| e.key == *k).unwrap();
            meta.entries.iter().filter(|e| tier::parse_tier_key(&e.key).is_some_and(|(r, _)| r == i)).count()
        };
        assert_eq!((tiers_of(&fast), tiers_of(&slow)), (2, 0));
        assert!(store.disk_usage().tier_bytes > 0);
        for key in [&fast, &slow] {
            let id = read_lock(&store.state).id_of(key).unwrap();
            let (ts, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
            for res in [tier::SECOND, tier::MINUTE] {
                let got = store.read_tier(id, res, Timestamp::MIN, Timestamp::MAX);
                let want = Tier::build(&ts, &vals, res);
                assert_eq!(
                    (&got.ts, got.column(tier::TierAgg::Sum)),
                    (&want.ts, want.column(tier::TierAgg::Sum)),
                    "{key} {res}"
                );
                assert_eq!(got.column(tier::TierAgg::Count), want.column(tier::TierAgg::Count));
            }
        }
    }

    #[test]
    fn fsync_policies_parse() {
        assert_eq!("always".parse(), Ok(FsyncPolicy::Always));
        assert_eq!("never".parse(), Ok(FsyncPolicy::Never));
        assert_eq!("250ms".parse(), Ok(FsyncPolicy::Every(Duration::from_millis(250))));
        let err = "sometimes".parse::<FsyncPolicy>().unwrap_err();
        assert!(err.contains("\"sometimes\"") && err.contains("always, never, or a duration"), "{err}");
    }

    /// The index by hash tells keys apart by the keys themselves: with every
    /// hash equal, each key still gets its own id and finds it again.
    #[test]
    fn colliding_hashes_keep_keys_apart() {
        let keys: Vec<SeriesKey> = (0..50).map(|i| SeriesKey::new("m", [("i", i.to_string())])).collect();
        let absent = SeriesKey::new("m", [("i", "50")]);
        for collide in [true, false] {
            COLLIDE.set(collide);
            let mut st = State::default();
            let ids: Vec<u32> = keys.iter().map(|k| st.intern(k)).collect();
            assert_eq!(ids, (0..50).collect::<Vec<u32>>());
            for (k, &id) in keys.iter().zip(&ids) {
                assert_eq!((st.intern(k), st.id_of(k)), (id, Some(id)), "{k}");
            }
            assert_eq!(st.id_of(&absent), None);
            assert_eq!(st.keys.len(), 50);
            let want = if collide { (1, 49) } else { (50, 0) };
            assert_eq!((st.by_hash.len(), st.collided.len()), want);
        }
        COLLIDE.set(false);
    }
}

#[cfg(test)]
mod budget_tests {
    use std::str::FromStr;

    #[test]
    fn disk_budgets_parse_or_explain() {
        assert_eq!(crate::DiskBudget::from_str("unlimited"), Ok(crate::DiskBudget::Unlimited));
        assert_eq!(crate::DiskBudget::from_str("50%"), Ok(crate::DiskBudget::FractionOfFilesystem(0.5)));
        assert_eq!(crate::DiskBudget::from_str("2G"), Ok(crate::DiskBudget::Bytes(2 << 30)));
        assert_eq!(crate::DiskBudget::from_str("1234"), Ok(crate::DiskBudget::Bytes(1234)));
        assert_eq!(crate::tier::parse_resolutions("1s,1m").unwrap(), [1_000_000_000, 60_000_000_000]);
        assert!(crate::tier::parse_resolutions("none").unwrap().is_empty());
        assert!(crate::tier::parse_resolutions("5s").unwrap_err().contains("1s,1m"));
        for bad in ["0", "150%", "0%", "12X", "", "-5G", "99999999999T"] {
            let e = crate::DiskBudget::from_str(bad).unwrap_err();
            assert!(e.contains("500G") && e.contains("unlimited"), "{bad}: {e}");
        }
    }
}
