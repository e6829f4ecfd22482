//! A writer of this mount waits for the session's lock while another
//! machine's holder of it is dead (its lease not yet ended): `stat` and
//! reads of that transcript through the mount must not wait with it
//! (MOUNT.md, Shared roots). Before, both waited for the whole lease,
//! because the handle's state stayed locked during the commit.

mod common;

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::{zstd_dc, Mount};
use sessionfs::store::lease::{HolderId, LockBody, LOCK_NAME};

/// The lease of the mount and of the planted lock (milliseconds).
const LEASE_MS: u64 = 3000;

fn line(seq: u64) -> String {
    format!(
        "{{\"type\":\"x-sessionfs/note\",\"seq\":{seq},\"time\":{},\"data\":{{}},\"ignorable\":true}}\n",
        1_767_600_000_000u64 + seq
    )
}

/// Writes the lock a holder on another host leaves when it dies.
fn plant_dead_lock(dir: &Path) {
    let body = LockBody {
        holder: HolderId {
            host: "a-dead-machine".into(),
            boot: "its-boot".into(),
            pid: 4242,
            pidns: String::new(),
        },
        token: "dead-holder-token".into(),
        len: None,
        lease_ms: LEASE_MS,
        renewal: 0,
        wall_ms: 0,
    };
    fs::write(dir.join(LOCK_NAME), body.encode()).unwrap();
}

/// A mount of a new root (lease [`LEASE_MS`], the mount options `args`)
/// holding the session `id` with its header and line 0 committed, and a
/// dead holder's lock planted in its directory.
struct Fixture {
    root: tempfile::TempDir,
    m: Mount,
    /// The session directory, relative to the root.
    rel: std::path::PathBuf,
    /// `session.jsonl` through the mount.
    view: std::path::PathBuf,
    header: String,
}

fn session_behind_a_dead_lock(id: &str, args: &[&str]) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_sessionfs"));
    let lease = LEASE_MS.to_string();
    let m = Mount::start_custom(
        bin,
        root.path(),
        args,
        Duration::from_secs(120),
        &[("SESSIONFS_LEASE_MS", &lease)],
    );
    let cwd = "/srv/deadlock";
    let project = sessionfs::store::naming::project_dir_name(Some(cwd)).unwrap();
    let rel = Path::new(&project).join(id);
    fs::create_dir(m.join(&project)).unwrap();
    fs::create_dir(m.join(&rel)).unwrap();
    let view = m.join(&rel).join("session.jsonl");
    let header = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1767600000000,\"cwd\":\"{cwd}\",\"delegationDepth\":0}}\n"
    );
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&view)
        .unwrap();
    f.write_all(format!("{header}{}", line(0)).as_bytes())
        .unwrap();
    f.sync_all().unwrap();
    drop(f);
    plant_dead_lock(&root.path().join(&rel));
    Fixture {
        root,
        m,
        rel,
        view,
        header,
    }
}

#[test]
fn stat_and_reads_do_not_wait_for_a_commit_stuck_behind_a_dead_holders_lock() {
    let Fixture {
        root,
        m,
        rel,
        view,
        header,
    } = session_behind_a_dead_lock("dl-1", &["--attr-timeout", "0", "--batch-ms", "60000"]);

    // A writer of this mount: one pending line, then fsync, which waits
    // until the dead holder's lease ended and takes the lock over.
    let mut w = OpenOptions::new().append(true).open(&view).unwrap();
    w.write_all(line(1).as_bytes()).unwrap();
    let started = Instant::now();
    let fsync = thread::spawn(move || {
        let r = w.sync_all();
        (r, started.elapsed())
    });
    thread::sleep(Duration::from_millis(300));
    assert!(
        !fsync.is_finished(),
        "fsync did not wait for the dead holder's lock"
    );

    // Meanwhile stat and a read of the whole transcript answer at once,
    // and show the pending line as written.
    let want = format!("{header}{}{}", line(0), line(1));
    for i in 0..5 {
        let t = Instant::now();
        let size = fs::metadata(&view).unwrap().len();
        let mut got = String::new();
        fs::File::open(&view)
            .unwrap()
            .read_to_string(&mut got)
            .unwrap();
        let took = t.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "stat and read {i} took {took:?} while a commit waited for the lock"
        );
        assert_eq!(
            size,
            want.len() as u64,
            "stat {i}: the pending line is counted"
        );
        assert_eq!(got, want, "read {i}: the pending line is shown as written");
    }
    assert!(
        !fsync.is_finished(),
        "the lease ended too early for this test"
    );

    // A second descriptor writes the line after the one shown: it waits
    // for the first handle's commit (a write at the end commits the lines
    // pending before it) instead of being refused for its `seq`.
    let second_view = view.clone();
    let second = thread::spawn(move || {
        let mut f = OpenOptions::new().append(true).open(&second_view)?;
        f.write_all(line(2).as_bytes())?;
        f.sync_all()
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    while !fsync.is_finished() {
        assert!(Instant::now() < deadline, "fsync still waits 30 s later");
        thread::sleep(Duration::from_millis(20));
    }
    let (r, took) = fsync.join().unwrap();
    r.unwrap_or_else(|e| panic!("fsync after the takeover failed: {e}\n{}", m.log()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !second.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the second writer still waits 30 s later"
        );
        thread::sleep(Duration::from_millis(20));
    }
    second
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the second descriptor's line was refused: {e}\n{}", m.log()));
    let want = format!("{want}{}", line(2));
    assert!(
        took >= Duration::from_millis(LEASE_MS),
        "the lock was taken over after {took:?}, before the lease ended"
    );
    let stored = zstd_dc(&root.path().join(&rel).join("session.jsonl.zstd"));
    assert_eq!(String::from_utf8(stored).unwrap(), want);
    // The pread of a descriptor opened before the commit sees it too.
    let f = fs::File::open(&view).unwrap();
    let mut buf = vec![0u8; want.len()];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, want.as_bytes());
    drop(f);
    m.stop();
}

/// The first writer's close (flush) waits for the dead holder's lock to
/// commit its line; a second descriptor's next line, written meanwhile,
/// waits for that commit and lands after it, instead of being refused for
/// its `seq` (flush, unlike fsync, leaves the kernel's inode lock free, so
/// the second write reaches the daemon during the wait).
#[test]
fn a_second_descriptor_waits_for_the_first_ones_stuck_commit() {
    let Fixture {
        root,
        m,
        rel,
        view,
        header,
    } = session_behind_a_dead_lock("dl-2", &["--batch-ms", "60000"]);
    let mut w = OpenOptions::new().append(true).open(&view).unwrap();
    w.write_all(line(1).as_bytes()).unwrap();
    // Its close commits, and waits for the lock.
    let first = thread::spawn(move || {
        use std::os::fd::IntoRawFd;
        let fd = w.into_raw_fd();
        // SAFETY: `fd` was just taken out of the `File`; nobody else owns it.
        if unsafe { libc::close(fd) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    });
    thread::sleep(Duration::from_millis(300));
    assert!(
        !first.is_finished(),
        "the first close did not wait for the lock"
    );
    let second = {
        let mut f = OpenOptions::new().append(true).open(&view).unwrap();
        f.write_all(line(2).as_bytes()).and_then(|()| f.sync_all())
    };
    second.unwrap_or_else(|e| panic!("the second descriptor's line was refused: {e}\n{}", m.log()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !first.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the first close still waits 30 s later"
        );
        thread::sleep(Duration::from_millis(20));
    }
    first.join().unwrap().unwrap();
    let stored = zstd_dc(&root.path().join(&rel).join("session.jsonl.zstd"));
    assert_eq!(
        String::from_utf8(stored).unwrap(),
        format!("{header}{}{}{}", line(0), line(1), line(2))
    );
    m.stop();
}
