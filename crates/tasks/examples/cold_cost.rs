fn main() {
    let n: i64 = std::env::args().nth(1).map_or(20, |s| s.parse().unwrap());
    let pause = std::time::Duration::from_millis(std::env::args().nth(2).map_or(1000, |s| s.parse().unwrap()));
    let cfg = tasks::Config::new(std::time::Duration::from_secs(1), "x".into());
    let (mut c, _) = tasks::Collector::new(cfg, true);
    let mut it = trace::tasks::TaskIter::open().unwrap();
    c = c.with_runtimes(Box::new(move |out| it.read(out)));
    for k in 0..3 {
        c.round(k);
    }
    let mut tot = 0;
    for k in 0..n {
        std::thread::sleep(pause);
        let t0 = clock::thread_cpu_ns();
        let b = c.round(1_000_000_000 * (k + 10));
        if k == n - 1 {
            eprintln!("points {} defs {}", b.points.len(), b.defs.len());
        }
        tot += clock::thread_cpu_ns() - t0;
    }
    eprintln!("round: {:.1} us", tot as f64 / n as f64 / 1e3);
}
