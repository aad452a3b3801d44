//! `kansoku lab latency` on this machine: the injector's calibration must
//! add what each step asks within the stated tolerance (10 %), and a
//! workload whose every operation is one delayed call — a loop of `pread`
//! in Python, one in flight — must degrade as Little's law says it must:
//! P[x] = 1 / (1/P0 + x). The same across the network (Redis behind the
//! relay) and on a delayed block device (fio's random reads on ext4 over a
//! loop device over the FUSE injector).
//!
//! The tests take turns (`SERIAL`): each measures throughput, and two at
//! once on two cores would measure each other.

mod common;

use std::sync::Mutex;

use common::{read_json, run};

static SERIAL: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn the_injector_adds_what_it_is_asked() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.json");
    let o = run(&[
        "lab",
        "latency",
        "--calibrate-only",
        "--steps",
        "0,1us,5us,20us",
        "--probe-calls",
        "5000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = read_json(&out);
    let steps = doc["calibration"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    // The zero step (the interposer present, asked for nothing) may add up
    // to the smallest step's tolerance, as `latency::calibrate` states it
    // (10 % of 1 us). A fixed 20 ns once failed a run on a loaded machine
    // at 29 ns, which the product itself judged honoured.
    let smallest = 1_000.0;
    for s in steps {
        let (req, added) = (s["requested_ns"].as_f64().unwrap(), s["added_p50_ns"].as_f64().unwrap());
        let within = if req == 0.0 { added.abs() <= 0.1 * smallest } else { (added - req).abs() <= 0.1 * req };
        assert!(within && s["honoured"] == true, "asked {req} ns, added {added} ns: {s}");
    }
}

#[test]
fn a_closed_loop_degrades_as_littles_law_says() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("loop.py");
    std::fs::write(
        &script,
        "import os, time\nfd = os.open('/dev/zero', os.O_RDONLY)\nn = 0\nend = time.monotonic() + 0.3\n\
         while time.monotonic() < end:\n    os.pread(fd, 8, 0)\n    n += 1\nprint('ops=%d' % (n / 0.3))\n",
    )
    .unwrap();
    let out = dir.path().join("l.json");
    let cmd = format!("python3 {}", script.display());
    let o = run(&[
        "lab",
        "latency",
        "--run",
        &cmd,
        "--parser",
        r"ops=(\d+)",
        "--metric",
        "ops",
        "--calls",
        "pread",
        "--steps",
        "0,2us,10us",
        "--repetitions",
        "3",
        "--warmup",
        "0",
        "--probe-calls",
        "5000",
        "--model",
        "1,1",
        "--hop",
        "2us",
        "--budget",
        "50",
        "--out",
        out.to_str().unwrap(),
    ]);
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let doc = read_json(&out);
    let curve = doc["curve"].as_array().unwrap();
    assert_eq!(curve.len(), 3, "{doc}");
    let pd: Vec<f64> = curve.iter().map(|p| p["pd"].as_f64().unwrap()).collect();
    assert!(pd[0] == 0.0 && pd[1] > 50.0 && pd[2] > pd[1], "{pd:?}");
    for p in &curve[1..] {
        let (measured, model) = (p["pd"].as_f64().unwrap(), p["model_pd"].as_f64().unwrap());
        assert!((measured - model).abs() < 5.0, "PD {measured} against the model's {model}: {p}");
    }
    // It climbs from the first step: no knee, and not one 2 us hop within 50 %.
    assert!(doc["knee_ns"].is_null(), "{doc}");
    assert_eq!(doc["budget"]["tiers"], 0);
    // A result: on stdout (progress went to stderr).
    let results = String::from_utf8_lossy(&o.stdout);
    assert!(results.contains("tier budget: 0 hops of 2000 ns"), "{results}");
    // The report beside the result: the degradation curve, a point per
    // step with the model's curve beside it.
    let html = std::fs::read_to_string(out.with_extension("html")).unwrap();
    assert_eq!(html.matches("<circle class=point").count(), 3, "{html}");
    assert_eq!(html.matches("<polyline class=model").count(), 1, "{html}");
}

/// Across the network: Redis behind the relay, 4 clients each with one
/// GET in flight, every request and every reply delayed x, so by Little's
/// law P[x] = 4 / (4/P0 + 2x) — the curve must follow it.
#[test]
fn redis_across_the_relay_degrades_as_littles_law_says() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let o = run(&[
        "lab",
        "latency",
        "--workload",
        "redis",
        "--steps",
        "0,1ms,2ms",
        "--probe-calls",
        "300",
        "--repetitions",
        "2",
        "--warmup",
        "0",
        "--requests",
        "2000",
        "--model",
        "4,2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = read_json(&out);
    let curve = doc["curve"].as_array().unwrap();
    assert_eq!(curve.len(), 3, "{curve:?}");
    for p in &curve[1..] {
        let (pd, model) = (p["pd"].as_f64().unwrap(), p["model_pd"].as_f64().unwrap());
        assert!((pd - model).abs() <= 5.0, "at {} ns: measured PD {pd} %, Little's law {model} %", p["x_ns"]);
    }
}

/// On a delayed block device: fio's 4 KiB random reads with O_DIRECT, one
/// in flight, on ext4 over a loop device over the FUSE injector — each read
/// one request of the device, delayed x — so P[x] = 1 / (1/P0 + x). The
/// calibration honours the 1 ms step, the device served the reads without
/// an error, and nothing stays mounted afterwards.
#[test]
fn fio_on_the_delayed_device_degrades_as_littles_law_says() {
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.json");
    let o = run(&[
        "lab",
        "latency",
        "--inject",
        "storage",
        "--workload",
        "fio",
        "--disk-size",
        "128M",
        "--steps",
        "0,200us,1ms",
        "--probe-calls",
        "1000",
        "--repetitions",
        "2",
        "--warmup",
        "0",
        "--seconds",
        "1s",
        "--out",
        out.to_str().unwrap(),
    ]);
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let doc = read_json(&out);
    // The millisecond step is honoured whatever else runs; 200 us may be
    // left out on a busy machine (a late wakeup is a tenth of it), and is
    // then not on the curve.
    let calibration = doc["calibration"].as_array().unwrap();
    assert!(calibration.iter().any(|s| s["requested_ns"] == 1_000_000 && s["honoured"] == true), "{calibration:?}");
    let curve = doc["curve"].as_array().unwrap();
    assert!(curve.len() >= 2 && curve.iter().any(|p| p["x_ns"] == 1_000_000.0), "{curve:?}");
    for p in &curve[1..] {
        let (pd, model) = (p["pd"].as_f64().unwrap(), p["model_pd"].as_f64().unwrap());
        assert!((pd - model).abs() <= 5.0, "at {} ns: measured PD {pd} %, Little's law {model} %", p["x_ns"]);
    }
    assert_eq!(doc["inject"], "storage");
    assert_eq!(doc["model"]["in_flight"], 1.0, "fio's iodepth, the model by construction");
    assert_eq!(doc["model"]["given"], false);
    // K measured from the device's own count: one request per 4 KiB read.
    let k = doc["model"]["measured_device_requests_per_operation"].as_f64().unwrap();
    assert!((0.95..=1.1).contains(&k), "device requests per read: {k}");
    assert!(doc["device"]["reads"].as_u64().unwrap() > 1000, "{}", doc["device"]);
    assert_eq!(doc["device"]["errors"], 0);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains("kansoku-delay"), "the injector is unmounted: {mounts}");

    // A workload that does not go with the injector is refused with the reason.
    let o = run(&["lab", "latency", "--inject", "storage", "--workload", "redis"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("redis goes with network"));
}
