//! A group's members by state and a process's proportional set size, from
//! the real `/proc`: three copies of one program — one spinning, one
//! sleeping, one stopped by SIGSTOP — are counted Running, Sleeping and
//! Other; the spinner's PSS is read (more than nothing, at most its RSS).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{busy_shell, spawn, value};
use tasks::{Config, Processes};

#[test]
fn members_are_counted_by_state_and_a_tracked_process_has_its_pss() {
    let dir = tempfile::tempdir().unwrap();
    let sh = busy_shell(dir.path(), "kskstates");
    let mut cfg = Config::new(Duration::from_secs(1), "t".into());
    cfg.min_cpu = 0.05;
    let (mut c, _) = Processes::new(cfg, false);
    let spin = spawn(Command::new(&sh).args(["-c", "while :; do :; done"]));
    let _sleeping = spawn(Command::new(&sh).args(["-c", "read x"]).stdin(std::process::Stdio::piped()));
    let stopped = spawn(Command::new(&sh).args(["-c", "while :; do :; done"]));
    assert!(Command::new("kill").args(["-STOP", &stopped.0.id().to_string()]).status().unwrap().success());
    let spin_pid = spin.0.id().to_string();
    let group = [("groupname", "kskstates")];
    let mut ids = std::collections::HashMap::new();
    let state = |b: &model::Batch, ids: &_, s: &str| {
        value(b, ids, "namedprocess_namegroup_states", &[group[0], ("state", s)]).unwrap_or(-1.0)
    };
    let mut last = String::new();
    // Rounds at the real time, until the spinner is tracked and the three
    // are where they are (a first sight of the stopped one may predate its stop).
    for _ in 0..100_000 {
        let b = c.round(clock::realtime_ns());
        for (id, key) in &b.defs {
            ids.insert(*id, key.clone());
        }
        let pss =
            value(&b, &ids, "kansoku_process_memory_bytes", &[("pid", &spin_pid), ("memtype", "proportionalResident")]);
        let rss = value(&b, &ids, "kansoku_process_memory_bytes", &[("pid", &spin_pid), ("memtype", "resident")]);
        let counts = ["Running", "Sleeping", "Waiting", "Zombie", "Other"].map(|s| state(&b, &ids, s));
        let procs = value(&b, &ids, "namedprocess_namegroup_num_procs", &group).unwrap_or(-1.0);
        last = format!("pss {pss:?} rss {rss:?} states {counts:?} procs {procs}");
        if let (Some(pss), Some(rss)) = (pss, rss)
            && counts == [1.0, 1.0, 0.0, 0.0, 1.0]
        {
            assert!(pss > 0.0 && pss <= rss, "{last}");
            assert_eq!(procs, 3.0, "{last}");
            return;
        }
        std::thread::yield_now();
    }
    panic!("not seen: {last}");
}
