//! One batch of one CPU's events as columns, and its compressed encoding
//! (`docs/format/events.md`).
//!
//! Each column is transformed to expose its structure (times as deltas from
//! the timer's period, thread ids relative to their process id, instruction
//! pointers as a dictionary and an index) and compressed with zstd; compact
//! encoding tries every codec (and pco) and keeps the smallest. Decoding
//! checks every length against the header, so a damaged or hostile batch is
//! an error, never a wrong answer or an unbounded allocation.

use crate::codec::varint::{Reader, put_i64, put_str, put_u64, unzigzag, zigzag};

/// Events of one CPU, as parallel columns of equal length, times ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventBatch {
    pub cpu: u32,
    /// Nanoseconds since the Unix epoch.
    pub time: Vec<i64>,
    pub pid: Vec<u32>,
    pub tid: Vec<u32>,
    /// Instruction pointer (user or kernel address).
    pub ip: Vec<u64>,
    /// Per event, its call chain: an index into `stacks`; empty when the
    /// batch has no call chains.
    pub chain: Vec<u32>,
    /// The batch's distinct call chains, leaf (the sampled ip) first.
    pub stacks: Vec<Vec<u64>>,
    /// The processes of the batch's events as they were then: name and the
    /// executable mappings its user addresses fall in, so they can be named
    /// after the process has gone (empty when the source had no side band).
    pub procs: Vec<ProcInfo>,
}

/// A process as its samples saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub comm: String,
    pub maps: Vec<MapInfo>,
}

/// An executable mapping: `[start, end)` of the address space shows the
/// file from byte `pgoff`; `build_id` empty when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapInfo {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub build_id: Vec<u8>,
    pub path: String,
}

impl MapInfo {
    /// The offset in the file of address `ip` of this mapping.
    pub fn file_offset(&self, ip: u64) -> Option<u64> {
        (self.start..self.end).contains(&ip).then(|| ip - self.start + self.pgoff)
    }
}

/// Bounds of the process table (a decoder never allocates beyond them).
pub const MAX_MAPS: usize = 4096;
pub const MAX_COMM: usize = 256;
pub const MAX_PATH: usize = 4096;
pub const MAX_BUILD_ID: usize = 64;

/// The columns an event query can group or filter by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    Cpu,
    Pid,
    Tid,
    Ip,
    Chain,
}

impl Column {
    pub fn parse(s: &str) -> Option<Column> {
        Some(match s {
            "cpu" => Column::Cpu,
            "pid" => Column::Pid,
            "tid" => Column::Tid,
            "ip" => Column::Ip,
            "chain" => Column::Chain,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Column::Cpu => "cpu",
            Column::Pid => "pid",
            Column::Tid => "tid",
            Column::Ip => "ip",
            Column::Chain => "chain",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("event batch columns differ in length (time {time}, pid {pid}, tid {tid}, ip {ip}, chain {chain})")]
    Ragged { time: usize, pid: usize, tid: usize, ip: usize, chain: usize },
    #[error("event batch is empty")]
    Empty,
    #[error("event batch has {0} events; at most {MAX_EVENTS} per batch")]
    TooLarge(usize),
    #[error("malformed event batch: {0}")]
    Malformed(&'static str),
}

/// A batch holds at most this many events (about 1.6 s of one CPU at 10 kHz
/// would be 16,000): bounds what a decoder allocates for a hostile header.
pub const MAX_EVENTS: usize = 1 << 20;
/// Frames of one call chain at most (the kernel's default
/// `perf_event_max_stack` is 127).
pub const MAX_DEPTH: usize = 512;
/// Frames of a batch's stack table at most (32 MiB decoded).
pub const MAX_FRAMES: usize = 1 << 22;

const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;
const CODEC_PCO: u8 = 2;
/// Raw and zstd of values cut to their `width` low bytes (the width of the
/// column's largest value; signed columns zigzag first): a u8 width follows.
const CODEC_RAW_NARROW: u8 = 3;
const CODEC_ZSTD_NARROW: u8 = 4;
/// Each value's signed distance from a base (zigzag) in `width` bytes, or
/// where it does not fit an escape (all ones) and the distance as a varint
/// in a tail after the n values; raw or zstd. A u8 width (1..=8) and the base
/// (a varint of the value's bits) follow the codec.
const CODEC_OFFSET: u8 = 5;
const CODEC_ZSTD_OFFSET: u8 = 6;
/// A dictionary of the column's distinct values, ascending (a nested column
/// of k gaps), and an index into it per value (a nested u32 column).
const CODEC_DICT: u8 = 7;
const FLAG_CHAIN: u8 = 1;
const FLAG_PROCS: u8 = 2;

/// How hard [`EventBatch::encode`] works. Measured on a real `perf record -F
/// 10000 -a` capture in batches of 1,000 events (`docs/benchmarks.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// One codec per column, chosen by what the column holds, zstd level 1:
    /// ~3.2 B/event at ~13 M events/s per core. For the agent and ingest,
    /// where CPU time is the workload's.
    #[default]
    Fast,
    /// The smallest of every codec, zstd level 3 and pco per column: ~2.9
    /// B/event at ~1.4 M events/s. For rewriting stored data.
    Compact,
}

impl EventBatch {
    pub fn len(&self) -> usize {
        self.time.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time.is_empty()
    }

    /// Appends an event with its call chain (leaf first), kept once per
    /// batch in `stacks`; `ids` maps each chain to its index (the caller
    /// keeps it beside the batch, cleared with it).
    pub fn push_chain(
        &mut self,
        time: i64,
        pid: u32,
        tid: u32,
        stack: &[u64],
        ids: &mut std::collections::HashMap<Vec<u64>, u32>,
    ) {
        let stack = &stack[..stack.len().min(MAX_DEPTH)];
        let id = match ids.get(stack) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                self.stacks.push(stack.to_vec());
                ids.insert(stack.to_vec(), id);
                id
            }
        };
        self.push(time, pid, tid, stack.first().copied().unwrap_or(0));
        self.chain.push(id);
    }

    /// The call chain of event `i` (leaf first), or just its ip.
    pub fn stack(&self, i: usize) -> &[u64] {
        match self.chain.get(i).and_then(|&c| self.stacks.get(c as usize)) {
            Some(s) => s,
            None => std::slice::from_ref(&self.ip[i]),
        }
    }

    pub fn push(&mut self, time: i64, pid: u32, tid: u32, ip: u64) {
        self.time.push(time);
        self.pid.push(pid);
        self.tid.push(tid);
        self.ip.push(ip);
    }

    /// Checks the columns line up and are within bounds; sorts by time
    /// (stable) if they are not in order.
    pub fn validate(&mut self) -> Result<(), BatchError> {
        let n = self.time.len();
        let chain_ok = self.chain.is_empty() || self.chain.len() == n;
        if self.pid.len() != n || self.tid.len() != n || self.ip.len() != n || !chain_ok {
            return Err(BatchError::Ragged {
                time: n,
                pid: self.pid.len(),
                tid: self.tid.len(),
                ip: self.ip.len(),
                chain: self.chain.len(),
            });
        }
        if n == 0 {
            return Err(BatchError::Empty);
        }
        if n > MAX_EVENTS {
            return Err(BatchError::TooLarge(n));
        }
        if self.chain.iter().any(|&c| c as usize >= self.stacks.len())
            || (self.chain.is_empty() && !self.stacks.is_empty())
            || self.stacks.len() > n
            || self.stacks.iter().any(|s| s.len() > MAX_DEPTH)
            || self.stacks.iter().map(Vec::len).sum::<usize>() > MAX_FRAMES
        {
            return Err(BatchError::Malformed("call chains do not match their table"));
        }
        if self.procs.len() > n
            || self.procs.iter().any(|p| {
                p.comm.len() > MAX_COMM
                    || p.maps.len() > MAX_MAPS
                    || p.maps
                        .iter()
                        .any(|m| m.end <= m.start || m.path.len() > MAX_PATH || m.build_id.len() > MAX_BUILD_ID)
            })
        {
            return Err(BatchError::Malformed("process table out of bounds"));
        }
        let (lo, hi) = self.time.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| (lo.min(t), hi.max(t)));
        if hi.checked_sub(lo).is_none() {
            return Err(BatchError::Malformed("time span exceeds 292 years"));
        }
        if !self.time.is_sorted() {
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_by_key(|&i| self.time[i as usize]);
            self.time = permute(&self.time, &order);
            self.pid = permute(&self.pid, &order);
            self.tid = permute(&self.tid, &order);
            self.ip = permute(&self.ip, &order);
            if !self.chain.is_empty() {
                self.chain = permute(&self.chain, &order);
            }
        }
        Ok(())
    }

    /// Encodes a validated batch (see [`EventBatch::validate`]).
    pub fn encode(&self, out: &mut Vec<u8>, enc: Encoding) {
        let n = self.len();
        debug_assert!(n > 0 && self.time.is_sorted(), "BUG: encoding an unvalidated batch");
        put_u64(out, n as u64);
        put_u64(out, u64::from(self.cpu));
        put_i64(out, self.time[0]);
        put_i64(out, self.time[n - 1]);
        let flags =
            if self.chain.is_empty() { 0 } else { FLAG_CHAIN } | if self.procs.is_empty() { 0 } else { FLAG_PROCS };
        out.push(flags);
        // Deltas of an ascending column are >= 0; as i64 they stay exact.
        let mut deltas = Vec::with_capacity(n);
        deltas.push(0i64);
        deltas.extend(self.time.windows(2).map(|w| w[1].wrapping_sub(w[0])));
        put_column(out, &deltas, enc, Shape::Jitter);
        put_column(out, &self.pid, enc, Shape::Runs);
        // A process's main thread has tid == pid: make that a run of zeros.
        let rel: Vec<i64> = self.tid.iter().zip(&self.pid).map(|(&t, &p)| i64::from(t) - i64::from(p)).collect();
        put_column(out, &rel, enc, Shape::Runs);
        put_column(out, &self.ip, enc, Shape::Repeats);
        if !self.chain.is_empty() {
            put_column(out, &self.chain, enc, Shape::Runs);
            // The stack table: its size, each stack's depth, every frame.
            put_u64(out, self.stacks.len() as u64);
            let depths: Vec<u32> = self.stacks.iter().map(|s| s.len() as u32).collect();
            put_column(out, &depths, enc, Shape::Runs);
            let frames: Vec<u64> = self.stacks.iter().flatten().copied().collect();
            put_column(out, &frames, enc, Shape::Repeats);
        }
        if !self.procs.is_empty() {
            put_procs(out, &self.procs);
        }
    }

    /// Decodes one batch; `want` limits which columns are decompressed (the
    /// rest are left empty).
    pub fn decode(data: &[u8], want: Want) -> Result<EventBatch, BatchError> {
        Self::read(data, want, false).map(|(b, _)| b)
    }

    /// Checks that `decode(data, Want::ALL)` would succeed, without building
    /// the columns it would return (a server's check of an agent's batch
    /// before it stores the bytes as they came); returns the header.
    pub fn check(data: &[u8]) -> Result<Header, BatchError> {
        Self::read(data, Want::ALL, true).map(|(_, h)| h)
    }

    /// [`EventBatch::decode`], or with `check` every test of it but an empty batch.
    fn read(data: &[u8], want: Want, check: bool) -> Result<(EventBatch, Header), BatchError> {
        let (head, mut r) = Header::read(data)?;
        let n = head.n;
        let mut b = EventBatch { cpu: head.cpu, ..EventBatch::default() };
        // Values where the checks need them (any column may be a
        // dictionary); ips and frames are only checked when checking.
        let values = |wanted: bool| if wanted { Read::Values } else { Read::Skip };
        let leaves = |wanted: bool| match (wanted, check) {
            (false, _) => Read::Skip,
            (true, false) => Read::Values,
            (true, true) => Read::Check,
        };
        let deltas: Vec<i64> = get_column(&mut r, n, values(want.time))?;
        // (The first delta is 0 by definition and not read.)
        let rest = deltas.get(1..).unwrap_or_default();
        if want.time {
            if rest.iter().any(|&d| d < 0) {
                return Err(BatchError::Malformed("times not ascending"));
            }
            let span: i128 = rest.iter().map(|&d| i128::from(d)).sum();
            if span != i128::from(head.max_t) - i128::from(head.min_t) {
                return Err(BatchError::Malformed("times disagree with the header"));
            }
        }
        if want.time && !check {
            // Non-negative deltas summing to max_t - min_t: no partial sum overflows.
            b.time.reserve_exact(n);
            b.time.push(head.min_t);
            let mut t = head.min_t;
            b.time.extend(rest.iter().map(|&d| {
                t += d;
                t
            }));
        }
        let pid: Vec<u32> = get_column(&mut r, n, values(want.pid || want.tid))?;
        let rel: Vec<i64> = get_column(&mut r, n, values(want.tid))?;
        let tid_of = |(&d, &p): (&i64, &u32)| u32::try_from(i64::from(p) + d).ok();
        if want.tid && check {
            if !rel.iter().zip(&pid).all(|x| tid_of(x).is_some()) {
                return Err(BatchError::Malformed("tid out of range"));
            }
        } else if want.tid {
            b.tid = rel
                .iter()
                .zip(&pid)
                .map(|x| tid_of(x).ok_or(BatchError::Malformed("tid out of range")))
                .collect::<Result<_, _>>()?;
        }
        if want.pid {
            b.pid = pid;
        }
        b.ip = get_column(&mut r, n, leaves(want.ip))?;
        if head.has_chain {
            b.chain = get_column(&mut r, n, values(want.chain))?;
            let bad = BatchError::Malformed;
            let n_stacks = usize::try_from(r.u64().ok_or(bad("stack count"))?).map_err(|_| bad("stack count"))?;
            if n_stacks == 0 || n_stacks > n {
                return Err(bad("stack count out of range"));
            }
            let depths: Vec<u32> = get_column(&mut r, n_stacks, values(want.chain))?;
            // Frames: no more than the depths allow, checked before decoding.
            let total: usize = depths.iter().map(|&d| d as usize).sum();
            if want.chain && (depths.iter().any(|&d| d as usize > MAX_DEPTH) || total > MAX_FRAMES) {
                return Err(bad("stacks deeper or larger than allowed"));
            }
            let frames: Vec<u64> = get_column(&mut r, if want.chain { total } else { 0 }, leaves(want.chain))?;
            if want.chain && b.chain.iter().any(|&c| c as usize >= n_stacks) {
                return Err(bad("call chain beyond the stack table"));
            }
            if want.chain && !check {
                let mut at = 0;
                b.stacks = depths
                    .iter()
                    .map(|&d| {
                        let s = frames[at..at + d as usize].to_vec();
                        at += d as usize;
                        s
                    })
                    .collect();
            }
        }
        if head.has_procs {
            b.procs = get_procs(&mut r, n)?;
        }
        if r.remaining() != 0 {
            return Err(BatchError::Malformed("trailing bytes"));
        }
        if check {
            b = EventBatch::default();
        }
        Ok((b, head))
    }
}

/// The process table, uncompressed (a few hundred bytes a batch):
/// `n, (pid, comm, n_maps, (start, end - start, pgoff, build id, path)*)*`.
fn put_procs(out: &mut Vec<u8>, procs: &[ProcInfo]) {
    put_u64(out, procs.len() as u64);
    for p in procs {
        put_u64(out, u64::from(p.pid));
        put_str(out, &p.comm);
        put_u64(out, p.maps.len() as u64);
        for m in &p.maps {
            put_u64(out, m.start);
            put_u64(out, m.end - m.start);
            put_u64(out, m.pgoff);
            put_u64(out, m.build_id.len() as u64);
            out.extend_from_slice(&m.build_id);
            put_str(out, &m.path);
        }
    }
}

fn get_procs(r: &mut Reader<'_>, n: usize) -> Result<Vec<ProcInfo>, BatchError> {
    let bad = BatchError::Malformed;
    let count = |r: &mut Reader<'_>, max: usize, what: &'static str| {
        r.u64().and_then(|v| usize::try_from(v).ok()).filter(|&v| v <= max).ok_or(bad(what))
    };
    let n_procs = count(r, n, "process count")?;
    let mut procs = Vec::with_capacity(n_procs.min(r.remaining()));
    for _ in 0..n_procs {
        let pid = r.u32().ok_or(bad("process id"))?;
        let comm = r.str().filter(|c| c.len() <= MAX_COMM).ok_or(bad("process name"))?.to_owned();
        let n_maps = count(r, MAX_MAPS, "mapping count")?;
        let mut maps = Vec::with_capacity(n_maps.min(r.remaining()));
        for _ in 0..n_maps {
            let start = r.u64().ok_or(bad("mapping start"))?;
            let len = r.u64().filter(|&l| l > 0).ok_or(bad("mapping length"))?;
            let end = start.checked_add(len).ok_or(bad("mapping end"))?;
            let pgoff = r.u64().ok_or(bad("mapping offset"))?;
            let id_len = count(r, MAX_BUILD_ID, "build id length")?;
            let build_id = r.bytes(id_len).ok_or(bad("build id"))?.to_vec();
            let path = r.str().filter(|p| p.len() <= MAX_PATH).ok_or(bad("mapping path"))?.to_owned();
            maps.push(MapInfo { start, end, pgoff, build_id, path });
        }
        procs.push(ProcInfo { pid, comm, maps });
    }
    Ok(procs)
}

/// Runs `f` on every item, the items split over up to `threads` threads
/// (scoped; one thread runs it inline). Results in input order.
pub(crate) fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let f = &f;
        let parts: Vec<_> =
            items.chunks(per).map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<R>>())).collect();
        parts.into_iter().flat_map(|h| h.join().expect("BUG: par_map worker panicked")).collect()
    })
}

/// Encodes validated batches (a second of every CPU) over up to `threads`
/// threads: the agent's half of moving many cores' samples in one go.
pub fn encode_many(batches: &[EventBatch], enc: Encoding, threads: usize) -> Vec<Vec<u8>> {
    par_map(batches, threads, |b| {
        let mut out = Vec::with_capacity(b.len() * 4 + 64);
        b.encode(&mut out, enc);
        out
    })
}

/// Threads worth using for `events` events: one per 50,000 beyond the first,
/// up to the CPUs here (a thread costs ~20 us to start).
pub fn threads_for(events: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (events / 50_000).clamp(1, cpus)
}

fn permute<T: Copy>(v: &[T], order: &[u32]) -> Vec<T> {
    order.iter().map(|&i| v[i as usize]).collect()
}

/// Which columns to decompress.
#[derive(Debug, Clone, Copy, Default)]
pub struct Want {
    pub time: bool,
    pub pid: bool,
    pub tid: bool,
    pub ip: bool,
    pub chain: bool,
}

impl Want {
    pub const ALL: Want = Want { time: true, pid: true, tid: true, ip: true, chain: true };

    /// Just the column `c` (and not even time).
    pub fn column(c: Column) -> Want {
        let mut w = Want::default();
        match c {
            Column::Cpu => {}
            Column::Pid => w.pid = true,
            Column::Tid => w.tid = true,
            Column::Ip => w.ip = true,
            Column::Chain => w.chain = true,
        }
        w
    }
}

/// The fixed fields at the front of an encoded batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub n: usize,
    pub cpu: u32,
    pub min_t: i64,
    pub max_t: i64,
    pub has_chain: bool,
    pub has_procs: bool,
}

impl Header {
    pub fn read(data: &[u8]) -> Result<(Header, Reader<'_>), BatchError> {
        let bad = BatchError::Malformed;
        let mut r = Reader::new(data);
        let n = usize::try_from(r.u64().ok_or(bad("short header"))?).map_err(|_| bad("count"))?;
        if n == 0 || n > MAX_EVENTS {
            return Err(bad("event count out of range"));
        }
        let cpu = r.u32().ok_or(bad("cpu"))?;
        let min_t = r.i64().ok_or(bad("min time"))?;
        let max_t = r.i64().ok_or(bad("max time"))?;
        if max_t < min_t {
            return Err(bad("max time before min time"));
        }
        let flags = r.fixed::<1>().ok_or(bad("flags"))?[0];
        if flags & !(FLAG_CHAIN | FLAG_PROCS) != 0 {
            return Err(bad("unknown flags"));
        }
        let has = |f: u8| flags & f != 0;
        Ok((Header { n, cpu, min_t, max_t, has_chain: has(FLAG_CHAIN), has_procs: has(FLAG_PROCS) }, r))
    }
}

/// A column's number type: fixed-width little-endian; as u64 (zigzag for
/// signed) for narrow columns; as its bits for offsets and
/// dictionaries; and pco-compressible.
trait Num: pco::data_types::Number + Copy + Default {
    const WIDTH: usize;
    fn to_u64(self) -> u64;
    /// The inverse of `to_u64` for a `v` of at most `WIDTH` bytes.
    fn from_u64(v: u64) -> Self;
    /// The value's bits: `a.bits().wrapping_sub(b.bits()) as i64` is the
    /// signed distance from `b` to `a` (for any `b`, mod 2^64).
    fn bits(self) -> u64;
    fn from_bits(v: u64) -> Option<Self>;
}

macro_rules! num {
    ($t:ty) => {
        impl Num for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn to_u64(self) -> u64 {
                self.into()
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn bits(self) -> u64 {
                self.into()
            }
            fn from_bits(v: u64) -> Option<Self> {
                <$t>::try_from(v).ok()
            }
        }
    };
}
num!(u32);
num!(u64);

impl Num for i64 {
    const WIDTH: usize = 8;
    fn to_u64(self) -> u64 {
        zigzag(self)
    }
    fn from_u64(v: u64) -> Self {
        unzigzag(v)
    }
    fn bits(self) -> u64 {
        self as u64
    }
    fn from_bits(v: u64) -> Option<Self> {
        Some(v as i64)
    }
}

/// What a column's values are like, which picks its codec in
/// [`Encoding::Fast`] ([`Encoding::Compact`] tries every codec and keeps the
/// smallest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Runs of one value and small values (pids, tid − pid, chain ids,
    /// depths): narrow bytes, which zstd turns into long matches.
    Runs,
    /// Jitter around a typical value (the time deltas of a periodic timer):
    /// varints of each value's distance from the column's median, mostly 1–2
    /// bytes where narrow bytes need 3 for the outliers' sake.
    Jitter,
    /// Few distinct values, each many times (instruction pointers, frames):
    /// a sorted dictionary and a 1–3 byte index per value, where 8-byte
    /// values would each cost zstd a match.
    Repeats,
}

fn put_column<T: Num>(out: &mut Vec<u8>, vals: &[T], enc: Encoding, shape: Shape) {
    match enc {
        Encoding::Fast => match shape {
            Shape::Jitter => put_offset(out, vals, median_bits(vals), 1),
            Shape::Repeats if !vals.is_empty() => put_dict(out, vals, 1),
            _ => put_narrow(out, vals, 1),
        },
        Encoding::Compact => {
            let mut best = Vec::new();
            put_narrow(&mut best, vals, 3);
            let mut keep = |c: Vec<u8>| {
                if c.len() < best.len() {
                    best = c;
                }
            };
            let mut c = Vec::new();
            put_offset(&mut c, vals, median_bits(vals), 3);
            keep(c);
            if !vals.is_empty() {
                let mut c = Vec::new();
                put_dict(&mut c, vals, 3);
                keep(c);
            }
            if let Ok(p) = pco::standalone::simple_compress(vals, &pco::ChunkConfig::default()) {
                let mut c = vec![CODEC_PCO];
                put_u64(&mut c, p.len() as u64);
                c.extend_from_slice(&p);
                keep(c);
            }
            out.extend_from_slice(&best);
        }
    }
}

/// Codec 3 or 4: each value's low `width` bytes (the width of the largest),
/// zstd'd when that is smaller.
fn put_narrow<T: Num>(out: &mut Vec<u8>, vals: &[T], level: i32) {
    let width = width_of(vals);
    let mut raw = vec![0u8; vals.len() * width];
    if width == T::WIDTH {
        // The full width is the type's own little-endian form (no zigzag).
        put_fixed(&mut raw, vals.iter().map(|&v| v.bits()), width);
    } else {
        put_fixed(&mut raw, vals.iter().map(|&v| v.to_u64()), width);
    }
    let z = crate::codec::zctx::compress(&raw, level).filter(|z| z.len() < raw.len());
    out.push(if z.is_some() { CODEC_ZSTD_NARROW } else { CODEC_RAW_NARROW });
    out.push(width as u8);
    let bytes = z.as_deref().unwrap_or(&raw);
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes each value's low `width` bytes into `raw` (`width` bytes a value),
/// the width a constant in each arm so that the stores are plain moves.
fn put_fixed(raw: &mut [u8], vals: impl Iterator<Item = u64>, width: usize) {
    fn put<const W: usize>(raw: &mut [u8], vals: impl Iterator<Item = u64>) {
        for (c, v) in raw.chunks_exact_mut(W).zip(vals) {
            c.copy_from_slice(&v.to_le_bytes()[..W]);
        }
    }
    match width {
        0 => {}
        1 => put::<1>(raw, vals),
        2 => put::<2>(raw, vals),
        3 => put::<3>(raw, vals),
        4 => put::<4>(raw, vals),
        5 => put::<5>(raw, vals),
        6 => put::<6>(raw, vals),
        7 => put::<7>(raw, vals),
        _ => put::<8>(raw, vals),
    }
}

/// Codec 5 or 6: each value's distance from `base` in a width most of them
/// fit (a branch the CPU predicts, where varints of mixed lengths are not),
/// the rest escaped to a tail of varints.
fn put_offset<T: Num>(out: &mut Vec<u8>, vals: &[T], base: u64, level: i32) {
    let dist = |v: T| zigzag(v.bits().wrapping_sub(base) as i64);
    // The width that holds ~98% of a spread sample (and the escape).
    let step = vals.len().div_ceil(257).max(1);
    let mut sample: Vec<u64> = vals.iter().step_by(step).map(|&v| dist(v)).collect();
    sample.sort_unstable();
    let q = sample.get(sample.len() * 98 / 100).copied().unwrap_or(0);
    let width = (64 - q.saturating_add(1).leading_zeros() as usize).div_ceil(8).max(1);
    let escape = u64::MAX >> (64 - 8 * width);
    let mut raw = vec![0u8; vals.len() * width];
    let mut tail = Vec::new();
    let fixed = vals.iter().map(|&v| match dist(v) {
        d if d < escape => d,
        d => {
            put_u64(&mut tail, d);
            escape
        }
    });
    put_fixed(&mut raw, fixed, width);
    raw.extend_from_slice(&tail);
    let z = crate::codec::zctx::compress(&raw, level).filter(|z| z.len() < raw.len());
    out.push(if z.is_some() { CODEC_ZSTD_OFFSET } else { CODEC_OFFSET });
    out.push(width as u8);
    put_u64(out, base);
    let bytes = z.as_deref().unwrap_or(&raw);
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Codec 7: the distinct values ascending, as gaps (varints: small where
/// the values cluster, as code addresses do), and each value's index.
fn put_dict<T: Num>(out: &mut Vec<u8>, vals: &[T], level: i32) {
    // Ids in order of first sight (one hash lookup per value), renumbered
    // in order of value once the distinct values are known.
    let mut ids: rustc_hash::FxHashMap<u64, u32> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(vals.len() / 2, Default::default());
    let mut seen: Vec<u64> = Vec::with_capacity(vals.len() / 2);
    let index: Vec<u32> = vals
        .iter()
        .map(|v| {
            *ids.entry(v.bits()).or_insert_with(|| {
                seen.push(v.bits());
                seen.len() as u32 - 1
            })
        })
        .collect();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    let mut rank = vec![0u32; seen.len()];
    for (&v, r) in sorted.iter().zip(0..) {
        rank[ids[&v] as usize] = r;
    }
    let index: Vec<u32> = index.iter().map(|&i| rank[i as usize]).collect();
    let mut prev = 0u64;
    let gaps: Vec<u64> = sorted
        .iter()
        .map(|&v| {
            let gap = v.wrapping_sub(prev);
            prev = v;
            gap
        })
        .collect();
    out.push(CODEC_DICT);
    put_u64(out, seen.len() as u64);
    put_offset(out, &gaps, 0, level);
    put_narrow(out, &index, level);
}

/// The median of up to 257 values spread over the column, their bits taken
/// as signed: a base for varints (any base decodes; this one keeps them short).
fn median_bits<T: Num>(vals: &[T]) -> u64 {
    if vals.is_empty() {
        return 0;
    }
    let step = vals.len().div_ceil(257);
    let mut b: Vec<i64> = vals.iter().step_by(step).map(|v| v.bits() as i64).collect();
    let mid = b.len() / 2;
    *b.select_nth_unstable(mid).1 as u64
}

/// Bytes needed for the largest value of a column, 0..=8.
fn width_of<T: Num>(vals: &[T]) -> usize {
    let max = vals.iter().fold(0u64, |m, &v| m | v.to_u64());
    (64 - max.leading_zeros() as usize).div_ceil(8)
}

/// What [`get_column`] does with a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Steps over its bytes: an empty vector.
    Skip,
    /// Checks it would decode; the values where they come cheap (an empty
    /// vector for a dictionary, whose values are not looked up).
    Check,
    /// Its values.
    Values,
}

/// Reads one column of `n` values.
fn get_column<T: Num>(r: &mut Reader<'_>, n: usize, read: Read) -> Result<Vec<T>, BatchError> {
    get_col(r, n, read, false)
}

/// [`get_column`]; `nested` inside a dictionary, which cannot nest.
fn get_col<T: Num>(r: &mut Reader<'_>, n: usize, read: Read, nested: bool) -> Result<Vec<T>, BatchError> {
    let decode = read != Read::Skip;
    let bad = BatchError::Malformed;
    let codec = r.fixed::<1>().ok_or(bad("column codec"))?[0];
    if codec == CODEC_DICT {
        if nested {
            return Err(bad("dictionary inside a dictionary"));
        }
        // (A column skipped unread may not know its n.)
        let k = r
            .u64()
            .and_then(|k| usize::try_from(k).ok())
            .filter(|&k| !decode || k <= n)
            .ok_or(bad("dictionary size"))?;
        let inner = if decode { Read::Values } else { Read::Skip };
        let gaps: Vec<u64> = get_col(r, k, inner, true)?;
        let index: Vec<u32> = get_col(r, n, inner, true)?;
        if !decode {
            return Ok(Vec::new());
        }
        let mut at = 0u64;
        let dict: Vec<T> = gaps
            .iter()
            .map(|&g| {
                at = at.wrapping_add(g);
                T::from_bits(at).ok_or(bad("dictionary value out of range"))
            })
            .collect::<Result<_, _>>()?;
        if read == Read::Check {
            return if index.iter().all(|&i| (i as usize) < k) {
                Ok(Vec::new())
            } else {
                Err(bad("dictionary index out of range"))
            };
        }
        return index
            .iter()
            .map(|&i| dict.get(i as usize).copied().ok_or(bad("dictionary index out of range")))
            .collect();
    }
    let (mut width, mut base) = (T::WIDTH, 0);
    match codec {
        CODEC_RAW | CODEC_ZSTD | CODEC_PCO => {}
        CODEC_RAW_NARROW | CODEC_ZSTD_NARROW => {
            width = usize::from(r.fixed::<1>().ok_or(bad("column width"))?[0]);
            if width > T::WIDTH {
                return Err(bad("column width exceeds its type"));
            }
        }
        CODEC_OFFSET | CODEC_ZSTD_OFFSET => {
            width = usize::from(r.fixed::<1>().ok_or(bad("column width"))?[0]);
            if !(1..=8).contains(&width) {
                return Err(bad("offset column width out of range"));
            }
            base = r.u64().ok_or(bad("column base"))?;
        }
        _ => return Err(bad("unknown column codec")),
    }
    let len = usize::try_from(r.u64().ok_or(bad("column length"))?).map_err(|_| bad("column length"))?;
    let bytes = r.bytes(len).ok_or(bad("column shorter than its length"))?;
    if !decode {
        return Ok(Vec::new());
    }
    let from_raw = |raw: &[u8]| -> Result<Vec<T>, BatchError> {
        if raw.len() != n * width {
            return Err(bad("column holds the wrong number of values"));
        }
        Ok(if width == T::WIDTH {
            // The type's own little-endian form (no zigzag).
            get_fixed(raw, n, width, |v| T::from_bits(v).expect("BUG: a value of the type's width"))
        } else {
            get_fixed(raw, n, width, T::from_u64)
        })
    };
    match codec {
        CODEC_RAW | CODEC_RAW_NARROW => from_raw(bytes),
        CODEC_ZSTD | CODEC_ZSTD_NARROW => {
            let raw = crate::codec::zctx::decompress(bytes, n * width).ok_or(bad("zstd column does not decode"))?;
            from_raw(&raw)
        }
        CODEC_OFFSET => from_offsets(bytes, n, width, base),
        CODEC_ZSTD_OFFSET => {
            // n values, and a varint of up to 10 bytes for each escaped.
            let raw =
                crate::codec::zctx::decompress(bytes, n * (width + 10)).ok_or(bad("zstd column does not decode"))?;
            from_offsets(&raw, n, width, base)
        }
        _ => {
            let mut vals = vec![T::default(); n];
            let progress = pco::standalone::simple_decompress_into(bytes, &mut vals)
                .map_err(|_| bad("pco column does not decode"))?;
            if progress.n_processed != n || !progress.finished {
                return Err(bad("pco column holds the wrong number of values"));
            }
            Ok(vals)
        }
    }
}

/// `n` values of `width` bytes each in `raw` (`n * width` bytes), mapped by
/// `f`; the width a constant in each arm so that the loads are plain moves.
fn get_fixed<T>(raw: &[u8], n: usize, width: usize, f: impl Fn(u64) -> T) -> Vec<T> {
    fn get<const W: usize, T>(raw: &[u8], f: impl Fn(u64) -> T) -> Vec<T> {
        raw.chunks_exact(W)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..W].copy_from_slice(c);
                f(u64::from_le_bytes(b))
            })
            .collect()
    }
    match width {
        0 => (0..n).map(|_| f(0)).collect(),
        1 => get::<1, T>(raw, f),
        2 => get::<2, T>(raw, f),
        3 => get::<3, T>(raw, f),
        4 => get::<4, T>(raw, f),
        5 => get::<5, T>(raw, f),
        6 => get::<6, T>(raw, f),
        7 => get::<7, T>(raw, f),
        _ => get::<8, T>(raw, f),
    }
}

/// `n` distances from `base` of `width` bytes each, then exactly one varint
/// for each escaped.
fn from_offsets<T: Num>(bytes: &[u8], n: usize, width: usize, base: u64) -> Result<Vec<T>, BatchError> {
    let bad = BatchError::Malformed;
    let fixed = bytes.get(..n * width).ok_or(bad("offset column shorter than its count"))?;
    let mut dist = get_fixed(fixed, n, width, |v| v);
    let escape = u64::MAX >> (64 - 8 * width);
    let mut tail = Reader::new(&bytes[n * width..]);
    if tail.remaining() > 0 || dist.contains(&escape) {
        for d in dist.iter_mut().filter(|d| **d == escape) {
            *d = tail.u64().ok_or(bad("offset column misses an escaped value"))?;
        }
        if tail.remaining() != 0 {
            return Err(bad("offset column has bytes beyond its values"));
        }
    }
    let mut out = Vec::with_capacity(n);
    for d in dist {
        out.push(T::from_bits(base.wrapping_add(unzigzag(d) as u64)).ok_or(bad("offset value out of range"))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn batches() -> impl Strategy<Value = EventBatch> {
        let edge_t = prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), Just(-1i64), any::<i64>()];
        (1usize..300, any::<u32>(), edge_t, any::<bool>()).prop_flat_map(|(n, cpu, t0, chain)| {
            let ips = prop_oneof![
                Just(u64::MAX),
                Just(0u64),
                0xffff_ffff_8100_0000u64..0xffff_ffff_8200_0000,
                0x5555_0000_0000u64..0x5555_0001_0000,
                any::<u64>()
            ];
            (
                proptest::collection::vec(0i64..1_000_000, n),
                proptest::collection::vec(prop_oneof![Just(0u32), Just(u32::MAX), 1u32..5], n),
                proptest::collection::vec(prop_oneof![Just(0u32), Just(u32::MAX), 1u32..5], n),
                proptest::collection::vec(ips, n),
                proptest::collection::vec(any::<u32>(), if chain { n } else { 0 }),
                proptest::collection::vec(
                    proptest::collection::vec(any::<u64>(), 0..20),
                    if chain { 1..=n } else { 0..=0 },
                ),
                proptest::collection::vec(procs(), 0..=n.min(3)),
            )
                .prop_map(move |(gaps, pid, tid, ip, chain, stacks, procs)| {
                    let chain = chain.iter().map(|c| c % stacks.len().max(1) as u32).collect();
                    // Times from t0, clamped so the span fits (validate's rule).
                    let mut t = t0.min(i64::MAX - 1_000_000 * 300);
                    let time = gaps
                        .iter()
                        .map(|g| {
                            t += g;
                            t
                        })
                        .collect();
                    EventBatch { cpu, time, pid, tid, ip, chain, stacks, procs }
                })
        })
    }

    fn procs() -> impl Strategy<Value = ProcInfo> {
        let map =
            (any::<u64>(), 1u64..1 << 30, any::<u64>(), proptest::collection::vec(any::<u8>(), 0..=20), ".{0,40}")
                .prop_map(|(start, len, pgoff, build_id, path)| MapInfo {
                    start: start.min(u64::MAX - len),
                    end: start.min(u64::MAX - len) + len,
                    pgoff,
                    build_id,
                    path,
                });
        (any::<u32>(), ".{0,16}", proptest::collection::vec(map, 0..4)).prop_map(|(pid, comm, maps)| ProcInfo {
            pid,
            comm,
            maps,
        })
    }

    proptest! {
        #[test]
        fn round_trips_either_encoding(b in batches(), compact in any::<bool>()) {
            let mut b = b;
            b.validate().unwrap();
            let mut out = Vec::new();
            b.encode(&mut out, if compact { Encoding::Compact } else { Encoding::Fast });
            prop_assert_eq!(EventBatch::decode(&out, Want::ALL).unwrap(), b.clone());
            prop_assert!(EventBatch::check(&out).is_ok());
            // Every truncation is detected, never a shorter answer.
            for cut in [0, 1, out.len() / 2, out.len() - 1] {
                prop_assert!(EventBatch::decode(&out[..cut], Want::ALL).is_err());
                prop_assert!(EventBatch::check(&out[..cut]).is_err());
            }
            let only_ip = EventBatch::decode(&out, Want::column(Column::Ip)).unwrap();
            prop_assert_eq!(&only_ip.ip, &b.ip);
            prop_assert!(only_ip.pid.is_empty() && only_ip.tid.is_empty());
        }

        #[test]
        fn unordered_input_is_sorted_stably(times in proptest::collection::vec(-5i64..5, 1..50)) {
            let n = times.len();
            let mut b = EventBatch {
                cpu: 1,
                time: times.clone(),
                pid: (0..n as u32).collect(),
                tid: (0..n as u32).collect(),
                ip: (0..n as u64).collect(),
                ..EventBatch::default()
            };
            b.validate().unwrap();
            let mut want: Vec<(i64, u32)> = times.iter().copied().zip(0..n as u32).collect();
            want.sort_by_key(|p| p.0);
            prop_assert_eq!(b.time.clone(), want.iter().map(|p| p.0).collect::<Vec<_>>());
            prop_assert_eq!(b.pid.clone(), want.iter().map(|p| p.1).collect::<Vec<_>>());
            prop_assert_eq!(b.ip, want.iter().map(|p| u64::from(p.1)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn bad_batches_are_refused_with_a_reason() {
        let mut ragged =
            EventBatch { time: vec![1, 2], pid: vec![1], tid: vec![1, 1], ip: vec![1, 1], ..Default::default() };
        assert!(matches!(ragged.validate(), Err(BatchError::Ragged { time: 2, pid: 1, .. })));
        assert_eq!(EventBatch::default().validate(), Err(BatchError::Empty));
        let mut span = EventBatch {
            time: vec![i64::MIN, i64::MAX],
            pid: vec![0; 2],
            tid: vec![0; 2],
            ip: vec![0; 2],
            ..Default::default()
        };
        assert!(span.validate().is_err());
        // A header claiming more events than allowed never allocates them.
        let mut huge = Vec::new();
        put_u64(&mut huge, (MAX_EVENTS + 1) as u64);
        assert!(EventBatch::decode(&huge, Want::ALL).is_err());
    }

    /// A second of one CPU as `perf record -F 10000` sees it: a 100 µs timer
    /// with jitter and the odd idle gap, a few processes, a loop's ips and
    /// some kernel ones.
    fn second_of_samples(seed: u64) -> EventBatch {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut b = EventBatch { cpu: 3, ..Default::default() };
        let mut t = 1_700_000_000_000_000_000i64;
        for _ in 0..10_000 {
            t += if rng.u32(..500) == 0 { rng.i64(200_000..5_000_000) } else { 100_000 + rng.i64(-2000..2000) };
            let pid = [0, 4242, 4242, 4242, 977][rng.usize(..5)];
            let ip =
                if pid == 0 { 0xffff_ffff_8100_0000 + rng.u64(..16) * 4 } else { 0x5555_5555_1000 + rng.u64(..2000) };
            b.push(t, pid, pid + u32::from(rng.u8(..8) == 0), ip);
        }
        b
    }

    #[test]
    fn time_and_ip_columns_take_the_codecs_made_for_them() {
        let b = second_of_samples(1);
        let mut out = Vec::new();
        b.encode(&mut out, Encoding::Fast);
        assert_eq!(EventBatch::decode(&out, Want::ALL).unwrap(), b);
        let (_, mut r) = Header::read(&out).unwrap();
        let n = b.len();
        let mut column = |shape: &str| {
            let at = r.pos;
            match shape {
                "u32" => drop(get_column::<u32>(&mut r, n, Read::Skip).unwrap()),
                "u64" => drop(get_column::<u64>(&mut r, n, Read::Skip).unwrap()),
                _ => drop(get_column::<i64>(&mut r, n, Read::Skip).unwrap()),
            }
            (out[at], r.pos - at)
        };
        let (time, pid, tid, ip) = (column("i64"), column("u32"), column("i64"), column("u64"));
        assert_eq!(time.0, CODEC_ZSTD_OFFSET);
        assert_eq!(ip.0, CODEC_DICT);
        assert!(matches!(pid.0, CODEC_ZSTD_NARROW | CODEC_RAW_NARROW) && matches!(tid.0, CODEC_ZSTD_NARROW));
        // Each smaller than the narrow bytes it replaced.
        let deltas: Vec<i64> = std::iter::once(0).chain(b.time.windows(2).map(|w| w[1] - w[0])).collect();
        let narrow = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut c = Vec::new();
            f(&mut c);
            c.len()
        };
        assert!(time.1 < narrow(&|c| put_narrow(c, &deltas, 1)), "time {time:?}");
        assert!(ip.1 < narrow(&|c| put_narrow(c, &b.ip, 1)), "ip {ip:?}");
    }

    #[test]
    fn offsets_escape_what_does_not_fit_and_check_their_tail() {
        // Mostly within a few of 1000, a few far off either way.
        let mut vals: Vec<i64> = (0..1000).map(|i| 1000 + (i % 7) - 3).collect();
        (vals[10], vals[500], vals[999]) = (i64::MAX, i64::MIN, -5_000_000);
        for level in [1, 3] {
            let mut out = Vec::new();
            put_offset(&mut out, &vals, median_bits(&vals), level);
            assert_eq!(out[1], 1, "most values fit a byte");
            assert_eq!(get_column::<i64>(&mut Reader::new(&out), vals.len(), Read::Values).unwrap(), vals);
        }
        // Width 1, base 0: the n bytes, then the escaped values' varints.
        let raw = |fixed: &[u8], tail: &[u8]| {
            let mut c = vec![CODEC_OFFSET, 1, 0];
            put_u64(&mut c, (fixed.len() + tail.len()) as u64);
            c.extend_from_slice(fixed);
            c.extend_from_slice(tail);
            c
        };
        let get = |c: &[u8], n| get_column::<i64>(&mut Reader::new(c), n, Read::Values);
        assert_eq!(get(&raw(&[2, 255], &[0x80, 0x01]), 2).unwrap(), vec![1, 64]);
        assert!(get(&raw(&[2, 255], &[]), 2).is_err(), "an escape without its value");
        assert!(get(&raw(&[2, 3], &[7]), 2).is_err(), "bytes beyond the values");
        assert!(get(&raw(&[2], &[]), 2).is_err(), "fewer values than n");
        let beyond_u32 = raw(&[255], &[0x80, 0x80, 0x80, 0x80, 0x20]);
        assert!(get_column::<u32>(&mut Reader::new(&beyond_u32), 1, Read::Values).is_err());
        let mut wide = raw(&[2], &[]);
        wide[1] = 9;
        assert!(get(&wide, 1).is_err(), "width beyond 8 bytes");
    }

    #[test]
    fn dictionaries_round_trip_and_refuse_what_they_cannot_hold() {
        let vals: Vec<u64> = (0..500u64)
            .map(|i| [u64::MAX - 2, 0, 0xffff_ffff_8100_0000, 0x5555_0000_1234][i as usize % 4] + i % 3)
            .collect();
        for level in [1, 3] {
            let mut out = Vec::new();
            put_dict(&mut out, &vals, level);
            assert_eq!(get_column::<u64>(&mut Reader::new(&out), vals.len(), Read::Values).unwrap(), vals);
            // Skipped unread, its n unknown (a stack table's frames).
            let mut r = Reader::new(&out);
            assert!(get_column::<u64>(&mut r, 0, Read::Skip).unwrap().is_empty());
            assert_eq!(r.remaining(), 0);
        }
        // k, the gaps (offsets, width 1, base 0), the indexes (narrow, width 1).
        let dict = |gaps: &[u8], index: u8| {
            let k = gaps.len() as u8;
            let mut c = vec![CODEC_DICT, k, CODEC_OFFSET, 1, 0, k];
            c.extend_from_slice(gaps);
            c.extend([CODEC_RAW_NARROW, 1, 1, index]);
            c
        };
        // Checked (values not looked up) and read alike.
        let get = |c: &[u8]| {
            let checked = get_column::<u32>(&mut Reader::new(c), 1, Read::Check);
            let read = get_column::<u32>(&mut Reader::new(c), 1, Read::Values);
            assert_eq!(checked.is_ok(), read.is_ok(), "{checked:?} {read:?}");
            read
        };
        assert_eq!(get(&dict(&[14], 0)).unwrap(), vec![7]);
        assert!(get(&dict(&[14], 1)).is_err(), "an index past the dictionary");
        assert!(get(&dict(&[14, 2], 0)).is_err(), "more distinct values than values");
        let beyond_u32 = [CODEC_DICT, 1, CODEC_OFFSET, 8, 0, 8, 0, 0, 0, 0, 2, 0, 0, 0, CODEC_RAW_NARROW, 1, 1, 0];
        assert!(get(&beyond_u32).is_err(), "a u32 column's value beyond u32");
        let mut nested = vec![CODEC_DICT, 1];
        nested.extend(dict(&[14], 0));
        nested.extend([CODEC_RAW_NARROW, 1, 1, 0]);
        assert!(get(&nested).is_err(), "a dictionary inside a dictionary");
    }

    #[test]
    fn a_batch_checks_as_it_decodes_whichever_column_is_a_dictionary() {
        // (Compact picks a dictionary for any column where it is smallest;
        // the fuzzer found check() reading a dictionary of times as empty.)
        let b = second_of_samples(2);
        let deltas: Vec<i64> = std::iter::once(0).chain(b.time.windows(2).map(|w| w[1] - w[0])).collect();
        let rel: Vec<i64> = b.tid.iter().zip(&b.pid).map(|(&t, &p)| i64::from(t) - i64::from(p)).collect();
        for dict in 0..4 {
            let mut out = Vec::new();
            put_u64(&mut out, b.len() as u64);
            put_u64(&mut out, u64::from(b.cpu));
            put_i64(&mut out, b.time[0]);
            put_i64(&mut out, b.time[b.len() - 1]);
            out.push(0);
            if dict == 0 {
                put_dict(&mut out, &deltas, 1)
            } else {
                put_narrow(&mut out, &deltas, 1)
            }
            if dict == 1 {
                put_dict(&mut out, &b.pid, 1)
            } else {
                put_narrow(&mut out, &b.pid, 1)
            }
            if dict == 2 {
                put_dict(&mut out, &rel, 1)
            } else {
                put_narrow(&mut out, &rel, 1)
            }
            if dict == 3 {
                put_dict(&mut out, &b.ip, 1)
            } else {
                put_narrow(&mut out, &b.ip, 1)
            }
            assert_eq!(EventBatch::decode(&out, Want::ALL).unwrap(), b, "dictionary in column {dict}");
            assert!(EventBatch::check(&out).is_ok(), "dictionary in column {dict}");
            // A time that disagrees with the header is found either way.
            let mut bad = out.clone();
            bad[out.len() - 1] ^= 1;
            assert_eq!(EventBatch::check(&bad).is_ok(), EventBatch::decode(&bad, Want::ALL).is_ok());
        }
    }
}
