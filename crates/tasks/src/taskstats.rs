//! The kernel's accounting of every exiting task (`Documentation/accounting/
//! taskstats.rst`): a generic netlink socket registered for a CPU mask
//! receives, as each task exits, its `struct taskstats` — CPU time in
//! microseconds, faults, storage bytes, context switches — so a process
//! that lived 30 ms between two scans of `/proc` is still accounted.
//!
//! A single-threaded process's exit is one per-pid record whose `ac_tgid`
//! is its pid; a thread's exit is a per-pid record of the thread alone; the
//! last thread of a multi-threaded process adds a per-tgid record holding
//! the whole process's totals. Messages are parsed from bytes ([`parse`],
//! fuzzed).

use std::io;
use std::os::fd::OwnedFd;

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType, netlink};

const NLMSG_HDR: usize = 16;
const GENL_HDR: usize = 4;
const NLMSG_ERROR: u16 = 2;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const TASKSTATS_CMD_GET: u8 = 1;
const TASKSTATS_CMD_ATTR_REGISTER_CPUMASK: u16 = 3;
const TASKSTATS_TYPE_PID: u16 = 1;
const TASKSTATS_TYPE_TGID: u16 = 2;
const TASKSTATS_TYPE_STATS: u16 = 3;
const TASKSTATS_TYPE_AGGR_PID: u16 = 4;
const TASKSTATS_TYPE_AGGR_TGID: u16 = 5;
const NLM_F_REQUEST: u16 = 1;

/// The figures of one exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// The task (thread) id, or for a whole process's record its tgid.
    pub pid: u32,
    /// The process it belongs to, where the record says (version ≥ 12).
    pub tgid: Option<u32>,
    /// A per-tgid record: the whole process's totals, its last thread gone.
    pub group: bool,
    pub comm: String,
    /// The exact run time (the scheduler's), split into user and system by
    /// the tick samples' ratio.
    pub utime_us: u64,
    pub stime_us: u64,
    pub majflt: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub nvcsw: u64,
    pub nivcsw: u64,
}

impl Exit {
    /// The process this record ends, if it ends one: a per-tgid record, or
    /// a single-threaded process's own.
    pub fn process(&self) -> Option<u32> {
        if self.group || self.tgid == Some(self.pid) { Some(self.tgid.unwrap_or(self.pid)) } else { None }
    }
}

/// Bytes that are not what the kernel sends.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("taskstats message: {0}")]
pub struct ParseError(pub &'static str);

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The attributes `(type, payload)` in `b`; an attribute running past the
/// end is an error.
fn attrs(b: &[u8]) -> Result<Vec<(u16, &[u8])>, ParseError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 4 <= b.len() {
        let len = usize::from(u16_at(b, at).ok_or(ParseError("attribute header"))?);
        let kind = u16_at(b, at + 2).ok_or(ParseError("attribute header"))? & 0x3fff;
        if len < 4 || at + len > b.len() {
            return Err(ParseError("attribute length beyond the message"));
        }
        out.push((kind, &b[at + 4..at + len]));
        at += (len + 3) & !3;
    }
    Ok(out)
}

/// `struct taskstats` (linux/taskstats.h) as far as we read it.
fn stats(s: &[u8], pid: u32, group: bool) -> Result<Exit, ParseError> {
    let short = ParseError("struct taskstats shorter than version 1's");
    let version = u16_at(s, 0).ok_or(short)?;
    let comm = s.get(80..112).ok_or(ParseError("struct taskstats shorter than version 1's"))?;
    let comm = String::from_utf8_lossy(comm.split(|&c| c == 0).next().unwrap_or_default()).into_owned();
    let f = |at| u64_at(s, at).ok_or(ParseError("struct taskstats shorter than version 1's"));
    // ac_tgid came with version 12 (Linux 5.x), after the v11 fields.
    let tgid = if version >= 12 { u32_at(s, 368) } else { None };
    // ac_utime and ac_stime are tick samples (4 ms at HZ=250: a 45 ms
    // process can read 20 ms); cpu_run_virtual_total is the scheduler's
    // exact run time in ns. Split it by the ticks' ratio, as getrusage and
    // /proc/PID/stat do.
    let (ut, st, run_ns) = (f(152)?, f(160)?, f(72)?);
    let run_us = run_ns / 1000;
    let (utime_us, stime_us) = match ut + st {
        0 if run_us > 0 => (run_us, 0),
        0 => (0, 0),
        ticks => {
            let u = (u128::from(run_us) * u128::from(ut) / u128::from(ticks)) as u64;
            (u, run_us - u)
        }
    };
    Ok(Exit {
        pid,
        tgid: if group { Some(pid) } else { tgid },
        group,
        comm,
        utime_us,
        stime_us,
        majflt: f(176)?,
        read_bytes: f(248)?,
        write_bytes: f(256)?,
        nvcsw: f(272)?,
        nivcsw: f(280)?,
    })
}

/// Every exit in a buffer `recv` filled (one or more netlink messages): a
/// message with a per-tgid record gives that (the process's totals), else
/// its per-pid record.
pub fn parse(b: &[u8]) -> Result<Vec<Exit>, ParseError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + NLMSG_HDR <= b.len() {
        let len = u32_at(b, at).ok_or(ParseError("header"))? as usize;
        let kind = u16_at(b, at + 4).ok_or(ParseError("header"))?;
        if len < NLMSG_HDR || at + len > b.len() {
            return Err(ParseError("message length beyond the buffer"));
        }
        let msg = &b[at..at + len];
        at += (len + 3) & !3;
        if kind == NLMSG_ERROR || msg.len() < NLMSG_HDR + GENL_HDR {
            continue;
        }
        let (mut per_pid, mut per_tgid) = (None, None);
        for (t, payload) in attrs(&msg[NLMSG_HDR + GENL_HDR..])? {
            if t != TASKSTATS_TYPE_AGGR_PID && t != TASKSTATS_TYPE_AGGR_TGID {
                continue;
            }
            let (mut id, mut st) = (None, None);
            for (t2, p2) in attrs(payload)? {
                match t2 {
                    TASKSTATS_TYPE_PID | TASKSTATS_TYPE_TGID => id = u32_at(p2, 0),
                    TASKSTATS_TYPE_STATS => st = Some(p2),
                    _ => {}
                }
            }
            if let (Some(id), Some(st)) = (id, st) {
                let group = t == TASKSTATS_TYPE_AGGR_TGID;
                let e = stats(st, id, group)?;
                if group { per_tgid = Some(e) } else { per_pid = Some(e) }
            }
        }
        // The per-tgid record's struct holds sums, not the name: the last
        // thread's record, beside it, names the program.
        if let (Some(g), Some(p)) = (&mut per_tgid, &per_pid)
            && g.comm.is_empty()
        {
            g.comm.clone_from(&p.comm);
        }
        if let Some(e) = per_tgid.or(per_pid) {
            out.push(e);
        }
    }
    Ok(out)
}

/// A generic netlink message: header, family's command, attributes.
fn message(family: u16, cmd: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = vec![cmd, 1, 0, 0];
    for (t, p) in attrs {
        let len = 4 + p.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&t.to_ne_bytes());
        body.extend_from_slice(p);
        body.resize(body.len() + ((4 - len % 4) % 4), 0);
    }
    let mut m = Vec::with_capacity(NLMSG_HDR + body.len());
    m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&body);
    m
}

/// A socket registered for every exit on the given CPUs.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
}

/// The kernel's answer to a request: its error code, if it is an error.
fn nl_error(b: &[u8]) -> Option<i32> {
    (u16_at(b, 4)? == NLMSG_ERROR).then(|| u32_at(b, NLMSG_HDR).map_or(0, |e| e as i32)).filter(|&e| e != 0)
}

impl Listener {
    /// Opens the socket and registers for `cpus` (a list like `0-3`).
    /// Needs CAP_NET_ADMIN (root).
    pub fn open(cpus: &str) -> io::Result<Listener> {
        let fd = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, Some(netlink::GENERIC))?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))?;
        // Exits come in bursts (a build, a fork storm): room for thousands.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(&fd, 8 << 20)
            .or_else(|_| rustix::net::sockopt::set_socket_recv_buffer_size(&fd, 8 << 20));
        let kernel = SocketAddrNetlink::new(0, 0);
        rustix::net::sendto(
            &fd,
            &message(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &[(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")]),
            SendFlags::empty(),
            &kernel,
        )?;
        let mut buf = vec![0u8; 16 << 10];
        let (n, _) = rustix::net::recv(&fd, &mut buf[..], RecvFlags::empty())?;
        let reply = &buf[..n];
        if let Some(e) = nl_error(reply) {
            return Err(io::Error::from_raw_os_error(-e));
        }
        let family = reply
            .get(NLMSG_HDR + GENL_HDR..)
            .and_then(|a| attrs(a).ok())
            .and_then(|a| a.iter().find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID).and_then(|(_, p)| u16_at(p, 0)))
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "this kernel has no TASKSTATS family"))?;
        let mut mask = cpus.as_bytes().to_vec();
        mask.push(0);
        rustix::net::sendto(
            &fd,
            &message(family, TASKSTATS_CMD_GET, &[(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, &mask)]),
            SendFlags::empty(),
            &kernel,
        )?;
        Ok(Listener { fd })
    }

    /// Blocks for the next buffer of exits. `Err` with ENOBUFS means the
    /// kernel dropped records (the socket overran): count and go on.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Vec<Exit>> {
        let (n, _) = rustix::net::recv(&self.fd, &mut *buf, RecvFlags::empty())?;
        if let Some(e) = nl_error(&buf[..n]) {
            return Err(io::Error::from_raw_os_error(-e));
        }
        parse(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A taskstats message as the kernel builds it.
    fn exit_message(pid: u32, tgid_field: u32, group_of: Option<u32>, utime: u64) -> Vec<u8> {
        let mut st = vec![0u8; 560];
        st[0..2].copy_from_slice(&16u16.to_ne_bytes());
        st[80..84].copy_from_slice(b"busy");
        st[72..80].copy_from_slice(&((utime + 7) * 1000).to_ne_bytes());
        st[152..160].copy_from_slice(&utime.to_ne_bytes());
        st[160..168].copy_from_slice(&7u64.to_ne_bytes());
        st[272..280].copy_from_slice(&3u64.to_ne_bytes());
        st[368..372].copy_from_slice(&tgid_field.to_ne_bytes());
        let nest = |kind: u16, id: u32| {
            let inner = [(kind, id.to_ne_bytes().to_vec()), (TASKSTATS_TYPE_STATS, st.clone())];
            let mut p = Vec::new();
            for (t, v) in inner {
                p.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
                p.extend_from_slice(&t.to_ne_bytes());
                p.extend_from_slice(&v);
            }
            p
        };
        let a = nest(TASKSTATS_TYPE_PID, pid);
        let mut list: Vec<(u16, &[u8])> = vec![(TASKSTATS_TYPE_AGGR_PID, &a)];
        let b;
        if let Some(g) = group_of {
            b = nest(TASKSTATS_TYPE_TGID, g);
            list.push((TASKSTATS_TYPE_AGGR_TGID, &b));
        }
        message(31, 2, &list)
    }

    #[test]
    fn a_single_threaded_exit_ends_its_process() {
        let m = exit_message(500, 500, None, 30_000);
        let e = parse(&m).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].pid, e[0].tgid, e[0].group, e[0].comm.as_str()), (500, Some(500), false, "busy"));
        assert_eq!((e[0].utime_us, e[0].stime_us, e[0].nvcsw), (30_000, 7, 3));
        assert_eq!(e[0].process(), Some(500));
    }

    #[test]
    fn a_thread_ends_nothing_and_a_group_record_ends_the_process() {
        let thread = exit_message(501, 500, None, 10);
        assert_eq!(parse(&thread).unwrap()[0].process(), None);
        let mut last = exit_message(502, 500, Some(500), 99);
        // The kernel's per-tgid struct carries no name: blank the second copy's.
        let second = last.windows(4).rposition(|w| w == b"busy").unwrap();
        last[second..second + 4].fill(0);
        let e = parse(&last).unwrap();
        assert_eq!((e[0].pid, e[0].group, e[0].process()), (500, true, Some(500)));
        assert_eq!(e[0].comm, "busy", "named from the thread's record");
        // Two messages in one buffer.
        let mut both = thread.clone();
        both.extend_from_slice(&last);
        assert_eq!(parse(&both).unwrap().len(), 2);
    }

    #[test]
    fn damage_is_an_error() {
        let mut m = exit_message(1, 1, None, 1);
        m.truncate(m.len() - 100);
        assert!(parse(&m).is_err());
        assert!(parse(&[0xff; 40]).is_err());
    }
}
