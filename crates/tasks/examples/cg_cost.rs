use std::os::unix::fs::FileExt;
fn main() {
    let mut files = vec![];
    for (dir, names) in [
        ("/sys/fs/cgroup/cpuacct", &["cpuacct.usage", "cpuacct.stat"][..]),
        ("/sys/fs/cgroup/memory", &["memory.usage_in_bytes", "memory.stat"][..]),
        ("/sys/fs/cgroup/blkio", &["blkio.throttle.io_service_bytes"][..]),
        ("/sys/fs/cgroup/unified", &["cpu.stat", "cpu.pressure", "memory.pressure", "io.pressure"][..]),
    ] {
        for n in names {
            let p = format!("{dir}/{n}");
            files.push((p.clone(), std::fs::File::open(&p).unwrap(), 0u64));
        }
    }
    for d in std::fs::read_dir("/sys/fs/cgroup/memory").unwrap().flatten() {
        if d.file_type().unwrap().is_dir() {
            let p = d.path().join("memory.stat");
            files.push((p.display().to_string(), std::fs::File::open(&p).unwrap(), 0));
        }
    }
    let mut buf = vec![0u8; 65536];
    let n = 15;
    for _ in 0..n {
        std::thread::sleep(std::time::Duration::from_secs(1));
        for f in files.iter_mut() {
            let t0 = clock::thread_cpu_ns();
            let _ = f.1.read_at(&mut buf, 0);
            f.2 += (clock::thread_cpu_ns() - t0) as u64;
        }
    }
    for f in &files {
        eprintln!("{:60} {:.1} us", f.0, f.2 as f64 / n as f64 / 1e3);
    }
}
