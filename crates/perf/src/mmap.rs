//! The only unsafe code of the sampler: `perf_event_open`, the ring's
//! mapping, and the two words shared with the kernel.
//!
//! Protocol (`man perf_event_open`, "MMAP layout"): the kernel writes
//! records, then publishes `data_head` (a store-release on its side); we
//! load `data_head` with acquire ordering, copy `[data_tail, data_head)`,
//! and publish the new `data_tail` with a store-release, after which the
//! kernel may overwrite that space. The ring is never read through a Rust
//! reference: the kernel writes it concurrently, so it is copied out with
//! raw-pointer copies only.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings as sys;

use crate::{Config, Event};

#[derive(Debug)]
pub struct CpuEvent {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_off: usize,
    data_len: usize,
    pub cpu: u32,
}

// SAFETY: the mapping is owned by this value alone and only touched through
// &mut self (reads) or atomics; moving it to another thread is fine.
unsafe impl Send for CpuEvent {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

impl CpuEvent {
    /// A `cpu-clock` event on `cpu` every `cfg.period_ns` (or `cycles` at
    /// that rate on average), every process, samples of IP, pid/tid, time
    /// (CLOCK_MONOTONIC) and CPU, with a ring of `cfg.ring_pages` data pages.
    pub fn open(cpu: u32, cfg: &Config) -> io::Result<CpuEvent> {
        if !cfg.ring_pages.is_power_of_two() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring pages must be a power of two"));
        }
        let (type_, config) = match cfg.event {
            Event::CpuClock => (sys::PERF_TYPE_SOFTWARE, u64::from(sys::PERF_COUNT_SW_CPU_CLOCK)),
            Event::Cycles => (sys::PERF_TYPE_HARDWARE, u64::from(sys::PERF_COUNT_HW_CPU_CYCLES)),
        };
        let mut attr = sys::perf_event_attr {
            type_,
            size: std::mem::size_of::<sys::perf_event_attr>() as u32,
            config,
            sample_type: u64::from(
                sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_TIME | sys::PERF_SAMPLE_CPU,
            ),
            clockid: libc::CLOCK_MONOTONIC,
            ..Default::default()
        };
        match cfg.event {
            Event::CpuClock => attr.__bindgen_anon_1.sample_period = cfg.period_ns,
            Event::Cycles => {
                // Cycles per sample vary with the clock: ask for a rate.
                attr.set_freq(1);
                attr.__bindgen_anon_1.sample_freq = 1_000_000_000 / cfg.period_ns.max(1);
            }
        }
        if cfg.callchain {
            attr.sample_type |= u64::from(sys::PERF_SAMPLE_CALLCHAIN);
            attr.sample_max_stack = 127;
        }
        // Readable (poll) once this many bytes wait in the ring.
        let page = page_size();
        let wakeup = if cfg.wakeup_bytes == 0 { cfg.ring_pages * page / 4 } else { cfg.wakeup_bytes };
        attr.__bindgen_anon_2.wakeup_watermark = wakeup.min(cfg.ring_pages * page - 64).max(1) as u32;
        attr.set_watermark(1);
        attr.set_disabled(1);
        attr.set_use_clockid(1);
        if cfg.sideband {
            // Executable mappings (with build ids), names, forks and exits:
            // what names a sample's addresses after its process is gone.
            // The kernel counts mmap listeners by `mmap`; `mmap2` picks the
            // record's format.
            attr.set_mmap(1);
            attr.set_mmap2(1);
            attr.set_comm(1);
            attr.set_comm_exec(1);
            attr.set_task(1);
            attr.set_build_id(1);
            // Their times, to apply them in order across the CPUs' rings.
            attr.set_sample_id_all(1);
        }
        // SAFETY: attr is a valid, fully initialised perf_event_attr that
        // outlives the call; pid -1 with a cpu samples every process there.
        let open = |attr: &mut sys::perf_event_attr| unsafe {
            perf_event_open_sys::perf_event_open(attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC as _)
        };
        let mut fd = open(&mut attr);
        if fd < 0 && cfg.sideband && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // Kernels before 5.12 know no build ids in MMAP2 records: the
            // reader then takes them from the files.
            attr.set_build_id(0);
            fd = open(&mut attr);
        }
        if fd < 0 {
            let e = io::Error::last_os_error();
            let errno = e.raw_os_error().unwrap_or(0);
            let hint = if cfg.event == Event::Cycles && [libc::ENOENT, libc::EOPNOTSUPP, libc::ENODEV].contains(&errno)
            {
                "this machine has no hardware cycle counter (virtual machines often have none): sample with cpu-clock"
            } else {
                "root, or kernel.perf_event_paranoid <= 0 for every process"
            };
            return Err(io::Error::new(
                e.kind(),
                format!("perf_event_open({}, cpu {cpu}): {e} ({hint})", cfg.event.name()),
            ));
        }
        // SAFETY: fd was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let data_len = cfg.ring_pages * page;
        let map_len = page + data_len;
        // SAFETY: a fresh shared mapping of the event's ring, as the kernel
        // documents (one metadata page plus 2^n data pages).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::other(format!("mmap perf ring of cpu {cpu}: {}", io::Error::last_os_error())));
        }
        let base = base.cast::<u8>();
        // SAFETY: base points at the metadata page (perf_event_mmap_page),
        // which the kernel initialised; data_offset/size are read once.
        let (off, size) = unsafe {
            let meta = base.cast::<sys::perf_event_mmap_page>();
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile(),
                std::ptr::addr_of!((*meta).data_size).read_volatile(),
            )
        };
        // Kernels before 4.1 leave them 0: the data follows the first page.
        let (data_off, data_len) = if size == 0 { (page, data_len) } else { (off as usize, size as usize) };
        Ok(CpuEvent { fd, base, map_len, data_off, data_len, cpu })
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: an ioctl on our own perf fd with no argument.
        let r = unsafe { perf_event_open_sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        let meta = self.base.cast::<sys::perf_event_mmap_page>();
        // SAFETY: data_head and data_tail are naturally aligned u64s in the
        // mapped metadata page, which lives as long as self; the kernel
        // accesses them atomically too.
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)),
            )
        }
    }

    /// Appends every byte written since the last read to `out` and gives
    /// the space back to the kernel. Returns the bytes read.
    pub fn read(&mut self, out: &mut Vec<u8>) -> usize {
        let (head_a, tail_a) = self.head_tail();
        let head = head_a.load(Ordering::Acquire);
        let tail = tail_a.load(Ordering::Relaxed);
        let before = out.len();
        let data = self.base.wrapping_add(self.data_off);
        let len = self.data_len;
        crate::ring::copy_span(len, tail, head, out, |off, dst| {
            // SAFETY: off + dst.len() <= len (copy_span splits at the end of
            // the ring), inside the mapping; the kernel does not write
            // [tail, head) until we publish the new tail below.
            unsafe { std::ptr::copy_nonoverlapping(data.add(off), dst.as_mut_ptr(), dst.len()) }
        });
        tail_a.store(head, Ordering::Release);
        out.len() - before
    }
}

impl Drop for CpuEvent {
    fn drop(&mut self) {
        // SAFETY: base/map_len are the mapping made in open, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}
