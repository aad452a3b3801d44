//! Times the collector's round on this machine: `cargo run --release --example round_cost`.
fn main() {
    let (mut c, why) = tasks::Collector::new(tasks::Config::new(std::time::Duration::from_secs(1), "x".into()), true);
    if let Some(w) = why {
        eprintln!("{w}");
    }
    let n = 200;
    for k in 0..5 {
        c.round(k);
    }
    let t0 = clock::thread_cpu_ns();
    let w0 = clock::monotonic_ns();
    for k in 0..n {
        std::hint::black_box(c.round(1_000_000_000 * (k + 10)));
    }
    let procs = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())))
        .count();
    eprintln!(
        "{procs} processes: {:.1} us CPU per round ({:.2} us per process), wall {:.1} us",
        (clock::thread_cpu_ns() - t0) as f64 / n as f64 / 1e3,
        (clock::thread_cpu_ns() - t0) as f64 / n as f64 / 1e3 / procs as f64,
        (clock::monotonic_ns() - w0) as f64 / n as f64 / 1e3
    );
}
