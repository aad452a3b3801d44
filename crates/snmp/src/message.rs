//! SNMPv1/v2c messages (RFC 1157, RFC 3416): `SEQUENCE { version, community,
//! PDU }` where the PDU is Get/GetNext/GetBulk/Response/Set with a request id,
//! two integers (error status and index, or non-repeaters and max-repetitions
//! for GetBulk) and a list of variable bindings.
//!
//! [`decode`] checks the envelope eagerly and the varbinds lazily through
//! [`VarBinds`], an allocation-free iterator: the poller walks a response
//! once, comparing OIDs as encoded bytes. Decoding is strict about structure
//! (every length checked, nothing trailing) and lenient where real agents
//! are sloppy (see [`crate::ber::decode_unsigned`]).

use std::fmt;

use crate::ber::{self, Error, Reader, TAG_INTEGER, TAG_NULL, TAG_OCTET_STRING, TAG_OID, TAG_SEQUENCE};
use crate::oid::Oid;

pub const TAG_IP_ADDRESS: u8 = 0x40;
pub const TAG_COUNTER32: u8 = 0x41;
pub const TAG_GAUGE32: u8 = 0x42;
pub const TAG_TIMETICKS: u8 = 0x43;
pub const TAG_OPAQUE: u8 = 0x44;
pub const TAG_COUNTER64: u8 = 0x46;
pub const TAG_NO_SUCH_OBJECT: u8 = 0x80;
pub const TAG_NO_SUCH_INSTANCE: u8 = 0x81;
pub const TAG_END_OF_MIB_VIEW: u8 = 0x82;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    V1,
    V2c,
}

impl Version {
    fn wire(self) -> i64 {
        match self {
            Version::V1 => 0,
            Version::V2c => 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PduKind {
    Get,
    GetNext,
    Response,
    Set,
    GetBulk,
}

impl PduKind {
    pub fn tag(self) -> u8 {
        match self {
            PduKind::Get => 0xa0,
            PduKind::GetNext => 0xa1,
            PduKind::Response => 0xa2,
            PduKind::Set => 0xa3,
            PduKind::GetBulk => 0xa5,
        }
    }

    fn from_tag(tag: u8) -> Option<PduKind> {
        Some(match tag {
            0xa0 => PduKind::Get,
            0xa1 => PduKind::GetNext,
            0xa2 => PduKind::Response,
            0xa3 => PduKind::Set,
            0xa5 => PduKind::GetBulk,
            _ => return None,
        })
    }
}

/// RFC 3416 error-status values (0..=18); v1 agents use 0..=5.
pub fn error_status_name(status: i64) -> &'static str {
    const NAMES: [&str; 19] = [
        "noError",
        "tooBig",
        "noSuchName",
        "badValue",
        "readOnly",
        "genErr",
        "noAccess",
        "wrongType",
        "wrongLength",
        "wrongEncoding",
        "wrongValue",
        "noCreation",
        "inconsistentValue",
        "resourceUnavailable",
        "commitFailed",
        "undoFailed",
        "authorizationError",
        "notWritable",
        "inconsistentName",
    ];
    usize::try_from(status).ok().and_then(|i| NAMES.get(i)).copied().unwrap_or("unknownError")
}

/// An OID as encoded content bytes, borrowed from a datagram.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OidRef<'a>(pub &'a [u8]);

impl OidRef<'_> {
    pub fn to_oid(self) -> Result<Oid, Error> {
        Oid::decode(self.0)
    }
}

impl fmt::Debug for OidRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_oid() {
            Ok(o) => write!(f, "{o}"),
            Err(_) => write!(f, "<bad oid {:02x?}>", self.0),
        }
    }
}

/// A varbind value, borrowing strings from the datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Integer(i64),
    OctetString(&'a [u8]),
    Null,
    ObjectId(OidRef<'a>),
    IpAddress([u8; 4]),
    Counter32(u32),
    Gauge32(u32),
    TimeTicks(u32),
    Opaque(&'a [u8]),
    Counter64(u64),
    NoSuchObject,
    NoSuchInstance,
    EndOfMibView,
}

impl Value<'_> {
    /// The value as a sample, when it is a number: integers and the unsigned
    /// application types, and octet strings holding a decimal number (UCD's
    /// `laLoad` is "0.15"). Counter64 above 2^53 loses precision here; the
    /// poller computes increases from the exact integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Integer(v) => Some(v as f64),
            Value::Counter32(v) | Value::Gauge32(v) | Value::TimeTicks(v) => Some(v as f64),
            Value::Counter64(v) => Some(v as f64),
            Value::OctetString(s) => std::str::from_utf8(s).ok()?.trim().parse::<f64>().ok().filter(|v| v.is_finite()),
            _ => None,
        }
    }

    /// An exception (v2c) standing in for a value.
    pub fn exception(&self) -> Option<&'static str> {
        match self {
            Value::NoSuchObject => Some("noSuchObject"),
            Value::NoSuchInstance => Some("noSuchInstance"),
            Value::EndOfMibView => Some("endOfMibView"),
            _ => None,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Value::Integer(v) => ber::put_integer(out, TAG_INTEGER, v),
            Value::OctetString(s) => ber::put_tlv(out, TAG_OCTET_STRING, s),
            Value::Null => ber::put_tlv(out, TAG_NULL, &[]),
            Value::ObjectId(o) => ber::put_tlv(out, TAG_OID, o.0),
            Value::IpAddress(a) => ber::put_tlv(out, TAG_IP_ADDRESS, &a),
            Value::Counter32(v) => ber::put_unsigned(out, TAG_COUNTER32, v as u64),
            Value::Gauge32(v) => ber::put_unsigned(out, TAG_GAUGE32, v as u64),
            Value::TimeTicks(v) => ber::put_unsigned(out, TAG_TIMETICKS, v as u64),
            Value::Opaque(s) => ber::put_tlv(out, TAG_OPAQUE, s),
            Value::Counter64(v) => ber::put_unsigned(out, TAG_COUNTER64, v),
            Value::NoSuchObject => ber::put_tlv(out, TAG_NO_SUCH_OBJECT, &[]),
            Value::NoSuchInstance => ber::put_tlv(out, TAG_NO_SUCH_INSTANCE, &[]),
            Value::EndOfMibView => ber::put_tlv(out, TAG_END_OF_MIB_VIEW, &[]),
        }
    }

    fn decode(at: usize, tag: u8, v: &[u8]) -> Result<Value<'_>, Error> {
        let range = || Error::IntegerRange(at);
        let u32_of = |v| ber::decode_unsigned(v, 32).map(|x| x as u32).ok_or_else(range);
        Ok(match tag {
            TAG_INTEGER => Value::Integer(ber::decode_i64(v).ok_or_else(range)?),
            TAG_OCTET_STRING => Value::OctetString(v),
            TAG_NULL => Value::Null,
            TAG_OID => {
                Oid::check(v).map_err(|_| Error::BadOid(at))?;
                Value::ObjectId(OidRef(v))
            }
            TAG_IP_ADDRESS => Value::IpAddress(v.try_into().map_err(|_| Error::BadLength(at))?),
            TAG_COUNTER32 => Value::Counter32(u32_of(v)?),
            TAG_GAUGE32 => Value::Gauge32(u32_of(v)?),
            TAG_TIMETICKS => Value::TimeTicks(u32_of(v)?),
            TAG_OPAQUE => Value::Opaque(v),
            TAG_COUNTER64 => Value::Counter64(ber::decode_unsigned(v, 64).ok_or_else(range)?),
            TAG_NO_SUCH_OBJECT => Value::NoSuchObject,
            TAG_NO_SUCH_INSTANCE => Value::NoSuchInstance,
            TAG_END_OF_MIB_VIEW => Value::EndOfMibView,
            tag => return Err(Error::UnknownTag { at, tag }),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VarBind<'a> {
    pub oid: OidRef<'a>,
    pub value: Value<'a>,
}

/// Everything of a message but its varbinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub version: Version,
    pub community: &'a [u8],
    pub kind: PduKind,
    pub request_id: i32,
    /// Error status; non-repeaters in a GetBulk.
    pub error_status: i64,
    /// Error index (1-based varbind); max-repetitions in a GetBulk.
    pub error_index: i64,
}

/// The varbinds of a decoded message, decoded as they are iterated. After the
/// first error the iterator ends.
#[derive(Debug, Clone)]
pub struct VarBinds<'a> {
    list: Reader<'a>,
    failed: bool,
}

impl<'a> Iterator for VarBinds<'a> {
    type Item = Result<VarBind<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.list.is_empty() {
            return None;
        }
        let r = (|| {
            let mut vb = self.list.enter(TAG_SEQUENCE)?;
            let oid_at = vb.offset();
            let oid = vb.expect(TAG_OID)?;
            Oid::check(oid).map_err(|_| Error::BadOid(oid_at))?;
            let at = vb.offset();
            let (tag, v) = vb.tlv()?;
            let value = Value::decode(at, tag, v)?;
            vb.finish()?;
            Ok(VarBind { oid: OidRef(oid), value })
        })();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Decodes a datagram's envelope; varbinds decode as they are iterated.
pub fn decode(datagram: &[u8]) -> Result<(Header<'_>, VarBinds<'_>), Error> {
    let mut top = Reader::new(datagram);
    let mut msg = top.enter(TAG_SEQUENCE)?;
    top.finish()?;
    let version = match msg.integer()? {
        0 => Version::V1,
        1 => Version::V2c,
        v => return Err(Error::Version(v)),
    };
    let community = msg.expect(TAG_OCTET_STRING)?;
    let (tag, _) = msg.clone().tlv()?;
    let kind = PduKind::from_tag(tag).ok_or(Error::PduType(tag))?;
    let mut pdu = msg.enter(tag)?;
    msg.finish()?;
    let rid_at = pdu.offset();
    let request_id = i32::try_from(pdu.integer()?).map_err(|_| Error::IntegerRange(rid_at))?;
    let error_status = pdu.integer()?;
    let error_index = pdu.integer()?;
    let list = pdu.enter(TAG_SEQUENCE)?;
    pdu.finish()?;
    Ok((Header { version, community, kind, request_id, error_status, error_index }, VarBinds { list, failed: false }))
}

/// Encodes a whole message.
pub fn encode(out: &mut Vec<u8>, header: &Header<'_>, varbinds: &[VarBind<'_>]) {
    let start = out.len();
    ber::put_integer(out, TAG_INTEGER, header.version.wire());
    ber::put_tlv(out, TAG_OCTET_STRING, header.community);
    let pdu = out.len();
    ber::put_integer(out, TAG_INTEGER, header.request_id as i64);
    ber::put_integer(out, TAG_INTEGER, header.error_status);
    ber::put_integer(out, TAG_INTEGER, header.error_index);
    let list = out.len();
    for vb in varbinds {
        let one = out.len();
        ber::put_tlv(out, TAG_OID, vb.oid.0);
        vb.value.encode(out);
        ber::wrap(out, one, TAG_SEQUENCE);
    }
    ber::wrap(out, list, TAG_SEQUENCE);
    ber::wrap(out, pdu, header.kind.tag());
    ber::wrap(out, start, TAG_SEQUENCE);
}

/// Request ids the poller uses: exactly four content bytes in minimal BER
/// (first byte 0x01..=0x7f), so a pre-encoded request is patched in place.
pub const REQUEST_ID_MIN: i32 = 0x0100_0000;
pub const REQUEST_ID_SPAN: u32 = (i32::MAX - REQUEST_ID_MIN) as u32 + 1;

/// A request encoded once, sent many times with a new request id.
#[derive(Debug, Clone)]
pub struct PreEncoded {
    bytes: Vec<u8>,
    rid_at: usize,
}

impl PreEncoded {
    /// Encodes a request without values (Get, GetNext) or a GetBulk with
    /// `non_repeaters`/`max_repetitions`.
    pub fn new(version: Version, community: &[u8], kind: PduKind, oids: &[Vec<u8>], bulk: (i64, i64)) -> PreEncoded {
        let varbinds: Vec<VarBind<'_>> = oids.iter().map(|o| VarBind { oid: OidRef(o), value: Value::Null }).collect();
        let header =
            Header { version, community, kind, request_id: REQUEST_ID_MIN, error_status: bulk.0, error_index: bulk.1 };
        let mut bytes = Vec::with_capacity(32 + community.len() + oids.iter().map(|o| o.len() + 6).sum::<usize>());
        encode(&mut bytes, &header, &varbinds);
        // The request id is the first INTEGER inside the PDU: skip its tag and length.
        let rid_at = request_id_offset(&bytes) + 2;
        debug_assert_eq!(bytes[rid_at..rid_at + 4], REQUEST_ID_MIN.to_be_bytes());
        PreEncoded { bytes, rid_at }
    }

    /// Patches in `request_id` (from [`REQUEST_ID_MIN`] up).
    pub fn set_request_id(&mut self, request_id: i32) {
        debug_assert!(request_id >= REQUEST_ID_MIN);
        self.bytes[self.rid_at..self.rid_at + 4].copy_from_slice(&request_id.to_be_bytes());
    }

    /// The datagram with `request_id` patched in.
    pub fn with_request_id(&mut self, request_id: i32) -> &[u8] {
        self.set_request_id(request_id);
        &self.bytes
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Offset of the request id's TLV in an encoded message we made.
fn request_id_offset(bytes: &[u8]) -> usize {
    let mut top = Reader::new(bytes);
    let mut msg = top.enter(TAG_SEQUENCE).expect("BUG: we encoded it");
    msg.integer().expect("BUG: version");
    msg.expect(TAG_OCTET_STRING).expect("BUG: community");
    let (tag, _) = msg.clone().tlv().expect("BUG: pdu");
    msg.enter(tag).expect("BUG: pdu").offset()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(s: &str) -> Vec<u8> {
        Oid::parse(s).unwrap().to_bytes()
    }

    #[test]
    fn get_request_matches_net_snmp_bytes() {
        // GetRequest for sysUpTime.0 assembled by hand from RFC 1157's ASN.1;
        // tests/net_snmp.rs compares our requests with snmpget's on the wire.
        let mut req = PreEncoded::new(Version::V1, b"public", PduKind::Get, &[oid("1.3.6.1.2.1.1.3.0")], (0, 0));
        let bytes = req.with_request_id(0x0100_0000).to_vec();
        let expected: &[u8] = &[
            0x30, 0x29, 0x02, 0x01, 0x00, 0x04, 0x06, b'p', b'u', b'b', b'l', b'i', b'c', 0xa0, 0x1c, 0x02, 0x04, 0x01,
            0x00, 0x00, 0x00, 0x02, 0x01, 0x00, 0x02, 0x01, 0x00, 0x30, 0x0e, 0x30, 0x0c, 0x06, 0x08, 0x2b, 0x06, 0x01,
            0x02, 0x01, 0x01, 0x03, 0x00, 0x05, 0x00,
        ];
        assert_eq!(bytes, expected);
        let patched = req.with_request_id(0x7fff_fffe).to_vec();
        let (h, vbs) = decode(&patched).unwrap();
        assert_eq!(h.request_id, 0x7fff_fffe);
        assert_eq!(vbs.count(), 1);
    }

    #[test]
    fn response_round_trips() {
        let o1 = oid("1.3.6.1.2.1.1.3.0");
        let o2 = oid("1.3.6.1.2.1.31.1.1.1.6.2");
        let o3 = oid("1.3.6.1.4.1.2021.10.1.3.1");
        let vbs = [
            VarBind { oid: OidRef(&o1), value: Value::TimeTicks(123456) },
            VarBind { oid: OidRef(&o2), value: Value::Counter64(u64::MAX) },
            VarBind { oid: OidRef(&o3), value: Value::OctetString(b"0.15") },
            VarBind { oid: OidRef(&o3), value: Value::NoSuchInstance },
        ];
        let h = Header {
            version: Version::V2c,
            community: b"c",
            kind: PduKind::Response,
            request_id: -5,
            error_status: 0,
            error_index: 0,
        };
        let mut out = Vec::new();
        encode(&mut out, &h, &vbs);
        let (h2, got) = decode(&out).unwrap();
        assert_eq!(h2, h);
        let got: Vec<_> = got.collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vbs);
        assert_eq!(got[2].value.as_f64(), Some(0.15));
        for cut in 0..out.len() {
            let r = decode(&out[..cut]).and_then(|(_, v)| v.collect::<Result<Vec<_>, _>>());
            assert!(r.is_err(), "truncated at {cut} decoded");
        }
    }
}
