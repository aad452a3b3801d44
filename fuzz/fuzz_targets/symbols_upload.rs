//! Symbol sources come from agents in chunks (`wire::Msg::Blob`): any
//! sequence of chunks, any bytes (decompressed by zstd, then read as a
//! kernel symbol table), is taken or refused, never a panic; what is filed
//! reads back as a table. The first byte is the chunk size; with `Z` as the
//! second the rest is compressed first, so the table reader sees the
//! fuzzer's bytes.
#![no_main]
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use symstore::{Key, SymStore};

fn store() -> &'static SymStore {
    static S: OnceLock<SymStore> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kansoku-fuzz-symbols-{}", std::process::id()));
        // A small budget: filed tables are soon dropped again.
        SymStore::open(&dir, 1 << 20).expect("a store in the temp directory")
    })
}

fuzz_target!(|data: &[u8]| {
    static N: AtomicU64 = AtomicU64::new(1);
    let (Some(&size), rest) = (data.first(), data.get(2..).unwrap_or_default()) else { return };
    let packed = if data.get(1) == Some(&b'Z') { zstd::encode_all(rest, 1).unwrap() } else { rest.to_vec() };
    let s = store();
    let key = Key::kallsyms(&format!("{:x}", N.fetch_add(1, Ordering::Relaxed))).unwrap();
    assert!(s.claim(&key, 1));
    let total = packed.len() as u64;
    let mut offset = 0u64;
    for chunk in packed.chunks(usize::from(size.max(1))) {
        if s.receive(&key, 1, offset, total, chunk).is_err() {
            break;
        }
        offset += chunk.len() as u64;
    }
    if let Some(path) = s.path(&key) {
        let text = std::fs::read(&path).unwrap();
        assert!(symstore::check_table(&text).is_ok(), "filed, so it reads as a table");
    }
    s.release(1);
});
