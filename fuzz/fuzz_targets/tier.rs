//! Tier entries are read from disk: decoding arbitrary bytes never panics;
//! whatever decodes re-encodes to the same tier. Decoded for folding (minima
//! and maxima left undivided), the same bytes decode or fail alike, and a
//! re-encoded tier divides back to its values bit for bit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use store::tier::{AGGS, Tier, TierBytes, decode};

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let decoded = decode(rest, usize::from(n), i64::MIN, i64::MAX);
    let mut folded = Tier::default();
    let fold = folded.decode_for_folding(rest, usize::from(n), i64::MIN, i64::MAX);
    assert_eq!(decoded.is_ok(), fold.is_ok(), "{decoded:?} {fold:?}");
    let Ok(t) = decoded else { return };
    assert_eq!((&folded.ts, bits(&folded.sum), bits(&folded.count)), (&t.ts, bits(&t.sum), bits(&t.count)));
    if !t.ts.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    let enc = t.encode();
    let back = decode(&enc, t.ts.len(), i64::MIN, i64::MAX).expect("re-encoded tier decodes");
    assert_eq!(back.ts, t.ts);
    for agg in AGGS {
        assert_eq!(bits(back.column(agg)), bits(t.column(agg)));
    }
    folded.decode_for_folding(&enc, t.ts.len(), i64::MIN, i64::MAX).expect("re-encoded tier decodes for folding");
    let mut divided = Tier::default();
    divided.extend(&folded);
    assert_eq!((bits(&divided.min), bits(&divided.max)), (bits(&t.min), bits(&t.max)));
});
