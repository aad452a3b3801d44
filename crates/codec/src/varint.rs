//! LEB128 varints, zig-zag for signed values, and the binary series-key form
//! used on disk. Decoders return `None` on truncated or overlong input, never
//! panic: their input comes from files that may be torn or corrupt.

use model::SeriesKey;

pub fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, zigzag(v));
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A cursor over untrusted bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn u64(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self.data.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                // The 10th byte may carry only the top bit.
                return (shift < 63 || b <= 1).then_some(v);
            }
        }
        None
    }

    pub fn i64(&mut self) -> Option<i64> {
        self.u64().map(unzigzag)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.u64().and_then(|v| u32::try_from(v).ok())
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    pub fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N).map(|s| s.try_into().expect("length checked"))
    }

    pub fn f64(&mut self) -> Option<f64> {
        self.fixed::<8>().map(f64::from_le_bytes)
    }

    pub fn str(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.u64()?).ok()?;
        std::str::from_utf8(self.bytes(n)?).ok()
    }
}

/// A varint length and the UTF-8 bytes; read by [`Reader::str`].
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// `name, n_labels, (label, value)*`, each string length-prefixed.
pub fn put_key(out: &mut Vec<u8>, key: &SeriesKey) {
    put_str(out, key.name());
    put_u64(out, key.labels().len() as u64);
    for (k, v) in key.labels() {
        put_str(out, k);
        put_str(out, v);
    }
}

/// Upper bound on labels per series accepted from disk: more means corruption.
const LABELS_MAX: u64 = 1024;

pub fn get_key(r: &mut Reader<'_>) -> Option<SeriesKey> {
    let name = r.str()?;
    let n = r.u64()?;
    if n > LABELS_MAX {
        return None;
    }
    let mut labels = Vec::with_capacity(n as usize);
    for _ in 0..n {
        labels.push((r.str()?, r.str()?));
    }
    Some(SeriesKey::new(name, labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(v: u64, s: i64) {
            let mut out = Vec::new();
            put_u64(&mut out, v);
            put_i64(&mut out, s);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.u64(), Some(v));
            prop_assert_eq!(r.i64(), Some(s));
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn keys_round_trip(name in "[a-z_]{1,12}", labels in proptest::collection::vec(("[a-z]{1,4}", ".{0,6}"), 0..5)) {
            let key = SeriesKey::new(name, labels);
            let mut out = Vec::new();
            put_key(&mut out, &key);
            prop_assert_eq!(get_key(&mut Reader::new(&out)), Some(key));
        }

        #[test]
        fn decoding_garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = get_key(&mut Reader::new(&data));
            let _ = Reader::new(&data).u64();
        }
    }

    #[test]
    fn overlong_varint_is_rejected() {
        assert_eq!(Reader::new(&[0xff; 11]).u64(), None);
        assert_eq!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64(), None);
        assert_eq!(Reader::new(&[0x80]).u64(), None);
    }
}
