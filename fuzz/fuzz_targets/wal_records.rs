//! WAL segments are read back after crashes and disk corruption: decoding
//! arbitrary bytes never panics and reports a valid prefix within the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut n = 0usize;
    let (valid, damage) = store::wal::decode_records(data, 0, |_| n += 1);
    assert!(valid <= data.len());
    assert_eq!(damage.is_none(), valid == data.len());
    // After damage, the next whole record (if any) lies inside the input
    // and verifies on its own.
    if damage.is_some()
        && let Some(next) = codec::frame::resync(data, valid, store::wal::is_record)
    {
        assert!(next > valid && next + 8 < data.len());
        let (_, tail) = store::wal::decode_records(&data[next..], 0, |_| {});
        assert!(tail.is_none_or(|d| d.offset > 0), "the record found does not verify");
    }
});
