//! WAL segments are read back after crashes and disk corruption: decoding
//! arbitrary bytes never panics and reports a valid prefix within the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut n = 0usize;
    let (valid, damage) = store::wal::decode_records(data, 0, |_| n += 1);
    assert!(valid <= data.len());
    assert_eq!(damage.is_none(), valid == data.len());
});
