//! A tracked process's proportional set size, from the real `/proc`: its
//! own file (its own process), as `states.rs` copies a shell to run and a
//! fork here could hold that copy open for writing.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{spawn, value};
use tasks::{Config, Processes};

/// A tracked process's PSS is re-read when its resident set grows by more
/// than an eighth, not only on its turn (every few minutes): a process
/// that touches 64 MiB shows it in its PSS the next round.
#[test]
fn a_tracked_process_s_pss_follows_its_resident_set() {
    use std::io::{BufRead, Write};
    let mut cfg = Config::new(Duration::from_secs(1), "t".into());
    cfg.min_rss_bytes = 4 << 20;
    let (mut c, _) = Processes::new(cfg, false);
    let script =
        "import sys\nsys.stdin.readline()\nb = b'x' * (64 << 20)\nprint('ok', flush=True)\nsys.stdin.readline()\n";
    let mut child = spawn(
        Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped()),
    );
    let pid = child.0.id().to_string();
    let mut ids = std::collections::HashMap::new();
    let mut pss = |c: &mut Processes| {
        let b = c.round(clock::realtime_ns());
        for (id, key) in &b.defs {
            ids.insert(*id, key.clone());
        }
        // The interpreter's series: before its exec the child is a copy of
        // this test (tracked too, and ended with a staleness marker).
        let labels = [("pid", pid.as_str()), ("name", "python3"), ("memtype", "proportionalResident")];
        value(&b, &ids, "kansoku_process_memory_bytes", &labels)
    };
    // Until the interpreter is tracked (its resident set is past 4 MiB).
    let before = (0..100_000).find_map(|_| {
        std::thread::yield_now();
        pss(&mut c)
    });
    let before = before.expect("the interpreter is tracked");
    let stdin = child.0.stdin.as_mut().unwrap();
    stdin.write_all(b"go\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ok");
    let after = pss(&mut c).unwrap();
    assert!(after >= before + (48 << 20) as f64, "PSS {before} -> {after} after touching 64 MiB");
}
