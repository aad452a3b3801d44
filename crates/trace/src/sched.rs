//! The scheduler: run-queue latency (wakeup or preemption → running) and
//! off-CPU time by the state a task left the CPU in (R preempted, S
//! sleeping, D uninterruptible — disk I/O mostly —, I idle kernel thread),
//! each a log-linear histogram counted in the kernel by `bpf/sched.bpf.c`
//! on the `sched` tracepoints.

use std::collections::BTreeMap;

use aya::Ebpf;

use crate::bpf::{Dist, SchedKey, TraceError, load_tracepoints, read_counts_by};

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
        self.read_by(true)
    }

    fn read_by(&self, batch: bool) -> Result<SchedSnapshot, TraceError> {
        read_counts_by(
            &self.ebpf,
            SUM,
            |k: &SchedKey| {
                let what = match k.what {
                    0 => SchedWhat::RunQueue,
                    1 => SchedWhat::OffCpu("R"),
                    2 => SchedWhat::OffCpu("S"),
                    3 => SchedWhat::OffCpu("D"),
                    4 => SchedWhat::OffCpu("I"),
                    _ => SchedWhat::OffCpu("other"),
                };
                (what, k.bucket)
            },
            batch,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole map in one batch lookup reads what the entry-by-entry walk
    /// reads: histograms only grow, so each read holds every bucket of the
    /// read before it with at least its count (run as root).
    #[test]
    fn a_batch_lookup_reads_what_the_entry_walk_reads() {
        let t = SchedTracer::start().expect("kernel tracing (run as root)");
        for _ in 0..20 {
            std::thread::spawn(|| ()).join().unwrap(); // wake-ups and switches to count
        }
        // This kernel takes the batch call (the reads below could fall back).
        let map = match t.ebpf.map("COUNTS") {
            Some(aya::maps::Map::HashMap(data)) => data,
            _ => panic!("COUNTS is a hash map"),
        };
        let entries = crate::bpf::lookup_batch::<SchedKey>(std::os::fd::AsFd::as_fd(map.fd())).unwrap();
        assert!(!entries.is_empty());
        let walk0 = t.read_by(false).unwrap();
        let batch = t.read_by(true).unwrap();
        let walk1 = t.read_by(false).unwrap();
        let covers = |later: &SchedSnapshot, earlier: &SchedSnapshot| {
            earlier.iter().all(|(what, d)| {
                later.get(what).is_some_and(|l| {
                    l.count >= d.count
                        && l.sum_ns >= d.sum_ns
                        && d.buckets.iter().all(|(b, n)| l.buckets.get(b).is_some_and(|m| m >= n))
                })
            })
        };
        assert!(walk0.get(&SchedWhat::RunQueue).is_some_and(|d| d.count > 0), "{walk0:?}");
        assert!(covers(&batch, &walk0), "batch {batch:?}\nwalk before {walk0:?}");
        assert!(covers(&walk1, &batch), "walk after {walk1:?}\nbatch {batch:?}");
    }
}
