//! The collector on this machine's real `/proc` and taskstats (root): a
//! process born and gone between two scans still adds its CPU to its group
//! — equal to what the kernel's rusage of our children says it used (the
//! only child of this test binary: `real_stale.rs` is another).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{busy_shell, value};
use nix::sys::resource::{UsageWho, getrusage};
use tasks::{Config, Processes};

fn children_cpu() -> f64 {
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    tv(u.user_time()) + tv(u.system_time())
}

#[test]
fn a_process_gone_between_scans_keeps_its_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let sh = busy_shell(dir.path(), "kskshort");
    let (mut c, why) = Processes::new(Config::new(Duration::from_secs(1), "t".into()), true);
    assert_eq!(why, None, "taskstats must open here (root)");
    let mut ids = std::collections::HashMap::new();
    let keep = |ids: &mut std::collections::HashMap<u32, model::SeriesKey>, b: &model::Batch| {
        for (id, k) in &b.defs {
            ids.insert(*id, k.clone());
        }
    };
    let b0 = c.round(1_000_000_000);
    keep(&mut ids, &b0);
    let before = children_cpu();
    // About 30 ms of CPU, born and gone before the next scan.
    let st = Command::new(&sh).args(["-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done"]).status().unwrap();
    assert!(st.success());
    let used = children_cpu() - before;
    assert!(used > 0.005, "the child used {used} s");
    // Its exit record is read on the listener's thread: wait for it to be
    // accounted (rounds are cheap; each reads what has arrived).
    let mut got = None;
    for k in 0..200 {
        let b = c.round(2_000_000_000 + k * 10_000_000);
        keep(&mut ids, &b);
        let cpu = value(&b, &ids, "namedprocess_namegroup_cpu_seconds_total", &[("groupname", "kskshort")]);
        if cpu.is_some() {
            got = cpu;
            break;
        }
        std::thread::yield_now();
    }
    let cpu = got.expect("the short process's group appears");
    assert!((cpu - used).abs() <= 0.005 + 0.05 * used, "group CPU {cpu} s, rusage of the child {used} s");
    assert!(c.stats().exits_between_scans.load(std::sync::atomic::Ordering::Relaxed) >= 1);
}
