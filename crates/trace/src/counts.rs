//! The tracer where BPF is refused (no clang at build time, a kernel or a
//! policy that will not load programs): counts of the same tracepoints'
//! events with `perf_event_open` (`PERF_TYPE_TRACEPOINT`, one counting event
//! per tracepoint and CPU, read every interval). Counts, not latencies: a
//! counter knows that a system call entered, not how long it took, so the
//! histograms and the verdicts that read them are absent in this mode, and
//! the log says so. Stored as `kernel_tracepoint_events_total{host, event}`.

#![allow(unsafe_code, reason = "perf_event_open is a raw system call; the fd it returns is wrapped at once")]

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};

use perf_event_open_sys::bindings as sys;

/// The tracepoints counted: what the histograms of the BPF tracer measure,
/// one event each (the start of a system call, a block request issued and
/// completed, a context switch, a wakeup, a contended kernel lock, a direct
/// or cgroup reclaim, a user page fault, a packet queued to a device).
pub const EVENTS: &[&str] = &[
    "raw_syscalls:sys_enter",
    "block:block_rq_issue",
    "block:block_rq_complete",
    "sched:sched_switch",
    "sched:sched_wakeup",
    "lock:contention_begin",
    "vmscan:mm_vmscan_direct_reclaim_begin",
    "vmscan:mm_vmscan_memcg_reclaim_begin",
    "exceptions:page_fault_user",
    "net:net_dev_queue",
];

/// One tracepoint counted on every online CPU.
#[derive(Debug)]
struct Counted {
    event: &'static str,
    per_cpu: Vec<File>,
}

/// Counting events on the tracepoints of [`EVENTS`] this kernel has.
#[derive(Debug)]
pub struct EventCounter {
    counted: Vec<Counted>,
}

impl EventCounter {
    /// Opens a counter per tracepoint and CPU. A tracepoint this kernel
    /// lacks is left out (logged); none at all, or no permission, is an
    /// error naming the cause.
    pub fn start() -> io::Result<EventCounter> {
        crate::bpf::ensure_tracefs().map_err(io::Error::other)?;
        let cpus = clock::online_cpus()?;
        let mut counted = Vec::new();
        let mut first_error = None;
        for &event in EVENTS {
            let id = match tracepoint_id(event) {
                Ok(id) => id,
                Err(e) => {
                    tracing::info!("trace: no tracepoint {event} on this kernel ({e}): not counted");
                    continue;
                }
            };
            match cpus.iter().map(|&cpu| open_counter(id, cpu)).collect::<io::Result<Vec<_>>>() {
                Ok(per_cpu) => counted.push(Counted { event, per_cpu }),
                Err(e) => {
                    tracing::warn!("trace: counting {event}: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        if counted.is_empty() {
            return Err(first_error.unwrap_or_else(|| io::Error::other("none of the counted tracepoints exists")));
        }
        Ok(EventCounter { counted })
    }

    /// The tracepoints being counted.
    pub fn events(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.counted.iter().map(|c| c.event)
    }

    /// Each tracepoint's events since the start, summed over the CPUs.
    pub fn read(&self) -> io::Result<Vec<(&'static str, u64)>> {
        self.counted
            .iter()
            .map(|c| {
                let mut total = 0u64;
                for mut f in &c.per_cpu {
                    let mut buf = [0u8; 8];
                    f.read_exact(&mut buf)?;
                    total += u64::from_ne_bytes(buf);
                }
                Ok((c.event, total))
            })
            .collect()
    }
}

/// A tracepoint's id (`events/SYSTEM/NAME/id` in tracefs).
fn tracepoint_id(event: &str) -> io::Result<u64> {
    let (system, name) = event.split_once(':').expect("EVENTS are system:name");
    let mut last = None;
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        match std::fs::read_to_string(format!("{root}/events/{system}/{name}/id")) {
            Ok(text) => {
                return text
                    .trim()
                    .parse()
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("tracepoint id {text:?}")));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("two roots tried"))
}

/// A counting event of tracepoint `id` on `cpu`, every process, enabled.
fn open_counter(id: u64, cpu: u32) -> io::Result<File> {
    let mut attr = sys::perf_event_attr {
        type_: sys::PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: id,
        ..Default::default()
    };
    // SAFETY: attr is a valid, fully initialised perf_event_attr that
    // outlives the call; pid -1 with a cpu counts every process there.
    let fd =
        unsafe { perf_event_open_sys::perf_event_open(&mut attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("perf_event_open(tracepoint {id}, cpu {cpu}): {e} (root, or kernel.perf_event_paranoid <= -1)"),
        ));
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}
