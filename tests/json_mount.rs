//! Sessions the reference reads are read, continued and listed by the
//! mount, whatever their JSON looks like (issue 10, part 1):
//!
//! * a session written by the reference itself whose last event nests
//!   arrays 300 deep, continued through the mount with lines nested 1,000
//!   levels deep (the deepest a written line may reach: the reference's
//!   load fails from about 2,500 in a session of turns);
//! * headers (written here, byte by byte, then checked with the oracle)
//!   whose extra key holds 100,000 nested `[` or 10,000 nested `{`, and a
//!   header whose `agentPreset` holds the byte 0xFF.
//!
//! Each is first read by the reference (`readRaw` and `load` succeed), then
//! mounted: the mount serves the stored bytes (equal to `readRaw`, which
//! decodes 0xFF as U+FFFD), appends through the mount succeed, `sessionfs
//! list` shows every session, `sessionfs check` passes them, and after
//! unmounting the reference loads each session with the appended events.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use common::{zstd_dc, Mount};
use sessionfs::store::naming::{encode_id, project_dir_name};

use common::oracle;

const T0: u64 = 1_767_600_000_000;

fn nested_array(depth: usize) -> String {
    format!("{}\"x\"{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_object(depth: usize) -> String {
    format!("{}1{}", "{\"k\":".repeat(depth), "}".repeat(depth))
}

fn event(seq: u64, data: &str) -> String {
    format!(
        "{{\"type\":\"x-log\",\"seq\":{seq},\"time\":{},\"data\":{data},\"ignorable\":true}}\n",
        T0 + seq
    )
}

/// `<project dir>/<session dir>` of a session.
fn rel(id: &str, cwd: &str) -> PathBuf {
    Path::new(&project_dir_name(Some(cwd)).unwrap()).join(encode_id(id).unwrap())
}

/// Writes a zstd transcript of `header` then `events` (one frame each,
/// compressed by the `zstd` tool), as the reference lays one out.
fn write_crafted(root: &Path, id: &str, cwd: &str, header: &[u8], events: &[u8]) {
    let dir = root.join(rel(id, cwd));
    fs::create_dir_all(&dir).unwrap();
    let mut bytes = Vec::new();
    for part in [header, events] {
        let mut child = Command::new("zstd")
            .args(["-q", "-c", "--content-size"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("zstd runs");
        child.stdin.take().unwrap().write_all(part).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        bytes.extend(out.stdout);
    }
    fs::write(dir.join("session.jsonl.zstd"), bytes).unwrap();
}

fn crafted_header(id: &str, cwd: &str, extra: &[u8]) -> Vec<u8> {
    let mut h = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":{T0},\"cwd\":\"{cwd}\",\"delegationDepth\":0"
    )
    .into_bytes();
    h.extend_from_slice(extra);
    h.extend_from_slice(b"}\n");
    h
}

struct Case {
    id: &'static str,
    cwd: &'static str,
    /// Events stored before the mount.
    events: u64,
    /// Lines appended through the mount (each with its `\n`).
    appended: Vec<String>,
}

#[test]
fn sessions_the_reference_reads_are_read_continued_and_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir_all(&root).unwrap();

    // 1. A session written by the reference, its last event 300 deep.
    // serde_json's own reader stops at 128 levels: the 300-deep value is
    // put into the spec's text.
    let spec = json!([{
        "meta": {"version": 0, "id": "deep-last-event", "createdAt": T0, "cwd": "/w/deep"},
        "batches": [
            [{"type": "x-log", "seq": 0, "time": T0, "data": {}, "ignorable": true}],
            [{"type": "x-log", "seq": 1, "time": T0 + 1, "data": {"v": "DEEP-300"}, "ignorable": true}],
        ],
    }]);
    let spec_path = tmp.path().join("spec.json");
    let spec = spec.to_string().replace("\"DEEP-300\"", &nested_array(300));
    fs::write(&spec_path, spec).unwrap();
    oracle::script(
        "write_sessions.mjs",
        [root.as_os_str(), spec_path.as_os_str()],
    );

    // 2. Headers the reference reads, written byte by byte.
    let extra_array = format!(",\"extra\":{}", nested_array(100_000));
    let extra_object = format!(",\"extra\":{}", nested_object(10_000));
    for (id, cwd, extra) in [
        ("deep-array-header", "/w/a", extra_array.as_bytes()),
        ("deep-object-header", "/w/o", extra_object.as_bytes()),
        (
            "ff-in-agent-preset",
            "/w/ff",
            &b",\"agentPreset\":\"coder\xff\""[..],
        ),
    ] {
        write_crafted(
            &root,
            id,
            cwd,
            &crafted_header(id, cwd, extra),
            event(0, "{}").as_bytes(),
        );
    }

    let mut cases = vec![
        Case {
            id: "deep-last-event",
            cwd: "/w/deep",
            events: 2,
            appended: vec![
                // 1,000 levels in all (the line, `data`, 998 arrays): the
                // deepest a written line may reach (src/store/lines.rs).
                event(2, &format!("{{\"v\":{}}}", nested_array(998))),
                event(3, &format!("{{\"v\":[{{\"w\":{}}}]}}", nested_array(996))),
                event(4, "{}"),
            ],
        },
        Case {
            id: "deep-array-header",
            cwd: "/w/a",
            events: 1,
            appended: vec![event(1, "{}")],
        },
        Case {
            id: "deep-object-header",
            cwd: "/w/o",
            events: 1,
            appended: vec![event(1, &format!("{{\"v\":{}}}", nested_object(998)))],
        },
        Case {
            id: "ff-in-agent-preset",
            cwd: "/w/ff",
            events: 1,
            appended: vec![event(1, "{}")],
        },
    ];

    // The reference reads every one of them.
    let before = oracle::report(&root);
    for c in &cases {
        let s = oracle::oracle_session(&before, c.id);
        assert_eq!(s["readRaw"]["ok"], true, "{}: {s}", c.id);
        assert_eq!(s["load"]["ok"], true, "{}: {}", c.id, s["load"]);
        assert_eq!(s["load"]["eventCount"], c.events, "{}", c.id);
    }

    let mount = Mount::start(&root, &[]);
    for c in &mut cases {
        let file = mount.join(rel(c.id, c.cwd)).join("session.jsonl");
        let served = fs::read(&file)
            .unwrap_or_else(|e| panic!("{}: read through the mount: {e}\n{}", c.id, mount.log()));
        let stored = zstd_dc(&root.join(rel(c.id, c.cwd)).join("session.jsonl.zstd"));
        assert!(
            served == stored,
            "{}: the mount serves the stored bytes",
            c.id
        );
        let raw = oracle::oracle_session(&before, c.id)["readRaw"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            String::from_utf8_lossy(&served),
            raw,
            "{}: the mount's bytes are readRaw's text",
            c.id
        );
        if c.id != "ff-in-agent-preset" {
            assert!(
                served == raw.as_bytes(),
                "{}: byte-identical to readRaw",
                c.id
            );
        }
        let mut f = OpenOptions::new().append(true).open(&file).unwrap();
        for line in &c.appended {
            f.write_all(line.as_bytes()).unwrap_or_else(|e| {
                panic!("{}: append through the mount: {e}\n{}", c.id, mount.log())
            });
        }
        f.sync_all()
            .unwrap_or_else(|e| panic!("{}: fsync: {e}\n{}", c.id, mount.log()));
        drop(f);
        let after = fs::read(&file).unwrap();
        let mut want = served.clone();
        for line in &c.appended {
            want.extend_from_slice(line.as_bytes());
        }
        assert!(
            after == want,
            "{}: the mount shows the appended lines",
            c.id
        );
    }
    let log = mount.stop();
    assert!(
        !log.contains("corrupt"),
        "no session is called corrupt:\n{log}"
    );

    // `sessionfs list` shows every session.
    let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .arg("list")
        .arg(&root)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    for c in &cases {
        assert!(
            listed.iter().any(|s| s["id"] == c.id && s["cwd"] == c.cwd),
            "list shows {}: {listed:?}",
            c.id
        );
    }

    // `sessionfs check` finds nothing wrong with any of them.
    let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .arg("check")
        .arg(&root)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check: {report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        report.lines().filter(|l| l.starts_with("ok\t")).count(),
        cases.len(),
        "{report}"
    );

    // The reference reads and loads what was appended (`load.mjs`: the
    // oracle's report re-serializes events, which stops near 4,400 levels).
    let after = oracle::report(&root);
    let copy = tmp.path().join("copy");
    common::copy_tree(&root, &copy);
    let mut args = vec![copy.into_os_string()];
    args.extend(cases.iter().map(|c| c.id.into()));
    let loaded: Value = serde_json::from_slice(&oracle::script("load.mjs", args).stdout).unwrap();
    for c in &cases {
        let s = oracle::oracle_session(&after, c.id);
        let raw = s["readRaw"]["content"].as_str().unwrap();
        assert!(
            raw.ends_with(c.appended.concat().as_str()),
            "{}: readRaw holds the appended lines",
            c.id
        );
        let want = c.events + c.appended.len() as u64;
        let l = &loaded[c.id];
        assert_eq!(l["ok"], true, "{}: {l}", c.id);
        assert_eq!(l["eventCount"], want, "{}", c.id);
        assert_eq!(l["lastSeq"], want - 1, "{}", c.id);
        assert_eq!(l["contiguous"], true, "{}", c.id);
    }
}
