//! Encodings shared by the WAL and block files: LEB128 varints, series keys,
//! a bit stream, and the Gorilla-style chunk codec for one series' samples.

pub mod bits;
pub mod chunk;
pub mod varint;
pub mod zctx;

pub use chunk::{ChunkError, decode_chunk, encode_chunk};
