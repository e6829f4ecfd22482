//! `sessionfs append ROOT ID`: lines from stdin under the
//! store's write rules, run as the built binary. What it stores is read
//! back with `zstd -dc` and the reference oracle; with a mount of the same
//! root, lines appended by the command are read through the mount, and
//! lines written through the mount are continued by the command.

mod common;

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::lines::{header_line, note};
use common::oracle::{oracle_session, run_oracle};
use common::{run_with_stdin, zstd_dc, Mount};

const SESSION_X: &str = "session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
const CSE_X: &str = "cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
const CWD: &str = common::CORPUS_APP_CWD;
const CREATED: u64 = 1_767_600_000_000;

/// Runs `sessionfs append ROOT ID` with `input` on stdin.
fn append(root: &Path, id: &str, input: &str) -> Output {
    run_with_stdin(
        env!("CARGO_BIN_EXE_sessionfs"),
        [OsStr::new("append"), root.as_os_str(), OsStr::new(id)],
        input.as_bytes(),
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_exit(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: stderr:\n{}",
        stderr(out)
    );
}

fn transcript(root: &Path, id: &str) -> PathBuf {
    root.join("--home-alice-work-app--")
        .join(id)
        .join("session.jsonl.zstd")
}

#[test]
fn append_creates_only_for_an_exact_id_and_continues_a_found_session() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();

    // Creation: an unknown id, the first line its header.
    let mut text =
        header_line(SESSION_X, Some(CWD), CREATED) + &note(0, "cli", 0) + &note(1, "cli", 1);
    let out = append(&root, SESSION_X, &text);
    assert_exit(&out, 0, "create");
    let path = transcript(&root, SESSION_X);
    assert_eq!(String::from_utf8(zstd_dc(&path)).unwrap(), text);

    // Continuation by the compat-prefixed id (a body match).
    let more = note(2, "cli", 2);
    assert_exit(&append(&root, CSE_X, &more), 0, "continue by body");
    text += &more;
    assert_eq!(String::from_utf8(zstd_dc(&path)).unwrap(), text);
    let before = common::all_paths(&root);
    let bytes = fs::read(&path).unwrap();

    // Refusals leave every file as it was and create nothing.
    let refusals: [(&str, String, i32, &str); 6] = [
        (
            "a header for a body-only match is not a new session, and says which it found",
            header_line(CSE_X, Some(CWD), CREATED),
            1,
            "names the existing session",
        ),
        (
            "a gap in seq",
            note(3, "cli", 3) + &note(5, "cli", 5),
            1,
            "line 2",
        ),
        (
            "an incomplete last line",
            note(3, "cli", 3).trim_end().to_string(),
            1,
            "newline",
        ),
        (
            "a new id without a header first",
            note(0, "cli", 0),
            1,
            "header",
        ),
        (
            "a header of another id",
            header_line("another-session", Some(CWD), CREATED),
            1,
            "another-session",
        ),
        ("not JSON", "hello\n".to_string(), 1, "line 1"),
    ];
    for (i, (what, input, code, needle)) in refusals.iter().enumerate() {
        let id = if i == 3 || i == 4 {
            "brand-new-id"
        } else {
            CSE_X
        };
        let out = append(&root, id, input);
        assert_exit(&out, *code, what);
        assert!(
            stderr(&out).contains(needle),
            "{what}: the message does not say {needle:?}: {}",
            stderr(&out)
        );
        if i == 2 {
            // The message names the transcript, not the root.
            assert!(
                stderr(&out).contains(&format!("{}:", path.display())),
                "{what}: {}",
                stderr(&out)
            );
        }
        assert_eq!(common::all_paths(&root), before, "{what}: the tree changed");
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "{what}: the transcript changed"
        );
    }

    // Another id with the same body finds this session: the command never
    // creates it beside (its header is refused as a second header).
    let other = "other_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
    let other_text = header_line(other, Some(CWD), CREATED) + &note(0, "other", 0);
    let out = append(&root, other, &other_text);
    assert_exit(&out, 1, "a body match is continued, not created beside");
    assert!(stderr(&out).contains("header"), "{}", stderr(&out));
    assert_eq!(common::all_paths(&root), before);

    // Created on purpose through the library, two sessions share a body:
    // a third prefix is then ambiguous (exit 3).
    let api = sessionfs::api::Root::open(&root).unwrap();
    let mut w = api.create_session(other, Some(CWD), CREATED).unwrap();
    w.append_lines(note(0, "other", 0).as_bytes()).unwrap();
    w.commit().unwrap();
    let out = append(&root, CSE_X, &note(3, "cli", 3));
    assert_exit(&out, 3, "ambiguous body");
    // The exact id still finds its session.
    let last = note(3, "cli", 3);
    assert_exit(&append(&root, SESSION_X, &last), 0, "exact id");
    text += &last;

    // The reference loads both sessions with exactly these lines.
    let (report, out) = run_oracle(&root, &[]);
    assert!(
        out.status.success(),
        "oracle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["list"]["count"], 2, "{}", report["list"]);
    for (id, expected) in [(SESSION_X, &text), (other, &other_text)] {
        let s = oracle_session(&report, id);
        assert_eq!(
            s["readRaw"]["content"].as_str(),
            Some(expected.as_str()),
            "{id}"
        );
        assert_eq!(s["load"]["ok"], true, "{id}: {}", s["load"]);
        assert_eq!(s["load"]["contiguous"], true, "{id}");
    }
}

/// Reads `path` until it holds exactly `expected` (the attribute timeout
/// may hide growth for a moment); panics after 10 s with what was read.
fn wait_content(path: &Path, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = fs::read_to_string(path).unwrap_or_default();
        if got == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never showed the lines written:\nexpected:\n{expected}\ngot:\n{got}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn append_round_trips_with_a_mount_of_the_same_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    let mut text = header_line(SESSION_X, Some(CWD), CREATED) + &note(0, "cli", 0);
    assert_exit(&append(&root, SESSION_X, &text), 0, "create");

    let mnt = Mount::start(&root, &["--attr-timeout", "0.2"]);
    let view = mnt
        .join("--home-alice-work-app--")
        .join(SESSION_X)
        .join("session.jsonl");
    wait_content(&view, &text);

    // CLI -> mount.
    let line = note(1, "cli", 1);
    assert_exit(&append(&root, CSE_X, &line), 0, "append beside the mount");
    text += &line;
    wait_content(&view, &text);

    // Mount -> CLI: a line written through the mount (fsync commits it and
    // reports its errors), continued by the command.
    let line = note(2, "mount", 2);
    let mut f = OpenOptions::new().append(true).open(&view).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    f.sync_all().unwrap();
    drop(f);
    text += &line;
    assert_eq!(
        String::from_utf8(zstd_dc(&transcript(&root, SESSION_X))).unwrap(),
        text
    );
    let line = note(3, "cli", 3);
    assert_exit(
        &append(&root, SESSION_X, &line),
        0,
        "append after the mount's line",
    );
    text += &line;
    wait_content(&view, &text);

    // A session the command creates shows in the mount, by id too.
    let other = "other-session";
    let other_text = header_line(other, Some(CWD), CREATED) + &note(0, "cli", 0);
    assert_exit(
        &append(&root, other, &other_text),
        0,
        "create beside the mount",
    );
    wait_content(
        &mnt.join(".by-id").join(other).join("session.jsonl"),
        &other_text,
    );

    // The README's reliable Python writer: close() reports a refused
    // (incomplete) last line, where a shell's `>>` would exit 0.
    let incomplete = note(4, "py", 4);
    let out = python_append(&view, incomplete.trim_end());
    assert!(!out.status.success(), "python's close reported nothing");
    assert!(
        stderr(&out).contains("Invalid argument"),
        "{}",
        stderr(&out)
    );
    let out = python_append(&view, &incomplete);
    assert!(out.status.success(), "{}", stderr(&out));
    text += &incomplete;
    wait_content(&view, &text);

    mnt.stop();
    assert_eq!(
        String::from_utf8(zstd_dc(&transcript(&root, SESSION_X))).unwrap(),
        text
    );
}

/// The README's Python writer: stdin appended through one descriptor,
/// then an explicit close().
fn python_append(file: &Path, input: &str) -> Output {
    const PY: &str = "
import sys
f = open(sys.argv[1], 'ab', buffering=0)
f.write(sys.stdin.buffer.read())
f.close()
";
    run_with_stdin(
        "python3",
        [OsStr::new("-c"), OsStr::new(PY), file.as_os_str()],
        input.as_bytes(),
    )
}

/// The decoded text of the transcript at `path` and the `seq` its next
/// event line continues with.
fn text_and_next_seq(path: &Path) -> (Vec<u8>, u64) {
    let text = zstd_dc(path);
    let last: serde_json::Value =
        serde_json::from_slice(text.split(|&b| b == b'\n').rev().nth(1).unwrap()).unwrap();
    let seq = last["seq"].as_u64().unwrap() + 1;
    (text, seq)
}

/// `sessionfs append` exited 1 saying `why`, and the transcript at `path`
/// still decodes to `before`.
fn assert_refused(out: &Output, why: &str, path: &Path, before: &[u8], what: &str) {
    assert_exit(out, 1, what);
    assert!(stderr(out).contains(why), "{what}: {}", stderr(out));
    assert!(
        zstd_dc(path) == before,
        "{what}: the refused line changed the store"
    );
}

/// A line of `len` bytes, its newline included: an ignorable note with
/// `seq`, padded.
fn padded_note(seq: u64, len: usize) -> String {
    let line = note(seq, "big", 0);
    let pad = len - line.len() - r#","pad":"""#.len();
    line.replacen(
        r#""n":0}"#,
        &format!(r#""n":0,"pad":"{}"}}"#, "p".repeat(pad)),
        1,
    )
}

/// The 16 MiB line limit, its newline included, is the mount's and the
/// store's (helper 29: `sessionfs append` took any length, and a session
/// whose last line was longer could no longer be continued): a line of
/// exactly 16 MiB is stored and the session takes the next; one byte
/// longer is refused, exit 1, nothing of its batch stored.
#[test]
fn append_refuses_a_line_over_16_mib_and_takes_one_of_16_mib() {
    let (_tmp, root) = common::corpus_copy("normal");
    let path = transcript(&root, "Session-A");
    let (before, seq) = text_and_next_seq(&path);
    let limit = 16 << 20;
    let long = padded_note(seq, limit + 1);
    assert_eq!(long.len(), limit + 1);
    let out = append(&root, "Session-A", &long);
    assert_refused(
        &out,
        "longer than 16777216 bytes",
        &path,
        &before,
        "a line of 16 MiB + 1",
    );
    let exact = padded_note(seq, limit);
    assert_exit(&append(&root, "Session-A", &exact), 0, "a line of 16 MiB");
    let next = note(seq + 1, "after", 1);
    assert_exit(&append(&root, "Session-A", &next), 0, "the line after it");
    let mut want = before;
    want.extend_from_slice(exact.as_bytes());
    want.extend_from_slice(next.as_bytes());
    assert!(
        zstd_dc(&path) == want,
        "the store is not the 16 MiB line and the next"
    );
}

/// An ignorable note with `seq` whose `data.d` is nested so that the
/// line reaches `depth` levels (its object is level 1, `data` level 2).
fn deep_note(seq: u64, depth: usize) -> String {
    let arrays = depth - 2;
    format!(
        "{{\"type\":\"x-sessionfs/deep\",\"seq\":{seq},\"time\":1767600000000,\"data\":{{\"d\":{}{}}},\"ignorable\":true}}\n",
        "[".repeat(arrays),
        "]".repeat(arrays)
    )
}

/// A line nested too deep for the reference to load is refused when it is
/// written (tester 32: a line 5,000 deep was taken, and the reference's
/// `load` then failed on the session for good with "Maximum call stack
/// size exceeded"; the doctor called it clean). 1,000 levels are taken and
/// the reference loads them; 1,001 are refused with the reason, nothing
/// stored; a line 3,000 deep already in a transcript is reported by the
/// doctor, and the reference indeed fails to load that session.
#[test]
fn append_refuses_a_line_nested_deeper_than_the_reference_loads() {
    let (_tmp, root) = common::corpus_copy("normal");
    let path = transcript(&root, "Session-A");
    let (before, seq) = text_and_next_seq(&path);
    let out = append(&root, "Session-A", &deep_note(seq, 1_001));
    assert_refused(
        &out,
        "1001 levels deep",
        &path,
        &before,
        "a line 1,001 levels deep",
    );
    let taken = deep_note(seq, 1_000);
    assert_exit(
        &append(&root, "Session-A", &taken),
        0,
        "a line 1,000 levels deep",
    );
    let mut want = before.clone();
    want.extend_from_slice(taken.as_bytes());
    assert!(zstd_dc(&path) == want, "the 1,000-deep line is not stored");
    let (report, _) = run_oracle(&root, &[]);
    assert_eq!(
        oracle_session(&report, "Session-A")["load"]["ok"],
        true,
        "the reference loads the session with the 1,000-deep line"
    );
    // A deeper line written by something else: the doctor reports it, and
    // the reference does fail on it.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&zstd::encode_all(deep_note(seq + 1, 3_000).as_bytes(), 3).unwrap())
        .unwrap();
    drop(f);
    let (report, _) = run_oracle(&root, &[]);
    assert_eq!(
        oracle_session(&report, "Session-A")["load"]["ok"],
        false,
        "the reference fails on a 3,000-deep line"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args(["doctor".as_ref(), root.as_os_str()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("nests 3000 levels deep"),
        "the doctor does not report the deep line:\n{report}"
    );
}
