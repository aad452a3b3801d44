//! The scan on real file systems: an ext4 and an XFS image on loop
//! devices, two files written by interleaved appends (each append fsynced,
//! so the allocator places them alternately), then each file system's own
//! defragmenter (`e4defrag`, `xfs_fsr`): the figures and the map change as
//! they must. Needs root (mount), e2fsprogs and xfsprogs.

use std::path::Path;
use std::process::Command;

use extents::{FREE, scan};

fn sh(cmd: &str, args: &[&str]) {
    let out =
        Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e} (apt-get install e2fsprogs)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Unmounts on drop, so a failed assertion leaves no mount behind.
struct Mount<'a>(&'a Path);
impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

fn interleave(dir: &Path, names: &[&str], appends: usize, size: usize) {
    use std::io::Write;
    let mut files: Vec<std::fs::File> = names.iter().map(|n| std::fs::File::create(dir.join(n)).unwrap()).collect();
    let chunk = vec![0x5au8; size];
    for _ in 0..appends {
        for f in &mut files {
            f.write_all(&chunk).unwrap();
            f.sync_all().unwrap();
        }
    }
}

#[test]
fn ext4_interleaved_appends_fragment_and_e4defrag_repairs() {
    fragment_and_repair(64 << 20, &["mkfs.ext4", "-q", "-b", "4096"], "e4defrag", 2 * 512 * 4096);
}

#[test]
fn xfs_interleaved_appends_fragment_and_xfs_fsr_repairs() {
    // mkfs.xfs wants at least 300 MiB.
    // statfs leaves out XFS's reserved blocks (its reserve pool and
    // per-group metadata reservations, here ~19 MB), which the map calls free.
    fragment_and_repair(320 << 20, &["mkfs.xfs", "-q"], "xfs_fsr", 32 << 20);
}

/// `mkfs` an image of `size`, fragment two files, check the scan, run
/// `defrag` on them, check again. `slack`: how far the map's free space
/// and statfs's may differ (each file system keeps blocks one counts and
/// the other does not).
fn fragment_and_repair(size: u64, mkfs: &[&str], defrag: &str, slack: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("fs.img");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::File::create(&img).unwrap().set_len(size).unwrap();
    let mut args: Vec<&str> = mkfs[1..].to_vec();
    args.push(img.to_str().unwrap());
    sh(mkfs[0], &args);
    sh("mount", &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()]);
    let _m = Mount(&mnt);
    interleave(&mnt, &["a", "b"], 256, 4096);

    let before = scan(&mnt, 1).unwrap();
    let f = before.figures;
    assert_eq!(f.files, 2);
    assert_eq!(f.file_bytes, 2 << 20);
    assert_eq!(f.fragmented_files, 2, "{f:?}");
    assert!(f.extra_runs >= 4, "{f:?}");
    assert_eq!(f.runs, before.files.iter().map(|x| x.runs.len() as u64).sum::<u64>());
    // Free space as the file system's map has it: what df counts, give or
    // take what each file system keeps aside (ext4: blocks preallocated for
    // small files, up to 512 per CPU, free to df but marked in the bitmap).
    let vfs = statfs_free(&mnt);
    let free = f.free_bytes.unwrap();
    assert!(free.abs_diff(vfs) <= slack, "fsmap {free}, statfs {vfs}");
    assert!(f.free_extents.unwrap() >= 1);
    // Each file's runs cover its size, and no two files share a block.
    for file in &before.files {
        assert_eq!(file.runs.iter().map(|r| r.1).sum::<u64>(), file.size, "{}", file.path);
    }
    let mut all: Vec<(u64, u64)> = before.files.iter().flat_map(|x| x.runs.iter().copied()).collect();
    all.extend(before.free.iter().flatten().copied());
    all.sort_unstable();
    assert!(all.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "overlapping runs");
    // The map shows both files and free space.
    let cells = extents::cells(&before, 4096, (0, before.device_bytes));
    assert!(cells.contains(&0) && cells.contains(&1) && cells.contains(&FREE));

    sh(defrag, &[mnt.join("a").to_str().unwrap(), mnt.join("b").to_str().unwrap()]);
    let after = scan(&mnt, 2).unwrap();
    assert_eq!(after.figures.files, 2);
    assert_eq!(after.figures.fragmented_files, 0, "{:?}", after.figures);
    assert_eq!(after.figures.extra_runs, 0);
    assert_eq!(after.figures.runs, 2);
    assert_eq!(after.figures.file_bytes, 2 << 20);
}

fn statfs_free(p: &Path) -> u64 {
    let out = Command::new("stat").args(["-f", "-c", "%f %S"]).arg(p).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut v = text.split_whitespace().map(|s| s.parse::<u64>().unwrap());
    v.next().unwrap() * v.next().unwrap()
}
