//! Clocks and the sampling schedule, shared by everything that samples on a
//! boundary or reports its own cost: the host collector, the SNMP poller,
//! the per-CPU sampler, the ingest server and the lab. Reads of the kernel's
//! clocks in integer nanoseconds (`clock_gettime`: exact, no allocation), and
//! [`schedule`]: absolute interval boundaries and the sleep to them.

pub mod schedule;

use rustix::time::{ClockId, clock_gettime};

fn ns(id: ClockId) -> i64 {
    let t = clock_gettime(id);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// CPU time of the calling thread.
pub fn thread_cpu_ns() -> i64 {
    ns(ClockId::ThreadCPUTime)
}

/// CPU time of the whole process (every thread).
pub fn process_cpu_ns() -> i64 {
    ns(ClockId::ProcessCPUTime)
}

pub fn monotonic_ns() -> i64 {
    ns(ClockId::Monotonic)
}

/// Wall-clock time, ns since the Unix epoch.
pub fn realtime_ns() -> i64 {
    ns(ClockId::Realtime)
}
