//! Immutable block files: one head generation, every series' samples as a
//! compressed chunk, an index, and a footer. Written to a temp name, fsynced,
//! then renamed, so a block either exists whole or not at all.
//!
//! ```text
//! block  = magic "KSKBLK01" | (chunk frame{1..64} | keys frame)* | index | footer
//! frame  = u32 len LE | u32 crc32(payload) LE | payload      (codec::frame)
//! chunk frame payload = 0x01 | varint i | chunk
//! keys frame payload  = 0x02 | varint first i | varint count | varint raw_len | zstd(key entry{count})
//!                       (raw_len 0: the key entries as they are)
//! key entry = key | varint zigzag min_t | varint zigzag max_t | varint n_samples
//! index  = varint raw_len | zstd(plain index)                    (footer "KENZ")
//!        | plain index                                          (footer "KEND", before 2026-11-28)
//! plain index = varint wal_seq_covered | varint n | entry{n}
//! entry  = key | varint zigzag min_t | varint zigzag max_t | varint n_samples
//!        | varint offset | varint len | u32 crc32(chunk) LE
//! footer = u64 index_offset LE | u32 index_len LE | u32 crc32(index) LE | "KENZ" or "KEND"
//! ```
//! The index points at each chunk inside its frame. The frames (each chunk
//! with its number `i` in the index, and a compressed copy of the index's
//! keys, [`KEYS_PER_FRAME`] entries a frame) let a block whose index is
//! damaged be read by scanning them ([`recover_block`]).
//! See `docs/format/block.md`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use model::SeriesKey;

use crate::samples::{decode_chunk, encode_chunk};
use crate::tier;
use codec::frame::{begin_frame, end_frame};
use codec::varint::{Reader, get_key, put_i64, put_key, put_u64};

pub const BLOCK_MAGIC: &[u8; 8] = b"KSKBLK01";
const FOOTER_MAGIC: &[u8; 4] = b"KEND";
/// The footer of a block whose index is zstd-compressed (since 2026-11-28).
const FOOTER_MAGIC_ZSTD: &[u8; 4] = b"KENZ";
const INDEX_ZSTD_LEVEL: i32 = 3;
/// Most bytes a compressed index may inflate to, as a multiple of its
/// compressed size (plus a MiB): a damaged or hostile length cannot make a
/// reader allocate without bound.
const INDEX_INFLATE_MAX: usize = 256;
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
    // Entries whose keys a keys frame holds (written after each
    // KEYS_PER_FRAME chunk frames, and after the last).
    let mut keyed = 0;
    for (key, ts, vals) in series {
        let (key, ts, vals) = (key.borrow(), ts.as_ref(), vals.as_ref());
        if ts.is_empty() {
            continue;
        }
        derived.extend(extra(entries.len(), ts, vals));
        let chunk = encode_chunk(ts, vals);
        let n = u32::try_from(ts.len()).expect("BUG: head series over 2^32 samples");
        push_framed(&mut buf, &mut entries, key.clone(), ts[0], ts[ts.len() - 1], n, &chunk);
        keyed = push_keys(&mut buf, &entries, keyed, false);
    }
    for b in derived {
        push_framed(&mut buf, &mut entries, b.key, b.min_t, b.max_t, b.n, &b.bytes);
        keyed = push_keys(&mut buf, &entries, keyed, false);
    }
    push_keys(&mut buf, &entries, keyed, true);
    let index_offset = buf.len() as u64;
    let mut index = Vec::with_capacity(entries.len() * 64);
    put_u64(&mut index, wal_seq_covered);
    put_u64(&mut index, entries.len() as u64);
    for e in &entries {
        put_key(&mut index, &e.key);
        put_i64(&mut index, e.min_t);
        put_i64(&mut index, e.max_t);
        put_u64(&mut index, u64::from(e.n_samples));
        put_u64(&mut index, e.offset);
        put_u64(&mut index, u64::from(e.len));
        index.extend_from_slice(&e.crc.to_le_bytes());
    }
    // The index's keys repeat each other (the same names and labels): zstd
    // takes it to a fifth or less (issue 48: 0.08 of the 0.22 B a sample
    // of `up --interval 10ms` was the plain index).
    let magic = match codec::zctx::compress(&index, INDEX_ZSTD_LEVEL).filter(|z| z.len() < index.len()) {
        Some(z) => {
            put_u64(&mut buf, index.len() as u64);
            buf.extend_from_slice(&z);
            FOOTER_MAGIC_ZSTD
        }
        None => {
            buf.extend_from_slice(&index);
            FOOTER_MAGIC
        }
    };
    let index_len = (buf.len() as u64 - index_offset) as u32;
    let index_crc = crc32fast::hash(&buf[index_offset as usize..]);
    buf.extend_from_slice(&index_offset.to_le_bytes());
    buf.extend_from_slice(&index_len.to_le_bytes());
    buf.extend_from_slice(&index_crc.to_le_bytes());
    buf.extend_from_slice(magic);

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

const FRAME_CHUNK: u8 = 1;
const FRAME_KEYS: u8 = 2;

/// Index entries whose keys one keys frame copies.
pub const KEYS_PER_FRAME: usize = 64;

/// Appends one entry's chunk in its frame (with its number in the index),
/// and its index entry.
fn push_framed(
    buf: &mut Vec<u8>,
    entries: &mut Vec<BlockEntry>,
    key: SeriesKey,
    min_t: i64,
    max_t: i64,
    n_samples: u32,
    chunk: &[u8],
) {
    let start = begin_frame(buf);
    buf.push(FRAME_CHUNK);
    put_u64(buf, entries.len() as u64);
    let offset = buf.len() as u64;
    buf.extend_from_slice(chunk);
    assert!(buf.len() - start <= u32::MAX as usize, "BUG: a block entry over 4 GiB");
    end_frame(buf, start);
    entries.push(BlockEntry {
        key,
        min_t,
        max_t,
        n_samples,
        offset,
        len: chunk.len() as u32,
        crc: crc32fast::hash(chunk),
    });
}

/// Appends a keys frame for the entries from `keyed` on, once there are
/// [`KEYS_PER_FRAME`] of them (or any, at the `end`): what the index says of
/// each entry but where it is (its chunk frame says that), zstd-compressed.
/// Returns the entries keyed now.
fn push_keys(buf: &mut Vec<u8>, entries: &[BlockEntry], keyed: usize, end: bool) -> usize {
    let page = &entries[keyed..];
    if page.is_empty() || (page.len() < KEYS_PER_FRAME && !end) {
        return keyed;
    }
    let mut raw = Vec::new();
    for e in page {
        put_key(&mut raw, &e.key);
        put_i64(&mut raw, e.min_t);
        put_i64(&mut raw, e.max_t);
        put_u64(&mut raw, u64::from(e.n_samples));
    }
    let start = begin_frame(buf);
    buf.push(FRAME_KEYS);
    put_u64(buf, keyed as u64);
    put_u64(buf, page.len() as u64);
    match codec::zctx::compress(&raw, KEYS_ZSTD_LEVEL) {
        Some(z) => {
            put_u64(buf, raw.len() as u64);
            buf.extend_from_slice(&z);
        }
        None => {
            put_u64(buf, 0);
            buf.extend_from_slice(&raw);
        }
    }
    end_frame(buf, start);
    entries.len()
}

const KEYS_ZSTD_LEVEL: i32 = 3;

/// A keys frame's entries: (first i, [(key, min_t, max_t, n_samples)]).
type Keys = (u64, Vec<(SeriesKey, i64, i64, u32)>);

/// Where a block's index is, from its footer.
#[derive(Debug, Clone, Copy)]
struct Footer {
    index_offset: u64,
    index_len: u32,
    index_crc: u32,
    /// `KENZ`: the index is `varint raw_len | zstd(index)`.
    compressed: bool,
}

/// The footer's index offset, length, checksum and form, checked against
/// the file's length.
fn parse_footer(footer: &[u8; FOOTER_LEN as usize], file_bytes: u64) -> Result<Footer, (u64, &'static str)> {
    let footer_at = file_bytes - FOOTER_LEN;
    let compressed = match &footer[16..] {
        m if m == FOOTER_MAGIC => false,
        m if m == FOOTER_MAGIC_ZSTD => true,
        _ => return Err((footer_at, "bad footer magic")),
    };
    let index_offset = u64::from_le_bytes(footer[..8].try_into().expect("8"));
    let index_len = u32::from_le_bytes(footer[8..12].try_into().expect("4"));
    let index_crc = u32::from_le_bytes(footer[12..16].try_into().expect("4"));
    if index_offset < BLOCK_MAGIC.len() as u64 || index_offset.checked_add(u64::from(index_len)) != Some(footer_at) {
        return Err((footer_at, "index bounds outside the file"));
    }
    Ok(Footer { index_offset, index_len, index_crc, compressed })
}

/// The index's (wal_seq_covered, entries) from its bytes as the footer
/// describes them (checksum already verified): inflated first if compressed.
fn read_index(index: &[u8], footer: &Footer) -> Option<(u64, Vec<BlockEntry>)> {
    if !footer.compressed {
        return parse_index(index, footer.index_offset);
    }
    let mut r = Reader::new(index);
    let raw_len = usize::try_from(r.u64()?).ok()?;
    let z = &index[index.len() - r.remaining()..];
    if raw_len > z.len().saturating_mul(INDEX_INFLATE_MAX).saturating_add(1 << 20) {
        return None;
    }
    let raw = codec::zctx::decompress(z, raw_len).filter(|raw| raw.len() == raw_len)?;
    parse_index(&raw, footer.index_offset)
}

/// The index's (wal_seq_covered, entries), its checksum already verified.
fn parse_index(index: &[u8], index_offset: u64) -> Option<(u64, Vec<BlockEntry>)> {
    let mut r = Reader::new(index);
    let wal_seq_covered = r.u64()?;
    let n = r.u64()?;
    let mut entries = Vec::new();
    for _ in 0..n {
        let e = BlockEntry {
            key: get_key(&mut r)?,
            min_t: r.i64()?,
            max_t: r.i64()?,
            n_samples: r.u32()?,
            offset: r.u64()?,
            len: r.u32()?,
            crc: u32::from_le_bytes(r.fixed::<4>()?),
        };
        if e.offset < BLOCK_MAGIC.len() as u64 || e.offset + u64::from(e.len) > index_offset || e.min_t > e.max_t {
            return None;
        }
        entries.push(e);
    }
    Some((wal_seq_covered, entries))
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
    let mut footer = [0u8; FOOTER_LEN as usize];
    file.read_exact_at(&mut footer, file_bytes - FOOTER_LEN).map_err(io)?;
    let f = parse_footer(&footer, file_bytes).map_err(|(at, what)| corrupt(at, what))?;
    let mut index = vec![0u8; f.index_len as usize];
    file.read_exact_at(&mut index, f.index_offset).map_err(io)?;
    if crc32fast::hash(&index) != f.index_crc {
        return Err(corrupt(f.index_offset, "index checksum mismatch"));
    }
    let (wal_seq_covered, entries) =
        read_index(&index, &f).ok_or_else(|| corrupt(f.index_offset, "malformed index"))?;
    Ok(BlockMeta { path: path.to_path_buf(), wal_seq_covered, entries, file_bytes })
}

/// A block read without its index: see [`recover_block`].
#[derive(Debug)]
pub struct Recovered {
    pub meta: BlockMeta,
    /// Entries known lost: damaged stretches between (or before, or after)
    /// the frames found, and entries of which only the chunk or only the
    /// key was found.
    pub lost: u64,
    /// How it was read, for the log.
    pub how: String,
}

/// Reads a block whose footer, index or magic did not verify
/// ([`read_block_meta`] failed): from its index if only the magic is
/// damaged, else by scanning the file for its frames, each verified by its
/// own checksum, and joining each chunk to its key by its number in the
/// index (tiers renumbered to their raw entries' new places; a tier whose
/// raw entry was lost is dropped). `wal_seq_covered` is the generation the
/// block's name gives. Blocks written before frames have none: an error.
pub fn recover_block(path: &Path) -> Result<Recovered, BlockError> {
    let corrupt = |offset, what: &str| BlockError::Corrupt { path: path.to_path_buf(), offset, what: what.to_owned() };
    let data = fs::read(path).map_err(|source| BlockError::Io { path: path.to_path_buf(), source })?;
    let file_bytes = data.len() as u64;
    let gens = parse_block_name(path).ok_or_else(|| corrupt(0, "not a block's name"))?;
    // The index, whatever the magic says: it verifies by its own checksum.
    let from_footer = data
        .last_chunk::<{ FOOTER_LEN as usize }>()
        .filter(|_| file_bytes >= BLOCK_MAGIC.len() as u64 + FOOTER_LEN)
        .and_then(|f| parse_footer(f, file_bytes).ok());
    if let Some(f) = from_footer {
        let index = &data[f.index_offset as usize..f.index_offset as usize + f.index_len as usize];
        if crc32fast::hash(index) == f.index_crc
            && let Some((wal_seq_covered, entries)) = read_index(index, &f)
        {
            let meta = BlockMeta { path: path.to_path_buf(), wal_seq_covered, entries, file_bytes };
            return Ok(Recovered { meta, lost: 0, how: "from its index (the magic alone was damaged)".into() });
        }
    }
    // Every frame that verifies, in file order; the stretches between are damage.
    let mut chunks: std::collections::BTreeMap<u64, (u64, u32, u32)> = std::collections::BTreeMap::new();
    let mut keys: std::collections::BTreeMap<u64, (SeriesKey, i64, i64, u32)> = std::collections::BTreeMap::new();
    let mut stretches = 0u64;
    let magic = BLOCK_MAGIC.len().min(data.len());
    // Frames end where the index starts, if the footer's bounds hold (the
    // index's checksum failed): no search through the index's bytes.
    let end = from_footer.map_or(data.len(), |f| f.index_offset as usize);
    let frames = &data[..end];
    let (mut pos, mut last_end) = (magic, magic);
    while pos < end {
        match frame_at(frames, pos) {
            Some((frame, next)) => {
                match frame {
                    Frame::Chunk { i, offset, len } => {
                        let crc = crc32fast::hash(&data[offset as usize..offset as usize + len as usize]);
                        chunks.entry(i).or_insert((offset, len, crc));
                    }
                    Frame::Keys((first, page)) => {
                        for (k, entry) in page.into_iter().enumerate() {
                            keys.entry(first + k as u64).or_insert(entry);
                        }
                    }
                }
                pos = next;
                last_end = next;
            }
            None => match (pos + 1..end).find(|&p| frame_at(frames, p).is_some()) {
                Some(p) => {
                    stretches += 1;
                    pos = p;
                }
                // The rest is the index and footer, or damage up to them.
                None => break,
            },
        }
    }
    // Past the last frame comes the index: where the footer says, if its
    // bounds hold (else what lies there is not known).
    if from_footer.is_some() && end > last_end {
        stretches += 1;
    }
    if chunks.is_empty() {
        return Err(corrupt(
            magic as u64,
            "index damaged, and no chunk frames found (a block from before they were written?)",
        ));
    }
    // Each chunk joined to its key by its number; raw entries first, in index order.
    let mut unmatched = 0u64;
    let mut joined: Vec<(u64, BlockEntry)> = Vec::new();
    for (&i, &(offset, len, crc)) in &chunks {
        match keys.remove(&i) {
            Some((key, min_t, max_t, n_samples)) => {
                joined.push((i, BlockEntry { key, min_t, max_t, n_samples, offset, len, crc }));
            }
            None => unmatched += 1,
        }
    }
    unmatched += keys.len() as u64;
    let (tiers, raw): (Vec<_>, Vec<_>) = joined.into_iter().partition(|(_, e)| tier::parse_tier_key(&e.key).is_some());
    let place: std::collections::HashMap<u64, usize> = raw.iter().enumerate().map(|(k, (i, _))| (*i, k)).collect();
    let n_raw = raw.len();
    let mut entries: Vec<BlockEntry> = raw.into_iter().map(|(_, e)| e).collect();
    for (_, mut e) in tiers {
        let (raw_index, res) = tier::parse_tier_key(&e.key).expect("partitioned as a tier");
        let name = tier::RESOLUTIONS.iter().find(|r| r.0 == res).expect("a parsed resolution").1;
        if let Some(&k) = place.get(&(raw_index as u64)) {
            e.key = tier::tier_key(k, name);
            entries.push(e);
        }
    }
    if entries.is_empty() {
        return Err(corrupt(magic as u64, "index damaged, and no chunk frame with its key found"));
    }
    let lost = stretches + unmatched;
    let how = format!(
        "by scanning its frames: {} entries ({n_raw} series); {stretches} damaged stretch(es) skipped, {unmatched} entries without their chunk or key",
        entries.len()
    );
    let meta = BlockMeta { path: path.to_path_buf(), wal_seq_covered: gens.last, entries, file_bytes };
    Ok(Recovered { meta, lost, how })
}

/// A frame found by [`frame_at`].
enum Frame {
    /// Entry `i`'s chunk: its bytes' place.
    Chunk {
        i: u64,
        offset: u64,
        len: u32,
    },
    Keys(Keys),
}

/// The frame at `p`, if one verifies there, and where the next one starts.
fn frame_at(data: &[u8], p: usize) -> Option<(Frame, usize)> {
    let head = data.get(p..p + 8)?;
    let len = u32::from_le_bytes(head[..4].try_into().expect("4")) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4"));
    let payload = data.get(p + 8..(p + 8).checked_add(len)?)?;
    // Cheap refusals first: most offsets fail here, before any checksum.
    let kind = *payload.first()?;
    if !matches!(kind, FRAME_CHUNK | FRAME_KEYS) || crc32fast::hash(payload) != crc {
        return None;
    }
    let mut r = Reader::new(&payload[1..]);
    let frame = match kind {
        FRAME_CHUNK => {
            let i = r.u64()?;
            let len = u32::try_from(r.remaining()).ok().filter(|&l| l > 0)?;
            Frame::Chunk { i, offset: (p + 8 + payload.len()) as u64 - u64::from(len), len }
        }
        _ => {
            let (first, count, raw_len) = (r.u64()?, r.u64()?, usize::try_from(r.u64()?).ok()?);
            let body = r.bytes(r.remaining())?;
            let unpacked;
            let raw = if raw_len == 0 {
                body
            } else {
                unpacked = codec::zctx::decompress(body, raw_len).filter(|u| u.len() == raw_len)?;
                &unpacked[..]
            };
            let mut r = Reader::new(raw);
            let mut page = Vec::new();
            for _ in 0..count.min(KEYS_PER_FRAME as u64) {
                page.push((get_key(&mut r)?, r.i64()?, r.i64()?, r.u32()?));
            }
            if r.remaining() != 0 || page.len() as u64 != count || page.iter().any(|e| e.1 > e.2) {
                return None;
            }
            Frame::Keys((first, page))
        }
    };
    Some((frame, p + 8 + len))
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
    use crate::tier::TierBytes;

    fn sample_block(dir: &Path) -> BlockMeta {
        let a = SeriesKey::new("a", [("host", "h")]);
        let b = SeriesKey::new("b", [("host", "h")]);
        let ts: Vec<i64> = (0..100).map(|i| i * 10).collect();
        let va: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let vb: Vec<f64> = (0..100).map(|i| i as f64 * 0.25).collect();
        let gens = Generations { first: 7, last: 7 };
        write_block(dir, gens, [(&a, &ts[..], &va[..]), (&b, &ts[..], &vb[..])].into_iter(), |_, _, _| vec![]).unwrap()
    }

    /// Forty series: a block whose index compresses.
    fn many_series_block(dir: &Path) -> BlockMeta {
        let keys: Vec<SeriesKey> =
            (0..40).map(|i| SeriesKey::new("m", [("host", "h"), ("i", &i.to_string())])).collect();
        let ts: Vec<i64> = (0..100).map(|i| i * 10).collect();
        let vals: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let series = keys.iter().map(|k| (k, &ts[..], &vals[..]));
        write_block(dir, Generations { first: 7, last: 7 }, series, |_, _, _| vec![]).unwrap()
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

    /// Blocks written before 2026-11-28 hold their index plain (footer
    /// `KEND`): the same block with its index inflated in place and that
    /// footer reads back as the same entries, and its chunks as before. A
    /// compressed index claiming more than it may inflate to is refused.
    #[test]
    fn a_plain_index_of_older_blocks_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        // Forty series (two compress to more than they are: written plain).
        let meta = many_series_block(dir.path());
        let new = fs::read(&meta.path).unwrap();
        assert_eq!(&new[new.len() - 4..], FOOTER_MAGIC_ZSTD, "written compressed");
        let small = dir.path().join("small");
        fs::create_dir(&small).unwrap();
        let plain_small = fs::read(sample_block(&small).path);
        assert_eq!(plain_small.map(|b| b[b.len() - 4..] == *FOOTER_MAGIC).ok(), Some(true));
        let f = parse_footer(new.last_chunk::<{ FOOTER_LEN as usize }>().unwrap(), new.len() as u64).unwrap();
        let at = f.index_offset as usize;
        let mut r = Reader::new(&new[at..at + f.index_len as usize]);
        let raw_len = r.u64().unwrap() as usize;
        let plain = codec::zctx::decompress(
            &new[new.len() - FOOTER_LEN as usize - r.remaining()..new.len() - FOOTER_LEN as usize],
            raw_len,
        )
        .unwrap();
        let mut old = new[..at].to_vec();
        old.extend_from_slice(&plain);
        old.extend_from_slice(&f.index_offset.to_le_bytes());
        old.extend_from_slice(&(plain.len() as u32).to_le_bytes());
        old.extend_from_slice(&crc32fast::hash(&plain).to_le_bytes());
        old.extend_from_slice(FOOTER_MAGIC);
        let old_path = dir.path().join("0000000008.kblk");
        fs::write(&old_path, &old).unwrap();
        let back = read_block_meta(&old_path).unwrap();
        assert_eq!((back.wal_seq_covered, &back.entries), (7, &meta.entries));
        let file = File::open(&old_path).unwrap();
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        read_chunk(&file, &old_path, &back.entries[0].loc(), 0, 20, &mut ts, &mut vals).unwrap();
        assert_eq!((ts, vals), (vec![0, 10, 20], vec![0.0, 1.0, 2.0]));
        // A length past what the compressed bytes may inflate to.
        let mut huge = Vec::new();
        put_u64(&mut huge, (1 << 30) as u64);
        huge.extend_from_slice(&new[new.len() - FOOTER_LEN as usize - r.remaining()..new.len() - FOOTER_LEN as usize]);
        assert!(read_index(&huge, &Footer { index_len: huge.len() as u32, ..f }).is_none());
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
        let plain = dir.path().join("plain");
        fs::create_dir(&plain).unwrap();
        // A block with its index plain, and one with it compressed.
        for meta in [sample_block(&plain), many_series_block(dir.path())] {
            truncated_and_flipped(dir.path(), &meta);
        }
    }

    fn truncated_and_flipped(dir: &Path, meta: &BlockMeta) {
        let good = fs::read(&meta.path).unwrap();
        let bad_path = dir.join("bad.kblk");
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
            // Index intact: a flip in a chunk fails that chunk's read; one in
            // a frame's head (outside every chunk) fails none.
            let f = File::open(&bad_path).unwrap();
            let failures = m
                .entries
                .iter()
                .filter(|e| read_chunk(&f, &bad_path, &e.loc(), i64::MIN, i64::MAX, &mut vec![], &mut vec![]).is_err())
                .count();
            let in_chunk =
                m.entries.iter().filter(|e| (e.offset..e.offset + u64::from(e.len)).contains(&(i as u64))).count();
            assert_eq!(failures, in_chunk, "flip at {i}: detected in the chunk holding it, and only there");
        }
    }

    /// A block of three series with a tier each (the tiers name their raw
    /// entries by index), the byte ranges of its entries' chunk frames, and
    /// that of its keys frame (one: six entries).
    fn framed_block(dir: &Path) -> (BlockMeta, Vec<std::ops::Range<usize>>, std::ops::Range<usize>) {
        let keys: Vec<SeriesKey> = (0..3).map(|i| SeriesKey::new("m", [("i", i.to_string())])).collect();
        let ts: Vec<i64> = (0..50).map(|i| i * 400_000_000).collect();
        let vals: Vec<Vec<f64>> = (0..3).map(|k| (0..50).map(|i| (i * (k + 1)) as f64 * 0.5).collect()).collect();
        let series = keys.iter().zip(&vals).map(|(k, v)| (k, &ts[..], &v[..]));
        let meta = write_block(dir, Generations { first: 9, last: 9 }, series, |raw, ts, vals| {
            let t = tier::Tier::build(ts, vals, tier::SECOND);
            vec![Blob {
                key: tier::tier_key(raw, "1s"),
                min_t: t.ts[0],
                max_t: t.ts[t.ts.len() - 1],
                n: t.ts.len() as u32,
                bytes: t.encode(),
            }]
        })
        .unwrap();
        let data = fs::read(&meta.path).unwrap();
        let chunks_end = meta.entries.iter().map(|e| e.offset + u64::from(e.len)).max().unwrap() as usize;
        let mut frames = Vec::new();
        let mut pos = BLOCK_MAGIC.len();
        while pos < chunks_end {
            let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
            frames.push(pos..pos + 8 + len);
            pos += 8 + len;
        }
        assert_eq!((pos, frames.len()), (chunks_end, meta.entries.len()), "chunk frames back to back, one per entry");
        // Then the keys frame, then the index.
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
        assert_eq!(data[pos + 8], FRAME_KEYS);
        let index_at = u64::from_le_bytes(data[data.len() - 20..data.len() - 12].try_into().unwrap());
        assert_eq!(index_at as usize, pos + 8 + len);
        (meta, frames, pos..pos + 8 + len)
    }

    /// What a block serves, by what each entry is: (series key, tier
    /// resolution or 0 for the raw entry) -> its chunk's bytes, read and verified.
    fn served(path: &Path, meta: &BlockMeta) -> std::collections::BTreeMap<(SeriesKey, i64), Vec<u8>> {
        let f = File::open(path).unwrap();
        let mut out = std::collections::BTreeMap::new();
        for e in &meta.entries {
            let what = match tier::parse_tier_key(&e.key) {
                Some((raw, res)) => (meta.entries[raw].key.clone(), res),
                None => (e.key.clone(), 0),
            };
            if let Ok(bytes) = read_entry(&f, path, &e.loc()) {
                assert!(out.insert(what, bytes).is_none(), "an entry served twice");
            }
        }
        out
    }

    /// Issue 42: a flipped byte anywhere in a block costs at most the entry
    /// whose chunk frame holds it: a damaged index, footer or magic is read
    /// around (by the index, or by scanning the frames and joining each
    /// chunk to its key), and every entry whose chunk is intact is served as
    /// written, its tier still naming it.
    #[test]
    fn every_flipped_byte_loses_at_most_the_entry_it_is_in() {
        let dir = tempfile::tempdir().unwrap();
        let (meta, frames, keys) = framed_block(dir.path());
        let good = fs::read(&meta.path).unwrap();
        let all = served(&meta.path, &meta);
        assert_eq!(all.len(), 6);
        let bad_path = dir.path().join("0000000009-0000000009.kblk");
        let mut recovered = 0;
        for i in 0..good.len() {
            for bit in [0, 4, 7] {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                fs::write(&bad_path, &bad).unwrap();
                let back = read_block_meta(&bad_path).or_else(|_| {
                    recovered += 1;
                    recover_block(&bad_path).map(|r| r.meta)
                });
                let back = back.unwrap_or_else(|e| panic!("flip at {i}: nothing served: {e}"));
                assert_eq!(back.wal_seq_covered, 9);
                let got = served(&bad_path, &back);
                let holder = frames.iter().position(|f| f.contains(&i));
                for (k, (what, bytes)) in all.iter().enumerate() {
                    let entry = meta.entries.iter().position(|e| {
                        let w = tier::parse_tier_key(&e.key)
                            .map_or((e.key.clone(), 0), |(r, res)| (meta.entries[r].key.clone(), res));
                        w == *what
                    });
                    match got.get(what) {
                        Some(b) => assert_eq!(b, bytes, "flip at {i}: {what:?} served wrong bytes"),
                        None => {
                            assert_eq!(entry, holder, "flip at {i}: lost entry {k} ({what:?}), whose frame is intact")
                        }
                    }
                }
            }
        }
        assert!(recovered > 0, "some flips needed recovery");
        // A damaged chunk frame and a damaged index: the scan skips the
        // frame, and the tiers after it still name their own series
        // (renumbered). (Both copies of the keys damaged, the index's and
        // the keys frame's: nothing can name the chunks.)
        let index_at = keys.end;
        let mut bad = good.clone();
        bad[keys.start + keys.len() / 2] ^= 0x20;
        bad[index_at + 3] ^= 0x20;
        fs::write(&bad_path, &bad).unwrap();
        assert!(recover_block(&bad_path).is_err());
        for (j, frame) in frames.iter().enumerate() {
            let mut bad = good.clone();
            bad[frame.start + frame.len() / 2] ^= 0x20;
            bad[index_at + 3] ^= 0x20;
            fs::write(&bad_path, &bad).unwrap();
            assert!(read_block_meta(&bad_path).is_err());
            let r = recover_block(&bad_path).unwrap();
            assert_eq!(r.lost, 2, "frame {j}: a damaged stretch, a key without its chunk");
            let got = served(&bad_path, &r.meta);
            let lost = |e: usize| e == j || tier::parse_tier_key(&meta.entries[e].key).is_some_and(|(raw, _)| raw == j);
            let want: Vec<_> = all
                .iter()
                .filter(|(what, _)| {
                    let e = meta.entries.iter().position(|e| {
                        tier::parse_tier_key(&e.key)
                            .map_or((e.key.clone(), 0), |(r, res)| (meta.entries[r].key.clone(), res))
                            == **what
                    });
                    !lost(e.unwrap())
                })
                .collect();
            assert_eq!(got.iter().collect::<Vec<_>>(), want, "frame {j} and the index damaged");
        }
        // Cut anywhere: every entry whose chunk frame and keys frame are
        // whole before the cut (a tier needing its raw entry too).
        for cut in BLOCK_MAGIC.len() + 1..good.len() {
            fs::write(&bad_path, &good[..cut]).unwrap();
            let whole = if keys.end <= cut { frames.iter().filter(|f| f.end <= cut).count() } else { 0 };
            match recover_block(&bad_path) {
                Ok(r) => {
                    let got = served(&bad_path, &r.meta);
                    // A tier whose raw entry was cut goes with it.
                    let want: Vec<_> = all
                        .iter()
                        .filter(|(what, _)| {
                            let raw = meta.entries.iter().position(|e| e.key == what.0).unwrap();
                            let tier =
                                meta.entries.iter().position(|e| tier::parse_tier_key(&e.key) == Some((raw, what.1)));
                            keys.end <= cut
                                && frames[raw].end <= cut
                                && (what.1 == 0 || frames[tier.unwrap()].end <= cut)
                        })
                        .collect();
                    assert_eq!(got.iter().collect::<Vec<_>>(), want, "cut at {cut}");
                }
                Err(_) => assert_eq!(whole, 0, "cut at {cut}: {whole} whole frames, none found"),
            }
        }
    }

    /// Random damage (bytes overwritten, runs of garbage, cuts): recovery
    /// never panics, and never serves bytes that were not written as the
    /// entry it says.
    #[test]
    fn recovery_never_serves_what_was_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let (meta, _, _) = framed_block(dir.path());
        let good = fs::read(&meta.path).unwrap();
        let all = served(&meta.path, &meta);
        let bad_path = dir.path().join("0000000009.kblk");
        let mut rng = fastrand::Rng::with_seed(42);
        for round in 0..1500 {
            let mut bad = good.clone();
            match round % 3 {
                0 => (0..rng.usize(1..6)).for_each(|_| {
                    let i = rng.usize(..bad.len());
                    bad[i] = rng.u8(..);
                }),
                1 => {
                    let from = rng.usize(..bad.len());
                    let to = (from + rng.usize(1..200)).min(bad.len());
                    rng.fill(&mut bad[from..to]);
                }
                _ => {
                    bad.truncate(rng.usize(..bad.len()));
                    if !bad.is_empty() {
                        let i = rng.usize(..bad.len());
                        bad[i] ^= 0x81;
                    }
                }
            }
            fs::write(&bad_path, &bad).unwrap();
            let Ok(r) = recover_block(&bad_path) else { continue };
            for e in &r.meta.entries {
                assert!(e.offset + u64::from(e.len) <= bad.len() as u64, "round {round}: an entry past the end");
            }
            for (what, bytes) in served(&bad_path, &r.meta) {
                assert_eq!(Some(&bytes), all.get(&what), "round {round}: {what:?} served bytes not written as it");
            }
        }
    }

    /// A keys frame follows every [`KEYS_PER_FRAME`] chunk frames: a block
    /// cut short (or damaged in one keys frame and the index) loses the
    /// entries of one group at most, not all.
    #[test]
    fn a_keys_frame_follows_every_64_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<SeriesKey> = (0..150).map(|i| SeriesKey::new("m", [("i", i.to_string())])).collect();
        let ts = [10i64, 20, 30];
        let meta = write_block(
            dir.path(),
            Generations { first: 3, last: 3 },
            keys.iter().map(|k| (k, &ts[..], &[1.0, 2.0, 3.0][..])),
            |_, _, _| vec![],
        )
        .unwrap();
        let data = fs::read(&meta.path).unwrap();
        let index_at = u64::from_le_bytes(data[data.len() - 20..data.len() - 12].try_into().unwrap()) as usize;
        let mut ends = Vec::new();
        let mut pos = BLOCK_MAGIC.len();
        while pos < index_at {
            let end = pos + 8 + u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
            if data[pos + 8] == FRAME_KEYS {
                ends.push(end);
            }
            pos = end;
        }
        assert_eq!(ends.len(), 3, "after entries 64, 128 and 150");
        let bad_path = dir.path().join("0000000003.kblk");
        for (k, &end) in ends.iter().enumerate() {
            for (cut, want) in [(end, (64 * (k + 1)).min(150)), (end - 1, 64 * k)] {
                fs::write(&bad_path, &data[..cut]).unwrap();
                let got = recover_block(&bad_path).map_or(0, |r| r.meta.entries.len());
                assert_eq!(got, want, "cut at {cut}");
            }
        }
    }
}
