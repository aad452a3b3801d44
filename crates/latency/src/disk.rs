//! The storage injector: a FUSE file system of three files — `disk.img`,
//! passed through to a backing file, every read, write and sync of it
//! answered `delay` after it arrived; `delay_ns`, whose content is that
//! delay (`echo 2000 > MNT/delay_ns`), so one mount serves every step of a
//! sweep; and `requests`, the count of requests served so far (read it
//! before and after a run: the device requests the run made). Requests are served by several threads, each waiting out its own
//! request's delay (a delay line, as a device with that much more latency
//! per I/O: concurrent requests are not queued behind one another's wait).
//! The wait sleeps to the deadline less 60 µs and busy-waits the rest
//! (`relay::wait_until`), so an idle device costs no CPU.
//!
//! [`Stack`] puts a loop device over `disk.img` and ext4 on it: PostgreSQL,
//! fio or any program then runs on a real block device, unchanged, each of
//! whose I/Os is that much slower — what seed 003's switch hops did to its
//! server's PCIe requests, here per block request and from microseconds up.
//! `disk.img` is opened with FUSE's direct I/O, so every request of the
//! loop device reaches us (no page cache of ours between); the ext4 above
//! keeps its own cache, as it would over a real disk.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

const DISK: INodeNo = INodeNo(2);
const DELAY: INodeNo = INodeNo(3);
const REQUESTS: INodeNo = INodeNo(4);
/// How long the kernel may keep our attributes: the image's size never
/// changes; the delay file's is read anew each time.
const TTL: Duration = Duration::from_secs(1);
/// Threads serving requests, so as many I/Os wait out their delay at once
/// (the loop device keeps up to 128 in flight; databases a handful).
pub const THREADS: usize = 16;

/// What the injector did, for the result and the calibration.
#[derive(Debug, Default)]
pub struct Counts {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
    pub read_bytes: AtomicU64,
    pub written_bytes: AtomicU64,
    /// Requests the backing file refused (answered with its error).
    pub errors: AtomicU64,
}

struct Fs {
    backing: File,
    size: u64,
    delay_ns: Arc<AtomicU64>,
    counts: Arc<Counts>,
    uid: u32,
    gid: u32,
}

impl Fs {
    fn attr(&self, ino: INodeNo) -> FileAttr {
        let (kind, perm, size, nlink) = match ino {
            INodeNo::ROOT => (FileType::Directory, 0o755, 0, 2),
            DISK => (FileType::RegularFile, 0o600, self.size, 1),
            DELAY => (FileType::RegularFile, 0o600, self.delay_text().len() as u64, 1),
            // Its size changes with every request: read to the end.
            _ => (FileType::RegularFile, 0o400, 32, 1),
        };
        let t = SystemTime::UNIX_EPOCH;
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn delay_text(&self) -> String {
        format!("{}\n", self.delay_ns.load(Relaxed))
    }

    fn requests_text(&self) -> String {
        let c = &self.counts;
        format!("{}\n", c.reads.load(Relaxed) + c.writes.load(Relaxed) + c.syncs.load(Relaxed))
    }

    /// Waits out the delay of a request that arrived at `arrived`.
    fn wait(&self, arrived: Instant) {
        let ns = self.delay_ns.load(Relaxed);
        if ns > 0 {
            crate::relay::wait_until(arrived + Duration::from_nanos(ns));
        }
    }
}

impl fuser::Filesystem for Fs {
    /// Asynchronous direct I/O: the loop device's concurrent requests (it
    /// submits them as AIO) arrive at once instead of one after another,
    /// each then waiting out its own delay on its own thread.
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_ASYNC_DIO) {
            tracing::warn!("the kernel's FUSE lacks {missing:?}: the delayed device takes one request at a time");
        }
        let _ = config.set_max_background(THREADS as u16 * 4);
        let _ = config.set_congestion_threshold(THREADS as u16 * 3);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match (parent, name.to_str()) {
            (INodeNo::ROOT, Some("disk.img")) => DISK,
            (INodeNo::ROOT, Some("delay_ns")) => DELAY,
            (INodeNo::ROOT, Some("requests")) => REQUESTS,
            _ => return reply.error(Errno::ENOENT),
        };
        reply.entry(&TTL, &self.attr(ino), Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino {
            INodeNo::ROOT | DISK | DELAY | REQUESTS => reply.attr(&TTL, &self.attr(ino)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    /// Truncating the delay file (`echo N > delay_ns` opens with O_TRUNC)
    /// is accepted and means nothing; the image keeps its size.
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match (ino, size) {
            (DISK, Some(s)) if s != self.size => reply.error(Errno::EPERM),
            (INodeNo::ROOT | DISK | DELAY, _) => reply.attr(&TTL, &self.attr(ino)),
            (REQUESTS, _) => reply.error(Errno::EACCES),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Direct I/O: every read and write comes to us, none is answered
        // from a page cache of this file.
        match ino {
            DISK | DELAY | REQUESTS => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let arrived = Instant::now();
        if ino == DELAY || ino == REQUESTS {
            let text = if ino == DELAY { self.delay_text() } else { self.requests_text() };
            let from = (offset as usize).min(text.len());
            return reply.data(&text.as_bytes()[from..(from + size as usize).min(text.len())]);
        }
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        let mut buf = vec![0u8; len];
        let result = self.backing.read_exact_at(&mut buf, offset);
        self.wait(arrived);
        match result {
            Ok(()) => {
                self.counts.reads.fetch_add(1, Relaxed);
                self.counts.read_bytes.fetch_add(len as u64, Relaxed);
                reply.data(&buf);
            }
            Err(e) => {
                self.counts.errors.fetch_add(1, Relaxed);
                reply.error(Errno::from(e));
            }
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let arrived = Instant::now();
        if ino == REQUESTS {
            return reply.error(Errno::EACCES);
        }
        if ino == DELAY {
            return match std::str::from_utf8(data).ok().and_then(|s| s.trim().parse::<u64>().ok()) {
                Some(ns) if offset == 0 && ns <= 10_000_000_000 => {
                    self.delay_ns.store(ns, Relaxed);
                    reply.written(data.len() as u32);
                }
                _ => reply.error(Errno::EINVAL),
            };
        }
        if offset.saturating_add(data.len() as u64) > self.size {
            return reply.error(Errno::ENOSPC);
        }
        let result = self.backing.write_all_at(data, offset);
        self.wait(arrived);
        match result {
            Ok(()) => {
                self.counts.writes.fetch_add(1, Relaxed);
                self.counts.written_bytes.fetch_add(data.len() as u64, Relaxed);
                reply.written(data.len() as u32);
            }
            Err(e) => {
                self.counts.errors.fetch_add(1, Relaxed);
                reply.error(Errno::from(e));
            }
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let arrived = Instant::now();
        if ino != DISK {
            return reply.ok();
        }
        let result = if datasync { self.backing.sync_data() } else { self.backing.sync_all() };
        self.wait(arrived);
        match result {
            Ok(()) => {
                self.counts.syncs.fetch_add(1, Relaxed);
                reply.ok();
            }
            Err(e) => {
                self.counts.errors.fetch_add(1, Relaxed);
                reply.error(Errno::from(e));
            }
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (DISK, FileType::RegularFile, "disk.img"),
            (DELAY, FileType::RegularFile, "delay_ns"),
            (REQUESTS, FileType::RegularFile, "requests"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// A mounted injector: unmounted when dropped.
pub struct Injector {
    mnt: PathBuf,
    delay_ns: Arc<AtomicU64>,
    counts: Arc<Counts>,
    _session: fuser::BackgroundSession,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector").field("mnt", &self.mnt).finish_non_exhaustive()
    }
}

impl Injector {
    /// Serves `backing` (a file of at least 1 MiB) as `MNT/disk.img` on
    /// the empty directory `mnt`. Needs root (FUSE mounted directly).
    pub fn mount(backing: &Path, mnt: &Path) -> std::io::Result<Injector> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(backing)?;
        let size = file.metadata()?.len();
        let delay_ns = Arc::new(AtomicU64::new(0));
        let counts = Arc::new(Counts::default());
        let fs = Fs {
            backing: file,
            size,
            delay_ns: Arc::clone(&delay_ns),
            counts: Arc::clone(&counts),
            uid: proc_id("Uid:"),
            gid: proc_id("Gid:"),
        };
        let mut cfg = fuser::Config::default();
        cfg.mount_options =
            vec![fuser::MountOption::FSName("kansoku-delay".into()), fuser::MountOption::Subtype("kansoku".into())];
        cfg.n_threads = Some(THREADS);
        cfg.clone_fd = true;
        let session = fuser::spawn_mount(fs, mnt, &cfg)?;
        Ok(Injector { mnt: mnt.to_owned(), delay_ns, counts, _session: session })
    }

    /// The image's path inside the mount.
    pub fn image(&self) -> PathBuf {
        self.mnt.join("disk.img")
    }

    /// Sets the delay of every request from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ns.store(delay.as_nanos() as u64, Relaxed);
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }
}

/// The real id on `key`'s line of `/proc/self/status` (0 if unreadable):
/// the owner the files show, read without a libc call.
fn proc_id(key: &str) -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok()))
        .unwrap_or(0)
}

/// The injector with a loop device over its image and ext4 on that,
/// mounted at `DIR/fs`; everything undone, in reverse, when dropped.
#[derive(Debug)]
pub struct Stack {
    injector: Option<Injector>,
    dir: PathBuf,
    loop_dev: Option<String>,
    mounted: bool,
}

impl Stack {
    /// Builds it in the empty directory `dir`: a sparse backing file of
    /// `size` bytes, the FUSE mount at `dir/fuse`, `losetup`, `mkfs.ext4`,
    /// the file system at `dir/fs`. Needs root, util-linux and e2fsprogs.
    pub fn build(dir: &Path, size: u64) -> Result<Stack, String> {
        let backing = dir.join("backing.img");
        let f = File::create(&backing).map_err(|e| format!("{}: {e}", backing.display()))?;
        f.set_len(size).map_err(|e| format!("{}: {e}", backing.display()))?;
        drop(f);
        let fuse = dir.join("fuse");
        let fs = dir.join("fs");
        for d in [&fuse, &fs] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let injector = Injector::mount(&backing, &fuse).map_err(|e| {
            format!("mount the FUSE injector at {}: {e} (root and /dev/fuse are needed)", fuse.display())
        })?;
        let mut stack = Stack { injector: Some(injector), dir: dir.to_owned(), loop_dev: None, mounted: false };
        let image = stack.injector().image();
        // Direct I/O: the loop device submits its requests to the image as
        // AIO, several at once (buffered, one worker reads them one by one).
        let dev = run("losetup", &["--find", "--show", "--direct-io=on", &image.display().to_string()])?;
        stack.loop_dev = Some(dev.trim().to_owned());
        let dev = stack.loop_dev.clone().unwrap_or_default();
        run("mkfs.ext4", &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", &dev])?;
        run("mount", &[&dev, &fs.display().to_string()])?;
        stack.mounted = true;
        std::fs::set_permissions(&fs, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .map_err(|e| format!("{}: {e}", fs.display()))?;
        Ok(stack)
    }

    pub fn injector(&self) -> &Injector {
        self.injector.as_ref().expect("present until dropped")
    }

    /// Where the delayed ext4 is mounted.
    pub fn fs(&self) -> PathBuf {
        self.dir.join("fs")
    }

    /// The loop device's path.
    pub fn device(&self) -> &str {
        self.loop_dev.as_deref().unwrap_or("")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(inj) = &self.injector {
            inj.set_delay(Duration::ZERO);
        }
        if self.mounted {
            let fs = self.fs().display().to_string();
            if let Err(e) = run("umount", &[&fs]) {
                tracing::warn!("{e}; detaching it lazily");
                let _ = run("umount", &["-l", &fs]);
            }
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = run("losetup", &["-d", &dev]);
        }
        // Unmounts the FUSE file system.
        self.injector.take();
    }
}

/// Runs a tool; its stdout, or an error naming the tool and what it said.
fn run(tool: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(tool).args(args).output().map_err(|e| format!("{tool}: {e} (is it installed?)"))?;
    if !out.status.success() {
        return Err(format!(
            "{tool} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Times `n` reads of 4 KiB at spread offsets of `image` (each reaches the
/// injector: direct I/O); the sorted latencies in ns.
pub fn probe(image: &Path, n: usize) -> std::io::Result<Vec<u64>> {
    let f = File::open(image)?;
    let blocks = (f.metadata()?.len() / 4096).max(1);
    let mut buf = [0u8; 4096];
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u64 {
        // A stride coprime with any power of two: offsets spread over the image.
        let off = (i.wrapping_mul(7919) % blocks) * 4096;
        let t = Instant::now();
        f.read_exact_at(&mut buf, off)?;
        out.push(t.elapsed().as_nanos() as u64);
    }
    out.sort_unstable();
    Ok(out)
}
