//! What names another host's samples, kept by content: each mapped binary
//! under its GNU build id (`DATA/buildid/<hex>`, the layout the sampler's
//! build-id cache already writes), and each boot's kernel symbol table
//! (`/proc/kallsyms`, loaded modules' symbols included) under its boot id
//! (`DATA/kallsyms/<boot id>`). An agent keeps both in its own data
//! directory while it samples ([`snapshot_kallsyms`]; the sampler keeps the
//! binaries) and [`pack`]s one, zstd-compressed, when the server asks for
//! it; the server's [`SymStore`] takes the chunks into a part file, checks
//! the whole before it counts (a binary must carry the build id it is filed
//! under, a symbol table must read as one), files it where profile queries
//! look, and keeps all of them within a byte budget by dropping the least
//! recently used. Content addressing makes the store shared: a binary that
//! twenty agents run arrives once.
//!
//! Several servers in front of one ClickHouse store share their sources
//! through a [`Shared`] backend (ClickHouse's `symbols` table): what one
//! server received it also puts there, packed as it arrived; a server that
//! lacks a source looks there before it asks an agent, and a profile query
//! looks there before it names a frame `[unknown]`. What comes from the
//! backend passes the same checks as an upload.
//!
//! Whole binaries are shipped, not extracted symbol tables: the file is what
//! blazesym reads, so symbols, DWARF line tables and inlined frames come out
//! exactly as on the host; zstd takes most of the size (see
//! `docs/benchmarks.md`, "Symbols from other hosts").

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use model::report::Figure;

/// Where binaries are kept by build id (as the sampler's cache).
pub const BINARIES: &str = perf::procs::CACHE_DIR;
/// Where kernel symbol tables are kept by boot id.
pub const KALLSYMS: &str = "kallsyms";
/// Compressed bytes per chunk on the wire (a frame is at most 16 MiB).
pub const CHUNK: usize = 1 << 20;
/// Largest file kept (as the sampler's cache).
pub const MAX_FILE: u64 = perf::procs::CACHE_MAX_FILE;
/// Largest compressed upload taken.
pub const MAX_PACKED: u64 = MAX_FILE / 2;
/// zstd level of uploads: kansoku's own 148 MB binary (line tables
/// included) packs to 34 MB in 0.4 s at level 3, to 30 MB in 2.1 s at
/// level 9; once per build id, on the agent's CPU.
pub const LEVEL: i32 = 3;
/// A receive nobody finished within this long can be asked of another agent.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(120);
/// An agent's "I do not have it" holds this long before it is asked again.
const LACK_TIMEOUT: Duration = Duration::from_secs(600);
/// The shared backend's "not here" holds this long before it is asked again.
const ABSENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where servers share the sources they received (their packed bytes, as
/// an agent sent them), e.g. a table of the ClickHouse store.
pub trait Shared: Send + Sync + std::fmt::Debug {
    /// Keeps `packed` (zstd) as the source `key`.
    fn put(&self, key: &Key, packed: &[u8]) -> Result<(), String>;
    /// The packed bytes of `key`, if kept.
    fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, String>;
}

/// What to do about a source this server does not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Ask an agent: there is no shared backend, or it lacks the source.
    Ask,
    /// Another task is fetching it from the shared backend.
    Wait,
    /// Fetch it from the shared backend ([`SymStore::fetch_shared`]): now
    /// reserved for the caller.
    Fetch,
}

/// What a symbol source is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A mapped file, by its GNU build id (hex).
    Binary,
    /// A boot's `/proc/kallsyms`, by its boot id.
    Kallsyms,
}

impl Kind {
    /// The kind's number on the wire.
    pub fn code(self) -> u8 {
        match self {
            Kind::Binary => 1,
            Kind::Kallsyms => 2,
        }
    }

    pub fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Binary),
            2 => Some(Kind::Kallsyms),
            _ => None,
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Kind::Binary => BINARIES,
            Kind::Kallsyms => KALLSYMS,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Binary => "binary",
            Kind::Kallsyms => "kallsyms",
        }
    }
}

/// One symbol source: its kind and its id (a file name in the kind's
/// directory; [`Key::new`] refuses anything else).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub kind: Kind,
    pub id: String,
}

impl Key {
    /// A key, if `id` can name a file: a build id is 2 to 128 lower-case hex
    /// digits, a boot id 1 to 64 hex digits and dashes (no path can be
    /// made of either).
    pub fn new(kind: Kind, id: &str) -> Option<Key> {
        let ok = match kind {
            Kind::Binary => {
                (2..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }
            Kind::Kallsyms => {
                (1..=64).contains(&id.len())
                    && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
                    && id.bytes().any(|b| b != b'-')
            }
        };
        ok.then(|| Key { kind, id: id.to_owned() })
    }

    pub fn binary(build_id: &[u8]) -> Option<Key> {
        Key::new(Kind::Binary, &perf::procs::hex(build_id))
    }

    pub fn kallsyms(boot: &str) -> Option<Key> {
        Key::new(Kind::Kallsyms, boot)
    }

    /// Where the source is kept under a data directory.
    pub fn path(&self, root: &Path) -> PathBuf {
        root.join(self.kind.dir()).join(&self.id)
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind.name(), self.id)
    }
}

/// Copies this boot's `/proc/kallsyms` to `root/kallsyms/<boot>` once (an
/// agent, when it starts sampling), so the table of the boot its spooled
/// samples came from is at hand when a server asks, even after a reboot.
/// Refuses a table whose addresses are all zero (read without the
/// privilege to see them): the server would name nothing from it.
pub fn snapshot_kallsyms(root: &Path, boot: &str) -> io::Result<PathBuf> {
    let key = Key::kallsyms(boot)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("boot id {boot:?} cannot name a file")))?;
    let dest = key.path(root);
    if dest.is_file() {
        return Ok(dest);
    }
    let text = std::fs::read("/proc/kallsyms")?;
    check_kallsyms(&mut &text[..])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/kallsyms: {e}")))?;
    std::fs::create_dir_all(dest.parent().expect("in a directory"))?;
    let tmp = dest.with_extension("tmp");
    std::fs::write(&tmp, &text)?;
    std::fs::rename(&tmp, &dest)?;
    Ok(dest)
}

/// Checks that `bytes` read as a kernel symbol table with addresses (what
/// the server requires of one before it files it).
pub fn check_table(bytes: &[u8]) -> Result<(), String> {
    check_kallsyms(&mut &bytes[..])
}

/// Checks that `r` reads as a kernel symbol table with addresses: lines
/// of `address type name [module]`, at least one address not zero.
fn check_kallsyms(r: &mut impl BufRead) -> Result<(), String> {
    let (mut lines, mut nonzero) = (0u64, false);
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        if line.is_empty() {
            continue;
        }
        let mut f = line.split_whitespace();
        let (addr, ty, name) = (f.next(), f.next(), f.next());
        let addr = addr.and_then(|a| u64::from_str_radix(a, 16).ok());
        match (addr, ty, name) {
            (Some(a), Some(t), Some(_)) if t.len() == 1 => nonzero |= a != 0,
            _ => return Err(format!("line {} is not `address type name`: {line:?}", i + 1)),
        }
        lines += 1;
    }
    if lines == 0 {
        return Err("no symbols".into());
    }
    if !nonzero {
        return Err(
            "every address is 0 (read without the privilege to see them: run as root or lower kernel.kptr_restrict)"
                .into(),
        );
    }
    Ok(())
}

/// The source `key` as kept under `root`, zstd-compressed for upload; or
/// why it cannot be had, in words for a person.
pub fn pack(root: &Path, key: &Key) -> Result<Vec<u8>, String> {
    let path = key.path(root);
    let file = File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => match key.kind {
            Kind::Binary => {
                "not in the agent's build-id cache (the file was gone, too large, or changed before it was kept)"
                    .to_owned()
            }
            Kind::Kallsyms => "the agent kept no kernel symbol table of that boot".to_owned(),
        },
        _ => format!("{}: {e}", path.display()),
    })?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len > MAX_FILE {
        return Err(format!("{len} bytes, over the {MAX_FILE} bytes a server takes"));
    }
    let packed = zstd::stream::encode_all(io::BufReader::new(file), LEVEL).map_err(|e| format!("compress: {e}"))?;
    if packed.len() as u64 > MAX_PACKED {
        return Err(format!("{} bytes compressed, over the {MAX_PACKED} a server takes", packed.len()));
    }
    Ok(packed)
}

/// The size of the source `key` as kept under `root` (0 when it is not):
/// an agent sends the small first, so most frames are named soonest.
pub fn size(root: &Path, key: &Key) -> u64 {
    std::fs::metadata(key.path(root)).map_or(0, |m| m.len())
}

/// Why a chunk or an upload was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The store's counters (`/api/v1/status` as `symbols`, and series).
#[derive(Debug, Default)]
pub struct Stats {
    /// Sources filed (whole and checked).
    pub received: AtomicU64,
    /// Compressed bytes taken in chunks.
    pub received_bytes: AtomicU64,
    /// Uploads refused: out of order, too large, failing their check.
    pub refused: AtomicU64,
    /// Sources an agent said it does not have.
    pub lacking: AtomicU64,
    pub evicted: AtomicU64,
    pub evicted_bytes: AtomicU64,
    /// Sources put into the shared backend, taken from it, and its failures
    /// (either way).
    pub shared_put: AtomicU64,
    pub shared_fetched: AtomicU64,
    pub shared_failed: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    bytes: u64,
    /// ns since the epoch: filed, or last used by a query.
    used: u64,
}

#[derive(Debug)]
struct Part {
    owner: u64,
    since: Instant,
    file: Option<File>,
    path: PathBuf,
    got: u64,
    total: u64,
}

#[derive(Debug, Default)]
struct Inner {
    files: HashMap<Key, Entry>,
    total: u64,
    parts: HashMap<Key, Part>,
    lacking: HashMap<Key, (Instant, String)>,
    /// Sources being fetched from the shared backend (None), or that it
    /// lacked at the time.
    shared: HashMap<Key, Option<Instant>>,
    /// The latest use time handed out: uses are strictly ordered.
    clock: u64,
}

/// A server's symbol sources: what it holds, what is arriving, what agents
/// said they lack; the budget kept by dropping the least recently used.
#[derive(Debug)]
pub struct SymStore {
    root: PathBuf,
    budget: u64,
    inner: Mutex<Inner>,
    pub stats: Stats,
    backend: std::sync::OnceLock<std::sync::Arc<dyn Shared>>,
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl SymStore {
    /// Opens the sources under `root` (a server's data directory), drops
    /// unfinished parts, and reads what is kept, each last used as of its
    /// modification time.
    pub fn open(root: &Path, budget: u64) -> io::Result<SymStore> {
        let mut inner = Inner::default();
        for kind in [Kind::Binary, Kind::Kallsyms] {
            let dir = root.join(kind.dir());
            std::fs::create_dir_all(&dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let meta = entry.metadata()?;
                match Key::new(kind, &name) {
                    Some(key) if meta.is_file() => {
                        let used = meta
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                            .map_or(0, |d| d.as_nanos() as u64);
                        inner.total += meta.len();
                        inner.clock = inner.clock.max(used);
                        inner.files.insert(key, Entry { bytes: meta.len(), used });
                    }
                    _ if name.starts_with('.') && (name.ends_with(".part") || name.ends_with(".tmp")) => {
                        let _ = std::fs::remove_file(entry.path());
                    }
                    _ => {}
                }
            }
        }
        let store = SymStore {
            root: root.to_owned(),
            budget,
            inner: Mutex::new(inner),
            stats: Stats::default(),
            backend: std::sync::OnceLock::new(),
        };
        store.lock().evict(&store.root, budget, None, &store.stats);
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn has(&self, key: &Key) -> bool {
        self.lock().files.contains_key(key)
    }

    /// The file of `key`, if kept.
    pub fn path(&self, key: &Key) -> Option<PathBuf> {
        self.has(key).then(|| key.path(&self.root))
    }

    /// Marks `key` used now (a query named frames from it).
    pub fn touch(&self, key: &Key) {
        let mut g = self.lock();
        let t = g.stamp();
        if let Some(e) = g.files.get_mut(key) {
            e.used = t;
        }
    }

    /// Whether `owner` (a connection) should ask its agent for `key`: not
    /// kept, not arriving from another connection, not lately said lacking.
    /// True reserves it for `owner` until it arrives, is refused, or the
    /// owner lets go ([`SymStore::release`]).
    pub fn claim(&self, key: &Key, owner: u64) -> bool {
        let mut g = self.lock();
        if g.files.contains_key(key) || g.lacking.get(key).is_some_and(|(at, _)| at.elapsed() < LACK_TIMEOUT) {
            return false;
        }
        if let Some(p) = g.parts.get(key)
            && p.owner != owner
            && p.since.elapsed() < CLAIM_TIMEOUT
        {
            return false;
        }
        let path = self.root.join(key.kind.dir()).join(format!(".{}.{owner}.part", key.id));
        if let Some(old) =
            g.parts.insert(key.clone(), Part { owner, since: Instant::now(), file: None, path, got: 0, total: 0 })
        {
            let _ = std::fs::remove_file(old.path);
        }
        true
    }

    /// Lets go of every claim of `owner` (its connection closed).
    pub fn release(&self, owner: u64) {
        let mut g = self.lock();
        g.parts.retain(|_, p| {
            if p.owner == owner {
                let _ = std::fs::remove_file(&p.path);
            }
            p.owner != owner
        });
    }

    /// An agent's answer that it does not have `key`, and why.
    pub fn lacks(&self, key: &Key, owner: u64, why: &str) {
        let mut g = self.lock();
        if g.parts.get(key).is_some_and(|p| p.owner == owner) {
            let p = g.parts.remove(key).expect("just seen");
            let _ = std::fs::remove_file(p.path);
        }
        g.lacking.insert(key.clone(), (Instant::now(), why.to_owned()));
        self.stats.lacking.fetch_add(1, Ordering::Relaxed);
    }

    /// Why `key` is not kept, if an agent said.
    pub fn why_lacking(&self, key: &Key) -> Option<String> {
        self.lock().lacking.get(key).map(|(_, why)| why.clone())
    }

    /// Takes the chunk at `offset` of `total` compressed bytes of `key`
    /// from `owner`. The last chunk files the source once it decompresses
    /// and passes its check; returns its size then. A refusal drops the
    /// upload (the server may ask again later).
    pub fn receive(&self, key: &Key, owner: u64, offset: u64, total: u64, data: &[u8]) -> Result<Option<u64>, Refused> {
        let result = self.take(key, owner, offset, total, data);
        if result.is_err() {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            let mut g = self.lock();
            if g.parts.get(key).is_some_and(|p| p.owner == owner) {
                let p = g.parts.remove(key).expect("just seen");
                let _ = std::fs::remove_file(p.path);
            }
        }
        result
    }

    fn take(&self, key: &Key, owner: u64, offset: u64, total: u64, data: &[u8]) -> Result<Option<u64>, Refused> {
        let refuse = |why: String| Err(Refused(format!("{key}: {why}")));
        let taken = {
            let mut g = self.lock();
            let Some(p) = g.parts.get_mut(key).filter(|p| p.owner == owner) else {
                return refuse("not asked for on this connection".into());
            };
            if total == 0 || total > MAX_PACKED {
                return refuse(format!("{total} compressed bytes (1 to {MAX_PACKED} taken)"));
            }
            if offset != p.got || (p.got > 0 && total != p.total) || offset + data.len() as u64 > total {
                return refuse(format!(
                    "chunk of {} bytes at {offset} of {total} does not follow the {} bytes received",
                    data.len(),
                    p.got
                ));
            }
            // The chunk is taken here; its bytes are written outside the
            // lock (a connection sends one chunk at a time, and no other
            // connection may write this source).
            let file = match p.file.take() {
                Some(f) => f,
                None => File::create(&p.path).map_err(|e| Refused(format!("{key}: {}: {e}", p.path.display())))?,
            };
            p.got += data.len() as u64;
            p.total = total;
            (file, p.path.clone(), p.got == total)
        };
        let (mut file, part_path, whole) = taken;
        file.write_all(data).map_err(|e| Refused(format!("{key}: {}: {e}", part_path.display())))?;
        self.stats.received_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        if !whole {
            if let Some(p) = self.lock().parts.get_mut(key).filter(|p| p.owner == owner) {
                p.file = Some(file);
            }
            return Ok(None);
        }
        drop(file);
        // Whole: shared with the other servers as it came, once filed.
        let packed = match self.backend.get() {
            Some(_) => std::fs::read(&part_path).ok(),
            None => None,
        };
        let filed = self.file(key, &part_path);
        let _ = std::fs::remove_file(&part_path);
        let bytes = filed.map_err(|why| Refused(format!("{key}: {why}")))?;
        self.lock().parts.remove(key);
        if let (Some(backend), Some(packed)) = (self.backend.get(), packed) {
            match backend.put(key, &packed) {
                Ok(()) => self.stats.shared_put.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!("symbols: sharing {key}: {e}");
                    self.stats.shared_failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        Ok(Some(bytes))
    }

    /// Decompresses, checks and files the packed source at `packed` (outside
    /// the lock); returns its size.
    fn file(&self, key: &Key, packed: &Path) -> Result<u64, String> {
        let dest = key.path(&self.root);
        let tmp = packed.with_extension("tmp");
        let filed = unpack(packed, &tmp).and_then(|bytes| {
            check(key, &tmp)?;
            std::fs::rename(&tmp, &dest).map_err(|e| format!("{}: {e}", dest.display()))?;
            Ok(bytes)
        });
        let bytes = match filed {
            Ok(b) => b,
            Err(why) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(why);
            }
        };
        let mut g = self.lock();
        g.lacking.remove(key);
        let used = g.stamp();
        if let Some(old) = g.files.insert(key.clone(), Entry { bytes, used }) {
            g.total -= old.bytes;
        }
        g.total += bytes;
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        g.evict(&self.root, self.budget, Some(key), &self.stats);
        Ok(bytes)
    }

    /// Shares this store's sources with other servers through `backend`
    /// (set once).
    pub fn set_shared(&self, backend: std::sync::Arc<dyn Shared>) {
        let _ = self.backend.set(backend);
    }

    /// What to do about `key`, which this server may not keep: fetch it
    /// from the shared backend (reserved for the caller), wait for another
    /// fetch, or ask an agent.
    pub fn lookup(&self, key: &Key) -> Lookup {
        if self.backend.get().is_none() {
            return Lookup::Ask;
        }
        let mut g = self.lock();
        match g.shared.get(key) {
            Some(None) => Lookup::Wait,
            Some(Some(at)) if at.elapsed() < ABSENT_TIMEOUT => Lookup::Ask,
            _ => {
                g.shared.insert(key.clone(), None);
                Lookup::Fetch
            }
        }
    }

    /// Takes `key` from the shared backend (blocking: a caller holding
    /// [`Lookup::Fetch`]); whether it is kept now. A source the backend
    /// lacks, or that fails its checks, is not asked of it again for a
    /// while.
    pub fn fetch_shared(&self, key: &Key) -> bool {
        let Some(backend) = self.backend.get() else { return self.has(key) };
        let got = backend.get(key).and_then(|packed| {
            let Some(packed) = packed else { return Ok(false) };
            let part = self.root.join(key.kind.dir()).join(format!(".{}.shared.part", key.id));
            std::fs::write(&part, &packed).map_err(|e| format!("{}: {e}", part.display()))?;
            let filed = self.file(key, &part);
            let _ = std::fs::remove_file(&part);
            filed.map(|_| true).map_err(|why| format!("the shared copy: {why}"))
        });
        let mut g = self.lock();
        match got {
            Ok(true) => {
                g.shared.remove(key);
                self.stats.shared_fetched.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(false) => {
                g.shared.insert(key.clone(), Some(Instant::now()));
                false
            }
            Err(e) => {
                tracing::warn!("symbols: {key} from the shared store: {e}");
                g.shared.insert(key.clone(), Some(Instant::now()));
                self.stats.shared_failed.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// `key` kept here, or taken from the shared backend now (blocking):
    /// what a query calls before it names frames.
    pub fn ensure(&self, key: &Key) -> bool {
        self.has(key) || (self.lookup(key) == Lookup::Fetch && self.fetch_shared(key))
    }

    /// The store's figures: `symbols` in `/api/v1/status`,
    /// `kansoku_symbols_*` series.
    pub fn report(&self) -> Vec<Figure> {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (files, bytes, arriving) = {
            let g = self.lock();
            (g.files.len() as u64, g.total, g.parts.len() as u64)
        };
        vec![
            Figure::gauge("files", files),
            Figure::gauge("bytes", bytes),
            Figure::gauge("budget_bytes", self.budget),
            Figure::gauge("arriving", arriving),
            Figure::counter("received", n(&self.stats.received)),
            Figure::counter("received_bytes", n(&self.stats.received_bytes)),
            Figure::counter("refused", n(&self.stats.refused)),
            Figure::counter("lacking", n(&self.stats.lacking)),
            Figure::counter("evicted", n(&self.stats.evicted)),
            Figure::counter("evicted_bytes", n(&self.stats.evicted_bytes)),
            Figure::counter("shared_put", n(&self.stats.shared_put)),
            Figure::counter("shared_fetched", n(&self.stats.shared_fetched)),
            Figure::counter("shared_failed", n(&self.stats.shared_failed)),
        ]
    }
}

impl Inner {
    /// Now, as a use time after every earlier one.
    fn stamp(&mut self) -> u64 {
        self.clock = now_ns().max(self.clock + 1);
        self.clock
    }

    /// Drops the least recently used sources until the total fits
    /// `budget`; never `keep` (the source just filed: it is about to be used).
    fn evict(&mut self, root: &Path, budget: u64, keep: Option<&Key>, stats: &Stats) {
        if self.total <= budget {
            return;
        }
        let mut by_age: Vec<(u64, Key)> =
            self.files.iter().filter(|(k, _)| Some(*k) != keep).map(|(k, e)| (e.used, k.clone())).collect();
        by_age.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        for (_, key) in by_age {
            if self.total <= budget {
                break;
            }
            let e = self.files.remove(&key).expect("listed");
            self.total -= e.bytes;
            stats.evicted.fetch_add(1, Ordering::Relaxed);
            stats.evicted_bytes.fetch_add(e.bytes, Ordering::Relaxed);
            let _ = std::fs::remove_file(key.path(root));
        }
    }
}

/// Decompresses `from` into `to`, at most [`MAX_FILE`] bytes; returns the size.
fn unpack(from: &Path, to: &Path) -> Result<u64, String> {
    let src = File::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let dec = zstd::stream::read::Decoder::new(src).map_err(|e| format!("zstd: {e}"))?;
    let mut out = File::create(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let n = io::copy(&mut dec.take(MAX_FILE + 1), &mut out).map_err(|e| format!("not zstd as sent: {e}"))?;
    if n > MAX_FILE {
        return Err(format!("over {MAX_FILE} bytes once decompressed"));
    }
    Ok(n)
}

/// A binary carries the build id it is filed under; a symbol table reads as one.
fn check(key: &Key, file: &Path) -> Result<(), String> {
    match key.kind {
        Kind::Binary => match perf::procs::build_id(file) {
            Some(id) if perf::procs::hex(&id) == key.id => Ok(()),
            Some(id) => Err(format!("the file's build id is {}", perf::procs::hex(&id))),
            None => Err("not an ELF file with a build id".into()),
        },
        Kind::Kallsyms => {
            let f = File::open(file).map_err(|e| e.to_string())?;
            check_kallsyms(&mut io::BufReader::new(f))
        }
    }
}

#[cfg(test)]
mod tests;
