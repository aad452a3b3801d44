//! SNMP datagrams come from anyone who can reach the poller's sockets:
//! decoding arbitrary bytes never panics, and whatever decodes re-encodes to
//! a message that decodes to the same header and varbinds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use snmp::message::{self, VarBind};

fuzz_target!(|data: &[u8]| {
    let Ok((header, varbinds)) = message::decode(data) else { return };
    let Ok(varbinds) = varbinds.collect::<Result<Vec<VarBind<'_>>, _>>() else { return };
    for vb in &varbinds {
        let _ = vb.value.as_f64();
        let _ = vb.oid.to_oid().expect("decode checked the OID");
    }
    let mut again = Vec::new();
    message::encode(&mut again, &header, &varbinds);
    let (h2, v2) = message::decode(&again).expect("our own encoding decodes");
    assert_eq!(h2, header);
    let v2: Vec<VarBind<'_>> = v2.collect::<Result<_, _>>().expect("our own varbinds decode");
    assert_eq!(v2, varbinds);
});
