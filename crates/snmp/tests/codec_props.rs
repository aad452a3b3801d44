//! Round trips of the BER codec over arbitrary messages, including the
//! boundary values of every type.

use proptest::prelude::*;
use snmp::Oid;
use snmp::message::{self, Header, OidRef, PduKind, Value, VarBind, Version};

fn oid() -> impl Strategy<Value = Vec<u8>> {
    (0u32..=2, proptest::collection::vec(any::<u32>(), 1..12)).prop_map(|(first, rest)| {
        let second = if first == 2 { rest[0] } else { rest[0] % 40 };
        let mut arcs = vec![first, second];
        arcs.extend(&rest[1..]);
        Oid::new(arcs).unwrap().to_bytes()
    })
}

#[derive(Debug, Clone)]
enum V {
    Int(i64),
    Str(Vec<u8>),
    Null,
    Oid(Vec<u8>),
    Ip([u8; 4]),
    C32(u32),
    G32(u32),
    Ticks(u32),
    Opaque(Vec<u8>),
    C64(u64),
    NoSuchObject,
    NoSuchInstance,
    EndOfMibView,
}

fn value() -> impl Strategy<Value = V> {
    prop_oneof![
        prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0), Just(-1), Just(127), Just(128), any::<i64>()]
            .prop_map(V::Int),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(V::Str),
        Just(V::Null),
        oid().prop_map(V::Oid),
        any::<[u8; 4]>().prop_map(V::Ip),
        prop_oneof![Just(u32::MAX), Just(0), Just(1 << 31), any::<u32>()].prop_map(V::C32),
        any::<u32>().prop_map(V::G32),
        any::<u32>().prop_map(V::Ticks),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(V::Opaque),
        prop_oneof![Just(u64::MAX), Just(1 << 53), Just((1 << 53) + 1), Just(0), any::<u64>()].prop_map(V::C64),
        Just(V::NoSuchObject),
        Just(V::NoSuchInstance),
        Just(V::EndOfMibView),
    ]
}

fn as_value(v: &V) -> Value<'_> {
    match v {
        V::Int(i) => Value::Integer(*i),
        V::Str(s) => Value::OctetString(s),
        V::Null => Value::Null,
        V::Oid(o) => Value::ObjectId(OidRef(o)),
        V::Ip(a) => Value::IpAddress(*a),
        V::C32(c) => Value::Counter32(*c),
        V::G32(g) => Value::Gauge32(*g),
        V::Ticks(t) => Value::TimeTicks(*t),
        V::Opaque(o) => Value::Opaque(o),
        V::C64(c) => Value::Counter64(*c),
        V::NoSuchObject => Value::NoSuchObject,
        V::NoSuchInstance => Value::NoSuchInstance,
        V::EndOfMibView => Value::EndOfMibView,
    }
}

proptest! {
    #[test]
    fn messages_round_trip(
        v1 in any::<bool>(),
        community in proptest::collection::vec(any::<u8>(), 0..40),
        kind in prop_oneof![Just(PduKind::Get), Just(PduKind::GetNext), Just(PduKind::Response), Just(PduKind::Set), Just(PduKind::GetBulk)],
        request_id in any::<i32>(),
        status in any::<i64>(),
        index in any::<i64>(),
        varbinds in proptest::collection::vec((oid(), value()), 0..40),
    ) {
        let header = Header {
            version: if v1 { Version::V1 } else { Version::V2c },
            community: &community,
            kind,
            request_id,
            error_status: status,
            error_index: index,
        };
        let vbs: Vec<VarBind<'_>> = varbinds.iter().map(|(o, v)| VarBind { oid: OidRef(o), value: as_value(v) }).collect();
        let mut out = Vec::new();
        message::encode(&mut out, &header, &vbs);
        let (h, got) = message::decode(&out).unwrap();
        prop_assert_eq!(h, header);
        let got: Vec<VarBind<'_>> = got.collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(got, vbs);
        // Any truncation is an error, never a panic or a shorter message.
        let cut = out.len() / 2;
        let r = message::decode(&out[..cut]).and_then(|(_, v)| v.collect::<Result<Vec<_>, _>>());
        prop_assert!(r.is_err());
    }

    #[test]
    fn oids_round_trip_through_text_and_bytes(bytes in oid()) {
        let o = Oid::decode(&bytes).unwrap();
        prop_assert_eq!(o.to_bytes(), bytes);
        prop_assert_eq!(Oid::parse(&o.to_string()).unwrap(), o);
    }
}
