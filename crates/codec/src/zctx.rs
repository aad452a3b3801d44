//! zstd with one compression context per level and one decompression
//! context per thread, reused: making a context per call (what
//! `zstd::bulk::compress` does) costs more than compressing a small column
//! or chunk.

use std::cell::RefCell;

use zstd::bulk::{Compressor, Decompressor};

thread_local! {
    static C: RefCell<Vec<(i32, Compressor<'static>)>> = const { RefCell::new(Vec::new()) };
    static D: RefCell<Option<Decompressor<'static>>> = RefCell::new(Decompressor::new().ok());
}

/// zstd of `src` at `level` (negative: zstd's fast levels); `None` if
/// zstd fails (never for valid input, but callers fall back to raw).
pub fn compress(src: &[u8], level: i32) -> Option<Vec<u8>> {
    C.with(|c| {
        let mut c = c.borrow_mut();
        let i = match c.iter().position(|(l, _)| *l == level) {
            Some(i) => i,
            None => {
                c.push((level, Compressor::new(level).ok()?));
                c.len() - 1
            }
        };
        c[i].1.compress(src).ok()
    })
}

/// Decompresses a zstd frame of at most `capacity` bytes; `None` if it does
/// not decode or is larger. Allocates the size the frame declares (every
/// frame written here declares it), not the bound: a hostile column's bound
/// can be tens of MB.
pub fn decompress(src: &[u8], capacity: usize) -> Option<Vec<u8>> {
    let capacity = match zstd::zstd_safe::get_frame_content_size(src) {
        Ok(Some(declared)) => usize::try_from(declared).ok().filter(|&d| d <= capacity)?,
        _ => capacity,
    };
    D.with(|d| d.borrow_mut().as_mut()?.decompress(src, capacity).ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip_and_refusals() {
        let data: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
        for level in [-3, 1, 3] {
            let z = super::compress(&data, level).unwrap();
            assert!(z.len() < data.len() / 4);
            assert_eq!(super::decompress(&z, data.len()).unwrap(), data);
            assert!(super::decompress(&z, data.len() - 1).is_none(), "larger than the capacity");
        }
        assert!(super::decompress(b"not zstd", 100).is_none());
        // A frame declaring more than the bound is refused before allocating.
        let z = super::compress(&data, 1).unwrap();
        assert!(super::decompress(&z, data.len() - 1).is_none());
        // Two frames where one is declared: refused, not a longer answer.
        let two = [z.clone(), z].concat();
        assert!(super::decompress(&two, data.len() * 2).is_none());
    }
}
