//! From targets to what the poller asks each one: explicit OID lists as
//! given, or the default set found by discovery — a GETBULK (v2c) or GETNEXT
//! (v1) walk of ifDescr/ifType and UCD's dskPath, run concurrently for all
//! targets at start-up, with a timeout and retries per request.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::message::{self, PduKind, PreEncoded, REQUEST_ID_MIN, Value, Version};
use crate::mib;
use crate::oid::Oid;
use crate::targets::{OidSet, TargetSpec};

/// IANA ifType softwareLoopback: not polled by default.
const IF_TYPE_LOOPBACK: i64 = 24;
/// Rows per column a walk accepts before giving up on a runaway agent.
const ROWS_MAX: usize = 4096;
const BULK_REPETITIONS: i64 = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct PlannedOid {
    pub oid: Oid,
    /// Metric name: the MIB object's name, or `snmp_oid_value`.
    pub metric: String,
    /// Index and discovered-name labels (`ifIndex`, `ifDescr`), or `oid`.
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct PlannedTarget {
    pub spec: TargetSpec,
    /// sysUpTime.0 first.
    pub oids: Vec<PlannedOid>,
    /// Discovery failed: polled for a minimal set, rediscovered while running.
    pub undiscovered: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovered {
    /// (ifIndex, ifDescr, ifType)
    pub interfaces: Vec<(u32, String, i64)>,
    /// (dskIndex, dskPath)
    pub disks: Vec<(u32, String)>,
}

/// A target whose discovery failed; it is polled for sysUpTime.0 and
/// laLoad.1 until a later discovery succeeds (see
/// [`crate::PollerConfig::rediscover_every`]), and the reason is logged.
#[derive(Debug, Clone)]
pub struct DiscoveryFailure {
    pub target: String,
    pub reason: String,
}

pub fn planned_oid(oid: &Oid, names: &HashMap<(&'static str, u32), String>) -> PlannedOid {
    match mib::lookup(oid) {
        Some((object, suffix)) => {
            let mut labels = Vec::new();
            if let Some(index) = object.index {
                let idx = suffix.iter().map(u32::to_string).collect::<Vec<_>>().join(".");
                labels.push((index.to_owned(), idx));
                let name_label = match index {
                    "ifIndex" => Some("ifDescr"),
                    "dskIndex" => Some("dskPath"),
                    _ => None,
                };
                if let (Some(label), [i]) = (name_label, suffix)
                    && let Some(name) = names.get(&(label, *i))
                {
                    labels.push((label.to_owned(), name.clone()));
                }
            } else if suffix != [0] {
                labels.push(("oid".to_owned(), oid.to_string()));
            }
            PlannedOid { oid: oid.clone(), metric: object.name.to_owned(), labels }
        }
        None => PlannedOid {
            oid: oid.clone(),
            metric: "snmp_oid_value".to_owned(),
            labels: vec![("oid".into(), oid.to_string())],
        },
    }
}

/// The default OID set for what discovery found.
pub fn default_oids(version: Version, found: &Discovered) -> Vec<Oid> {
    let obj = |n| mib::oid_of(mib::by_name(n).expect("BUG: known object"));
    let (rx, tx) = match version {
        Version::V1 => (obj("ifInOctets"), obj("ifOutOctets")),
        Version::V2c => (obj("ifHCInOctets"), obj("ifHCOutOctets")),
    };
    let mut oids = vec![mib::sys_uptime()];
    for &(idx, _, ty) in &found.interfaces {
        if ty != IF_TYPE_LOOPBACK {
            oids.push(rx.child(idx));
            oids.push(tx.child(idx));
        }
    }
    for &(idx, _) in &found.disks {
        oids.push(obj("dskUsed").child(idx));
        oids.push(obj("dskAvail").child(idx));
    }
    oids.push(obj("laLoad").child(1));
    oids
}

/// The default set for what discovery found, labelled with the names it found.
pub fn discovered_oids(version: Version, found: &Discovered) -> Vec<PlannedOid> {
    let names = names_of(found);
    default_oids(version, found).iter().map(|o| planned_oid(o, &names)).collect()
}

/// What an undiscovered target is polled for meanwhile.
fn fallback_oids() -> Vec<Oid> {
    vec![mib::sys_uptime(), mib::oid_of(mib::by_name("laLoad").expect("BUG: known")).child(1)]
}

fn names_of(found: &Discovered) -> HashMap<(&'static str, u32), String> {
    let mut names = HashMap::new();
    for (idx, descr, _) in &found.interfaces {
        names.insert(("ifDescr", *idx), descr.clone());
    }
    for (idx, path) in &found.disks {
        names.insert(("dskPath", *idx), path.clone());
    }
    names
}

/// Plans every target, discovering those with the default set. Discovery
/// failures are returned beside the plan; such targets poll a minimal set.
pub fn plan(specs: Vec<TargetSpec>, timeout: Duration, retries: u32) -> (Vec<PlannedTarget>, Vec<DiscoveryFailure>) {
    let need: Vec<usize> =
        specs.iter().enumerate().filter(|(_, s)| s.oids == OidSet::Default).map(|(i, _)| i).collect();
    let mut results = discover(&need.iter().map(|&i| &specs[i]).collect::<Vec<_>>(), timeout, retries);
    let mut failures = Vec::new();
    let mut by_spec: HashMap<usize, Result<Discovered, String>> = HashMap::new();
    for (k, i) in need.into_iter().enumerate() {
        by_spec.insert(i, std::mem::replace(&mut results[k], Err(String::new())));
    }
    let planned = specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let none = HashMap::new();
            let (oids, undiscovered) = match &spec.oids {
                OidSet::List(list) => (list.iter().map(|o| planned_oid(o, &none)).collect(), false),
                OidSet::Default => match by_spec.remove(&i).expect("BUG: discovered") {
                    Ok(found) => (discovered_oids(spec.version, &found), false),
                    Err(reason) => {
                        failures.push(DiscoveryFailure { target: spec.name.clone(), reason });
                        (fallback_oids().iter().map(|o| planned_oid(o, &none)).collect(), true)
                    }
                },
            };
            PlannedTarget { spec, oids, undiscovered }
        })
        .collect();
    (planned, failures)
}

#[derive(Debug)]
struct Walk {
    columns: Vec<Oid>,
    column: usize,
    cursor: Oid,
    /// Per column: (instance index, text value, integer value).
    rows: Vec<Vec<(u32, String, Option<i64>)>>,
    attempts: u32,
    done: Option<Result<(), String>>,
}

/// Walks ifDescr, ifType and dskPath on every target concurrently.
pub fn discover(specs: &[&TargetSpec], timeout: Duration, retries: u32) -> Vec<Result<Discovered, String>> {
    let col = |n| mib::oid_of(mib::by_name(n).expect("BUG: known object"));
    let columns = vec![col("ifDescr"), col("ifType"), col("dskPath")];
    let mut walks: Vec<Walk> = specs
        .iter()
        .map(|_| Walk {
            columns: columns.clone(),
            column: 0,
            cursor: columns[0].clone(),
            rows: vec![Vec::new(); columns.len()],
            attempts: 0,
            done: None,
        })
        .collect();
    if specs.is_empty() {
        return Vec::new();
    }
    let sockets = match (UdpSocket::bind("0.0.0.0:0"), UdpSocket::bind("[::]:0")) {
        (Ok(v4), v6) => (v4, v6.ok()),
        (Err(e), _) => return specs.iter().map(|_| Err(format!("bind UDP socket: {e}"))).collect(),
    };
    let by_addr: HashMap<SocketAddr, usize> = specs.iter().enumerate().map(|(i, s)| (s.address, i)).collect();
    let mut round = 0u32;
    let mut buf = vec![0u8; 65536];
    while walks.iter().any(|w| w.done.is_none()) {
        round += 1;
        let rid = |i: usize| REQUEST_ID_MIN + ((round as usize * specs.len() + i) % (1 << 30)) as i32;
        for (i, w) in walks.iter_mut().enumerate().filter(|(_, w)| w.done.is_none()) {
            let spec = specs[i];
            let (kind, bulk) = match spec.version {
                Version::V1 => (PduKind::GetNext, (0, 0)),
                Version::V2c => (PduKind::GetBulk, (0, BULK_REPETITIONS)),
            };
            let mut req = PreEncoded::new(spec.version, spec.community.as_bytes(), kind, &[w.cursor.to_bytes()], bulk);
            let sock = if spec.address.is_ipv4() { Some(&sockets.0) } else { sockets.1.as_ref() };
            let sent = sock.map(|s| s.send_to(req.with_request_id(rid(i)), spec.address));
            if !matches!(sent, Some(Ok(_))) {
                w.done = Some(Err(format!("send to {}: {:?}", spec.address, sent.map(|r| r.err()))));
            }
        }
        let deadline = Instant::now() + timeout;
        let mut waiting: usize = walks.iter().filter(|w| w.done.is_none()).count();
        let mut answered = vec![false; walks.len()];
        while waiting > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else { break };
            let mut got = None;
            for s in std::iter::once(&sockets.0).chain(sockets.1.as_ref()) {
                let _ = s.set_read_timeout(Some(left.min(Duration::from_millis(20))));
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    got = Some((n, from));
                    break;
                }
            }
            let Some((n, from)) = got else { continue };
            let Some(&i) = by_addr.get(&from) else { continue };
            if answered[i] || walks[i].done.is_some() {
                continue;
            }
            let Ok((h, vbs)) = message::decode(&buf[..n]) else { continue };
            if h.request_id != rid(i) {
                continue;
            }
            answered[i] = true;
            waiting -= 1;
            step(&mut walks[i], h.error_status, vbs);
        }
        for (i, w) in walks.iter_mut().enumerate() {
            if w.done.is_none() && !answered[i] {
                w.attempts += 1;
                if w.attempts > retries {
                    w.done = Some(Err(format!("no answer to discovery within {timeout:?} ({} tries)", retries + 1)));
                }
            }
        }
    }
    walks
        .into_iter()
        .map(|w| {
            w.done.expect("BUG: loop ends when all are done")?;
            let types: HashMap<u32, i64> = w.rows[1].iter().filter_map(|(i, _, t)| t.map(|t| (*i, t))).collect();
            Ok(Discovered {
                interfaces: w.rows[0]
                    .iter()
                    .map(|(i, descr, _)| (*i, descr.clone(), types.get(i).copied().unwrap_or(0)))
                    .collect(),
                disks: w.rows[2].iter().map(|(i, path, _)| (*i, path.clone())).collect(),
            })
        })
        .collect()
}

/// Advances a walk by one response.
fn step(w: &mut Walk, error_status: i64, vbs: message::VarBinds<'_>) {
    w.attempts = 0;
    let column = &w.columns[w.column];
    let mut next_column = error_status != 0; // v1 noSuchName past the end of the MIB
    let mut advanced = false;
    if !next_column {
        for vb in vbs {
            let Ok(vb) = vb else {
                w.done = Some(Err("malformed response to discovery".into()));
                return;
            };
            let Ok(oid) = vb.oid.to_oid() else { continue };
            match (oid.suffix(column), vb.value.exception()) {
                (Some([idx]), None) if oid > w.cursor => {
                    let (text, int) = match vb.value {
                        Value::OctetString(s) => (String::from_utf8_lossy(s).into_owned(), None),
                        Value::Integer(v) => (String::new(), Some(v)),
                        _ => (String::new(), None),
                    };
                    w.rows[w.column].push((*idx, text, int));
                    w.cursor = oid;
                    advanced = true;
                }
                _ => {
                    next_column = true;
                    break;
                }
            }
        }
    }
    if !advanced && !next_column {
        next_column = true; // an empty answer ends the column
    }
    if next_column || w.rows[w.column].len() >= ROWS_MAX {
        w.column += 1;
        match w.columns.get(w.column) {
            Some(c) => w.cursor = c.clone(),
            None => w.done = Some(Ok(())),
        }
    }
}
