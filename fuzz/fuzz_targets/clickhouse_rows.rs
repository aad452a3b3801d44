//! ClickHouse's answers are outside bytes: the series dictionary's and the
//! process tables' RowBinary rows never panic the reader, and rows it
//! decodes encode back to rows that decode the same.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(rows) = chstore::reader::decode_series(data) {
        let keys: Vec<model::SeriesKey> = rows.into_iter().map(|r| r.1).collect();
        let again = chstore::reader::decode_series(&chstore::writer::series_rows(&keys)).expect("our own rows decode");
        assert_eq!(again.into_iter().map(|r| r.1).collect::<Vec<_>>(), keys);
    }
    if let Some(procs) = chstore::events::decode_procs(data) {
        let mut bytes = Vec::new();
        for p in &procs {
            chstore::writer::put_proc(&mut bytes, p);
        }
        assert_eq!(chstore::events::decode_procs(&bytes).expect("our own rows decode"), procs);
    }
});
