//! ClickHouse's answers are outside bytes: the series dictionary's RowBinary
//! rows never panic the reader, and rows it decodes encode back to rows
//! that decode to the same keys.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(rows) = chstore::reader::decode_series(data) {
        let keys: Vec<model::SeriesKey> = rows.into_iter().map(|r| r.1).collect();
        let again = chstore::reader::decode_series(&chstore::writer::series_rows(&keys)).expect("our own rows decode");
        assert_eq!(again.into_iter().map(|r| r.1).collect::<Vec<_>>(), keys);
    }
});
