//! The mount's `.by-id/` directory (MOUNT.md, The tree; IDENTITY.md §2):
//! one link per session, found by exact id or by body from anywhere.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;

use common::{assert_errno, copy_tree, corpus_dir, sha256_hex, Mount};
use sessionfs::store::frame::encode_frame;

#[test]
fn a_compat_prefixed_id_reads_the_session_from_anywhere() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = Mount::start(root.path(), &[]);
    let elsewhere = tempfile::tempdir().unwrap();
    let link = mount.join(".by-id/cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O/session.jsonl");
    let out = Command::new("cat")
        .arg(&link)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        sha256_hex(&out.stdout),
        common::expected_readraw_sha("normal", "session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O")
    );
    assert_eq!(
        fs::read_link(mount.join(".by-id/cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O")).unwrap(),
        Path::new("../--home-alice-work-app--/session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O")
    );
    // A 6-character body is not enough to name a session.
    assert_errno(
        fs::metadata(mount.join(".by-id/cse_Y7U8I9")),
        libc::ENOENT,
        "short body",
    );
    mount.stop();
}

#[test]
fn the_listing_has_one_link_per_session_and_never_merges_ids() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = Mount::start(root.path(), &[]);
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(mount.join(".by-id")).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.file_type().unwrap().is_symlink());
        let target = fs::read_link(entry.path()).unwrap();
        let session_dir = mount.join(".by-id").join(&target);
        assert!(session_dir.join("session.jsonl").is_file(), "{target:?}");
        assert_eq!(target.file_name(), Some(entry.file_name().as_os_str()));
        names.insert(entry.file_name().to_string_lossy().into_owned());
    }
    assert_eq!(names.len(), 23, "{names:?}");
    assert!(names.contains("Session-A") && names.contains("session-a"));
    mount.stop();
}

fn write_session(root: &Path, id: &str) {
    let dir = root.join("_no-cwd").join(id);
    fs::create_dir_all(&dir).unwrap();
    let header = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1,\"delegationDepth\":0}}\n"
    );
    let mut bytes = encode_frame(header.as_bytes()).unwrap();
    bytes.extend(
        encode_frame(b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{}}\n").unwrap(),
    );
    fs::write(dir.join("session.jsonl.zstd"), bytes).unwrap();
}

#[test]
fn an_ambiguous_body_fails_and_the_log_lists_the_candidates() {
    let root = tempfile::tempdir().unwrap();
    write_session(root.path(), "aaa_BODY12345");
    write_session(root.path(), "bbb_BODY12345");
    let mount = Mount::start(root.path(), &[]);
    assert_errno(
        fs::metadata(mount.join(".by-id/ccc_BODY12345/session.jsonl")),
        libc::EIO,
        "ambiguous",
    );
    assert!(
        mount.wait_log_contains("bbb_BODY12345", std::time::Duration::from_secs(3)),
        "the log does not list the candidates:\n{}",
        mount.log()
    );
    // An exact id always wins.
    assert!(fs::read(mount.join(".by-id/aaa_BODY12345/session.jsonl")).is_ok());
    mount.stop();
}

#[test]
fn a_duplicate_id_is_listed_once_and_refused() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("duplicate/root"), root.path());
    let mount = Mount::start(root.path(), &[]);
    let names: Vec<String> = fs::read_dir(mount.join(".by-id"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.iter().filter(|n| *n == "dup-id").count(),
        1,
        "{names:?}"
    );
    assert_errno(
        fs::read(mount.join(".by-id/dup-id/session.jsonl")),
        libc::EIO,
        "duplicate",
    );
    assert_eq!(
        sha256_hex(&fs::read(mount.join(".by-id/unique-id/session.jsonl")).unwrap()),
        common::expected_readraw_sha("duplicate", "unique-id")
    );
    mount.stop();
}

/// A directory without a transcript is not a session (FORMAT.md, Layout):
/// one of the name of a session in a later project (what `doctor
/// --repair` of a duplicate id leaves) does not hide that session from
/// `.by-id`, `locate` or `append` (found by a fresh tester: all three
/// said there was no such session while `list` showed it).
#[test]
fn a_directory_without_a_transcript_hides_no_session_of_its_name() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("duplicate/root"), root.path());
    fs::remove_file(
        root.path()
            .join("--home-alice-work-app--/dup-id/session.jsonl.zstd"),
    )
    .unwrap();
    let kept = root
        .path()
        .join("--home-alice-work-other--/dup-id/session.jsonl.zstd");
    let sessionfs = |args: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = sessionfs(&[
        "locate".as_ref(),
        root.path().as_os_str(),
        "dup-id".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout,
        [kept.as_os_str().as_encoded_bytes(), b"\n"].concat()
    );
    let mount = Mount::start(root.path(), &[]);
    assert_eq!(
        fs::read_link(mount.join(".by-id/dup-id")).unwrap(),
        Path::new("../--home-alice-work-other--/dup-id")
    );
    assert!(common::list_dir(&mount.join(".by-id")).contains(&"dup-id".into()));
    mount.stop();
    let before = common::zstd_dc(&kept);
    let next: serde_json::Value = serde_json::from_slice(
        before
            .split(|&b| b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap(),
    )
    .unwrap();
    let line = format!(
        "{{\"type\":\"x-note\",\"seq\":{},\"time\":1,\"data\":{{}},\"ignorable\":true}}\n",
        next["seq"].as_u64().unwrap() + 1
    );
    let out = common::run_with_stdin(
        env!("CARGO_BIN_EXE_sessionfs"),
        [
            "append".as_ref(),
            root.path().as_os_str(),
            "dup-id".as_ref(),
        ],
        line.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        common::zstd_dc(&kept),
        [&before[..], line.as_bytes()].concat()
    );
}
