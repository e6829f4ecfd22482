//! Standard tools on transcripts in a mounted copy of corpus `normal`, each
//! compared with an expectation computed independently from the backing
//! file (`zstd -dc`, and the reference's sha256 and line count).

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::{copy_tree, corpus_dir, run, run_ok, sh_ok, sha256_hex, zstd_dc, Mount};
use serde_json::Value;

/// Session directories (relative to the root) the tools run on: the largest
/// one, non-ASCII and escaped names, a 244-byte id, a fork and `_no-cwd`.
const SESSIONS: &[&str] = &[
    "--home-alice-work-app--/3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f",
    "--home-alice-work-app--/fork-of-3f6c1d2e",
    "--C-Users-dev-repo--/~00FCn~00EFc~00F6d~00E9-~D83D~DE80",
    "--home-bob-~9879~76EE-caf~00E9--/~002E",
    "_no-cwd/with~0020space~0020~0026~0020~002520",
    "--home-alice-work-app--/max-encoded-id-abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklm",
];

struct Case {
    /// `session.jsonl` in the mount.
    file: PathBuf,
    /// The backing `session.jsonl.zstd`.
    backing: PathBuf,
    /// `zstd -dc` of the backing file.
    text: Vec<u8>,
    /// The reference's `readRaw.lines`.
    lines: u64,
}

fn read_raw_of(expected: &Value, dir: &str) -> Value {
    let want = format!("{dir}/");
    expected["report"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["dirs"][0].as_str() == Some(want.as_str()))
        .unwrap_or_else(|| panic!("no session with dir {dir} in normal/expected.json"))["readRaw"]
        .clone()
}

fn setup() -> (tempfile::TempDir, Mount, Vec<Case>) {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(corpus_dir().join("normal/expected.json")).unwrap(),
    )
    .unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("sessionfs-tools-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal/root"), &root);
    let mnt = Mount::start(&root, &[]);
    let cases = SESSIONS
        .iter()
        .map(|dir| {
            let read_raw = read_raw_of(&expected, dir);
            let backing = root.join(dir).join("session.jsonl.zstd");
            let text = zstd_dc(&backing);
            // The independent decoding agrees with the reference.
            assert_eq!(
                sha256_hex(&text),
                read_raw["sha256"].as_str().unwrap(),
                "zstd -dc {} disagrees with expected.json",
                backing.display()
            );
            Case {
                file: mnt.join(dir).join("session.jsonl"),
                backing,
                text,
                lines: read_raw["lines"].as_u64().unwrap(),
            }
        })
        .collect();
    (tmp, mnt, cases)
}

fn p(path: &Path) -> &OsStr {
    path.as_os_str()
}

fn trimmed_number(out: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(out);
    s.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a number: {s:?}"))
}

#[test]
fn cat_sha256_matches() {
    let (_tmp, mnt, cases) = setup();
    for c in &cases {
        let out = run_ok("cat", [p(&c.file)], None);
        assert_eq!(out.len(), c.text.len(), "cat {}: length", c.file.display());
        assert_eq!(
            sha256_hex(&out),
            sha256_hex(&c.text),
            "cat {}",
            c.file.display()
        );
    }
    mnt.stop();
}

#[test]
fn grep_count_matches() {
    let (_tmp, mnt, cases) = setup();
    for c in &cases {
        let got = run_ok(
            "grep",
            [OsStr::new("-c"), OsStr::new("\"type\""), p(&c.file)],
            None,
        );
        let want = sh_ok("zstd -dcq -- \"$1\" | grep -c '\"type\"'", [p(&c.backing)]);
        assert_eq!(got, want, "grep -c on {}", c.file.display());
        assert!(trimmed_number(&got) > 0);
        // A pattern that occurs only in some lines.
        let got = run(
            "grep",
            [OsStr::new("-c"), OsStr::new("seq0"), p(&c.file)],
            None,
        )
        .stdout;
        let want = sh_ok(
            "zstd -dcq -- \"$1\" | grep -c seq0 || true",
            [p(&c.backing)],
        );
        assert_eq!(got, want, "grep -c seq0 on {}", c.file.display());
    }
    mnt.stop();
}

#[test]
fn tail_and_head_match() {
    let (_tmp, mnt, cases) = setup();
    for c in &cases {
        let f = p(&c.file);
        let got = run_ok("tail", [OsStr::new("-n"), OsStr::new("3"), f], None);
        let want = sh_ok("zstd -dcq -- \"$1\" | tail -n 3", [p(&c.backing)]);
        assert_eq!(got, want, "tail -n 3 {}", c.file.display());
        assert_eq!(got.iter().filter(|b| **b == b'\n').count(), 3);

        let got = run_ok("tail", [OsStr::new("-c"), OsStr::new("100"), f], None);
        assert_eq!(
            got,
            &c.text[c.text.len() - 100..],
            "tail -c 100 {}",
            c.file.display()
        );

        let got = run_ok("head", [OsStr::new("-c"), OsStr::new("500"), f], None);
        assert_eq!(got, &c.text[..500], "head -c 500 {}", c.file.display());

        let got = run_ok("head", [OsStr::new("-n"), OsStr::new("1"), f], None);
        let first_line_end = c.text.iter().position(|b| *b == b'\n').unwrap() + 1;
        assert_eq!(
            got,
            &c.text[..first_line_end],
            "head -n 1 {}",
            c.file.display()
        );
    }
    mnt.stop();
}

#[test]
fn dd_random_reads_match() {
    let (_tmp, mnt, cases) = setup();
    for c in &cases {
        let mut if_arg = std::ffi::OsString::from("if=");
        if_arg.push(&c.file);
        let len = c.text.len();
        // Odd offsets and lengths, one crossing the middle, one at the end.
        for (skip, count) in [(len / 2 - 7, 333), (1, 4097), (len - 50, 200), (4095, 2)] {
            let got = run_ok(
                "dd",
                [
                    if_arg.as_os_str(),
                    OsStr::new("bs=1"),
                    OsStr::new(&format!("skip={skip}")),
                    OsStr::new(&format!("count={count}")),
                    OsStr::new("status=none"),
                ],
                None,
            );
            let end = (skip + count).min(len);
            assert_eq!(
                got,
                &c.text[skip..end],
                "dd bs=1 skip={skip} count={count} {}",
                c.file.display()
            );
        }
        let got = run_ok(
            "dd",
            [
                if_arg.as_os_str(),
                OsStr::new("bs=4096"),
                OsStr::new("skip=1"),
                OsStr::new("status=none"),
            ],
            None,
        );
        assert_eq!(
            got,
            &c.text[4096..],
            "dd bs=4096 skip=1 {}",
            c.file.display()
        );
    }
    mnt.stop();
}

#[test]
fn wc_lines_match_reference() {
    let (_tmp, mnt, cases) = setup();
    for c in &cases {
        let out = run_ok("wc", [OsStr::new("-l"), p(&c.file)], None);
        assert_eq!(trimmed_number(&out), c.lines, "wc -l {}", c.file.display());
        let out = run_ok("wc", [OsStr::new("-c"), p(&c.file)], None);
        assert_eq!(
            trimmed_number(&out),
            c.text.len() as u64,
            "wc -c {}",
            c.file.display()
        );
    }
    mnt.stop();
}

#[test]
fn python_json_loads_every_line() {
    let (_tmp, mnt, cases) = setup();
    const SCRIPT: &str = "import json, sys\n\
        n = 0\n\
        with open(sys.argv[1], 'rb') as f:\n\
        \x20   for line in f:\n\
        \x20       assert line.endswith(b'\\n'), 'unterminated line'\n\
        \x20       obj = json.loads(line)\n\
        \x20       assert isinstance(obj, dict) and 'type' in obj\n\
        \x20       n += 1\n\
        print(n)\n";
    for c in &cases {
        let out = run_ok(
            "python3",
            [OsStr::new("-c"), OsStr::new(SCRIPT), p(&c.file)],
            None,
        );
        assert_eq!(
            trimmed_number(&out),
            c.lines,
            "python3 on {}",
            c.file.display()
        );
    }
    mnt.stop();
}

/// `sessionfs doctor MOUNTPOINT` (an easy slip for `doctor ROOT`) is
/// refused, naming the status file that names the root (helper 30: it
/// reported the views' links as problems and `--repair` failed on
/// EPERM), and changes nothing.
#[test]
fn doctor_of_a_mount_point_is_refused() {
    let (_tmp, mnt, cases) = setup();
    let before = std::fs::read(&cases[0].backing).unwrap();
    for extra in [&[][..], &["--repair"][..]] {
        let mut args: Vec<&OsStr> = vec![OsStr::new("doctor")];
        args.extend(extra.iter().map(OsStr::new));
        args.push(mnt.path().as_os_str());
        let out = run(env!("CARGO_BIN_EXE_sessionfs"), args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(
            err.contains("a sessionfs mount") && err.contains(".sessionfs-status"),
            "{err}"
        );
    }
    assert!(std::fs::read(&cases[0].backing).unwrap() == before);
    mnt.stop();
}

/// `--index-cache` given as a relative path (helper 31): the status file
/// shows the folder resolved once at start-up, absolute, not the text
/// given on the command line.
#[test]
fn status_shows_the_index_cache_absolute() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal").join("root"), &root);
    let index = std::fs::canonicalize(tmp.path()).unwrap().join("index");
    std::fs::create_dir(&index).unwrap();
    // The same folder relative to the working directory the mount inherits.
    let cwd = std::env::current_dir().unwrap();
    let mut relative = PathBuf::new();
    for _ in cwd.components().skip(1) {
        relative.push("..");
    }
    relative.push(index.strip_prefix("/").unwrap());
    assert!(relative.is_relative());
    let mnt = Mount::start(&root, &["--index-cache", relative.to_str().unwrap()]);
    let shown = mnt.status()["options"]["index_cache"].clone();
    mnt.stop();
    let shown = PathBuf::from(shown.as_str().unwrap_or_else(|| panic!("{shown}")));
    assert_eq!(shown, index, "the folder, absolute and resolved");
}
