//! Frames come from the network: decoding arbitrary bytes never panics, and
//! whatever decodes re-encodes to the same bytes; a rounds body that decodes
//! re-encodes to the same samples.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((msgs, used)) = wire::decode_all(data, 1 << 20) {
        let mut again = Vec::new();
        for m in &msgs {
            m.encode(&mut again);
        }
        assert_eq!(again, &data[..used]);
        for m in msgs {
            if let wire::Msg::Rounds { body, .. } = m {
                rounds(&body);
            }
        }
    }
    // The same bytes as a rounds body on their own.
    rounds(data);
});

fn rounds(body: &[u8]) {
    if let Ok(rounds) = wire::rounds::decode(body) {
        let mut enc = Vec::new();
        wire::rounds::encode(&rounds, wire::rounds::Codec::Lz4, &mut enc);
        let back = wire::rounds::decode(&enc).expect("re-encoded rounds decode");
        let bits = |r: &[model::Batch]| -> Vec<(i64, Vec<(u32, u64)>)> {
            r.iter().map(|b| (b.time.as_nanos(), b.points.iter().map(|p| (p.0, p.1.to_bits())).collect())).collect()
        };
        assert_eq!(bits(&back), bits(&rounds));
    }
}
