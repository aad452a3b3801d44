//! The only unsafe code of the crate: `FS_IOC_FIEMAP` (a file's extents)
//! and `FS_IOC_GETFSMAP` (the file system's map, free space included) into
//! a buffer of plain words the kernel fills; the answers are read safely by
//! `parse`. Both queries continue where the last answer ended until the
//! kernel marks a record the last.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use crate::parse::{
    self, Extent, FIEMAP_EXTENT, FIEMAP_EXTENT_LAST, FIEMAP_HEAD, FMR_OF_LAST, FSMAP_HEAD, FSMAP_REC, MapRecord,
};

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// `_IOWR('X', 59, struct fsmap_head)`.
const FS_IOC_GETFSMAP: libc::c_ulong = 0xC0C0_583B;
/// Extents (or records) asked for per call.
const PER_CALL: usize = 256;

/// Runs `request` on `fd` over `bytes` (copied into 8-byte aligned words
/// and back: the structs hold u64s).
fn call(fd: &File, request: libc::c_ulong, bytes: &mut [u8]) -> io::Result<()> {
    debug_assert_eq!(bytes.len() % 8, 0);
    let mut words: Vec<u64> =
        bytes.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect();
    // SAFETY: `words` is a live, writable, 8-byte aligned buffer of
    // `bytes.len()` bytes laid out as the request's struct followed by room
    // for the count of records the header allows; the kernel writes no
    // further than that count.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, words.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    for (c, w) in bytes.chunks_exact_mut(8).zip(&words) {
        c.copy_from_slice(&w.to_ne_bytes());
    }
    Ok(())
}

/// Every extent of `file`, in file order. Delayed allocations are returned
/// as the kernel reports them (flagged, no place): the file is not synced.
pub fn file_extents(file: &File) -> io::Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut b = vec![0u8; FIEMAP_HEAD + PER_CALL * FIEMAP_EXTENT];
        b[0..8].copy_from_slice(&start.to_ne_bytes());
        b[8..16].copy_from_slice(&(u64::MAX - start).to_ne_bytes());
        b[24..28].copy_from_slice(&(PER_CALL as u32).to_ne_bytes());
        call(file, FS_IOC_FIEMAP, &mut b)?;
        let got = parse::fiemap(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let Some(last) = got.last().copied() else { return Ok(out) };
        out.extend_from_slice(&got);
        if last.flags & FIEMAP_EXTENT_LAST != 0 || got.len() < PER_CALL {
            return Ok(out);
        }
        start = last.logical + last.length;
    }
}

/// The file system's whole map (the file system `file` is on): free
/// space, metadata and (where it knows owners) files. Unsupported file
/// systems answer `ENOTTY` or `EOPNOTSUPP`.
pub fn fs_map(file: &File) -> io::Result<Vec<MapRecord>> {
    let mut out = Vec::new();
    let mut low = MapRecord { device: 0, flags: 0, physical: 0, owner: 0, offset: 0, length: 0 };
    let high = MapRecord {
        device: u32::MAX,
        flags: u32::MAX,
        physical: u64::MAX,
        owner: u64::MAX,
        offset: u64::MAX,
        length: 0,
    };
    loop {
        let mut b = vec![0u8; FSMAP_HEAD + PER_CALL * FSMAP_REC];
        b[8..12].copy_from_slice(&(PER_CALL as u32).to_ne_bytes());
        b[64..128].copy_from_slice(&parse::record_bytes(&low));
        b[128..192].copy_from_slice(&parse::record_bytes(&high));
        call(file, FS_IOC_GETFSMAP, &mut b)?;
        let got = parse::fsmap(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let Some(last) = got.last().copied() else { return Ok(out) };
        out.extend_from_slice(&got);
        if last.flags & FMR_OF_LAST != 0 || got.len() < PER_CALL {
            return Ok(out);
        }
        // The next call starts after the last record (the kernel adds its
        // length to the low key).
        low = last;
    }
}
