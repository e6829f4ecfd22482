//! Issue 12, Must show 5: nothing is written into ROOT until a write
//! through the mount needs it. After a read-write mount, browsing (listing,
//! reading, stat, the status file) and an unmount without writes, ROOT's
//! contents and every directory's modification time are unchanged.
//!
//! Budget: 30 s per test.

mod common;
mod lifecycle_support;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lifecycle_support::{
    canon, corpus_copy, install_for_mount_helper, mount_point, pid_ended, run_timeout, status_of,
    wait_until,
};

/// Every entry under `root`: its kind, size, modification time (ns) and
/// content hash for files.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (String, u64, i64, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let meta = fs::symlink_metadata(&dir).unwrap();
        let rel = dir.strip_prefix(root).unwrap().to_path_buf();
        out.insert(
            rel,
            (
                "dir".into(),
                0,
                meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
                String::new(),
            ),
        );
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else {
                let hash = if meta.is_file() {
                    common::sha256_hex(&fs::read(&path).unwrap())
                } else {
                    String::new()
                };
                out.insert(
                    path.strip_prefix(root).unwrap().to_path_buf(),
                    (
                        "file".into(),
                        meta.len(),
                        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
                        hash,
                    ),
                );
            }
        }
    }
    out
}

/// Lists every directory of the mount, reads every transcript and the
/// status file.
fn browse(mnt: &Path) -> usize {
    let mut read = 0;
    let mut stack = vec![mnt.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() && !path.ends_with(".by-id") {
                stack.push(path);
            } else if meta.is_file() && fs::read(&path).is_ok() {
                read += 1;
            }
        }
    }
    let _ = status_of(mnt);
    read
}

fn assert_unchanged(
    before: &BTreeMap<PathBuf, (String, u64, i64, String)>,
    after: &BTreeMap<PathBuf, (String, u64, i64, String)>,
    what: &str,
) {
    for (path, b) in before {
        match after.get(path) {
            None => panic!("{what}: {} disappeared from ROOT", path.display()),
            Some(a) => assert_eq!(a, b, "{what}: {} changed in ROOT", path.display()),
        }
    }
    for path in after.keys() {
        assert!(
            before.contains_key(path),
            "{what}: {} was created in ROOT",
            path.display()
        );
    }
}

#[test]
fn a_read_write_mount_browsed_and_unmounted_leaves_root_untouched() {
    let root = corpus_copy("normal");
    let before = snapshot(root.path());
    let mount = common::Mount::start(root.path(), &[]);
    assert_eq!(status_of(mount.path())["options"]["ro"], false);
    let read = browse(mount.path());
    assert!(read >= 20, "only {read} files read through the mount");
    mount.stop();
    assert_unchanged(&before, &snapshot(root.path()), "foreground mount");
}

#[test]
fn the_helper_form_leaves_root_untouched_too() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let before = snapshot(root.path());
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = run_timeout(
        30,
        "mount",
        &[
            OsStr::new("-t"),
            OsStr::new("fuse.sessionfs"),
            root.path().as_os_str(),
            mnt.as_os_str(),
            OsStr::new("-o"),
            OsStr::new("index_cache=none"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = status_of(&mnt)["pid"].as_u64().unwrap() as u32;
    let read = browse(&mnt);
    let out = run_timeout(10, "umount", &[mnt.as_os_str()]);
    lifecycle_support::cleanup_mount(&mnt);
    assert!(out.status.success());
    assert!(read >= 20);
    assert!(wait_until(Duration::from_secs(5), || pid_ended(pid)));
    assert_unchanged(&before, &snapshot(root.path()), "helper-form mount");
}

/// The publication method is found at the first publication: a new
/// session created through the mount is published (and only then is
/// anything written).
#[test]
fn the_first_publication_still_works() {
    let root = corpus_copy("normal");
    let mount = common::Mount::start(root.path(), &["--batch-ms", "0"]);
    let dir = mount.join("--tmp-lazy--/lazy-probe");
    fs::create_dir_all(&dir).unwrap();
    let header = "{\"type\":\"session\",\"version\":0,\"id\":\"lazy-probe\",\"createdAt\":1767603600000,\"cwd\":\"/tmp/lazy\",\"delegationDepth\":0}\n";
    fs::write(dir.join("session.jsonl"), header).unwrap();
    mount.stop();
    let stored = root
        .path()
        .join("--tmp-lazy--/lazy-probe/session.jsonl.zstd");
    assert_eq!(common::zstd_dc(&stored), header.as_bytes());
    let leftovers: Vec<_> = fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(".sessionfs-probe"))
        .collect();
    assert!(leftovers.is_empty(), "probe files left: {leftovers:?}");
}
