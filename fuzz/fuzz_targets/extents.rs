//! What FIEMAP and GETFSMAP return, and a kept snapshot file read back:
//! any bytes are parsed or refused with an error, never a panic; parsed
//! extents merge into runs that cover no more bytes than the placed
//! extents.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(exts) = extents::parse::fiemap(data) {
        let placed: u128 = exts.iter().filter(|e| e.placed()).map(|e| u128::from(e.length)).sum();
        let runs = extents::parse::runs(&exts);
        assert!(runs.iter().map(|r| u128::from(r.1)).sum::<u128>() <= placed);
    }
    let _ = extents::parse::fsmap(data);
    let _ = extents::snapshots::decode(data);
});
