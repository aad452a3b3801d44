//! The disk's limits, measured: sequential reads by position and by read
//! size, random reads by queue depth — all with O_DIRECT (the page cache
//! would measure memory) and read-only on what was handed over — and
//! writes under each sync policy on a scratch file of our own.
//!
//! A queue depth of N is N threads each with one read in flight (`pread`
//! blocks): what a database's worker pool does, without io_uring.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

/// O_DIRECT wants buffers, offsets and sizes aligned to the logical block;
/// 4 KiB covers every device here (and 512-byte reads are asked only of
/// devices and files that take them).
const ALIGN: usize = 4096;

/// A buffer of `len` bytes aligned for O_DIRECT, without unsafe code: a
/// larger vector and the aligned window inside it.
#[derive(Debug)]
pub struct Aligned {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    pub fn new(len: usize) -> Aligned {
        let buf = vec![0xa5u8; len + ALIGN];
        let at = buf.as_ptr().align_offset(ALIGN);
        Aligned { buf, at, len }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + self.len]
    }
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }
}

/// What `--disk` names: a device or a file, and its size.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub path: PathBuf,
    pub device: bool,
    pub bytes: u64,
    /// We made the file (and remove it after).
    pub created: bool,
}

/// Opens `path` for O_DIRECT reads, naming the real cause when refused.
pub fn open_direct(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => format!(
                "{}: {e} — this machine refuses to open it even as root (a VM's own disk often is): \
                 give a file (read with O_DIRECT) or a loop device (losetup -f --show FILE)",
                path.display()
            ),
            Some(libc::EINVAL) => format!(
                "{}: {e} — its file system does not take O_DIRECT (tmpfs, some FUSE): give a file on a disk-backed file system",
                path.display()
            ),
            _ => format!("{}: {e}", path.display()),
        };
        anyhow::anyhow!(why)
    })
}

/// The target: an existing device or file (never written), or a file we
/// create of `create_bytes` (filled with data and synced, so reads reach
/// the disk).
pub fn target(path: &Path, create_bytes: u64) -> anyhow::Result<Target> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => {
            let f = open_direct(path)?;
            let bytes = rustix::fs::seek(&f, rustix::fs::SeekFrom::End(0))
                .with_context(|| format!("{}: its size", path.display()))?;
            Ok(Target { path: path.into(), device: true, bytes, created: false })
        }
        Ok(m) if m.is_file() => {
            if m.len() < (64 << 20) {
                bail!("{}: {} bytes; give at least 64 MiB to read from", path.display(), m.len());
            }
            Ok(Target { path: path.into(), device: false, bytes: m.len(), created: false })
        }
        Ok(_) => bail!("{}: neither a block device nor a regular file", path.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fill(path, create_bytes)?;
            Ok(Target { path: path.into(), device: false, bytes: create_bytes, created: true })
        }
        Err(e) => bail!("{}: {e}", path.display()),
    }
}

/// Writes `bytes` of data to a new file with O_DIRECT (no cache to evict
/// later) and syncs it.
fn fill(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    let mut buf = Aligned::new(4 << 20);
    for (i, b) in buf.bytes_mut().iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[0];
    }
    let mut done = 0u64;
    while done < bytes {
        let n = (bytes - done).min(4 << 20) as usize;
        io::Write::write_all(&mut f, &buf.bytes()[..n]).with_context(|| format!("write {}", path.display()))?;
        done += n as u64;
    }
    f.sync_all()?;
    Ok(())
}

/// Reads `len` bytes from `offset` in `size`-byte reads; bytes per second.
fn read_span(f: &File, buf: &mut Aligned, offset: u64, len: u64, size: usize) -> io::Result<f64> {
    let start = Instant::now();
    let mut at = offset;
    while at < offset + len {
        let n = rustix::io::pread(f, &mut buf.bytes_mut()[..size], at)?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    Ok((at - offset) as f64 / start.elapsed().as_secs_f64())
}

#[derive(Debug, Clone, Serialize)]
pub struct PositionPoint {
    pub offset: u64,
    /// Position as a fraction of the capacity.
    pub fraction: f64,
    pub bytes_per_second: f64,
}

/// Sequential read throughput at `points` positions across the target,
/// `span` bytes read at each in 1 MiB reads.
pub fn by_position(t: &Target, points: usize, span: u64) -> anyhow::Result<Vec<PositionPoint>> {
    let f = open_direct(&t.path)?;
    let mut buf = Aligned::new(1 << 20);
    let span = span.min(t.bytes / points.max(1) as u64) / (1 << 20) * (1 << 20);
    let usable = t.bytes.saturating_sub(span);
    (0..points)
        .map(|i| {
            let offset = (usable as f64 * i as f64 / (points.max(2) - 1) as f64) as u64 / (1 << 20) * (1 << 20);
            let bps = read_span(&f, &mut buf, offset, span.max(1 << 20), 1 << 20)?;
            Ok(PositionPoint { offset, fraction: offset as f64 / t.bytes as f64, bytes_per_second: bps })
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct SizePoint {
    pub read_bytes: usize,
    pub bytes_per_second: f64,
    pub reads_per_second: f64,
    /// Why the size could not be read (below the device's O_DIRECT
    /// alignment), instead of figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Sequential read throughput by read size: each size reads on for
/// `time` (at least one read), from a fresh place each.
pub fn by_size(t: &Target, sizes: &[usize], time: Duration) -> anyhow::Result<Vec<SizePoint>> {
    let f = open_direct(&t.path)?;
    let mut buf = Aligned::new(sizes.iter().copied().max().unwrap_or(ALIGN));
    let mut offset = 0u64;
    let mut out = Vec::new();
    for &size in sizes {
        // Each size starts on a fresh 4 KiB boundary and reads on from there.
        offset = offset.div_ceil(ALIGN as u64) * ALIGN as u64;
        let start = Instant::now();
        let (mut reads, mut bytes) = (0u64, 0u64);
        let mut refused = None;
        while reads == 0 || start.elapsed() < time {
            if offset + size as u64 > t.bytes {
                offset = 0;
            }
            let n = match rustix::io::pread(&f, &mut buf.bytes_mut()[..size], offset) {
                Ok(n) => n,
                Err(rustix::io::Errno::INVAL) if size < ALIGN => {
                    refused = Some(format!("{size} B: below the device's O_DIRECT alignment"));
                    break;
                }
                Err(e) => return Err(e).with_context(|| format!("{}: read {size} B at {offset}", t.path.display())),
            };
            offset += n.max(1) as u64;
            bytes += n as u64;
            reads += 1;
        }
        let s = start.elapsed().as_secs_f64();
        out.push(SizePoint {
            read_bytes: size,
            bytes_per_second: bytes as f64 / s,
            reads_per_second: reads as f64 / s,
            refused,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct DepthPoint {
    pub depth: usize,
    pub iops: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Random 4 KiB reads with `depth` in flight (a thread each), for `time`.
pub fn by_depth(t: &Target, depths: &[usize], time: Duration) -> anyhow::Result<Vec<DepthPoint>> {
    let blocks = t.bytes / ALIGN as u64;
    let mut out = Vec::new();
    for &depth in depths {
        let handles: Vec<_> = (0..depth)
            .map(|k| {
                let path = t.path.clone();
                std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
                    let f = open_direct(&path)?;
                    let mut buf = Aligned::new(ALIGN);
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (k as u64 + 1).wrapping_mul(0xff51_afd7_ed55_8ccd);
                    let mut lat = Vec::new();
                    let start = Instant::now();
                    while start.elapsed() < time {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let at = (x % blocks.max(1)) * ALIGN as u64;
                        let t0 = Instant::now();
                        rustix::io::pread(&f, buf.bytes_mut(), at)?;
                        lat.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut lat = Vec::new();
        for h in handles {
            lat.extend(h.join().map_err(|_| anyhow::anyhow!("a reader thread panicked"))??);
        }
        lat.sort_by(f64::total_cmp);
        out.push(DepthPoint {
            depth,
            iops: lat.len() as f64 / time.as_secs_f64(),
            p50_us: crate::quantile(&lat, 0.5),
            p99_us: crate::quantile(&lat, 0.99),
        });
    }
    Ok(out)
}

/// How each write is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sync {
    /// `write` only: the page cache takes it (asynchronous).
    Buffered,
    /// `write` then `fsync`.
    Fsync,
    /// `write` then `fdatasync`.
    Fdatasync,
    /// Opened with O_DSYNC: each `write` returns once on the device.
    ODsync,
}

impl Sync {
    pub const ALL: [Sync; 4] = [Sync::Buffered, Sync::Fsync, Sync::Fdatasync, Sync::ODsync];
    pub fn name(self) -> &'static str {
        match self {
            Sync::Buffered => "buffered",
            Sync::Fsync => "fsync",
            Sync::Fdatasync => "fdatasync",
            Sync::ODsync => "o_dsync",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct WritePoint {
    pub sync: Sync,
    pub write_bytes: usize,
    pub writes: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub bytes_per_second: f64,
}

/// Appends `count` writes of `size` bytes to a new scratch file in `dir`
/// under each policy (removed after); latency per write (with its sync)
/// and throughput.
pub fn writes(dir: &Path, size: usize, count: usize, policies: &[Sync]) -> anyhow::Result<Vec<WritePoint>> {
    let mut out = Vec::new();
    let data = vec![0x5au8; size];
    for &sync in policies {
        let path = dir.join(format!(".kansoku-limits-{}-{}", std::process::id(), sync.name()));
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        if sync == Sync::ODsync {
            opts.custom_flags(libc::O_DSYNC);
        }
        let f = opts.open(&path).with_context(|| format!("create the scratch file {}", path.display()))?;
        let _remove = Remove(path.clone());
        let mut lat = Vec::with_capacity(count);
        let start = Instant::now();
        for _ in 0..count {
            let t0 = Instant::now();
            io::Write::write_all(&mut &f, &data).with_context(|| format!("write {}", path.display()))?;
            match sync {
                Sync::Fsync => f.sync_all()?,
                Sync::Fdatasync => f.sync_data()?,
                Sync::Buffered | Sync::ODsync => {}
            }
            lat.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let secs = start.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        out.push(WritePoint {
            sync,
            write_bytes: size,
            writes: count,
            p50_us: crate::quantile(&lat, 0.5),
            p99_us: crate::quantile(&lat, 0.99),
            bytes_per_second: (size * count) as f64 / secs,
        });
    }
    Ok(out)
}

/// Removes the file at its path when dropped (scratch and created files).
#[derive(Debug)]
pub struct Remove(pub PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What sysfs says of the device under `path` (a device, or the one its
/// file system is on): model, rotational, logical block size. Virtual
/// disks say little; what is missing stays missing.
pub fn device_info(path: &Path) -> serde_json::Value {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else { return serde_json::Value::Null };
    let dev = if m.file_type().is_block_device() { m.rdev() } else { m.dev() };
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition's queue is its disk's.
    let disk = if base.join("partition").exists() { base.join("..") } else { base.clone() };
    let read = |p: PathBuf| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    let name = std::fs::canonicalize(&disk).ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    serde_json::json!({
        "device": format!("{major}:{minor}"),
        "disk": name,
        "model": read(disk.join("device/model")),
        "rotational": read(disk.join("queue/rotational")).map(|v| v == "1"),
        "logical_block_size": read(disk.join("queue/logical_block_size")).and_then(|v| v.parse::<u64>().ok()),
        "scheduler": read(disk.join("queue/scheduler")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_file_is_read_at_every_position_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(&dir.path().join("disk"), 64 << 20).unwrap();
        assert!(t.created && !t.device && t.bytes == 64 << 20);
        let pos = by_position(&t, 4, 4 << 20).unwrap();
        assert_eq!(pos.len(), 4);
        assert_eq!(pos[0].offset, 0);
        assert!(pos[3].offset + (4 << 20) <= t.bytes && pos[3].fraction > 0.8);
        assert!(pos.iter().all(|p| p.bytes_per_second > 0.0));
        let sizes = by_size(&t, &[512, 4096, 1 << 20], Duration::from_millis(50)).unwrap();
        assert!(sizes.iter().all(|s| s.reads_per_second > 0.0));
        // Small reads cost a system call and a device round trip each.
        assert!(sizes[0].bytes_per_second < sizes[2].bytes_per_second, "{sizes:?}");
        let depth = by_depth(&t, &[1, 2], Duration::from_millis(50)).unwrap();
        assert!(depth.iter().all(|d| d.iops > 0.0 && d.p50_us <= d.p99_us));
    }

    #[test]
    fn an_fsync_costs_far_more_than_a_buffered_write() {
        let dir = tempfile::tempdir().unwrap();
        let w = writes(dir.path(), 4096, 50, &Sync::ALL).unwrap();
        assert_eq!(w.len(), 4);
        let (buffered, fsync) = (&w[0], &w[1]);
        assert!(fsync.p50_us > 5.0 * buffered.p50_us, "{w:?}");
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "scratch files removed");
    }

    #[test]
    fn refusals_name_the_cause() {
        let e = target(Path::new("/proc/version"), 1).unwrap_err().to_string();
        assert!(e.contains("64 MiB") || e.contains("neither"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("small"), b"x").unwrap();
        let e = target(&dir.path().join("small"), 1).unwrap_err().to_string();
        assert!(e.contains("at least 64 MiB"), "{e}");
    }
}
