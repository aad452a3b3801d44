//! Immutable block files: one head generation, every series' samples as a
//! compressed chunk, an index, and a footer. Written to a temp name, fsynced,
//! then renamed, so a block either exists whole or not at all.
//!
//! ```text
//! block  = magic "KSKBLK01" | chunk* | index | footer
//! index  = varint wal_seq_covered | varint n | entry{n}
//! entry  = key | varint zigzag min_t | varint zigzag max_t | varint n_samples
//!        | varint offset | varint len | u32 crc32(chunk) LE
//! footer = u64 index_offset LE | u32 index_len LE | u32 crc32(index) LE | "KEND"
//! ```
//! See `docs/format/block.md`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use model::SeriesKey;

use crate::samples::{decode_chunk, encode_chunk};
use codec::varint::{Reader, get_key, put_i64, put_key, put_u64};

pub const BLOCK_MAGIC: &[u8; 8] = b"KSKBLK01";
const FOOTER_MAGIC: &[u8; 4] = b"KEND";
const FOOTER_LEN: u64 = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEntry {
    pub key: SeriesKey,
    pub min_t: i64,
    pub max_t: i64,
    pub n_samples: u32,
    pub offset: u64,
    pub len: u32,
    pub crc: u32,
}

/// Where an entry's bytes are in its block and what they hold: all a reader
/// needs once the block is indexed. An open store keeps this per entry, not
/// the [`BlockEntry`] (whose key the store interns once for all blocks): a
/// key with its strings is ~250 bytes of heap, and a block of the tracer's
/// few thousand series and their tiers held ~2.7 MB of them, per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub min_t: i64,
    pub max_t: i64,
    pub n_samples: u32,
    pub len: u32,
    pub offset: u64,
    pub crc: u32,
}

impl BlockEntry {
    pub fn loc(&self) -> Loc {
        Loc {
            min_t: self.min_t,
            max_t: self.max_t,
            n_samples: self.n_samples,
            len: self.len,
            offset: self.offset,
            crc: self.crc,
        }
    }
}

#[derive(Debug)]
pub struct BlockMeta {
    pub path: PathBuf,
    /// Every WAL segment up to and including this one is contained in the block.
    pub wal_seq_covered: u64,
    pub entries: Vec<BlockEntry>,
    pub file_bytes: u64,
}

impl BlockMeta {
    pub fn n_samples(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.n_samples)).sum()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: corrupt at byte {offset}: {what}")]
    Corrupt { path: PathBuf, offset: u64, what: String },
}

/// Which generations a block holds: the WAL segments `first..=last` it
/// covers. A flushed block holds one (`first == last`, named `<last>.kblk`);
/// a compacted one the run of blocks it replaced (`<first>-<last>.kblk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Generations {
    pub first: u64,
    pub last: u64,
}

pub fn block_path(dir: &Path, gens: Generations) -> PathBuf {
    if gens.first == gens.last {
        dir.join(format!("{:010}.kblk", gens.last))
    } else {
        dir.join(format!("{:010}-{:010}.kblk", gens.first, gens.last))
    }
}

/// The generations a block file's name says it holds.
pub fn parse_block_name(path: &Path) -> Option<Generations> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".kblk")?;
    let (first, last) = match stem.split_once('-') {
        Some((f, l)) => (f.parse().ok()?, l.parse().ok()?),
        None => (stem.parse().ok()?, stem.parse().ok()?),
    };
    (first <= last).then_some(Generations { first, last })
}

/// Block files in `dir` in time order of their generations: by first
/// generation, and of equal firsts the widest (a compaction) first, so a
/// compacted block comes before the blocks it replaced (which a crash may
/// leave behind between writing it and deleting them): see [`replaces`].
pub fn list_blocks(dir: &Path) -> io::Result<Vec<(Generations, PathBuf)>> {
    let mut all: Vec<(Generations, PathBuf)> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter_map(|p| Some((parse_block_name(&p)?, p)))
        .collect();
    all.sort_by_key(|(g, _)| (g.first, std::cmp::Reverse(g.last)));
    Ok(all)
}

/// Whether a block of generations `g`, listed after blocks reaching
/// generation `reach`, is replaced by one of them (a compaction holds it).
pub fn replaces(reach: Option<u64>, g: Generations) -> bool {
    reach.is_some_and(|r| g.last <= r)
}

/// Writes one block durably. `series` yields (key, timestamps, values) with
/// strictly increasing timestamps, one series at a time (a compaction
/// decodes each only when asked: memory is one series, not the block);
/// empty series are skipped. `extra(raw_index, ts, vals)` returns entries
/// derived from a series (its tiers), placed after every raw entry.
pub fn write_block<K, T, V>(
    dir: &Path,
    gens: Generations,
    series: impl Iterator<Item = (K, T, V)>,
    mut extra: impl FnMut(usize, &[i64], &[f64]) -> Vec<Blob>,
) -> Result<BlockMeta, BlockError>
where
    K: std::borrow::Borrow<SeriesKey>,
    T: AsRef<[i64]>,
    V: AsRef<[f64]>,
{
    let wal_seq_covered = gens.last;
    let path = block_path(dir, gens);
    let tmp = path.with_extension("kblk.tmp");
    let io_err = |source| BlockError::Io { path: tmp.clone(), source };
    let mut buf = Vec::with_capacity(1 << 16);
    buf.extend_from_slice(BLOCK_MAGIC);
    let mut entries = Vec::new();
    let mut derived = Vec::new();
    for (key, ts, vals) in series {
        let (key, ts, vals) = (key.borrow(), ts.as_ref(), vals.as_ref());
        if ts.is_empty() {
            continue;
        }
        derived.extend(extra(entries.len(), ts, vals));
        let chunk = encode_chunk(ts, vals);
        entries.push(BlockEntry {
            key: key.clone(),
            min_t: ts[0],
            max_t: ts[ts.len() - 1],
            n_samples: u32::try_from(ts.len()).expect("BUG: head series over 2^32 samples"),
            offset: buf.len() as u64,
            len: u32::try_from(chunk.len()).expect("BUG: chunk over 4 GiB"),
            crc: crc32fast::hash(&chunk),
        });
        buf.extend_from_slice(&chunk);
    }
    for b in derived {
        entries.push(BlockEntry {
            key: b.key,
            min_t: b.min_t,
            max_t: b.max_t,
            n_samples: b.n,
            offset: buf.len() as u64,
            len: u32::try_from(b.bytes.len()).expect("BUG: blob over 4 GiB"),
            crc: crc32fast::hash(&b.bytes),
        });
        buf.extend_from_slice(&b.bytes);
    }
    let index_offset = buf.len() as u64;
    put_u64(&mut buf, wal_seq_covered);
    put_u64(&mut buf, entries.len() as u64);
    for e in &entries {
        put_key(&mut buf, &e.key);
        put_i64(&mut buf, e.min_t);
        put_i64(&mut buf, e.max_t);
        put_u64(&mut buf, u64::from(e.n_samples));
        put_u64(&mut buf, e.offset);
        put_u64(&mut buf, u64::from(e.len));
        buf.extend_from_slice(&e.crc.to_le_bytes());
    }
    let index_len = (buf.len() as u64 - index_offset) as u32;
    let index_crc = crc32fast::hash(&buf[index_offset as usize..]);
    buf.extend_from_slice(&index_offset.to_le_bytes());
    buf.extend_from_slice(&index_len.to_le_bytes());
    buf.extend_from_slice(&index_crc.to_le_bytes());
    buf.extend_from_slice(FOOTER_MAGIC);

    let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(io_err)?;
    let written = f.write_all(&buf).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(e));
    }
    fs::rename(&tmp, &path).map_err(io_err)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err)?;
    let meta = BlockMeta { path, wal_seq_covered, entries, file_bytes: buf.len() as u64 };
    // Paired assertion: what we wrote reads back as the same index.
    debug_assert_eq!(read_block_meta(&meta.path).map(|m| m.entries).ok().as_ref(), Some(&meta.entries));
    Ok(meta)
}

/// Reads and verifies a block's footer and index (not its chunks).
pub fn read_block_meta(path: &Path) -> Result<BlockMeta, BlockError> {
    let corrupt = |offset, what: &str| BlockError::Corrupt { path: path.to_path_buf(), offset, what: what.to_owned() };
    let file = File::open(path).map_err(|source| BlockError::Io { path: path.to_path_buf(), source })?;
    let io = |source| BlockError::Io { path: path.to_path_buf(), source };
    let file_bytes = file.metadata().map_err(io)?.len();
    if file_bytes < BLOCK_MAGIC.len() as u64 + FOOTER_LEN {
        return Err(corrupt(0, "shorter than header and footer"));
    }
    let mut magic = [0u8; 8];
    file.read_exact_at(&mut magic, 0).map_err(io)?;
    if &magic != BLOCK_MAGIC {
        return Err(corrupt(0, "bad magic"));
    }
    let footer_at = file_bytes - FOOTER_LEN;
    let mut footer = [0u8; FOOTER_LEN as usize];
    file.read_exact_at(&mut footer, footer_at).map_err(io)?;
    if &footer[16..] != FOOTER_MAGIC {
        return Err(corrupt(footer_at, "bad footer magic"));
    }
    let index_offset = u64::from_le_bytes(footer[..8].try_into().expect("8"));
    let index_len = u32::from_le_bytes(footer[8..12].try_into().expect("4"));
    let index_crc = u32::from_le_bytes(footer[12..16].try_into().expect("4"));
    if index_offset < BLOCK_MAGIC.len() as u64 || index_offset.checked_add(u64::from(index_len)) != Some(footer_at) {
        return Err(corrupt(footer_at, "index bounds outside the file"));
    }
    let mut index = vec![0u8; index_len as usize];
    file.read_exact_at(&mut index, index_offset).map_err(io)?;
    if crc32fast::hash(&index) != index_crc {
        return Err(corrupt(index_offset, "index checksum mismatch"));
    }
    let mut r = Reader::new(&index);
    let bad_index = || corrupt(index_offset, "malformed index");
    let wal_seq_covered = r.u64().ok_or_else(bad_index)?;
    let n = r.u64().ok_or_else(bad_index)?;
    let mut entries = Vec::new();
    for _ in 0..n {
        let mut entry = || -> Option<BlockEntry> {
            Some(BlockEntry {
                key: get_key(&mut r)?,
                min_t: r.i64()?,
                max_t: r.i64()?,
                n_samples: r.u32()?,
                offset: r.u64()?,
                len: r.u32()?,
                crc: u32::from_le_bytes(r.fixed::<4>()?),
            })
        };
        let e = entry().ok_or_else(bad_index)?;
        if e.offset < BLOCK_MAGIC.len() as u64 || e.offset + u64::from(e.len) > index_offset || e.min_t > e.max_t {
            return Err(bad_index());
        }
        entries.push(e);
    }
    Ok(BlockMeta { path: path.to_path_buf(), wal_seq_covered, entries, file_bytes })
}

/// A pre-encoded block entry.
#[derive(Debug)]
pub struct Blob {
    pub key: SeriesKey,
    pub min_t: i64,
    pub max_t: i64,
    pub n: u32,
    pub bytes: Vec<u8>,
}

/// Reads one entry's bytes and verifies their checksum.
pub fn read_entry(file: &File, path: &Path, e: &Loc) -> Result<Vec<u8>, BlockError> {
    let mut data = Vec::new();
    read_entry_into(file, path, e, &mut data)?;
    Ok(data)
}

/// [`read_entry`] into `data` (its old bytes replaced): a reader going
/// through many entries allocates once.
pub fn read_entry_into(file: &File, path: &Path, e: &Loc, data: &mut Vec<u8>) -> Result<(), BlockError> {
    data.clear();
    data.resize(e.len as usize, 0);
    file.read_exact_at(data, e.offset).map_err(|source| BlockError::Io { path: path.to_path_buf(), source })?;
    if crc32fast::hash(data) != e.crc {
        return Err(BlockError::Corrupt {
            path: path.to_path_buf(),
            offset: e.offset,
            what: "entry checksum mismatch".into(),
        });
    }
    Ok(())
}

/// Reads, verifies and decodes one chunk, appending samples in `[from, to]`.
pub fn read_chunk(
    file: &File,
    path: &Path,
    e: &Loc,
    from: i64,
    to: i64,
    ts: &mut Vec<i64>,
    vals: &mut Vec<f64>,
) -> Result<(), BlockError> {
    let data = read_entry(file, path, e)?;
    let corrupt = |what: String| BlockError::Corrupt { path: path.to_path_buf(), offset: e.offset, what };
    // Decoded in place after what `ts`/`vals` already hold, then cut to the
    // range: no copy when the whole chunk is wanted.
    let (n0, v0) = (ts.len(), vals.len());
    if let Err(err) = decode_chunk(&data, ts, vals) {
        ts.truncate(n0);
        vals.truncate(v0);
        return Err(corrupt(format!("chunk: {err}")));
    }
    if ts.len() - n0 != e.n_samples as usize || vals.len() - v0 != e.n_samples as usize {
        let got = ts.len() - n0;
        ts.truncate(n0);
        vals.truncate(v0);
        return Err(corrupt(format!("chunk: {got} samples, index says {}", e.n_samples)));
    }
    let hi = n0 + ts[n0..].partition_point(|&x| x <= to);
    ts.truncate(hi);
    vals.truncate(v0 + (hi - n0));
    let lo = ts[n0..].partition_point(|&x| x < from);
    ts.drain(n0..n0 + lo);
    vals.drain(v0..v0 + lo);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_block(dir: &Path) -> BlockMeta {
        let a = SeriesKey::new("a", [("host", "h")]);
        let b = SeriesKey::new("b", [("host", "h")]);
        let ts: Vec<i64> = (0..100).map(|i| i * 10).collect();
        let va: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let vb: Vec<f64> = (0..100).map(|i| i as f64 * 0.25).collect();
        let gens = Generations { first: 7, last: 7 };
        write_block(dir, gens, [(&a, &ts[..], &va[..]), (&b, &ts[..], &vb[..])].into_iter(), |_, _, _| vec![]).unwrap()
    }

    #[test]
    fn writes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let meta = sample_block(dir.path());
        assert_eq!(meta.path.file_name().unwrap(), "0000000007.kblk");
        let back = read_block_meta(&meta.path).unwrap();
        assert_eq!(back.wal_seq_covered, 7);
        assert_eq!(back.entries, meta.entries);
        let f = File::open(&meta.path).unwrap();
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        read_chunk(&f, &meta.path, &back.entries[1].loc(), 500, 520, &mut ts, &mut vals).unwrap();
        assert_eq!(ts, [500, 510, 520]);
        assert_eq!(vals, [12.5, 12.75, 13.0]);
        assert_eq!(list_blocks(dir.path()).unwrap(), [(Generations { first: 7, last: 7 }, meta.path.clone())]);
    }

    #[test]
    fn block_names_order_compactions_before_what_they_replace() {
        let g = |first, last| Generations { first, last };
        for gens in [g(7, 7), g(3, 19), g(0, 9_999_999_999)] {
            assert_eq!(parse_block_name(&block_path(Path::new("/b"), gens)), Some(gens));
        }
        for bad in ["7.kblk.tmp", "x.kblk", "9-3.kblk", "1-2-3.kblk", "0000000007.wal"] {
            assert_eq!(parse_block_name(Path::new(bad)), None, "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        for gens in [g(1, 1), g(2, 2), g(3, 3), g(1, 3), g(4, 4), g(4, 6), g(5, 5), g(7, 7)] {
            fs::write(block_path(dir.path(), gens), b"").unwrap();
        }
        let listed: Vec<Generations> = list_blocks(dir.path()).unwrap().into_iter().map(|(g, _)| g).collect();
        assert_eq!(listed, [g(1, 3), g(1, 1), g(2, 2), g(3, 3), g(4, 6), g(4, 4), g(5, 5), g(7, 7)]);
        let mut reach = None;
        let kept: Vec<Generations> = listed
            .into_iter()
            .filter(|&gens| {
                let keep = !replaces(reach, gens);
                if keep {
                    reach = Some(gens.last);
                }
                keep
            })
            .collect();
        assert_eq!(kept, [g(1, 3), g(4, 6), g(7, 7)]);
    }

    #[test]
    fn truncation_and_bit_flips_are_reported_never_returned() {
        let dir = tempfile::tempdir().unwrap();
        let meta = sample_block(dir.path());
        let good = fs::read(&meta.path).unwrap();
        let bad_path = dir.path().join("bad.kblk");
        for cut in 0..good.len() {
            fs::write(&bad_path, &good[..cut]).unwrap();
            assert!(read_block_meta(&bad_path).is_err(), "truncated at {cut} accepted");
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            fs::write(&bad_path, &bad).unwrap();
            let Ok(m) = read_block_meta(&bad_path) else {
                continue;
            };
            // Index intact: the flip is in a chunk, and reading it must fail.
            let f = File::open(&bad_path).unwrap();
            let failures = m
                .entries
                .iter()
                .filter(|e| read_chunk(&f, &bad_path, &e.loc(), i64::MIN, i64::MAX, &mut vec![], &mut vec![]).is_err())
                .count();
            assert_eq!(failures, 1, "flip at {i} not detected in exactly one chunk");
        }
    }
}
