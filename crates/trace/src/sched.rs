//! The scheduler: run-queue latency (wakeup or preemption → running) and
//! off-CPU time by the state a task left the CPU in (R preempted, S
//! sleeping, D uninterruptible — disk I/O mostly —, I idle kernel thread),
//! each a log-linear histogram counted in the kernel by `bpf/sched.bpf.c`
//! on the `sched` tracepoints.

use std::collections::BTreeMap;

use aya::Ebpf;
use aya::maps::HashMap as BpfHashMap;
use aya::programs::TracePoint;

use crate::bpf::{Dist, SchedKey, TraceError, ensure_tracefs};

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
        if OBJECT.is_empty() {
            return Err(TraceError::NotBuilt);
        }
        ensure_tracefs()?;
        let mut ebpf = Ebpf::load(OBJECT)?;
        for name in ["sched_wakeup", "sched_wakeup_new", "sched_switch"] {
            let wrap = |source| TraceError::Program { name, source };
            let prog = ebpf.program_mut(name).ok_or(TraceError::MissingMap(name))?;
            let tp: &mut TracePoint = prog.try_into().map_err(wrap)?;
            tp.load().map_err(wrap)?;
            tp.attach("sched", name).map_err(wrap)?;
        }
        Ok(SchedTracer { ebpf })
    }

    /// Every histogram since the start (at most a few hundred keys).
    pub fn read(&self) -> Result<SchedSnapshot, TraceError> {
        let wrap = |source| TraceError::Map { name: "COUNTS", source };
        let map = self.ebpf.map("COUNTS").ok_or(TraceError::MissingMap("COUNTS"))?;
        let counts: BpfHashMap<_, SchedKey, u64> = BpfHashMap::try_from(map).map_err(wrap)?;
        let mut out = SchedSnapshot::new();
        for entry in counts.iter() {
            let (k, n) = entry.map_err(wrap)?;
            let what = match k.what {
                0 => SchedWhat::RunQueue,
                1 => SchedWhat::OffCpu("R"),
                2 => SchedWhat::OffCpu("S"),
                3 => SchedWhat::OffCpu("D"),
                4 => SchedWhat::OffCpu("I"),
                _ => SchedWhat::OffCpu("other"),
            };
            let d = out.entry(what).or_default();
            if k.bucket == SUM {
                d.sum_ns = n;
            } else {
                d.buckets.insert(k.bucket, n);
                d.count += n;
            }
        }
        Ok(out)
    }
}
