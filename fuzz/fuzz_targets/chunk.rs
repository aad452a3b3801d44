//! Block chunks are read from disk: decoding arbitrary bytes never panics;
//! whatever decodes with increasing timestamps re-encodes to the same samples;
//! decoding values alone gives the same values, or the same error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mut ts, mut vals) = (Vec::new(), Vec::new());
    let full = store::samples::decode_chunk(data, &mut ts, &mut vals);
    let mut only = Vec::new();
    let values = store::samples::decode_values(data, &mut only, true).map(|(grid, _)| grid);
    assert_eq!(full, values);
    if full.is_ok() {
        assert!(only.iter().zip(&vals).all(|(a, b)| a.to_bits() == b.to_bits()) && only.len() == vals.len());
    }
    if full.is_ok() && ts.windows(2).all(|w| w[0] < w[1]) {
        let enc = store::samples::encode_chunk(&ts, &vals);
        let (mut t2, mut v2) = (Vec::new(), Vec::new());
        store::samples::decode_chunk(&enc, &mut t2, &mut v2).expect("re-encoded chunk decodes");
        assert_eq!(t2, ts);
        assert!(v2.iter().zip(&vals).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
});
