//! Issue 11, Must show 6: `.by-id/X` through the mount, `sessionfs locate
//! ROOT ID` and `sessionfs list ROOT` agree for every session of every
//! corpus case. The expectation comes from the corpus itself
//! (`expected.json`: each session's id and directory, and every transcript
//! file the reference wrote):
//!
//! - a session `list` shows: `.by-id/<dir name>` is a link to its
//!   directory, and `locate` prints the same transcript path as `list`;
//! - a session directory holding a transcript that `list` refuses
//!   (damaged, misplaced, duplicate, other encoding): `.by-id` lists it,
//!   and opening its transcript through the link fails with EIO, while
//!   `locate` fails;
//! - anything else (no transcript, a flat file): not in `.by-id`, and
//!   `locate` fails;
//! - `.by-id` lists exactly the directory names that hold a transcript.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

use common::{corpus_copy, corpus_dir, Mount};

fn sessionfs(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args(args)
        .output()
        .expect("run sessionfs")
}

/// `sessionfs list --json ROOT`: id → (project, transcript path).
fn listed(root: &Path) -> BTreeMap<String, (String, String)> {
    let out = sessionfs(&["list", "--json", root.to_str().unwrap()]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("list --json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    rows.as_array()
        .expect("an array")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                (
                    r["project"].as_str().unwrap().to_string(),
                    r["path"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

fn check_case(case: &str) -> usize {
    let expected: serde_json::Value =
        serde_json::from_slice(&fs::read(corpus_dir().join(case).join("expected.json")).unwrap())
            .unwrap();
    let report = &expected["report"];
    // Directories ("project/session") that hold a transcript file.
    let with_transcript: BTreeSet<String> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| {
            let path = f["path"].as_str().unwrap();
            let (dir, file) = path.rsplit_once('/')?;
            (dir.contains('/') && file.starts_with("session.")).then(|| dir.to_string())
        })
        .collect();
    let (_tmp, root) = corpus_copy(case);
    let list = listed(&root);
    let mount = Mount::start(&root, &[]);
    let by_id: BTreeSet<String> = fs::read_dir(mount.join(".by-id"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let expected_names: BTreeSet<String> = with_transcript
        .iter()
        .map(|d| d.rsplit_once('/').unwrap().1.to_string())
        .collect();
    assert_eq!(by_id, expected_names, "{case}: .by-id lists the sessions");

    let mut checked = 0;
    for session in report["sessions"].as_array().unwrap() {
        let id = session["id"].as_str().unwrap();
        let dirs: Vec<String> = session["dirs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().trim_end_matches('/').to_string())
            .collect();
        let locate = sessionfs(&["locate", root.to_str().unwrap(), id]);
        let located = String::from_utf8_lossy(&locate.stdout)
            .trim_end()
            .to_string();
        let what = format!("{case}: session {id:?} in {dirs:?}");
        match list.get(id) {
            Some((project, path)) => {
                assert_eq!(dirs.len(), 1, "{what}: listed, so in one directory");
                let dir = &dirs[0];
                let name = dir.rsplit_once('/').unwrap().1;
                assert_eq!(
                    dir.split('/').next().unwrap(),
                    project,
                    "{what}: list's project"
                );
                assert!(locate.status.success(), "{what}: locate failed: {locate:?}");
                assert_eq!(&located, path, "{what}: locate and list");
                assert_eq!(
                    Path::new(path),
                    root.join(dir).join(Path::new(path).file_name().unwrap()),
                    "{what}: list's path is the corpus directory"
                );
                let link = fs::read_link(mount.join(".by-id").join(name)).unwrap();
                assert_eq!(link, Path::new("..").join(dir), "{what}: .by-id link");
                // The link leads to the same transcript: the same bytes, or
                // the same failure (damage after a readable prefix).
                let read = |p: &Path| fs::read(p).map_err(|e| e.raw_os_error());
                let through = read(&mount.join(".by-id").join(name).join("session.jsonl"));
                let direct = read(&mount.join(dir).join("session.jsonl"));
                assert_eq!(through, direct, "{what}: same bytes or errno");
            }
            None if dirs.iter().any(|d| with_transcript.contains(d)) => {
                assert!(
                    !locate.status.success(),
                    "{what}: locate printed {located:?}"
                );
                let dir = dirs.iter().find(|d| with_transcript.contains(*d)).unwrap();
                let name = dir.rsplit_once('/').unwrap().1;
                assert!(by_id.contains(name), "{what}: listed in .by-id");
                let opened = fs::File::open(mount.join(".by-id").join(name).join("session.jsonl"));
                assert_eq!(
                    opened.as_ref().err().and_then(|e| e.raw_os_error()),
                    Some(libc::EIO),
                    "{what}: opening through .by-id: {opened:?}"
                );
            }
            None => {
                assert!(
                    !locate.status.success(),
                    "{what}: locate printed {located:?}"
                );
                for d in &dirs {
                    let name = Path::new(d).file_name().unwrap().to_str().unwrap();
                    assert!(!by_id.contains(name), "{what}: not a session in .by-id");
                }
            }
        }
        checked += 1;
    }
    mount.stop();
    checked
}

#[test]
fn by_id_locate_and_list_agree_on_every_corpus_session() {
    let mut cases: Vec<String> = fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.path()
                .join("expected.json")
                .is_file()
                .then(|| e.file_name().into_string().unwrap())
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 11, "corpus cases: {cases:?}");
    let mut total = 0;
    for case in &cases {
        total += check_case(case);
    }
    eprintln!("{total} sessions in {} cases agree", cases.len());
    assert!(total >= 80, "every session walked: {total}");
}
