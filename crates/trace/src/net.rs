//! Network queueing: how long packets waited in a device's queueing
//! discipline (qdisc) before its driver took them, by device, as
//! log-linear histograms counted in the kernel by `bpf/net.bpf.c` on
//! `qdisc:qdisc_enqueue/dequeue`. A link at its rate limit (`tc tbf`, a
//! shaped uplink) or congested shows as packets waiting milliseconds; an
//! idle one as microseconds. Devices are named as the host's network
//! namespace names their index (another namespace's device with the same
//! index is counted with it).

use std::collections::BTreeMap;

use aya::Ebpf;

use crate::bpf::{Dist, SchedKey, TraceError, load_tracepoints, read_counts};

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/net.bpf.o"));

const SUM: u32 = u32::MAX;

/// Every qdisc-wait histogram since the tracer started, by interface index.
pub type NetSnapshot = BTreeMap<u32, Dist>;

/// The qdisc wait tracer: attached while it lives.
#[derive(Debug)]
pub struct NetTracer {
    ebpf: Ebpf,
}

impl NetTracer {
    /// Loads and attaches the programs to `qdisc:qdisc_{enqueue,dequeue}`.
    pub fn start() -> Result<NetTracer, TraceError> {
        let progs = [("qdisc_enqueue", "qdisc_enqueue"), ("qdisc_dequeue", "qdisc_dequeue")];
        Ok(NetTracer { ebpf: load_tracepoints(OBJECT, "qdisc", &progs)? })
    }

    /// Every histogram since the start.
    pub fn read(&self) -> Result<NetSnapshot, TraceError> {
        read_counts(&self.ebpf, SUM, |k: &SchedKey| (k.what, k.bucket))
    }
}

/// A network interface's name by index, from /sys/class/net (the index as
/// text when none has it).
pub fn device_name(ifindex: u32) -> String {
    std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .find(|e| std::fs::read_to_string(e.path().join("ifindex")).is_ok_and(|s| s.trim().parse() == Ok(ifindex)))
        .map_or_else(|| format!("if{ifindex}"), |e| e.file_name().to_string_lossy().into_owned())
}
