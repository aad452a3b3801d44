//! `kansoku up --snmp-targets` and `kansoku snmp`, end to end: the real
//! binary polls a fake agent farm (real UDP on 127.0.0.0/8), stores every
//! answer and every silence, serves them, and refuses bad targets files with
//! the line that is wrong.

mod common;

use std::net::Ipv4Addr;
use std::process::Command;

use common::{BIN, http_get, live_times, query, run, start};
use snmp::farm::{self, Fault};

#[test]
fn up_polls_snmp_targets_beside_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let faults = [Fault::None, Fault::Silent, Fault::Counter32Wrap, Fault::None];
    let ips = farm::ips(Ipv4Addr::new(127, 3, 0, 1), faults.len());
    let farm = farm::Farm::start(0, ips.into_iter().zip(faults).collect(), 1).unwrap();
    let a = &farm.addrs;
    let targets = dir.path().join("targets");
    std::fs::write(
        &targets,
        format!(
            "# the e2e farm\n{} v2c rack=r1\n{} v2c name=silent\n{} v1 oids=sysUpTime.0,ifInOctets.2\n{} community=public\n",
            a[0], a[1], a[2], a[3]
        ),
    )
    .unwrap();
    let k = start(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "100ms",
            "--host",
            "e2e",
            "--snmp-targets",
            targets.to_str().unwrap(),
        ],
        &data,
    );
    // Wait on data, not on time: 20 intervals of the silent target's error samples.
    let seen = live_times(&k.addr, r#"kansoku_snmp_up{target="silent"}"#, 20);
    let (from, to) = (seen[0], seen[seen.len() - 1]);

    let silent = query(&k.addr, r#"kansoku_snmp_up{target="silent"}"#, from, to);
    let zeros = silent["series"][0]["values"].as_array().unwrap();
    assert!(zeros.len() >= 20 && zeros.iter().all(|v| v.as_f64() == Some(0.0)), "{silent}");

    // Discovery labelled the default set; the user's label is on every series.
    let target0 = a[0].to_string();
    let hc = query(&k.addr, &format!(r#"ifHCInOctets{{target="{target0}",rack="r1",ifDescr="eth0"}}"#), from, to);
    let values = hc["series"][0]["values"].as_array().unwrap();
    assert!(values.iter().filter(|v| v.is_number()).count() >= 18, "{hc}");

    // Counter32 wrap on a v1 target: the increase series never spikes.
    let inc = query(&k.addr, &format!(r#"ifInOctets_increase{{target="{}"}}"#, a[2]), from, to);
    let incs: Vec<f64> = inc["series"][0]["values"].as_array().unwrap().iter().filter_map(|v| v.as_f64()).collect();
    assert!(
        !incs.is_empty() && incs.iter().all(|d| *d == (2 * farm::STEP) as f64 || *d == (4 * farm::STEP) as f64),
        "{incs:?}"
    );

    // The host collector runs beside the poller.
    let cpu = query(&k.addr, r#"node_cpu_seconds_total{mode="user",host="e2e"}"#, from, to);
    assert!(!cpu["series"].as_array().unwrap().is_empty());

    let (status, body) = http_get(&k.addr, "/api/v1/status");
    assert_eq!(status, 200);
    let st: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st["snmp"]["targets"], 4);
    assert!(st["snmp"]["silences"].as_u64().unwrap() >= 20, "{}", st["snmp"]);
    assert_eq!(st["snmp"]["kernel_drops"], 0);
    assert_eq!(st["store"]["late_samples"], 0, "one sample per series and interval");

    // The per-target view: state as of the last interval.
    let (status, body) = http_get(&k.addr, "/api/v1/snmp/targets");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let targets = v["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4);
    let by_name = |n: &str| targets.iter().find(|t| t["target"] == n).unwrap_or_else(|| panic!("{n} in {v}"));
    assert_eq!(by_name("silent")["up"], false);
    let t0 = by_name(&target0);
    assert_eq!(t0["up"], true, "{t0}");
    assert_eq!(t0["labels"][0], serde_json::json!(["rack", "r1"]));
    let hc = t0["oids"].as_array().unwrap().iter().find(|o| o["oid"] == "ifHCInOctets.2").expect("discovered OID");
    assert!(hc["value"].as_f64().unwrap() > 0.0 && hc["error"].is_null(), "{hc}");
    assert!(hc["series"].as_str().unwrap().starts_with("ifHCInOctets{"), "{hc}");

    // Stop it; the data directory reads back offline.
    let pid = k.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let mut k = k;
    assert!(k.child.wait().unwrap().success());
    let out = run(&["series", "kansoku_snmp_up", "--data", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 4);
}

#[test]
fn bad_targets_files_name_the_line_and_exit_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (content, want) in [
        ("127.0.0.1:1161\n127.0.0.1 v3\n", ":2: \"v3\": expected v1, v2c, or key=value"),
        ("127.0.0.1 oids=ifHCInOctets.x\n", ":1: \"ifHCInOctets.x\": the instance after ifHCInOctets must be numbers"),
        ("# nothing\n", ": no targets"),
    ] {
        let f = dir.path().join("targets");
        std::fs::write(&f, content).unwrap();
        let out = Command::new(BIN)
            .args(["snmp", "--listen", "127.0.0.1:0", "--targets", f.to_str().unwrap(), "--data"])
            .arg(&data)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{content:?}: {err}");
        assert!(err.starts_with("kansoku: ") && err.contains(want), "{content:?}: {err}");
        assert!(!data.exists(), "a bad targets file must not create the data directory");
    }
    let out = run(&["snmp", "--targets", "/nonexistent/targets", "--data", data.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/targets: No such file"));
}
