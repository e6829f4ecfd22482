//! When the views' catalog is swept ([`super::ViewCatalog::sweep`]): every
//! [`SWEEP_EVERY`] while the views are in use, and at once when they are
//! used after [`IDLE_AFTER`] without a sweep (counted from the mount's
//! start before the first), the use waiting up to [`IDLE_WAIT`] for it. So
//! a transcript removed or replaced inside its session directory while the
//! views were idle (or nothing was mounted) is not shown by the first
//! listing after (a fresh tester's case: 15 s after the removal, the first
//! `find` still listed it), an idle mount sweeps nothing, and the listings
//! of a mount's first seconds never share the disk and the cores with a
//! sweep (measured: a sweep as the mount starts made them 1.5x slower).

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How often the catalog is swept while the views are in use.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A use of the views this long after the last sweep ended waits for a
/// sweep first.
pub const IDLE_AFTER: Duration = Duration::from_secs(2);

/// The longest such a use waits (then it goes on with what the catalog
/// has; the sweep ends in the background): a sweep of 20,000 sessions on
/// a local disk takes 20-40 ms, over a network client far longer.
pub const IDLE_WAIT: Duration = Duration::from_millis(200);

#[derive(Default)]
struct State {
    /// When the latest sweep ended.
    last_done: Option<Instant>,
    /// When idleness is counted from: the latest sweep's end, else the
    /// mount's start ([`Sweeper::starting`]).
    quiet_since: Option<Instant>,
    /// A use asked for a sweep that has not started yet.
    wanted: bool,
    /// Until when the uses wait for the sweep asked for (one deadline for
    /// all the uses of one idle spell, so a slow sweep, over a network
    /// client, delays only its first [`IDLE_WAIT`]).
    wait_until: Option<Instant>,
    /// Sweeps ended so far.
    ended: u64,
}

/// The sweeping thread's schedule and the uses that wait for it.
#[derive(Default)]
pub struct Sweeper {
    state: Mutex<State>,
    changed: Condvar,
}

impl Sweeper {
    /// Called by the sweeping thread: waits until a use asks for a sweep
    /// (true) or [`SWEEP_EVERY`] passed (false).
    pub fn wait_for_work(&self) -> bool {
        let mut s = self.state.lock();
        if !s.wanted {
            self.changed.wait_for(&mut s, SWEEP_EVERY);
        }
        std::mem::take(&mut s.wanted)
    }

    /// Called by the sweeping thread when a sweep ended: wakes the uses
    /// waiting for it.
    pub fn ended(&self) {
        let mut s = self.state.lock();
        s.last_done = Some(Instant::now());
        s.quiet_since = s.last_done;
        s.wait_until = None;
        s.ended += 1;
        self.changed.notify_all();
    }

    /// The mount starts: idleness counts from now until the first sweep.
    pub fn starting(&self) {
        let mut s = self.state.lock();
        s.quiet_since.get_or_insert_with(Instant::now);
    }

    /// How long ago the latest sweep ended, and how many ended so far
    /// (`None`: none yet).
    pub fn latest(&self) -> (Option<Duration>, u64) {
        let s = self.state.lock();
        (s.last_done.map(|at| at.elapsed()), s.ended)
    }

    /// Called by a use of the views: when the last sweep ended (or the
    /// mount started) more than [`IDLE_AFTER`] ago, asks for a sweep and
    /// waits until it ends, at most [`IDLE_WAIT`]. While sweeps are
    /// regular, and without a sweeping thread ([`Sweeper::starting`] not
    /// called: `sessionfs list` sweeps itself), returns at once.
    pub fn fresh_enough(&self) {
        let mut s = self.state.lock();
        match s.quiet_since {
            Some(at) if at.elapsed() > IDLE_AFTER => {}
            _ => return,
        }
        let ended = s.ended;
        let deadline = match s.wait_until {
            Some(deadline) => deadline,
            None => {
                s.wanted = true;
                self.changed.notify_all();
                *s.wait_until.insert(Instant::now() + IDLE_WAIT)
            }
        };
        while s.ended == ended {
            if self.changed.wait_until(&mut s, deadline).timed_out() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_use_after_idle_waits_for_the_sweep_it_asks_for() {
        let sweeper = Arc::new(Sweeper::default());
        // No sweeping thread: no wait.
        let started = Instant::now();
        sweeper.fresh_enough();
        assert!(started.elapsed() < IDLE_WAIT);
        // A mount starting: no wait within its first seconds.
        sweeper.starting();
        sweeper.fresh_enough();
        assert!(!sweeper.state.lock().wanted);
        sweeper.ended();
        // Right after a sweep: no wait, nothing asked.
        sweeper.fresh_enough();
        assert!(!sweeper.state.lock().wanted);
        // Idle: the use asks, the sweeping thread is woken and sweeps, the
        // use returns once that sweep ended.
        sweeper.state.lock().quiet_since = Some(Instant::now() - IDLE_AFTER * 2);
        let thread = {
            let sweeper = Arc::clone(&sweeper);
            std::thread::spawn(move || {
                let asked = sweeper.wait_for_work();
                sweeper.ended();
                asked
            })
        };
        let before = sweeper.state.lock().ended;
        sweeper.fresh_enough();
        assert!(thread.join().unwrap(), "the sweep was asked for");
        assert_eq!(sweeper.state.lock().ended, before + 1);
        // No sweep comes: the wait is bounded, and the next use of the
        // same idle spell does not wait again.
        sweeper.state.lock().quiet_since = Some(Instant::now() - IDLE_AFTER * 2);
        let started = Instant::now();
        sweeper.fresh_enough();
        assert!(started.elapsed() >= IDLE_WAIT);
        let again = Instant::now();
        sweeper.fresh_enough();
        assert!(again.elapsed() < IDLE_WAIT);
    }
}
