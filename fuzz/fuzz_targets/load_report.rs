//! A load report comes over the network from an agent's job (`kansoku lab
//! load --agents`): any bytes are a report or an error, never a panic; a
//! report read back encodes to the same bytes, and merging it is safe.
#![no_main]
use libfuzzer_sys::fuzz_target;
use load::Report;

fuzz_target!(|data: &[u8]| {
    let mut bytes = load::report::MAGIC.to_vec();
    bytes.extend_from_slice(data);
    let start = std::time::Instant::now();
    let Ok(r) = Report::decode(&bytes, start) else { return };
    let again = r.encode();
    let back = Report::decode(&again, start).expect("what was encoded decodes");
    assert_eq!(back.encode(), again);
    let mut merged = back.recorder.clone();
    {
        merged.merge(&r.recorder);
        assert_eq!(merged.responses, r.recorder.responses.saturating_add(back.recorder.responses));
    }
});
