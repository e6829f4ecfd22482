//! Mounts a copy of every case of `../shared/corpus` (stores written by the
//! reference backend, some damaged afterwards) and checks what the mount
//! shows against the reference's answers in the case's `expected.json`:
//!
//! * every readable session's `session.jsonl` is byte-identical to the
//!   reference's `readRaw` text, and `stat` reports that length;
//! * where the reference refused the whole root (flat, mismatch), the valid
//!   neighbours read as `zstd -dc` of their transcript;
//! * each damaged entry in `DAMAGED` fails with `EIO` and the daemon's log
//!   names its backing path, while the rest of the root stays usable and the
//!   daemon never dies.

mod common;

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{assert_errno, corpus_dir, list_dir, run_ok, sha256_hex, zstd_dc, Mount};
use serde_json::Value;

/// Every case folder of the corpus; `corpus_cases_are_all_tested` fails if
/// the corpus gains a case this file does not know.
const CASES: &[&str] = &[
    "corrupt-header",
    "corrupt-tail",
    "duplicate",
    "flat",
    "identity-moved",
    "mismatch",
    "normal",
    "raw",
    "stray-files",
    "torn",
    "unpacked",
];

/// When a damaged entry fails.
#[derive(Clone, Copy, Debug, PartialEq)]
enum FailsAt {
    /// `stat` and `open` fail with EIO (header, structure, placement,
    /// duplicates: what lookup can see).
    Lookup,
    /// Lookup may succeed, but reading the whole file fails with EIO (a
    /// checksum failure inside a complete frame).
    Read,
}
use FailsAt::{Lookup, Read as AtRead};

/// A damaged entry: the path in the mount that must fail with EIO, when it
/// fails, and the backing path (relative to the root) the daemon's log must
/// name.
struct Damaged {
    case: &'static str,
    path: &'static str,
    fails: FailsAt,
    log_names: &'static str,
}

const fn damaged(
    case: &'static str,
    path: &'static str,
    fails: FailsAt,
    log_names: &'static str,
) -> Damaged {
    Damaged {
        case,
        path,
        fails,
        log_names,
    }
}

#[rustfmt::skip]
const DAMAGED: &[Damaged] = &[
    // case              path in the mount                                        fails   log names
    damaged("flat",           "--home-alice-work-app--/legacy-flat.jsonl.zstd",        Lookup, "--home-alice-work-app--/legacy-flat.jsonl.zstd"),
    damaged("mismatch",       "--home-alice-work-app--/raw-session/session.jsonl",     Lookup, "--home-alice-work-app--/raw-session/session.jsonl"),
    damaged("duplicate",      "--home-alice-work-app--/dup-id/session.jsonl",          Lookup, "--home-alice-work-app--/dup-id"),
    damaged("duplicate",      "--home-alice-work-other--/dup-id/session.jsonl",        Lookup, "--home-alice-work-other--/dup-id"),
    // misplaced: the reference's readRaw returns its text, the mount refuses it
    damaged("identity-moved", "--home-alice-work-other--/moved/session.jsonl",         Lookup, "--home-alice-work-other--/moved"),
    damaged("corrupt-header", "--home-alice-work-app--/headerless/session.jsonl",      Lookup, "--home-alice-work-app--/headerless"),
    damaged("stray-files",    "--home-alice-work-app--/zero-byte/session.jsonl",       Lookup, "--home-alice-work-app--/zero-byte"),
    // no complete header frame
    damaged("torn",           "--home-alice-work-app--/torn-in-header-frame/session.jsonl", Lookup, "--home-alice-work-app--/torn-in-header-frame"),
    // garbage after the last frame: damage after the header frame, the
    // verified prefix is served and a read reaching the damage fails
    damaged("corrupt-tail",   "--home-alice-work-app--/garbage-appended/session.jsonl", AtRead, "--home-alice-work-app--/garbage-appended"),
    // a flipped byte inside a complete middle frame: seen when a read touches it
    damaged("corrupt-tail",   "--home-alice-work-app--/bitflip-middle-frame/session.jsonl", AtRead, "--home-alice-work-app--/bitflip-middle-frame"),
];

/// Empty directories that the case describes but that the shared copy of the
/// corpus lost (version control keeps no empty directory); they are created
/// again in the copy so the case is what its `expected.json` says.
const EMPTY_DIRS_LOST_IN_CORPUS: &[(&str, &str)] = &[
    ("stray-files", "--empty-project--"),
    ("identity-moved", "--home-alice-work-app--"),
];

const LOG_WAIT: Duration = Duration::from_secs(3);

fn damaged_entries(case: &str) -> impl Iterator<Item = &'static Damaged> + '_ {
    DAMAGED.iter().filter(move |d| d.case == case)
}

/// True if the reference session directory or flat file `rel` (from
/// `expected.json` `dirs`) is one of the damaged entries of `case`.
fn is_damaged(case: &str, rel: &str) -> bool {
    let rel = rel.trim_end_matches('/');
    damaged_entries(case)
        .any(|d| d.path == rel || d.path.strip_prefix(rel).is_some_and(|r| r.starts_with('/')))
}

fn load_expected(case: &str) -> Value {
    let path = corpus_dir().join(case).join("expected.json");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Copies `case`'s root into a temporary directory (restoring the empty
/// directories the corpus lost).
fn copy_case(case: &str) -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = common::corpus_copy(case);
    for (c, dir) in EMPTY_DIRS_LOST_IN_CORPUS {
        if *c == case {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
    }
    (tmp, root)
}

fn read_through_mount(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("reading {} through the mount: {e}", path.display()))
}

fn stat_size(path: &Path) -> u64 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {} through the mount: {e}", path.display()))
        .len()
}

/// Checks `MNT/<dir>/session.jsonl` against the reference's `readRaw`.
fn check_matches_read_raw(mnt: &Mount, case: &str, id: &str, dir: &str, read_raw: &Value) {
    let path = mnt.join(dir).join("session.jsonl");
    let want_sha = read_raw["sha256"].as_str().expect("readRaw.sha256");
    let want_len = read_raw["bytes"].as_u64().expect("readRaw.bytes");
    let got = read_through_mount(&path);
    assert_eq!(
        (got.len() as u64, sha256_hex(&got).as_str()),
        (want_len, want_sha),
        "{case}: session {id:?}: {} differs from the reference's readRaw (length, sha256)",
        path.display()
    );
    assert_eq!(
        stat_size(&path),
        want_len,
        "{case}: session {id:?}: st_size of {} is not the readRaw length",
        path.display()
    );
}

/// For a valid session whose `readRaw` the reference refused because of a
/// neighbour: the mount must show what `zstd -dc` decodes from the backing
/// transcript (or the raw transcript itself).
fn check_matches_backing(mnt: &Mount, root: &Path, case: &str, id: &str, dir: &str) {
    let zst = root.join(dir).join("session.jsonl.zstd");
    let raw = root.join(dir).join("session.jsonl");
    let want = if zst.exists() {
        zstd_dc(&zst)
    } else if raw.exists() {
        fs::read(&raw).unwrap()
    } else {
        panic!("{case}: session {id:?} has no transcript under {dir}");
    };
    let path = mnt.join(dir).join("session.jsonl");
    let got = read_through_mount(&path);
    assert_eq!(
        (got.len(), sha256_hex(&got)),
        (want.len(), sha256_hex(&want)),
        "{case}: session {id:?}: {} differs from the decoded backing transcript",
        path.display()
    );
    assert_eq!(
        stat_size(&path),
        want.len() as u64,
        "{case}: {id:?}: st_size"
    );
}

fn check_damaged(mnt: &Mount, d: &Damaged) {
    let path = mnt.join(d.path);
    let what = format!("{}: {}", d.case, d.path);
    match d.fails {
        Lookup => {
            assert_errno(fs::metadata(&path), libc::EIO, &format!("{what}: stat"));
            assert_errno(File::open(&path), libc::EIO, &format!("{what}: open"));
        }
        AtRead => match File::open(&path) {
            Err(e) => assert_eq!(
                e.raw_os_error(),
                Some(libc::EIO),
                "{what}: open failed, but not with EIO: {e:?}"
            ),
            Ok(mut f) => {
                let mut buf = Vec::new();
                assert_errno(
                    f.read_to_end(&mut buf),
                    libc::EIO,
                    &format!("{what}: reading the whole file"),
                );
            }
        },
    }
    assert!(
        mnt.wait_log_contains(d.log_names, LOG_WAIT),
        "{what}: the daemon's log does not name the backing path {:?}; log:\n{}",
        d.log_names,
        mnt.log()
    );
    // The session directory itself stays listed, so people see something is there.
    if let Some(session_dir) = d.path.strip_suffix("/session.jsonl") {
        let (project, name) = session_dir.split_once('/').unwrap();
        let listing = list_dir(&mnt.join(project));
        assert!(
            listing.contains(&OsString::from(name)),
            "{what}: the damaged session directory is not listed in {project}: {listing:?}"
        );
    }
}

/// Root listing: every directory of the backing root (plus the `.by-*` views), and no
/// file of the root.
fn check_root_listing(mnt: &Mount, root: &Path, case: &str) {
    let want: BTreeSet<OsString> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name())
        .collect();
    let got: BTreeSet<OsString> = list_dir(mnt.path())
        .into_iter()
        .filter(|n| {
            ![".by-id", ".by-cwd", ".by-date", ".by-title"].contains(&n.to_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        got, want,
        "{case}: the mount's root does not list exactly the root's directories"
    );
}

fn check_case(case: &str) {
    let expected = load_expected(case);
    let report = &expected["report"];
    let (_tmp, root) = copy_case(case);
    let mut mnt = Mount::start(&root, &[]);

    check_root_listing(&mnt, &root, case);

    let sessions = report["sessions"].as_array().expect("report.sessions");
    assert!(!sessions.is_empty(), "{case}: no sessions in expected.json");
    for s in sessions {
        let id = s["id"].as_str().unwrap_or("?");
        let dirs: Vec<&str> = s["dirs"]
            .as_array()
            .expect("dirs")
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        let dir = dirs[0];
        let read_raw = &s["readRaw"];

        // Every session directory is listed, damaged ones included.
        for d in &dirs {
            if let Some((project, name)) = d.trim_end_matches('/').split_once('/') {
                if d.ends_with('/') {
                    let listing = list_dir(&mnt.join(project));
                    assert!(
                        listing.contains(&OsString::from(name)),
                        "{case}: session directory {d} is not listed: {listing:?}"
                    );
                }
            }
        }

        if dirs.iter().any(|d| is_damaged(case, d)) {
            continue; // checked from the DAMAGED table below
        }
        if read_raw["ok"] == Value::Bool(true) && read_raw["absent"] == Value::Bool(true) {
            // A session directory without a transcript: listed, no session.jsonl.
            assert_errno(
                fs::metadata(mnt.join(dir).join("session.jsonl")),
                libc::ENOENT,
                &format!("{case}: {dir}session.jsonl (no transcript)"),
            );
        } else if read_raw["ok"] == Value::Bool(true) {
            check_matches_read_raw(&mnt, case, id, dir, read_raw);
        } else {
            // The reference refused this valid session because of a neighbour.
            check_matches_backing(&mnt, &root, case, id, dir);
        }
    }

    for d in damaged_entries(case) {
        check_damaged(&mnt, d);
    }

    match case {
        "stray-files" => check_stray_files(&mnt, &root),
        "identity-moved" => {
            // The project the moved session belongs to is empty on disk.
            let empty = mnt.join("--home-alice-work-app--");
            assert_eq!(
                list_dir(&empty),
                Vec::<OsString>::new(),
                "{case}: {empty:?}"
            );
        }
        _ => {}
    }

    // The damaged entries still fail, and the good ones still read, after
    // everything above: one bad session never takes the mount down.
    for d in damaged_entries(case) {
        if d.fails == Lookup {
            assert_errno(
                fs::metadata(mnt.join(d.path)),
                libc::EIO,
                &format!("{case}: {} (again)", d.path),
            );
        }
    }
    mnt.assert_alive();
    let log = mnt.stop();
    assert!(
        !log.contains("panicked at"),
        "{case}: the daemon panicked; log:\n{log}"
    );
}

fn check_stray_files(mnt: &Mount, root: &Path) {
    let project = "--home-alice-work-app--";
    // A file at the root is not shown.
    let ls = String::from_utf8(run_ok(
        "ls",
        [OsStr::new("-A"), mnt.path().as_os_str()],
        None,
    ))
    .unwrap();
    assert!(
        !ls.lines().any(|l| l == "README.txt"),
        "stray-files: README.txt at the root is listed by ls:\n{ls}"
    );
    assert!(
        ls.lines().any(|l| l == project),
        "stray-files: ls shows:\n{ls}"
    );
    assert_errno(
        fs::metadata(mnt.join("README.txt")),
        libc::ENOENT,
        "stray-files: README.txt at the root",
    );

    // Other files in a session directory are passed through.
    let extras = format!("{project}/with-extras");
    let notes = read_through_mount(&mnt.join(&extras).join("notes.md"));
    assert_eq!(
        notes,
        fs::read(root.join(&extras).join("notes.md")).unwrap(),
        "stray-files: with-extras/notes.md"
    );
    let listing = list_dir(&mnt.join(&extras));
    let has = |n: &str| listing.contains(&OsString::from(n));
    assert!(has("session.jsonl"), "with-extras listing: {listing:?}");
    assert!(has("notes.md"), "with-extras listing: {listing:?}");
    assert!(
        !has("session.jsonl.zstd"),
        "the compressed transcript is shown: {listing:?}"
    );
    assert!(
        !has("session.jsonl.zstd.0123456789ab.tmp"),
        "the publication temporary is shown: {listing:?}"
    );

    // A session directory without a transcript is listed, with its files.
    let project_listing = list_dir(&mnt.join(project));
    assert!(
        project_listing.contains(&OsString::from("no-transcript")),
        "no-transcript is not listed: {project_listing:?}"
    );
    let nt = format!("{project}/no-transcript");
    assert_eq!(
        list_dir(&mnt.join(&nt)),
        vec![OsString::from("artifact.bin")],
        "stray-files: {nt}"
    );
    assert_eq!(
        read_through_mount(&mnt.join(&nt).join("artifact.bin")),
        fs::read(root.join(&nt).join("artifact.bin")).unwrap(),
        "stray-files: {nt}/artifact.bin"
    );

    // The empty project directory is listed, and empty.
    assert_eq!(
        list_dir(&mnt.join("--empty-project--")),
        Vec::<OsString>::new(),
        "stray-files: --empty-project--"
    );
}

#[test]
fn corpus_cases_are_all_tested() {
    let mut found: Vec<String> = fs::read_dir(corpus_dir())
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", corpus_dir().display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    found.sort();
    assert_eq!(
        found, CASES,
        "corpus cases differ from the ones this test knows"
    );
    for d in DAMAGED {
        assert!(
            CASES.contains(&d.case),
            "DAMAGED names unknown case {}",
            d.case
        );
    }
}

macro_rules! corpus_case {
    ($($name:ident => $case:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_case($case);
            }
        )*
    };
}

corpus_case! {
    corpus_normal => "normal",
    corpus_unpacked => "unpacked",
    corpus_raw => "raw",
    corpus_torn => "torn",
    corpus_corrupt_header => "corrupt-header",
    corpus_corrupt_tail => "corrupt-tail",
    corpus_flat => "flat",
    corpus_mismatch => "mismatch",
    corpus_duplicate => "duplicate",
    corpus_identity_moved => "identity-moved",
    corpus_stray_files => "stray-files",
}

/// A root holding transcripts of both encodings is reported at start-up
/// (MOUNT.md, Mount options), by a walk of the whole root on a thread of
/// its own (the store's own start walks a zstd root only to its first
/// zstd transcript); the mount serves it as zstd meanwhile.
#[test]
fn a_root_of_both_encodings_is_reported_as_the_mount_starts() {
    let (_tmp, root) = copy_case("mismatch");
    let mnt = Mount::start(&root, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !mnt.log().contains("holds both zstd") {
        assert!(
            std::time::Instant::now() < deadline,
            "no report within 20 s: {}",
            mnt.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = mnt.log();
    assert!(
        log.contains("raw-session") && log.contains("serving it as zstd"),
        "{log}"
    );
    let status = mnt.status();
    assert_eq!(status["options"]["compression"], "zstd", "{status}");
    mnt.stop();
}
