//! The parsers on answers recorded from a real ext4 (a loop-mounted image,
//! a file written by interleaved appends), checked against what
//! e2fsprogs' `filefrag -v` and `statvfs` said of the same file system at
//! the same moment.

use extents::parse;

const FIEMAP: &[u8] = include_bytes!("fixtures/fiemap_c.bin");
const FSMAP: &[u8] = include_bytes!("fixtures/fsmap.bin");
const FILEFRAG: &str = include_str!("fixtures/filefrag_c.txt");
const STATVFS_FREE: &str = include_str!("fixtures/statvfs_free.txt");

/// `filefrag -v`'s rows: (logical block, physical block, length in blocks).
fn filefrag_rows() -> Vec<(u64, u64, u64)> {
    FILEFRAG
        .lines()
        .filter_map(|l| {
            let (idx, rest) = l.split_once(':')?;
            idx.trim().parse::<u64>().ok()?;
            let f: Vec<&str> = rest.split(|c: char| c == ':' || c.is_whitespace()).filter(|s| !s.is_empty()).collect();
            let first = |s: &str| s.split("..").next().and_then(|v| v.parse::<u64>().ok());
            Some((first(f[0])?, first(f[2])?, f[4].parse().ok()?))
        })
        .collect()
}

#[test]
fn fiemap_agrees_with_filefrag() {
    let ours = parse::fiemap(FIEMAP).unwrap();
    let theirs = filefrag_rows();
    assert_eq!(theirs.len(), 12, "filefrag found 12 extents");
    let ours_blocks: Vec<(u64, u64, u64)> =
        ours.iter().map(|e| (e.logical / 4096, e.physical / 4096, e.length / 4096)).collect();
    assert_eq!(ours_blocks, theirs);
    assert_ne!(ours.last().unwrap().flags & parse::FIEMAP_EXTENT_LAST, 0);
    // No two of these touch on the device: 12 runs.
    assert_eq!(parse::runs(&ours).len(), 12);
}

#[test]
fn fsmap_free_space_agrees_with_statvfs() {
    let recs = parse::fsmap(FSMAP).unwrap();
    let free: u64 = recs.iter().filter(|r| r.is_free()).map(|r| r.length).sum();
    assert_eq!(free, STATVFS_FREE.trim().parse::<u64>().unwrap());
    // The map is in device order and ends with the last record flagged.
    assert!(recs.windows(2).all(|w| w[0].physical + w[0].length <= w[1].physical));
    assert_ne!(recs.last().unwrap().flags & parse::FMR_OF_LAST, 0);
}
