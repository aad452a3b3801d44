//! The poller against the fake agent farm: every fault a real agent shows on
//! a bad day is recorded as what it is, and never as a value.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use model::{Batch, SeriesKey};
use snmp::farm::{self, Fault, STEP};
use snmp::message::Version;
use snmp::mib;
use snmp::targets::{OidSet, TargetSpec};
use snmp::{Poller, PollerConfig};

const INTERVALS: usize = 25;

/// Stored samples by series text (`name{labels}`), in time order.
struct Recorded {
    by_key: HashMap<String, Vec<(i64, f64)>>,
}

impl Recorded {
    fn new(batches: &[Batch]) -> Recorded {
        let mut keys: HashMap<u32, SeriesKey> = HashMap::new();
        let mut by_key: HashMap<String, Vec<(i64, f64)>> = HashMap::new();
        for b in batches {
            for (id, k) in &b.defs {
                keys.insert(*id, k.clone());
            }
            for (id, v) in &b.points {
                let k = keys.get(id).unwrap_or_else(|| panic!("point for undeclared id {id}"));
                by_key.entry(k.to_string()).or_default().push((b.time.as_nanos(), *v));
            }
        }
        for (k, points) in &by_key {
            assert!(points.windows(2).all(|w| w[0].0 < w[1].0), "{k}: one sample per interval, in order");
        }
        Recorded { by_key }
    }

    fn get(&self, key: &str) -> &[(i64, f64)] {
        self.by_key.get(key).map_or(&[], Vec::as_slice)
    }

    fn values(&self, key: &str) -> Vec<f64> {
        self.get(key).iter().map(|(_, v)| *v).collect()
    }

    fn count(&self, key: &str, v: f64) -> usize {
        self.get(key).iter().filter(|(_, x)| *x == v).count()
    }
}

fn spec(addr: SocketAddr, version: Version, oids: OidSet) -> TargetSpec {
    TargetSpec { address: addr, name: addr.to_string(), version, community: "public".into(), oids, labels: vec![] }
}

fn list(names: &[&str]) -> OidSet {
    OidSet::List(names.iter().map(|n| mib::parse_instance(n).unwrap()).collect())
}

#[test]
fn every_fault_is_recorded_as_what_it_is() {
    let faults = [
        Fault::None,
        Fault::Silent,
        Fault::DropEvery(3),
        Fault::Late(Duration::from_millis(150)),
        Fault::Duplicate,
        Fault::WrongRequestId,
        Fault::WrongSource,
        Fault::Counter32Wrap,
        Fault::Counter64Huge,
        Fault::RestartEvery(5),
        Fault::Stale(5),
        Fault::Truncated,
        Fault::NoSuchInstance,
        Fault::None,
        Fault::None,
        Fault::None,
    ];
    let ips = farm::ips(Ipv4Addr::new(127, 2, 0, 1), faults.len());
    let farm = farm::Farm::start(0, ips.into_iter().zip(faults).collect(), 1).unwrap();
    let a = &farm.addrs;
    let oids = ["sysUpTime.0", "ifHCInOctets.2", "ifInOctets.2", "dskUsed.1", "laLoad.1"];
    let mut specs: Vec<TargetSpec> = a[..13].iter().map(|&x| spec(x, Version::V2c, list(&oids))).collect();
    specs.push(spec(a[13], Version::V1, list(&["sysUpTime.0", "1.3.6.1.4.1.99999.1.0", "ifInOctets.2"])));
    specs.push(spec(a[14], Version::V1, OidSet::Default));
    specs.push(spec(a[15], Version::V2c, OidSet::Default));

    let (plan, failures) = snmp::plan(specs, Duration::from_secs(1), 2);
    assert!(failures.is_empty(), "{failures:?}");
    let poller = Poller::new(PollerConfig::new(Duration::from_millis(100)), plan).unwrap();
    let stats = poller.stats();
    let batches = node::rounds::first_batches(poller, INTERVALS);
    let r = Recorded::new(&batches);
    let n = INTERVALS;
    let t = |i: usize| format!("target=\"{}\"", a[i]);
    let up = |i: usize| format!("kansoku_snmp_up{{{}}}", t(i));
    let fault = |i: usize, kind: &str| format!("kansoku_snmp_fault{{kind=\"{kind}\",{}}}", t(i));
    let value = |name: &str, i: usize, labels: &str| format!("{name}{{{labels}{}}}", t(i));

    for i in 0..a.len() {
        assert_eq!(r.get(&up(i)).len(), n, "one up sample per interval for target {i}");
    }
    // Healthy: answered (a loaded machine may miss a slice or two).
    assert!(r.count(&up(0), 1.0) >= n - 3, "{:?}", r.values(&up(0)));
    let hc = |i| value("ifHCInOctets", i, "ifIndex=\"2\",");
    let hc_inc = |i| value("ifHCInOctets_increase", i, "ifIndex=\"2\",");
    let raw = r.values(&hc(0));
    let inc = r.values(&hc_inc(0));
    assert!(inc.iter().all(|d| *d > 0.0 && d % (2 * STEP) as f64 == 0.0), "{inc:?}");
    assert_eq!(inc.iter().sum::<f64>(), raw[raw.len() - 1] - raw[0]);
    assert_eq!(r.values(&value("laLoad", 0, "laIndex=\"1\",")).len(), raw.len());

    // Silent: an error sample every interval, no values.
    assert_eq!(r.count(&up(1), 0.0), n);
    assert!(r.get(&hc(1)).is_empty());
    // Every third request dropped.
    let dropped = r.count(&up(2), 0.0);
    assert!((n / 3 - 1..=n / 3 + 3).contains(&dropped), "{dropped} silences of {n}");
    // Late: never a value, counted as late.
    assert_eq!(r.count(&up(3), 0.0), n);
    assert!(r.get(&hc(3)).is_empty());
    assert!(r.get(&fault(3, "late")).len() >= n - 3);
    // Duplicates: the first copy is used, the two others counted, in one
    // sample per interval.
    assert!(r.count(&up(4), 1.0) >= n - 3);
    assert!(r.count(&fault(4, "duplicate"), 2.0) >= n - 4, "{:?}", r.get(&fault(4, "duplicate")));
    // Wrong request id: silent as far as values go, counted.
    assert_eq!(r.count(&up(5), 0.0), n);
    assert!(r.get(&fault(5, "wrong_request_id")).len() >= n - 2);
    // Wrong source: the reply comes from target 7's address with target 6's
    // request id; neither accepts it.
    assert_eq!(r.count(&up(6), 0.0), n);
    assert!(r.get(&fault(7, "wrong_request_id")).len() >= n - 3);
    // Counter32 wrap: increases stay small and exact.
    let c32_raw = r.values(&value("ifInOctets", 7, "ifIndex=\"2\","));
    assert!(c32_raw.windows(2).any(|w| w[1] < w[0]), "the farm's counter wraps: {c32_raw:?}");
    let c32 = r.values(&value("ifInOctets_increase", 7, "ifIndex=\"2\","));
    assert!(c32.iter().all(|d| *d > 0.0 && d % (2 * STEP) as f64 == 0.0 && *d <= (8 * STEP) as f64), "{c32:?}");
    // Counter64 above 2^53: raw values lose precision as f64, increases do not.
    assert!(r.values(&hc(8)).iter().all(|v| *v > 2f64.powi(53)));
    let c64 = r.values(&hc_inc(8));
    assert!(!c64.is_empty() && c64.iter().all(|d| *d > 0.0 && d % (2 * STEP) as f64 == 0.0), "{c64:?}");
    // Restart every 5 requests: detected, no spike.
    let restarts = r.get(&format!("kansoku_snmp_restart{{{}}}", t(9))).len();
    assert!(restarts >= n / 5 - 2, "{restarts} restarts");
    let after = r.values(&hc_inc(9));
    assert!(after.iter().all(|d| *d > 0.0 && *d <= (8 * STEP) as f64), "no spike after a restart: {after:?}");
    // Stale: values refresh every 5 requests: period found, repeats flagged.
    let period = r.values(&format!("kansoku_snmp_update_period_seconds{{oid=\"ifHCInOctets.2\",{}}}", t(10)));
    let p = *period.last().expect("update period written");
    assert!((0.35..=0.65).contains(&p), "period {p} s, expected ~0.5");
    assert!(r.values(&format!("kansoku_snmp_stale_values{{{}}}", t(10))).iter().sum::<f64>() > 0.0);
    assert!(r.values(&format!("kansoku_snmp_stale_values{{{}}}", t(0))).iter().all(|v| *v == 0.0));
    // Truncated: malformed, never a value.
    assert_eq!(r.count(&up(11), 0.0), n);
    assert!(r.get(&fault(11, "malformed")).len() >= n - 2);
    // noSuchInstance for one OID: recorded per OID, the others stored.
    let nsi = format!("kansoku_snmp_error{{error=\"noSuchInstance\",oid=\"dskUsed.1\",{}}}", t(12));
    assert!(r.get(&nsi).len() >= n - 3);
    assert!(r.get(&hc(12)).len() >= n - 3);
    // v1: noSuchName fails the whole PDU; the poller drops the OID and goes on.
    let nsn = format!("kansoku_snmp_error{{error=\"noSuchName\",oid=\"1.3.6.1.4.1.99999.1.0\",{}}}", t(13));
    assert!(r.get(&nsn).len() >= n - 3, "{:?}", r.get(&nsn));
    assert!(r.get(&value("ifInOctets", 13, "ifIndex=\"2\",")).len() >= n - 4);
    // Discovery: v1 walks with GetNext, v2c with GetBulk; loopback skipped.
    assert!(r.get(&value("ifInOctets", 14, "ifDescr=\"eth0\",ifIndex=\"2\",")).len() >= n - 3);
    assert!(r.get(&value("ifInOctets", 14, "ifDescr=\"lo\",ifIndex=\"1\",")).is_empty());
    assert!(r.get(&value("ifHCOutOctets", 15, "ifDescr=\"eth0\",ifIndex=\"2\",")).len() >= n - 3);
    assert!(r.get(&value("dskAvail", 15, "dskIndex=\"1\",dskPath=\"/\",")).len() >= n - 3);
    assert!(r.get(&value("laLoad", 15, "laIndex=\"1\",")).len() >= n - 3);

    assert_eq!(stats.kernel_drops.load(Ordering::Relaxed), 0);
    assert!(stats.late.load(Ordering::Relaxed) >= (n - 3) as u64);
}

/// Thousands of agents in one farm process, one poller: every target gets
/// exactly one up sample per interval, the healthy ones answer, the faulty
/// ones are counted, and the kernel drops nothing.
#[test]
fn two_thousand_targets_one_socket_farm() {
    const N: usize = 2000;
    let faults = [Fault::Silent, Fault::Duplicate, Fault::WrongRequestId, Fault::Truncated, Fault::RestartEvery(3)];
    let fault_of = |i: usize| if i % 20 == 19 { faults[(i / 20) % faults.len()] } else { Fault::None };
    let ips = farm::ips(Ipv4Addr::new(127, 4, 0, 1), N);
    let farm = farm::Farm::start(0, ips.iter().enumerate().map(|(i, ip)| (*ip, fault_of(i))).collect(), 1).unwrap();
    let oids = ["sysUpTime.0", "ifHCInOctets.2", "ifHCOutOctets.2", "dskUsed.1", "dskAvail.1", "laLoad.1"];
    let specs: Vec<TargetSpec> = farm.addrs.iter().map(|&a| spec(a, Version::V2c, list(&oids))).collect();
    let (plan, _) = snmp::plan(specs, Duration::from_secs(1), 0);
    let poller = Poller::new(PollerConfig::new(Duration::from_millis(100)), plan).unwrap();
    let stats = poller.stats();
    let n = 10;
    let r = Recorded::new(&node::rounds::first_batches(poller, n));
    let mut healthy_up = 0;
    let mut healthy = 0;
    for (i, a) in farm.addrs.iter().enumerate() {
        let up = r.values(&format!("kansoku_snmp_up{{target=\"{a}\"}}"));
        assert_eq!(up.len(), n, "{a}");
        match fault_of(i) {
            Fault::None | Fault::Duplicate | Fault::RestartEvery(_) => {
                healthy += n;
                healthy_up += up.iter().filter(|v| **v == 1.0).count();
            }
            _ => assert!(up.iter().all(|v| *v == 0.0), "{a} ({:?}) never counts as answered", fault_of(i)),
        }
    }
    // Lenient: a loaded CI machine may miss slices; the benchmark measures.
    assert!(healthy_up * 10 >= healthy * 8, "{healthy_up} of {healthy} answers recorded");
    assert_eq!(stats.kernel_drops.load(Ordering::Relaxed), 0);
    assert!(stats.duplicates.load(Ordering::Relaxed) > 0 && stats.malformed.load(Ordering::Relaxed) > 0);
    assert!(stats.wrong_request_id.load(Ordering::Relaxed) > 0 && stats.restarts.load(Ordering::Relaxed) > 0);
}

/// The floor reads every answer the farm sends back, silent agents
/// excepted, and decodes nothing: the same datagrams as a real interval.
#[test]
fn the_floor_reads_every_answer_and_nothing_more() {
    const N: usize = 300;
    let fault_of = |i: usize| if i % 10 == 9 { Fault::Silent } else { Fault::None };
    let ips = farm::ips(Ipv4Addr::new(127, 6, 0, 1), N);
    let farm = farm::Farm::start(0, ips.iter().enumerate().map(|(i, ip)| (*ip, fault_of(i))).collect(), 1).unwrap();
    let specs: Vec<TargetSpec> = farm.addrs.iter().map(|&a| spec(a, Version::V2c, list(&["sysUpTime.0"]))).collect();
    let (plan, _) = snmp::plan(specs, Duration::from_secs(1), 0);
    // Answered within a second: a loaded machine still gets every answer.
    let mut cfg = PollerConfig::new(Duration::from_secs(1));
    cfg.timeout = Duration::from_secs(1);
    let mut poller = Poller::new(cfg, plan).unwrap();
    let stats = poller.stats();
    for _ in 0..3 {
        let (got, cpu_ns) = poller.floor_once(clock::realtime_ns());
        assert_eq!(got, N - N / 10, "every agent but the silent ones answers once");
        assert!(cpu_ns > 0);
    }
    assert_eq!(stats.answers.load(Ordering::Relaxed), 0, "nothing decoded or counted as an answer");
}

/// An agent down when the poller starts: polled for the minimal set,
/// rediscovered in the background, then polled for its interfaces and
/// disks — with the series it already had kept.
#[test]
fn a_target_down_at_start_is_discovered_later() {
    let ips = farm::ips(Ipv4Addr::new(127, 5, 0, 1), 1);
    // Discovery sends 3 requests (1 + 2 retries); then 5 intervals of silence.
    let farm = farm::Farm::start(0, vec![(ips[0], Fault::SilentFor(8))], 1).unwrap();
    let a = farm.addrs[0];
    let (plan, failures) = snmp::plan(vec![spec(a, Version::V2c, OidSet::Default)], Duration::from_millis(200), 2);
    assert_eq!(failures.len(), 1, "discovery fails while the agent is down");
    let mut cfg = PollerConfig::new(Duration::from_millis(100));
    cfg.rediscover_every = Duration::from_millis(300);
    let poller = Poller::new(cfg, plan).unwrap();
    let batches = node::rounds::first_batches(poller, 30);
    let r = Recorded::new(&batches);
    let t = format!("target=\"{a}\"");
    let up = r.values(&format!("kansoku_snmp_up{{{t}}}"));
    assert_eq!(up.len(), 30);
    assert_eq!(up[0], 0.0, "down at first");
    assert_eq!(*up.last().unwrap(), 1.0, "answers later");
    let hc = r.get(&format!("ifHCInOctets{{ifDescr=\"eth0\",ifIndex=\"2\",{t}}}"));
    assert!(!hc.is_empty(), "interfaces discovered while running");
    let disk = r.get(&format!("dskAvail{{dskIndex=\"1\",dskPath=\"/\",{t}}}"));
    assert!(!disk.is_empty());
    // sysUpTime kept its series across the change: one series, no gap after the first answer.
    let uptime = r.get(&format!("sysUpTime{{{t}}}"));
    let first = uptime[0].0;
    let expected = batches.iter().filter(|b| b.time.as_nanos() >= first).count();
    assert!(uptime.len() + 2 >= expected, "{} of {expected}", uptime.len());
}

/// The farm is a fixture for this machine only: it answers on loopback
/// addresses, on the loopback device, and refuses any other address.
#[test]
fn the_farm_refuses_addresses_off_loopback() {
    let Err(err) = farm::Farm::start(0, vec![(Ipv4Addr::new(10, 1, 2, 3), Fault::None)], 1) else {
        panic!("a non-loopback address was accepted");
    };
    assert!(err.to_string().contains("not loopback"), "{err}");
}
