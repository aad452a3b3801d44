//! Against the real thing: net-snmp's `snmpd` on loopback addresses, and its
//! command-line tools as the oracle for what we send and what we record.
//! `make test` installs `snmpd` and `snmp` (Debian packages).

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use model::{Batch, SeriesKey};
use snmp::message::{self, Header, VarBind};
use snmp::targets::{OidSet, TargetSpec};
use snmp::{Poller, PollerConfig, Version, mib};

struct Snmpd {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Snmpd {
    /// Starts `snmpd` with the configuration from the issue and waits for the
    /// line it logs once it serves.
    fn start(ip: &str) -> Snmpd {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = format!("{ip}:27161").parse().unwrap();
        let conf = dir.path().join("snmpd.conf");
        std::fs::write(
            &conf,
            format!(
                "agentAddress udp:{addr}\nview all included .1\nrocommunity public 127.0.0.0/8 -V all\n\
                 disk / 10%\nload 12 10 5\n"
            ),
        )
        .unwrap();
        let log = dir.path().join("snmpd.log");
        let child = Command::new("snmpd")
            .args(["-f", "-Lf"])
            .arg(&log)
            .arg("-C")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path().join("snmpd.pid"))
            .env("SNMP_PERSISTENT_DIR", dir.path().join("persist"))
            .env("MIBS", "")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run snmpd (Debian package snmpd; `make test` installs it)");
        let d = Snmpd { child, addr, _dir: dir };
        wait_for_line(&log, "NET-SNMP version", Duration::from_secs(10));
        d
    }
}

impl Drop for Snmpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_line(path: &Path, needle: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        if std::fs::read_to_string(path).is_ok_and(|s| s.contains(needle)) {
            return;
        }
        assert!(start.elapsed() < limit, "{} has no {needle:?} after {limit:?}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `snmpget -Oqv` values, in order.
fn snmpget(addr: SocketAddr, version: &str, oids: &[&str]) -> Vec<String> {
    let out = Command::new("snmpget")
        .args(["-v", version, "-c", "public", "-Oqv", "-m", ""])
        .arg(addr.to_string())
        .args(oids)
        .output()
        .expect("run snmpget (Debian package snmp)");
    assert!(out.status.success(), "snmpget: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.trim_matches('"').to_owned()).collect()
}

/// `snmpwalk -On -Oq` as (numeric OID, value).
fn snmpwalk(addr: SocketAddr, oid: &str) -> Vec<(String, String)> {
    let out = Command::new("snmpwalk")
        .args(["-v2c", "-c", "public", "-On", "-Oq", "-m", ""])
        .arg(addr.to_string())
        .arg(oid)
        .output()
        .expect("run snmpwalk");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            l.split_once(' ').map(|(o, v)| (o.trim_start_matches('.').to_owned(), v.trim_matches('"').to_owned()))
        })
        .collect()
}

fn recorded(batches: &[Batch]) -> HashMap<String, Vec<f64>> {
    let mut keys: HashMap<u32, SeriesKey> = HashMap::new();
    let mut out: HashMap<String, Vec<f64>> = HashMap::new();
    for b in batches {
        keys.extend(b.defs.iter().cloned());
        for (id, v) in &b.points {
            out.entry(keys[id].to_string()).or_default().push(*v);
        }
    }
    out
}

#[test]
fn polls_real_snmpd_and_matches_snmpget() {
    let a = Snmpd::start("127.0.3.1");
    let b = Snmpd::start("127.0.3.2");
    let spec = |addr: SocketAddr, version, oids| TargetSpec {
        address: addr,
        name: addr.to_string(),
        version,
        community: "public".into(),
        oids,
        labels: vec![],
    };
    let v1_oids = [
        "sysUpTime.0",
        "dskTotal.1",
        "ifMtu.1",
        "ifHCInOctets.1", // Counter64 does not exist in v1: noSuchName
        "ifInOctets.1",
        "laLoad.1",
        "1.3.6.1.4.1.99999.0",
    ];
    let list = OidSet::List(v1_oids.iter().map(|o| mib::parse_instance(o).unwrap()).collect());
    let specs = vec![spec(a.addr, Version::V2c, OidSet::Default), spec(b.addr, Version::V1, list)];
    let (plan, failures) = snmp::plan(specs, Duration::from_secs(1), 2);
    assert!(failures.is_empty(), "{failures:?}");

    // 10.5 s at 100 ms: long enough to see net-snmp's 3 s interface cache
    // refresh three times.
    let intervals = 105;
    let poller = Poller::new(PollerConfig::new(Duration::from_millis(100)), plan).unwrap();
    let batches = node::rounds::first_batches(poller, intervals);
    let r = recorded(&batches);
    let ta = format!("target=\"{}\"", a.addr);
    let tb = format!("target=\"{}\"", b.addr);

    // Both answered (almost) every interval.
    for t in [&ta, &tb] {
        let up = &r[&format!("kansoku_snmp_up{{{t}}}")];
        assert_eq!(up.len(), intervals);
        assert!(up.iter().filter(|v| **v == 1.0).count() >= intervals - 3, "{t}: {up:?}");
    }

    // Discovery found what snmpwalk finds: every non-loopback interface, by name.
    let types: HashMap<String, String> = snmpwalk(a.addr, "1.3.6.1.2.1.2.2.1.3")
        .into_iter()
        .map(|(o, v)| (o.rsplit('.').next().unwrap().to_owned(), v))
        .collect();
    let want: BTreeSet<String> = snmpwalk(a.addr, "1.3.6.1.2.1.2.2.1.2")
        .into_iter()
        .filter(|(o, _)| types.get(o.rsplit('.').next().unwrap()).is_some_and(|t| t != "24"))
        .map(|(o, descr)| {
            format!("ifHCInOctets{{ifDescr=\"{descr}\",ifIndex=\"{}\",{ta}}}", o.rsplit('.').next().unwrap())
        })
        .collect();
    let got: BTreeSet<String> = r.keys().filter(|k| k.starts_with("ifHCInOctets{")).cloned().collect();
    assert_eq!(got, want);
    let avail = &r[&format!("dskAvail{{dskIndex=\"1\",dskPath=\"/\",{ta}}}")];
    assert!(avail.len() >= intervals - 3 && avail.iter().all(|v| *v > 0.0));
    assert!(r.contains_key(&format!("laLoad{{laIndex=\"1\",{ta}}}")));

    // v1: the objects the agent lacks fail the PDU once each; the poller drops
    // them and records the error on every answer after.
    for oid in ["ifHCInOctets.1", "1.3.6.1.4.1.99999.0"] {
        let e = &r[&format!("kansoku_snmp_error{{error=\"noSuchName\",oid=\"{oid}\",{tb}}}")];
        assert!(e.len() >= intervals - 5, "{oid}: {}", e.len());
    }
    assert_eq!(r["kansoku_snmp_pdu_errors_total"].last(), Some(&2.0), "one failed PDU per missing object");

    // Values match snmpget: static ones exactly, counters and uptime never ahead.
    let now = snmpget(b.addr, "1", &["1.3.6.1.4.1.2021.9.1.6.1", "1.3.6.1.2.1.2.2.1.4.1", "1.3.6.1.2.1.2.2.1.10.1"]);
    let last = |k: &str| *r[k].last().unwrap_or_else(|| panic!("no samples for {k}"));
    assert_eq!(last(&format!("dskTotal{{dskIndex=\"1\",{tb}}}")), now[0].parse::<f64>().unwrap());
    assert_eq!(last(&format!("ifMtu{{ifIndex=\"1\",{tb}}}")), now[1].parse::<f64>().unwrap());
    let octets = &r[&format!("ifInOctets{{ifIndex=\"1\",{tb}}}")];
    assert!(octets.windows(2).all(|w| w[0] <= w[1]) && *octets.last().unwrap() <= now[2].parse::<f64>().unwrap());
    let uptime = &r[&format!("sysUpTime{{{tb}}}")];
    assert!(uptime.windows(2).all(|w| w[0] <= w[1]), "{uptime:?}");

    // Staleness: net-snmp refreshes interface counters every few seconds; our
    // own polling moves lo's counter, so each refresh shows a change.
    let period = &r[&format!("kansoku_snmp_update_period_seconds{{oid=\"ifInOctets.1\",{tb}}}")];
    let p = *period.last().unwrap();
    assert!((1.0..=6.0).contains(&p), "update period {p} s");
    let stale: f64 = r[&format!("kansoku_snmp_stale_values{{{tb}}}")].iter().sum();
    assert!(stale > 10.0, "repeats flagged as stale: {stale}");
}

/// What snmpget, snmpgetnext and snmpbulkget put on the wire, byte for byte
/// what we encode for the same request.
#[test]
fn our_requests_are_byte_identical_to_net_snmp_tools() {
    let sock = UdpSocket::bind("127.0.3.9:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let port = sock.local_addr().unwrap().port();
    let cases: [(&str, &[&str]); 4] = [
        ("snmpget", &["-v1"]),
        ("snmpget", &["-v2c"]),
        ("snmpgetnext", &["-v2c"]),
        ("snmpbulkget", &["-v2c", "-Cn0", "-Cr25"]),
    ];
    for (tool, args) in cases {
        let mut child = Command::new(tool)
            .args(args)
            .args(["-c", "s3cret", "-r", "0", "-t", "1", "-m", ""])
            .arg(format!("127.0.3.9:{port}"))
            .args(["1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.31.1.1.1.6.4294967295"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut buf = [0u8; 2048];
        let (n, _) = sock.recv_from(&mut buf).unwrap_or_else(|e| panic!("{tool}: nothing received: {e}"));
        let _ = child.kill();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let _ = child.wait();
        let theirs = &buf[..n];
        let (h, vbs) = message::decode(theirs).unwrap();
        let vbs: Vec<VarBind<'_>> = vbs.collect::<Result<_, _>>().unwrap();
        assert_eq!(h.community, b"s3cret");
        let oids: Vec<String> = vbs.iter().map(|v| v.oid.to_oid().unwrap().to_string()).collect();
        assert_eq!(oids, ["1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.31.1.1.1.6.4294967295"], "{tool}");
        let mut ours = Vec::new();
        message::encode(&mut ours, &Header { ..h }, &vbs);
        assert_eq!(ours, theirs, "{tool} {args:?}: {h:?}");
    }
}
