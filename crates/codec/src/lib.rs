//! kansoku's byte formats that more than one crate reads or writes, pure
//! functions of bytes with no I/O: LEB128 varints and the binary series key
//! ([`varint`]), the CRC frame every append-only file and stream is made of
//! ([`frame`]), and the columnar, compressed batch of one CPU's sampled events
//! ([`events`]) that the agent encodes, the wire carries and the store keeps
//! as it came. It sits just above `model`: the store, the wire, the cluster
//! spool and the sampler all build on it, and it on none of them. Every
//! decoder here takes outside bytes and is fuzzed (`fuzz/`); formats are in
//! `docs/format/`.

pub mod decimal;
pub mod events;
pub mod frame;
pub mod varint;
pub mod zctx;
