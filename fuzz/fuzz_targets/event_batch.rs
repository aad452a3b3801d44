//! Event batches arrive from agents and are read from disk: decoding
//! arbitrary bytes never panics or over-allocates; whatever decodes
//! re-encodes (both encodings) to a batch that decodes to the same events.
#![no_main]
use libfuzzer_sys::fuzz_target;
use store::events::{Encoding, EventBatch, Want};

fuzz_target!(|data: &[u8]| {
    let Ok(b) = EventBatch::decode(data, Want::ALL) else { return };
    for enc in [Encoding::Fast, Encoding::Compact] {
        let mut again = b.clone();
        again.validate().expect("a decoded batch is valid");
        assert_eq!(again, b, "a decoded batch is already in order");
        let mut out = Vec::new();
        again.encode(&mut out, enc);
        assert_eq!(EventBatch::decode(&out, Want::ALL).expect("re-encoded batch decodes"), b);
    }
});
