//! Issue 12, Must show 1: SIGTERM and SIGINT (and SIGHUP, unless it came
//! ignored, as under `nohup`) end the daemon within 5 s,
//! with the mount gone and pending lines committed, with and without
//! `auto_unmount`, at any moment of start-up; a mount point that contains
//! ROOT is refused before mounting.
//!
//! Budget: the whole file runs well under 3 minutes (the start-up sweep is
//! 200 daemon starts); each wait has its own timeout.

mod common;
mod lifecycle_support;

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use lifecycle_support::{
    append_held, canon, corpus_copy, event_line, mount_point, next_seq, wait_until, Daemon,
};

/// A daemon must be gone this long after the signal.
const EXIT_LIMIT: Duration = Duration::from_secs(5);

/// The start-up sweep's budget.
const SWEEP_BUDGET: Duration = Duration::from_secs(120);

fn mount_args<'a>(root: &'a Path, mnt: &'a Path, extra: &[&'a str]) -> Vec<&'a OsStr> {
    let mut v: Vec<&OsStr> = vec![OsStr::new("mount"), root.as_os_str(), mnt.as_os_str()];
    v.extend(extra.iter().map(|s| OsStr::new(*s)));
    v
}

/// How long a daemon takes from exec to serving its first request (the
/// slowest of three starts).
fn start_up_time(root: &Path) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let mnt_dir = mount_point();
        let mnt = canon(mnt_dir.path());
        let started = Instant::now();
        let mut d = Daemon::spawn(&mount_args(root, &mnt, &[]), &mnt, &[]);
        d.wait_mounted(Duration::from_secs(20));
        slowest = slowest.max(started.elapsed());
        d.signal(libc::SIGTERM);
        assert!(
            d.wait(EXIT_LIMIT).is_some_and(|s| s.success()),
            "{}",
            d.log()
        );
    }
    slowest
}

/// Signals at 20 points spread from exec to the first request served
/// (and a little past it), 10 rounds each: SIGTERM and SIGINT in turn,
/// without and then with `auto_unmount`. Every daemon is gone within 5 s,
/// exits 0 (or was killed by the signal itself before it installed its
/// handler, in which case it had mounted nothing), and leaves no mount.
#[test]
fn signals_at_twenty_points_of_start_up_end_the_daemon_cleanly() {
    let began = Instant::now();
    let root = corpus_copy("normal");
    let span = start_up_time(root.path()).mul_f64(1.2);
    let mut mounted_before_signal = 0;
    let mut early = 0;
    for round in 0..10 {
        let sig = if round % 2 == 0 {
            libc::SIGTERM
        } else {
            libc::SIGINT
        };
        let extra: &[&str] = if round < 5 {
            &[]
        } else {
            &["--allow-root", "--auto-unmount"]
        };
        for point in 0..20u32 {
            let delay = span.mul_f64(f64::from(point) / 19.0);
            let mnt_dir = mount_point();
            let mnt = canon(mnt_dir.path());
            let mut d = Daemon::spawn(&mount_args(root.path(), &mnt, extra), &mnt, &[]);
            // The delay is the point of this test (a signal at a chosen
            // moment), not a wait for an event.
            std::thread::sleep(delay);
            let was_mounted = common::is_mounted(&mnt);
            d.signal(sig);
            let status = d.wait(EXIT_LIMIT);
            let what = format!(
                "round {round}, point {point} ({delay:?} after exec, signal {sig}, {extra:?})"
            );
            let Some(status) = status else {
                panic!(
                    "{what}: the daemon did not exit within {EXIT_LIMIT:?}; log:\n{}",
                    d.log()
                );
            };
            let log = d.log();
            if status.signal() == Some(sig) {
                // Only possible before main() installed the handler: then
                // nothing was mounted or logged.
                assert!(
                    !log.contains("mounted"),
                    "{what}: killed by the signal after start-up began; log:\n{log}"
                );
                early += 1;
            } else {
                assert!(status.success(), "{what}: exit {status}; log:\n{log}");
            }
            assert!(
                wait_until(Duration::from_millis(500), || !common::is_mounted(&mnt)),
                "{what}: the mount is still there after the daemon exited; log:\n{log}"
            );
            if was_mounted {
                mounted_before_signal += 1;
            }
            drop(d);
        }
    }
    eprintln!(
        "start-up span {span:?}: {mounted_before_signal} of 200 signals came after the mount \
         appeared, {early} before main() installed the handler"
    );
    // The sweep really covered both sides of the mount's appearance.
    assert!(
        mounted_before_signal > 0 && mounted_before_signal < 200,
        "the 20 points should fall both before and after the mount appeared \
         ({mounted_before_signal} of 200 after; {early} killed before main)"
    );
    assert!(
        began.elapsed() < SWEEP_BUDGET,
        "the sweep took {:?} (budget {SWEEP_BUDGET:?})",
        began.elapsed()
    );
}

/// Lines held in the batch window are committed on SIGTERM, SIGINT and
/// SIGHUP (a closed terminal), with and without auto_unmount, and the
/// mount is gone within 5 s.
#[test]
fn signals_commit_pending_lines_and_remove_the_mount() {
    for (sig, extra) in [
        (libc::SIGTERM, &[][..]),
        (libc::SIGINT, &[][..]),
        (libc::SIGHUP, &[][..]),
        (libc::SIGTERM, &["--allow-root", "--auto-unmount"][..]),
        (libc::SIGINT, &["--allow-other", "--auto-unmount"][..]),
    ] {
        let root = corpus_copy("normal");
        let mnt_dir = mount_point();
        let mnt = canon(mnt_dir.path());
        let mut args = vec!["--batch-ms", "60000"];
        args.extend(extra);
        let mut d = Daemon::spawn(&mount_args(root.path(), &mnt, &args), &mnt, &[]);
        d.wait_mounted(Duration::from_secs(20));
        let view = mnt.join("--root--/cwd-root/session.jsonl");
        let line = event_line(next_seq(&view), "held at the signal");
        let held = append_held(&view, &line);
        let sent = Instant::now();
        d.signal(sig);
        let status = d.wait(EXIT_LIMIT);
        let took = sent.elapsed();
        let log = d.log();
        assert!(
            status.is_some_and(|s| s.success()),
            "signal {sig} {extra:?}: exit {status:?} after {took:?}; log:\n{log}"
        );
        assert!(
            !common::is_mounted(&mnt),
            "signal {sig} {extra:?}: still mounted; log:\n{log}"
        );
        drop(held);
        let stored = common::zstd_dc(&root.path().join("--root--/cwd-root/session.jsonl.zstd"));
        assert!(
            String::from_utf8_lossy(&stored).ends_with(&line),
            "signal {sig} {extra:?}: the pending line was not committed; log:\n{log}"
        );
    }
}

/// Under `nohup` (SIGHUP ignored from the start) a hang-up leaves the
/// mount serving; SIGTERM still ends it.
#[test]
fn a_hang_up_under_nohup_leaves_the_mount_serving() {
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let bin = env!("CARGO_BIN_EXE_sessionfs");
    let mut args: Vec<&OsStr> = vec![OsStr::new(bin)];
    args.extend(mount_args(root.path(), &mnt, &[]));
    let mut d = Daemon::spawn_program("nohup", &args, &mnt);
    d.wait_mounted(Duration::from_secs(20));
    d.signal(libc::SIGHUP);
    // A daemon that took the hang-up would be gone well within this.
    let ended = wait_until(Duration::from_secs(3), || {
        !common::is_mounted(&mnt) || d.exited()
    });
    assert!(!ended, "the hang-up ended a nohup mount; log:\n{}", d.log());
    let view = mnt.join("--root--/cwd-root/session.jsonl");
    assert!(std::fs::metadata(&view).is_ok(), "the mount does not serve");
    d.signal(libc::SIGTERM);
    let status = d.wait(EXIT_LIMIT);
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}; log:\n{}",
        d.log()
    );
    assert!(!common::is_mounted(&mnt));
}

/// `sessionfs mount outer/root outer` is refused before anything is
/// mounted (it used to deadlock on its own mount).
#[test]
fn a_mount_point_that_contains_the_root_is_refused() {
    let outer = tempfile::tempdir().unwrap();
    let outer_path = canon(outer.path());
    let root = outer_path.join("root");
    std::fs::create_dir(&root).unwrap();
    let mut d = Daemon::spawn(&mount_args(&root, &outer_path, &[]), &outer_path, &[]);
    let status = d.wait(Duration::from_secs(10));
    let log = d.log();
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "expected exit 1, got {status:?}; log:\n{log}"
    );
    assert!(
        log.contains("contains the session root"),
        "the message does not say why; log:\n{log}"
    );
    assert!(!common::is_mounted(&outer_path), "it was mounted anyway");
    // Through a symbolic link and `..` as well.
    let link = tempfile::tempdir().unwrap();
    let alias = canon(link.path()).join("alias");
    std::os::unix::fs::symlink(&outer_path, &alias).unwrap();
    let sneaky = alias.join("root/..");
    let mut d = Daemon::spawn(&mount_args(&root, &sneaky, &[]), &outer_path, &[]);
    let status = d.wait(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.code() == Some(1))
            && d.log().contains("contains the session root"),
        "{status:?}; log:\n{}",
        d.log()
    );
    assert!(!common::is_mounted(&outer_path));
}
