//! A full disk, for real: the store lives on a small tmpfs mounted for this
//! test (CI runs as root). Appends fail with a clear error and nothing
//! acknowledged is lost; when space returns, appends and flushes resume.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap().keep();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount tmpfs (this test needs root): {}", String::from_utf8_lossy(&out.stderr));
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

fn batch(i: i64, key: &SeriesKey) -> Batch {
    let mut b = Batch::new(Timestamp(1_000_000_000 * i));
    if i == 0 {
        b.defs.push((0, key.clone()));
    }
    b.points.push((0, i as f64 * 1.5));
    b
}

fn stored(store: &Store) -> Vec<i64> {
    let all = store.series(&Selector::all());
    all.first().map_or(vec![], |(id, _)| store.read(*id, Timestamp::MIN, Timestamp::MAX).0)
}

/// Fills the filesystem holding `dir` with a file, leaving about `leave` bytes.
fn fill(dir: &Path, leave: u64) -> PathBuf {
    let filler = dir.join("filler");
    let free = rustix::fs::statvfs(dir).map(|s| s.f_bavail * s.f_frsize).unwrap();
    fs::write(&filler, vec![0u8; free.saturating_sub(leave) as usize]).unwrap();
    filler
}

#[test]
fn full_disk_refuses_clearly_keeps_everything_and_resumes() {
    let fs_ = Tmpfs::mount("4m");
    let data = fs_.0.join("data");
    let opts = Options {
        fsync: FsyncPolicy::Always,
        block_duration: Duration::from_secs(3600),
        head_samples_max: 1 << 20,
        retention: store::Retention { max_age: None, budget: store::DiskBudget::Unlimited },
        ..Options::default()
    };
    let store = Store::open(&data, opts.clone()).unwrap();
    let key = SeriesKey::new("m", [("host", "h")]);
    let mut app = Appender::default();
    let filler = fill(&fs_.0, 64 << 10);

    let mut acked = Vec::new();
    let mut first_error = None;
    for i in 0..100_000i64 {
        match store.append(&mut app, &batch(i, &key)) {
            Ok(_) => acked.push(1_000_000_000 * i),
            Err(e) => {
                first_error = Some(e.to_string());
                break;
            }
        }
    }
    let err = first_error.expect("the disk never filled");
    assert!(err.contains("append to WAL") && err.contains("No space left"), "{err}");
    assert_eq!(store.stats().write_errors.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(stored(&store), acked, "every acknowledged sample readable while full");
    // A flush needs space too: it fails, and nothing moves or is lost.
    assert!(store.flush().is_err());
    assert_eq!(stored(&store), acked);

    // Space returns: appends resume right after the last good record. A
    // crash now (the directory as `kill -9` would leave it: copied while the
    // store is open) must find every acknowledged sample, those from after
    // the outage included: no hole where the failed write was.
    fs::remove_file(filler).unwrap();
    for _ in 0..50 {
        let next = acked.len() as i64;
        store.append(&mut app, &batch(next, &key)).unwrap();
        acked.push(1_000_000_000 * next);
    }
    let crashed = tempfile::tempdir().unwrap();
    common::crash_copy(&data, crashed.path());
    let recovered = Store::open(crashed.path(), opts.clone()).unwrap();
    assert_eq!(recovered.stats().wal_damaged_segments.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(stored(&recovered), acked, "after a crash following the outage");
    drop(recovered);

    // And flushes resume; a restart finds it all.
    store.flush().unwrap();
    drop(store);
    let store = Store::open(&data, opts).unwrap();
    assert_eq!(stored(&store), acked, "after space returned and a restart");
}
