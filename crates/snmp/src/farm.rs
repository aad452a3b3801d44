//! A fake agent farm: thousands of SNMP endpoints on 127.0.0.0/8 in one
//! process, each with a small deterministic MIB and, optionally, a fault that
//! real agents show on bad days. Used by tests beside real `snmpd`, by
//! `kansoku lab snmp` as the targets of the benchmark, and by
//! `kansoku lab snmp-farm` for users who want to watch the poller cope.
//!
//! Values are functions of the number of requests an endpoint has seen, not
//! of time, so a test knows exactly what each answer must contain.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;

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
    /// Ignores every n-th request.
    DropEvery(u32),
    /// Answers after this delay.
    Late(Duration),
    /// Answers twice.
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
    pub addrs: Vec<SocketAddr>,
    /// Requests seen, per endpoint.
    pub requests: Arc<Vec<AtomicU64>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// `count` addresses from `first` upwards (skipping .0 and .255 last octets).
pub fn addresses(first: Ipv4Addr, port: u16, count: usize) -> Vec<SocketAddr> {
    let mut ip = u32::from(first);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        if !matches!(ip & 0xff, 0 | 255) {
            out.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port));
        }
        ip += 1;
    }
    out
}

impl Farm {
    /// Binds every endpoint (port 0: any free port, see `addrs`), then serves
    /// on `threads` threads until dropped.
    pub fn start(endpoints: Vec<(SocketAddr, Fault)>, threads: usize) -> std::io::Result<Farm> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).enable_all().build()?;
        let sockets: Vec<Arc<UdpSocket>> = rt.block_on(async {
            let mut v = Vec::with_capacity(endpoints.len());
            for (addr, _) in &endpoints {
                let s = UdpSocket::bind(addr)
                    .await
                    .map_err(|e| std::io::Error::new(e.kind(), format!("bind {addr}: {e}")))?;
                v.push(Arc::new(s));
            }
            Ok::<_, std::io::Error>(v)
        })?;
        let addrs = sockets.iter().map(|s| s.local_addr()).collect::<std::io::Result<_>>()?;
        let requests: Arc<Vec<AtomicU64>> = Arc::new(endpoints.iter().map(|_| AtomicU64::new(0)).collect());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let reqs = Arc::clone(&requests);
        let thread = std::thread::Builder::new().name("snmp-farm".into()).spawn(move || {
            rt.block_on(async move {
                let n = sockets.len();
                for (i, (_, fault)) in endpoints.into_iter().enumerate() {
                    let me = Arc::clone(&sockets[i]);
                    let neighbour = Arc::clone(&sockets[(i + 1) % n]);
                    let reqs = Arc::clone(&reqs);
                    tokio::spawn(async move { serve(me, neighbour, fault, reqs, i).await });
                }
                let _ = stop_rx.await;
            });
        })?;
        Ok(Farm { addrs, requests, stop: Some(stop_tx), thread: Some(thread) })
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(me: Arc<UdpSocket>, neighbour: Arc<UdpSocket>, fault: Fault, reqs: Arc<Vec<AtomicU64>>, idx: usize) {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::with_capacity(1500);
    loop {
        let Ok((len, from)) = me.recv_from(&mut buf).await else { continue };
        let n = reqs[idx].fetch_add(1, Ordering::Relaxed) + 1;
        out.clear();
        if !answer(&buf[..len], n, fault, &mut out) {
            continue;
        }
        match fault {
            Fault::Silent => {}
            Fault::DropEvery(k) if n.is_multiple_of(k as u64) => {}
            Fault::Late(d) => {
                let me = Arc::clone(&me);
                let reply = out.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = me.send_to(&reply, from).await;
                });
            }
            Fault::Duplicate => {
                let _ = me.send_to(&out, from).await;
                let _ = me.send_to(&out, from).await;
            }
            Fault::WrongSource => {
                let _ = neighbour.send_to(&out, from).await;
            }
            Fault::Truncated => {
                let _ = me.send_to(&out[..out.len() / 2], from).await;
            }
            _ => {
                let _ = me.send_to(&out, from).await;
            }
        }
    }
}

/// The endpoint's MIB after `n` requests, as (OID, value) in OID order.
fn mib_rows(n: u64, fault: Fault) -> Vec<(Oid, Owned)> {
    let epoch = match fault {
        Fault::Stale(k) => n / k as u64,
        Fault::RestartEvery(k) => n % k as u64,
        _ => n,
    };
    let uptime = match fault {
        Fault::RestartEvery(k) => (n % k as u64) * 10 + 1,
        _ => 100 + n * 10,
    };
    let c32_base = if fault == Fault::Counter32Wrap { WRAP_START } else { 0 };
    let c64_base = if fault == Fault::Counter64Huge { HUGE_START } else { 0 };
    let c32 = |k: u64| Owned::Counter32(((c32_base + k * epoch * STEP) % (1 << 32)) as u32);
    let c64 = |k: u64| Owned::Counter64(c64_base.wrapping_add(k * epoch * STEP));
    let obj = |name: &str, idx: u32| mib::oid_of(mib::by_name(name).expect("BUG: known")).child(idx);
    let mut rows = vec![
        (mib::sys_uptime(), Owned::TimeTicks(uptime as u32)),
        (obj("ifDescr", 1), Owned::Text("lo".into())),
        (obj("ifDescr", 2), Owned::Text("eth0".into())),
        (obj("ifType", 1), Owned::Integer(24)),
        (obj("ifType", 2), Owned::Integer(6)),
        (obj("ifInOctets", 1), c32(1)),
        (obj("ifInOctets", 2), c32(2)),
        (obj("ifOutOctets", 1), c32(1)),
        (obj("ifOutOctets", 2), c32(3)),
        (obj("ifHCInOctets", 1), c64(1)),
        (obj("ifHCInOctets", 2), c64(2)),
        (obj("ifHCOutOctets", 1), c64(1)),
        (obj("ifHCOutOctets", 2), c64(3)),
        (obj("dskPath", 1), Owned::Text("/".into())),
        (obj("dskAvail", 1), Owned::Integer(50_000_000 - epoch as i64)),
        (
            obj("dskUsed", 1),
            if fault == Fault::NoSuchInstance {
                Owned::NoSuchInstance
            } else {
                Owned::Integer(1_000_000 + epoch as i64)
            },
        ),
        (obj("laLoad", 1), Owned::Text(format!("{:.2}", (epoch % 400) as f64 / 100.0))),
    ];
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
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
fn answer(request: &[u8], n: u64, fault: Fault, out: &mut Vec<u8>) -> bool {
    let Ok((h, vbs)) = message::decode(request) else { return false };
    let Ok(asked) = vbs.map(|v| v.and_then(|v| v.oid.to_oid())).collect::<Result<Vec<Oid>, _>>() else { return false };
    let rows = mib_rows(n, fault);
    let mut values: Vec<(Vec<u8>, Owned)> = Vec::new();
    let mut error = (0i64, 0i64);
    let find_next = |oid: &Oid| rows.iter().find(|(o, _)| o > oid);
    match h.kind {
        PduKind::Get => {
            for (i, oid) in asked.iter().enumerate() {
                match rows.iter().find(|(o, _)| o == oid) {
                    Some((o, v)) => values.push((o.to_bytes(), v.clone())),
                    None if h.version == Version::V1 => {
                        error = (2, i as i64 + 1);
                        break;
                    }
                    None => values.push((oid.to_bytes(), Owned::NoSuchInstance)),
                }
            }
        }
        PduKind::GetNext => {
            for (i, oid) in asked.iter().enumerate() {
                match find_next(oid) {
                    Some((o, v)) => values.push((o.to_bytes(), v.clone())),
                    None => {
                        error = (2, i as i64 + 1);
                        break;
                    }
                }
            }
        }
        PduKind::GetBulk => {
            let reps = h.error_index.clamp(0, 64) as usize;
            for oid in &asked {
                let mut cur = oid.clone();
                for _ in 0..reps {
                    match find_next(&cur) {
                        Some((o, v)) => {
                            values.push((o.to_bytes(), v.clone()));
                            cur = o.clone();
                        }
                        None => break,
                    }
                }
            }
        }
        _ => return false,
    }
    let owned: Vec<(Vec<u8>, Value<'_>)> = values.iter().map(|(o, v)| (o.clone(), v.value())).collect();
    let request_echo: Vec<Vec<u8>> = asked.iter().map(Oid::to_bytes).collect();
    let varbinds: Vec<VarBind<'_>> = if error.0 != 0 {
        // An error response echoes the request's varbinds.
        request_echo.iter().map(|o| VarBind { oid: OidRef(o), value: Value::Null }).collect()
    } else {
        owned.iter().map(|(o, v)| VarBind { oid: OidRef(o), value: *v }).collect()
    };
    let rid = if fault == Fault::WrongRequestId { h.request_id.wrapping_add(1) } else { h.request_id };
    let header = Header { kind: PduKind::Response, request_id: rid, error_status: error.0, error_index: error.1, ..h };
    message::encode(out, &header, &varbinds);
    true
}
