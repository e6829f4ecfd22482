//! The command line (issue 5): `list`, `locate`, `cat` and `key`, run as the
//! built binary on copies of `../shared/corpus`, always from a current
//! directory elsewhere, so that nothing can depend on where the process
//! stands.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sessionfs::store::frame::encode_frame;
use sessionfs::store::naming::{encode_id, project_dir_name};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use common::copy_tree;
use common::lines::header_line;

const SESSION_X: &str = "session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
const CSE_X: &str = "cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
const BOB_NFC: &str = "/home/bob/\u{9879}\u{76EE}/caf\u{E9}";
const BOB_NFD: &str = "/home/bob/\u{9879}\u{76EE}/cafe\u{301}";

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
}

/// A private copy of a corpus case's root, and a separate directory to run
/// the binary from.
struct Fixture {
    _tmp: TempDir,
    root: PathBuf,
    elsewhere: PathBuf,
}

impl Fixture {
    fn corpus(case: &str) -> Fixture {
        let f = Fixture::empty();
        copy_tree(&shared().join("corpus").join(case).join("root"), &f.root);
        f
    }

    fn empty() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("store");
        let elsewhere = base.join("elsewhere");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            elsewhere,
        }
    }

    fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .args(args)
            .current_dir(&self.elsewhere)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    }

    /// Writes a valid zstd session at the place its header derives.
    fn write_session(&self, id: &str, cwd: Option<&str>, created_at: u64) {
        let header_line = header_line(id, cwd, created_at);
        let events = "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n\
                      {\"type\":\"turn/end\",\"seq\":1,\"time\":2,\"data\":{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}}\n";
        let dir = self
            .root
            .join(project_dir_name(cwd).unwrap())
            .join(encode_id(id).unwrap());
        fs::create_dir_all(&dir).unwrap();
        let mut bytes = encode_frame(header_line.as_bytes()).unwrap();
        bytes.extend(encode_frame(events.as_bytes()).unwrap());
        fs::write(dir.join("session.jsonl.zstd"), bytes).unwrap();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
}

fn list_json(f: &Fixture, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["list", f.root.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let o = f.run(&args);
    assert_exit(&o, 0);
    serde_json::from_str::<Value>(&stdout(&o))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn ids(list: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = list
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn expected(case: &str) -> Value {
    let text =
        fs::read_to_string(shared().join("corpus").join(case).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// id -> the reference's `readRaw` answer.
fn read_raw(case: &str) -> BTreeMap<String, Value> {
    expected(case)["report"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s["readRaw"].clone()))
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---- list ----

#[test]
fn list_project_finds_the_nfc_and_the_nfd_sessions() {
    let f = Fixture::corpus("normal");
    for spelling in [BOB_NFC, BOB_NFD] {
        let list = list_json(&f, &["--project", spelling]);
        assert_eq!(ids(&list), [".", ".."], "--project {spelling:?}");
        let cwds: Vec<&str> = list.iter().map(|s| s["cwd"].as_str().unwrap()).collect();
        assert!(
            cwds.contains(&BOB_NFC) && cwds.contains(&BOB_NFD),
            "{cwds:?}"
        );
    }
    // The table form shows them too.
    let o = f.run(["list", f.root.to_str().unwrap(), "--project", BOB_NFC]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[0].starts_with("ID"));
    assert!(
        rows[1].starts_with(". ") && rows[2].starts_with(".. "),
        "{text}"
    );
}

#[test]
fn list_project_never_returns_another_cwd_sharing_the_lossy_key() {
    let f = Fixture::empty();
    f.write_session("in-a-bc", Some("/a/b-c"), 1_767_600_000_000);
    f.write_session("in-ab-c", Some("/a-b/c"), 1_767_600_001_000);
    assert_eq!(
        project_dir_name(Some("/a/b-c")).unwrap(),
        project_dir_name(Some("/a-b/c")).unwrap()
    );
    assert_eq!(ids(&list_json(&f, &["--project", "/a/b-c"])), ["in-a-bc"]);
    assert_eq!(ids(&list_json(&f, &["--project", "/a-b/c"])), ["in-ab-c"]);
    assert!(list_json(&f, &["--project", "/a/b/c"]).is_empty());
    assert_eq!(ids(&list_json(&f, &[])), ["in-a-bc", "in-ab-c"]);
}

#[test]
fn list_shows_what_the_reference_lists() {
    let f = Fixture::corpus("normal");
    let list = list_json(&f, &[]);
    let expected = expected("normal");
    let reference = expected["report"]["list"]["sessions"].as_array().unwrap();
    assert_eq!(ids(&list), ids(reference));
    let raw = read_raw("normal");
    let by_id: BTreeMap<&str, &Value> = reference
        .iter()
        .map(|h| (h["id"].as_str().unwrap(), h))
        .collect();
    for s in &list {
        let id = s["id"].as_str().unwrap();
        let header = by_id[id];
        assert_eq!(s["cwd"], header["cwd"].clone(), "{id}");
        assert_eq!(s["createdAtMs"], header["createdAt"], "{id}");
        assert_eq!(s["size"], raw[id]["bytes"], "{id}");
        let created = s["createdAt"].as_str().unwrap();
        assert!(created.ends_with('Z') && created.len() == 24, "{created}");
        assert!(s["modified"].as_str().unwrap().ends_with('Z'));
        let path = Path::new(s["path"].as_str().unwrap());
        assert!(
            path.starts_with(&f.root) && path.is_file(),
            "{}",
            path.display()
        );
    }
    // 1767621600000 ms is 2026-01-05T14:00:00Z.
    let dot = list.iter().find(|s| s["id"] == ".").unwrap();
    assert_eq!(dot["createdAt"], "2026-01-05T14:00:00.000Z");
}

/// A project or session directory given as ROOT is named for what it is,
/// as `check` names it, not taken for a root of retired flat files.
#[test]
fn a_project_or_session_directory_given_as_root_is_named_for_what_it_is() {
    let f = Fixture::corpus("normal");
    let project = f.root.join("--root--");
    let session = f.root.join("--home-alice-work-app--/Session-A");
    for (dir, what) in [
        (&project, "a project directory"),
        (&session, "a session directory"),
    ] {
        for cmd in [
            &["list"][..],
            &["locate", "--", "Session-A"][..],
            &["cat", "--", "Session-A"][..],
        ] {
            let mut args: Vec<&OsStr> = vec![OsStr::new(cmd[0]), dir.as_os_str()];
            args.extend(cmd[1..].iter().map(OsStr::new).filter(|a| *a != "--"));
            let o = f.run(&args);
            assert_exit(&o, 1);
            let err = stderr(&o);
            assert!(
                err.contains(&format!("{what}, not a session store root")),
                "{cmd:?} {}: {err}",
                dir.display()
            );
            assert!(!err.contains("flat-file"), "{err}");
        }
    }
}

#[test]
fn list_reports_a_bad_session_and_lists_the_others() {
    let f = Fixture::corpus("corrupt-header");
    let o = f.run(["list", f.root.to_str().unwrap(), "--json"]);
    // Exit 1: something was skipped; the others are still listed.
    assert_exit(&o, 1);
    let list: Vec<Value> = serde_json::from_str::<Value>(&stdout(&o))
        .unwrap()
        .as_array()
        .unwrap()
        .clone();
    assert!(!list.is_empty());
    let err = stderr(&o);
    assert!(err.contains("header"), "{err}");
    assert!(err.contains(f.root.to_str().unwrap()), "{err}");
}

// ---- locate and cat ----

#[test]
fn locate_and_cat_of_an_empty_id_are_usage_errors() {
    let f = Fixture::corpus("normal");
    for cmd in ["locate", "cat"] {
        let o = f.run([cmd, f.root.to_str().unwrap(), ""]);
        assert_exit(&o, 2);
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn locate_and_cat_find_a_session_by_its_rewritten_prefix() {
    let f = Fixture::corpus("normal");
    let want_path = f
        .root
        .join("--home-alice-work-app--")
        .join(SESSION_X)
        .join("session.jsonl.zstd");
    let raw = read_raw("normal");
    for id in [SESSION_X, CSE_X, "01JH8Z4N7Q2W3E4R5T6Y7U8I9O"] {
        let o = f.run(["locate", f.root.to_str().unwrap(), id]);
        assert_exit(&o, 0);
        assert_eq!(o.stdout, [want_path.as_os_str().as_bytes(), b"\n"].concat());

        let o = f.run(["cat", f.root.to_str().unwrap(), id]);
        assert_exit(&o, 0);
        assert_eq!(
            o.stdout.len() as u64,
            raw[SESSION_X]["bytes"].as_u64().unwrap()
        );
        assert_eq!(
            sha256_hex(&o.stdout),
            raw[SESSION_X]["sha256"].as_str().unwrap()
        );
    }
}

#[test]
fn cat_of_every_session_is_the_reference_text() {
    for case in ["normal", "raw"] {
        let f = Fixture::corpus(case);
        for (id, raw) in read_raw(case) {
            let o = f.run([OsStr::new("cat"), f.root.as_os_str(), OsStr::new(&id)]);
            assert_exit(&o, 0);
            assert_eq!(
                sha256_hex(&o.stdout),
                raw["sha256"].as_str().unwrap(),
                "{case}: {id:?}"
            );
        }
    }
}

#[test]
fn ambiguous_missing_and_damaged_ids_fail_with_their_exit_codes() {
    let f = Fixture::empty();
    f.write_session("one_01AbCdEfGh", Some("/w"), 1);
    f.write_session("two_01AbCdEfGh", Some("/x"), 2);
    f.write_session("session_77777777", Some("/w"), 3);
    let root = f.root.to_str().unwrap();

    let o = f.run(["locate", root, "cse_01AbCdEfGh"]);
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.contains("one_01AbCdEfGh") && err.contains("two_01AbCdEfGh"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    // An exact id always wins.
    assert_exit(&f.run(["locate", root, "one_01AbCdEfGh"]), 0);
    // A body match needs 8 characters; case matters.
    assert_exit(&f.run(["cat", root, "cse_77777777"]), 0);
    assert_exit(&f.run(["cat", root, "cse_7777777"]), 1);
    assert_exit(&f.run(["cat", root, "cse_01abcdefgh"]), 1);
    let o = f.run(["locate", root, "nope"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("no session with id \"nope\""));

    // A duplicate id is reported with both paths.
    let d = Fixture::corpus("duplicate");
    let o = d.run(["cat", d.root.to_str().unwrap(), "dup-id"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("duplicate"), "{}", stderr(&o));
    // A misplaced session is refused, naming where it belongs.
    let m = Fixture::corpus("identity-moved");
    let o = m.run(["list", m.root.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("identify"), "{}", stderr(&o));
}

// ---- the root, resolved once ----

#[test]
fn a_relative_symlinked_root_is_resolved_once_against_the_cwd_of_start_up() {
    let f = Fixture::corpus("normal");
    symlink(&f.root, f.elsewhere.join("link")).unwrap();
    // Relative to the process's cwd at start-up, through a symlink, with a
    // trailing slash and a `..` component.
    fs::create_dir(f.elsewhere.join("sub")).unwrap();
    for given in ["link", "link/", "sub/../link", "./link/."] {
        let o = f.run(["locate", given, CSE_X]);
        assert_exit(&o, 0);
        let printed = PathBuf::from(OsStr::from_bytes(o.stdout.strip_suffix(b"\n").unwrap()));
        assert!(
            printed.starts_with(&f.root),
            "{given}: {}",
            printed.display()
        );
    }
}

#[test]
fn missing_root_is_a_clear_error() {
    let f = Fixture::empty();
    let missing = f.root.join("no-such-dir");
    let o = f.run([OsStr::new("list"), missing.as_os_str()]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("no-such-dir") && err.contains("no such directory"),
        "{err}"
    );
}

// ---- key ----

#[test]
fn key_of_every_created_cwd_is_the_reference_directory() {
    let f = Fixture::empty();
    let expected = expected("normal");
    let dirs: BTreeMap<&str, &str> = expected["report"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["dirs"][0].as_str().unwrap()))
        .collect();
    let ops = fs::read_to_string(shared().join("corpus/normal/ops.jsonl")).unwrap();
    let mut checked = 0;
    for line in ops.lines() {
        let op: Value = serde_json::from_str(line).unwrap();
        if op["op"] != "create" {
            continue;
        }
        let (Some(cwd), Some(dir)) = (
            op["meta"]["cwd"].as_str(),
            op["meta"]["id"].as_str().and_then(|id| dirs.get(id)),
        ) else {
            continue;
        };
        let o = f.run(["key", cwd]);
        assert_exit(&o, 0);
        let project = dir.split('/').next().unwrap();
        assert_eq!(stdout(&o), format!("{project}\n"), "cwd {cwd:?}");
        checked += 1;
    }
    assert!(checked >= 20, "{checked}");
    // PATH is used as given: not resolved, not normalized.
    assert_eq!(stdout(&f.run(["key", "."])), "--.--\n");
    assert_eq!(
        stdout(&f.run(["key", BOB_NFD])),
        "--home-bob-~9879~76EE-cafe~0301--\n"
    );
    assert_exit(&f.run(["key", ""]), 2);
}

// ---- usage ----

#[test]
fn help_documents_examples_and_exit_codes() {
    let f = Fixture::empty();
    let o = f.run(["--help"]);
    assert_exit(&o, 0);
    let help = stdout(&o);
    for word in [
        "mount",
        "list",
        "locate",
        "cat",
        "key",
        "Exit status",
        "Examples",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
    for sub in ["mount", "list", "locate", "cat", "key"] {
        let o = f.run([sub, "--help"]);
        assert_exit(&o, 0);
        let help = stdout(&o);
        assert!(
            help.contains("Examples") && help.contains("Exit status"),
            "{sub}: {help}"
        );
    }
    assert_exit(&f.run(["list"]), 2);
    assert_exit(&f.run(["frobnicate", "--x"]), 2);
    assert_exit(&f.run(["mount", "/r", "/m", "--attr-timeout", "-1"]), 2);
    assert_exit(&f.run(["mount", "/r", "/m", "--cache-size", "lots"]), 2);
}

#[test]
fn cat_into_a_closed_pipe_is_quiet() {
    let f = Fixture::corpus("normal");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args([
            "cat",
            f.root.to_str().unwrap(),
            "3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f",
        ])
        .current_dir(&f.elsewhere)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_exit(&o, 0);
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
}

#[test]
fn mount_refuses_a_compression_the_root_holds_nothing_of() {
    // The normal corpus is a zstd root: `--compression none` would show
    // every transcript as a mismatch (EIO) and write new sessions raw.
    let f = Fixture::corpus("normal");
    let mnt = f.elsewhere.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let before = common::all_paths(&f.root);
    let o = f.run([
        OsStr::new("mount"),
        f.root.as_os_str(),
        mnt.as_os_str(),
        OsStr::new("--compression"),
        OsStr::new("none"),
    ]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("--compression none contradicts root")
            && err.contains(".jsonl.zstd transcripts only")
            && err.contains("drop --compression"),
        "{err}"
    );
    assert_eq!(common::all_paths(&f.root), before, "the root is untouched");
    assert!(
        !fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(mnt.to_str().unwrap()),
        "nothing was mounted"
    );
}

#[test]
fn list_aligns_its_columns_by_terminal_width() {
    let f = Fixture::corpus("normal");
    let o = f.run([OsStr::new("list"), f.root.as_os_str()]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    // Characters before the CREATED column.
    let column = |line: &str, word: &str| line[..line.find(word).unwrap()].chars().count();
    let header = text.lines().next().unwrap();
    let at = column(header, "CREATED");
    let ascii = text.lines().find(|l| l.starts_with("Session-A ")).unwrap();
    assert_eq!(column(ascii, "2026-"), at, "{text}");
    // `🚀` is one character two columns wide: one character fewer.
    let wide = text.lines().find(|l| l.starts_with("ünïcödé-🚀")).unwrap();
    assert_eq!(column(wide, "2026-") + 1, at, "{text}");
}
