//! The tracer on the real kernel: a thread makes 20,000 `getppid` calls;
//! the kernel's histograms count every one of them (others' calls may add
//! more), the buckets add up to the count, and the times are plausible.

use trace::{Snapshot, SyscallTracer};

const GETPPID: u32 = 110;
const N: u64 = 20_000;

fn getppid_of(s: &Snapshot) -> (u64, u64, u64) {
    s.syscalls.get(&GETPPID).map_or((0, 0, 0), |d| (d.count, d.sum_ns, d.buckets.values().sum()))
}

#[test]
fn every_system_call_is_counted_in_its_histogram() {
    let tracer = SyscallTracer::start().expect("kernel tracing (run as root)");
    let before = tracer.read().unwrap();
    let worker = std::thread::spawn(|| {
        for _ in 0..N {
            std::hint::black_box(std::os::unix::process::parent_id());
        }
    });
    worker.join().unwrap();
    let after = tracer.read().unwrap();
    let (c0, s0, b0) = getppid_of(&before);
    let (c1, s1, b1) = getppid_of(&after);
    assert!(c1 - c0 >= N, "getppid counted {} times, made {N}", c1 - c0);
    assert_eq!(b1 - b0, c1 - c0, "the buckets add up to the count");
    // getppid takes tens of ns to a few µs each, never nothing, never ms.
    let mean = (s1 - s0) as f64 / (c1 - c0) as f64;
    assert!((10.0..1e6).contains(&mean), "mean getppid latency {mean} ns");
    // Other calls are traced too: reading the maps is itself system calls.
    assert!(after.syscalls.len() >= 2, "{:?}", after.syscalls.keys());
}

#[test]
fn the_producer_writes_prometheus_histograms() {
    let mut t = trace::Tracer::start(std::time::Duration::from_secs(1), "h").expect("kernel tracing (run as root)");
    let mut snap = Snapshot::default();
    let d = snap.syscalls.entry(GETPPID).or_default();
    (d.count, d.sum_ns) = (3, 3_000);
    d.buckets.insert(39, 2); // [896, 1024) ns
    d.buckets.insert(40, 1); // [1024, 1280) ns
    let b = t.batch(&snap, 7);
    let shown: Vec<String> = b.points.iter().map(|(id, v)| format!("{} {v}", b.defs[*id as usize].1)).collect();
    assert_eq!(
        shown,
        [
            r#"kernel_syscall_seconds_count{host="h",syscall="getppid"} 3"#,
            r#"kernel_syscall_seconds_sum{host="h",syscall="getppid"} 0.000003"#,
            r#"kernel_syscall_seconds_bucket{host="h",le="0.000001024",syscall="getppid"} 2"#,
            r#"kernel_syscall_seconds_bucket{host="h",le="0.00000128",syscall="getppid"} 3"#,
            r#"kernel_syscall_seconds_bucket{host="h",le="+Inf",syscall="getppid"} 3"#,
        ]
    );
    // The next batch declares nothing new.
    assert!(t.batch(&snap, 8).defs.is_empty());
}
