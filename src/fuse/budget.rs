//! One budget for the pending bytes of a whole mount: the bytes writers'
//! handles hold and have not committed (complete lines waiting for their
//! batch, incomplete last lines waiting for their newline). Each handle
//! has its own per-line cap (16 MiB); this cap bounds their sum, so many
//! handles cannot grow the daemon past its memory target (MOUNT.md,
//! Appending; issue 9).

use std::sync::atomic::{AtomicU64, Ordering};

/// Default budget of pending bytes (32 MiB): within the daemon's 64 MiB
/// memory target, and above the 16 MiB a single line may take.
pub const DEFAULT_PENDING_BUDGET: u64 = 32 << 20;

/// Pending bytes charged to a mount, against a fixed limit.
#[derive(Debug)]
pub struct PendingBudget {
    limit: u64,
    used: AtomicU64,
}

impl PendingBudget {
    /// A budget of `limit` bytes, none used.
    pub fn new(limit: u64) -> Self {
        PendingBudget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Changes one holder's charge from `old` to `new` bytes. Shrinking
    /// always succeeds; growing fails (and charges nothing) when the total
    /// would pass the limit. Returns whether the new charge holds.
    pub fn try_resize(&self, old: u64, new: u64) -> bool {
        if new <= old {
            self.used.fetch_sub(old - new, Ordering::Relaxed);
            return true;
        }
        let grow = new - old;
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(grow).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Changes one holder's charge from `old` to `new` bytes, whatever the
    /// limit (bytes already held and that cannot be refused any more, such
    /// as a commit that failed and put its batch back).
    pub fn resize(&self, old: u64, new: u64) {
        if new >= old {
            self.used.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(old - new, Ordering::Relaxed);
        }
    }
}

/// Runs `free` (which drops large buffers) so that the memory goes back to
/// the kernel. The daemon tells glibc to keep up to
/// [`KEEP_FREED_BYTES`] of freed memory for reuse (run.rs,
/// `keep_freed_memory`), and `malloc_trim` does not shrink the top of a
/// thread's arena, so the megabytes a closed writer held would otherwise
/// stay in the daemon's RSS: the trim threshold is lowered while `free`
/// runs, then restored. One call runs at a time: two releases at once had
/// the first restore the threshold while the second freed, and a 16 MiB
/// line's buffer stayed resident (seen in CI on 2 cores). `free` should
/// only free: it runs under that lock.
pub fn give_back<T>(free: impl FnOnce() -> T) -> T {
    static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock();
    // SAFETY: mallopt and malloc_trim only tune and walk glibc's arenas.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
    let r = free();
    unsafe {
        libc::malloc_trim(0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP_FREED_BYTES);
    }
    r
}

/// Freed heap memory glibc keeps for reuse in the daemon (its
/// `M_TRIM_THRESHOLD`, bytes).
pub const KEEP_FREED_BYTES: i32 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_limit_is_refused_and_charges_nothing() {
        let b = PendingBudget::new(100);
        assert!(b.try_resize(0, 60));
        assert!(b.try_resize(0, 40));
        assert_eq!(b.used(), 100);
        assert!(!b.try_resize(40, 41));
        assert_eq!(b.used(), 100);
        assert!(b.try_resize(60, 10));
        assert_eq!(b.used(), 50);
        assert!(b.try_resize(40, 90));
        b.resize(90, 0);
        b.resize(10, 0);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn forced_growth_passes_the_limit_and_blocks_further_growth() {
        let b = PendingBudget::new(10);
        b.resize(0, 15);
        assert!(!b.try_resize(0, 1));
        b.resize(15, 0);
        assert!(b.try_resize(0, 10));
    }
}
