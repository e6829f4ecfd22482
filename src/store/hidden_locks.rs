//! Lock files a network client kept after their unlink. sshfs answers an
//! `unlink` of a file it still counts as open (its release, sent by the
//! kernel after `close` returns, not yet handled) by renaming it to
//! `.fuse_hidden…`, and does not always remove it at the release: a fresh
//! tester found 18 such copies of `.sessionfs.lock` after 216 commits
//! through sshfs, listed as session entries ever after. A holder of the
//! lock on a network client removes them from its session directory, at
//! most once a minute per directory: only files named `.fuse_hidden*`
//! that hold a sessionfs lock body (never anything else) and were last
//! written longer ago than a lease could still run.

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

/// Removes the hidden lock copies of session directory `dir` last written
/// more than `older_than` ago, unless `dir` was looked at within the last
/// minute. Returns how many were removed. Best effort: errors are logged
/// at debug level.
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
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(HIDDEN_PREFIX.as_bytes())
        {
            continue;
        }
        let path = entry.path();
        if is_stale_lock_copy(&path, older_than) {
            match fs::remove_file(&path) {
                Ok(()) => {
                    removed += 1;
                    log::info!(
                        "{}: removed a lock file the network client kept",
                        path.display()
                    );
                }
                Err(e) => log::debug!("{}: {e}", path.display()),
            }
        }
    }
    removed
}

/// Whether `path` is a regular file of at most [`MAX_BODY`] bytes holding
/// a sessionfs lock body, last written more than `older_than` ago.
fn is_stale_lock_copy(path: &Path, older_than: Duration) -> bool {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return false;
    };
    let old = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|age| age > older_than);
    if !meta.is_file() || meta.len() > MAX_BODY || !old {
        return false;
    }
    let mut body = Vec::new();
    let read = fs::File::open(path).and_then(|f| f.take(MAX_BODY).read_to_end(&mut body));
    read.is_ok() && super::lease::LockBody::parse(&body).is_some()
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
}
