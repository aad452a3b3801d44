//! CRC framing, shared by every append-only file and stream of records (the
//! store's WAL and event logs, the agent's spool):
//!
//! ```text
//! frame = u32 len (LE) | u32 crc32 (LE, of payload) | payload[len]
//! ```
//! A file of frames is valid up to the first frame that is short, whose
//! length is absurd, or whose checksum or payload does not verify; after
//! damage in the middle, [`resync`] finds where valid frames resume.

/// Frames larger than this are corruption, not data: a batch of 100k points is ~1.2 MB.
pub const FRAME_BYTES_MAX: u32 = 64 << 20;

/// Where and why a file stopped verifying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first record that did not verify.
    pub offset: u64,
    pub what: &'static str,
}

/// Reserves a frame header; returns where the payload starts.
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(&[0; 8]);
    out.len()
}

/// Fills in the header reserved by [`begin_frame`] for the payload after it.
pub fn end_frame(out: &mut [u8], payload_start: usize) {
    let len = (out.len() - payload_start) as u32;
    let crc = crc32fast::hash(&out[payload_start..]);
    out[payload_start - 8..payload_start - 4].copy_from_slice(&len.to_le_bytes());
    out[payload_start - 4..payload_start].copy_from_slice(&crc.to_le_bytes());
}

/// Walks the frames of `data` (which starts at byte `base` of its file),
/// handing each verified payload to `f`, which returns false if the payload
/// does not parse. Returns the length of the valid prefix and, if it stopped
/// early, why.
pub fn decode_frames(data: &[u8], base: u64, mut f: impl FnMut(&[u8]) -> bool) -> (usize, Option<Damage>) {
    let mut pos = 0;
    while pos < data.len() {
        let damage = |what| Some(Damage { offset: base + pos as u64, what });
        let Some(head) = data.get(pos..pos + 8) else {
            return (pos, damage("truncated record header"));
        };
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len == 0 || len > FRAME_BYTES_MAX {
            return (pos, damage("invalid record length"));
        }
        let Some(payload) = data.get(pos + 8..pos + 8 + len as usize) else {
            return (pos, damage("truncated record"));
        };
        if crc32fast::hash(payload) != crc {
            return (pos, damage("checksum mismatch"));
        }
        if !f(payload) {
            return (pos, damage("malformed record"));
        }
        pos += 8 + len as usize;
    }
    (pos, None)
}

/// After a frame that did not verify at `from`, the first offset past it at
/// which a whole frame verifies (its length sane, its checksum right, and
/// `parses` accepting its payload): where valid records resume after damage
/// in the middle of a file. `None`: nothing after `from` verifies, so the
/// damage is a torn tail. A random match needs a 32-bit checksum to agree by
/// chance; garbage lengths are refused before any checksum is computed.
pub fn resync(data: &[u8], from: usize, parses: impl Fn(&[u8]) -> bool) -> Option<usize> {
    (from + 1..data.len().saturating_sub(8)).find(|&p| {
        let len = u32::from_le_bytes(data[p..p + 4].try_into().expect("4 bytes"));
        if len == 0 || len > FRAME_BYTES_MAX || (len as usize) > data.len() - p - 8 {
            return false;
        }
        let crc = u32::from_le_bytes(data[p + 4..p + 8].try_into().expect("4 bytes"));
        let payload = &data[p + 8..p + 8 + len as usize];
        crc32fast::hash(payload) == crc && parses(payload)
    })
}
