//! Prometheus remote-write and remote-read bodies come from the network:
//! any bytes decode to points (or queries) or an error, never a panic, and
//! never allocate past the decompressed-size limit.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(series) = promql::remote_write::decode(data) {
        for (key, _) in &series {
            assert!(!key.name().is_empty());
        }
    }
    let _ = promql::remote_read::decode_request(data);
});
