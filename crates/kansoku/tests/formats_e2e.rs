//! Upgrades keep the data: every folder of `fixtures/formats/` holds what a
//! released build left on disk (scripts/format-fixture.sh wrote it with that
//! build) — a server's data directory with blocks and tiers, a WAL left by
//! SIGKILL, the string dictionary, an event log, an agent's spool, and a
//! server's symbol store — and what that build answered about it. Today's
//! binary opens each, answers the same, and sends the old spool on to a
//! server; today's symbol store takes the old sources. A data directory of
//! a format this build does not know is refused with what to do.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{BIN, http_get, start};

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats");
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no format fixtures in {}", root.display());
    dirs
}

/// A copy, so nothing the test runs changes the committed fixture.
fn copy(from: &Path, to: &Path) {
    let ok = Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(ok.success());
}

/// The fixture's name, and a copy of its `part` in a directory of its own.
fn copy_of(fixture: &Path, part: &str) -> (String, tempfile::TempDir, PathBuf) {
    let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join(part);
    copy(&fixture.join(part), &to);
    (name, tmp, to)
}

fn kansoku(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("--config").arg("/dev/null").args(args).output().unwrap()
}

fn meta(fixture: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(fixture.join("meta")).unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{key} "))).unwrap_or_else(|| panic!("{key} in meta"));
    line[key.len() + 1..].to_owned()
}

#[test]
fn every_released_data_directory_opens_and_answers_as_it_did() {
    for fixture in fixtures() {
        let (name, _tmp, data) = copy_of(&fixture, "data");
        let srv =
            start(&["--config", "/dev/null", "server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &data);
        let queries = std::fs::read_to_string(fixture.join("queries")).unwrap();
        for (n, q) in queries.lines().enumerate() {
            let (status, body) = http_get(&srv.addr, q);
            assert_eq!(status, 200, "{name} query {}: {q}: {body}", n + 1);
            let got: serde_json::Value = serde_json::from_str(&body).unwrap();
            let want: serde_json::Value =
                serde_json::from_slice(&std::fs::read(fixture.join(format!("answers/{}.json", n + 1))).unwrap())
                    .unwrap();
            assert_eq!(got, want, "{name} query {}: {q}", n + 1);
        }
        // The event log, read while the server runs (read-only).
        let out =
            kansoku(&["export", "{host=\"fx\"}", "--events", "--format", "csv", "--data", data.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let want = std::fs::read(fixture.join("events.csv")).unwrap();
        assert!(want.len() > 100, "{name}: the fixture holds events");
        assert!(out.stdout == want, "{name}: the exported events differ");
    }
}

#[test]
fn every_released_spool_is_sent_on() {
    for fixture in fixtures() {
        let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
        // In Unix seconds, as `export` takes them (whole seconds around it).
        let ns = |key: &str| meta(&fixture, key).parse::<i64>().unwrap();
        let (from, to) =
            ((ns("spool_from_ns") / 1_000_000_000).to_string(), (ns("spool_to_ns") / 1_000_000_000 + 1).to_string());
        let tmp = tempfile::tempdir().unwrap();
        let spool = tmp.path().join("agent");
        copy(&fixture.join("agent"), &spool);
        let data = tmp.path().join("server");
        let srv =
            start(&["--config", "/dev/null", "server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"], &data);
        let ingest = srv.line.split("agents on ").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
        // The live tail publishes what the store took: the old spool's
        // batches, sent oldest first, show there with their old times.
        let mut live = common::Live::open(&srv.addr, "{host=\"fixture-agent\"}");
        let mut agent = Command::new(BIN)
            .args(["--config", "/dev/null", "agent", "--server", &ingest, "--host", "fixture-agent", "--trace", "off"])
            .arg("--data")
            .arg(&spool)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let window = ns("spool_from_ns")..=ns("spool_to_ns");
        let stored_old = (0..1000).any(|_| window.contains(&live.next_points().0));
        let _ = agent.kill();
        let _ = agent.wait();
        assert!(stored_old, "{name}: no batch of the old spool reached the server");
        // And it is on disk, in the spool's window.
        let out = kansoku(&[
            "export",
            "{host=\"fixture-agent\"}",
            "--from",
            &from,
            "--to",
            &to,
            "--data",
            data.to_str().unwrap(),
        ]);
        let rows = String::from_utf8_lossy(&out.stdout).lines().count();
        assert!(rows > 1, "{name}: no sample of the old spool reached the server");
    }
}

#[test]
fn a_data_directory_of_an_unknown_format_is_refused_with_what_to_do() {
    let fixture = &fixtures()[0];
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy(&fixture.join("data"), &data);
    std::fs::write(data.join("KANSOKU"), "kansoku data directory\nformat 99\n").unwrap();
    let before = std::fs::read_dir(data.join("wal")).unwrap().count();
    let out = kansoku(&["series", "--data", data.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("format 99") && err.contains("use the kansoku that wrote it"), "{err}");
    let out = kansoku(&["up", "--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_dir(data.join("wal")).unwrap().count(), before, "nothing written");
}

/// The symbol store as a release kept it (`symbols/`: a binary under its
/// build id, a boot's kernel table under its boot id): today's `SymStore`
/// opens it and finds each, and each, packed as a server would send it on,
/// passes a fresh store's checks on arrival (the binary carries its build
/// id, the table reads as one).
#[test]
fn every_released_symbol_store_opens_and_its_sources_pass_the_checks() {
    use symstore::{Key, Kind, SymStore};
    for fixture in fixtures() {
        let (name, tmp, root) = copy_of(&fixture, "symbols");
        let kept = SymStore::open(&root, 1 << 30).unwrap();
        let mut keys = Vec::new();
        for (kind, dir) in [(Kind::Binary, "buildid"), (Kind::Kallsyms, "kallsyms")] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let file = entry.unwrap().file_name().to_string_lossy().into_owned();
                keys.push(Key::new(kind, &file).unwrap_or_else(|| panic!("{name}: {dir}/{file} is no key")));
            }
        }
        assert!(keys.iter().any(|k| k.kind == Kind::Binary) && keys.iter().any(|k| k.kind == Kind::Kallsyms), "{name}");
        let fresh = SymStore::open(&tmp.path().join("fresh"), 1 << 30).unwrap();
        for (owner, key) in keys.iter().enumerate() {
            assert!(kept.has(key), "{name}: {key} not found");
            let packed = symstore::pack(kept.root(), key).unwrap();
            assert!(fresh.claim(key, owner as u64));
            let got = fresh.receive(key, owner as u64, 0, packed.len() as u64, &packed);
            assert!(matches!(got, Ok(Some(_))), "{name}: {key}: {got:?}");
            assert!(fresh.has(key));
        }
    }
}
