//! Returns the allocator's free memory to the system while the mount is
//! in use (issue 11, must show 3: the daemon's resident memory).
//!
//! glibc's allocator keeps memory freed by the request threads in their
//! arenas: after a walk of every entry of 20,000 sessions, about 6.7 MiB
//! of the daemon's 63 MiB were free but resident (`malloc_trim(0)`,
//! called by hand, brought it to 56 MiB). The serving loop calls
//! [`Trimmer::tick`] every poll; it trims at most once per
//! [`TRIM_INTERVAL`], and only when requests were answered since the last
//! trim (an idle mount costs nothing).

use std::time::{Duration, Instant};

/// Least time between two trims.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// When the heap was last trimmed, and the request count then.
pub struct Trimmer {
    last: Instant,
    requests: u64,
}

impl Trimmer {
    /// A trimmer whose first trim comes [`TRIM_INTERVAL`] after now.
    pub fn new(requests: u64) -> Self {
        Trimmer {
            last: Instant::now(),
            requests,
        }
    }

    /// Trims the heap if [`TRIM_INTERVAL`] has passed since the last trim
    /// and the request count moved from `requests` then; returns whether
    /// it trimmed.
    pub fn tick(&mut self, requests: u64) -> bool {
        if self.last.elapsed() < TRIM_INTERVAL || requests == self.requests {
            return false;
        }
        let started = Instant::now();
        release_free();
        log::trace!("heap trimmed in {:?}", started.elapsed());
        self.last = Instant::now();
        self.requests = requests;
        true
    }
}

/// Gives the allocator's free pages back to the system (glibc
/// `malloc_trim(0)`: every arena, not only the top of the heap); nothing
/// with other allocators.
pub fn release_free() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it takes each arena's lock.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_after_the_interval_and_new_requests() {
        let mut t = Trimmer::new(5);
        assert!(!t.tick(9), "before the interval");
        t.last -= TRIM_INTERVAL;
        assert!(!t.tick(5), "no request answered since");
        assert!(t.tick(9));
        assert!(!t.tick(12), "the interval starts again");
    }

    /// Resident memory of this process (KiB), from /proc.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn release_free_returns_freed_small_allocations_to_the_system() {
        // 64 MiB in 32-byte blocks stay below the mmap threshold, so only
        // a trim gives them back once freed (every other block is kept
        // until the end, so the top of the heap cannot simply shrink).
        let mut blocks: Vec<Box<[u8; 32]>> = (0..2_000_000).map(|_| Box::new([1u8; 32])).collect();
        let keep: Vec<Box<[u8; 32]>> = blocks.iter().step_by(64).cloned().collect();
        let before = rss_kib();
        blocks.clear();
        blocks.shrink_to_fit();
        let freed = rss_kib();
        release_free();
        let trimmed = rss_kib();
        assert!(
            trimmed + 16 * 1024 < freed,
            "RSS {before} KiB with the blocks, {freed} KiB freed, {trimmed} KiB trimmed"
        );
        drop(keep);
    }
}
