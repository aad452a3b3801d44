//! A fake agent farm: thousands of SNMP endpoints on 127.0.0.0/8 in one
//! process, each with a small deterministic MIB and, optionally, a fault that
//! real agents show on bad days. Used by tests beside real `snmpd`, by
//! `kansoku lab snmp` as the targets of the benchmark, and by
//! `kansoku lab snmp-farm` for users who want to watch the poller cope.
//!
//! Values are functions of the number of requests an endpoint has seen, not
//! of time, so a test knows exactly what each answer must contain.

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmsg, setsockopt,
    sockopt,
};

use crate::message::{self, Header, OidRef, PduKind, Value, VarBind, Version};
use crate::mib;
use crate::oid::Oid;

/// Counter increase per request.
pub const STEP: u64 = 1000;
/// Where Counter32 starts on a [`Fault::Counter32Wrap`] endpoint: it wraps
/// between the third and fourth request.
pub const WRAP_START: u64 = (1 << 32) - 5 * STEP / 2;
/// Where Counter64 starts on a [`Fault::Counter64Huge`] endpoint.
pub const HUGE_START: u64 = (1 << 60) + 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Never answers.
    Silent,
    /// Ignores its first n requests (down when the poller starts).
    SilentFor(u32),
    /// Ignores every n-th request.
    DropEvery(u32),
    /// Answers after this delay.
    Late(Duration),
    /// Answers three times.
    Duplicate,
    /// Answers with the request id plus one.
    WrongRequestId,
    /// Answers from the next endpoint's address.
    WrongSource,
    /// Sends only the first half of each answer.
    Truncated,
    /// dskUsed.1 answers noSuchInstance (v2c).
    NoSuchInstance,
    /// Counter32 values start just below 2^32 and wrap.
    Counter32Wrap,
    /// Counter64 values start above 2^53.
    Counter64Huge,
    /// The agent restarts (sysUpTime and counters back to zero) every n requests.
    RestartEvery(u32),
    /// Values refresh only every n requests, like net-snmp's 3 s cache.
    Stale(u32),
}

#[derive(Debug)]
pub struct Farm {
    /// Every endpoint's address, in the order given.
    pub addrs: Vec<SocketAddr>,
    /// Requests seen, per endpoint.
    pub requests: Arc<Vec<AtomicU64>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// `count` addresses from `first` upwards (skipping .0 and .255 last octets).
pub fn ips(first: Ipv4Addr, count: usize) -> Vec<Ipv4Addr> {
    let mut ip = u32::from(first);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        if !matches!(ip & 0xff, 0 | 255) {
            out.push(Ipv4Addr::from(ip));
        }
        ip += 1;
    }
    out
}

/// How the farm serves thousands of addresses without thousands of sockets:
/// `threads` sockets share one port on the wildcard address
/// (`SO_REUSEPORT`), bound to the loopback device (`SO_BINDTODEVICE`), so
/// nothing from another machine reaches them; every 127.0.0.0/8 address is
/// local, so each socket
/// receives requests for all of them, learns the address a request was sent
/// to from `IP_PKTINFO`, and answers from that address with the same option.
/// Requests are read with `recvmmsg`.
impl Farm {
    /// Serves `endpoints` (IPv4 addresses) on `port` (0: a free port, see
    /// `addrs`) until dropped.
    pub fn start(port: u16, endpoints: Vec<(Ipv4Addr, Fault)>, threads: usize) -> std::io::Result<Farm> {
        if let Some((ip, _)) = endpoints.iter().find(|(ip, _)| !ip.is_loopback()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("farm address {ip} is not loopback: the farm answers on 127.0.0.0/8 only"),
            ));
        }
        let mut socks: Vec<UdpSocket> = Vec::new();
        let mut port = port;
        for _ in 0..threads.max(1) {
            let s = reuseport_socket(port)?;
            port = s.local_addr()?.port();
            socks.push(s);
        }
        let addrs: Vec<SocketAddr> = endpoints.iter().map(|(ip, _)| SocketAddr::new(IpAddr::V4(*ip), port)).collect();
        let by_ip: Arc<HashMap<Ipv4Addr, usize>> =
            Arc::new(endpoints.iter().enumerate().map(|(i, (ip, _))| (*ip, i)).collect());
        if by_ip.len() != endpoints.len() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "duplicate farm address"));
        }
        let faults: Arc<Vec<(Ipv4Addr, Fault)>> = Arc::new(endpoints);
        let requests: Arc<Vec<AtomicU64>> = Arc::new(faults.iter().map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for (t, sock) in socks.into_iter().enumerate() {
            let (by_ip, faults, requests, stop) = (by_ip.clone(), faults.clone(), requests.clone(), stop.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("snmp-farm-{t}"))
                    .spawn(move || serve(sock, &by_ip, &faults, &requests, &stop))?,
            );
        }
        Ok(Farm { addrs, requests, stop, threads: handles })
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn reuseport_socket(port: u16) -> std::io::Result<UdpSocket> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, socket};
    let fd = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    setsockopt(&fd, sockopt::Ipv4PacketInfo, &true)?;
    // The wildcard address, but only what arrives on the loopback device:
    // the farm is a test fixture, never reachable from another machine.
    setsockopt(&fd, sockopt::BindToDevice, &std::ffi::OsString::from("lo"))?;
    let _ = setsockopt(&fd, sockopt::RcvBufForce, &(16usize << 20));
    bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, port))?;
    let s = UdpSocket::from(fd);
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    Ok(s)
}

/// A reply held back by a [`Fault::Late`] endpoint.
struct Held {
    due: Instant,
    reply: Vec<u8>,
    to: SocketAddr,
    from: Ipv4Addr,
}

fn serve(
    sock: UdpSocket,
    by_ip: &HashMap<Ipv4Addr, usize>,
    endpoints: &[(Ipv4Addr, Fault)],
    requests: &[AtomicU64],
    stop: &AtomicBool,
) {
    const BATCH: usize = 64;
    let mut bufs = vec![vec![0u8; 4096]; BATCH];
    let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, Some(nix::cmsg_space!(nix::libc::in_pktinfo)));
    let mut got: Vec<(usize, SocketAddr, Ipv4Addr)> = Vec::with_capacity(BATCH);
    let mut held: Vec<Held> = Vec::new();
    let mut out = Vec::with_capacity(1500);
    let mut rows = Rows::default();
    while !stop.load(Ordering::Relaxed) {
        got.clear();
        {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = bufs.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
            // Blocks for the first datagram (up to the socket's read timeout,
            // or sooner if a held reply is due), then takes what is queued.
            let flags = if held.is_empty() { MsgFlags::MSG_WAITFORONE } else { MsgFlags::MSG_DONTWAIT };
            if let Ok(results) = recvmmsg(sock.as_raw_fd(), &mut hdrs, slices.iter_mut(), flags, None) {
                for m in results {
                    let dst = m.cmsgs().ok().and_then(|mut c| {
                        c.find_map(|c| match c {
                            ControlMessageOwned::Ipv4PacketInfo(i) => {
                                Some(Ipv4Addr::from(u32::from_be(i.ipi_addr.s_addr)))
                            }
                            _ => None,
                        })
                    });
                    if let (Some(from), Some(dst)) =
                        (m.address.and_then(|a| a.as_sockaddr_in().map(|a| SocketAddr::V4((*a).into()))), dst)
                    {
                        got.push((m.bytes, from, dst));
                    }
                }
            }
        }
        for (k, &(len, from, dst)) in got.iter().enumerate() {
            let Some(&idx) = by_ip.get(&dst) else { continue };
            let fault = endpoints[idx].1;
            let n = requests[idx].fetch_add(1, Ordering::Relaxed) + 1;
            out.clear();
            if !answer(&bufs[k][..len], n, fault, &mut rows, &mut out) {
                continue;
            }
            match fault {
                Fault::Silent => {}
                Fault::SilentFor(k) if n <= k as u64 => {}
                Fault::DropEvery(d) if n.is_multiple_of(d as u64) => {}
                Fault::Late(d) => held.push(Held { due: Instant::now() + d, reply: out.clone(), to: from, from: dst }),
                Fault::Duplicate => {
                    for _ in 0..3 {
                        send_from(&sock, &out, from, dst);
                    }
                }
                Fault::WrongSource => send_from(&sock, &out, from, endpoints[(idx + 1) % endpoints.len()].0),
                Fault::Truncated => send_from(&sock, &out[..out.len() / 2], from, dst),
                _ => send_from(&sock, &out, from, dst),
            }
        }
        if !held.is_empty() {
            let now = Instant::now();
            held.retain(|h| {
                if h.due <= now {
                    send_from(&sock, &h.reply, h.to, h.from);
                    false
                } else {
                    true
                }
            });
            if got.is_empty() {
                // Nothing to read: sleep a little rather than spin on a held reply.
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }
}

/// Sends `reply` to `to` from local address `from` (`IP_PKTINFO`).
fn send_from(sock: &UdpSocket, reply: &[u8], to: SocketAddr, from: Ipv4Addr) {
    let SocketAddr::V4(to) = to else { return };
    let info = nix::libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: nix::libc::in_addr { s_addr: u32::from(from).to_be() },
        ipi_addr: nix::libc::in_addr { s_addr: 0 },
    };
    let _ = sendmsg(
        sock.as_raw_fd(),
        &[IoSlice::new(reply)],
        &[ControlMessage::Ipv4PacketInfo(&info)],
        MsgFlags::empty(),
        Some(&nix::sys::socket::SockaddrIn::from(to)),
    );
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Uptime,
    Descr(&'static str),
    Type(i64),
    /// Counter32 growing by k * STEP per request.
    C32(u64),
    C64(u64),
    Path,
    Avail,
    Used,
    Load,
}

/// The farm's MIB: OIDs sorted once, values computed per request.
#[derive(Debug, Default)]
struct Rows {
    oids: Vec<Oid>,
    bytes: Vec<Vec<u8>>,
    kinds: Vec<Kind>,
}

impl Rows {
    fn init(&mut self) {
        if !self.oids.is_empty() {
            return;
        }
        let obj = |name: &str, idx: u32| mib::oid_of(mib::by_name(name).expect("BUG: known")).child(idx);
        let mut rows = vec![
            (mib::sys_uptime(), Kind::Uptime),
            (obj("ifDescr", 1), Kind::Descr("lo")),
            (obj("ifDescr", 2), Kind::Descr("eth0")),
            (obj("ifType", 1), Kind::Type(24)),
            (obj("ifType", 2), Kind::Type(6)),
            (obj("ifInOctets", 1), Kind::C32(1)),
            (obj("ifInOctets", 2), Kind::C32(2)),
            (obj("ifOutOctets", 1), Kind::C32(1)),
            (obj("ifOutOctets", 2), Kind::C32(3)),
            (obj("ifHCInOctets", 1), Kind::C64(1)),
            (obj("ifHCInOctets", 2), Kind::C64(2)),
            (obj("ifHCOutOctets", 1), Kind::C64(1)),
            (obj("ifHCOutOctets", 2), Kind::C64(3)),
            (obj("dskPath", 1), Kind::Path),
            (obj("dskAvail", 1), Kind::Avail),
            (obj("dskUsed", 1), Kind::Used),
            (obj("laLoad", 1), Kind::Load),
        ];
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        self.bytes = rows.iter().map(|r| r.0.to_bytes()).collect();
        self.kinds = rows.iter().map(|r| r.1).collect();
        self.oids = rows.into_iter().map(|r| r.0).collect();
    }
}

/// Row `kind`'s value after `n` requests.
fn value(kind: Kind, n: u64, fault: Fault) -> Owned {
    let epoch = match fault {
        Fault::Stale(k) => n / k as u64,
        Fault::RestartEvery(k) => n % k as u64,
        _ => n,
    };
    match kind {
        Kind::Uptime => Owned::TimeTicks(match fault {
            Fault::RestartEvery(k) => (n % k as u64) * 10 + 1,
            _ => 100 + n * 10,
        } as u32),
        Kind::Descr(d) => Owned::Text(d.into()),
        Kind::Type(t) => Owned::Integer(t),
        Kind::C32(k) => {
            let base = if fault == Fault::Counter32Wrap { WRAP_START } else { 0 };
            Owned::Counter32(((base + k * epoch * STEP) % (1 << 32)) as u32)
        }
        Kind::C64(k) => {
            let base = if fault == Fault::Counter64Huge { HUGE_START } else { 0 };
            Owned::Counter64(base.wrapping_add(k * epoch * STEP))
        }
        Kind::Path => Owned::Text("/".into()),
        Kind::Avail => Owned::Integer(50_000_000 - epoch as i64),
        Kind::Used if fault == Fault::NoSuchInstance => Owned::NoSuchInstance,
        Kind::Used => Owned::Integer(1_000_000 + epoch as i64),
        Kind::Load => Owned::Text(format!("{:.2}", (epoch % 400) as f64 / 100.0)),
    }
}

#[derive(Debug, Clone)]
enum Owned {
    Integer(i64),
    Text(String),
    Counter32(u32),
    Counter64(u64),
    TimeTicks(u32),
    NoSuchInstance,
}

impl Owned {
    fn value(&self) -> Value<'_> {
        match self {
            Owned::Integer(v) => Value::Integer(*v),
            Owned::Text(s) => Value::OctetString(s.as_bytes()),
            Owned::Counter32(v) => Value::Counter32(*v),
            Owned::Counter64(v) => Value::Counter64(*v),
            Owned::TimeTicks(v) => Value::TimeTicks(*v),
            Owned::NoSuchInstance => Value::NoSuchInstance,
        }
    }
}

/// Builds the response to `request` into `out`; false if it is not a request
/// we answer. v1 semantics: the first unknown OID fails the PDU with
/// noSuchName; v2c: an exception in its varbind.
fn answer(request: &[u8], n: u64, fault: Fault, rows: &mut Rows, out: &mut Vec<u8>) -> bool {
    rows.init();
    let Ok((h, vbs)) = message::decode(request) else { return false };
    let Ok(asked) = vbs.collect::<Result<Vec<VarBind<'_>>, _>>() else { return false };
    // (row index or None for "asked but unknown", echoing the asked OID)
    let mut picked: Vec<(Option<usize>, usize)> = Vec::with_capacity(asked.len());
    let mut error = (0i64, 0i64);
    let next_after = |oid: &[u8]| -> Option<usize> {
        let o = Oid::decode(oid).ok()?;
        rows.oids.iter().position(|r| *r > o)
    };
    match h.kind {
        PduKind::Get => {
            for (i, vb) in asked.iter().enumerate() {
                match rows.bytes.iter().position(|b| b == vb.oid.0) {
                    Some(r) => picked.push((Some(r), i)),
                    None if h.version == Version::V1 => {
                        error = (2, i as i64 + 1);
                        break;
                    }
                    None => picked.push((None, i)),
                }
            }
        }
        PduKind::GetNext => {
            for (i, vb) in asked.iter().enumerate() {
                match next_after(vb.oid.0) {
                    Some(r) => picked.push((Some(r), i)),
                    None => {
                        error = (2, i as i64 + 1);
                        break;
                    }
                }
            }
        }
        PduKind::GetBulk => {
            let reps = h.error_index.clamp(0, 64) as usize;
            for (i, vb) in asked.iter().enumerate() {
                let Some(mut r) = next_after(vb.oid.0) else { continue };
                for _ in 0..reps {
                    picked.push((Some(r), i));
                    r += 1;
                    if r >= rows.oids.len() {
                        break;
                    }
                }
            }
        }
        _ => return false,
    }
    let values: Vec<Option<Owned>> = picked.iter().map(|(r, _)| r.map(|r| value(rows.kinds[r], n, fault))).collect();
    let varbinds: Vec<VarBind<'_>> = if error.0 != 0 {
        // An error response echoes the request's varbinds.
        asked.iter().map(|vb| VarBind { oid: vb.oid, value: Value::Null }).collect()
    } else {
        picked
            .iter()
            .zip(&values)
            .map(|(&(r, i), v)| match (r, v) {
                (Some(r), Some(v)) => VarBind { oid: OidRef(&rows.bytes[r]), value: v.value() },
                _ => VarBind { oid: asked[i].oid, value: Value::NoSuchInstance },
            })
            .collect()
    };
    let rid = if fault == Fault::WrongRequestId { h.request_id.wrapping_add(1) } else { h.request_id };
    let header = Header { kind: PduKind::Response, request_id: rid, error_status: error.0, error_index: error.1, ..h };
    message::encode(out, &header, &varbinds);
    true
}
