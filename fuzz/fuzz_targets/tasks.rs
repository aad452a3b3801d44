//! What `/proc/PID/{stat,io,status,smaps_rollup}`, cgroup files, mountinfo and the
//! kernel's taskstats messages hold: any bytes are read or refused, never a panic; an exit that ends a
//! process names it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(exits) = tasks::taskstats::parse(data) {
        for e in exits {
            if let Some(p) = e.process() {
                assert!(e.group || e.tgid == Some(p));
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    if let Some(s) = tasks::procfs::parse_stat(&text) {
        assert!(text.contains(&s.comm));
    }
    let _ = tasks::procfs::parse_io(&text);
    let _ = tasks::procfs::parse_status(&text);
    if let Some(pss) = tasks::procfs::parse_pss(&text) {
        assert_eq!(pss % 1024, 0);
    }
    let _ = tasks::cgroups::blkio_bytes(&text);
    let _ = tasks::cgroups::io_stat_bytes(&text);
    let _ = tasks::cgroups::pressure(&text);
    let _ = tasks::cgroups::kv(&text, "usage_usec");
    let _ = tasks::cgroups::hierarchies(&text);
});
