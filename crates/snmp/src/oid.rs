//! Object identifiers: parsed from dotted text or symbolic names of the few
//! MIB objects kansoku knows (see [`crate::mib`]), encoded once, compared as
//! encoded bytes on the hot path.

use std::fmt;

use crate::ber::Error;

/// An OID as its arcs. At least two arcs; the first is 0, 1 or 2.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oid(Vec<u32>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an object identifier (expected dotted numbers like 1.3.6.1.2.1.1.3.0)")]
pub struct ParseOidError(pub String);

impl Oid {
    pub fn new(arcs: Vec<u32>) -> Option<Oid> {
        (arcs.len() >= 2 && arcs[0] <= 2 && (arcs[0] == 2 || arcs[1] < 40)).then_some(Oid(arcs))
    }

    pub fn arcs(&self) -> &[u32] {
        &self.0
    }

    pub fn child(&self, arc: u32) -> Oid {
        let mut arcs = self.0.clone();
        arcs.push(arc);
        Oid(arcs)
    }

    pub fn concat(&self, suffix: &[u32]) -> Oid {
        let mut arcs = self.0.clone();
        arcs.extend_from_slice(suffix);
        Oid(arcs)
    }

    pub fn starts_with(&self, prefix: &Oid) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// The arcs after `prefix`, if this OID is below it.
    pub fn suffix(&self, prefix: &Oid) -> Option<&[u32]> {
        self.0.strip_prefix(prefix.0.as_slice())
    }

    pub fn parse(s: &str) -> Result<Oid, ParseOidError> {
        let t = s.strip_prefix('.').unwrap_or(s);
        let arcs: Option<Vec<u32>> = t.split('.').map(|a| a.parse().ok()).collect();
        arcs.and_then(Oid::new).ok_or_else(|| ParseOidError(s.to_owned()))
    }

    /// BER content octets (without tag and length).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_arc(out, self.0[0] as u64 * 40 + self.0[1] as u64);
        for &a in &self.0[2..] {
            put_arc(out, a as u64);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() + 2);
        self.encode(&mut out);
        out
    }

    /// Whether `content` is a well-formed encoding, without allocating: the
    /// same rules as [`Oid::decode`].
    pub fn check(content: &[u8]) -> Result<(), Error> {
        subidentifiers(content, |_, _| Ok(()))
    }

    /// Decodes BER content octets. Rejects non-minimal arcs (a leading 0x80)
    /// and arcs beyond 32 bits, as net-snmp does.
    pub fn decode(content: &[u8]) -> Result<Oid, Error> {
        let mut arcs = Vec::with_capacity(content.len() + 1);
        subidentifiers(content, |i, v| {
            if arcs.is_empty() {
                // The first subidentifier packs two arcs: 40 * a + b.
                let first = (v / 40).min(2);
                arcs.push(first as u32);
                arcs.push(u32::try_from(v - first * 40).map_err(|_| Error::BadOid(i))?);
            } else {
                arcs.push(v as u32);
            }
            Ok(())
        })?;
        Ok(Oid(arcs))
    }
}

/// Calls `f(offset, value)` for each base-128 subidentifier of an encoded
/// OID: minimal (no leading 0x80), within 32 bits (the first, which packs two
/// arcs, within 2^32 + 80), terminated, and at least one.
fn subidentifiers(content: &[u8], mut f: impl FnMut(usize, u64) -> Result<(), Error>) -> Result<(), Error> {
    let mut acc: u64 = 0;
    let mut fresh = true;
    let mut first = true;
    for (i, &b) in content.iter().enumerate() {
        if fresh && b == 0x80 {
            return Err(Error::BadOid(i));
        }
        acc = (acc << 7) | (b & 0x7f) as u64;
        fresh = b & 0x80 == 0;
        let limit = if first { u32::MAX as u64 + 80 } else { u32::MAX as u64 };
        if acc > limit {
            return Err(Error::BadOid(i));
        }
        if fresh {
            f(i, acc)?;
            acc = 0;
            first = false;
        }
    }
    if !fresh || content.is_empty() {
        return Err(Error::BadOid(content.len()));
    }
    Ok(())
}

fn put_arc(out: &mut Vec<u8>, v: u64) {
    let mut shift = 63 - (v | 1).leading_zeros() as i32;
    shift -= shift % 7;
    while shift > 0 {
        out.push(0x80 | ((v >> shift) & 0x7f) as u8);
        shift -= 7;
    }
    out.push((v & 0x7f) as u8);
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_x690() {
        let oid = Oid::parse("1.3.6.1.2.1.1.3.0").unwrap();
        assert_eq!(oid.to_bytes(), [0x2b, 6, 1, 2, 1, 1, 3, 0]);
        let big = Oid::parse(".1.3.6.1.4.1.2021.4294967295").unwrap();
        assert_eq!(big.to_bytes(), [0x2b, 6, 1, 4, 1, 0x8f, 0x65, 0x8f, 0xff, 0xff, 0xff, 0x7f]);
        assert_eq!(Oid::decode(&big.to_bytes()).unwrap(), big);
        assert_eq!(big.to_string(), "1.3.6.1.4.1.2021.4294967295");
        let two = Oid::parse("2.999.1").unwrap();
        assert_eq!(Oid::decode(&two.to_bytes()).unwrap(), two);
    }

    #[test]
    fn rejects_bad_text_and_bytes() {
        for s in ["", "1", "3.1", "1.40", "1.3.x", "1..3", "1.3.4294967296"] {
            assert!(Oid::parse(s).is_err(), "{s}");
        }
        assert!(Oid::decode(&[]).is_err());
        assert!(Oid::decode(&[0x2b, 0x86]).is_err(), "unterminated arc");
        assert!(Oid::decode(&[0x2b, 0x80, 0x01]).is_err(), "non-minimal arc");
        assert!(Oid::decode(&[0x2b, 0x90, 0x80, 0x80, 0x80, 0x00]).is_err(), "arc over 32 bits");
        for bad in [&[][..], &[0x2b, 0x86], &[0x2b, 0x80, 0x01], &[0x2b, 0x90, 0x80, 0x80, 0x80, 0x00]] {
            assert!(Oid::check(bad).is_err(), "{bad:02x?}");
        }
        assert!(Oid::check(&Oid::parse("2.999.4294967295").unwrap().to_bytes()).is_ok());
    }
}
