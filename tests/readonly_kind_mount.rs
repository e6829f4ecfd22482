//! A root on a file system kind that cannot give the commit protocol what
//! it needs (exclusive create between clients, read-back) is mounted
//! read-only, with the reason on the terminal and in the log (MOUNT.md,
//! "Shared roots"). The kind is forced with `SESSIONFS_FS_KIND` (the only
//! test in this binary, so the variable reaches only its own mount); the
//! network tests meet the real clients.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::time::Duration;

use common::{copy_tree, corpus_dir, Mount};

#[test]
fn a_kind_without_exclusive_create_or_read_back_mounts_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_tree(&corpus_dir().join("normal/root"), &root);
    let rel = "--home-alice-work-app--/session-a";
    let backing = root.join(rel).join("session.jsonl.zstd");
    let before = fs::read(&backing).unwrap();
    // SAFETY (edition 2021: safe call): this binary holds one test, and the
    // variable is set before any thread of it starts a child.
    std::env::set_var("SESSIONFS_FS_KIND", "fuse.rclone");
    let mount = Mount::start(&root, &[]);
    assert!(
        mount.wait_log_contains("mount is read-only", Duration::from_secs(10)),
        "the reason is logged: {}",
        mount.log()
    );
    let log = mount.log();
    assert!(log.contains("fuse.rclone"), "{log}");
    assert!(log.contains("exclusive create"), "{log}");
    let view = mount.join(rel).join("session.jsonl");
    let r = OpenOptions::new()
        .append(true)
        .open(&view)
        .and_then(|mut f| f.write_all(b"{\"type\":\"x\",\"seq\":1000000}\n"));
    common::assert_errno(r, libc::EROFS, "append on a read-only kind");
    // Reading still works.
    assert!(!fs::read(&view).unwrap().is_empty());
    mount.stop();
    assert_eq!(fs::read(&backing).unwrap(), before);
    let names: Vec<_> = fs::read_dir(root.join(rel))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.to_string_lossy().starts_with(".sessionfs")),
        "nothing written: {names:?}"
    );
}
