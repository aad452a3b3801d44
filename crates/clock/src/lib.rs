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

/// Online CPUs, from /sys/devices/system/cpu/online (`0-3,8`): the CPUs a
/// per-CPU reader (the sampler, the tracer's event counters) opens.
pub fn online_cpus() -> std::io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&text)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("cpu list {:?}", text.trim())))
}

/// A kernel CPU list (`0-3,8`) as its CPUs; None when it is not one.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}
