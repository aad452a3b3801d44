//! Giving freed heap back to the kernel. glibc keeps what a thread frees in
//! that thread's arena and returns pages only from an arena's top, so the
//! transient megabytes of a block flush or a compaction (every series'
//! samples decoded, the block built in memory) stayed resident for the
//! process's life, scattered across the writer threads' arenas: `kansoku
//! up` sat ~8 MB higher after its first flush than before it. Called after
//! those rare, large operations (minutes apart), never per append.

#![allow(
    unsafe_code,
    reason = "glibc: malloc_trim returns free heap pages from every arena; mallinfo2 counts what is allocated"
)]

/// Returns the free pages of every malloc arena to the kernel (a no-op
/// where the C library is not glibc).
pub fn give_back_free() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers and only releases memory the
    // allocator holds free; it is thread-safe (it locks each arena).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes the program holds allocated from malloc now, over every arena
/// (glibc's `mallinfo2`: `uordblks` plus what it mapped whole, `hblkhd`);
/// `None` where the C library is not glibc. For tests and reports of what
/// a structure costs, not for a hot path (it walks every arena).
pub fn allocated_bytes() -> Option<usize> {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value.
        let m = unsafe { libc::mallinfo2() };
        Some(m.uordblks + m.hblkhd)
    }
    #[cfg(not(target_env = "gnu"))]
    {
        None
    }
}
