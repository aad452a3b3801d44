//! What the two ioctls return, read from bytes: pure, so recorded answers
//! are test fixtures and the fuzzer can throw anything at it.
//!
//! Layouts (`linux/fiemap.h`, `linux/fsmap.h`, native endian):
//! - `struct fiemap` (32 bytes): `fm_start` u64, `fm_length` u64,
//!   `fm_flags` u32, `fm_mapped_extents` u32, `fm_extent_count` u32,
//!   reserved u32; then `fm_mapped_extents` × `struct fiemap_extent`
//!   (56 bytes): `fe_logical`, `fe_physical`, `fe_length` u64, two reserved
//!   u64, `fe_flags` u32, three reserved u32.
//! - `struct fsmap_head` (192 bytes): `fmh_iflags`, `fmh_oflags`,
//!   `fmh_count`, `fmh_entries` u32, six reserved u64, two keys
//!   (`struct fsmap`); then `fmh_entries` × `struct fsmap` (64 bytes):
//!   `fmr_device` u32, `fmr_flags` u32, `fmr_physical`, `fmr_owner`,
//!   `fmr_offset`, `fmr_length` u64, three reserved u64.

/// `sizeof(struct fiemap)`.
pub const FIEMAP_HEAD: usize = 32;
/// `sizeof(struct fiemap_extent)`.
pub const FIEMAP_EXTENT: usize = 56;
/// `sizeof(struct fsmap_head)`.
pub const FSMAP_HEAD: usize = 192;
/// `sizeof(struct fsmap)`.
pub const FSMAP_REC: usize = 64;

/// The last extent of the file.
pub const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Where the data is, is not known (yet).
pub const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
/// Delayed allocation: no block yet.
pub const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;
/// The data sits inside the inode or a metadata block: no extent of its own.
pub const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x200;
/// Allocated, not yet written.
pub const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;

/// The record is the last of the query.
pub const FMR_OF_LAST: u32 = 0x20;
/// The owner is a special one (free space, metadata), not an inode.
pub const FMR_OF_SPECIAL_OWNER: u32 = 0x10;
/// `FMR_OWNER(0, 1)`: free space.
pub const FMR_OWN_FREE: u64 = 1;

/// One extent of a file: bytes `[logical, logical+length)` of the file at
/// device byte `physical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
    pub flags: u32,
}

impl Extent {
    /// Whether the extent has a place on the device.
    pub fn placed(&self) -> bool {
        self.flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_DATA_INLINE) == 0
    }
}

/// One record of the file system's map: `length` bytes at device byte
/// `physical`, owned by `owner` (an inode number, or a special owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapRecord {
    pub device: u32,
    pub flags: u32,
    pub physical: u64,
    pub owner: u64,
    pub offset: u64,
    pub length: u64,
}

impl MapRecord {
    pub fn is_free(&self) -> bool {
        self.flags & FMR_OF_SPECIAL_OWNER != 0 && self.owner == FMR_OWN_FREE
    }
}

/// A buffer that does not hold what its header says.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("{what}: {len} bytes, the header alone is {need}")]
    Short { what: &'static str, len: usize, need: usize },
    #[error("{what}: the header counts {count} records but the buffer holds {room}")]
    Count { what: &'static str, count: usize, room: usize },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The extents in a `struct fiemap` the kernel filled.
pub fn fiemap(b: &[u8]) -> Result<Vec<Extent>, ParseError> {
    if b.len() < FIEMAP_HEAD {
        return Err(ParseError::Short { what: "fiemap", len: b.len(), need: FIEMAP_HEAD });
    }
    let count = u32_at(b, 20) as usize;
    let room = (b.len() - FIEMAP_HEAD) / FIEMAP_EXTENT;
    if count > room {
        return Err(ParseError::Count { what: "fiemap", count, room });
    }
    Ok((0..count)
        .map(|i| {
            let at = FIEMAP_HEAD + i * FIEMAP_EXTENT;
            Extent {
                logical: u64_at(b, at),
                physical: u64_at(b, at + 8),
                length: u64_at(b, at + 16),
                flags: u32_at(b, at + 40),
            }
        })
        .collect())
}

/// The records in a `struct fsmap_head` the kernel filled.
pub fn fsmap(b: &[u8]) -> Result<Vec<MapRecord>, ParseError> {
    if b.len() < FSMAP_HEAD {
        return Err(ParseError::Short { what: "fsmap", len: b.len(), need: FSMAP_HEAD });
    }
    let count = u32_at(b, 12) as usize;
    let room = (b.len() - FSMAP_HEAD) / FSMAP_REC;
    if count > room {
        return Err(ParseError::Count { what: "fsmap", count, room });
    }
    Ok((0..count).map(|i| record(&b[FSMAP_HEAD + i * FSMAP_REC..])).collect())
}

fn record(b: &[u8]) -> MapRecord {
    MapRecord {
        device: u32_at(b, 0),
        flags: u32_at(b, 4),
        physical: u64_at(b, 8),
        owner: u64_at(b, 16),
        offset: u64_at(b, 24),
        length: u64_at(b, 32),
    }
}

/// A `struct fsmap` as bytes (the query's keys).
pub fn record_bytes(r: &MapRecord) -> [u8; FSMAP_REC] {
    let mut b = [0u8; FSMAP_REC];
    b[0..4].copy_from_slice(&r.device.to_ne_bytes());
    b[4..8].copy_from_slice(&r.flags.to_ne_bytes());
    b[8..16].copy_from_slice(&r.physical.to_ne_bytes());
    b[16..24].copy_from_slice(&r.owner.to_ne_bytes());
    b[24..32].copy_from_slice(&r.offset.to_ne_bytes());
    b[32..40].copy_from_slice(&r.length.to_ne_bytes());
    b
}

/// Physically contiguous placed extents merged into runs `(physical,
/// length)`, in file order: what a reader seeking through the file meets.
/// A file system splits extents at its own limits (ext4: 128 MiB, and at
/// unwritten/written boundaries) without moving the data; those are not
/// fragments.
pub fn runs(extents: &[Extent]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for e in extents.iter().filter(|e| e.placed() && e.length > 0) {
        match out.last_mut() {
            Some((p, l)) if p.checked_add(*l) == Some(e.physical) && l.checked_add(e.length).is_some() => {
                *l += e.length;
            }
            _ => out.push((e.physical, e.length)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fiemap_bytes(exts: &[Extent]) -> Vec<u8> {
        let mut b = vec![0u8; FIEMAP_HEAD + exts.len() * FIEMAP_EXTENT];
        b[20..24].copy_from_slice(&(exts.len() as u32).to_ne_bytes());
        for (i, e) in exts.iter().enumerate() {
            let at = FIEMAP_HEAD + i * FIEMAP_EXTENT;
            b[at..at + 8].copy_from_slice(&e.logical.to_ne_bytes());
            b[at + 8..at + 16].copy_from_slice(&e.physical.to_ne_bytes());
            b[at + 16..at + 24].copy_from_slice(&e.length.to_ne_bytes());
            b[at + 40..at + 44].copy_from_slice(&e.flags.to_ne_bytes());
        }
        b
    }

    #[test]
    fn extents_round_trip_and_contiguous_ones_merge() {
        let e = |l, p, n, f| Extent { logical: l, physical: p, length: n, flags: f };
        let exts = [e(0, 4096, 4096, 0), e(4096, 8192, 4096, 0), e(8192, 40960, 8192, 0), e(16384, 0, 4096, 0x5)];
        let parsed = fiemap(&fiemap_bytes(&exts)).unwrap();
        assert_eq!(parsed, exts);
        // The first two touch; the delayed one has no place yet.
        assert_eq!(runs(&parsed), vec![(4096, 8192), (40960, 8192)]);
    }

    #[test]
    fn a_count_beyond_the_buffer_is_refused() {
        let mut b = vec![0u8; FIEMAP_HEAD + FIEMAP_EXTENT];
        b[20..24].copy_from_slice(&2u32.to_ne_bytes());
        assert_eq!(fiemap(&b), Err(ParseError::Count { what: "fiemap", count: 2, room: 1 }));
        assert!(matches!(fsmap(&[0; 10]), Err(ParseError::Short { .. })));
    }

    #[test]
    fn map_records_round_trip() {
        let r = MapRecord {
            device: 7,
            flags: FMR_OF_SPECIAL_OWNER | FMR_OF_LAST,
            physical: 1 << 20,
            owner: 1,
            offset: 0,
            length: 65536,
        };
        let mut b = vec![0u8; FSMAP_HEAD];
        b[12..16].copy_from_slice(&1u32.to_ne_bytes());
        b.extend_from_slice(&record_bytes(&r));
        let got = fsmap(&b).unwrap();
        assert_eq!(got, vec![r]);
        assert!(got[0].is_free());
    }
}
