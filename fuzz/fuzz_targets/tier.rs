//! Tier entries are read from disk: decoding arbitrary bytes never panics;
//! whatever decodes re-encodes to the same tier.
#![no_main]
use libfuzzer_sys::fuzz_target;
use store::tier::{AGGS, Tier};

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let Ok(t) = Tier::decode(rest, usize::from(n), i64::MIN, i64::MAX) else { return };
    if !t.ts.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    let back = Tier::decode(&t.encode(), t.ts.len(), i64::MIN, i64::MAX).expect("re-encoded tier decodes");
    assert_eq!(back.ts, t.ts);
    for agg in AGGS {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(back.column(agg)), bits(t.column(agg)));
    }
});
