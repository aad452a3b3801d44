//! The sample encodings of block files: a bit stream and the Gorilla-style
//! chunk codec for one series' samples (varints and series keys are the
//! shared `codec` crate's). Public for the fuzz targets.

pub mod bits;
pub mod chunk;

pub use chunk::{ChunkError, Grid, decode_chunk, decode_values, encode_chunk, encode_chunk_plain_into};
