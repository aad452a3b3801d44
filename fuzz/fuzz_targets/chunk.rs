//! Block chunks are read from disk: decoding arbitrary bytes never panics;
//! whatever decodes with increasing timestamps re-encodes to the same samples.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mut ts, mut vals) = (Vec::new(), Vec::new());
    if store::samples::decode_chunk(data, &mut ts, &mut vals).is_ok() && ts.windows(2).all(|w| w[0] < w[1]) {
        let enc = store::samples::encode_chunk(&ts, &vals);
        let (mut t2, mut v2) = (Vec::new(), Vec::new());
        store::samples::decode_chunk(&enc, &mut t2, &mut v2).expect("re-encoded chunk decodes");
        assert_eq!(t2, ts);
        assert!(v2.iter().zip(&vals).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
});
