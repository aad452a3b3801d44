//! One batch of one CPU's events as columns, and its compressed encoding
//! (`docs/format/events.md`).
//!
//! Each column is transformed to expose its structure (times as deltas,
//! thread ids relative to their process id) and compressed by whichever of
//! pco and zstd gives fewer bytes for that column of that batch. Decoding
//! checks every length against the header, so a damaged or hostile batch is
//! an error, never a wrong answer or an unbounded allocation.

use crate::codec::varint::{Reader, put_i64, put_str, put_u64};

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
const FLAG_CHAIN: u8 = 1;
const FLAG_PROCS: u8 = 2;

/// How hard [`EventBatch::encode`] works. Measured on a real `perf record -F
/// 10000 -a` capture in batches of 1,000 events (`docs/benchmarks.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// zstd level 1 per column: ~3.5 B/event at ~7 M events/s per core. For
    /// the agent and ingest, where CPU time is the workload's.
    #[default]
    Fast,
    /// The smaller of pco and zstd level 3 per column: ~3.1 B/event at
    /// ~2 M events/s. For rewriting stored data.
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
        put_column(out, &deltas, enc);
        put_column(out, &self.pid, enc);
        // A process's main thread has tid == pid: make that a run of zeros.
        let rel: Vec<i64> = self.tid.iter().zip(&self.pid).map(|(&t, &p)| i64::from(t) - i64::from(p)).collect();
        put_column(out, &rel, enc);
        put_column(out, &self.ip, enc);
        if !self.chain.is_empty() {
            put_column(out, &self.chain, enc);
            // The stack table: its size, each stack's depth, every frame.
            put_u64(out, self.stacks.len() as u64);
            let depths: Vec<u32> = self.stacks.iter().map(|s| s.len() as u32).collect();
            put_column(out, &depths, enc);
            let frames: Vec<u64> = self.stacks.iter().flatten().copied().collect();
            put_column(out, &frames, enc);
        }
        if !self.procs.is_empty() {
            put_procs(out, &self.procs);
        }
    }

    /// Decodes one batch; `want` limits which columns are decompressed (the
    /// rest are left empty).
    pub fn decode(data: &[u8], want: Want) -> Result<EventBatch, BatchError> {
        let (head, mut r) = Header::read(data)?;
        let n = head.n;
        let mut b = EventBatch { cpu: head.cpu, ..EventBatch::default() };
        let deltas: Vec<i64> = get_column(&mut r, n, want.time)?;
        if want.time {
            let mut t = head.min_t;
            b.time.reserve_exact(n);
            for (i, d) in deltas.into_iter().enumerate() {
                if i > 0 {
                    if d < 0 {
                        return Err(BatchError::Malformed("times not ascending"));
                    }
                    t = t.checked_add(d).ok_or(BatchError::Malformed("time overflows"))?;
                }
                b.time.push(t);
            }
            if t != head.max_t {
                return Err(BatchError::Malformed("times disagree with the header"));
            }
        }
        let pid: Vec<u32> = get_column(&mut r, n, want.pid || want.tid)?;
        let rel: Vec<i64> = get_column(&mut r, n, want.tid)?;
        if want.tid {
            b.tid = rel
                .iter()
                .zip(&pid)
                .map(|(&d, &p)| u32::try_from(i64::from(p) + d).map_err(|_| BatchError::Malformed("tid out of range")))
                .collect::<Result<_, _>>()?;
        }
        if want.pid {
            b.pid = pid;
        }
        b.ip = get_column(&mut r, n, want.ip)?;
        if head.has_chain {
            b.chain = get_column(&mut r, n, want.chain)?;
            let bad = BatchError::Malformed;
            let n_stacks = usize::try_from(r.u64().ok_or(bad("stack count"))?).map_err(|_| bad("stack count"))?;
            if n_stacks == 0 || n_stacks > n {
                return Err(bad("stack count out of range"));
            }
            let depths: Vec<u32> = get_column(&mut r, n_stacks, want.chain)?;
            // Frames: no more than the depths allow, checked before decoding.
            let total: usize = depths.iter().map(|&d| d as usize).sum();
            if want.chain && (depths.iter().any(|&d| d as usize > MAX_DEPTH) || total > MAX_FRAMES) {
                return Err(bad("stacks deeper or larger than allowed"));
            }
            let frames: Vec<u64> = get_column(&mut r, if want.chain { total } else { 0 }, want.chain)?;
            if want.chain {
                if b.chain.iter().any(|&c| c as usize >= n_stacks) {
                    return Err(bad("call chain beyond the stack table"));
                }
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
        Ok(b)
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

/// A column's number type: fixed-width little-endian, as u64 (zigzag for
/// signed) for narrow columns, and pco-compressible.
trait Num: pco::data_types::Number + Copy + Default {
    const WIDTH: usize;
    fn to_le(self, out: &mut Vec<u8>);
    fn from_le(b: &[u8]) -> Self;
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Option<Self>;
}

macro_rules! num {
    ($t:ty) => {
        impl Num for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn to_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_le(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("BUG: width"))
            }
            fn to_u64(self) -> u64 {
                self.into()
            }
            fn from_u64(v: u64) -> Option<Self> {
                <$t>::try_from(v).ok()
            }
        }
    };
}
num!(u32);
num!(u64);

impl Num for i64 {
    const WIDTH: usize = 8;
    fn to_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn from_le(b: &[u8]) -> Self {
        i64::from_le_bytes(b.try_into().expect("BUG: width"))
    }
    fn to_u64(self) -> u64 {
        ((self << 1) ^ (self >> 63)) as u64
    }
    fn from_u64(v: u64) -> Option<Self> {
        Some(((v >> 1) as i64) ^ -((v & 1) as i64))
    }
}

/// Bytes needed for the largest value of a column, 0..=8.
fn width_of<T: Num>(vals: &[T]) -> usize {
    let max = vals.iter().fold(0u64, |m, &v| m | v.to_u64());
    (64 - max.leading_zeros() as usize).div_ceil(8)
}

fn put_column<T: Num>(out: &mut Vec<u8>, vals: &[T], enc: Encoding) {
    let width = width_of(vals);
    let mut raw = Vec::with_capacity(vals.len() * width);
    if width == T::WIDTH {
        vals.iter().for_each(|&v| v.to_le(&mut raw));
    } else {
        vals.iter().for_each(|&v| raw.extend_from_slice(&v.to_u64().to_le_bytes()[..width]));
    }
    let (zstd, pco) = match enc {
        Encoding::Fast => (crate::codec::zctx::compress(&raw, 1), None),
        Encoding::Compact => (
            crate::codec::zctx::compress(&raw, 3),
            pco::standalone::simple_compress(vals, &pco::ChunkConfig::default()).ok(),
        ),
    };
    let mut best = (CODEC_RAW_NARROW, raw);
    for (codec, bytes) in [(CODEC_ZSTD_NARROW, zstd), (CODEC_PCO, pco)] {
        if let Some(b) = bytes
            && b.len() < best.1.len()
        {
            best = (codec, b);
        }
    }
    out.push(best.0);
    if best.0 != CODEC_PCO {
        out.push(width as u8);
    }
    put_u64(out, best.1.len() as u64);
    out.extend_from_slice(&best.1);
}

/// Reads one column of `n` values; skips its bytes (returning an empty
/// vector) when `decode` is false.
fn get_column<T: Num>(r: &mut Reader<'_>, n: usize, decode: bool) -> Result<Vec<T>, BatchError> {
    let bad = BatchError::Malformed;
    let codec = r.fixed::<1>().ok_or(bad("column codec"))?[0];
    let width = match codec {
        CODEC_RAW | CODEC_ZSTD => T::WIDTH,
        CODEC_RAW_NARROW | CODEC_ZSTD_NARROW => {
            let w = usize::from(r.fixed::<1>().ok_or(bad("column width"))?[0]);
            if w > T::WIDTH {
                return Err(bad("column width exceeds its type"));
            }
            w
        }
        CODEC_PCO => 0,
        _ => return Err(bad("unknown column codec")),
    };
    let len = usize::try_from(r.u64().ok_or(bad("column length"))?).map_err(|_| bad("column length"))?;
    let bytes = r.bytes(len).ok_or(bad("column shorter than its length"))?;
    if !decode {
        return Ok(Vec::new());
    }
    let from_raw = |raw: &[u8]| -> Result<Vec<T>, BatchError> {
        if raw.len() != n * width {
            return Err(bad("column holds the wrong number of values"));
        }
        if width == T::WIDTH {
            return Ok(raw.chunks_exact(T::WIDTH).map(T::from_le).collect());
        }
        let mask = if width == 0 { 0 } else { u64::MAX >> (64 - 8 * width) };
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let at = i * width;
            // An 8-byte window where there is one, masked to the width.
            let v = match raw.get(at..at + 8) {
                Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")) & mask,
                None => {
                    let mut b = [0u8; 8];
                    b[..width].copy_from_slice(&raw[at..at + width]);
                    u64::from_le_bytes(b)
                }
            };
            out.push(T::from_u64(v).ok_or(bad("narrow value out of range"))?);
        }
        Ok(out)
    };
    match codec {
        CODEC_RAW | CODEC_RAW_NARROW => from_raw(bytes),
        CODEC_ZSTD | CODEC_ZSTD_NARROW => {
            let raw = crate::codec::zctx::decompress(bytes, n * width).ok_or(bad("zstd column does not decode"))?;
            from_raw(&raw)
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
            // Every truncation is detected, never a shorter answer.
            for cut in [0, 1, out.len() / 2, out.len() - 1] {
                prop_assert!(EventBatch::decode(&out[..cut], Want::ALL).is_err());
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
}
