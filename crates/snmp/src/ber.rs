//! The subset of BER (X.690) that SNMPv1/v2c messages use: definite lengths,
//! INTEGER, OCTET STRING, NULL, OBJECT IDENTIFIER, SEQUENCE and SNMP's
//! application and context tags. Decoding borrows from the datagram and never
//! allocates; every length is checked against what is left, so a hostile or
//! truncated packet yields an [`Error`], never a panic or an over-read.

use thiserror::Error;

pub const TAG_INTEGER: u8 = 0x02;
pub const TAG_OCTET_STRING: u8 = 0x04;
pub const TAG_NULL: u8 = 0x05;
pub const TAG_OID: u8 = 0x06;
pub const TAG_SEQUENCE: u8 = 0x30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("byte {at}: expected tag {expected:#04x}, found {found:#04x}")]
    UnexpectedTag { at: usize, expected: u8, found: u8 },
    #[error("byte {0}: indefinite or over-long length")]
    BadLength(usize),
    #[error("byte {0}: integer does not fit its type")]
    IntegerRange(usize),
    #[error("byte {0}: malformed object identifier")]
    BadOid(usize),
    #[error("byte {at}: unknown value tag {tag:#04x}")]
    UnknownTag { at: usize, tag: u8 },
    #[error("byte {0}: bytes after the end of the message")]
    Trailing(usize),
    #[error("unsupported SNMP version {0}")]
    Version(i64),
    #[error("unsupported PDU tag {0:#04x}")]
    PduType(u8),
}

/// A cursor over a BER buffer. `base` is the absolute offset of `buf[0]` in
/// the datagram, so errors name the byte a user can find in a capture.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0, base: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Absolute offset of the next byte.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Reads one tag-length-value; returns the tag and the value bytes.
    pub fn tlv(&mut self) -> Result<(u8, &'a [u8]), Error> {
        let at = self.offset();
        let tag = *self.buf.get(self.pos).ok_or(Error::Truncated(at))?;
        self.pos += 1;
        let first = *self.buf.get(self.pos).ok_or(Error::Truncated(self.offset()))?;
        self.pos += 1;
        let len = if first < 0x80 {
            first as usize
        } else {
            let n = (first & 0x7f) as usize;
            // 0x80 is the indefinite form, which SNMP forbids; four length
            // bytes already exceed any datagram.
            if n == 0 || n > 4 {
                return Err(Error::BadLength(self.offset() - 1));
            }
            let bytes = self.buf.get(self.pos..self.pos + n).ok_or(Error::Truncated(self.offset()))?;
            self.pos += n;
            bytes.iter().fold(0usize, |acc, &b| (acc << 8) | b as usize)
        };
        let start = self.pos;
        let end = start.checked_add(len).filter(|&e| e <= self.buf.len()).ok_or(Error::Truncated(self.base + start))?;
        self.pos = end;
        Ok((tag, &self.buf[start..end]))
    }

    /// Reads a TLV that must carry `tag`; returns its value bytes.
    pub fn expect(&mut self, tag: u8) -> Result<&'a [u8], Error> {
        let at = self.offset();
        let (found, value) = self.tlv()?;
        if found != tag {
            return Err(Error::UnexpectedTag { at, expected: tag, found });
        }
        Ok(value)
    }

    /// Enters a constructed value with `tag`: a reader over its contents.
    pub fn enter(&mut self, tag: u8) -> Result<Reader<'a>, Error> {
        let value = self.expect(tag)?;
        Ok(Reader { buf: value, pos: 0, base: self.base + self.pos - value.len() })
    }

    pub fn integer(&mut self) -> Result<i64, Error> {
        let at = self.offset();
        let v = self.expect(TAG_INTEGER)?;
        decode_i64(v).ok_or(Error::IntegerRange(at))
    }

    pub fn finish(&self) -> Result<(), Error> {
        if self.is_empty() { Ok(()) } else { Err(Error::Trailing(self.offset())) }
    }
}

/// Two's-complement big-endian content of at most 8 bytes (empty is invalid).
pub fn decode_i64(v: &[u8]) -> Option<i64> {
    if v.is_empty() || v.len() > 8 {
        return None;
    }
    let init = if v[0] & 0x80 != 0 { -1i64 } else { 0 };
    Some(v.iter().fold(init, |acc, &b| (acc << 8) | b as i64))
}

/// Content of an unsigned application type (Counter32, Gauge32, TimeTicks,
/// Counter64) of `bits` width. Accepts the correct encoding (a leading zero
/// byte when the top bit is set) and, leniently, the common agent bug of
/// omitting it (0xFFFFFFFF sent as four bytes, which BER reads as -1).
pub fn decode_unsigned(v: &[u8], bits: u32) -> Option<u64> {
    let max_len = (bits / 8) as usize + 1;
    if v.is_empty() || v.len() > max_len {
        return None;
    }
    let v = if v.len() == max_len {
        if v[0] != 0 {
            return None;
        }
        &v[1..]
    } else {
        v
    };
    let value = v.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64);
    (bits == 64 || value >> bits == 0).then_some(value)
}

pub fn put_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = (len as u32).to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

pub fn put_tlv(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    out.push(tag);
    put_len(out, value.len());
    out.extend_from_slice(value);
}

/// Minimal two's-complement content of `v`.
pub fn i64_content(v: i64) -> ([u8; 8], usize) {
    let bytes = v.to_be_bytes();
    let mut skip = 0;
    while skip < 7 {
        let (a, b) = (bytes[skip], bytes[skip + 1]);
        if (a == 0 && b & 0x80 == 0) || (a == 0xff && b & 0x80 != 0) {
            skip += 1;
        } else {
            break;
        }
    }
    (bytes, skip)
}

pub fn put_integer(out: &mut Vec<u8>, tag: u8, v: i64) {
    let (bytes, skip) = i64_content(v);
    put_tlv(out, tag, &bytes[skip..]);
}

/// Minimal content of an unsigned value: a leading zero byte when the top
/// bit of the first significant byte is set.
pub fn put_unsigned(out: &mut Vec<u8>, tag: u8, v: u64) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(7);
    out.push(tag);
    if bytes[skip] & 0x80 != 0 {
        put_len(out, 9 - skip);
        out.push(0);
    } else {
        put_len(out, 8 - skip);
    }
    out.extend_from_slice(&bytes[skip..]);
}

/// Wraps what was written after `start` in a TLV with `tag`, shifting the
/// content right by the size of the length field.
pub fn wrap(out: &mut Vec<u8>, start: usize, tag: u8) {
    let len = out.len() - start;
    let mut header = Vec::with_capacity(6);
    header.push(tag);
    put_len(&mut header, len);
    out.splice(start..start, header);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_minimal_and_round_trip() {
        for v in [0i64, 1, 127, 128, 255, 256, -1, -128, -129, i32::MAX as i64, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            put_integer(&mut out, TAG_INTEGER, v);
            let mut r = Reader::new(&out);
            assert_eq!(r.integer().unwrap(), v, "{v}: {out:02x?}");
            r.finish().unwrap();
        }
        let mut out = Vec::new();
        put_integer(&mut out, TAG_INTEGER, 128);
        assert_eq!(out, [0x02, 0x02, 0x00, 0x80]);
    }

    #[test]
    fn unsigned_values_carry_a_leading_zero_when_needed() {
        let mut out = Vec::new();
        put_unsigned(&mut out, 0x41, u32::MAX as u64);
        assert_eq!(out, [0x41, 0x05, 0x00, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode_unsigned(&out[2..], 32), Some(u32::MAX as u64));
        // The agent bug: no leading zero.
        assert_eq!(decode_unsigned(&[0xff, 0xff, 0xff, 0xff], 32), Some(u32::MAX as u64));
        assert_eq!(decode_unsigned(&[0x01, 0x00, 0x00, 0x00, 0x00], 32), None);
        out.clear();
        put_unsigned(&mut out, 0x46, u64::MAX);
        assert_eq!(out.len(), 11);
        assert_eq!(decode_unsigned(&out[2..], 64), Some(u64::MAX));
        out.clear();
        put_unsigned(&mut out, 0x46, 0);
        assert_eq!(out, [0x46, 0x01, 0x00]);
    }

    #[test]
    fn long_lengths_and_truncation() {
        let value = vec![7u8; 300];
        let mut out = Vec::new();
        put_tlv(&mut out, TAG_OCTET_STRING, &value);
        assert_eq!(&out[..4], [0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(Reader::new(&out).expect(TAG_OCTET_STRING).unwrap(), &value[..]);
        for cut in 0..out.len() {
            assert!(Reader::new(&out[..cut]).tlv().is_err(), "cut at {cut}");
        }
        assert_eq!(Reader::new(&[0x04, 0x80, 0x00, 0x00]).tlv(), Err(Error::BadLength(1)));
    }

    #[test]
    fn wrap_inserts_the_header() {
        let mut out = vec![0xaa];
        put_integer(&mut out, TAG_INTEGER, 5);
        wrap(&mut out, 1, TAG_SEQUENCE);
        assert_eq!(out, [0xaa, 0x30, 0x03, 0x02, 0x01, 0x05]);
        let mut r = Reader::new(&out[1..]);
        let mut inner = r.enter(TAG_SEQUENCE).unwrap();
        assert_eq!(inner.offset(), 2);
        assert_eq!(inner.integer().unwrap(), 5);
    }
}
