//! `kansoku lab limits` on this machine: a file read with O_DIRECT at
//! every position and size, the sync policies' cost in the order physics
//! puts them, TCP payload through a tbf-shaped veth between two network
//! namespaces at the payload limit the arithmetic gives, and the report;
//! a raw device this VM refuses is named as refused. Needs root (netns).

mod common;

use common::{read_json, run};

#[test]
fn limits_are_measured_beside_theory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limits.json");
    let disk = dir.path().join("disk.img");
    let sheet = dir.path().join("sheet.toml");
    std::fs::write(&sheet, "model = \"test\"\nrpm = 7200\nzones = [{ until = 0.5, sectors_per_track = 1000 }, { until = 1.0, sectors_per_track = 500 }]\nread_iops = 200\n").unwrap();
    let o = run(&[
        "lab",
        "limits",
        "--disk",
        disk.to_str().unwrap(),
        "--disk-size",
        "128M",
        "--datasheet",
        sheet.to_str().unwrap(),
        "--positions",
        "4",
        "--position-span",
        "8M",
        "--sizes",
        "4K,1M",
        "--size-time",
        "200ms",
        "--depths",
        "1,4",
        "--depth-time",
        "300ms",
        "--writes",
        "100",
        "--network",
        "--rate",
        "200mbit",
        "--streams",
        "1,2",
        "--seconds",
        "2s",
        "--warmup",
        "500ms",
        "--cpu-time",
        "200ms",
        "--memory",
        "32M",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!disk.exists(), "the file made for the run is removed");
    let doc = read_json(&out);

    let d = &doc["disk"];
    let pos = d["position"].as_array().unwrap();
    assert_eq!(pos.len(), 4);
    // Theory from the data sheet: 1000 × 512 × 7200 / 60 in the outer half, half that inside.
    assert_eq!(pos[0]["theory"], 61_440_000.0);
    assert_eq!(pos[3]["theory"], 30_720_000.0);
    assert!(pos.iter().all(|p| p["bytes_per_second"].as_f64().unwrap() > 0.0));
    let sizes = d["sizes"].as_array().unwrap();
    let bps = |i: usize| sizes[i]["bytes_per_second"].as_f64().unwrap();
    assert!(bps(0) < bps(1), "4 KiB reads move fewer bytes than 1 MiB reads: {sizes:?}");
    let w = d["writes"].as_array().unwrap();
    let p50 = |name: &str| w.iter().find(|x| x["sync"] == name).unwrap()["p50_us"].as_f64().unwrap();
    // A synced write waits for the device, a buffered one does not: well
    // apart, though a loaded machine slows the buffered ones too (31 us at
    // p50 beside 131 us with O_DSYNC under CI's parallel tests).
    for sync in ["fsync", "fdatasync", "o_dsync"] {
        assert!(p50(sync) > 2.0 * p50("buffered"), "{sync}: {w:?}");
    }
    // Two to three rotations at 7200 rpm.
    assert!((d["fsync_theory_us"]["low"].as_f64().unwrap() - 16_666.67).abs() < 1.0);

    let n = &doc["network"];
    let tbf = n["theory"]["tbf"]["value"].as_f64().unwrap();
    // 200e6 / 8 × 1448 / 1514.
    assert!((tbf - 23_910_171.7).abs() < 1.0, "{tbf}");
    for r in n["runs"].as_array().unwrap() {
        let of = r["of_tbf"].as_f64().unwrap();
        assert!((0.85..=1.02).contains(&of), "{} streams reached {:.1} % of the tbf limit", r["streams"], of * 100.0);
    }
    let free = n["unshaped"]["received"]["bytes_per_second"].as_f64().unwrap();
    assert!(free > 2.0 * tbf, "unshaped {free} B/s");
    assert!(doc["baselines"]["cpu"]["all_cores_mips"].as_f64().unwrap() > 0.0);

    let html = std::fs::read_to_string(out.with_extension("html")).unwrap();
    for needle in ["Component limits", "tbf theory", "fsync", "by position"] {
        assert!(html.contains(needle), "the report shows {needle}");
    }
}

#[test]
fn a_refused_device_is_named_with_what_to_do() {
    // This VM refuses its own disk even to root; elsewhere a missing one.
    let o = run(&["lab", "limits", "--disk", "/dev/vda", "--no-baselines"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/dev/vda"), "{err}");
    assert!(err.contains("loop device") || err.contains("No such file") || err.contains("neither"), "{err}");
}
