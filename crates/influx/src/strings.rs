//! String field values (issue 49): the store keeps numbers, so a string is
//! kept once in a dictionary and its points store its id (`kansoku_type=
//! "string"`, exact as an f64 up to 2^53). The dictionary is a file of
//! CRC frames (`docs/format/influx-strings.md`), appended — and fsynced —
//! before the points naming its new strings reach the store's WAL, so no
//! stored id is ever without its string. This module encodes and decodes
//! it (fuzzed, `fuzz_targets/influx_strings.rs`); the server owns the file.

use std::collections::HashMap;
use std::sync::Arc;

use codec::frame::{begin_frame, decode_frames, end_frame, resync};

/// The file's first bytes: what it is and its format version.
pub const MAGIC: &[u8; 8] = b"KSTRS\x001\n";
/// The longest string value kept (influxd's limit on a field value too).
pub const STRING_MAX: usize = 64 << 10;
/// The most bytes of distinct strings one server keeps: past it, points
/// with a string not yet known are refused (a string per point, such as a
/// log line, belongs in a log store, not here).
pub const DICT_BYTES_MAX: u64 = 256 << 20;
/// The most distinct strings one server keeps (each costs ~150 bytes of
/// memory beside its own: a million short ones ~160 MB).
pub const STRINGS_MAX: usize = 1_000_000;

/// The strings known, by id, and each string's id.
#[derive(Debug, Default)]
pub struct Dict {
    by_id: Vec<Option<Arc<str>>>,
    ids: HashMap<Arc<str>, u32>,
    /// Bytes of the strings held.
    bytes: u64,
    /// The least id a new string may get: past whatever a damaged tail of
    /// the file may have held (its strings lost, their ids never reused).
    next_min: u32,
}

/// What reading a dictionary file found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Bytes of the file that are whole (appends go after them).
    pub valid: usize,
    /// Frames that did not verify and were skipped (damage in the middle:
    /// their ids answer as absent, never as another string).
    pub damaged: usize,
    /// Whether the header was not this format's (the frames are read anyway).
    pub bad_header: bool,
    /// The byte ranges that did not verify (skipped damage, the tail): a
    /// writer overwrites them with 0xFF before it appends, so no frame
    /// begun in them can run on into what it appends (found by fuzzing).
    pub unverified: Vec<std::ops::Range<usize>>,
}

impl Dict {
    /// Reads a dictionary file's bytes. Damage in the middle skips to the
    /// next whole frame (each frame names its first id, so later strings
    /// keep theirs); a torn tail ends the valid bytes.
    pub fn decode(data: &[u8]) -> (Dict, Loaded) {
        let mut d = Dict::default();
        let mut loaded = Loaded { bad_header: !data.starts_with(MAGIC), ..Loaded::default() };
        let mut pos = MAGIC.len().min(data.len());
        // Each id costs at least its length's 4 bytes: no more ids than that
        // (a damaged frame cannot claim an id of 2^31 and the memory for it).
        let ids_max = (data.len() / 4) as u32;
        loop {
            let (n, damage) = decode_frames(&data[pos..], pos as u64, |p| d.add_frame(p, ids_max));
            pos += n;
            if damage.is_none() {
                break;
            }
            match resync(data, pos, |p| parse_frame(p, ids_max).is_some()) {
                Some(next) => {
                    loaded.damaged += 1;
                    loaded.unverified.push(pos..next);
                    pos = next;
                }
                None => {
                    loaded.unverified.push(pos..data.len());
                    // A torn tail, or the last frame damaged: either way the
                    // ids it may have held (at most one per 4 bytes) are
                    // never given again, and the bytes stay (appends go
                    // after them; reading resumes at the next whole frame).
                    let held = ((data.len() - pos) / 4 + 1) as u32;
                    d.next_min = (d.by_id.len() as u32).saturating_add(held).min(ids_max.saturating_add(1));
                    break;
                }
            }
        }
        loaded.valid = pos;
        (d, loaded)
    }

    fn add_frame(&mut self, payload: &[u8], ids_max: u32) -> bool {
        let Some((first, strings)) = parse_frame(payload, ids_max) else { return false };
        for (i, s) in strings.into_iter().enumerate() {
            let id = first + i as u32;
            if self.by_id.len() <= id as usize {
                self.by_id.resize(id as usize + 1, None);
            }
            if self.by_id[id as usize].is_none() {
                let s: Arc<str> = s.into();
                self.bytes += s.len() as u64;
                self.ids.entry(Arc::clone(&s)).or_insert(id);
                self.by_id[id as usize] = Some(s);
            }
        }
        true
    }

    /// The string of `id` (None: not known, or lost to damage).
    pub fn get(&self, id: u32) -> Option<&Arc<str>> {
        self.by_id.get(id as usize)?.as_ref()
    }

    pub fn id(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// Strings held and their bytes.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The ids `strings` would get: known ones theirs, new ones the next
    /// free, and the frame that adds the new ones (None: none new). Nothing
    /// changes until [`Dict::commit`] (after the frame is durable). Refused
    /// when the new strings would pass [`DICT_BYTES_MAX`].
    pub fn plan(&self, strings: &[String]) -> Result<(Vec<u32>, Option<Planned>), String> {
        let mut ids = Vec::with_capacity(strings.len());
        let first = (self.by_id.len() as u32).max(self.next_min);
        let mut new: Vec<&str> = Vec::new();
        let mut new_ids: HashMap<&str, u32> = HashMap::new();
        let mut bytes = 0u64;
        for s in strings {
            let id = match self.ids.get(s.as_str()).or_else(|| new_ids.get(s.as_str())) {
                Some(&id) => id,
                None => {
                    let id = first
                        .checked_add(new.len() as u32)
                        .filter(|&id| id < 1 << 31)
                        .ok_or("the string dictionary holds 2^31 strings")?;
                    new.push(s);
                    new_ids.insert(s, id);
                    bytes += s.len() as u64;
                    id
                }
            };
            ids.push(id);
        }
        if new.is_empty() {
            return Ok((ids, None));
        }
        if self.ids.len() + new.len() > STRINGS_MAX {
            return Err(format!(
                "the string dictionary holds {} distinct strings; {} more would pass its {STRINGS_MAX}: string values that differ at every point belong in a log store",
                self.ids.len(),
                new.len()
            ));
        }
        if self.bytes + bytes > DICT_BYTES_MAX {
            return Err(format!(
                "the string dictionary holds {} bytes of distinct strings; {bytes} more would pass its {DICT_BYTES_MAX}: string values that differ at every point belong in a log store",
                self.bytes
            ));
        }
        let mut frame = Vec::new();
        let start = begin_frame(&mut frame);
        frame.extend_from_slice(&first.to_le_bytes());
        frame.extend_from_slice(&(new.len() as u32).to_le_bytes());
        for s in &new {
            frame.extend_from_slice(&(s.len() as u32).to_le_bytes());
            frame.extend_from_slice(s.as_bytes());
        }
        end_frame(&mut frame, start);
        Ok((ids, Some(Planned { frame, first, strings: new.iter().map(|s| (*s).into()).collect() })))
    }

    /// Takes in what [`Dict::plan`] planned, once its frame is written.
    pub fn commit(&mut self, p: Planned) {
        let ok = self.add_frame(&p.frame[8..], 1 << 31);
        debug_assert!(ok && p.first as usize + p.strings.len() == self.by_id.len());
        self.next_min = 0;
    }
}

/// New strings to add: the frame to append to the file, then commit.
#[derive(Debug)]
pub struct Planned {
    pub frame: Vec<u8>,
    first: u32,
    strings: Vec<Arc<str>>,
}

/// A frame's payload: u32 first id, u32 count, then count × (u32 length,
/// UTF-8 bytes), all little-endian; nothing after; ids below `ids_max`.
fn parse_frame(p: &[u8], ids_max: u32) -> Option<(u32, Vec<&str>)> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(p.get(at..at + 4)?.try_into().ok()?));
    let (first, count) = (u32_at(0)?, u32_at(4)?);
    if first.checked_add(count)? > ids_max.min(1 << 31) || count as usize > p.len() / 4 {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut at = 8;
    for _ in 0..count {
        let len = u32_at(at)? as usize;
        if len > STRING_MAX {
            return None;
        }
        let s = std::str::from_utf8(p.get(at + 4..at + 4 + len)?).ok()?;
        out.push(s);
        at += 4 + len;
    }
    (at == p.len()).then_some((first, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(batches: &[&[&str]]) -> (Vec<u8>, Vec<Vec<u32>>) {
        let mut d = Dict::default();
        let mut out = MAGIC.to_vec();
        let mut ids = Vec::new();
        for b in batches {
            let strings: Vec<String> = b.iter().map(|s| (*s).to_owned()).collect();
            let (got, planned) = d.plan(&strings).unwrap();
            if let Some(p) = planned {
                out.extend_from_slice(&p.frame);
                d.commit(p);
            }
            ids.push(got);
        }
        (out, ids)
    }

    #[test]
    fn strings_keep_their_ids_across_a_reopen() {
        let (bytes, ids) = file(&[&["a", "b", "a"], &["b", "", "é \"q\""], &["c"]]);
        assert_eq!(ids, [vec![0, 1, 0], vec![1, 2, 3], vec![4]]);
        let (d, loaded) = Dict::decode(&bytes);
        assert_eq!(loaded, Loaded { valid: bytes.len(), damaged: 0, bad_header: false, unverified: vec![] });
        let names: Vec<&str> = (0..5).map(|i| &**d.get(i).unwrap()).collect();
        assert_eq!(names, ["a", "b", "", "é \"q\"", "c"]);
        assert_eq!((d.len(), d.bytes(), d.id("c")), (5, 1 + 1 + 6 + 1, Some(4)));
        assert!(d.get(5).is_none());
    }

    /// A flipped byte in one frame loses that frame's strings only: later
    /// strings keep their ids, and no id answers with another's string. A
    /// torn tail ends the valid bytes where the tear starts.
    #[test]
    fn damage_loses_only_the_frame_it_hits() {
        let (bytes, _) = file(&[&["one", "two"], &["three"], &["four", "five"]]);
        let second = MAGIC.len() + 8 + 8 + 4 + 3 + 4 + 3;
        for i in second..second + 8 + 8 + 4 + 5 {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            let (d, loaded) = Dict::decode(&bad);
            assert_eq!(loaded.damaged, 1, "flip at {i}");
            assert_eq!(loaded.valid, bytes.len());
            let got: Vec<Option<&str>> = (0..5).map(|id| d.get(id).map(|s| &**s)).collect();
            assert_eq!(got, [Some("one"), Some("two"), None, Some("four"), Some("five")], "flip at {i}");
        }
        for cut in MAGIC.len()..bytes.len() {
            let (d, loaded) = Dict::decode(&bytes[..cut]);
            assert!(loaded.valid <= cut && loaded.damaged == 0, "cut at {cut}");
            for id in 0..5 {
                assert!(d.get(id).is_none_or(|s| ["one", "two", "three", "four", "five"][id as usize] == &**s));
            }
        }
        let mut bad = bytes.clone();
        bad[0] = b'X';
        let (d, loaded) = Dict::decode(&bad);
        assert!(loaded.bad_header && d.len() == 5, "a bad header loses nothing");
    }

    /// A damaged last frame (or a torn tail) loses its strings, and its
    /// ids are never given to new ones: a point holding one answers absent,
    /// never another string. Appends go after the damage and read back.
    #[test]
    fn ids_of_a_damaged_tail_are_not_reused() {
        let (mut bytes, _) = file(&[&["alpha"], &["beta"]]);
        let beta = bytes.len() - 2;
        bytes[beta] ^= 1;
        let (mut d, loaded) = Dict::decode(&bytes);
        assert_eq!((d.len(), loaded.damaged), (1, 0));
        assert!(d.get(1).is_none());
        let (ids, p) = d.plan(&["gamma".into(), "alpha".into()]).unwrap();
        assert!(ids[0] > 1 && ids[1] == 0, "{ids:?}");
        let p = p.unwrap();
        bytes.extend_from_slice(&p.frame);
        d.commit(p);
        let (again, loaded) = Dict::decode(&bytes);
        assert_eq!(loaded.damaged, 1);
        assert_eq!((again.get(ids[0]).map(|s| &**s), again.get(1)), (Some("gamma"), None));
        let (next, _) = again.plan(&["delta".into()]).unwrap();
        assert_eq!(next, [ids[0] + 1]);
    }

    #[test]
    fn the_dictionary_is_bounded() {
        let d = Dict { bytes: DICT_BYTES_MAX - 3, ..Dict::default() };
        assert!(d.plan(&["abc".into()]).is_ok());
        let e = d.plan(&["abcd".into()]).unwrap_err();
        assert!(e.contains("log store"), "{e}");
        assert!(d.plan(&[]).unwrap().1.is_none());
    }
}
