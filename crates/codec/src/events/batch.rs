//! One batch's life as bytes: checking its columns line up, encoding them
//! (each with the codec [`super::column`] picks) behind a fixed header, and
//! decoding or only checking an encoded batch.

use super::column::{Read, Shape, get_column, put_column};
use super::procs::{get_procs, put_procs};
use super::{BatchError, Encoding, EventBatch, MAX_DEPTH, MAX_EVENTS, MAX_FRAMES, Want};
use super::{MAX_BUILD_ID, MAX_COMM, MAX_MAPS, MAX_PATH};
use crate::varint::{Reader, put_i64, put_u64};

const FLAG_CHAIN: u8 = 1;
const FLAG_PROCS: u8 = 2;

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

fn permute<T: Copy>(v: &[T], order: &[u32]) -> Vec<T> {
    order.iter().map(|&i| v[i as usize]).collect()
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
