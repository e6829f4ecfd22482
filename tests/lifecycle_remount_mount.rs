//! Issue 12, Must show 2: `umount && mount` of one mount point 50 times,
//! in the foreground and in mount(8)'s helper form: every new mount stays
//! mounted (the old daemon, exiting, never removes it) and serves the
//! store; a mount stacked on a live one is refused.
//!
//! Budget: 90 s per test; each wait has its own timeout.

mod common;
mod lifecycle_support;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use lifecycle_support::{
    canon, corpus_copy, install_for_mount_helper, mount_point, pid_ended, run_timeout, status_of,
    wait_until, Daemon,
};

const CYCLES: usize = 50;
const BUDGET: Duration = Duration::from_secs(90);
const EXIT_LIMIT: Duration = Duration::from_secs(5);

/// A session of the `normal` corpus and its expected text's sha256.
const SESSION: &str = "--home-alice-work-app--/Session-A/session.jsonl";

fn serves(mnt: &Path) -> bool {
    let expected = common::expected_readraw_sha("normal", "Session-A");
    std::fs::read(mnt.join(SESSION)).is_ok_and(|b| common::sha256_hex(&b) == expected)
}

fn umount(mnt: &Path) {
    let out = run_timeout(10, "umount", &[mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "umount {}: {}",
        mnt.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn umount_and_mount_fifty_times_in_the_foreground() {
    let began = Instant::now();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let args: Vec<&OsStr> = vec![
        OsStr::new("mount"),
        root.path().as_os_str(),
        mnt.as_os_str(),
        OsStr::new("--read-only"),
    ];
    let mut old = Daemon::spawn(&args, &mnt, &[]);
    old.wait_mounted(Duration::from_secs(20));
    for cycle in 0..CYCLES {
        umount(&mnt);
        let mut new = Daemon::spawn(&args, &mnt, &[]);
        new.wait_mounted(Duration::from_secs(20));
        let entry = common::mount_entry(&mnt).expect("just mounted");
        // The old daemon notices that its own mount is gone and exits
        // without touching the new one.
        let status = old.wait(EXIT_LIMIT);
        assert!(
            status.is_some_and(|s| s.success()),
            "cycle {cycle}: the old daemon did not exit cleanly ({status:?}); log:\n{}",
            old.log()
        );
        let now = common::mount_entry(&mnt);
        assert!(
            now.as_ref().is_some_and(|m| m.dev == entry.dev) && !new.exited(),
            "cycle {cycle}: the new mount is gone after the old daemon exited ({now:?}); \
             old log:\n{}\nnew log:\n{}",
            old.log(),
            new.log()
        );
        assert!(
            serves(&mnt),
            "cycle {cycle}: the new mount does not serve the store"
        );
        old.disown_mount_point();
        old = new;
    }
    old.signal(libc::SIGTERM);
    assert!(old.wait(EXIT_LIMIT).is_some_and(|s| s.success()));
    assert!(!common::is_mounted(&mnt));
    assert!(began.elapsed() < BUDGET, "took {:?}", began.elapsed());
}

#[test]
fn umount_and_mount_fifty_times_through_mount_8() {
    install_for_mount_helper();
    let began = Instant::now();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let mount = || {
        let out = run_timeout(
            30,
            "mount",
            &[
                OsStr::new("-t"),
                OsStr::new("fuse.sessionfs"),
                root.path().as_os_str(),
                mnt.as_os_str(),
                OsStr::new("-o"),
                OsStr::new("ro"),
            ],
        );
        assert!(
            out.status.success(),
            "mount -t fuse.sessionfs: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let guard = Daemonless(&mnt);
    mount();
    let mut old_pid = status_of(&mnt)["pid"].as_u64().unwrap() as u32;
    for cycle in 0..CYCLES {
        umount(&mnt);
        mount();
        let entry = common::mount_entry(&mnt).expect("mount(8) returned 0");
        let pid = status_of(&mnt)["pid"].as_u64().unwrap() as u32;
        assert_ne!(pid, old_pid, "cycle {cycle}: the old daemon still serves");
        assert!(
            wait_until(EXIT_LIMIT, || pid_ended(old_pid)),
            "cycle {cycle}: the old daemon (pid {old_pid}) did not exit after its unmount"
        );
        assert!(
            common::mount_entry(&mnt).is_some_and(|m| m.dev == entry.dev) && !pid_ended(pid),
            "cycle {cycle}: the new mount is gone after the old daemon exited"
        );
        assert!(
            serves(&mnt),
            "cycle {cycle}: the new mount does not serve the store"
        );
        old_pid = pid;
    }
    umount(&mnt);
    assert!(wait_until(EXIT_LIMIT, || pid_ended(old_pid)));
    drop(guard);
    assert!(began.elapsed() < BUDGET, "took {:?}", began.elapsed());
}

/// A second mount on a live sessionfs mount is refused (foreground and
/// helper form) with a message; the first keeps serving, and one
/// `umount` leaves nothing mounted.
#[test]
fn a_stacked_mount_is_refused() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let args: Vec<&OsStr> = vec![
        OsStr::new("mount"),
        root.path().as_os_str(),
        mnt.as_os_str(),
    ];
    let mut first = Daemon::spawn(&args, &mnt, &[]);
    first.wait_mounted(Duration::from_secs(20));

    let mut second = Daemon::spawn(&args, &mnt, &[]);
    let status = second.wait(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "the stacked foreground mount was not refused ({status:?}); log:\n{}",
        second.log()
    );
    assert!(
        second.log().contains("already a sessionfs mount"),
        "no reason given:\n{}",
        second.log()
    );
    // Its drop must not clean up the first mount.
    second.disown_mount_point();
    drop(second);

    let out = run_timeout(
        30,
        "mount",
        &[
            OsStr::new("-t"),
            OsStr::new("fuse.sessionfs"),
            root.path().as_os_str(),
            mnt.as_os_str(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("already a sessionfs mount"),
        "mount(8) stacked a second mount ({}): {stderr}",
        out.status
    );
    let stack = common::mountinfo()
        .iter()
        .filter(|m| m.mount_point == mnt)
        .count();
    assert_eq!(stack, 1, "mounts at {}", mnt.display());
    assert!(serves(&mnt), "the first mount stopped serving");
    umount(&mnt);
    assert!(!common::is_mounted(&mnt), "one umount left a mount behind");
    assert!(first.wait(EXIT_LIMIT).is_some_and(|s| s.success()));
}

/// Resumes a stopped daemon on every path, panics included.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid this test spawned and a valid signal.
        unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
    }
}

/// A mount over a live mount whose daemon does not answer (stopped with
/// SIGSTOP) is refused within a bounded time, naming the cause, instead of
/// hanging in the kernel; the stopped mount serves again once resumed.
#[test]
fn a_mount_over_a_stopped_daemon_is_refused_in_bounded_time() {
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let args: Vec<&OsStr> = vec![
        OsStr::new("mount"),
        root.path().as_os_str(),
        mnt.as_os_str(),
    ];
    let mut first = Daemon::spawn(&args, &mnt, &[]);
    first.wait_mounted(Duration::from_secs(20));
    first.signal(libc::SIGSTOP);
    let resume = Resume(first.pid());

    let mut second = Daemon::spawn(&args, &mnt, &[]);
    let status = second.wait(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "the mount over a stopped daemon did not end with a refusal ({status:?}); log:\n{}",
        second.log()
    );
    assert!(
        second.log().contains("does not answer"),
        "no reason given:\n{}",
        second.log()
    );
    second.disown_mount_point();
    drop(second);
    // Paths through the stopped mount: resolving them would block as
    // long, uninterruptibly; refused the same way.
    let name = mnt.file_name().unwrap().to_os_string();
    let through = [
        mnt.join("..").join(&name),
        mnt.join("--home-alice-work-app--"),
    ];
    for path in &through {
        let args: Vec<&OsStr> = vec![
            OsStr::new("mount"),
            root.path().as_os_str(),
            path.as_os_str(),
        ];
        let mut other = Daemon::spawn(&args, path, &[]);
        let status = other.wait(Duration::from_secs(30));
        if status.is_none_or(|s| s.code() != Some(1)) {
            // Resumed first: a daemon stuck in the stopped mount would
            // otherwise keep the drop below waiting for it.
            // SAFETY: kill(2) with a pid this test spawned.
            unsafe { libc::kill(resume.0 as i32, libc::SIGCONT) };
        }
        assert!(
            status.is_some_and(|s| s.code() == Some(1)),
            "a mount at {} (through a stopped daemon's mount) did not end with a refusal \
             ({status:?}); log:\n{}",
            path.display(),
            other.log()
        );
        assert!(
            other.log().contains("does not answer"),
            "no reason given:\n{}",
            other.log()
        );
        // The stopped mount is named, whatever path led through it.
        assert!(
            other
                .log()
                .contains(&format!("the mount at {}", mnt.display())),
            "the stopped mount is not named:\n{}",
            other.log()
        );
        other.disown_mount_point();
        drop(other);
    }

    drop(resume);
    assert!(
        wait_until(Duration::from_secs(10), || serves(&mnt)),
        "the resumed mount does not serve"
    );
    umount(&mnt);
    assert!(first.wait(EXIT_LIMIT).is_some_and(|s| s.success()));
}

/// Cleans up a mount point whose daemons the test does not own (helper
/// form) on every path, panics included.
struct Daemonless<'a>(&'a Path);

impl Drop for Daemonless<'_> {
    fn drop(&mut self) {
        lifecycle_support::cleanup_mount(self.0);
    }
}
