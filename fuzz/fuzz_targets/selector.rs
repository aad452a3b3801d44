//! Selectors arrive in URLs and on the command line: parsing never panics,
//! and whatever parses prints back to a selector that parses the same.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = model::Selector::parse(text) {
        let again = model::Selector::parse(&sel.to_string()).expect("printed selector reparses");
        assert_eq!(again, sel);
    }
});
