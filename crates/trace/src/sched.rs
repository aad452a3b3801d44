//! The scheduler: run-queue latency (wakeup or preemption → running) and
//! off-CPU time by the state a task left the CPU in (R preempted, S
//! sleeping, D uninterruptible — disk I/O mostly —, I idle kernel thread),
//! each a log-linear histogram counted in the kernel by `bpf/sched.bpf.c`
//! on the `sched` tracepoints.

use std::collections::BTreeMap;

use aya::Ebpf;

use crate::bpf::{Dist, SchedKey, TraceError, load_tracepoints, read_counts};

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sched.bpf.o"));

/// What a scheduler histogram measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SchedWhat {
    /// Runnable → running.
    RunQueue,
    /// Off the CPU, by the state it left in: `R`, `S`, `D`, `I`, `other`.
    OffCpu(&'static str),
}

const SUM: u32 = u32::MAX;

/// Every scheduler histogram since the tracer started.
pub type SchedSnapshot = BTreeMap<SchedWhat, Dist>;

/// The scheduler tracer: attached while it lives.
#[derive(Debug)]
pub struct SchedTracer {
    ebpf: Ebpf,
}

impl SchedTracer {
    /// Loads and attaches the programs to `sched:sched_{wakeup,wakeup_new,switch}`.
    pub fn start() -> Result<SchedTracer, TraceError> {
        let progs = [
            ("sched_wakeup", "sched_wakeup"),
            ("sched_wakeup_new", "sched_wakeup_new"),
            ("sched_switch", "sched_switch"),
        ];
        Ok(SchedTracer { ebpf: load_tracepoints(OBJECT, "sched", &progs)? })
    }

    /// Every histogram since the start (at most a few hundred keys).
    pub fn read(&self) -> Result<SchedSnapshot, TraceError> {
        read_counts(&self.ebpf, SUM, |k: &SchedKey| {
            let what = match k.what {
                0 => SchedWhat::RunQueue,
                1 => SchedWhat::OffCpu("R"),
                2 => SchedWhat::OffCpu("S"),
                3 => SchedWhat::OffCpu("D"),
                4 => SchedWhat::OffCpu("I"),
                _ => SchedWhat::OffCpu("other"),
            };
            (what, k.bucket)
        })
    }
}
