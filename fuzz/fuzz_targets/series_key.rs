//! Series keys are decoded from WAL and block indexes: arbitrary bytes never
//! panic, and a decoded key re-encodes to a key that decodes equal.
#![no_main]
use libfuzzer_sys::fuzz_target;
use codec::varint::{get_key, put_key, Reader};

fuzz_target!(|data: &[u8]| {
    if let Some(key) = get_key(&mut Reader::new(data)) {
        let mut out = Vec::new();
        put_key(&mut out, &key);
        assert_eq!(get_key(&mut Reader::new(&out)), Some(key));
    }
});
