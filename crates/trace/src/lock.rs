//! Kernel lock contention: how long tasks waited for contended kernel
//! locks, by kind (spinlock, rwlock, mutex, rwsem, rtmutex, percpu-rwsem),
//! a log-linear histogram counted in the kernel by `bpf/lock.bpf.c` on the
//! `lock:contention_begin/end` tracepoints.

use std::collections::BTreeMap;

use aya::Ebpf;

use crate::bpf::{Dist, SchedKey, TraceError, load_tracepoints, read_counts};

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lock.bpf.o"));

/// The kinds of lock, by the BPF program's numbers.
pub const KINDS: [&str; 7] = ["spinlock", "rwlock", "mutex", "rwsem", "rtmutex", "percpu_rwsem", "other"];

const SUM: u32 = u32::MAX;

/// Every lock-wait histogram since the tracer started, by kind.
pub type LockSnapshot = BTreeMap<&'static str, Dist>;

/// The lock contention tracer: attached while it lives.
#[derive(Debug)]
pub struct LockTracer {
    ebpf: Ebpf,
}

impl LockTracer {
    /// Loads and attaches the programs to `lock:contention_{begin,end}`.
    pub fn start() -> Result<LockTracer, TraceError> {
        let progs = [("contention_begin", "contention_begin"), ("contention_end", "contention_end")];
        Ok(LockTracer { ebpf: load_tracepoints(OBJECT, "lock", &progs)? })
    }

    /// Every histogram since the start.
    pub fn read(&self) -> Result<LockSnapshot, TraceError> {
        read_counts(&self.ebpf, SUM, |k: &SchedKey| (KINDS.get(k.what as usize).copied().unwrap_or("other"), k.bucket))
    }
}
