//! Event batches arrive from agents and are read from disk: decoding
//! arbitrary bytes never panics or over-allocates; checking (what a server
//! does before storing) agrees with decoding; whatever decodes re-encodes
//! (both encodings) to a batch that decodes to the same events.
#![no_main]
use libfuzzer_sys::fuzz_target;
use codec::events::{Encoding, EventBatch, Want};

fuzz_target!(|data: &[u8]| {
    let decoded = EventBatch::decode(data, Want::ALL);
    // A server checks without decoding: the same verdict.
    assert_eq!(EventBatch::check(data).is_ok(), decoded.is_ok(), "check and decode disagree: {decoded:?}");
    let Ok(b) = decoded else { return };
    for enc in [Encoding::Fast, Encoding::Compact] {
        let mut again = b.clone();
        again.validate().expect("a decoded batch is valid");
        assert_eq!(again, b, "a decoded batch is already in order");
        let mut out = Vec::new();
        again.encode(&mut out, enc);
        assert_eq!(EventBatch::decode(&out, Want::ALL).expect("re-encoded batch decodes"), b);
    }
});
