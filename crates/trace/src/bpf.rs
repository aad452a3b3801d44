//! Loading the BPF object, attaching it, and reading its maps.

#![allow(unsafe_code, reason = "the histogram array is mapped into our memory: mmap, munmap, and its view as atomics")]

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
    let mut ebpf = Ebpf::load(object)?;
    for &(name, event) in progs {
        let wrap = |source| TraceError::Program { name, source };
        let prog = ebpf.program_mut(name).ok_or(TraceError::MissingMap(name))?;
        let tp: &mut aya::programs::TracePoint = prog.try_into().map_err(wrap)?;
        tp.load().map_err(wrap)?;
        tp.attach(category, event).map_err(wrap)?;
    }
    Ok(ebpf)
}

/// Reads the `COUNTS` hash map of (key → count) into distributions by
/// `group(key)` → (group, bucket); the bucket `sum` holds the total.
pub(crate) fn read_counts<K: aya::Pod, G: Ord>(
    ebpf: &Ebpf,
    sum: u32,
    group: impl Fn(&K) -> (G, u32),
) -> Result<BTreeMap<G, Dist>, TraceError> {
    let wrap = |source| TraceError::Map { name: "COUNTS", source };
    let map = ebpf.map("COUNTS").ok_or(TraceError::MissingMap("COUNTS"))?;
    let counts: aya::maps::HashMap<_, K, u64> = aya::maps::HashMap::try_from(map).map_err(wrap)?;
    let mut out = BTreeMap::new();
    for entry in counts.iter() {
        let (k, n) = entry.map_err(wrap)?;
        let (g, bucket) = group(&k);
        let d: &mut Dist = out.entry(g).or_default();
        if bucket == sum {
            d.sum_ns = n;
        } else {
            d.buckets.insert(bucket, n);
            d.count += n;
        }
    }
    Ok(out)
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
        let mut ebpf = Ebpf::load(OBJECT)?;
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
