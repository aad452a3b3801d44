//! The string dictionary's file (`DATA/influx/strings`) is read back after
//! any crash or disk damage: any bytes decode without a panic to strings
//! that each keep one id, no further than the bytes go; appending a frame
//! of new strings after them (as the server does, damage and all) and
//! reading again keeps every string and adds the new ones at the ids they
//! were planned at.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (dict, loaded) = influx::strings::Dict::decode(data);
    assert!(loaded.valid <= data.len());
    for id in 0..dict.len() as u32 * 2 + 2 {
        if let Some(s) = dict.get(id) {
            let again = dict.id(s).expect("a string held has an id");
            assert_eq!(dict.get(again), Some(s));
        }
    }
    // As the server appends: after whatever is there, damage included
    // (a file shorter than its header is begun again).
    let mut file = data.to_vec();
    if file.len() < influx::strings::MAGIC.len() {
        file = influx::strings::MAGIC.to_vec();
    } else {
        // What did not verify overwritten with 0xFF, as the server does
        // (api::influx), so no frame begun in it runs into the new one.
        for r in &loaded.unverified {
            file[r.clone()].fill(0xFF);
        }
    }
    let new: Vec<String> = vec!["fuzz-a".into(), String::new(), "fuzz-a".into(), "ü".into()];
    let Ok((ids, planned)) = dict.plan(&new) else { return };
    if let Some(p) = planned {
        file.extend_from_slice(&p.frame);
    }
    let (again, _) = influx::strings::Dict::decode(&file);
    for (s, id) in new.iter().zip(&ids) {
        assert_eq!(again.get(*id).map(|x| &**x), Some(s.as_str()), "{s:?} at {id}");
    }
    for id in 0..dict.len() as u32 {
        if let Some(s) = dict.get(id) {
            assert_eq!(again.get(id), Some(s), "kept at {id}");
        }
    }
});
