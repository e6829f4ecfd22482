//! The process's permits to hold one long line in memory at once.
//!
//! A rendering of `session.md` and a title scan both hold a line whole
//! while they read it (up to 4 MiB and 16 MiB). Either takes a permit
//! before its buffer grows past [`LONG_LINE_BYTES`]; while
//! [`LONG_LINES_AT_ONCE`] are held, the next one waits for one to be
//! given back, so that many renderings and scans at once (a file manager
//! listing `.by-date`, `session.md` of many sessions opened together) hold
//! a bounded number of long lines: a 40 KB transcript can decode to a
//! 1 GiB line (issue 16's hostile input).

use std::sync::{Condvar, Mutex};

/// Lines longer than this (bytes) are held only with a [`LongLine`]: the
/// rendering's read chunk (512 KiB).
pub const LONG_LINE_BYTES: usize = 512 << 10;

/// How many long lines the whole process holds at once at most.
pub const LONG_LINES_AT_ONCE: usize = 2;

/// (long lines held, callers waiting for a permit).
static HELD: Mutex<(usize, usize)> = Mutex::new((0, 0));
static FREED: Condvar = Condvar::new();

/// The right to hold one line longer than [`LONG_LINE_BYTES`], given back
/// on drop. A caller takes at most one, and only while it holds none, so
/// that callers waiting for one another cannot deadlock.
pub struct LongLine(());

impl LongLine {
    /// Waits (without a deadline: a holder gives its permit back when its
    /// line is read, which takes no lock of the caller's) until fewer than
    /// [`LONG_LINES_AT_ONCE`] long lines are held, then takes a permit.
    pub fn take() -> LongLine {
        let mut state = HELD.lock().unwrap_or_else(|p| p.into_inner());
        state.1 += 1;
        while state.0 >= LONG_LINES_AT_ONCE {
            state = FREED.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.1 -= 1;
        state.0 += 1;
        LongLine(())
    }

    /// How many callers of the whole process wait for a permit now.
    pub fn waiting() -> usize {
        HELD.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

impl Drop for LongLine {
    fn drop(&mut self) {
        let mut state = HELD.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = state.0.saturating_sub(1);
        FREED.notify_one();
    }
}
