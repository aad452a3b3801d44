//! Times the collector's round on this machine: the processes found by the
//! `/proc` walk and by the BPF task iterator, with and without the
//! cgroups, back to back (`cargo run --release -p tasks --example
//! round_cost`); or, given a pause in ms, rounds that far apart with the
//! iterator and the cgroups, as `kansoku up --processes` runs them (cold
//! caches: `… --example round_cost -- 1000`).
fn main() {
    let procs = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())))
        .count();
    let pause = std::env::args().nth(1).map(|ms| std::time::Duration::from_millis(ms.parse().expect("a pause in ms")));
    let kinds: &[(bool, bool)] =
        if pause.is_some() { &[(true, true)] } else { &[(false, true), (true, true), (true, false)] };
    for &(iter, cgroups) in kinds {
        let mut cfg = tasks::Config::new(std::time::Duration::from_secs(1), "x".into());
        if !cgroups {
            cfg.max_cgroups = 0;
        }
        let (mut c, why) = tasks::Processes::new(cfg, true);
        if let Some(w) = why {
            eprintln!("{w}");
        }
        if iter {
            let mut it = trace::tasks::TaskIter::open().expect("the BPF task iterator (root)");
            c = c.with_runtimes(Box::new(move |out| it.read(out)));
        }
        let n = if pause.is_some() { 30 } else { 200 };
        for k in 0..5 {
            c.round(k);
        }
        let mut cpu = 0;
        for k in 0..n {
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
            let t0 = clock::thread_cpu_ns();
            std::hint::black_box(c.round(1_000_000_000 * (k + 10)));
            cpu += clock::thread_cpu_ns() - t0;
        }
        let per = cpu as f64 / n as f64 / 1e3;
        eprintln!(
            "{procs} processes, {}, cgroups {}{}: {per:.1} us CPU per round ({:.2} us per process)",
            if iter { "task iterator" } else { "/proc walk" },
            if cgroups { "on" } else { "off" },
            pause.map_or(String::new(), |p| format!(", rounds {} ms apart", p.as_millis())),
            per / procs as f64
        );
    }
}
