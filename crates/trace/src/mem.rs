//! Memory allocation stalls: how long allocating tasks spent reclaiming
//! pages themselves — for the whole machine (direct reclaim) or for a
//! cgroup over its limit (memcg reclaim) — as log-linear histograms counted
//! in the kernel by `bpf/mem.bpf.c` on vmscan's tracepoints.
//!
//! Page-fault latency is not here: the kernel has a tracepoint where a
//! fault begins (`exceptions:page_fault_user`) but none where it ends, so
//! timing one needs an fexit or kprobe on `handle_mm_fault`, which this
//! machine's kernel does not offer.

use std::collections::BTreeMap;

use aya::Ebpf;

use crate::bpf::{Dist, SchedKey, TraceError, load_tracepoints, read_counts};

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mem.bpf.o"));

/// The kinds of stall, by the BPF program's numbers.
pub const KINDS: [&str; 2] = ["direct", "memcg"];

const SUM: u32 = u32::MAX;

/// Every reclaim-stall histogram since the tracer started, by kind.
pub type MemSnapshot = BTreeMap<&'static str, Dist>;

/// The allocation stall tracer: attached while it lives.
#[derive(Debug)]
pub struct MemTracer {
    ebpf: Ebpf,
}

impl MemTracer {
    /// Loads and attaches the programs to vmscan's reclaim tracepoints.
    pub fn start() -> Result<MemTracer, TraceError> {
        let progs = [
            ("direct_begin", "mm_vmscan_direct_reclaim_begin"),
            ("direct_end", "mm_vmscan_direct_reclaim_end"),
            ("memcg_begin", "mm_vmscan_memcg_reclaim_begin"),
            ("memcg_end", "mm_vmscan_memcg_reclaim_end"),
        ];
        Ok(MemTracer { ebpf: load_tracepoints(OBJECT, "vmscan", &progs)? })
    }

    /// Every histogram since the start.
    pub fn read(&self) -> Result<MemSnapshot, TraceError> {
        read_counts(&self.ebpf, SUM, |k: &SchedKey| (KINDS.get(k.what as usize).copied().unwrap_or("other"), k.bucket))
    }
}
