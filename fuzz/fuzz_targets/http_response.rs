//! HTTP responses come from any server `kansoku lab load` is pointed at:
//! any bytes, cut anywhere, are read as responses or refused with an error,
//! never a panic; a response never uses more bytes than it was given, and
//! its counts add up (body bytes never exceed the bytes on the wire).
#![no_main]
use libfuzzer_sys::fuzz_target;
use load::http::ResponseReader;

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the bytes are cut.
    let Some((&cut, bytes)) = data.split_first() else { return };
    let step = usize::from(cut).max(1);
    let mut kept: Vec<u8> = Vec::new();
    let mut r = ResponseReader::new();
    let mut fed = 0u64;
    for piece in bytes.chunks(step) {
        kept.extend_from_slice(piece);
        fed += piece.len() as u64;
        loop {
            let Ok(used) = r.feed(&kept) else { return };
            assert!(used <= kept.len());
            kept.drain(..used);
            if !r.done() {
                break;
            }
            assert!(r.body_bytes <= r.wire_bytes && r.wire_bytes <= fed);
            r = ResponseReader::new();
        }
    }
    let _ = r.eof();
    assert!(r.body_bytes <= r.wire_bytes);
});
