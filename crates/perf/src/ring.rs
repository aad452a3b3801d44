//! The records of a perf ring buffer (`man perf_event_open`, "MMAP layout"),
//! from bytes: no unsafe, no I/O.
//!
//! ```text
//! record = u32 type | u16 misc | u16 size (header included) | body
//! SAMPLE (sample_type IP|TID|TIME|CPU) = u64 ip | u32 pid | u32 tid | u64 time | u32 cpu | u32 res
//!        (+ CALLCHAIN)                  ... | u64 nr | u64 ips[nr]
//! LOST   = u64 id | u64 lost          THROTTLE, UNTHROTTLE = u64 time | u64 id | u64 stream_id
//! MMAP2  = u32 pid | u32 tid | u64 addr | u64 len | u64 pgoff
//!          | (misc & MMAP_BUILD_ID: u8 size | u8[3] | u8[20] build id ; else u32 maj, min | u64 ino, gen)
//!          | u32 prot | u32 flags | filename, NUL-terminated, padded to 8
//! COMM   = u32 pid | u32 tid | comm, NUL-terminated     (misc & COMM_EXEC: the process exec'd)
//! FORK, EXIT = u32 pid | u32 ppid | u32 tid | u32 ptid | u64 time
//! (sample_id_all: records other than SAMPLE end in u32 pid | u32 tid | u64 time | u32 cpu | u32 res)
//! ```

use perf_event_open_sys::bindings as sys;

/// Every record counted by kind; `lost` is the sum the kernel reported in
/// its LOST records (samples it could not write because the ring was full).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub samples: u64,
    pub lost: u64,
    pub lost_records: u64,
    pub throttle: u64,
    pub unthrottle: u64,
    /// MMAP2, COMM, FORK and EXIT records (the processes' side band).
    pub sideband: u64,
    pub other: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// `chain`: the call chain's entries as little-endian u64s (context
    /// markers included; see [`chain_ips`]), empty without CALLCHAIN.
    Sample {
        ip: u64,
        pid: u32,
        tid: u32,
        time: u64,
        cpu: u32,
        chain: &'a [u8],
    },
    Lost {
        lost: u64,
    },
    Throttle {
        time: u64,
    },
    Unthrottle {
        time: u64,
    },
    /// An executable mapping: `build_id` is empty when the kernel sent
    /// device and inode instead.
    /// `time`: 0 unless the records carry their sample id (`sample_id_all`).
    Mmap2 {
        time: u64,
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        build_id: &'a [u8],
        filename: &'a [u8],
    },
    /// A thread's new name; `exec`: its process exec'd a new image.
    Comm {
        time: u64,
        pid: u32,
        tid: u32,
        comm: &'a [u8],
        exec: bool,
    },
    /// A new thread (`pid == ppid`) or process.
    Fork {
        time: u64,
        pid: u32,
        ppid: u32,
        tid: u32,
    },
    /// A thread ended (`pid == tid`: its process's main thread).
    Exit {
        time: u64,
        pid: u32,
        tid: u32,
    },
    Other {
        kind: u32,
        body: &'a [u8],
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingError {
    #[error("perf ring: record at byte {at} has size {size}")]
    BadSize { at: usize, size: usize },
    #[error("perf ring: {kind} record at byte {at} is too short")]
    Short { kind: u32, at: usize },
}

const HEADER: usize = 8;
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
const MISC_COMM_EXEC: u16 = 1 << 13;

/// A record's body without its sample id, and the id's time (0 without).
fn split_id(body: &[u8], trailer: usize) -> (&[u8], u64) {
    if trailer == 0 {
        return (body, 0);
    }
    let at = body.len() - trailer;
    (&body[..at], u64_at(body, at + 8))
}

/// The bytes of `b` before its first NUL.
fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}
pub const SAMPLE_BODY: usize = 32;

/// Copies the bytes between the absolute positions `tail` and `head` of a
/// ring of `len` bytes (a power of two) into `out`, in at most two pieces
/// when they wrap the end; `read(offset, dst)` copies from the ring.
pub fn copy_span(len: usize, tail: u64, head: u64, out: &mut Vec<u8>, mut read: impl FnMut(usize, &mut [u8])) {
    debug_assert!(len.is_power_of_two());
    let n = head.saturating_sub(tail) as usize;
    let n = n.min(len);
    let start = (tail as usize) & (len - 1);
    let first = n.min(len - start);
    let at = out.len();
    out.resize(at + n, 0);
    read(start, &mut out[at..at + first]);
    if first < n {
        read(0, &mut out[at + first..at + n]);
    }
}

/// Entries at or above this are context markers (PERF_CONTEXT_KERNEL,
/// PERF_CONTEXT_USER, ...), not addresses.
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// The addresses of a sample's call chain, leaf first, into `out` (cleared),
/// context markers left out.
pub fn chain_ips(chain: &[u8], out: &mut Vec<u64>) {
    out.clear();
    out.extend(
        chain
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .filter(|&a| a < PERF_CONTEXT_MAX),
    );
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The sample id ending every non-sample record under `sample_id_all` with
/// sample_type IP|TID|TIME|CPU: pid, tid, time, cpu.
const SAMPLE_ID: usize = 24;

/// Parses consecutive records, counting them into `counts`.
pub fn parse<'a>(buf: &'a [u8], counts: &mut Counts, f: impl FnMut(Record<'a>)) -> Result<(), RingError> {
    parse_records(buf, false, counts, f)
}

/// [`parse`] of records that end in their sample id (`sample_id_all`).
pub fn parse_records<'a>(
    buf: &'a [u8],
    sample_id_all: bool,
    counts: &mut Counts,
    mut f: impl FnMut(Record<'a>),
) -> Result<(), RingError> {
    let trailer = if sample_id_all { SAMPLE_ID } else { 0 };
    let mut at = 0;
    while at < buf.len() {
        if buf.len() - at < HEADER {
            return Err(RingError::BadSize { at, size: buf.len() - at });
        }
        let kind = u32_at(buf, at);
        let misc = u16::from_le_bytes([buf[at + 4], buf[at + 5]]);
        let size = usize::from(u16::from_le_bytes([buf[at + 6], buf[at + 7]]));
        if size < HEADER || size % 8 != 0 || at + size > buf.len() {
            return Err(RingError::BadSize { at, size });
        }
        let body = &buf[at + HEADER..at + size];
        let short = || RingError::Short { kind, at };
        let rec = match kind {
            sys::PERF_RECORD_SAMPLE => {
                if body.len() < SAMPLE_BODY {
                    return Err(short());
                }
                let chain = if body.len() > SAMPLE_BODY {
                    if body.len() < SAMPLE_BODY + 8 {
                        return Err(short());
                    }
                    let nr = u64_at(body, SAMPLE_BODY);
                    let end = usize::try_from(nr)
                        .ok()
                        .and_then(|nr| nr.checked_mul(8))
                        .and_then(|b| b.checked_add(SAMPLE_BODY + 8))
                        .filter(|&end| end <= body.len())
                        .ok_or_else(short)?;
                    &body[SAMPLE_BODY + 8..end]
                } else {
                    &[][..]
                };
                counts.samples += 1;
                Record::Sample {
                    ip: u64_at(body, 0),
                    pid: u32_at(body, 8),
                    tid: u32_at(body, 12),
                    time: u64_at(body, 16),
                    cpu: u32_at(body, 24),
                    chain,
                }
            }
            sys::PERF_RECORD_LOST => {
                if body.len() < 16 {
                    return Err(short());
                }
                let lost = u64_at(body, 8);
                counts.lost += lost;
                counts.lost_records += 1;
                Record::Lost { lost }
            }
            sys::PERF_RECORD_THROTTLE | sys::PERF_RECORD_UNTHROTTLE => {
                if body.len() < 8 {
                    return Err(short());
                }
                let time = u64_at(body, 0);
                if kind == sys::PERF_RECORD_THROTTLE {
                    counts.throttle += 1;
                    Record::Throttle { time }
                } else {
                    counts.unthrottle += 1;
                    Record::Unthrottle { time }
                }
            }
            sys::PERF_RECORD_MMAP2 => {
                if body.len() < 64 + trailer {
                    return Err(short());
                }
                let (body, time) = split_id(body, trailer);
                let build_id = if misc & MISC_MMAP_BUILD_ID != 0 {
                    let n = usize::from(body[32]).min(20);
                    &body[36..36 + n]
                } else {
                    &[][..]
                };
                counts.sideband += 1;
                Record::Mmap2 {
                    time,
                    pid: u32_at(body, 0),
                    tid: u32_at(body, 4),
                    addr: u64_at(body, 8),
                    len: u64_at(body, 16),
                    pgoff: u64_at(body, 24),
                    build_id,
                    filename: c_str(&body[64..]),
                }
            }
            sys::PERF_RECORD_COMM => {
                if body.len() < 8 + trailer {
                    return Err(short());
                }
                let (body, time) = split_id(body, trailer);
                counts.sideband += 1;
                Record::Comm {
                    time,
                    pid: u32_at(body, 0),
                    tid: u32_at(body, 4),
                    comm: c_str(&body[8..]),
                    exec: misc & MISC_COMM_EXEC != 0,
                }
            }
            sys::PERF_RECORD_FORK | sys::PERF_RECORD_EXIT => {
                if body.len() < 24 {
                    return Err(short());
                }
                counts.sideband += 1;
                let (pid, ppid, tid, time) = (u32_at(body, 0), u32_at(body, 4), u32_at(body, 8), u64_at(body, 16));
                if kind == sys::PERF_RECORD_FORK {
                    Record::Fork { time, pid, ppid, tid }
                } else {
                    Record::Exit { time, pid, tid }
                }
            }
            _ => {
                counts.other += 1;
                Record::Other { kind, body }
            }
        };
        f(rec);
        at += size;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn sample(ip: u64, pid: u32, tid: u32, time: u64, cpu: u32) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&sys::PERF_RECORD_SAMPLE.to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&((HEADER + SAMPLE_BODY) as u16).to_le_bytes());
        r.extend_from_slice(&ip.to_le_bytes());
        r.extend_from_slice(&pid.to_le_bytes());
        r.extend_from_slice(&tid.to_le_bytes());
        r.extend_from_slice(&time.to_le_bytes());
        r.extend_from_slice(&cpu.to_le_bytes());
        r.extend_from_slice(&0u32.to_le_bytes());
        r
    }

    pub fn lost(n: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&sys::PERF_RECORD_LOST.to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&24u16.to_le_bytes());
        r.extend_from_slice(&7u64.to_le_bytes());
        r.extend_from_slice(&n.to_le_bytes());
        r
    }

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_le_bytes());
        r.extend_from_slice(&misc.to_le_bytes());
        let padded = body.len().div_ceil(8) * 8;
        r.extend_from_slice(&((HEADER + padded) as u16).to_le_bytes());
        r.extend_from_slice(body);
        r.resize(HEADER + padded, 0);
        r
    }

    #[test]
    fn side_band_records_are_read() {
        let mut mmap = Vec::new();
        for v in [7u32, 8] {
            mmap.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x5555_0000_0000u64, 0x2000, 0x1000] {
            mmap.extend_from_slice(&v.to_le_bytes());
        }
        mmap.push(20);
        mmap.extend_from_slice(&[0; 3]);
        mmap.extend((1..=20).map(|i| i as u8));
        mmap.extend_from_slice(&[5, 0, 0, 0, 2, 0, 0, 0]); // prot, flags
        mmap.extend_from_slice(b"/usr/bin/app\0");
        let mut comm = Vec::new();
        for v in [7u32, 7] {
            comm.extend_from_slice(&v.to_le_bytes());
        }
        comm.extend_from_slice(b"app\0");
        let task = |pid: u32, ppid: u32, tid: u32| {
            let mut b = Vec::new();
            for v in [pid, ppid, tid, 1] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&99u64.to_le_bytes());
            b
        };
        let bytes = [
            record(sys::PERF_RECORD_MMAP2, MISC_MMAP_BUILD_ID, &mmap),
            record(sys::PERF_RECORD_COMM, MISC_COMM_EXEC, &comm),
            record(sys::PERF_RECORD_FORK, 0, &task(9, 7, 9)),
            record(sys::PERF_RECORD_EXIT, 0, &task(9, 9, 9)),
        ]
        .concat();
        let mut got = Vec::new();
        let mut counts = Counts::default();
        parse(&bytes, &mut counts, |r| got.push(r)).unwrap();
        let id: Vec<u8> = (1..=20).collect();
        assert_eq!(
            got,
            [
                Record::Mmap2 {
                    time: 0,
                    pid: 7,
                    tid: 8,
                    addr: 0x5555_0000_0000,
                    len: 0x2000,
                    pgoff: 0x1000,
                    build_id: &id,
                    filename: b"/usr/bin/app"
                },
                Record::Comm { time: 0, pid: 7, tid: 7, comm: b"app", exec: true },
                Record::Fork { time: 99, pid: 9, ppid: 7, tid: 9 },
                Record::Exit { time: 99, pid: 9, tid: 9 },
            ]
        );
        assert_eq!(counts.sideband, 4);
        // Without the build-id flag the union holds device and inode.
        let plain = record(sys::PERF_RECORD_MMAP2, 0, &mmap);
        parse(&plain, &mut counts, |r| assert!(matches!(r, Record::Mmap2 { build_id: &[], .. }))).unwrap();
        // Cut short: an error, not a panic.
        let short = record(sys::PERF_RECORD_MMAP2, 0, &mmap[..40]);
        assert!(matches!(parse(&short, &mut counts, |_| {}), Err(RingError::Short { .. })));
        // With their sample id: the time is the id's, the name ends before it.
        let mut with_id = comm.clone();
        with_id.resize(16, 0);
        for v in [7u64, 1234, 0] {
            with_id.extend_from_slice(&v.to_le_bytes());
        }
        let r = record(sys::PERF_RECORD_COMM, 0, &with_id);
        parse_records(&r, true, &mut counts, |r| {
            assert_eq!(r, Record::Comm { time: 1234, pid: 7, tid: 7, comm: b"app", exec: false });
        })
        .unwrap();
        // (A fork without its time: found by the fuzzer.)
        let fork = record(sys::PERF_RECORD_FORK, 0, &task(9, 7, 9)[..16]);
        assert!(matches!(parse(&fork, &mut counts, |_| {}), Err(RingError::Short { .. })));
        let short = record(sys::PERF_RECORD_COMM, 0, &with_id[..16]);
        assert!(matches!(parse_records(&short, true, &mut counts, |_| {}), Err(RingError::Short { .. })));
    }

    /// A ring of `len` bytes holding `records` from absolute position `tail`.
    fn ring_with(len: usize, tail: u64, records: &[Vec<u8>]) -> (Vec<u8>, u64) {
        let mut ring = vec![0xAAu8; len];
        let mut pos = tail;
        for r in records {
            for &b in r {
                ring[(pos as usize) & (len - 1)] = b;
                pos += 1;
            }
        }
        (ring, pos)
    }

    #[test]
    fn records_that_wrap_the_ring_are_whole() {
        let records: Vec<Vec<u8>> =
            (0..10).map(|i| sample(0xffff_ffff_8100_0000 + i, 10 + i as u32, 20, 1000 * i, 1)).collect();
        // Every starting position around the end of a 256-byte ring: records
        // cut anywhere, including in their headers.
        for tail in 0..256u64 {
            let base = 10 * 256 + tail; // positions are absolute, laps behind
            let (ring, head) = ring_with(256, base, &records[..6]);
            let mut bytes = Vec::new();
            copy_span(256, base, head, &mut bytes, |off, dst| dst.copy_from_slice(&ring[off..off + dst.len()]));
            let mut got = Vec::new();
            let mut counts = Counts::default();
            parse(&bytes, &mut counts, |r| got.push(r)).unwrap();
            assert_eq!(counts.samples, 6, "tail {tail}");
            for (i, r) in got.iter().enumerate() {
                let i = i as u64;
                assert_eq!(
                    *r,
                    Record::Sample {
                        ip: 0xffff_ffff_8100_0000 + i,
                        pid: 10 + i as u32,
                        tid: 20,
                        time: 1000 * i,
                        cpu: 1,
                        chain: &[],
                    }
                );
            }
        }
    }

    #[test]
    fn call_chains_are_read_and_their_markers_dropped() {
        let mut r = sample(0x401000, 5, 5, 9, 0);
        let entries =
            [PERF_CONTEXT_MAX + 3583, 0xffff_ffff_8100_0010, PERF_CONTEXT_MAX + 3583 - 384, 0x401000, 0x402000];
        r.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        entries.iter().for_each(|e| r.extend_from_slice(&e.to_le_bytes()));
        let size = r.len() as u16;
        r[6..8].copy_from_slice(&size.to_le_bytes());
        let mut got = Vec::new();
        parse(&r, &mut Counts::default(), |rec| {
            if let Record::Sample { chain, .. } = rec {
                chain_ips(chain, &mut got);
            }
        })
        .unwrap();
        assert_eq!(got, [0xffff_ffff_8100_0010, 0x401000, 0x402000]);
        // A count of frames beyond the record is damage.
        r[SAMPLE_BODY + 8..SAMPLE_BODY + 16].copy_from_slice(&99u64.to_le_bytes());
        assert!(matches!(parse(&r, &mut Counts::default(), |_| {}), Err(RingError::Short { .. })));
    }

    #[test]
    fn losses_are_counted_exactly() {
        let recs = [sample(1, 2, 3, 4, 0), lost(17), sample(1, 2, 3, 5, 0), lost(3), lost(0)];
        let bytes: Vec<u8> = recs.concat();
        let mut counts = Counts::default();
        parse(&bytes, &mut counts, |_| {}).unwrap();
        assert_eq!(counts, Counts { samples: 2, lost: 20, lost_records: 3, ..Counts::default() });
    }

    #[test]
    fn damage_is_an_error() {
        let mut bytes = sample(1, 2, 3, 4, 0);
        bytes[6] = 4; // size below the header
        assert!(matches!(parse(&bytes, &mut Counts::default(), |_| {}), Err(RingError::BadSize { at: 0, .. })));
        let bytes = sample(1, 2, 3, 4, 0);
        assert!(parse(&bytes[..20], &mut Counts::default(), |_| {}).is_err());
        let mut short = lost(1);
        short[6] = 16;
        short.truncate(16);
        assert_eq!(parse(&short, &mut Counts::default(), |_| {}), Err(RingError::Short { kind: 2, at: 0 }));
    }
}
