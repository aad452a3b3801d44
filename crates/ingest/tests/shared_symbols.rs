//! Servers in front of one ClickHouse store (a real 18.16 server) share
//! their symbol sources: what one received, another takes from the store
//! (checked like an upload) instead of asking an agent; what the store
//! lacks or holds damaged is asked of an agent, and not looked up again for
//! a while.

use std::sync::Arc;
use std::time::Duration;

use chstore::Writer;
use chstore::local::LocalCluster;
use ingest::SharedSymbols;
use symstore::{Key, Lookup, SymStore};

const TABLE: &str = "ffffffff81000000 T _stext\nffffffff81001000 t do_one_initcall\n";

fn store(dir: &std::path::Path, writer: &Arc<Writer>) -> SymStore {
    let s = SymStore::open(dir, 1 << 30).unwrap();
    s.set_shared(Arc::new(SharedSymbols(Arc::clone(writer))));
    s
}

/// An agent's upload of `plain` as `key`, in one chunk.
fn upload(s: &SymStore, key: &Key, plain: &[u8]) {
    assert!(s.claim(key, 1), "{key}: not claimed");
    let packed = zstd::encode_all(plain, 3).unwrap();
    let filed = s.receive(key, 1, 0, packed.len() as u64, &packed).unwrap();
    assert_eq!(filed, Some(plain.len() as u64));
}

#[test]
fn one_server_s_sources_name_frames_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(&dir.path().join("ch"), 1, 1).unwrap();
    let writer = Arc::new(Writer::open(&cluster.url("s"), None, Duration::from_secs(30)).unwrap());
    let (a, b) = (store(&dir.path().join("a"), &writer), store(&dir.path().join("b"), &writer));

    // A kernel table and a real binary arrive at server A ...
    let table = Key::kallsyms("b00f-1").unwrap();
    upload(&a, &table, TABLE.as_bytes());
    let exe = std::path::Path::new("/bin/true");
    let id = perf::procs::build_id(exe).expect("/bin/true has a build id");
    let binary = Key::binary(&id).unwrap();
    upload(&a, &binary, &std::fs::read(exe).unwrap());
    assert_eq!(a.stats.shared_put.load(std::sync::atomic::Ordering::Relaxed), 2);

    // ... and server B names frames from them without asking an agent.
    for key in [&table, &binary] {
        assert!(!b.has(key));
        assert_eq!(b.lookup(key), Lookup::Fetch);
        assert_eq!(b.lookup(key), Lookup::Wait, "a second lookup while fetching");
        assert!(b.fetch_shared(key), "{key}: not taken from the shared store");
        assert_eq!(std::fs::read(b.path(key).unwrap()).unwrap(), std::fs::read(a.path(key).unwrap()).unwrap());
    }
    assert!(!b.claim(&table, 2), "a source taken from the store is not asked of an agent");
    assert_eq!(b.stats.shared_fetched.load(std::sync::atomic::Ordering::Relaxed), 2);

    // What the store lacks is asked of an agent, and not looked up again
    // at once.
    let missing = Key::kallsyms("b00f-2").unwrap();
    assert!(!b.ensure(&missing));
    assert_eq!(b.lookup(&missing), Lookup::Ask);
    assert!(b.claim(&missing, 2));

    // A damaged copy is refused like a bad upload: counted, not filed.
    let bad = Key::kallsyms("b00f-3").unwrap();
    writer.put_symbol("kallsyms", "b00f-3", &zstd::encode_all(&b"not a table"[..], 3).unwrap()).unwrap();
    assert!(!b.ensure(&bad));
    assert!(!b.has(&bad));
    assert_eq!(b.stats.shared_failed.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(b.lookup(&bad), Lookup::Ask);
}
