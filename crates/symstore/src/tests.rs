//! The symbol store against real files: a binary packed on one side and
//! filed on the other, forged and hostile uploads refused, the budget kept
//! by least recent use, ids that cannot name a path.

use super::*;

/// A real ELF with a build id, as an agent's cache holds it.
fn agent_with_binary(dir: &Path) -> Key {
    let exe = Path::new("/bin/true");
    let id = perf::procs::build_id(exe).expect("/bin/true has a build id");
    let key = Key::binary(&id).unwrap();
    std::fs::create_dir_all(dir.join(BINARIES)).unwrap();
    std::fs::copy(exe, key.path(dir)).unwrap();
    key
}

fn kallsyms_text(n: usize, name: &str) -> String {
    (0..n).map(|i| format!("ffffffff8{:07x} T {name}_{i}\n", i * 16)).collect()
}

/// Sends `packed` in chunks of `chunk` bytes; the last answer.
fn send(s: &SymStore, key: &Key, owner: u64, packed: &[u8], chunk: usize) -> Result<Option<u64>, Refused> {
    let mut last = Ok(None);
    for (i, c) in packed.chunks(chunk).enumerate() {
        last = s.receive(key, owner, (i * chunk) as u64, packed.len() as u64, c);
        last.as_ref().map_err(Clone::clone)?;
    }
    last
}

#[test]
fn a_binary_travels_in_chunks_and_is_filed_by_its_build_id() {
    let (agent, server) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let key = agent_with_binary(agent.path());
    let packed = pack(agent.path(), &key).unwrap();
    let original = std::fs::read(key.path(agent.path())).unwrap();
    assert!(packed.len() < original.len(), "compressed: {} of {}", packed.len(), original.len());
    let s = SymStore::open(server.path(), 1 << 30).unwrap();
    assert!(!s.has(&key));
    assert!(s.claim(&key, 1));
    assert_eq!(send(&s, &key, 1, &packed, 1000), Ok(Some(original.len() as u64)));
    assert_eq!(std::fs::read(s.path(&key).unwrap()).unwrap(), original);
    // Kept: nobody is asked again, and a reopened store knows it.
    assert!(!s.claim(&key, 2));
    let report = s.report();
    assert_eq!(report[0].as_f64(), 1.0);
    assert_eq!(report[1].as_f64(), original.len() as f64);
    assert_eq!(report[5].as_f64(), packed.len() as f64);
    drop(s);
    let s = SymStore::open(server.path(), 1 << 30).unwrap();
    assert!(s.has(&key));
    // No part or temporary file is left.
    let names: Vec<_> =
        std::fs::read_dir(server.path().join(BINARIES)).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [std::ffi::OsString::from(&key.id)]);
}

#[test]
fn a_file_that_is_not_the_build_id_it_claims_is_refused() {
    let (agent, server) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let real = agent_with_binary(agent.path());
    let forged = Key::new(Kind::Binary, &"ab".repeat(20)).unwrap();
    std::fs::copy(real.path(agent.path()), forged.path(agent.path())).unwrap();
    let packed = pack(agent.path(), &forged).unwrap();
    let s = SymStore::open(server.path(), 1 << 30).unwrap();
    assert!(s.claim(&forged, 1));
    let e = send(&s, &forged, 1, &packed, CHUNK).unwrap_err();
    assert!(e.0.contains(&format!("the file's build id is {}", real.id)), "{e}");
    assert!(!s.has(&forged) && !forged.path(server.path()).exists());
    // Not zstd, and a table without addresses: refused too.
    let k = Key::kallsyms("1234-abcd").unwrap();
    assert!(s.claim(&k, 1));
    assert!(s.receive(&k, 1, 0, 5, b"hello").unwrap_err().0.contains("not zstd"));
    assert!(s.claim(&k, 1));
    let zeros = zstd::encode_all(&b"0000000000000000 T schedule\n"[..], 1).unwrap();
    assert!(s.receive(&k, 1, 0, zeros.len() as u64, &zeros).unwrap_err().0.contains("every address is 0"));
    assert_eq!(s.stats.refused.load(Ordering::Relaxed), 3);
    assert!(!s.has(&k));
}

#[test]
fn chunks_come_in_order_on_the_connection_that_was_asked() {
    let server = tempfile::tempdir().unwrap();
    let s = SymStore::open(server.path(), 1 << 30).unwrap();
    let k = Key::kallsyms("aa-bb").unwrap();
    let packed = zstd::encode_all(kallsyms_text(5000, "f").as_bytes(), 3).unwrap();
    // Not asked: refused.
    assert!(s.receive(&k, 1, 0, packed.len() as u64, &packed).unwrap_err().0.contains("not asked"));
    assert!(s.claim(&k, 1));
    // Another connection cannot take it over while it arrives...
    assert!(!s.claim(&k, 2));
    assert!(s.receive(&k, 2, 0, packed.len() as u64, &packed).is_err());
    // ... and a gap drops the upload.
    assert_eq!(s.receive(&k, 1, 0, packed.len() as u64, &packed[..100]), Ok(None));
    assert!(s.receive(&k, 1, 200, packed.len() as u64, &packed[200..]).unwrap_err().0.contains("does not follow"));
    // Its connection let go: another may be asked.
    s.release(1);
    assert!(s.claim(&k, 2));
    assert_eq!(send(&s, &k, 2, &packed, 4096), Ok(Some(kallsyms_text(5000, "f").len() as u64)));
    // Said lacking: not asked again for a while, and the reason stays.
    let other = Key::kallsyms("cc").unwrap();
    assert!(s.claim(&other, 3));
    s.lacks(&other, 3, "the agent kept no kernel symbol table of that boot");
    assert!(!s.claim(&other, 4));
    assert_eq!(s.why_lacking(&other).as_deref(), Some("the agent kept no kernel symbol table of that boot"));
}

#[test]
fn over_budget_the_least_recently_used_go_first() {
    let server = tempfile::tempdir().unwrap();
    let text = kallsyms_text(100, "g");
    let size = text.len() as u64;
    // Room for three.
    let s = SymStore::open(server.path(), 3 * size + 10).unwrap();
    let keys: Vec<Key> = ["a1", "b2", "c3", "d4"].iter().map(|b| Key::kallsyms(b).unwrap()).collect();
    let packed = zstd::encode_all(text.as_bytes(), 3).unwrap();
    for k in &keys[..3] {
        assert!(s.claim(k, 1));
        send(&s, k, 1, &packed, CHUNK).unwrap();
    }
    s.touch(&keys[0]);
    assert!(s.claim(&keys[3], 1));
    send(&s, &keys[3], 1, &packed, CHUNK).unwrap();
    // b2 was used least recently.
    assert!(s.has(&keys[0]) && !s.has(&keys[1]) && s.has(&keys[2]) && s.has(&keys[3]));
    assert!(!keys[1].path(server.path()).exists());
    assert_eq!(s.stats.evicted.load(Ordering::Relaxed), 1);
    assert_eq!(s.stats.evicted_bytes.load(Ordering::Relaxed), size);
    // A smaller budget on reopening drops the oldest by modification time.
    drop(s);
    let s = SymStore::open(server.path(), size).unwrap();
    assert_eq!(s.report()[0].as_f64(), 1.0);
    assert!(s.has(&keys[3]));
}

#[test]
fn ids_name_files_and_nothing_else() {
    for bad in ["", "../etc", "AB", "a", "zz", &"a".repeat(130)] {
        assert_eq!(Key::new(Kind::Binary, bad), None, "{bad:?}");
    }
    for bad in ["", "---", "../x", "a/b", &"a".repeat(65)] {
        assert_eq!(Key::new(Kind::Kallsyms, bad), None, "{bad:?}");
    }
    assert!(Key::new(Kind::Kallsyms, "5810026b-4b9c-47e5-8b96-9cff483359c4").is_some());
    assert_eq!(Key::binary(&[0xab, 0x01]).unwrap().id, "ab01");
}

#[test]
fn what_an_agent_does_not_keep_is_said_in_words() {
    let agent = tempfile::tempdir().unwrap();
    let e = pack(agent.path(), &Key::binary(&[1, 2, 3]).unwrap()).unwrap_err();
    assert!(e.contains("not in the agent's build-id cache"), "{e}");
    let e = pack(agent.path(), &Key::kallsyms("ab").unwrap()).unwrap_err();
    assert!(e.contains("no kernel symbol table"), "{e}");
}

#[test]
fn this_boot_s_table_is_kept_once() {
    let agent = tempfile::tempdir().unwrap();
    let path = snapshot_kallsyms(agent.path(), "0123-beef").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.lines().any(|l| l.ends_with(" schedule")), "schedule in the copy");
    check_kallsyms(&mut text.as_bytes()).unwrap();
    assert!(snapshot_kallsyms(agent.path(), "../x").is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// Chunks from a hostile agent never panic and never file anything.
    #[test]
    fn hostile_chunks_file_nothing(chunks in proptest::collection::vec((0u64..300, 0u64..300, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)), 1..8)) {
        let server = tempfile::tempdir().unwrap();
        let s = SymStore::open(server.path(), 1 << 20).unwrap();
        let k = Key::kallsyms("abc").unwrap();
        s.claim(&k, 1);
        for (offset, total, data) in &chunks {
            let _ = s.receive(&k, 1, *offset, *total, data);
        }
        proptest::prop_assert!(!s.has(&k));
    }
}
