//! Loading the BPF object, attaching it, and reading its maps.

#![allow(
    unsafe_code,
    reason = "the histogram array is mapped into our memory: mmap, munmap, its view as atomics; malloc_trim after loading"
)]

use std::collections::BTreeMap;

use aya::Ebpf;
use aya::programs::RawTracePoint;

/// The compiled program (empty when built without clang).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/syscalls.bpf.o"));

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(
        "kernel tracing was left out of this build (no clang when it was compiled): apt-get install clang, then rebuild"
    )]
    NotBuilt,
    #[error("loading the BPF object: {0} (kernel tracing needs root or CAP_BPF and CAP_PERFMON)")]
    Load(#[from] aya::EbpfError),
    #[error("BPF program {name}: {source} (kernel tracing needs root or CAP_BPF and CAP_PERFMON)")]
    Program { name: &'static str, source: aya::programs::ProgramError },
    #[error("mapping the kernel's histogram array: {0}")]
    Mmap(nix::Error),
    #[error("BPF map {name}: {source}")]
    Map { name: &'static str, source: aya::maps::MapError },
    #[error("BPF map {0} is missing from the object")]
    MissingMap(&'static str),
    #[error("latency histograms by BPF were not asked for (--trace-counts)")]
    CountsAsked,
    #[error("reading the tracepoints' counters: {0}")]
    Counts(std::io::Error),
    #[error("{bpf}; and counting tracepoint events with perf_event_open failed too: {counts}")]
    Neither { bpf: String, counts: std::io::Error },
    #[error(
        "tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {0} (mount -t tracefs nodev /sys/kernel/tracing)"
    )]
    Tracefs(nix::Error),
    #[error("the kernel's BTF (/sys/kernel/btf/vmlinux): {0}")]
    Btf(String),
}

/// Where tracepoints are attached by name: mounted here when it is not
/// (`mount -t tracefs nodev /sys/kernel/tracing`), as a tracer must.
pub(crate) fn ensure_tracefs() -> Result<(), TraceError> {
    let at = std::path::Path::new("/sys/kernel/tracing");
    if at.join("events").is_dir() || std::path::Path::new("/sys/kernel/debug/tracing/events").is_dir() {
        return Ok(());
    }
    nix::mount::mount(Some("nodev"), at, Some("tracefs"), nix::mount::MsFlags::empty(), None::<&str>)
        .map_err(TraceError::Tracefs)?;
    tracing::info!("trace: mounted tracefs at {}", at.display());
    Ok(())
}

/// The histogram array's layout (`bpf/syscalls.bpf.c`): `NR_MAX` calls ×
/// `BUCKETS` counts, then `NR_MAX` total times (ns).
pub const NR_MAX: usize = 512;
pub const BUCKETS: usize = 128;
/// The row of futex waits (a pseudo-call: no system call has the number).
const FUTEX_WAITS: usize = NR_MAX - 1;
/// The row whose first count is the calls lost to a taken entry slot.
const LOST: usize = NR_MAX - 2;
const ENTRIES: usize = NR_MAX * BUCKETS + NR_MAX;

/// The kernel's histogram array, mapped read-only into our memory: read
/// without a system call, while the programs add to it.
#[derive(Debug)]
struct Mapped {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
    len: usize,
}

// SAFETY: the mapping is shared memory of u64 counters that only the kernel
// writes; reading it from any thread is what it is for.
unsafe impl Send for Mapped {}

impl Mapped {
    fn new(fd: std::os::fd::BorrowedFd<'_>) -> Result<Mapped, TraceError> {
        let len = std::num::NonZeroUsize::new(ENTRIES * 8).expect("non-empty");
        // SAFETY: a fresh read-only shared mapping of a BPF array map whose
        // size is ENTRIES u64 values (the map was created with F_MMAPABLE);
        // nothing else aliases it mutably in this process.
        let ptr = unsafe {
            nix::sys::mman::mmap(
                None,
                len,
                nix::sys::mman::ProtFlags::PROT_READ,
                nix::sys::mman::MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(TraceError::Mmap)?;
        Ok(Mapped { ptr, len: len.get() })
    }

    /// The counters, as the kernel has them now (each read atomically).
    fn values(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: the mapping is ENTRIES aligned u64s, alive as long as self;
        // the kernel updates them with atomic adds, so atomic loads read them.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), ENTRIES) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what new() mapped, once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.len) };
    }
}

/// `struct key` of `bpf/block.bpf.c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockKey {
    pub dev: u32,
    pub what: u8,
    pub op: u8,
    pub bucket: u16,
}

// SAFETY: a #[repr(C)] struct of integers without padding (4 + 1 + 1 + 2
// bytes), laid out as the BPF program's `struct key`: any bytes are valid.
unsafe impl aya::Pod for BlockKey {}

/// `struct key` of `bpf/sched.bpf.c` and `bpf/lock.bpf.c`: (what, bucket).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct SchedKey {
    pub what: u32,
    pub bucket: u32,
}

// SAFETY: a #[repr(C)] pair of u32 without padding, laid out as the BPF
// program's `struct key`: any bytes are valid.
unsafe impl aya::Pod for SchedKey {}

/// Loads `object` and attaches each `(program, event)` to the classic
/// tracepoint `category:event`.
pub(crate) fn load_tracepoints(
    object: &[u8],
    category: &str,
    progs: &[(&'static str, &str)],
) -> Result<Ebpf, TraceError> {
    if object.is_empty() {
        return Err(TraceError::NotBuilt);
    }
    ensure_tracefs()?;
    let mut ebpf = load_object(object)?;
    for &(name, event) in progs {
        let wrap = |source| TraceError::Program { name, source };
        let prog = ebpf.program_mut(name).ok_or(TraceError::MissingMap(name))?;
        let tp: &mut aya::programs::TracePoint = prog.try_into().map_err(wrap)?;
        tp.load().map_err(wrap)?;
        tp.attach(category, event).map_err(wrap)?;
    }
    Ok(ebpf)
}

thread_local! {
    /// The kernel's BTF while [`with_kernel_btf`] runs: parsed once for
    /// every object it loads (parsing `/sys/kernel/btf/vmlinux` takes tens
    /// of megabytes and milliseconds; six objects parsed it six times).
    static KERNEL_BTF: std::cell::RefCell<Option<Option<aya::Btf>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (which loads BPF objects) with the kernel's BTF parsed once for
/// all of them, then frees it and gives the freed heap back to the system:
/// the tracer's resident memory is its maps and tables, not a parse it no
/// longer needs.
pub(crate) fn with_kernel_btf<T>(f: impl FnOnce() -> T) -> T {
    KERNEL_BTF.with(|b| *b.borrow_mut() = Some(aya::Btf::from_sys_fs().ok()));
    let out = f();
    KERNEL_BTF.with(|b| *b.borrow_mut() = None);
    give_back_free_heap();
    out
}

/// Loads a BPF object against the kernel's BTF (the shared parse inside
/// [`with_kernel_btf`], else a parse of its own).
fn load_object(object: &[u8]) -> Result<Ebpf, TraceError> {
    KERNEL_BTF.with(|b| match &*b.borrow() {
        Some(btf) => Ok(aya::EbpfLoader::new().btf(btf.as_ref()).load(object)?),
        None => Ok(Ebpf::load(object)?),
    })
}

/// Returns free heap pages to the kernel (glibc keeps them otherwise: the
/// BTF parse's ~35 MB stayed resident for the process's life).
pub(crate) fn give_back_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Reads the `COUNTS` hash map of (key → count) into distributions by
/// `group(key)` → (group, bucket); the bucket `sum` holds the total. One
/// `BPF_MAP_LOOKUP_BATCH` call reads the whole map (kernels since 5.6);
/// where the kernel refuses it, entry by entry (two system calls each).
pub(crate) fn read_counts<K: aya::Pod + Default, G: Ord>(
    ebpf: &Ebpf,
    sum: u32,
    group: impl Fn(&K) -> (G, u32),
) -> Result<BTreeMap<G, Dist>, TraceError> {
    read_counts_by(ebpf, sum, group, true)
}

/// [`read_counts`], by batches or (`batch` false) entry by entry.
pub(crate) fn read_counts_by<K: aya::Pod + Default, G: Ord>(
    ebpf: &Ebpf,
    sum: u32,
    group: impl Fn(&K) -> (G, u32),
    batch: bool,
) -> Result<BTreeMap<G, Dist>, TraceError> {
    let wrap = |source| TraceError::Map { name: "COUNTS", source };
    let map = ebpf.map("COUNTS").ok_or(TraceError::MissingMap("COUNTS"))?;
    let mut out = BTreeMap::new();
    let mut add = |k: &K, n: u64| {
        let (g, bucket) = group(k);
        let d: &mut Dist = out.entry(g).or_default();
        if bucket == sum {
            d.sum_ns = n;
        } else {
            d.buckets.insert(bucket, n);
            d.count += n;
        }
    };
    if batch
        && let aya::maps::Map::HashMap(data) = map
        && let Ok(entries) = lookup_batch::<K>(std::os::fd::AsFd::as_fd(data.fd()))
    {
        for (k, n) in &entries {
            add(k, *n);
        }
        return Ok(out);
    }
    let counts: aya::maps::HashMap<_, K, u64> = aya::maps::HashMap::try_from(map).map_err(wrap)?;
    for entry in counts.iter() {
        let (k, n) = entry.map_err(wrap)?;
        add(&k, n);
    }
    Ok(out)
}

/// Entries one `BPF_MAP_LOOKUP_BATCH` may return: above every `COUNTS`
/// map's size (`bpf/*.bpf.c`), so one call reads a map.
const BATCH_MAX: usize = 8192;

/// `union bpf_attr` for `BPF_MAP_*_BATCH` (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// Every (key, u64 value) of a hash map by `BPF_MAP_LOOKUP_BATCH`, in as
/// few calls as the kernel needs; an error (e.g. EINVAL on kernels before
/// 5.6) if any call fails.
pub(crate) fn lookup_batch<K: aya::Pod + Default>(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Vec<(K, u64)>> {
    use std::os::fd::AsRawFd;
    let mut out = Vec::new();
    let mut keys = vec![K::default(); BATCH_MAX];
    let mut values = vec![0u64; BATCH_MAX];
    // The hash map's batch token is its next bucket index (a u32).
    let (mut token_in, mut token_out) = (0u32, 0u32);
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { &raw const token_in as u64 },
            out_batch: &raw mut token_out as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH_MAX as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: attr points at buffers of `count` keys and values of the
        // map's key and value sizes (K is the map's key type, values are
        // u64), and at two u32 tokens; all outlive the call.
        let r = unsafe {
            libc::syscall(libc::SYS_bpf, BPF_MAP_LOOKUP_BATCH, &raw mut attr, size_of::<BatchAttr>() as libc::c_uint)
        };
        let err = (r < 0).then(std::io::Error::last_os_error);
        let done = matches!(&err, Some(e) if e.raw_os_error() == Some(libc::ENOENT));
        if let Some(e) = err
            && !done
        {
            return Err(e);
        }
        let n = (attr.count as usize).min(BATCH_MAX);
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        if done {
            return Ok(out);
        }
        token_in = token_out;
        first = false;
    }
}

/// One system call's distribution since the tracer started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dist {
    pub count: u64,
    pub sum_ns: u64,
    /// Bucket ([`crate::hist`]) → count.
    pub buckets: BTreeMap<u32, u64>,
}

/// Every system call's distribution since the tracer started, by number.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub syscalls: BTreeMap<u32, Dist>,
    /// Calls that waited on a futex (futex WAIT, WAIT_BITSET, LOCK_PI,
    /// LOCK_PI2, WAIT_REQUEUE_PI; futex_waitv, futex_wait): user-space
    /// lock and condition waits. Also counted under their calls.
    pub futex_waits: Dist,
    /// Calls not measured: two threads of one entry slot were inside a
    /// call at once (thread ids equal modulo 65,536), and the earlier one's
    /// entry was overwritten.
    pub lost: u64,
}

/// The system call tracer: attached while it lives (dropping it detaches).
#[derive(Debug)]
pub struct SyscallTracer {
    hist: Mapped,
    /// Owns the programs and maps (dropped after the mapping).
    _ebpf: Ebpf,
}

impl SyscallTracer {
    /// Loads and attaches the programs to the raw tracepoints `sys_enter`
    /// and `sys_exit`.
    pub fn start() -> Result<SyscallTracer, TraceError> {
        if OBJECT.is_empty() {
            return Err(TraceError::NotBuilt);
        }
        ensure_tracefs()?;
        let mut ebpf = load_object(OBJECT)?;
        for name in ["sys_enter", "sys_exit"] {
            let wrap = |source| TraceError::Program { name, source };
            let prog = ebpf.program_mut(name).ok_or(TraceError::MissingMap(name))?;
            let tp: &mut RawTracePoint = prog.try_into().map_err(wrap)?;
            tp.load().map_err(wrap)?;
            tp.attach(name).map_err(wrap)?;
        }
        let hist = match ebpf.map("HIST") {
            Some(aya::maps::Map::Array(data)) => Mapped::new(std::os::fd::AsFd::as_fd(data.fd()))?,
            _ => return Err(TraceError::MissingMap("HIST")),
        };
        Ok(SyscallTracer { hist, _ebpf: ebpf })
    }

    /// Every distribution since the start, read from the mapped array.
    pub fn read(&self) -> Result<Snapshot, TraceError> {
        use std::sync::atomic::Ordering::Relaxed;
        let v = self.hist.values();
        let mut snap = Snapshot { lost: v[LOST * BUCKETS].load(Relaxed), ..Snapshot::default() };
        for nr in (0..NR_MAX).filter(|&nr| nr != LOST) {
            let row = &v[nr * BUCKETS..(nr + 1) * BUCKETS];
            let mut d = Dist::default();
            for (b, c) in row.iter().enumerate() {
                let n = c.load(Relaxed);
                if n > 0 {
                    d.buckets.insert(b as u32, n);
                    d.count += n;
                }
            }
            if d.count > 0 {
                d.sum_ns = v[NR_MAX * BUCKETS + nr].load(Relaxed);
                if nr == FUTEX_WAITS {
                    snap.futex_waits = d;
                } else {
                    snap.syscalls.insert(nr as u32, d);
                }
            }
        }
        Ok(snap)
    }
}
