//! `kansoku up --fragmentation`: an ext4 image on a loop device, two files
//! written by interleaved appends (each fsynced), scanned by the running
//! collector; then `e4defrag` — the stored figures and the map the API
//! serves must change as they do on the disk: both files fragmented and
//! listed before, each in one run after, the map showing them. Needs root
//! (mount) and e2fsprogs.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::{Live, enc, http_get, start};

fn sh(cmd: &str, args: &[&str]) {
    let out =
        Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e} (apt-get install e2fsprogs)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

struct Mount(std::path::PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn json(addr: &str, q: &str) -> serde_json::Value {
    let (status, body) = http_get(addr, q);
    assert_eq!(status, 200, "{q}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The newest stored value of `metric` for the image.
fn newest(addr: &str, metric: &str, mnt: &Path) -> Option<f64> {
    let sel = format!("{metric}{{path=\"{}\"}}", mnt.display());
    let v = json(addr, &format!("/api/v1/query?query={}&since=1h", enc(&sel)));
    let s = v["series"].as_array()?.first()?.clone();
    s["values"].as_array()?.iter().rev().find_map(serde_json::Value::as_f64)
}

#[test]
fn the_collector_sees_fragmentation_and_its_repair() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    sh("mkfs.ext4", &["-q", "-b", "4096", img.to_str().unwrap()]);
    sh("mount", &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()]);
    let _m = Mount(mnt.clone());
    {
        let mut files: Vec<std::fs::File> =
            ["a", "b"].iter().map(|n| std::fs::File::create(mnt.join(n)).unwrap()).collect();
        for _ in 0..256 {
            for f in &mut files {
                f.write_all(&[0x5a; 4096]).unwrap();
                f.sync_all().unwrap();
            }
        }
    }
    let data = dir.path().join("data");
    let up = start(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "1s",
            "--host",
            "frag",
            "--trace",
            "off",
            "--fragmentation",
            mnt.to_str().unwrap(),
            "--fragmentation-interval",
            "1s",
        ],
        &data,
    );
    let a = &up.addr;
    let path = enc(mnt.to_str().unwrap());
    // Each round keeps its map before its batch is stored and shown live:
    // the first round's figures on the live tail mean its map is kept.
    let mut live = Live::open(a, &format!("kansoku_fragmentation_extra_runs{{path=\"{}\"}}", mnt.display()));
    let first = next_value(&mut live);
    assert!(first >= 4.0, "runs beyond need: {first}");
    let list = json(a, "/api/v1/fragmentation");
    assert_eq!(list["paths"][0], mnt.to_str().unwrap());
    let before = json(a, &format!("/api/v1/fragmentation/map?path={path}&cells=2048"));
    assert_eq!(before["figures"]["files"], 2);
    assert_eq!(before["figures"]["fragmented_files"], 2, "{}", before["figures"]);
    let worst: Vec<&str> =
        before["most_fragmented"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(worst.len(), 2);
    assert!(worst.contains(&"a") && worst.contains(&"b"));
    let cells = before["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2048);
    let owners: Vec<&str> = before["owners"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    assert!(owners.contains(&"a") && owners.contains(&"b"), "{owners:?}");
    assert!(cells.iter().any(|c| c == -1), "free space on the map");
    // The series are stored.
    assert!(newest(a, "kansoku_fragmentation_extra_runs", &mnt).unwrap() >= 4.0);
    assert_eq!(newest(a, "kansoku_fragmentation_files", &mnt), Some(2.0));

    sh("e4defrag", &[mnt.join("a").to_str().unwrap(), mnt.join("b").to_str().unwrap()]);
    // Rounds go on every second; the first to scan after the
    // defragmentation has no run beyond need (a round that overlapped it
    // may show some).
    let repaired = (0..30).any(|_| next_value(&mut live) == 0.0);
    assert!(repaired, "no round after e4defrag showed every file in one run");
    let after = json(a, &format!("/api/v1/fragmentation/map?path={path}"));
    assert_eq!(after["figures"]["fragmented_files"], 0, "{}", after["figures"]);
    assert_eq!(after["figures"]["runs"], 2);
    assert!(after["most_fragmented"].as_array().unwrap().is_empty());
    // The older map is still there to compare with.
    let t0 = before["time"].as_str().unwrap();
    let again = json(a, &format!("/api/v1/fragmentation/map?path={path}&time={t0}&cells=2048"));
    assert_eq!(again["cells"], before["cells"]);
    assert_eq!(newest(a, "kansoku_fragmentation_extra_runs", &mnt), Some(0.0));
    // A path never scanned is named.
    let (status, body) = http_get(a, "/api/v1/fragmentation/map?path=%2Fnope");
    assert_eq!(status, 400);
    assert!(body.contains("/nope"), "{body}");
}

/// The next value the live tail shows of its one series.
fn next_value(live: &mut Live) -> f64 {
    (0..60).find_map(|_| live.next_points().1.first().copied().flatten()).expect("no value in 60 live events")
}
