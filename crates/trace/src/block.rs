//! Block I/O: per device and operation (read, write, other), the queue time
//! (insert → issue), the service time (issue → completion) and the request
//! sizes, each a log-linear histogram counted in the kernel by
//! `bpf/block.bpf.c` on the `block` tracepoints.

use std::collections::BTreeMap;

use aya::Ebpf;

use crate::bpf::{BlockKey, Dist, TraceError, load_tracepoints, read_counts};

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/block.bpf.o"));

/// What a block histogram measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum What {
    /// Insert → issue, ns (requests the scheduler queued).
    Queue,
    /// Issue → completion, ns: the device's own time.
    Service,
    /// Request sizes, bytes.
    Bytes,
}

/// The operation of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Read,
    Write,
    Other,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Other => "other",
        }
    }
}

/// The bucket of a total (`SUM` in the BPF program).
const SUM: u16 = 0xffff;

/// Every block histogram since the tracer started: (device number, what,
/// operation) → its distribution (count, sum in ns or bytes, buckets).
pub type BlockSnapshot = BTreeMap<(u32, What, Op), Dist>;

/// The block I/O tracer: attached while it lives.
#[derive(Debug)]
pub struct BlockTracer {
    ebpf: Ebpf,
}

impl BlockTracer {
    /// Loads and attaches the programs to `block:block_rq_{insert,issue,complete}`.
    pub fn start() -> Result<BlockTracer, TraceError> {
        let progs =
            [("rq_insert", "block_rq_insert"), ("rq_issue", "block_rq_issue"), ("rq_complete", "block_rq_complete")];
        Ok(BlockTracer { ebpf: load_tracepoints(OBJECT, "block", &progs)? })
    }

    /// Every histogram since the start (a few hundred keys: one system
    /// call per key and a lookup each).
    pub fn read(&self) -> Result<BlockSnapshot, TraceError> {
        read_counts(&self.ebpf, u32::from(SUM), |k: &BlockKey| {
            let what = match k.what {
                0 => What::Queue,
                1 => What::Service,
                _ => What::Bytes,
            };
            let op = match k.op {
                0 => Op::Read,
                1 => Op::Write,
                _ => Op::Other,
            };
            ((k.dev, what, op), u32::from(k.bucket))
        })
    }
}

/// A device's name (`vda`, `nvme0n1`) from its kernel device number
/// (major << 20 | minor), as /sys/dev/block names it; `MAJ:MIN` if unknown.
pub fn device_name(dev: u32) -> String {
    let (major, minor) = (dev >> 20, dev & 0xf_ffff);
    std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
        .ok()
        .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_owned)))
        .unwrap_or_else(|| format!("{major}:{minor}"))
}
