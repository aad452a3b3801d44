//! Top symbols of per-CPU samples (the table of `seeds/001`: rank, symbol,
//! module, samples, share), flame graphs and folded stacks, symbolised with
//! blazesym on the machine that serves the query:
//! - kernel addresses through its kallsyms;
//! - user addresses through the mappings their batches carry ([`Procs`],
//!   from the sampler's side band): (build id, file offset), the file taken
//!   from the build-id cache, else from its path when its build id still
//!   matches — so processes that have exited, and binaries since deleted or
//!   replaced, resolve;
//! - else through the live process's mappings (batches without a side band,
//!   such as imports), for samples of this boot;
//! - another host's or boot's kernel addresses through the kernel symbol
//!   table its agent sent ([`Procs::set_kallsyms`]), its binaries through
//!   the files its agent sent by build id (the same cache directory);
//! - else `[unknown] (why)`: the module and why it named nothing (no
//!   symbol for the address, its file not received, no build id), or the
//!   process where the address is in no mapping (JIT code, say).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolizer};
use blazesym::{Addr, Pid};
use codec::events::{MapInfo, ProcInfo};

/// Addresses at or above this are the kernel's (x86-64 and arm64 canonical
/// upper half).
pub const KERNEL_MIN: u64 = 0xffff_8000_0000_0000;

#[derive(Clone, Debug, PartialEq)]
pub struct TopRow {
    pub rank: usize,
    pub symbol: String,
    pub module: String,
    pub samples: u64,
    /// Per cent of all samples in the range.
    pub share: f64,
}

fn module_name(m: Option<&std::ffi::OsStr>) -> Arc<str> {
    m.map(|m| {
        let p = std::path::Path::new(m);
        Arc::from(p.file_name().unwrap_or(m).to_string_lossy())
    })
    .unwrap_or_else(|| Arc::from(""))
}

/// A symbol and its module, `[unknown] (comm, pid N)` when the address
/// does not resolve (a stripped binary, JIT code, or a process gone).
/// Shared strings: a name found once is the same allocation in [`Known`],
/// in every kept part's tree and table (issue 44: 10 s of a desktop's
/// stacks held 800 KB of copies of 3,500 names).
pub type Named = (Arc<str>, Arc<str>);

/// The processes of a range of samples, as their batches described them,
/// and where mapped files are kept by build id.
#[derive(Debug, Default)]
pub struct Procs {
    by_pid: HashMap<u32, (String, Vec<MapInfo>)>,
    cache: Option<PathBuf>,
    /// The samples are of another boot or machine: its kernel addresses
    /// and live processes are not this machine's to name.
    foreign: bool,
    /// The kernel symbol table of the samples' boot, when foreign.
    kallsyms: Option<PathBuf>,
    /// Why a build id's file is not here, where its host said.
    lacking: HashMap<Vec<u8>, String>,
    /// Build ids whose cached files named something (for the cache's
    /// least-recently-used order).
    used: std::sync::Mutex<std::collections::HashSet<Vec<u8>>>,
}

impl Procs {
    /// `cache`: the build-id cache directory (files named by hex build id).
    pub fn new(cache: Option<PathBuf>) -> Procs {
        Procs { cache, ..Procs::default() }
    }

    /// Names the kernel addresses of foreign samples (see
    /// [`Procs::set_foreign`]) from this copy of their boot's `/proc/kallsyms`.
    pub fn set_kallsyms(&mut self, path: PathBuf) {
        self.kallsyms = Some(path);
    }

    /// Says why the file of `build_id` is not in the cache (its host's answer).
    pub fn set_lacking(&mut self, build_id: Vec<u8>, why: String) {
        self.lacking.insert(build_id, why);
    }

    /// The build ids of every mapping the batches described.
    pub fn build_ids(&self) -> std::collections::HashSet<&[u8]> {
        self.by_pid
            .values()
            .flat_map(|(_, maps)| maps.iter())
            .map(|m| &m.build_id[..])
            .filter(|b| !b.is_empty())
            .collect()
    }

    /// The build ids whose cached files were read to name addresses.
    pub fn used(&self) -> Vec<Vec<u8>> {
        self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().cloned().collect()
    }

    /// Marks the samples as another boot's or machine's (see
    /// [`crate::boot_id`]): kernel addresses are then not looked up in this
    /// kernel's symbols, nor user addresses and names in this machine's
    /// processes; only what the batches and the build-id cache say names
    /// them.
    pub fn set_foreign(&mut self, foreign: bool) {
        self.foreign = foreign;
    }

    /// Adds a batch's process table; later batches win where they differ.
    pub fn add(&mut self, infos: &[ProcInfo]) {
        for p in infos {
            let (comm, maps) = self.by_pid.entry(p.pid).or_default();
            if !p.comm.is_empty() {
                comm.clone_from(&p.comm);
            }
            for m in &p.maps {
                if let Some(i) = maps.iter().position(|o| o == m) {
                    maps.remove(i);
                }
                maps.push(m.clone());
            }
        }
    }

    /// The mapping `ip` of `pid` fell in (the latest seen).
    pub fn find(&self, pid: u32, ip: u64) -> Option<&MapInfo> {
        self.by_pid.get(&pid)?.1.iter().rev().find(|m| m.file_offset(ip).is_some())
    }

    /// The process's name: as its batches said, else as `/proc` says now.
    pub fn comm(&self, pid: u32) -> Option<String> {
        if pid == 0 {
            return Some("swapper".into());
        }
        match self.by_pid.get(&pid) {
            Some((c, _)) if !c.is_empty() => Some(c.clone()),
            _ if self.foreign => None,
            _ => std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|c| c.trim().to_owned()),
        }
    }

    /// The file holding a mapping's code: the cached copy of its build id,
    /// else the file at its path if that is still the same build.
    fn file(&self, m: &MapInfo) -> Option<PathBuf> {
        if !m.build_id.is_empty()
            && let Some(dir) = &self.cache
        {
            let cached = dir.join(crate::procs::hex(&m.build_id));
            if cached.is_file() {
                self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(m.build_id.clone());
                return Some(cached);
            }
        }
        if self.foreign {
            // Another machine's path names another file, if any.
            return None;
        }
        let path = Path::new(&m.path);
        let same = m.build_id.is_empty() || crate::procs::build_id(path).is_some_and(|id| id == m.build_id);
        (path.is_file() && same).then(|| path.to_owned())
    }

    /// Why the addresses of mapping `m` named nothing: `found` says its
    /// file was read.
    fn why_unnamed(&self, m: &MapInfo, found: bool) -> String {
        let module = module_name(Some(m.path.as_ref()));
        if found {
            format!("{module}: no symbol for the address")
        } else if m.build_id.is_empty() {
            format!("{module}: no build id, and not at its path here")
        } else if let Some(why) = self.lacking.get(&m.build_id) {
            format!("{module}: its host did not send it: {why}")
        } else if self.foreign {
            format!("{module}: not received from its host yet")
        } else {
            format!("{module}: gone from its path and not in the build-id cache")
        }
    }
}

/// Names found before, kept across requests (issue 44: every refresh of a
/// 15-minute flame graph parsed the binaries' symbols, their DWARF and
/// kallsyms again, most of a core with the host view open). A user address
/// is kept by (build id, file offset), a kernel one by (the symbol table,
/// address): both name the same symbol for as long as they exist. Only
/// names found are kept (an unknown may be named once its file arrives).
/// Addresses named through the live process (no mapping in the batches:
/// JIT code, say) are kept by (pid, address) for [`LIVE_FOR`], found or
/// not: asking the process again would stat every one of its mappings.
#[derive(Default)]
struct Known {
    /// Build id -> file offset -> its name, or None: the file was read and
    /// has no symbol there (stripped).
    user: HashMap<Vec<u8>, HashMap<u64, Option<Arc<str>>>>,
    /// Kernel symbol table (None: this boot's) -> address -> name.
    kernel: HashMap<Option<PathBuf>, HashMap<u64, Arc<str>>>,
    live: HashMap<(u32, u64), Named>,
    live_since: Option<std::time::Instant>,
}

/// How long a name read from a live process is kept (a pid may be reused).
const LIVE_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// How many names [`Known`] holds before it starts again.
const KNOWN_MAX: usize = 1 << 20;

fn known() -> std::sync::MutexGuard<'static, Known> {
    static KNOWN: std::sync::OnceLock<std::sync::Mutex<Known>> = std::sync::OnceLock::new();
    let mut k = KNOWN.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let held = k.user.values().map(HashMap::len).sum::<usize>() + k.kernel.values().map(HashMap::len).sum::<usize>();
    if held + k.live.len() > KNOWN_MAX {
        *k = Known::default();
    }
    if k.live_since.is_none_or(|t| t.elapsed() > LIVE_FOR) {
        k.live.clear();
        k.live_since = Some(std::time::Instant::now());
    }
    k
}

/// What blazesym found for one address: its symbol and module.
#[derive(Debug)]
struct Found {
    name: Arc<str>,
    module: Option<std::ffi::OsString>,
}

/// The addresses of one source, as blazesym takes them.
enum Addresses {
    FileOffsets(Vec<u64>),
    Absolute(Vec<Addr>),
}

/// A job for the symbolizer's thread.
type Job = Box<dyn FnOnce(&Symbolizer) + Send>;

/// Symbolisations that panicked inside blazesym (their addresses are
/// named `[unknown]`; the thread goes on with a fresh symbolizer).
pub static SYMBOLIZER_PANICS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs `f` on the one thread that owns blazesym's `Symbolizer` (it is not
/// `Send`) and keeps it: the symbolizer keeps every file it parsed —
/// symbol tables, DWARF, kallsyms — while the file is unchanged. Made
/// anew per request, every refresh of the host view parsed libc's DWARF
/// and the kernel's table again for the few addresses not named before: a
/// third of the server's CPU (issue 44). None when the job panicked or no
/// thread could be started (both logged).
fn on_symbolizer<T: Send + 'static>(f: impl FnOnce(&Symbolizer) -> T + Send + 'static) -> Option<T> {
    static WORKER: std::sync::OnceLock<std::sync::Mutex<Option<std::sync::mpsc::SyncSender<Job>>>> =
        std::sync::OnceLock::new();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let mut job: Job = Box::new(move |s| drop(tx.send(f(s))));
    let mut worker = WORKER.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // A worker that is gone (it cannot be: panics are caught) is replaced.
    for _ in 0..2 {
        if worker.is_none() {
            *worker = start_symbolizer();
        }
        match worker.as_ref()?.send(job) {
            Ok(()) => break,
            Err(std::sync::mpsc::SendError(back)) => {
                job = back;
                *worker = None;
            }
        }
    }
    drop(worker);
    rx.recv().ok()
}

fn start_symbolizer() -> Option<std::sync::mpsc::SyncSender<Job>> {
    // Callers wait for their answer, so few jobs are ever queued; a full
    // queue makes the next caller wait its turn.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(16);
    let started = std::thread::Builder::new().name("symbolizer".into()).spawn(move || {
        let mut symbolizer = Symbolizer::new();
        for job in rx {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&symbolizer))).is_err() {
                SYMBOLIZER_PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(
                    "symbolizer: blazesym panicked; those addresses are [unknown], the files it kept are dropped"
                );
                symbolizer = Symbolizer::new();
            }
        }
    });
    match started {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::error!("symbolizer: no thread: {e}; addresses are [unknown]");
            None
        }
    }
}

/// What the kept symbolizer finds for `addrs` of `src`, in their order
/// (None: the source could not be read).
fn named_by(src: Source<'static>, addrs: Addresses) -> Option<Vec<Option<Found>>> {
    on_symbolizer(move |s| {
        let input = match &addrs {
            Addresses::FileOffsets(o) => Input::FileOffset(o.as_slice()),
            Addresses::Absolute(a) => Input::AbsAddr(a.as_slice()),
        };
        let found = s.symbolize(&src, input).ok()?;
        Some(
            found
                .iter()
                .map(|f| {
                    f.as_sym().map(|sym| Found {
                        name: Arc::from(&*sym.name),
                        module: sym.module.as_deref().map(std::ffi::OsStr::to_os_string),
                    })
                })
                .collect(),
        )
    })
    .flatten()
}

/// Names every (pid, address): kernel addresses through kallsyms, user
/// addresses through their mappings in `procs` (or the live process).
pub fn symbolize(addrs: impl IntoIterator<Item = (u32, u64)>, procs: &Procs) -> HashMap<(u32, u64), Named> {
    // The kernel's symbol table: this boot's (None) or the one received.
    let table_key = procs.foreign.then(|| procs.kallsyms.clone().unwrap_or_default());
    let mut out = HashMap::new();
    let mut kernel: Vec<(u32, Addr)> = Vec::new();
    let mut user: HashMap<u32, Vec<Addr>> = HashMap::new();
    // Why a user address named nothing, where its mapping says: (reason, module).
    let mut why: HashMap<(u32, u64), (String, Arc<str>)> = HashMap::new();
    // File -> (module, [(pid, ip, file offset, mapping)]).
    type Offsets<'a> = (Arc<str>, Vec<(u32, u64, u64, &'a MapInfo)>);
    let kernel_module: Arc<str> = Arc::from("[kernel]");
    // A module's name once per mapped path, not per address.
    let mut modules: FxHashMap<String, Arc<str>> = FxHashMap::default();
    let mut module_of = |path: &str| -> Arc<str> {
        if let Some(m) = modules.get(path) {
            return m.clone();
        }
        let m = module_name(Some(path.as_ref()));
        modules.insert(path.to_owned(), m.clone());
        m
    };
    let mut files: HashMap<PathBuf, Offsets<'_>> = HashMap::new();
    let mut file_of: HashMap<(Vec<u8>, String), Option<PathBuf>> = HashMap::new();
    let mut found = known();
    let Known { user: known_user, kernel: known_kernel, live: known_live, .. } = &mut *found;
    let known_kernel = known_kernel.entry(table_key).or_default();
    let mut marked: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    for (pid, ip) in addrs {
        if ip >= KERNEL_MIN {
            match known_kernel.get(&ip) {
                Some(name) => drop(out.insert((pid, ip), (name.clone(), kernel_module.clone()))),
                None => kernel.push((pid, ip)),
            }
            continue;
        }
        let Some(m) = procs.find(pid, ip) else {
            user.entry(pid).or_default().push(ip);
            continue;
        };
        if !m.build_id.is_empty()
            && let Some(name) = m.file_offset(ip).and_then(|off| known_user.get(m.build_id.as_slice())?.get(&off))
        {
            match name {
                Some(name) => {
                    out.insert((pid, ip), (name.clone(), module_of(&m.path)));
                    // Still in use, for the build-id cache's order.
                    if marked.insert(&m.build_id) {
                        procs.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(m.build_id.clone());
                    }
                }
                None => {
                    why.insert((pid, ip), (procs.why_unnamed(m, true), module_of(&m.path)));
                    user.entry(pid).or_default().push(ip);
                }
            }
            continue;
        }
        match file_of.entry((m.build_id.clone(), m.path.clone())).or_insert_with(|| procs.file(m)).clone() {
            Some(file) => {
                let e = files.entry(file).or_insert_with(|| (module_of(&m.path), Vec::new()));
                e.1.push((pid, ip, m.file_offset(ip).expect("BUG: found by its range"), m));
            }
            None => {
                why.insert((pid, ip), (procs.why_unnamed(m, false), module_of(&m.path)));
                user.entry(pid).or_default().push(ip);
            }
        }
    }
    for (file, (module, addrs)) in files {
        let offsets: Vec<u64> = addrs.iter().map(|a| a.2).collect();
        let syms = named_by(Source::Elf(Elf::new(&file)), Addresses::FileOffsets(offsets));
        for (i, &(pid, ip, _, m)) in addrs.iter().enumerate() {
            match syms.as_ref().and_then(|s| s[i].as_ref()) {
                Some(sym) => {
                    if !m.build_id.is_empty() {
                        known_user.entry(m.build_id.clone()).or_default().insert(addrs[i].2, Some(sym.name.clone()));
                    }
                    out.insert((pid, ip), (sym.name.clone(), module.clone()));
                }
                // Not in the file's symbols (stripped): perhaps the live
                // process knows more; else unknown below.
                None => {
                    if syms.is_some() && !m.build_id.is_empty() {
                        known_user.entry(m.build_id.clone()).or_default().insert(addrs[i].2, None);
                    }
                    why.insert((pid, ip), (procs.why_unnamed(m, true), module.clone()));
                    user.entry(pid).or_default().push(ip);
                }
            }
        }
    }
    if !kernel.is_empty() {
        let table = match (&procs.kallsyms, procs.foreign) {
            (_, false) => Some(blazesym::MaybeDefault::Default),
            (Some(k), true) => Some(blazesym::MaybeDefault::Some(k.clone())),
            (None, true) => None,
        };
        let syms = table.and_then(|kallsyms| {
            let addrs: Vec<Addr> = kernel.iter().map(|k| k.1).collect();
            let src = Source::Kernel(Kernel {
                kallsyms,
                vmlinux: blazesym::MaybeDefault::None,
                debug_syms: false,
                ..Kernel::default()
            });
            named_by(src, Addresses::Absolute(addrs))
        });
        for (i, &(pid, ip)) in kernel.iter().enumerate() {
            let name = match syms.as_ref().and_then(|s| s[i].as_ref()) {
                Some(sym) => {
                    known_kernel.insert(ip, sym.name.clone());
                    sym.name.clone()
                }
                None if syms.is_some() => Arc::from("[unknown]"),
                None => Arc::from("[unknown] (kernel of another boot: its symbol table not received)"),
            };
            out.insert((pid, ip), (name, kernel_module.clone()));
        }
    }
    let nothing: Arc<str> = Arc::from("");
    for (pid, addrs) in user {
        let unknown: Arc<str> = match procs.comm(pid) {
            Some(c) if pid > 0 => Arc::from(format!("[unknown] ({c}, pid {pid})")),
            _ => Arc::from(format!("[unknown] (pid {pid})")),
        };
        let live = pid > 0 && !procs.foreign;
        let addrs: Vec<Addr> = if live {
            let mut missing = Vec::new();
            for ip in addrs {
                match known_live.get(&(pid, ip)) {
                    Some(named) => {
                        out.insert((pid, ip), named.clone());
                    }
                    None => missing.push(ip),
                }
            }
            missing
        } else {
            addrs
        };
        if addrs.is_empty() {
            continue;
        }
        let syms = if live {
            named_by(Source::Process(Process::new(Pid::from(pid))), Addresses::Absolute(addrs.clone()))
        } else {
            None
        };
        for (i, &ip) in addrs.iter().enumerate() {
            let named = match (syms.as_ref().and_then(|s| s[i].as_ref()), why.remove(&(pid, ip))) {
                (Some(sym), _) => (sym.name.clone(), module_name(sym.module.as_deref())),
                (None, Some((reason, module))) => (Arc::from(format!("[unknown] ({reason})")), module),
                (None, None) => (unknown.clone(), nothing.clone()),
            };
            if live {
                known_live.insert((pid, ip), named.clone());
            }
            out.insert((pid, ip), named);
        }
    }
    out
}

/// Symbolises `counts` ((pid, ip) -> samples) and returns the `n` symbols
/// with the most samples.
pub fn top(counts: &HashMap<(u32, u64), u64>, n: usize, procs: &Procs) -> Vec<TopRow> {
    let by_sym = by_symbol(counts, procs);
    top_of(&[&by_sym], n)
}

/// Symbolises `counts` ((pid, ip) -> samples) and sums them by symbol:
/// what a part of a range keeps for [`top_of`].
pub fn by_symbol(counts: &HashMap<(u32, u64), u64>, procs: &Procs) -> HashMap<Named, u64> {
    let names = symbolize(counts.keys().copied(), procs);
    let mut by_sym: HashMap<Named, u64> = HashMap::with_capacity(names.len());
    for (k, &c) in counts {
        *by_sym.entry(names[k].clone()).or_default() += c;
    }
    by_sym
}

/// The `n` symbols with the most samples in the sum of `parts` (each a
/// [`by_symbol`]), ties by name.
pub fn top_of(parts: &[&HashMap<Named, u64>], n: usize) -> Vec<TopRow> {
    let mut by_sym: HashMap<&Named, u64> = HashMap::new();
    for part in parts {
        for (k, &c) in *part {
            *by_sym.entry(k).or_default() += c;
        }
    }
    let total: u64 = by_sym.values().sum();
    let mut rows: Vec<(&Named, u64)> = by_sym.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    rows.into_iter()
        .take(n)
        .enumerate()
        .map(|(i, ((symbol, module), samples))| TopRow {
            rank: i + 1,
            symbol: symbol.to_string(),
            module: module.to_string(),
            samples,
            share: if total > 0 { samples as f64 * 100.0 / total as f64 } else { 0.0 },
        })
        .collect()
}

/// One frame of a flame graph: its samples (its own and its callees').
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub name: Arc<str>,
    pub value: u64,
    pub children: Vec<Frame>,
}

impl Frame {
    /// The tree in preorder (callees by samples, most first) as (name,
    /// samples, depth): flat, so no client meets a nesting limit.
    pub fn flatten(&self) -> Vec<(String, u64, u32)> {
        let mut out = Vec::new();
        let mut todo = vec![(self, 0u32)];
        while let Some((f, d)) = todo.pop() {
            out.push((f.name.to_string(), f.value, d));
            todo.extend(f.children.iter().rev().map(|c| (c, d + 1)));
        }
        out
    }

    /// Frames in this tree, itself included.
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(Frame::count).sum::<usize>()
    }

    /// About how many bytes the tree holds of its own (names are shared).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Frame>() + self.children.iter().map(Frame::bytes).sum::<usize>()
    }

    /// Callees by samples, most first (then by name), all the way down.
    pub fn sort(&mut self) {
        self.children.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
        self.children.iter_mut().for_each(Frame::sort);
    }
}

/// The sum of flame graphs — a range's, from its minutes' — with every
/// frame's callees of fewer than `min` samples in all merged into one
/// frame `…` placed last (its samples are theirs; it has no callees): what
/// a flame graph of `min` samples to a pixel cannot draw is neither built
/// nor sent (issue 44: 11 MB for a 15-minute graph, 820 k frames of a
/// machine building software). Frames of the same name under the same
/// callers are one. Returns the tree, callees sorted as [`Frame::sort`]
/// does, and how many callees went into `…` frames. `min` 0 keeps all.
pub fn sum(parts: &[&Frame], min: u64) -> (Frame, usize) {
    let mut merged = 0;
    let root = sum_of(parts, min, &mut merged);
    (root, merged)
}

/// [`sum`] of `same`: one place's frames in every part (the same name).
fn sum_of(same: &[&Frame], min: u64, merged: &mut usize) -> Frame {
    let mut groups: Vec<Vec<&Frame>> = Vec::new();
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for f in same {
        for c in &f.children {
            let i = *index.entry(&*c.name).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[i].push(c);
        }
    }
    let (mut children, mut small, mut n_small) = (Vec::new(), 0, 0);
    for g in &groups {
        let v: u64 = g.iter().map(|c| c.value).sum();
        if v >= min {
            children.push(sum_of(g, min, merged));
        } else {
            small += v;
            n_small += 1;
        }
    }
    children.sort_by(|a: &Frame, b: &Frame| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    if n_small > 0 {
        *merged += n_small;
        children.push(Frame { name: Arc::from("…"), value: small, children: Vec::new() });
    }
    Frame {
        name: same.first().map_or_else(|| Arc::from("all"), |f| f.name.clone()),
        value: same.iter().map(|f| f.value).sum(),
        children,
    }
}

/// Names every frame of `stacks` ((pid, call chain) -> samples), each
/// distinct (pid, address) once (a 15-minute profile repeats each in
/// thousands of stacks).
pub fn symbolize_stacks(stacks: &HashMap<(u32, Vec<u64>), u64>, procs: &Procs) -> HashMap<(u32, u64), Named> {
    let mut seen: FxHashSet<(u32, u64)> = FxHashSet::default();
    for (pid, s) in stacks.keys() {
        seen.extend(s.iter().map(|&ip| (*pid, ip)));
    }
    symbolize(seen, procs)
}

/// Symbolised stacks, root first, each with its process and samples.
pub fn named_stacks(stacks: &HashMap<(u32, Vec<u64>), u64>, procs: &Procs) -> Vec<(Vec<String>, u64)> {
    let names = symbolize_stacks(stacks, procs);
    let mut processes: HashMap<u32, String> = HashMap::new();
    stacks
        .iter()
        .map(|((pid, stack), &c)| {
            let process = processes
                .entry(*pid)
                .or_insert_with(|| procs.comm(*pid).map_or_else(|| format!("pid {pid}"), |c| format!("{c} ({pid})")));
            let mut frames = vec![process.clone()];
            frames.extend(stack.iter().rev().map(|ip| names[&(*pid, *ip)].0.to_string()));
            (frames, c)
        })
        .collect()
}

/// The flame graph of `stacks` ((pid, call chain leaf first) -> samples):
/// root "all", then the process, then frames from the outermost caller in.
///
/// Built over interned names — a tree of indices whose edges are one hash
/// table — and only then made into [`Frame`]s: when every frame of every
/// stack was a `String` found among its siblings by comparing names, 1.4 M
/// samples of 15 minutes took seconds (issue 44).
pub fn flame(stacks: &HashMap<(u32, Vec<u64>), u64>, procs: &Procs) -> Frame {
    let named = symbolize_stacks(stacks, procs);
    // Each name once; frames refer to it by index.
    let mut strings: Vec<Arc<str>> = vec![Arc::from("all")];
    let mut ids: FxHashMap<Arc<str>, u32> = FxHashMap::default();
    let mut intern = |name: &Arc<str>, strings: &mut Vec<Arc<str>>| -> u32 {
        if let Some(&i) = ids.get(name) {
            return i;
        }
        strings.push(name.clone());
        ids.insert(name.clone(), strings.len() as u32 - 1);
        strings.len() as u32 - 1
    };
    let mut name_of: FxHashMap<(u32, u64), u32> = FxHashMap::default();
    for (k, (name, _)) in &named {
        name_of.insert(*k, intern(name, &mut strings));
    }
    let mut process_of: FxHashMap<u32, u32> = FxHashMap::default();
    // Nodes as (name, samples), the root first; edges (parent, name) -> child.
    let mut nodes: Vec<(u32, u64)> = vec![(0, 0)];
    let mut edges: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    for ((pid, stack), &c) in stacks {
        let process = *process_of.entry(*pid).or_insert_with(|| {
            let name = procs.comm(*pid).map_or_else(|| format!("pid {pid}"), |c| format!("{c} ({pid})"));
            intern(&Arc::from(name), &mut strings)
        });
        nodes[0].1 += c;
        let mut at = 0;
        for name in std::iter::once(process).chain(stack.iter().rev().map(|ip| name_of[&(*pid, *ip)])) {
            at = *edges.entry((at, name)).or_insert_with(|| {
                nodes.push((name, 0));
                nodes.len() as u32 - 1
            });
            nodes[at as usize].1 += c;
        }
    }
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
    for (&(parent, _), &child) in &edges {
        children[parent as usize].push(child);
    }
    // Depth is a call chain's (the kernel caps each at 127 frames).
    fn build(i: u32, nodes: &[(u32, u64)], children: &[Vec<u32>], strings: &[Arc<str>]) -> Frame {
        let (name, value) = nodes[i as usize];
        Frame {
            name: strings[name as usize].clone(),
            value,
            children: children[i as usize].iter().map(|&c| build(c, nodes, children, strings)).collect(),
        }
    }
    let mut root = build(0, &nodes, &children, &strings);
    root.sort();
    root
}

/// The folded-stacks text of `stacks` (`process;outer;...;leaf count` per
/// line), as Brendan Gregg's flamegraph.pl, inferno and speedscope read it.
pub fn folded(stacks: &HashMap<(u32, Vec<u64>), u64>, procs: &Procs) -> String {
    let mut lines: Vec<(String, u64)> = named_stacks(stacks, procs)
        .into_iter()
        .map(|(frames, c)| (frames.iter().map(|f| f.replace([';', '\n'], "_")).collect::<Vec<_>>().join(";"), c))
        .collect();
    lines.sort();
    // Stacks that name the same after symbolising are one line.
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let mut c = lines[i].1;
        let mut j = i + 1;
        while j < lines.len() && lines[j].0 == lines[i].0 {
            c += lines[j].1;
            j += 1;
        }
        out.push_str(&format!("{} {c}\n", lines[i].0));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_with_a_name(x: u64) -> u64 {
        x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(7)
    }

    #[test]
    fn own_functions_and_kernel_addresses_are_named() {
        let f = a_function_with_a_name as *const () as usize as u64;
        std::hint::black_box(a_function_with_a_name(3));
        let mut counts = HashMap::new();
        counts.insert((std::process::id(), f + 1), 30);
        counts.insert((std::process::id(), 0x10), 5); // nothing mapped there
        counts.insert((999_999_999, 0x401000), 5); // no such process
        let rows = top(&counts, 10, &Procs::default());
        assert_eq!(rows[0].samples, 30);
        assert!(rows[0].symbol.contains("a_function_with_a_name"), "{rows:?}");
        assert!((rows[0].share - 75.0).abs() < 1e-9);
        assert!(rows.iter().any(|r| r.symbol == "[unknown] (pid 999999999)" && r.samples == 5), "{rows:?}");
    }

    #[test]
    fn another_boot_s_samples_are_not_named_from_this_machine() {
        let f = a_function_with_a_name as *const () as usize as u64;
        std::hint::black_box(a_function_with_a_name(5));
        let me = std::process::id();
        let kernel = 0xffff_ffff_8100_0000;
        let mut counts = HashMap::new();
        counts.insert((me, f + 1), 30);
        counts.insert((me, kernel), 10);
        // This machine's: the live process and kallsyms name them.
        let here = top(&counts, 10, &Procs::default());
        assert!(here[0].symbol.contains("a_function_with_a_name"), "{here:?}");
        assert!(here.iter().any(|r| r.module == "[kernel]" && !r.symbol.contains("another boot")), "{here:?}");
        // Another boot's (or machine's) pid and kernel addresses are not
        // this machine's: unknown rather than wrongly named.
        let mut foreign = Procs::default();
        foreign.set_foreign(true);
        let there = top(&counts, 10, &foreign);
        assert!(there.iter().any(|r| r.symbol == format!("[unknown] (pid {me})") && r.samples == 30), "{there:?}");
        let unnamed = "[unknown] (kernel of another boot: its symbol table not received)";
        assert!(there.iter().any(|r| r.symbol == unnamed && r.samples == 10), "{there:?}");
        assert_eq!(foreign.comm(me), None, "not this machine's /proc");
        // With its boot's table (here, a copy of this one's) they are named.
        let copy = std::env::temp_dir().join(format!("kansoku-kallsyms-{me}"));
        std::fs::write(&copy, std::fs::read("/proc/kallsyms").unwrap()).unwrap();
        foreign.set_kallsyms(copy.clone());
        let named = top(&counts, 10, &foreign);
        std::fs::remove_file(&copy).unwrap();
        let kernel_row = named.iter().find(|r| r.module == "[kernel]").unwrap();
        assert!(!kernel_row.symbol.starts_with("[unknown]"), "{named:?}");
    }

    #[test]
    fn an_unnamed_frame_says_why() {
        let cache = tempfile_dir();
        let map = |build_id: Vec<u8>, path: &str| MapInfo {
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            build_id,
            path: path.into(),
        };
        let mut procs = Procs::new(Some(cache.clone()));
        procs.set_foreign(true);
        procs.add(&[
            ProcInfo { pid: 7, comm: "a".into(), maps: vec![map(vec![1, 2], "/opt/app/bin/server")] },
            ProcInfo { pid: 8, comm: "b".into(), maps: vec![map(vec![], "/usr/bin/nobuildid")] },
            ProcInfo { pid: 9, comm: "c".into(), maps: vec![map(vec![3, 4], "/usr/lib/libgone.so")] },
        ]);
        procs.set_lacking(vec![3, 4], "not in the agent's build-id cache".into());
        let names = symbolize([(7, 0x1100), (8, 0x1100), (9, 0x1100), (9, 0x9000)], &procs);
        assert_eq!(names[&(7, 0x1100)], ("[unknown] (server: not received from its host yet)".into(), "server".into()));
        assert_eq!(
            names[&(8, 0x1100)],
            ("[unknown] (nobuildid: no build id, and not at its path here)".into(), "nobuildid".into())
        );
        assert_eq!(
            names[&(9, 0x1100)],
            (
                "[unknown] (libgone.so: its host did not send it: not in the agent's build-id cache)".into(),
                "libgone.so".into()
            )
        );
        // In no mapping (JIT code, say): the process.
        assert_eq!(names[&(9, 0x9000)], ("[unknown] (c, pid 9)".into(), "".into()));
        // A file received but without a symbol there: said so.
        std::fs::copy("/bin/true", cache.join("0102")).unwrap();
        let names = symbolize([(7, 0x1100)], &procs);
        assert_eq!(&*names[&(7, 0x1100)].0, "[unknown] (server: no symbol for the address)");
        std::fs::remove_dir_all(&cache).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kansoku-symbols-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

#[cfg(test)]
mod flame_tests {
    use super::*;

    /// Callees under a pixel merge into one last `…` frame per parent; the
    /// values still add up and the big frames keep their place. Parts add
    /// up frame by frame: a callee small in each part may be big in all.
    #[test]
    fn sums_merge_what_a_pixel_cannot_show() {
        let leaf = |name: &str, value| Frame { name: name.into(), value, children: Vec::new() };
        let root = Frame {
            name: "all".into(),
            value: 100,
            children: vec![
                Frame { name: "big".into(), value: 90, children: vec![leaf("a", 80), leaf("b", 6), leaf("c", 4)] },
                Frame { name: "tiny1".into(), value: 6, children: vec![leaf("d", 6)] },
                leaf("tiny2", 4),
            ],
        };
        let (one, merged) = sum(&[&root], 10);
        assert_eq!(merged, 4, "b and c into one frame; tiny1 (with d) and tiny2 into another");
        let flat: Vec<(String, u64, u32)> = one.flatten();
        let names: Vec<(&str, u64, u32)> = flat.iter().map(|(n, v, d)| (n.as_str(), *v, *d)).collect();
        assert_eq!(names, [("all", 100, 0), ("big", 90, 1), ("a", 80, 2), ("…", 10, 2), ("…", 10, 1)]);
        let (all, merged) = sum(&[&root], 0);
        assert_eq!((merged, all.count()), (0, root.count()), "nothing below 0 samples");
        // Two parts: tiny1 (6 + 6) and b (6 + 6) pass the pixel together.
        let (two, _) = sum(&[&root, &root], 11);
        let flat = two.flatten();
        let names: Vec<(&str, u64, u32)> = flat.iter().map(|(n, v, d)| (n.as_str(), *v, *d)).collect();
        assert_eq!(
            names,
            [
                ("all", 200, 0),
                ("big", 180, 1),
                ("a", 160, 2),
                ("b", 12, 2),
                ("…", 8, 2),
                ("tiny1", 12, 1),
                ("d", 12, 2),
                ("…", 8, 1)
            ]
        );
    }

    #[inline(never)]
    fn outer_function_for_the_flame(x: u64) -> u64 {
        x.rotate_left(3) ^ 0x55
    }

    #[test]
    fn stacks_become_a_tree_and_folded_lines() {
        let f = outer_function_for_the_flame as *const () as usize as u64;
        std::hint::black_box(outer_function_for_the_flame(1));
        let me = std::process::id();
        let mut stacks = HashMap::new();
        stacks.insert((me, vec![0x10, f + 1]), 3); // leaf unknown, called from the named function
        stacks.insert((me, vec![f + 2]), 2);
        let root = flame(&stacks, &Procs::default());
        assert_eq!(root.value, 5);
        assert_eq!(root.children.len(), 1, "one process");
        let process = &root.children[0];
        assert!(process.name.ends_with(&format!("({me})")), "{}", process.name);
        let outer = &process.children[0];
        assert!(outer.name.contains("outer_function_for_the_flame"), "{root:?}");
        assert_eq!((outer.value, outer.children.len()), (5, 1));
        assert_eq!(outer.children[0].value, 3);
        let flat = root.flatten();
        assert_eq!(flat.len(), 4);
        assert_eq!(flat.iter().map(|f| (f.1, f.2)).collect::<Vec<_>>(), [(5, 0), (5, 1), (5, 2), (3, 3)]);
        let text = folded(&stacks, &Procs::default());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines.iter().any(|l| l.ends_with(" 2") && l.split(';').count() == 2), "{text}");
        assert!(lines.iter().any(|l| l.ends_with(" 3") && l.split(';').count() == 3), "{text}");
    }
}
