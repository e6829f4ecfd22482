//! Lock files and wait announcements a network client kept after their
//! unlink. sshfs answers an `unlink` of a file it still counts as open
//! (its release, sent by the kernel after `close` returns, not yet
//! handled, or another process of the same client reading it) by renaming
//! it to `.fuse_hidden…`, and does not always remove it at the release: a
//! fresh tester found 18 such copies of `.sessionfs.lock` after 216
//! commits through sshfs, and another 46 copies of `.sessionfs.lock.wait`
//! (a waiter's announcement, `super::turn`, unlinked by one writer while
//! another process of the same client had it open) still there 15 minutes
//! later, listed as session entries ever after. A holder of the lock on a network
//! client removes them from its session directory, at most once a minute
//! per directory: only files named `.fuse_hidden*` that hold a sessionfs
//! lock body or wait announcement (never anything else) and were last
//! written longer ago than a lease could still run (an announcement asks
//! for at most `super::turn::MAX_WAIT`, far less).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How often one directory is looked at.
const EVERY: Duration = Duration::from_secs(60);

/// Most directories remembered (the oldest half forgotten past it).
const REMEMBERED: usize = 4096;

/// The largest file looked into (a lock body is under 1 KiB).
const MAX_BODY: u64 = 4096;

/// The name prefix sshfs (libfuse's high-level API) gives a hidden file.
const HIDDEN_PREFIX: &str = ".fuse_hidden";

/// Removes the hidden copies of lock files and wait announcements of
/// session directory `dir` last written more than `older_than` ago, unless
/// `dir` was looked at within the last minute. Returns how many were
/// removed. Best effort: errors are logged at debug level.
pub(crate) fn sweep(dir: &Path, older_than: Duration) -> usize {
    static SEEN: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);
    {
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        let seen = seen.get_or_insert_with(HashMap::new);
        if seen.get(dir).is_some_and(|at| at.elapsed() < EVERY) {
            return 0;
        }
        if seen.len() >= REMEMBERED {
            seen.retain(|_, at| at.elapsed() < EVERY);
        }
        seen.insert(dir.to_path_buf(), Instant::now());
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !is_hidden_name(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        if let Some(what) = stale_copy(&path, older_than) {
            match fs::remove_file(&path) {
                Ok(()) => {
                    removed += 1;
                    log::info!(
                        "{}: removed {} the network client kept",
                        path.display(),
                        what.describe()
                    );
                }
                Err(e) => log::debug!("{}: {e}", path.display()),
            }
        }
    }
    removed
}

/// What a hidden copy holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HiddenCopy {
    /// A `.sessionfs.lock` body ([`super::lease::LockBody`]).
    Lock,
    /// A `.sessionfs.lock.wait` announcement ([`super::turn`]).
    WaitAnnouncement,
}

impl HiddenCopy {
    /// Its description in a log line.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            HiddenCopy::Lock => "a lock file",
            HiddenCopy::WaitAnnouncement => "a writer's wait announcement (.sessionfs.lock.wait)",
        }
    }
}

/// Whether `name` is a name sshfs gives a file it hid (`.fuse_hidden*`).
pub(crate) fn is_hidden_name(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes()
        .starts_with(HIDDEN_PREFIX.as_bytes())
}

/// What `path` holds when it is a regular file of at most [`MAX_BODY`]
/// bytes holding a sessionfs lock body or wait announcement, last written
/// more than `older_than` ago; `None` otherwise (also when it cannot be
/// read).
pub(crate) fn stale_copy(path: &Path, older_than: Duration) -> Option<HiddenCopy> {
    let meta = fs::symlink_metadata(path).ok()?;
    let old = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|age| age > older_than);
    if !meta.is_file() || meta.len() > MAX_BODY || !old {
        return None;
    }
    let mut body = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(MAX_BODY).read_to_end(&mut body))
        .ok()?;
    if super::lease::LockBody::parse(&body).is_some() {
        Some(HiddenCopy::Lock)
    } else if super::turn::is_announcement(&body) {
        Some(HiddenCopy::WaitAnnouncement)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_hidden_copies_of_lock_bodies_go() {
        let dir = tempfile::tempdir().unwrap();
        let body =
            br#"{"sessionfs_lock":1,"host":"b","boot":"x","pid":1,"token":"t","lease_ms":15000}"#;
        let old = SystemTime::now() - Duration::from_secs(3600);
        let put = |name: &str, bytes: &[u8], aged: bool| {
            let p = dir.path().join(name);
            fs::write(&p, bytes).unwrap();
            if aged {
                fs::File::options()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_modified(old)
                    .unwrap();
            }
        };
        put(".fuse_hidden0001", body, true);
        put(".fuse_hidden0002", body, false); // too recent
        put(".fuse_hidden0003", b"user data", true); // not a lock
        put("notes.txt", body, true); // not hidden
        let lock_like = super::super::lease::LockBody::parse(body).is_some();
        assert_eq!(
            sweep(dir.path(), Duration::from_secs(60)),
            usize::from(lock_like)
        );
        let left: Vec<String> = {
            let mut v: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert!(lock_like, "the test's body parses as a lock body");
        assert_eq!(left, [".fuse_hidden0002", ".fuse_hidden0003", "notes.txt"]);
        // Within the minute the directory is not looked at again.
        put(".fuse_hidden0004", body, true);
        assert_eq!(sweep(dir.path(), Duration::from_secs(60)), 0);
    }

    /// The copies sshfs keeps of a `.sessionfs.lock.wait` unlinked while
    /// another process of the client read it go under the same rules as
    /// lock copies: hidden, old, an announcement's body.
    #[test]
    fn old_hidden_copies_of_wait_announcements_go() {
        let dir = tempfile::tempdir().unwrap();
        // A body as `turn::announce` writes it (the tester's copies).
        let me = super::super::lease::HolderId {
            host: "b".into(),
            boot: "x".into(),
            pid: 7,
            pidns: "pid:[1]".into(),
        };
        super::super::turn::announce(
            dir.path(),
            super::super::fskind::CommitProtocol::Remote,
            &me,
        );
        let wait = dir.path().join(super::super::lease::WAIT_NAME);
        let body = fs::read(&wait).unwrap();
        assert!(body.starts_with(br#"{"sessionfs_wait":1"#), "{body:?}");
        fs::remove_file(&wait).unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        let put = |name: &str, bytes: &[u8], aged: bool| {
            let p = dir.path().join(name);
            fs::write(&p, bytes).unwrap();
            if aged {
                let f = fs::File::options().write(true).open(&p).unwrap();
                f.set_modified(old).unwrap();
            }
        };
        put(".fuse_hidden00000a1b00000001", &body, true);
        put(".fuse_hidden00000a1b00000002", &body, true);
        put(".fuse_hidden00000a1b00000003", &body, false); // too recent
        put(
            ".fuse_hidden00000a1b00000004",
            br#"{"sessionfs_wait":2}"#,
            true,
        );
        put(".fuse_hidden00000a1b00000005", b"", true); // not told from user data
        assert_eq!(sweep(dir.path(), Duration::from_secs(60)), 2);
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".fuse_hidden00000a1b00000003",
                ".fuse_hidden00000a1b00000004",
                ".fuse_hidden00000a1b00000005"
            ]
        );
    }
}
