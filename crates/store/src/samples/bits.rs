//! A big-endian bit stream: the Gorilla codec writes fields of 1..=64 bits.

#[derive(Debug, Default)]
pub struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    /// Bits held in `acc`, 0..64.
    n: u32,
}

impl BitWriter {
    pub fn new(out: Vec<u8>) -> BitWriter {
        BitWriter { out, acc: 0, n: 0 }
    }

    /// Appends the low `bits` bits of `v`, most significant first.
    pub fn write(&mut self, v: u64, bits: u32) {
        debug_assert!((1..=64).contains(&bits));
        let v = if bits == 64 { v } else { v & ((1u64 << bits) - 1) };
        let free = 64 - self.n;
        if bits < free {
            self.acc = (self.acc << bits) | v;
            self.n += bits;
        } else {
            let spill = bits - free;
            let head = if free == 0 { 0 } else { v >> spill };
            let acc = if free == 64 { head } else { (self.acc << free) | head };
            self.out.extend_from_slice(&acc.to_be_bytes());
            self.acc = if spill == 0 { 0 } else { v & ((1u64 << spill) - 1) };
            self.n = spill;
        }
    }

    pub fn bit(&mut self, b: bool) {
        self.write(u64::from(b), 1);
    }

    /// Pads the last byte with zeros and returns the buffer.
    pub fn finish(mut self) -> Vec<u8> {
        let bytes = self.n.div_ceil(8);
        if bytes > 0 {
            let acc = self.acc << (64 - self.n);
            self.out.extend_from_slice(&acc.to_be_bytes()[..bytes as usize]);
        }
        self.out
    }
}

#[derive(Debug, Clone)]
pub struct BitReader<'a> {
    data: &'a [u8],
    /// Next bit to read, counted from the start of `data`.
    pos: usize,
}

impl<'a> BitReader<'a> {
    pub fn new(data: &'a [u8]) -> BitReader<'a> {
        BitReader { data, pos: 0 }
    }

    /// The next 64 bits, most significant first; only the first 57 are
    /// certain to be real (the rest may be zero padding or not yet shifted in),
    /// and bits past the end of the data read as zero.
    #[inline(always)]
    pub fn peek(&self) -> u64 {
        let i = self.pos / 8;
        let word = match self.data.get(i..i + 8) {
            Some(b) => u64::from_be_bytes(b.try_into().expect("8 bytes")),
            None => {
                let mut b = [0u8; 8];
                let rest = self.data.get(i..).unwrap_or(&[]);
                b[..rest.len()].copy_from_slice(rest);
                u64::from_be_bytes(b)
            }
        };
        word << (self.pos % 8)
    }

    /// Bits left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.data.len() * 8 - self.pos
    }

    /// Skips `bits` bits already looked at with [`BitReader::peek`]; `None`
    /// (and nothing consumed) past the end.
    #[inline(always)]
    pub fn consume(&mut self, bits: u32) -> Option<()> {
        if bits as usize > self.remaining() {
            return None;
        }
        self.pos += bits as usize;
        Some(())
    }

    /// Reads `bits` (1..=64) bits; `None` past the end.
    #[inline(always)]
    pub fn read(&mut self, bits: u32) -> Option<u64> {
        debug_assert!((1..=64).contains(&bits));
        if bits > 56 {
            let hi = self.read(bits - 32)?;
            return Some((hi << 32) | self.read(32)?);
        }
        let v = self.peek() >> (64 - bits);
        self.consume(bits)?;
        Some(v)
    }

    #[inline]
    pub fn bit(&mut self) -> Option<bool> {
        self.read(1).map(|b| b == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(fields in proptest::collection::vec((any::<u64>(), 1u32..=64), 0..200)) {
            let mut w = BitWriter::new(Vec::new());
            for &(v, bits) in &fields {
                w.write(v, bits);
            }
            let total: u32 = fields.iter().map(|f| f.1).sum();
            let out = w.finish();
            prop_assert_eq!(out.len(), total.div_ceil(8) as usize);
            let mut r = BitReader::new(&out);
            for &(v, bits) in &fields {
                let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
                prop_assert_eq!(r.read(bits), Some(v & mask));
            }
        }
    }
}
