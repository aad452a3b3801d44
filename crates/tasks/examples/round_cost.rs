//! Times the collector's round on this machine, back to back, the
//! processes found by the `/proc` walk and by the BPF task iterator, with
//! and without the cgroups: `cargo run --release -p tasks --example round_cost`.
fn main() {
    let procs = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())))
        .count();
    for (iter, cgroups) in [(false, true), (true, true), (true, false)] {
        let mut cfg = tasks::Config::new(std::time::Duration::from_secs(1), "x".into());
        if !cgroups {
            cfg.max_cgroups = 0;
        }
        let (mut c, why) = tasks::Collector::new(cfg, true);
        if let Some(w) = why {
            eprintln!("{w}");
        }
        if iter {
            let mut it = trace::tasks::TaskIter::open().expect("the BPF task iterator (root)");
            c = c.with_runtimes(Box::new(move |out| it.read(out)));
        }
        let n = 200;
        for k in 0..5 {
            c.round(k);
        }
        let t0 = clock::thread_cpu_ns();
        for k in 0..n {
            std::hint::black_box(c.round(1_000_000_000 * (k + 10)));
        }
        let per = (clock::thread_cpu_ns() - t0) as f64 / n as f64 / 1e3;
        eprintln!(
            "{procs} processes, {}, cgroups {}: {per:.1} us CPU per round ({:.2} us per process)",
            if iter { "task iterator" } else { "/proc walk" },
            if cgroups { "on" } else { "off" },
            per / procs as f64
        );
    }
}
