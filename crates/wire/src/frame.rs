//! The agent <-> server wire protocol: framed, checksummed messages
//! (`docs/format/wire.md`). Pure encode/decode; the connection logic lives in
//! `agent` and `server`.
//!
//! ```text
//! frame = u32 len (LE) | u32 crc32 (LE, of body) | body[len]
//! body  = u8 type | payload
//! ```

use codec::varint::{Reader, get_key, put_i64, put_key, put_str, put_u64};
use model::SeriesKey;

/// First bytes of every Hello: tells a kansoku ingest port from anything else.
pub const MAGIC: [u8; 4] = *b"KNSK";
/// Protocol version spoken by this build. Version 3 added jobs (`Offer`,
/// `Job`, `JobDone`), version 4 symbol uploads (`Need`, `Blob`, `Lacks`);
/// a server accepts agents of [`VERSION_MIN`] too (they offer no jobs and
/// are asked for no symbols), an agent offers jobs only to a server that
/// welcomed it with version 3 or later.
pub const VERSION: u16 = 4;
/// The first version whose agents answer `Need`.
pub const VERSION_SYMBOLS: u16 = 4;
/// The oldest agent protocol a server of this build accepts.
pub const VERSION_MIN: u16 = 2;
/// Bytes of a frame header (length, checksum).
pub const HEADER: usize = 8;
/// Default limit on one frame's body.
pub const FRAME_MAX: u32 = 16 << 20;

const T_HELLO: u8 = 1;
const T_WELCOME: u8 = 2;
const T_REJECT: u8 = 3;
const T_SERIES: u8 = 4;
const T_ROUNDS: u8 = 5;
const T_EVENTS: u8 = 6;
const T_ACK: u8 = 7;
const T_PING: u8 = 8;
const T_PONG: u8 = 9;
const T_OFFER: u8 = 10;
const T_JOB: u8 = 11;
const T_JOB_DONE: u8 = 12;
const T_NEED: u8 = 13;
const T_BLOB: u8 = 14;
const T_LACKS: u8 = 15;

/// The agent's introduction, the first frame of every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    /// The `host` label of everything this agent sends.
    pub host: String,
    pub agent_version: String,
    /// Identifies the agent's spool: sequence numbers are per spool.
    pub spool_id: u64,
    /// Bearer token; empty when the agent has none.
    pub token: String,
    /// The agent's sampling interval and batch period, ns.
    pub interval_ns: u64,
    pub batch_ns: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    Hello(Hello),
    /// The server accepts; it holds every batch of this spool below `next_seq`.
    Welcome {
        version: u16,
        next_seq: u64,
    },
    /// The server refuses (and closes): why, in words for a person.
    Reject {
        reason: String,
    },
    /// Series this connection will refer to by the agent's id.
    Series(Vec<(u32, SeriesKey)>),
    /// Rounds of samples (see [`crate::rounds`]), compressed.
    Rounds {
        seq: u64,
        body: Vec<u8>,
    },
    /// Batches of per-CPU events of `stream` (one per CPU, a second each
    /// from the agent), as the store encodes them; stored with one fsync.
    Events {
        seq: u64,
        stream: SeriesKey,
        batches: Vec<Vec<u8>>,
    },
    /// Every batch up to and including `seq` is durable on the server.
    Ack {
        seq: u64,
    },
    /// Clock probe from the server; the agent answers with a Pong carrying
    /// its own wall clock.
    Ping {
        id: u64,
        time_ns: i64,
    },
    Pong {
        id: u64,
        time_ns: i64,
    },
    /// Agent -> server, after the welcome: the kinds of job this agent
    /// takes (`kansoku agent --jobs load`).
    Offer {
        kinds: Vec<String>,
    },
    /// Server -> agent: run job `id` of `kind` with `args`, beginning when
    /// the agent's own wall clock reads `start_ns` (the server converted its
    /// instant with the agent's measured clock offset).
    Job {
        id: u64,
        kind: String,
        start_ns: i64,
        args: Vec<String>,
    },
    /// Agent -> server: job `id` ended; `body` is its result (`ok`) or why
    /// it failed, in words for a person.
    JobDone {
        id: u64,
        ok: bool,
        body: Vec<u8>,
    },
    /// Server -> agent: send the symbol sources of `kind` (1: binaries by
    /// hex build id, 2: kernel symbol tables by boot id) named by `ids`;
    /// the server lacks them and names them in the agent's samples.
    Need {
        kind: u8,
        ids: Vec<String>,
    },
    /// Agent -> server: the bytes at `offset` of the zstd-compressed
    /// source `id` of `kind`, `total` compressed bytes in all.
    Blob {
        kind: u8,
        id: String,
        offset: u64,
        total: u64,
        data: Vec<u8>,
    },
    /// Agent -> server: it cannot send source `id` of `kind`, and why.
    Lacks {
        kind: u8,
        id: String,
        reason: String,
    },
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: u32, max: u32 },
    #[error("empty frame")]
    Empty,
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("malformed {0} message")]
    Malformed(&'static str),
    #[error("not a kansoku agent (bad magic)")]
    Magic,
}

impl Msg {
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Hello(_) => "hello",
            Msg::Welcome { .. } => "welcome",
            Msg::Reject { .. } => "reject",
            Msg::Series(_) => "series",
            Msg::Rounds { .. } => "rounds",
            Msg::Events { .. } => "events",
            Msg::Ack { .. } => "ack",
            Msg::Ping { .. } => "ping",
            Msg::Pong { .. } => "pong",
            Msg::Offer { .. } => "offer",
            Msg::Job { .. } => "job",
            Msg::JobDone { .. } => "job done",
            Msg::Need { .. } => "need",
            Msg::Blob { .. } => "blob",
            Msg::Lacks { .. } => "lacks",
        }
    }

    /// Appends this message as one frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER]);
        match self {
            Msg::Hello(h) => {
                out.push(T_HELLO);
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(&h.version.to_le_bytes());
                put_str(out, &h.host);
                put_str(out, &h.agent_version);
                out.extend_from_slice(&h.spool_id.to_le_bytes());
                put_str(out, &h.token);
                put_u64(out, h.interval_ns);
                put_u64(out, h.batch_ns);
            }
            Msg::Welcome { version, next_seq } => {
                out.push(T_WELCOME);
                out.extend_from_slice(&version.to_le_bytes());
                put_u64(out, *next_seq);
            }
            Msg::Reject { reason } => {
                out.push(T_REJECT);
                put_str(out, reason);
            }
            Msg::Series(defs) => {
                out.push(T_SERIES);
                put_u64(out, defs.len() as u64);
                for (id, key) in defs {
                    put_u64(out, u64::from(*id));
                    put_key(out, key);
                }
            }
            Msg::Rounds { seq, body } => {
                out.push(T_ROUNDS);
                put_u64(out, *seq);
                out.extend_from_slice(body);
            }
            Msg::Events { seq, stream, batches } => {
                out.push(T_EVENTS);
                put_u64(out, *seq);
                put_events(out, stream, batches);
            }
            Msg::Ack { seq } => {
                out.push(T_ACK);
                put_u64(out, *seq);
            }
            Msg::Ping { id, time_ns } => {
                out.push(T_PING);
                put_u64(out, *id);
                put_i64(out, *time_ns);
            }
            Msg::Pong { id, time_ns } => {
                out.push(T_PONG);
                put_u64(out, *id);
                put_i64(out, *time_ns);
            }
            Msg::Offer { kinds } => {
                out.push(T_OFFER);
                put_strs(out, kinds);
            }
            Msg::Job { id, kind, start_ns, args } => {
                out.push(T_JOB);
                put_u64(out, *id);
                put_str(out, kind);
                put_i64(out, *start_ns);
                put_strs(out, args);
            }
            Msg::JobDone { id, ok, body } => {
                out.push(T_JOB_DONE);
                put_u64(out, *id);
                out.push(u8::from(*ok));
                out.extend_from_slice(body);
            }
            Msg::Need { kind, ids } => {
                out.push(T_NEED);
                out.push(*kind);
                put_strs(out, ids);
            }
            Msg::Blob { kind, id, offset, total, data } => {
                out.push(T_BLOB);
                out.push(*kind);
                put_str(out, id);
                put_u64(out, *offset);
                put_u64(out, *total);
                out.extend_from_slice(data);
            }
            Msg::Lacks { kind, id, reason } => {
                out.push(T_LACKS);
                out.push(*kind);
                put_str(out, id);
                put_str(out, reason);
            }
        }
        let body = &out[start + HEADER..];
        let len = body.len() as u32;
        let crc = crc32fast::hash(body);
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Reads a frame header: the body's length (checked against `max`) and checksum.
pub fn parse_header(head: &[u8; HEADER], max: u32) -> Result<(usize, u32), WireError> {
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    if len == 0 {
        return Err(WireError::Empty);
    }
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    Ok((len as usize, crc))
}

/// The body of an `Events` message after its sequence number: the stream,
/// the count of batches (at least one), each batch length-prefixed. The
/// agent spools exactly these bytes.
pub fn put_events<B: AsRef<[u8]>>(out: &mut Vec<u8>, stream: &SeriesKey, batches: &[B]) {
    put_key(out, stream);
    put_u64(out, batches.len() as u64);
    for b in batches {
        put_u64(out, b.as_ref().len() as u64);
        out.extend_from_slice(b.as_ref());
    }
}

/// What [`put_events`] wrote, and nothing after it.
pub fn get_events(data: &[u8]) -> Option<(SeriesKey, Vec<Vec<u8>>)> {
    let mut r = Reader::new(data);
    let stream = get_key(&mut r)?;
    let count = r.u64()?;
    // Each batch takes at least its length byte: a count beyond the bytes
    // left is a lie, refused before allocating for it.
    if count == 0 || count > r.remaining() as u64 {
        return None;
    }
    let mut batches = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = usize::try_from(r.u64()?).ok()?;
        batches.push(r.bytes(len)?.to_vec());
    }
    (r.remaining() == 0).then_some((stream, batches))
}

fn put_strs(out: &mut Vec<u8>, strs: &[String]) {
    put_u64(out, strs.len() as u64);
    for s in strs {
        put_str(out, s);
    }
}

/// What [`put_strs`] wrote.
fn get_strs(r: &mut Reader) -> Option<Vec<String>> {
    let n = usize::try_from(r.u64()?).ok()?;
    // Each string takes at least its length byte: refused before allocating.
    if n > r.remaining() {
        return None;
    }
    (0..n).map(|_| r.str().map(str::to_owned)).collect()
}

/// Verifies and decodes a frame's body.
pub fn decode_body(body: &[u8], crc: u32) -> Result<Msg, WireError> {
    if crc32fast::hash(body) != crc {
        return Err(WireError::Checksum);
    }
    let (&ty, payload) = body.split_first().ok_or(WireError::Empty)?;
    let mut r = Reader::new(payload);
    let msg = match ty {
        T_HELLO => {
            let bad = WireError::Malformed("hello");
            if r.fixed::<4>().ok_or(bad.clone())? != MAGIC {
                return Err(WireError::Magic);
            }
            Msg::Hello(Hello {
                version: u16::from_le_bytes(r.fixed::<2>().ok_or(bad.clone())?),
                host: r.str().ok_or(bad.clone())?.to_owned(),
                agent_version: r.str().ok_or(bad.clone())?.to_owned(),
                spool_id: u64::from_le_bytes(r.fixed::<8>().ok_or(bad.clone())?),
                token: r.str().ok_or(bad.clone())?.to_owned(),
                interval_ns: r.u64().ok_or(bad.clone())?,
                batch_ns: r.u64().ok_or(bad)?,
            })
        }
        T_WELCOME => {
            let bad = WireError::Malformed("welcome");
            Msg::Welcome {
                version: u16::from_le_bytes(r.fixed::<2>().ok_or(bad.clone())?),
                next_seq: r.u64().ok_or(bad)?,
            }
        }
        T_REJECT => Msg::Reject { reason: r.str().ok_or(WireError::Malformed("reject"))?.to_owned() },
        T_SERIES => {
            let bad = WireError::Malformed("series");
            let n = usize::try_from(r.u64().ok_or(bad.clone())?).map_err(|_| bad.clone())?;
            // Each definition takes at least 3 bytes (id, name length, label count).
            if n > r.remaining() / 3 {
                return Err(bad);
            }
            let mut defs = Vec::with_capacity(n);
            for _ in 0..n {
                defs.push((r.u32().ok_or(bad.clone())?, get_key(&mut r).ok_or(bad.clone())?));
            }
            Msg::Series(defs)
        }
        T_ROUNDS => {
            let seq = r.u64().ok_or(WireError::Malformed("rounds"))?;
            let body = r.bytes(r.remaining()).unwrap_or_default().to_vec();
            Msg::Rounds { seq, body }
        }
        T_EVENTS => {
            let bad = WireError::Malformed("events");
            let seq = r.u64().ok_or(bad.clone())?;
            let rest = r.bytes(r.remaining()).unwrap_or_default();
            let (stream, batches) = get_events(rest).ok_or(bad)?;
            Msg::Events { seq, stream, batches }
        }
        T_ACK => Msg::Ack { seq: r.u64().ok_or(WireError::Malformed("ack"))? },
        T_PING | T_PONG => {
            let bad = WireError::Malformed("ping");
            let id = r.u64().ok_or(bad.clone())?;
            let time_ns = r.i64().ok_or(bad)?;
            if ty == T_PING { Msg::Ping { id, time_ns } } else { Msg::Pong { id, time_ns } }
        }
        T_OFFER => Msg::Offer { kinds: get_strs(&mut r).ok_or(WireError::Malformed("offer"))? },
        T_JOB => {
            let bad = WireError::Malformed("job");
            Msg::Job {
                id: r.u64().ok_or(bad.clone())?,
                kind: r.str().ok_or(bad.clone())?.to_owned(),
                start_ns: r.i64().ok_or(bad.clone())?,
                args: get_strs(&mut r).ok_or(bad)?,
            }
        }
        T_JOB_DONE => {
            let bad = WireError::Malformed("job done");
            let id = r.u64().ok_or(bad.clone())?;
            let ok = match r.fixed::<1>().ok_or(bad.clone())? {
                [0] => false,
                [1] => true,
                _ => return Err(bad),
            };
            Msg::JobDone { id, ok, body: r.bytes(r.remaining()).unwrap_or_default().to_vec() }
        }
        T_NEED => {
            let bad = WireError::Malformed("need");
            Msg::Need { kind: r.fixed::<1>().ok_or(bad.clone())?[0], ids: get_strs(&mut r).ok_or(bad)? }
        }
        T_BLOB => {
            let bad = WireError::Malformed("blob");
            Msg::Blob {
                kind: r.fixed::<1>().ok_or(bad.clone())?[0],
                id: r.str().ok_or(bad.clone())?.to_owned(),
                offset: r.u64().ok_or(bad.clone())?,
                total: r.u64().ok_or(bad)?,
                data: r.bytes(r.remaining()).unwrap_or_default().to_vec(),
            }
        }
        T_LACKS => {
            let bad = WireError::Malformed("lacks");
            Msg::Lacks {
                kind: r.fixed::<1>().ok_or(bad.clone())?[0],
                id: r.str().ok_or(bad.clone())?.to_owned(),
                reason: r.str().ok_or(bad)?.to_owned(),
            }
        }
        t => return Err(WireError::UnknownType(t)),
    };
    if r.remaining() != 0 {
        return Err(WireError::Malformed(msg.name()));
    }
    Ok(msg)
}

/// Decodes every whole frame at the start of `data`; returns the messages and
/// the bytes consumed. For tests and the fuzz target; connections read
/// frame by frame.
pub fn decode_all(data: &[u8], max: u32) -> Result<(Vec<Msg>, usize), WireError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(head) = data.get(pos..pos + HEADER) {
        let (len, crc) = parse_header(head.try_into().expect("8 bytes"), max)?;
        let Some(body) = data.get(pos + HEADER..pos + HEADER + len) else { break };
        out.push(decode_body(body, crc)?);
        pos += HEADER + len;
    }
    Ok((out, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<Msg> {
        let key = SeriesKey::new("node_load1", [("host", "a")]);
        vec![
            Msg::Hello(Hello {
                version: VERSION,
                host: "node-1".into(),
                agent_version: "0.1.0".into(),
                spool_id: u64::MAX - 3,
                token: "s3cret".into(),
                interval_ns: 100_000_000,
                batch_ns: 1_000_000_000,
            }),
            Msg::Welcome { version: VERSION, next_seq: 42 },
            Msg::Reject { reason: "wrong token".into() },
            Msg::Series(vec![(0, key.clone()), (u32::MAX, SeriesKey::new("x", Vec::<(String, String)>::new()))]),
            Msg::Rounds { seq: 7, body: vec![1, 2, 3] },
            Msg::Events { seq: 8, stream: key, batches: vec![vec![9; 100], vec![7; 3]] },
            Msg::Ack { seq: u64::MAX },
            Msg::Ping { id: 1, time_ns: i64::MIN },
            Msg::Pong { id: 1, time_ns: i64::MAX },
            Msg::Offer { kinds: vec!["load".into(), String::new()] },
            Msg::Offer { kinds: vec![] },
            Msg::Job {
                id: 3,
                kind: "load".into(),
                start_ns: 1_700_000_000_000_000_000,
                args: vec!["http://127.0.0.1/".into(), "-c".into(), "4".into()],
            },
            Msg::JobDone { id: 3, ok: true, body: vec![0, 1, 2] },
            Msg::JobDone { id: u64::MAX, ok: false, body: b"busy".to_vec() },
            Msg::Need { kind: 1, ids: vec!["ab01".into(), "cd".into()] },
            Msg::Need { kind: 2, ids: vec![] },
            Msg::Blob { kind: 1, id: "ab01".into(), offset: 1 << 20, total: 3 << 20, data: vec![7; 1000] },
            Msg::Blob { kind: 2, id: "boot".into(), offset: 0, total: 0, data: vec![] },
            Msg::Lacks { kind: 2, id: "boot".into(), reason: "no table".into() },
        ]
    }

    #[test]
    fn a_job_done_flag_is_zero_or_one() {
        let mut buf = Vec::new();
        Msg::JobDone { id: 1, ok: true, body: vec![] }.encode(&mut buf);
        // The flag is the body's last byte here; 2 is neither.
        let last = buf.len() - 1;
        buf[last] = 2;
        let crc = crc32fast::hash(&buf[HEADER..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_all(&buf, FRAME_MAX), Err(WireError::Malformed("job done")));
    }

    #[test]
    fn a_string_count_beyond_the_bytes_is_refused() {
        let mut body = vec![T_OFFER];
        put_u64(&mut body, u64::MAX / 2);
        let crc = crc32fast::hash(&body);
        assert_eq!(decode_body(&body, crc), Err(WireError::Malformed("offer")));
    }

    #[test]
    fn every_message_round_trips() {
        let msgs = all_kinds();
        let mut buf = Vec::new();
        for m in &msgs {
            m.encode(&mut buf);
        }
        let (got, used) = decode_all(&buf, FRAME_MAX).unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(got, msgs);
    }

    #[test]
    fn damage_is_detected_never_decoded() {
        let mut buf = Vec::new();
        Msg::Ack { seq: 5 }.encode(&mut buf);
        for i in 0..buf.len() {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[i] ^= 1 << bit;
                if let Ok((msgs, _)) = decode_all(&b, FRAME_MAX) {
                    assert!(msgs.is_empty(), "flip at {i}.{bit} decoded {msgs:?}");
                }
            }
        }
        // A frame announcing more than the limit is refused before reading it.
        let mut big = Vec::new();
        Msg::Rounds { seq: 1, body: vec![0; 100] }.encode(&mut big);
        assert_eq!(decode_all(&big, 50).unwrap_err(), WireError::TooLarge { len: 102, max: 50 });
        // Trailing bytes inside a frame are malformed, not ignored.
        let mut b = Vec::new();
        Msg::Ack { seq: 5 }.encode(&mut b);
        b.push(0);
        let len = (b.len() - HEADER) as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        let crc = crc32fast::hash(&b[HEADER..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_all(&b, FRAME_MAX).unwrap_err(), WireError::Malformed("ack"));
    }

    #[test]
    fn hello_with_wrong_magic_is_refused() {
        let mut buf = Vec::new();
        all_kinds()[0].encode(&mut buf);
        buf[HEADER + 1] = b'X';
        let crc = crc32fast::hash(&buf[HEADER..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_all(&buf, FRAME_MAX).unwrap_err(), WireError::Magic);
    }
}
