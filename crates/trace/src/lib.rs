//! Kernel event distributions, always on — the kernel tracer half of seed
//! 001 (`seeds/001_ad0cddd3f1c2901a.txt`): eBPF programs on tracepoints
//! measure each event's latency and count it into log-linear histograms in
//! the kernel (no per-event copy to user space); once per interval user space sums the CPUs and stores each histogram as
//! Prometheus-style series (`_bucket{le}`, `_sum`, `_count`), so PromQL's
//! `histogram_quantile` and `rate` answer percentiles and rates, and hosts
//! and times merge by adding. Measured: system calls (per call, on the raw
//! tracepoints `sys_enter`/`sys_exit`), block I/O (per device and
//! operation: queue and service time, request sizes; `block`), the
//! scheduler (run-queue latency, off-CPU time by state; `sched`) and
//! kernel lock contention (wait time by kind of lock; `lock`), futex waits
//! (user-space locks; with the system calls), memory allocation stalls
//! (direct and cgroup reclaim; `mem`) and packets' waits in network
//! queueing disciplines (`net`). Toolchain: the BPF C
//! program is compiled by Debian's clang at build time (`build.rs`) and
//! loaded by `aya` (pure Rust: no libbpf C library to build on 2 cores).
//! Where BPF is refused, the same tracepoints are counted with
//! `perf_event_open` instead (`counts`): counts, no latencies.
//!
//! Each histogram is counted into log-linear buckets (`hist`) of a BPF array
//! that user space maps (`bpf`); futex waits are marked at `sys_enter` from
//! the call's registers. A BPF task iterator reads every task's run time,
//! switches, storage bytes, state and kernel-thread mark in one pass for the
//! processes collector (`tasks`). The paper's table is PromQL over the
//! stored histograms (`api::kernel`).

pub mod block;
mod bpf;
pub mod counts;
pub mod hist;
pub mod lock;
pub mod mem;
pub mod net;
mod producer;
pub mod sched;
pub mod tasks;

pub use bpf::{BUCKETS, Dist, NR_MAX, Snapshot, SyscallTracer, TraceError};
pub use producer::{Mode, Reading, TraceStats, Tracer};

include!(concat!(env!("OUT_DIR"), "/syscall_names.rs"));

/// A system call's name by number (`nr_N` for one the headers do not name).
pub fn syscall_name(nr: u32) -> String {
    match NAMES.binary_search_by_key(&nr, |(n, _)| *n) {
        Ok(i) => NAMES[i].1.to_owned(),
        Err(_) => format!("nr_{nr}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_come_from_the_headers() {
        assert_eq!(super::syscall_name(0), "read");
        assert_eq!(super::syscall_name(110), "getppid");
        assert_eq!(super::syscall_name(1000), "nr_1000");
    }
}
