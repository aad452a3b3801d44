//! The storage injector, mounted for real (FUSE as root): bytes pass
//! through unchanged, the delay file sets the delay, a set delay is what a
//! read through it waits out (never less), and the
//! whole stack — loop device, ext4 — carries a file system whose writes and
//! syncs reach the injector, and is gone after it is dropped.

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use latency::calibrate::quantile;
use latency::disk::{Injector, Stack, probe};

#[test]
fn bytes_pass_and_the_delay_is_what_was_set() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("b.img");
    std::fs::write(&backing, vec![0u8; 4 << 20]).unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let inj = Injector::mount(&backing, &mnt).unwrap();
    let img = std::fs::OpenOptions::new().read(true).write(true).open(inj.image()).unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    img.write_all_at(&data, 12_345).unwrap();
    let mut back = vec![0u8; data.len()];
    img.read_exact_at(&mut back, 12_345).unwrap();
    assert_eq!(back, data);
    // Through to the backing file, not a cache of ours.
    assert_eq!(&std::fs::read(&backing).unwrap()[12_345..12_345 + 8192], &data[..]);
    assert_eq!(img.write_at(b"x", 4 << 20).unwrap_err().raw_os_error(), Some(28), "ENOSPC past the end");

    // The delay file.
    std::fs::write(mnt.join("delay_ns"), "2000000\n").unwrap();
    assert_eq!(std::fs::read_to_string(mnt.join("delay_ns")).unwrap(), "2000000\n");
    assert!(std::fs::write(mnt.join("delay_ns"), "soon").is_err());
    std::fs::write(mnt.join("delay_ns"), "0").unwrap();

    let base = quantile(&probe(&inj.image(), 400).unwrap(), 0.5);
    for ms in [1u64, 5] {
        inj.set_delay(Duration::from_millis(ms));
        let n = (200 / ms).max(20) as usize;
        let took = probe(&inj.image(), n).unwrap();
        // Every read waits out the delay; how little more it takes is the
        // scheduler's (`lab latency` measures it), so only a read early or
        // an order of magnitude late fails here.
        let want = ms * 1_000_000;
        assert!(took[0] >= want, "{ms} ms requested, a read took {} ns", took[0]);
        let added = quantile(&took, 0.5).saturating_sub(base);
        assert!(added < 10 * want, "{ms} ms requested, {added} ns added at p50 (base {base} ns)");
    }
    assert!(inj.counts().reads.load(Relaxed) >= 400);
    // The requests file counts every request served, and is not writable.
    let before: u64 = std::fs::read_to_string(mnt.join("requests")).unwrap().trim().parse().unwrap();
    probe(&inj.image(), 10).unwrap();
    let after: u64 = std::fs::read_to_string(mnt.join("requests")).unwrap().trim().parse().unwrap();
    assert_eq!(after - before, 10);
    assert!(std::fs::write(mnt.join("requests"), "0").is_err());
}

#[test]
fn a_file_system_on_the_delayed_device_reaches_the_injector() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::build(dir.path(), 64 << 20).unwrap();
    let before = stack.injector().counts().writes.load(Relaxed);
    let file = stack.fs().join("f");
    std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
    std::fs::File::open(&file).unwrap().sync_all().unwrap();
    let c = stack.injector().counts();
    assert!(c.writes.load(Relaxed) > before, "the file's blocks went through the injector");
    assert!(c.written_bytes.load(Relaxed) >= 1 << 20);
    assert!(c.syncs.load(Relaxed) + c.writes.load(Relaxed) > 0);
    assert_eq!(std::fs::read(&file).unwrap(), vec![7u8; 1 << 20]);
    let dev = stack.device().to_owned();
    let fs = stack.fs();
    drop(stack);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(&fs.display().to_string()), "ext4 unmounted");
    assert!(!mounts.contains("kansoku-delay") || !mounts.contains(&dir.path().display().to_string()), "FUSE unmounted");
    let loops = std::process::Command::new("losetup").arg("-a").output().unwrap();
    assert!(!String::from_utf8_lossy(&loops.stdout).contains(&format!("{dev}:")), "loop device detached");
}
