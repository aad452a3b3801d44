//! A taskstats message recorded from this kernel (6.18, struct version 16):
//! a single-threaded `python3` that busy-looped 30 ms and exited.

#[test]
fn a_recorded_exit_reads_as_its_process() {
    let e = tasks::taskstats::parse(include_bytes!("fixtures/exit_python3.bin")).unwrap();
    assert_eq!(e.len(), 1);
    let e = &e[0];
    assert_eq!(e.comm, "python3");
    assert!(!e.group);
    assert_eq!(e.tgid, Some(e.pid), "single-threaded: its own process");
    assert_eq!(e.process(), Some(e.pid));
    // 30 ms of busy loop plus the interpreter's start: the scheduler's
    // 49,961,575 ns, split by the ticks (40 ms user, 12 ms system).
    assert_eq!(e.utime_us + e.stime_us, 49_961, "{e:?}");
    assert_eq!(e.utime_us, 49_961 * 40 / 52);
}
