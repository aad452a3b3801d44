//! Write-ahead log: every batch is framed (`codec::frame`), checksummed and written here (and
//! fsynced per the policy) before it is acknowledged and applied to the head.
//! Segments are numbered files; a block flush rotates to a new segment and
//! deletes the segments it covers. See `docs/format/wal.md`.

mod record;
mod segment;

pub use record::{Record, decode_records, encode_samples, encode_series, is_record};
pub use segment::{
    DAMAGED_KEEP, LogKind, SEGMENT_MAGIC, WAL, WalWriter, damaged_dir, keep_damaged, list_damaged, list_logs,
    list_segments, log_path, looks_torn, repair_log, segment_intact, segment_path,
};
