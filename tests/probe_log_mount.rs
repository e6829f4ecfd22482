//! Smaller faults of issue 10, part 3, through a real mount:
//!
//! * a probe name that exists (`.git` at the root and in a project) is
//!   listed by readdir and looked up with its real type; probe names that
//!   do not exist still get ENOENT;
//! * a refused write's log line names the transcript file (not the session
//!   directory), says which `seq` was expected and which came, and blames
//!   another writer only for a `seq` already in the transcript.

mod common;

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::time::Duration;

use common::{copy_tree, corpus_dir, Mount};

const PROJECT: &str = "--home-alice-work-app--";
const SESSION: &str = "--home-alice-work-app--/3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f";

#[test]
fn probe_names_that_exist_show_their_real_type() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    fs::create_dir(root.path().join(".git")).unwrap();
    fs::write(root.path().join(".git/HEAD"), b"ref: refs/heads/main\n").unwrap();
    fs::create_dir(root.path().join(PROJECT).join(".git")).unwrap();
    let mount = Mount::start(root.path(), &[]);

    for dir in [mount.path().to_path_buf(), mount.join(PROJECT)] {
        let listed: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap()).collect();
        assert!(
            listed.iter().any(|e| e.file_name() == ".git"),
            "{} lists .git",
            dir.display()
        );
        for e in &listed {
            // Every listed entry can be looked up, with the listed type.
            let meta = fs::symlink_metadata(e.path())
                .unwrap_or_else(|err| panic!("lookup of listed {:?}: {err}", e.path()));
            let listed_type = e.file_type().unwrap();
            assert_eq!(
                (meta.is_dir(), meta.is_file(), meta.file_type().is_symlink()),
                (
                    listed_type.is_dir(),
                    listed_type.is_file(),
                    listed_type.is_symlink()
                ),
                "{:?}",
                e.path()
            );
        }
        assert!(fs::metadata(dir.join(".git")).unwrap().is_dir());
        for absent in [".Trash", ".Trash-1000", ".DS_Store", "desktop.ini"] {
            let err = fs::symlink_metadata(dir.join(absent)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::NotFound, "{absent}");
        }
    }
    assert_eq!(
        fs::read(mount.join(".git"))
            .map_err(|e| e.kind())
            .unwrap_err(),
        ErrorKind::IsADirectory
    );
    mount.stop();
}

fn write_line(mount: &Mount, line: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .append(true)
        .open(mount.join(SESSION).join("session.jsonl"))?;
    f.write_all(line.as_bytes())?;
    f.sync_all()
}

/// Waits for the mount's log to hold `needle` and returns its one line.
/// A refusal is logged once, where it was decided (the reply's errno is not
/// logged again as damage); the line is written before the write's reply.
fn logged_once(mount: &Mount, needle: &str) -> String {
    assert!(
        mount.wait_log_contains(needle, Duration::from_secs(10)),
        "{}",
        mount.log()
    );
    let log = mount.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
    assert_eq!(
        lines.len(),
        1,
        "{needle:?} logged {} times:\n{log}",
        lines.len()
    );
    lines[0].to_string()
}

#[test]
fn refused_writes_name_the_file_and_the_seqs() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = Mount::start(root.path(), &[]);
    let text = fs::read_to_string(mount.join(SESSION).join("session.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let next = last["seq"].as_u64().unwrap() + 1;
    let line = |seq: u64| {
        format!(
            "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1,\"data\":{{}},\"ignorable\":true}}\n"
        )
    };
    let file = root
        .path()
        .canonicalize()
        .unwrap()
        .join(SESSION)
        .join("session.jsonl.zstd");

    // A gap: far past the end.
    let far = next + 1000;
    let err = write_line(&mount, &line(far)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    let gap_line = logged_once(&mount, &format!("has seq {far}, expected seq {next}"));
    assert!(
        gap_line.contains(&file.display().to_string()),
        "names the file: {gap_line}"
    );
    assert!(!gap_line.contains("another writer"), "{gap_line}");

    // A seq already in the transcript.
    let old = next - 1;
    let err = write_line(&mount, &line(old)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    let dup_line = logged_once(&mount, &format!("has seq {old}, expected seq {next}"));
    assert!(dup_line.contains(&file.display().to_string()), "{dup_line}");
    assert!(
        dup_line.contains("another writer may have appended"),
        "{dup_line}"
    );

    // A line that is not JSON.
    let err = write_line(&mount, "not json\n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    let json_line = logged_once(&mount, "not valid JSON");
    assert!(
        json_line.contains(&file.display().to_string()),
        "{json_line}"
    );

    // The right seq is taken.
    write_line(&mount, &line(next)).unwrap();

    // An event type the reference does not know, not marked ignorable, is
    // taken (a newer harness may know it), with a warning naming the file.
    let unknown = format!(
        "{{\"type\":\"x-newer\",\"seq\":{},\"time\":1,\"data\":{{}}}}\n",
        next + 1
    );
    write_line(&mount, &unknown).unwrap();
    let unknown_line = logged_once(&mount, "has event type \"x-newer\"");
    assert!(
        unknown_line.contains(&file.display().to_string()) && unknown_line.contains("ignorable"),
        "{unknown_line}"
    );
    assert!(
        fs::read_to_string(mount.join(SESSION).join("session.jsonl"))
            .unwrap()
            .ends_with(&unknown)
    );
    mount.stop();
}
