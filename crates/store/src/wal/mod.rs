//! Write-ahead log: every batch is framed, checksummed and written here (and
//! fsynced per the policy) before it is acknowledged and applied to the head.
//! Segments are numbered files; a block flush rotates to a new segment and
//! deletes the segments it covers. See `docs/format/wal.md`.

mod record;
mod segment;

pub use record::{Damage, RECORD_BYTES_MAX, Record, decode_records, encode_samples, encode_series};
pub use segment::{SEGMENT_MAGIC, WalWriter, list_segments, segment_path};
