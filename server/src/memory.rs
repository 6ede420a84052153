//! Giving freed memory back: the server's resident size should come back after a burst of
//! calls, not stay at its high-water mark.
//!
//! glibc malloc keeps what a burst frees inside its arenas (one per thread that allocated
//! under contention, up to 8 per core) and returns it to the kernel only from the top of the
//! main heap. Under the soak, half of what the arenas held was free (measured with
//! `malloc_stats`: 7.2 MB held, 4.1 MB in use), so RSS only ever rose. The remedies:
//! - [`tune_allocator`] at start: at most [`ARENAS`] arenas, so memory one thread freed is
//!   reused by the others instead of sitting in an arena of its own, and a fixed mmap
//!   threshold ([`MMAP_THRESHOLD`]), so large transfer buffers go back to the kernel when freed
//!   instead of fragmenting the arenas;
//! - [`trim_if_due`] from the sweep task: `malloc_trim(0)` hands every arena's free pages back
//!   (at most once per [`TRIM_EVERY`], a few hundred microseconds each).
//!
//! An operator's own `MALLOC_ARENA_MAX` / `MALLOC_MMAP_THRESHOLD_` wins. Other allocators: no-ops.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Arenas glibc may create: the server's work is mostly waiting on docker subprocesses, so
/// threads rarely contend for the allocator.
pub const ARENAS: i32 = 2;

/// Blocks from this size up are mmapped and unmapped when freed. glibc's default threshold
/// starts here but rises to the largest block freed (up to 32 MiB), after which transfer
/// buffers (256 KiB readers, 1 MiB chunks, spooled downloads) are carved from the arenas and
/// fragment them; a fixed threshold keeps them out (setting it turns the rise off).
pub const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Least time between two trims.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Bound glibc's arenas to [`ARENAS`] and fix its mmap threshold (unless the environment says
/// otherwise). Call it before any thread starts (glibc fixes the bound when a thread first needs
/// an arena of its own).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; M_ARENA_MAX takes any positive count.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: as above; a fixed threshold is any size up to 32 MiB.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
    }
}

/// Return free heap pages to the kernel (`malloc_trim(0)`), unless that was done less than
/// [`TRIM_EVERY`] ago.
pub fn trim_if_due() {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    {
        let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < TRIM_EVERY) {
            return;
        }
        *last = Some(Instant::now());
    }
    trim();
}

/// `malloc_trim(0)` now.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the arenas' own locks; it is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_is_rate_limited_and_harmless() {
        let freed: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 * 1024]).collect();
        drop(freed);
        trim_if_due();
        trim_if_due();
        trim();
        let again: Vec<u8> = vec![1; 1 << 20];
        assert_eq!(again.iter().map(|b| *b as usize).sum::<usize>(), 1 << 20);
    }
}
