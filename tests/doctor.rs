//! `sessionfs doctor` (issue 13): on a copy of every corpus case it reports
//! exactly that case's problems; `--repair` leaves roots the reference
//! oracle lists and loads, keeps committed prefixes byte for byte, turns
//! second histories (duplicate `seq` by two writers, Syncthing and Dropbox
//! conflict copies) into forks that load as prefix + end-seed + divergent
//! events, keeps the original bytes in the quarantine folder, and
//! `--restore` puts them back; `--json` follows its schema; the progress
//! bar shows on a terminal only.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{corpus_dir, oracle, walk_files, zstd_dc};
use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sessionfs")
}

/// Runs `sessionfs ARGS` with the quarantine base (and the state folder the
/// damage branch's torn-tail repair uses) under `state`.
fn sessionfs(state: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new("timeout")
        .args(["-k", "5", "120"])
        .arg(bin())
        .args(args)
        .env("XDG_STATE_HOME", state)
        .output()
        .unwrap()
}

/// `doctor --json` over `target` (plus `extra` flags): exit code and report.
fn doctor_json(state: &Path, target: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["doctor".as_ref(), "--json".as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.push(target.as_os_str());
    let out = sessionfs(state, &args);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

/// (kind, path relative to `root`) of every finding, sorted, duplicates kept.
/// The first finding of `report` whose path ends with `suffix`.
fn finding_at<'a>(report: &'a Value, suffix: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().is_some_and(|p| p.ends_with(suffix)))
        .unwrap_or_else(|| panic!("no finding for {suffix}: {report}"))
}

fn findings(report: &Value, root: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let p = PathBuf::from(f["path"].as_str().unwrap());
            let rel = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            (f["kind"].as_str().unwrap().to_string(), rel)
        })
        .collect();
    v.sort();
    v
}

fn case_copy(case: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // `cp -a` keeps the corpus's mtimes: its publication temporary is old.
    common::sh_ok(
        "cp -a \"$1\" \"$2\" && chmod -R u+w \"$2\"",
        [
            corpus_dir().join(case).join("root").as_os_str(),
            root.as_os_str(),
        ],
    );
    (tmp, root)
}

const APP: &str = "--home-alice-work-app--";
const C_SESSION: &str = "--C-Users-dev-repo--/~00FCn~00EFc~00F6d~00E9-~D83D~DE80";

/// The expected findings of each corpus case (kind, relative path).
fn expected(case: &str) -> Vec<(&'static str, String)> {
    let t = |s: &str| format!("{APP}/{s}/session.jsonl.zstd");
    let mut v = match case {
        "normal" | "unpacked" => vec![("cwd_rejected", format!("{C_SESSION}/session.jsonl.zstd"))],
        "raw" => vec![("cwd_rejected", format!("{C_SESSION}/session.jsonl"))],
        "torn" => vec![
            ("torn_tail", t("torn-3-bytes-of-frame")),
            ("torn_tail", t("torn-half-last-frame")),
            ("torn_tail", t("torn-in-checksum")),
            ("torn_header", t("torn-in-header-frame")),
            ("torn_tail", t("torn-multiblock-mid")),
        ],
        "corrupt-header" => vec![("header_less", t("headerless"))],
        "corrupt-tail" => vec![
            ("corrupt_frame", t("bitflip-middle-frame")),
            ("trailing_garbage", t("garbage-appended")),
        ],
        "flat" => vec![("flat_artifact", format!("{APP}/legacy-flat.jsonl.zstd"))],
        "mismatch" => vec![(
            "encoding_mismatch",
            format!("{APP}/raw-session/session.jsonl"),
        )],
        // The older copy is set aside; in a fresh copy both have the
        // corpus's mtimes, and the tie goes to the first path.
        "duplicate" => vec![("duplicate_id", String::new())],
        "identity-moved" => vec![(
            "misplaced",
            "--home-alice-work-other--/moved/session.jsonl.zstd".to_string(),
        )],
        "stray-files" => vec![
            (
                "stale_temporary",
                format!("{APP}/with-extras/session.jsonl.zstd.0123456789ab.tmp"),
            ),
            ("empty", t("zero-byte")),
        ],
        other => panic!("no expectation for case {other}"),
    };
    v.sort();
    v
}

fn check_case(case: &str) {
    let (tmp, root) = case_copy(case);
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    let want = expected(case);
    assert_eq!(got.len(), want.len(), "{case}: {got:?}");
    for ((gk, gp), (wk, wp)) in got.iter().zip(&want) {
        assert_eq!(gk, wk, "{case}: {got:?}");
        if case == "duplicate" {
            assert!(
                gp.ends_with("/dup-id/session.jsonl.zstd"),
                "{case}: {got:?}"
            );
        } else {
            assert_eq!(gp, wp, "{case}: {got:?}");
        }
    }
    let content_only = want.iter().all(|(k, _)| *k == "cwd_rejected");
    assert_eq!(code, if content_only { 0 } else { 1 }, "{case}: exit code");
    // Content refusals are counted apart, never as problems left.
    let refusals = want.iter().filter(|(k, _)| *k == "cwd_rejected").count();
    if content_only {
        assert_eq!(report["summary"]["refused"], refusals as u64, "{case}");
        assert_eq!(report["summary"]["problems_left"], 0, "{case}");
    }
    // Every finding has what to do, and damage in a file names its offset.
    for f in report["findings"].as_array().unwrap() {
        assert!(!f["fix"].as_str().unwrap().is_empty());
        assert!(!f["reference"].as_str().unwrap().is_empty());
        if ["torn_tail", "corrupt_frame", "damaged"].contains(&f["kind"].as_str().unwrap()) {
            assert!(f["offset"].is_u64(), "{f}");
        }
    }
    // The summary counts the transcripts on disk.
    let files = common::sh_ok(
        "find \"$1\" -name session.jsonl.zstd -o -name session.jsonl | wc -l",
        [root.as_os_str()],
    );
    let n: u64 = String::from_utf8_lossy(&files).trim().parse().unwrap();
    assert_eq!(report["summary"]["sessions_scanned"], n, "{case}");
}

macro_rules! case_tests {
    ($($name:ident => $case:expr),* $(,)?) => {
        $(#[test] fn $name() { check_case($case); })*
    };
}

case_tests! {
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

/// The corrupt frame is named and counted: 4 frames on disk, 3 verified.
#[test]
fn the_failed_frame_is_named_and_counted() {
    let (tmp, root) = case_copy("corrupt-tail");
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let s = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"].as_str().unwrap().contains("bitflip-middle-frame"))
        .unwrap();
    assert_eq!(
        s["frames"].as_u64().unwrap(),
        s["frames_ok"].as_u64().unwrap() + 1,
        "{s}"
    );
    let f = &report["findings"][0];
    assert_eq!(f["offset"], 1098);
    assert!(f["detail"].as_str().unwrap().starts_with("frame "), "{f}");
}

/// Session-A's one finding in `report` is `window_too_large`.
fn assert_window_finding_only(report: &Value, root: &Path) {
    let kinds: Vec<(String, String)> = findings(report, root)
        .into_iter()
        .filter(|(_, p)| p.contains("Session-A/"))
        .collect();
    assert_eq!(
        kinds,
        [(
            "window_too_large".to_string(),
            format!("{APP}/Session-A/session.jsonl.zstd")
        )],
        "{report}"
    );
}

/// A frame whose window is larger than sessionfs decodes (16 MiB) but the
/// reference reads (`zstd --long=27`): reported, never set aside, and the
/// reference still loads the session after `--repair` (found by a fresh
/// tester: the doctor called it unreadable and moved it to quarantine).
#[test]
fn a_frame_with_a_large_window_is_reported_not_set_aside() {
    use std::io::Write;
    let (tmp, root) = case_copy("normal");
    let path = root.join(APP).join("Session-A/session.jsonl.zstd");
    let before = fs::read(&path).unwrap();
    let plain = zstd::decode_all(&before[..]).unwrap();
    let last = String::from_utf8(plain).unwrap();
    let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    let next = last["seq"].as_u64().unwrap() + 1;
    let line = format!(
        "{{\"type\":\"x-note\",\"seq\":{next},\"time\":1767614403999,\"data\":{{}},\"ignorable\":true}}\n"
    );
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.window_log(27).unwrap();
    enc.include_checksum(true).unwrap();
    enc.write_all(line.as_bytes()).unwrap();
    let frame = enc.finish().unwrap();
    let mut bytes = before.clone();
    bytes.extend_from_slice(&frame);
    fs::write(&path, &bytes).unwrap();
    let (_, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_window_finding_only(&report, &root);
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the transcript stays as it was"
    );
    // `check` says what the doctor says (a second tester: it advised
    // `doctor --repair` setting the transcript aside).
    let out = Command::new(bin())
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("not damage") && text.contains("window_too_large"),
        "{text}"
    );
    assert!(
        !text.contains("sets the transcript aside") && !text.contains("restore the file"),
        "{text}"
    );
    let oracle = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
    let a = oracle["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "Session-A")
        .unwrap();
    assert_eq!(a["load"]["ok"], true, "{a}");
}

/// The same window in the header frame: `check`, `doctor` and the store's
/// error (the words the mount's log shows) call it what it is, not damage
/// to restore from a backup (found by a fresh tester: the mount's log did).
#[test]
fn a_header_frame_with_a_large_window_is_named_for_its_window() {
    use std::io::Write;
    let (tmp, root) = case_copy("normal");
    let path = root.join(APP).join("Session-A/session.jsonl.zstd");
    let plain = zstd::decode_all(&fs::read(&path).unwrap()[..]).unwrap();
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.window_log(27).unwrap();
    enc.write_all(&plain).unwrap();
    fs::write(&path, enc.finish().unwrap()).unwrap();
    let store = sessionfs::store::Store::open(&root, Default::default()).unwrap();
    let e = match store.transcript(std::ffi::OsStr::new(APP), std::ffi::OsStr::new("Session-A")) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a 128 MiB window was decoded"),
    };
    assert!(
        e.contains("not damage") && e.contains("window_too_large"),
        "{e}"
    );
    assert!(!e.contains("restore it from a backup"), "{e}");
    let out = Command::new(bin())
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("not damage"), "{text}");
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    assert_window_finding_only(&report, &root);
}

/// The run's quarantine folder named in `report` holds a file equal to
/// `original` (`what` names the case in the message).
fn assert_original_in_quarantine(report: &Value, original: &[u8], what: &str) {
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    assert!(
        walk_files(&run)
            .iter()
            .any(|p| fs::read(p).is_ok_and(|b| b == original)),
        "{what}: the original is in {}",
        run.display()
    );
}

/// The reference's load of the session `splitcase` under `root` fails on
/// a torn record ("complete frame contains a torn JSONL record").
fn assert_splitcase_torn(root: &Path, what: &str) {
    let before = oracle::report(root);
    assert!(
        oracle::oracle_session(&before, "splitcase")["load"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("torn JSONL record")),
        "{what}: {before}"
    );
}

/// The oracle's report `after` loads the session `splitcase` with
/// `events` events (`what` names the case in the message).
fn assert_splitcase_events(after: &Value, events: u64, what: &str) {
    assert_eq!(
        oracle::oracle_session(after, "splitcase")["load"]["eventCount"].as_u64(),
        Some(events),
        "{what}: {after}"
    );
}

/// Every session the oracle finds with a transcript loads, except those
/// refused only for content (`allowed_refusals`, by id).
fn assert_oracle_loads(root: &Path, allowed_refusals: &[&str]) -> Value {
    let report = oracle::report(root);
    assert_eq!(report["list"]["ok"], true, "list(): {}", report["list"]);
    for s in report["sessions"].as_array().unwrap() {
        if s["readRaw"]["ok"] != true || s["readRaw"]["absent"] == true {
            // A directory left without a transcript: not a session.
            assert!(s["listed"] != true, "{s}");
            continue;
        }
        let id = s["id"].as_str().unwrap();
        if allowed_refusals.contains(&id) {
            continue;
        }
        assert_eq!(s["load"]["ok"], true, "load({id}): {}", s["load"]);
    }
    report
}

/// The original bytes of every file of `original_root`, by relative path.
fn tree_bytes(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// The manifest copies of a quarantine run hold the original bytes.
fn assert_quarantine_holds(run: &Path, root: &Path, before: &BTreeMap<PathBuf, Vec<u8>>) {
    let manifest = fs::read_to_string(run.join("doctor-manifest.jsonl")).unwrap();
    let canon = fs::canonicalize(root).unwrap();
    assert!(!manifest.is_empty());
    for line in manifest.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let original = PathBuf::from(e["original"].as_str().unwrap());
        let rel = original.strip_prefix(&canon).unwrap();
        let copy = fs::read(e["copy"].as_str().unwrap()).unwrap();
        assert_eq!(Some(&copy), before.get(rel), "{}", rel.display());
    }
}

#[test]
fn repair_damaged_cases_then_restore() {
    for case in [
        "torn",
        "corrupt-header",
        "corrupt-tail",
        "flat",
        "mismatch",
        "duplicate",
        "identity-moved",
        "stray-files",
    ] {
        let (tmp, root) = case_copy(case);
        let before = tree_bytes(&root);
        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 0, "{case}: {report}");
        assert_eq!(report["summary"]["problems_left"], 0, "{case}");
        for f in report["findings"].as_array().unwrap() {
            assert!(f["done"].is_string(), "{case}: {f}");
        }
        // A second scan finds nothing left.
        let (code, again) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(
            (code, again["findings"].as_array().unwrap().len()),
            (0, 0),
            "{case}: {again}"
        );
        let oracle_report = assert_oracle_loads(&root, &[]);
        if case == "torn" {
            // The committed prefix is kept byte for byte: the repaired file is
            // the original's complete frames, decoded the same.
            for f in report["findings"].as_array().unwrap() {
                if f["kind"] != "torn_tail" {
                    continue;
                }
                let p = PathBuf::from(f["path"].as_str().unwrap());
                let rel = p.strip_prefix(&root).unwrap();
                let at = f["offset"].as_u64().unwrap() as usize;
                let now = fs::read(&p).unwrap();
                assert!(
                    now[..at] == before[rel][..at],
                    "{}: the committed frames changed",
                    rel.display()
                );
                let id = rel.parent().unwrap().file_name().unwrap().to_str().unwrap();
                let s = oracle::oracle_session(&oracle_report, id);
                assert_eq!(
                    s["readRaw"]["content"].as_str().unwrap().as_bytes(),
                    zstd_dc(&p)
                );
                // The torn frame's complete records are kept: the events
                // stored are exactly those the reference recovers from the
                // original (corpus: `stored`, torn frames included).
                let expected: Value = serde_json::from_str(
                    &fs::read_to_string(corpus_dir().join("torn/expected.json")).unwrap(),
                )
                .unwrap();
                let want = expected["report"]["sessions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["id"] == id)
                    .unwrap();
                assert_eq!(
                    s["stored"]["eventsSha256"], want["stored"]["eventsSha256"],
                    "{id}"
                );
            }
        }
        let run = PathBuf::from(report["quarantine"].as_str().unwrap());
        assert!(run.starts_with(tmp.path()), "quarantine outside the root");
        assert_quarantine_holds(&run, &root, &before);
        // --restore puts every file back as it was.
        let out = sessionfs(
            tmp.path(),
            &["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()],
        );
        assert!(
            out.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let after = tree_bytes(&root);
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "{case}: the files after --restore"
        );
        for (k, v) in &before {
            assert!(
                after[k] == *v,
                "{case}: {} differs after --restore",
                k.display()
            );
        }
    }
}

/// `--restore` of a transcript set aside whole that is a sparse file of
/// 2 GiB (frames, then a hole) puts it back with bounded memory: it
/// compared the files by reading both whole into memory (a tester's
/// 20 GiB one ran 30 s of system time and did not finish).
#[test]
fn restore_of_a_large_sparse_transcript_streams() {
    let (tmp, root) = common::corpus_copy("normal");
    let transcript = root.join("--home-alice-work-app--/Session-A/session.jsonl.zstd");
    let head = fs::read(&transcript).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&transcript)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let quarantine = tmp.path().join("q");
    let (code, report) = doctor_json(
        tmp.path(),
        &transcript,
        &["--repair", "--quarantine", quarantine.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{report}");
    assert!(!transcript.exists(), "set aside: {report}");
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    // Reaped by wait4 below, which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(bin())
        .args(["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()])
        .env("XDG_STATE_HOME", tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is valid; `pid` is our child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("--restore did not finish in 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status}"
    );
    let peak_mib = usage.ru_maxrss / 1024;
    assert!(peak_mib < 256, "--restore peaked at {peak_mib} MiB");
    let back = fs::metadata(&transcript).unwrap();
    assert_eq!(back.len(), 2 << 30);
    let mut start = vec![0u8; head.len()];
    std::os::unix::fs::FileExt::read_exact_at(&fs::File::open(&transcript).unwrap(), &mut start, 0)
        .unwrap();
    assert_eq!(start, head, "the frames are back");
}

/// `--restore` never loses bytes written after the repair: a repaired
/// transcript that grew since is copied into the run folder before the
/// original bytes replace it, and a second `--restore` changes nothing.
#[test]
fn restore_keeps_lines_appended_after_the_repair() {
    let (tmp, root) = case_copy("torn");
    let before = tree_bytes(&root);
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let torn = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "torn_tail")
        .expect("a torn tail in the torn case");
    let path = PathBuf::from(torn["path"].as_str().unwrap());
    let rel = path.strip_prefix(&root).unwrap().to_path_buf();
    // A writer appends after the repair.
    let mut grown = fs::read(&path).unwrap();
    grown.extend(frame(
        "{\"type\":\"x-note\",\"note\":\"written after the repair\"}\n",
    ));
    fs::write(&path, &grown).unwrap();

    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    let restore = || {
        sessionfs(
            tmp.path(),
            &["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()],
        )
    };
    let out = restore();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("kept in"),
        "the report names the copy: {text}"
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        before[&rel],
        "the original is back"
    );
    let kept: Vec<Vec<u8>> = fs::read_dir(run.join("replaced-by-restore"))
        .unwrap()
        .map(|e| fs::read(e.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(kept.contains(&grown), "the grown file's bytes are kept");

    // Again: nothing to replace, nothing lost.
    let out = restore();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(fs::read(&path).unwrap(), before[&rel]);
    let n = fs::read_dir(run.join("replaced-by-restore"))
        .unwrap()
        .count();
    assert_eq!(n, kept.len(), "a second restore set nothing more aside");
}

// ---- Two histories ----

/// The decoded lines of a transcript.
fn lines_of(path: &Path) -> Vec<String> {
    String::from_utf8(zstd_dc(path))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn frame(text: &str) -> Vec<u8> {
    zstd::encode_all(text.as_bytes(), 3).unwrap()
}

/// `line` with its `seq` set to `seq` and its text made different.
fn other_writer(line: &str, seq: u64) -> String {
    let mut v: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
    v.insert("seq".into(), seq.into());
    v.insert("time".into(), (v["time"].as_u64().unwrap() + 7).into());
    serde_json::to_string(&v).unwrap()
}

/// Where a second writer's history leaves `original` (the line after its
/// middle), and `n` lines of it: the original's next lines, changed, with
/// the `seq`s the original gives them.
fn diverged(original: &[String], n: usize) -> (usize, Vec<String>) {
    let k = (original.len() - 1) / 2;
    let divergent = (0..n)
        .map(|i| other_writer(&original[k + 1 + i], (k + i) as u64))
        .collect();
    (k, divergent)
}

fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Checks a fork against what it must read as: the parent's events before
/// `boundary`, a `session/end-seed` at `seq` = boundary, then `divergent`
/// with `seq` renumbered from boundary + 1.
fn assert_fork(
    fork: &Path,
    parent_id: &str,
    parent: &[String],
    boundary: u64,
    divergent: &[String],
) {
    let got = lines_of(fork);
    let h: Value = serde_json::from_str(&got[0]).unwrap();
    assert_eq!(h["parentSession"], parent_id);
    assert_eq!(h["seedLength"], boundary);
    let seed: Vec<&String> = parent[1..]
        .iter()
        .filter(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
                < boundary
        })
        .collect();
    for (i, l) in seed.iter().enumerate() {
        assert_eq!(&got[1 + i], *l, "seed line {i}");
    }
    let end: Value = serde_json::from_str(&got[1 + seed.len()]).unwrap();
    assert_eq!(
        (end["type"].as_str(), end["seq"].as_u64()),
        (Some("session/end-seed"), Some(boundary))
    );
    let rest = &got[2 + seed.len()..];
    assert_eq!(rest.len(), divergent.len());
    for (i, (g, d)) in rest.iter().zip(divergent).enumerate() {
        let mut g: Value = serde_json::from_str(g).unwrap();
        let mut d: Value = serde_json::from_str(d).unwrap();
        assert_eq!(g["seq"], boundary + 1 + i as u64);
        g["seq"] = Value::Null;
        d["seq"] = Value::Null;
        assert_eq!(g, d, "divergent event {i}");
    }
}

fn fork_dirs(project: &Path, id: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(project)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{id}-fork-"))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn duplicate_seq_by_two_writers_becomes_a_fork() {
    let (tmp, root) = case_copy("unpacked");
    let id = "clock-skew";
    let path = root.join(APP).join(id).join("session.jsonl.zstd");
    let original = lines_of(&path);
    let n = original.len() - 1;
    let k = n / 2;
    // Writer A committed events 0..k; writer B, from an older tail, wrote
    // k-3..k+3 again.
    let a = joined(&original[..=k]);
    let b: Vec<String> = (0..6)
        .map(|i| other_writer(&original[k - 2 + i], (k - 3 + i) as u64))
        .collect();
    let mut bytes = frame(
        &original[0..1]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    bytes.extend(frame(&a[original[0].len() + 1..]));
    let committed = bytes.len();
    bytes.extend(frame(&joined(&b)));
    fs::write(&path, &bytes).unwrap();
    let before = tree_bytes(&root);
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    assert!(
        got.contains(&(
            "seq_duplicate".into(),
            format!("{APP}/{id}/session.jsonl.zstd")
        )),
        "{got:?}"
    );
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["summary"]["repaired"], 1, "{report}");
    assert_eq!(report["summary"]["problems_left"], 0, "{report}");
    // The transcript keeps writer A's committed frames byte for byte.
    assert_eq!(fs::read(&path).unwrap(), bytes[..committed]);
    let forks = fork_dirs(&root.join(APP), id);
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_fork(
        &forks[0].join("session.jsonl.zstd"),
        id,
        &original[..=k],
        (k - 3) as u64,
        &b,
    );
    let fork_id = forks[0].file_name().unwrap().to_str().unwrap().to_string();
    let o = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
    assert_eq!(oracle::oracle_session(&o, &fork_id)["load"]["ok"], true);
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    let manifest = fs::read_to_string(run.join("doctor-manifest.jsonl")).unwrap();
    let e: Value = serde_json::from_str(manifest.lines().next().unwrap()).unwrap();
    assert_eq!(fs::read(e["copy"].as_str().unwrap()).unwrap(), bytes);
    // --restore puts the original back and removes the fork.
    let out = sessionfs(
        tmp.path(),
        &["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()],
    );
    assert!(out.status.success());
    assert!(tree_bytes(&root) == before, "the root after --restore");
}

/// Session `id`'s conflict copy `name` is gone, and one fork holds
/// `original` up to line `k` and the copy's `divergent` lines; its id.
fn assert_copy_forked(
    root: &Path,
    id: &str,
    name: &str,
    original: &[String],
    k: usize,
    divergent: &[String],
) -> String {
    assert!(!root.join(APP).join(id).join(name).exists());
    let forks = fork_dirs(&root.join(APP), id);
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_fork(
        &forks[0].join("session.jsonl.zstd"),
        id,
        original,
        k as u64,
        divergent,
    );
    forks[0].file_name().unwrap().to_str().unwrap().to_string()
}

#[test]
fn conflict_copies_become_forks() {
    let (tmp, root) = case_copy("unpacked");
    let mut expect = Vec::new();
    for (id, name) in [
        (
            "clock-skew",
            "session.sync-conflict-20260105-101010-ABCDEFG.jsonl.zstd",
        ),
        (
            "Session-A",
            "session.jsonl (alice's conflicted copy 2026-01-05).zstd",
        ),
    ] {
        let dir = root.join(APP).join(id);
        let original = lines_of(&dir.join("session.jsonl.zstd"));
        let (k, divergent) = diverged(&original, 5);
        let mut copy = original[..=k].to_vec();
        copy.extend(divergent.iter().cloned());
        let bytes = frame(&joined(&copy));
        fs::write(dir.join(name), &bytes).unwrap();
        expect.push((id, name, original, k, divergent, bytes));
    }
    let before = tree_bytes(&root);
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    for (id, name, ..) in &expect {
        assert!(
            got.contains(&("conflict_copy".into(), format!("{APP}/{id}/{name}"))),
            "{got:?}"
        );
    }
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    // The two sessions count as repaired (a fresh tester: counted clean,
    // the summary said "0 repaired").
    assert_eq!(report["summary"]["repaired"], 2, "{report}");
    assert_eq!(report["summary"]["clean"], 20, "{report}");
    assert_eq!(report["summary"]["problems_left"], 0, "{report}");
    let o = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
    for (id, name, original, k, divergent, bytes) in &expect {
        let fork_id = assert_copy_forked(&root, id, name, original, *k, divergent);
        assert_eq!(oracle::oracle_session(&o, &fork_id)["load"]["ok"], true);
        let _ = bytes;
    }
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    let manifest = fs::read_to_string(run.join("doctor-manifest.jsonl")).unwrap();
    for line in manifest.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let copy = fs::read(e["copy"].as_str().unwrap()).unwrap();
        assert!(
            expect.iter().any(|x| x.5 == copy),
            "the copy's original bytes are kept"
        );
    }
    // --restore puts the copies back and removes the forks made from them.
    let out = sessionfs(
        tmp.path(),
        &["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(tree_bytes(&root) == before, "the root after --restore");
    // Removing a fork's directory removes its lock with it: no warning
    // that the lock changed hands (a fresh tester saw one per fork).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("WARN"), "{stderr}");
}

/// `header` (a JSON object line) with its keys in reverse order: the same
/// header to the reference, other bytes.
fn reordered(header: &str) -> String {
    let v: serde_json::Map<String, Value> = serde_json::from_str(header).unwrap();
    let mut keys: Vec<(&String, &Value)> = v.iter().collect();
    keys.sort_by(|a, b| b.0.cmp(a.0));
    let body: Vec<String> = keys
        .iter()
        .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v))
        .collect();
    let text = format!("{{{}}}", body.join(","));
    assert_ne!(text, header);
    text
}

#[test]
fn a_conflict_copy_with_its_header_in_other_bytes_still_becomes_a_fork() {
    // Found by a fresh tester: a copy whose header line differed from the
    // transcript's in bytes only (key order) shared no line with it, so its
    // own events were set aside as "nothing the transcript lacks".
    let (tmp, root) = case_copy("unpacked");
    let id = "clock-skew";
    let name = "session.sync-conflict-20260105-101010-ABCDEFG.jsonl.zstd";
    let dir = root.join(APP).join(id);
    let original = lines_of(&dir.join("session.jsonl.zstd"));
    let (k, divergent) = diverged(&original, 4);
    let mut copy = vec![reordered(&original[0])];
    copy.extend(original[1..=k].iter().cloned());
    copy.extend(divergent.iter().cloned());
    fs::write(dir.join(name), frame(&joined(&copy))).unwrap();
    // Another session's transcript under a conflict copy's name: not a copy
    // of this session, so nothing of it is taken or moved.
    let stranger = root.join(APP).join("Session-A").join(name);
    fs::copy(dir.join("session.jsonl.zstd"), &stranger).unwrap();
    let stranger_bytes = fs::read(&stranger).unwrap();
    // A copy with a damaged frame between its own events (a second
    // tester: it was called a prefix and set aside, the intact events
    // after the damage with it).
    let sid = "crashed-open-turn";
    let sdir = root.join(APP).join(sid);
    let theirs = lines_of(&sdir.join("session.jsonl.zstd"));
    let (sk, unique) = diverged(&theirs, 4);
    let mut damaged = frame(&joined(&theirs[..=sk]));
    // A frame with a checksum, one byte of it flipped: it fails to decode.
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(true).unwrap();
    std::io::Write::write_all(&mut enc, joined(&unique[..2]).as_bytes()).unwrap();
    let mut bad = enc.finish().unwrap();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    damaged.extend(bad);
    damaged.extend(frame(&joined(&unique[2..])));
    fs::write(sdir.join(name), &damaged).unwrap();

    let (_, before) = doctor_json(tmp.path(), &root, &[]);
    let fork_fix = finding_at(&before, &format!("{id}/{name}"))["fix"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        fork_fix.starts_with(&format!("sessionfs doctor --repair '{}'", root.display())),
        "a copy is repaired by a run over the root: {fork_fix}"
    );
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 1, "the stranger is a problem left: {report}");
    assert_copy_forked(&root, id, name, &original, k, &divergent);
    assert_eq!(fs::read(&stranger).unwrap(), stranger_bytes);
    assert_eq!(fs::read(sdir.join(name)).unwrap(), damaged);
    assert!(fork_dirs(&root.join(APP), sid).is_empty());
    let left: BTreeMap<String, String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["done"].is_null() && f["kind"] == "conflict_copy")
        .map(|f| {
            let path = f["path"].as_str().unwrap();
            let session = Path::new(path).parent().unwrap().file_name().unwrap();
            (
                session.to_string_lossy().into_owned(),
                format!("{} / {}", f["detail"], f["fix"]),
            )
        })
        .collect();
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        ["Session-A", sid],
        "{report}"
    );
    for text in left.values() {
        assert!(
            text.contains("leaves it in place") && !text.contains("failed"),
            "{text}"
        );
    }
    assert!(left[sid].contains("does not decode"), "{}", left[sid]);
    assert_eq!(report["summary"]["problems_left"], 2, "{report}");
}

#[test]
fn a_conflict_copy_alone_in_its_session_directory_is_reported_and_left_in_place() {
    // Found by a fresh tester: with no transcript beside the copy, the
    // finding said the transcript "cannot be read" and --repair failed
    // with "No such file or directory".
    let (tmp, root) = case_copy("unpacked");
    let dir = root.join(APP).join("clock-skew");
    let name = "session.sync-conflict-20260105-101010-ABCDEFG.jsonl.zstd";
    let transcript = dir.join("session.jsonl.zstd");
    let bytes = fs::read(&transcript).unwrap();
    fs::rename(&transcript, dir.join(name)).unwrap();

    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 1, "the lone copy is a problem left: {report}");
    let f = finding_at(&report, &format!("clock-skew/{name}"));
    assert_eq!(f["remedy"], "report", "{f}");
    assert!(f["done"].is_null(), "{f}");
    let (detail, fix) = (f["detail"].as_str().unwrap(), f["fix"].as_str().unwrap());
    assert!(detail.contains("no transcript beside it"), "{detail}");
    assert!(!fix.contains("failed") && fix.contains("mv -n"), "{fix}");
    assert_eq!(fs::read(dir.join(name)).unwrap(), bytes, "left in place");
    assert!(!transcript.exists());

    // The printed command, run by a shell, gives the session back.
    let cmd = fix.rsplit_once("`mv -n ").unwrap().1.trim_end_matches('`');
    common::sh_ok(
        &format!("cd \"$1\" && mv -n {cmd}"),
        [root.parent().unwrap().as_os_str()],
    );
    assert_eq!(fs::read(&transcript).unwrap(), bytes);
    let (_, after) = doctor_json(tmp.path(), &root, &[]);
    let about_it: Vec<_> = after["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().contains("/clock-skew/"))
        .collect();
    assert!(about_it.is_empty(), "{about_it:?}");
}

// ---- Output ----

/// A validator of `docs/doctor-report.schema.json`.
fn report_validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(
        &fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/doctor-report.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

#[test]
fn json_report_follows_its_schema() {
    let validator = report_validator();
    for case in ["normal", "torn", "stray-files", "duplicate"] {
        let (tmp, root) = case_copy(case);
        for extra in [&[][..], &["--repair"][..]] {
            let (_, report) = doctor_json(tmp.path(), &root, extra);
            let errors: Vec<String> = validator
                .iter_errors(&report)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{case} {extra:?}: {errors:?}");
        }
    }
    // A report that breaks the schema is refused (the check can fail).
    let mut bad = doctor_json(
        tempfile::tempdir().unwrap().path(),
        &case_copy("torn").1,
        &[],
    )
    .1;
    bad["findings"][0]["kind"] = "no_such_kind".into();
    assert!(!validator.is_valid(&bad));
}

/// 100,000 skippable frames after a valid transcript are one finding (at
/// the first, with how many and their bytes), the report still follows its
/// schema and counts the frames that verify; `--repair` sets the
/// transcript aside whole, once, as for one skippable frame.
#[test]
fn many_skippable_frames_are_one_finding() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let session = root.join("--tmp-h--/s");
    fs::create_dir_all(&session).unwrap();
    let t = session.join("session.jsonl.zstd");
    let mut bytes = frame(&common::lines::header_line(
        "s",
        Some("/tmp/h"),
        1_767_603_700_000,
    ));
    bytes.extend(frame(
        "{\"type\":\"turn/start\",\"seq\":0,\"time\":1767603700001,\"data\":{\"turn\":1}}\n",
    ));
    let at = bytes.len() as u64;
    for _ in 0..100_000 {
        bytes.extend(0x184D_2A50u32.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
    }
    fs::write(&t, &bytes).unwrap();
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let all = report["findings"].as_array().unwrap();
    assert_eq!(all.len(), 1, "{report:#}");
    assert_eq!(all[0]["kind"], "skippable_frame");
    assert_eq!(all[0]["offset"], at);
    assert_eq!(
        all[0]["detail"],
        format!(
            "100000 skippable frames at bytes {at}..{} (800000 bytes)",
            bytes.len()
        )
    );
    let s = &report["sessions"][0];
    assert_eq!(
        (&s["frames"], &s["frames_ok"], &s["lines"], &s["findings"]),
        (&2.into(), &2.into(), &2.into(), &1.into()),
        "{s}"
    );
    assert_eq!(report["summary"]["problems_left"], 1);
    let validator = report_validator();
    assert!(validator.is_valid(&report), "{report:#}");
    // The repair is the one of a single skippable frame: the file
    // rewritten as its data frames alone (byte for byte; they hold every
    // transcript byte), once, its bytes kept in the quarantine folder; the
    // reference then reads and loads it (it failed to read it before).
    let before = tree_bytes(&root);
    let plain_before = common::zstd_dc(&t);
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["summary"]["repaired"], 1, "{report:#}");
    assert_eq!(report["summary"]["set_aside"], 0, "{report:#}");
    assert_eq!(
        fs::read(&t).unwrap(),
        bytes[..at as usize],
        "the data frames"
    );
    assert_eq!(common::zstd_dc(&t), plain_before);
    // (Its one event lacks a message id, which load refuses for content.)
    let oracle = assert_oracle_loads(&root, &["s"]);
    let s = &oracle["sessions"][0];
    assert_eq!(
        (&s["id"], &s["readRaw"]["ok"]),
        (&"s".into(), &true.into()),
        "{s}"
    );
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    assert_quarantine_holds(&run, &root, &before);
    let manifest = fs::read_to_string(run.join("doctor-manifest.jsonl")).unwrap();
    assert_eq!(manifest.lines().count(), 1, "{manifest}");
}

#[test]
fn text_output_shows_problems_and_a_summary() {
    let (tmp, root) = case_copy("torn");
    let out = sessionfs(tmp.path(), &["doctor".as_ref(), root.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(!text.lines().any(|l| l.starts_with("ok\t")), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("PROBLEM\t")).count(),
        5,
        "{text}"
    );
    assert!(
        text.ends_with(
            "6 sessions scanned: 1 clean, 0 repaired, 0 set aside, 0 refused by the reference for content only, 5 problems left; 83151 bytes\n"
        ),
        "{text}"
    );
    let out = sessionfs(
        tmp.path(),
        &["doctor".as_ref(), "--verbose".as_ref(), root.as_os_str()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok\t")).count(),
        1,
        "{text}"
    );
    // No progress bar when piped.
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("scanning"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn progress_bar_on_a_terminal_only() {
    let (tmp, root) = case_copy("normal");
    // `script` runs the doctor under a pseudo-terminal.
    let cmd = format!(
        "SESSIONFS_PROGRESS_AFTER_MS=0 XDG_STATE_HOME={} {} doctor {} >/dev/null",
        tmp.path().display(),
        bin(),
        root.display()
    );
    let out = Command::new("timeout")
        .args(["-k", "5", "60", "script", "-qec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen.contains("scanning") && seen.contains("/23 sessions"),
        "{seen:?}"
    );
    let out = Command::new(bin())
        .args(["doctor".as_ref(), root.as_os_str()])
        .env("SESSIONFS_PROGRESS_AFTER_MS", "0")
        .env("XDG_STATE_HOME", tmp.path())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("scanning"));
}

/// `sessionfs cat` of a transcript with a corrupt middle frame prints the
/// readable frames (what `zstd -dc` prints before it fails), then fails.
#[test]
fn cat_prints_the_readable_frames_then_fails() {
    let root = corpus_dir().join("corrupt-tail/root");
    let file = root.join(format!("{APP}/bitflip-middle-frame/session.jsonl.zstd"));
    let out = Command::new(bin())
        .args([
            "cat".as_ref(),
            root.as_os_str(),
            "bitflip-middle-frame".as_ref(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let z = Command::new("zstd").arg("-dc").arg(&file).output().unwrap();
    assert!(!z.status.success());
    assert!(!out.stdout.is_empty());
    assert_eq!(out.stdout, z.stdout);
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte 1098"));
}

/// `check` reports each problem once: a mismatched transcript is one
/// `PROBLEM` entry (never `ok` first), a duplicate id one entry.
#[test]
fn check_reports_each_problem_once() {
    for (case, name) in [("mismatch", "raw-session"), ("duplicate", "dup-id")] {
        let out = Command::new(bin())
            .args([
                "check".as_ref(),
                corpus_dir().join(case).join("root").as_os_str(),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        let about: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('\t') && l.contains(&format!("/{name}/")))
            .collect();
        assert!(
            about.iter().filter(|l| l.starts_with("PROBLEM")).count() == 1,
            "{case}: {text}"
        );
        assert!(
            !about.iter().any(|l| l.starts_with("ok")) || case == "duplicate",
            "{case}: {text}"
        );
    }
}

/// Two writers interleaved their events after a common prefix: the
/// transcript keeps the first writer's history (its committed frames byte
/// for byte, its later lines after them), the other becomes a fork.
#[test]
fn interleaved_writers_are_split_into_two_histories() {
    let (tmp, root) = case_copy("unpacked");
    let id = "Session-A";
    let path = root.join(APP).join(id).join("session.jsonl.zstd");
    let original = lines_of(&path);
    let n = original.len() - 1;
    let k = n / 2;
    // A: events 0..=k committed, then k+1..k+4 interleaved with B's k-2..k+1.
    let b: Vec<String> = (0..4)
        .map(|i| other_writer(&original[k - 1 + i], (k - 2 + i) as u64))
        .collect();
    let mut mixed = String::new();
    for i in 0..4 {
        mixed.push_str(&format!("{}\n{}\n", b[i], original[k + 1 + i]));
    }
    let mut bytes = frame(&joined(&original[..1]));
    bytes.extend(frame(&joined(&original[1..=k])));
    let committed = bytes.len();
    bytes.extend(frame(&mixed));
    fs::write(&path, &bytes).unwrap();
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    assert!(
        got.contains(&(
            "interleaved_writers".into(),
            format!("{APP}/{id}/session.jsonl.zstd")
        )),
        "{got:?}"
    );
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let now = fs::read(&path).unwrap();
    assert_eq!(
        now[..committed],
        bytes[..committed],
        "the committed frames are kept byte for byte"
    );
    assert_eq!(
        lines_of(&path),
        original[..=k + 4].to_vec(),
        "the first writer's history"
    );
    let forks = fork_dirs(&root.join(APP), id);
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_fork(
        &forks[0].join("session.jsonl.zstd"),
        id,
        &original[..=k],
        (k - 2) as u64,
        &b,
    );
    let o = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
    let fork_id = forks[0].file_name().unwrap().to_str().unwrap();
    assert_eq!(oracle::oracle_session(&o, fork_id)["load"]["ok"], true);
    assert_eq!(oracle::oracle_session(&o, id)["load"]["ok"], true);
}

/// A `.sessionfs.lock` older than its lease is reported (never removed by
/// --repair: the shared-root protocol's takeover owns that); a fresh one is not.
#[test]
fn a_stale_lock_file_is_reported() {
    let (tmp, root) = case_copy("corrupt-header");
    let dir = root.join(APP).join("valid-neighbour");
    fs::write(dir.join(".sessionfs.lock"), br#"{"v":1,"lease_ms":15000}"#).unwrap();
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert!(
        !findings(&report, &root)
            .iter()
            .any(|(k, _)| k == "stale_lock"),
        "{report}"
    );
    assert_eq!(code, 1);
    common::sh_ok(
        "touch -d '-1 hour' \"$1\"",
        [dir.join(".sessionfs.lock").as_os_str()],
    );
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    assert!(
        got.contains(&(
            "stale_lock".into(),
            format!("{APP}/valid-neighbour/.sessionfs.lock")
        )),
        "{got:?}"
    );
    let (_, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert!(dir.join(".sessionfs.lock").exists());
    assert!(findings(&report, &root)
        .iter()
        .any(|(k, _)| k == "stale_lock"));
}

/// `.fuse_hidden*` copies sshfs kept of a writer's wait announcement or of
/// a lock file (unlinked while another process of the client held them
/// open) are reported once older than a lease could run, and --repair
/// moves them to the quarantine folder; a recent one, and a hidden file
/// holding anything else, are left alone.
#[test]
fn hidden_copies_of_wait_announcements_and_locks_are_reported_and_set_aside() {
    let (tmp, root) = case_copy("corrupt-header");
    let dir = root.join(APP).join("valid-neighbour");
    let wait = concat!(
        r#"{"sessionfs_wait":1,"host":"b","boot":"x","pid":7,"pidns":"pid:[1]","#,
        r#""window_ms":100,"token":"t"}"#,
        "\n"
    )
    .as_bytes();
    let lock =
        br#"{"sessionfs_lock":1,"host":"b","boot":"x","pid":1,"token":"t","lease_ms":15000}"#;
    let files: [(&str, &[u8], bool); 4] = [
        (".fuse_hidden00000a1b00000001", wait, true),
        (".fuse_hidden00000a1b00000002", lock, true),
        (".fuse_hidden00000a1b00000003", wait, false), // recent
        (".fuse_hidden00000a1b00000004", b"user data", true),
    ];
    for (name, body, aged) in files {
        fs::write(dir.join(name), body).unwrap();
        if aged {
            common::sh_ok("touch -d '-1 hour' \"$1\"", [dir.join(name).as_os_str()]);
        }
    }
    let rel = |n: &str| format!("{APP}/valid-neighbour/{n}");
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let hidden: Vec<String> = findings(&report, &root)
        .into_iter()
        .filter(|(k, _)| k == "hidden_lock_copy")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(hidden, [rel(files[0].0), rel(files[1].0)], "{report}");
    let text = report.to_string();
    assert!(text.contains("wait announcement"), "{text}");
    doctor_json(tmp.path(), &root, &["--repair"]);
    assert!(!dir.join(files[0].0).exists() && !dir.join(files[1].0).exists());
    assert!(dir.join(files[2].0).exists() && dir.join(files[3].0).exists());
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    assert!(
        !findings(&report, &root)
            .iter()
            .any(|(k, _)| k == "hidden_lock_copy"),
        "{report}"
    );
}

/// The commit protocol's other files (a waiter's marker, a takeover claim,
/// a breaker's temporary: `.sessionfs.lock*`, src/store/lease.rs) are left
/// to the protocol: no finding, even an hour old, and --repair keeps them.
#[test]
fn the_lock_protocols_other_files_are_left_alone() {
    let (tmp, root) = case_copy("corrupt-header");
    let dir = root.join(APP).join("valid-neighbour");
    let names = [
        ".sessionfs.lock.wait",
        ".sessionfs.lock.break.0123456789abcdef.0",
        ".sessionfs.lock.0123456789abcdef.tmp",
    ];
    for n in names {
        fs::write(dir.join(n), b"").unwrap();
        common::sh_ok("touch -d '-1 hour' \"$1\"", [dir.join(n).as_os_str()]);
    }
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    assert!(
        !got.iter().any(|(_, p)| p.contains(".sessionfs.lock")),
        "{got:?}"
    );
    doctor_json(tmp.path(), &root, &["--repair"]);
    for n in names {
        assert!(dir.join(n).exists(), "{n} was moved");
    }
}

/// A log re-encoded as one frame (header and events together): reported at
/// byte 0, re-framed by --repair with the same decoded bytes; the reference
/// then lists the root and loads the session.
#[test]
fn a_header_frame_holding_events_is_reframed() {
    let (tmp, root) = case_copy("normal");
    let path = root.join(format!("{APP}/clock-skew/session.jsonl.zstd"));
    let text = zstd_dc(&path);
    fs::write(&path, zstd::encode_all(&text[..], 3).unwrap()).unwrap();
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1);
    let got = findings(&report, &root);
    assert!(
        got.contains(&(
            "header_frame_holds_events".into(),
            format!("{APP}/clock-skew/session.jsonl.zstd")
        )),
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "{got:?}"); // and the Windows cwd's refusal
    let (code, _) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0);
    assert_eq!(zstd_dc(&path), text, "the same decoded bytes");
    let o = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
    assert_eq!(oracle::oracle_session(&o, "clock-skew")["load"]["ok"], true);
}

/// A session directory renamed away from its header's id is moved back
/// where the header says when that place is free; a transcript given alone
/// is scanned alone.
#[test]
fn a_renamed_session_directory_is_moved_back() {
    let (tmp, root) = case_copy("normal");
    let app = root.join(APP);
    fs::rename(app.join("clock-skew"), app.join("clock-skew-old")).unwrap();
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let got = findings(&report, &root);
    assert!(
        got.contains(&(
            "misplaced".into(),
            format!("{APP}/clock-skew-old/session.jsonl.zstd")
        )),
        "{got:?}"
    );
    let (code, _) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0);
    assert!(app.join("clock-skew/session.jsonl.zstd").is_file());
    assert!(!app.join("clock-skew-old").exists());
    let (code, one) = doctor_json(tmp.path(), &app.join("clock-skew/session.jsonl.zstd"), &[]);
    assert_eq!(
        (code, one["sessions"].as_array().unwrap().len()),
        (0, 1),
        "{one}"
    );
    assert_eq!(one["sessions"][0]["status"], "clean");
}

/// A directory where a transcript belongs is named for what it is, and the
/// fix is to move it out of the root (nothing to restore).
#[test]
fn a_directory_named_like_a_transcript_is_to_be_moved_out() {
    let (tmp, root) = case_copy("normal");
    let t = root.join("--home-alice-work-app--/Session-A/session.jsonl.zstd");
    fs::remove_file(&t).unwrap();
    fs::create_dir(&t).unwrap();
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let f = finding_at(&report, "Session-A/session.jsonl.zstd");
    assert_eq!(f["kind"], "unreadable", "{f}");
    assert!(f["detail"].as_str().unwrap().contains("a directory"), "{f}");
    assert!(
        f["fix"].as_str().unwrap().contains("out of the root"),
        "{f}"
    );
}

/// Garbage appended after the last frame (nothing verifiable in it) is cut,
/// not the whole session set aside: the session stays, its frames byte for
/// byte, and zstd reads it.
#[test]
fn trailing_garbage_is_cut_and_the_session_stays() {
    let (tmp, root) = case_copy("corrupt-tail");
    let t = root.join(format!("{APP}/garbage-appended/session.jsonl.zstd"));
    let before = fs::read(&t).unwrap();
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let f = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "trailing_garbage")
        .unwrap_or_else(|| panic!("no trailing_garbage finding: {report}"));
    let at = f["offset"].as_u64().unwrap() as usize;
    let after = fs::read(&t).expect("the session stays in the store");
    assert_eq!(after, before[..at], "cut exactly at the garbage");
    let ok = Command::new("zstd").arg("-tq").arg(&t).status().unwrap();
    assert!(ok.success(), "zstd -t of the repaired file");
}

/// Megabytes of garbage after the last frame, holding stray frame magic
/// numbers that start no complete frame, and a sparse run of zeros: cut
/// like a small tail (the session stays with its frames), and the copy in
/// the quarantine folder holds every original byte while taking about
/// what the file takes on disk.
#[test]
fn large_garbage_with_stray_magic_numbers_is_cut_and_kept_sparse() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let (tmp, root) = case_copy("corrupt-tail");
    let t = root.join(format!("{APP}/intact-control/session.jsonl.zstd"));
    let intact = fs::read(&t).unwrap();
    // 10 MB of xorshift bytes, with the zstd and a skippable magic number
    // planted in them (each followed by garbage: no complete frame).
    let mut garbage = Vec::with_capacity(10_000_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while garbage.len() < 10_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        garbage.extend_from_slice(&x.to_le_bytes());
    }
    garbage[1_000..1_004].copy_from_slice(&0xFD2F_B528u32.to_le_bytes());
    garbage[5_000_000..5_000_004].copy_from_slice(&0x184D_2A50u32.to_le_bytes());
    garbage[5_000_004..5_000_008].copy_from_slice(&u32::MAX.to_le_bytes());
    let f = fs::OpenOptions::new().write(true).open(&t).unwrap();
    f.write_all_at(&garbage, intact.len() as u64).unwrap();
    // Then 256 MiB of holes (a sparse file) and a last garbage byte.
    let len = intact.len() as u64 + garbage.len() as u64 + (256 << 20);
    f.write_all_at(b"!", len).unwrap();
    drop(f);
    // A mode the copy must keep (not the 0600 of a new private file).
    let mode = 0o640;
    fs::set_permissions(&t, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    let on_disk = fs::metadata(&t).unwrap().blocks() * 512;

    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let f = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["kind"] == "trailing_garbage"
                && f["path"]
                    .as_str()
                    .is_some_and(|p| p.contains("intact-control"))
        })
        .unwrap_or_else(|| panic!("no trailing_garbage finding: {report}"));
    assert_eq!(f["offset"].as_u64(), Some(intact.len() as u64), "{f}");
    let after = fs::read(&t).expect("the session stays in the store");
    assert_eq!(after, intact, "cut exactly at the garbage");
    // The quarantine copy: the original bytes, stored sparse.
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    let copy = walk_files(&run)
        .into_iter()
        .find(|p| p.to_string_lossy().contains("intact-control"))
        .unwrap_or_else(|| panic!("no copy of the transcript in {}", run.display()));
    let c = fs::File::open(&copy).unwrap();
    let meta = c.metadata().unwrap();
    assert_eq!(meta.len(), len + 1);
    assert!(
        meta.blocks() * 512 <= on_disk + (1 << 20),
        "the copy takes {} bytes on disk, the original {on_disk}",
        meta.blocks() * 512
    );
    let mut head = vec![0u8; intact.len() + garbage.len()];
    c.read_exact_at(&mut head, 0).unwrap();
    assert!(head[..intact.len()] == intact[..] && head[intact.len()..] == garbage[..]);
    let mut last = [0u8; 1];
    c.read_exact_at(&mut last, len).unwrap();
    assert_eq!(&last, b"!");
    drop(c);
    // --restore gives the original back: its bytes, its holes, its mode.
    let out = sessionfs(
        tmp.path(),
        &["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let back = fs::File::open(&t).unwrap();
    let meta = back.metadata().unwrap();
    assert_eq!(meta.len(), len + 1);
    assert_eq!(meta.mode() & 0o7777, mode, "the restored file's mode");
    assert!(
        meta.blocks() * 512 <= on_disk + (1 << 20),
        "the restored file takes {} bytes on disk, the original {on_disk}",
        meta.blocks() * 512
    );
    let mut head = vec![0u8; intact.len() + garbage.len()];
    back.read_exact_at(&mut head, 0).unwrap();
    assert!(head[..intact.len()] == intact[..] && head[intact.len()..] == garbage[..]);
}

/// Garbage followed by a frame that starts with the zstd magic (here one
/// without a checksum, which readers accept: FORMAT.md) is never cut as
/// trailing garbage: the frame may hold committed lines.
#[test]
fn garbage_before_a_frame_without_checksum_is_not_cut() {
    let (tmp, root) = case_copy("corrupt-tail");
    let t = root.join(format!("{APP}/intact-control/session.jsonl.zstd"));
    let mut bytes = fs::read(&t).unwrap();
    bytes.extend_from_slice(b"GARBAGE\n");
    let plain =
        "{\"type\":\"x-note\",\"seq\":9999,\"note\":\"after the garbage\",\"ignorable\":true}\n";
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(false).unwrap();
    std::io::Write::write_all(&mut enc, plain.as_bytes()).unwrap();
    bytes.extend(enc.finish().unwrap());
    fs::write(&t, &bytes).unwrap();
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    let kinds: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| p.contains("intact-control"))
        })
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(!kinds.contains(&"trailing_garbage"), "{kinds:?}");
    assert!(kinds.contains(&"damaged"), "{kinds:?}");
    let (_, _) = doctor_json(tmp.path(), &root, &["--repair"]);
    if let Ok(now) = fs::read(&t) {
        assert_eq!(now, bytes, "the transcript was changed in place");
    }
}

/// `--restore` takes the writers' lock file of a transcript it replaces: a
/// live writer's lock makes it wait, then fail for that file and change
/// nothing; once the writer is gone, the restore goes ahead.
#[test]
fn restore_waits_for_a_writer_holding_the_lock_file() {
    use sessionfs::store::fskind::CommitProtocol;
    use sessionfs::store::lease::{self, HolderId, LeaseConfig};
    let (tmp, root) = case_copy("torn");
    let before = tree_bytes(&root);
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let torn = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "torn_tail")
        .unwrap();
    let path = PathBuf::from(torn["path"].as_str().unwrap());
    let rel = path.strip_prefix(&root).unwrap().to_path_buf();
    let repaired = fs::read(&path).unwrap();
    let cfg = LeaseConfig::from_lease(std::time::Duration::from_millis(300));
    let guard = lease::acquire(
        path.parent().unwrap(),
        &path,
        &cfg,
        CommitProtocol::Local,
        &HolderId::current(),
    )
    .unwrap();
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    let restore = || {
        Command::new(bin())
            .args(["doctor".as_ref(), "--restore".as_ref(), run.as_os_str()])
            .env("XDG_STATE_HOME", tmp.path())
            .env("SESSIONFS_LEASE_MS", "300")
            .output()
            .unwrap()
    };
    let out = restore();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(".sessionfs.lock"), "names the lock: {text}");
    assert_eq!(fs::read(&path).unwrap(), repaired, "nothing replaced");
    drop(guard);
    let out = restore();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(fs::read(&path).unwrap(), before[&rel]);
}

/// A transcript that is a symbolic link (to a torn transcript, to a file
/// that is not one) is reported but repaired by no one: a repair through
/// the link would replace the link with a copy of its target, or move the
/// target's bytes away and drop the link, and a restore would put back a
/// regular file (found by a fresh tester: it put one directly in ROOT).
#[test]
fn a_transcript_that_is_a_symbolic_link_is_reported_not_repaired() {
    let (tmp, root) = case_copy("normal");
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let intact = fs::read(root.join(APP).join("Session-A/session.jsonl.zstd")).unwrap();
    let torn = outside.join("torn.zstd");
    fs::write(&torn, &intact[..intact.len() - 3]).unwrap();
    let junk = outside.join("junk.txt");
    fs::write(&junk, b"NOT ZSTD\n").unwrap();
    let mut links = Vec::new();
    for (dir, target) in [("linked-torn", &torn), ("linked-junk", &junk)] {
        let d = root.join(APP).join(dir);
        fs::create_dir(&d).unwrap();
        let link = d.join("session.jsonl.zstd");
        std::os::unix::fs::symlink(target, &link).unwrap();
        links.push((link, target.clone(), fs::read(target).unwrap()));
    }
    let top_before: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let state = tempfile::tempdir().unwrap();
    let (_, report) = doctor_json(state.path(), &root, &["--repair"]);
    for (link, target, bytes) in &links {
        let about: Vec<&Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["path"].as_str() == link.to_str())
            .collect();
        assert!(!about.is_empty(), "no finding for {link:?}: {report:#}");
        for f in &about {
            let fix = f["fix"].as_str().unwrap_or_default();
            assert!(fix.contains("is a symbolic link"), "{f:#}");
            assert!(f["done"].is_null(), "repaired through the link: {f:#}");
        }
        assert_eq!(&fs::read_link(link).unwrap(), target, "the link changed");
        assert_eq!(&fs::read(target).unwrap(), bytes, "the target changed");
    }
    let top_after: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(top_after, top_before, "the repair wrote into ROOT");
}

/// A symbolic link to a directory where a session directory goes is
/// reported (the mount and `list` do not show it, nor does the
/// reference's list()), never changed by `--repair` (found by a fresh
/// tester: nothing said a word about it).
#[test]
fn a_session_directory_that_is_a_symbolic_link_is_reported() {
    let (tmp, root) = case_copy("normal");
    let elsewhere = tmp.path().join("elsewhere");
    fs::rename(root.join(APP).join("Session-A"), &elsewhere).unwrap();
    let link = root.join(APP).join("Session-A");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let state = tempfile::tempdir().unwrap();
    for extra in [&[][..], &["--repair"][..]] {
        let (code, report) = doctor_json(state.path(), &root, extra);
        assert_eq!(code, 1, "{report:#}");
        assert!(report_validator().is_valid(&report), "{report:#}");
        let about: Vec<&Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "linked_session_dir")
            .collect();
        assert_eq!(about.len(), 1, "{report:#}");
        assert_eq!(about[0]["path"].as_str(), link.to_str());
        assert!(about[0]["done"].is_null(), "{:#}", about[0]);
        assert!(about[0]["fix"]
            .as_str()
            .unwrap()
            .contains("replace the link"));
        assert_eq!(fs::read_link(&link).unwrap(), elsewhere);
    }
    // As the mount and `list` do, the reference's list() leaves it out.
    let out = oracle::script("list_ids.mjs", [root.as_os_str()]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = listed
        .as_array()
        .unwrap_or_else(|| panic!("list(): {listed}"));
    assert!(ids.contains(&"session-a".into()), "{listed}");
    assert!(
        !ids.contains(&"Session-A".into()),
        "the reference lists it: {listed}"
    );
}

#[test]
fn a_fifo_named_like_a_conflict_copy_does_not_block_the_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let session = root.join("--tmp-h--/s");
    fs::create_dir_all(&session).unwrap();
    let header = common::lines::header_line("s", Some("/tmp/h"), 1_767_603_700_000);
    fs::write(session.join("session.jsonl.zstd"), frame(&header)).unwrap();
    let fifo = session.join("session.sync-conflict-20260105-101010-FIFO.jsonl.zstd");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) of a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    // `sessionfs` runs under `timeout 120`: a blocked open would be killed
    // (exit 124).
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 0, "{report}");
    let out = sessionfs(tmp.path(), &["check".as_ref(), root.as_os_str()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Every directory of the root is a project directory (FORMAT.md, Layout):
/// the reference lists a session under `notes/` too: its list() fails for
/// the whole root (misplaced), and, with the copy in place, the id's
/// lookups fail (duplicate).
/// The doctor and `check` report both; `--repair` keeps the copy its
/// header puts where it is, and the reference then lists the root.
#[test]
fn a_session_under_a_directory_not_named_as_a_project_is_reported_and_repaired() {
    let id = "3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f";
    let (tmp, root) = case_copy("normal");
    let placed = root.join(APP).join(id);
    let stray = root.join("notes").join(id);
    fs::create_dir_all(stray.parent().unwrap()).unwrap();
    common::sh_ok(
        "cp -a \"$1\" \"$2\"",
        [placed.as_os_str(), stray.as_os_str()],
    );
    // The stray copy written last: the copy in place still wins.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    fs::File::options()
        .write(true)
        .open(stray.join("session.jsonl.zstd"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    let report = oracle::report(&root);
    assert_eq!(report["list"]["ok"], false, "{}", report["list"]);
    let s = oracle::oracle_session(&report, id);
    assert_eq!(
        s["load"]["ok"], false,
        "the reference refuses the duplicate: {s}"
    );
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let got = findings(&report, &root);
    let stray_file = format!("notes/{id}/session.jsonl.zstd");
    assert!(
        got.contains(&("duplicate_id".to_string(), stray_file.clone())),
        "{got:?}"
    );
    let check = sessionfs(tmp.path(), &["check".as_ref(), root.as_os_str()]);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("PROBLEM") && l.contains(&stray_file)),
        "{text}"
    );
    let (_, repaired) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(repaired["summary"]["problems_left"], 0, "{repaired}");
    assert!(placed.join("session.jsonl.zstd").exists());
    assert!(!stray.exists(), "the session directory left empty is gone");
    assert_oracle_loads(&root, &["ünïcödé-🚀"]);

    // Alone under `notes/`: misplaced, and the reference's list() fails.
    let (tmp, root) = case_copy("normal");
    let stray = root.join("notes").join(id);
    fs::create_dir_all(stray.parent().unwrap()).unwrap();
    fs::rename(root.join(APP).join(id), &stray).unwrap();
    let report = oracle::report(&root);
    assert_eq!(report["list"]["ok"], false, "{}", report["list"]);
    let (_, report) = doctor_json(tmp.path(), &root, &[]);
    assert!(
        findings(&report, &root).contains(&("misplaced".to_string(), stray_file)),
        "{report}"
    );
    doctor_json(tmp.path(), &root, &["--repair"]);
    assert!(root.join(APP).join(id).join("session.jsonl.zstd").exists());
    assert_oracle_loads(&root, &["ünïcödé-🚀"]);
}

/// A frame that ends inside a line, completed by the next (a fresh
/// tester's file): the reference reads and loads it, so the doctor says so
/// and `--repair` joins the two frames into one of the same decoded bytes
/// (every other frame kept byte for byte) instead of setting the session
/// aside. An incomplete last line no frame completes is cut, as a torn
/// tail's is.
#[test]
fn frames_splitting_a_line_are_joined_by_repair_and_the_session_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let dir = root.join("_no-cwd").join("splitline");
    fs::create_dir_all(&dir).unwrap();
    let header = common::lines::header_line("splitline", None, 1_767_614_400_000);
    let ev = |seq: u64| {
        format!(
            r#"{{"type":"x-note","seq":{seq},"time":1767614400000,"data":{{}},"ignorable":true}}"#
        )
    };
    let second = ev(1);
    let (line1, line2) = second.split_at(20);
    let frames = [
        frame(&header),
        frame(&format!("{}\n{line1}", ev(0))),
        frame(&format!("{line2}\n")),
        frame(&format!("{}\n", ev(2))),
    ];
    let transcript = dir.join("session.jsonl.zstd");
    fs::write(&transcript, frames.concat()).unwrap();
    let text = zstd_dc(&transcript);
    let before = oracle::report(&root);
    assert_eq!(
        oracle::oracle_session(&before, "splitline")["load"]["ok"],
        true,
        "{before}"
    );

    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let f = &report["findings"][0];
    assert_eq!(f["kind"], "split_line", "{report}");
    assert_eq!(f["remedy"], "repair", "{report}");
    assert!(
        f["reference"].as_str().unwrap().starts_with("reads it"),
        "{report}"
    );

    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["summary"]["repaired"], 1, "{report}");
    assert_eq!(zstd_dc(&transcript), text, "the same decoded bytes");
    let stored = fs::read(&transcript).unwrap();
    assert!(stored.starts_with(&frames[0]), "the header frame kept");
    assert!(stored.ends_with(&frames[3]), "the last frame kept");
    assert!(stored.len() < frames.concat().len() + 64);
    let check = sessionfs(tmp.path(), &["check".as_ref(), root.as_os_str()]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let after = oracle::report(&root);
    assert_eq!(
        oracle::oracle_session(&after, "splitline")["load"],
        oracle::oracle_session(&before, "splitline")["load"],
        "the reference loads the same events"
    );

    // The last frame ends inside a line no frame completes: the reference
    // reads the bytes but its load fails; the complete lines stay, the
    // incomplete one is cut (kept in the quarantine folder).
    let torn_line = [frames[0].clone(), frames[1].clone()].concat();
    fs::write(&transcript, &torn_line).unwrap();
    let before = oracle::report(&root);
    assert_eq!(
        oracle::oracle_session(&before, "splitline")["load"]["ok"],
        false,
        "{before}"
    );
    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        String::from_utf8(zstd_dc(&transcript)).unwrap(),
        format!("{header}{}\n", ev(0)),
        "{report}"
    );
    assert!(fs::read(&transcript).unwrap().starts_with(&frames[0]));
    let quarantined = PathBuf::from(report["quarantine"].as_str().unwrap());
    assert!(
        walk_files(&quarantined)
            .iter()
            .any(|p| fs::read(p).is_ok_and(|b| b == torn_line)),
        "the original is in {}",
        quarantined.display()
    );
    let after = oracle::report(&root);
    assert_eq!(
        oracle::oracle_session(&after, "splitline")["load"]["ok"],
        true,
        "{after}"
    );
}

/// A last frame holding a whole record that continues `seq` but has no
/// newline (helper 31; the reference's load fails: "complete frame
/// contains a torn JSONL record"): `--repair` ends it with its newline
/// instead of cutting it, alone in its frame or after complete lines in
/// it, every earlier frame kept byte for byte and the original in the
/// quarantine folder; the reference then loads every event. A record
/// that does not continue `seq` (a gap) is still cut.
#[test]
fn a_whole_last_record_without_its_newline_is_ended() {
    let (text, ends) = split_case(4);
    let last = text[ends[3]..].trim_end().to_string();
    let head = frames_cut(&text[..ends[2]], &[ends[0]]);
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "alone in its frame",
            frame(&text[ends[2]..ends[3]]),
            text.as_str(),
        ),
        ("after a complete line", vec![], text.as_str()),
        (
            "after a gap",
            frame(&text[ends[2]..ends[3]]),
            &text[..ends[3]],
        ),
    ];
    for (what, before_last, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join("session.jsonl.zstd");
        let mut kept = head.concat();
        kept.extend(&before_last);
        let tail = match what {
            "after a complete line" => frame(&format!("{}{last}", &text[ends[2]..ends[3]])),
            "after a gap" => frame(&last.replace("\"seq\":3", "\"seq\":5")),
            _ => frame(&last),
        };
        let original = [kept.clone(), tail].concat();
        fs::write(&transcript, &original).unwrap();
        assert_splitcase_torn(&root, what);

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{what}: {report}");
        let f = &report["findings"][0];
        assert_eq!(f["kind"], "split_line", "{what}: {report}");
        assert_eq!(
            f["detail"].as_str().unwrap().contains("whole record"),
            what != "after a gap",
            "{what}: {f}"
        );

        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 0, "{what}: {report}");
        assert_eq!(
            String::from_utf8(zstd_dc(&transcript)).unwrap(),
            want,
            "{what}: {report}"
        );
        let stored = fs::read(&transcript).unwrap();
        let unchanged = if what == "after a complete line" {
            head.concat()
        } else {
            kept
        };
        assert!(
            stored.starts_with(&unchanged),
            "{what}: earlier frames kept"
        );
        assert_original_in_quarantine(&report, &original, what);
        let after = assert_oracle_loads(&root, &[]);
        let events = want.lines().count() as u64 - 1;
        assert_splitcase_events(&after, events, what);
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 0, "{what}: clean after one repair: {report}");
    }
}

/// A frame ending with the start of one record whose next frame begins
/// with the rest of another (helper 31): the join is a valid line, but
/// the line after it does not continue `seq`, and the reference's load
/// fails there ("complete frame contains a torn JSONL record"), so the
/// `split_line` finding must not say that the reference loads it.
#[test]
fn a_join_of_two_records_pieces_is_not_said_to_load() {
    let (text, ends) = split_case(5);
    let line = |i: usize| &text[ends[i - 1]..ends[i]];
    let frames = [
        frame(&text[..ends[0]]),
        frame(&format!("{}{}", line(1), &line(2)[..30])),
        frame(&format!("{}{}{}", &line(3)[30..], line(4), line(5))),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let dir = root.join("_no-cwd").join("splitcase");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("session.jsonl.zstd"), frames.concat()).unwrap();
    let before = oracle::report(&root);
    let error = oracle::oracle_session(&before, "splitcase")["load"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains("torn JSONL record"), "{before}");

    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let f = finding_at(&report, "session.jsonl.zstd");
    assert_eq!(f["kind"], "split_line", "{report}");
    let reference = f["reference"].as_str().unwrap();
    assert!(
        !reference.contains("loads it") && reference.contains("load fails"),
        "{f}"
    );
    assert!(reference.contains("torn JSONL record"), "{f}");
    let kinds: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"seq_gap"), "{report}");
}

/// The oracle's report over the raw root `root` (its own copy).
fn raw_oracle_report(root: &Path) -> Value {
    let mode: [&std::ffi::OsStr; 2] = ["--compression".as_ref(), "none".as_ref()];
    let (report, out) = oracle::run_oracle(root, &mode);
    assert!(out.status.success(), "{report}");
    report
}

/// A raw transcript (`session.jsonl`) whose last line is a whole record
/// continuing `seq` without its newline: the reference's load truncates
/// the file before it (the record is lost); `--repair` ends it with its
/// newline (the original in the quarantine folder) and the reference then
/// loads every event. A torn last line, or a whole one after a gap, is
/// still cut.
#[test]
fn a_raw_whole_last_record_without_its_newline_is_ended() {
    let (text, ends) = split_case(3);
    let last = text[ends[2]..].trim_end().to_string();
    let cases = [
        ("whole", last.clone(), Some(text.clone())),
        ("torn", last[..30].to_string(), None),
        ("after a gap", last.replace("\"seq\":2", "\"seq\":4"), None),
    ];
    for (what, tail, ended) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join("session.jsonl");
        let original = format!("{}{tail}", &text[..ends[2]]);
        fs::write(&transcript, &original).unwrap();
        let before = raw_oracle_report(&root);
        assert_splitcase_events(&before, 2, what);

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{what}: {report}");
        let f = &report["findings"][0];
        assert_eq!(f["kind"], "torn_tail", "{what}: {report}");
        assert_eq!(
            f["detail"].as_str().unwrap().contains("whole record"),
            ended.is_some(),
            "{what}: {f}"
        );
        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 0, "{what}: {report}");
        let want = ended.clone().unwrap_or_else(|| text[..ends[2]].to_string());
        assert_eq!(fs::read_to_string(&transcript).unwrap(), want, "{what}");
        assert_original_in_quarantine(&report, original.as_bytes(), what);
        let after = raw_oracle_report(&root);
        let events = if ended.is_some() { 3 } else { 2 };
        assert_splitcase_events(&after, events, what);
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 0, "{what}: clean after one repair: {report}");
    }
}

/// A torn frame of `a` then `b`: the frame's bytes up to one byte past
/// the block that ends with `a` (a flush), so that it decodes to `a` and
/// ends early.
fn torn_frame(a: &[u8], b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    enc.include_checksum(true).unwrap();
    enc.write_all(a).unwrap();
    enc.flush().unwrap();
    let flushed = enc.get_ref().len();
    enc.write_all(b).unwrap();
    let mut all = enc.finish().unwrap();
    assert!(all.len() > flushed + 1);
    all.truncate(flushed + 1);
    all
}

/// A torn last frame whose decoded bytes end with a whole record that
/// continues `seq`, its newline in the bytes lost: the reference's load
/// drops that record with the torn frame (it keeps the lines before it);
/// `--repair` keeps it, ended with its newline, in the frame that
/// replaces the torn one (the original in the quarantine folder), and the
/// reference then loads every event. A torn record there is still cut.
#[test]
fn a_torn_frames_whole_last_record_is_kept() {
    let (text, ends) = split_case(4);
    let head = frames_cut(&text[..ends[2]], &[ends[0], ends[1]]).concat();
    let last = &text[ends[3]..ends[4] - 1];
    let cases = [
        ("whole", &text[ends[2]..ends[4] - 1], text.as_str()),
        ("torn", &text[ends[2]..ends[3] + 30], &text[..ends[3]]),
    ];
    for (what, decodes_to, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join("session.jsonl.zstd");
        let rest = if what == "whole" {
            "\n".to_string()
        } else {
            format!("{}\n", &last[30..])
        };
        let original = [
            head.clone(),
            torn_frame(decodes_to.as_bytes(), rest.as_bytes()),
        ]
        .concat();
        fs::write(&transcript, &original).unwrap();
        // The reference keeps the torn frame's complete lines only.
        assert_splitcase_events(&oracle::report(&root), 3, what);

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{what}: {report}");
        assert_eq!(
            report["findings"][0]["kind"], "torn_tail",
            "{what}: {report}"
        );
        assert_splitcase_repair_keeps(tmp.path(), &root, &original, &head, want, what);
    }
}

/// `doctor --repair` of the one-session `splitcase` root under `tmp`
/// (its transcript first `original`): exit 0, the transcript decodes to
/// `want` and still starts with the bytes `head`, the original is in the
/// quarantine folder, the reference loads every line of `want` after the
/// header, and a second doctor finds nothing.
fn assert_splitcase_repair_keeps(
    tmp: &Path,
    root: &Path,
    original: &[u8],
    head: &[u8],
    want: &str,
    what: &str,
) {
    let transcript = root.join("_no-cwd/splitcase/session.jsonl.zstd");
    let (code, report) = doctor_json(tmp, root, &["--repair"]);
    assert_eq!(code, 0, "{what}: {report}");
    assert_eq!(
        String::from_utf8(zstd_dc(&transcript)).unwrap(),
        want,
        "{what}: {report}"
    );
    assert!(fs::read(&transcript).unwrap().starts_with(head), "{what}");
    assert_original_in_quarantine(&report, original, what);
    let after = assert_oracle_loads(root, &[]);
    assert_splitcase_events(&after, want.lines().count() as u64 - 1, what);
    let (code, report) = doctor_json(tmp, root, &[]);
    assert_eq!(code, 0, "{what}: clean after one repair: {report}");
}

/// The last frames ending inside a line no frame completes, where a torn
/// start of a record (or a whole record without its newline) is followed
/// by a last frame holding a whole record that continues `seq` without
/// its newline (the reference's load fails: "complete frame contains a
/// torn JSONL record"): `--repair` cuts the torn start, ends each whole
/// record with its newline (the original in the quarantine folder), and
/// the reference then loads every whole record.
#[test]
fn a_torn_start_before_a_whole_last_record_keeps_the_record() {
    let (text, ends) = split_case(4);
    let head = frames_cut(&text[..ends[2]], &[ends[0], ends[1]]).concat();
    let e2 = &text[ends[2]..ends[3] - 1];
    // The line after the torn start, with the seq that continues.
    let e3 = text[ends[3]..].trim_end().replace("\"seq\":3", "\"seq\":2");
    let torn = &e2[..20];
    // (what, the last frames, the text the repair leaves)
    let cases = [
        (
            "a torn start",
            [frame(torn), frame(&e3)].concat(),
            format!("{}{e3}\n", &text[..ends[2]]),
        ),
        (
            "a whole record",
            [frame(e2), frame(text[ends[3]..].trim_end())].concat(),
            text.clone(),
        ),
    ];
    for (what, tail, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join("session.jsonl.zstd");
        let original = [head.clone(), tail].concat();
        fs::write(&transcript, &original).unwrap();
        assert_splitcase_torn(&root, what);

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{what}: {report}");
        let f = &report["findings"][0];
        assert_eq!(f["kind"], "split_line", "{what}: {report}");
        assert!(
            f["detail"].as_str().unwrap().contains("--repair ends it"),
            "{what}: {f}"
        );
        assert_splitcase_repair_keeps(tmp.path(), &root, &original, &head, &want, what);
    }
}

/// A transcript that is only its header line, whole but without its
/// newline: in one frame or split over three (the reference's `list()`
/// fails for the whole root), or raw (its load fails, "empty or
/// header-less session log"). `--repair` ends the line with its newline
/// (the original in the quarantine folder): the reference then lists the
/// root and loads the session, with no events. It used to fail the
/// repair (zstd) or set the session aside (raw).
#[test]
fn a_header_line_alone_without_its_newline_is_ended() {
    let header = common::lines::header_line("splitcase", None, 1_767_614_400_000);
    let line = header.trim_end();
    let cases = [
        ("one frame", frame(line), "session.jsonl.zstd"),
        (
            "three frames",
            frames_cut(line, &[10, 40]).concat(),
            "session.jsonl.zstd",
        ),
        ("raw", line.as_bytes().to_vec(), "session.jsonl"),
    ];
    for (what, original, name) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join(name);
        fs::write(&transcript, &original).unwrap();
        let raw = name == "session.jsonl";
        let mode: [&std::ffi::OsStr; 2] = ["--compression".as_ref(), "none".as_ref()];
        let mode: &[&std::ffi::OsStr] = if raw { &mode } else { &[] };
        let (before, _) = oracle::run_oracle(&root, mode);
        if raw {
            assert_eq!(
                oracle::oracle_session(&before, "splitcase")["load"]["ok"],
                false,
                "{what}: {before}"
            );
        } else {
            assert_eq!(before["list"]["ok"], false, "{what}: {before}");
        }

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{what}: {report}");
        assert!(
            report["findings"][0]["detail"]
                .as_str()
                .unwrap()
                .contains("--repair ends it"),
            "{what}: {report}"
        );
        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 0, "{what}: {report}");
        let stored = if raw {
            fs::read(&transcript).unwrap()
        } else {
            zstd_dc(&transcript)
        };
        assert_eq!(String::from_utf8(stored).unwrap(), header, "{what}");
        if !raw {
            let stored = fs::read(&transcript).unwrap();
            assert_eq!(frame_len(&stored), stored.len(), "{what}: one frame");
        }
        assert_original_in_quarantine(&report, &original, what);
        let (after, out) = oracle::run_oracle(&root, mode);
        assert!(out.status.success(), "{what}: {after}");
        assert_eq!(after["list"]["ok"], true, "{what}: {after}");
        assert_eq!(
            oracle::oracle_session(&after, "splitcase")["load"]["ok"],
            true,
            "{what}: {after}"
        );
        assert_splitcase_events(&after, 0, what);
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 0, "{what}: clean after one repair: {report}");
    }
}

/// A `seq` gap: the finding's reference text says what the oracle's load
/// does: for a zstd transcript its error ("complete frame contains a torn
/// JSONL record"), for a raw one the truncation at the gap (it loads the
/// events before it). Reported only: `--repair` leaves it.
#[test]
fn a_seq_gap_names_what_the_references_load_does() {
    let (text, ends) = split_case(3);
    // seq 0, then 2 and 3: seq 1 is missing.
    let gapped = text[ends[1]..].replace("\"seq\":2", "\"seq\":3");
    let gapped = gapped.replacen("\"seq\":1", "\"seq\":2", 1);
    let lines = format!("{}{gapped}", &text[..ends[1]]);
    for raw in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let (name, bytes) = if raw {
            ("session.jsonl", lines.clone().into_bytes())
        } else {
            let cuts: Vec<usize> = lines.match_indices('\n').map(|(i, _)| i + 1).collect();
            (
                "session.jsonl.zstd",
                frames_cut(&lines, &cuts[..cuts.len() - 1]).concat(),
            )
        };
        fs::write(dir.join(name), &bytes).unwrap();
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{report}");
        let f = &report["findings"][0];
        assert_eq!(f["kind"], "seq_gap", "{report}");
        let reference = f["reference"].as_str().unwrap();
        if raw {
            let o = raw_oracle_report(&root);
            assert_splitcase_events(&o, 1, "raw");
            assert!(reference.contains("truncates the file at the gap"), "{f}");
        } else {
            let o = oracle::report(&root);
            let error = oracle::oracle_session(&o, "splitcase")["load"]["error"]
                .as_str()
                .unwrap()
                .to_string();
            let message = error.rsplit("session log: ").next().unwrap();
            assert!(reference.contains(message), "{f} vs the oracle's {error}");
        }
    }
}

/// The frames of `text` cut at the byte offsets `cuts` (ascending).
fn frames_cut(text: &str, cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(text.len());
    bounds
        .windows(2)
        .map(|w| frame(&text[w[0]..w[1]]))
        .collect()
}

/// A session `splitcase` of a header and `events` notes, as text, and
/// where each of its lines ends.
fn split_case(events: u64) -> (String, Vec<usize>) {
    let mut text = common::lines::header_line("splitcase", None, 1_767_614_400_000);
    for seq in 0..events {
        text.push_str(&format!(
            "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1767614400000,\"data\":{{\"n\":\"{}\"}},\"ignorable\":true}}\n",
            "x".repeat(40)
        ));
    }
    let ends = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    (text, ends)
}

/// A header frame that ends inside the header line (the reference's list
/// fails for the whole root), also cut into hundreds of small frames: the
/// finding says what the reference does, and the repair joins the run
/// into the header line's own frame and one frame of the lines after it.
#[test]
fn a_header_split_across_frames_is_joined_into_its_own_frame() {
    let (text, ends) = split_case(6);
    for cuts in [
        vec![40, ends[0], ends[1], ends[2]],
        (7..text.len()).step_by(7).collect(),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join("session.jsonl.zstd");
        fs::write(&transcript, frames_cut(&text, &cuts).concat()).unwrap();
        let (before, _) = oracle::run_oracle(&root, &[]);
        assert!(
            before["list"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("first frame is not exactly one header line")),
            "{before}"
        );

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{report}");
        let f = &report["findings"][0];
        assert_eq!(
            (&f["kind"], f["offset"].as_u64()),
            (&"split_line".into(), Some(0))
        );
        assert!(
            f["reference"].as_str().unwrap().starts_with("list() fails"),
            "{report}"
        );

        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 0, "{report}");
        assert_eq!(
            zstd_dc(&transcript),
            text.as_bytes(),
            "the same decoded bytes"
        );
        let stored = fs::read(&transcript).unwrap();
        let header = &text[..ends[0]];
        let first = zstd::zstd_safe::find_frame_compressed_size(&stored).unwrap();
        assert_eq!(
            zstd::decode_all(&stored[..first]).unwrap(),
            header.as_bytes(),
            "the header alone in the first frame"
        );
        let after = oracle::report(&root);
        assert_splitcase_events(&after, 6, "");
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 0, "clean after one repair: {report}");
    }
}

/// Fragments at the header line (helper 31): a header frame holding the
/// whole header without its newline before a frame of events, a stray
/// fragment frame (a torn start of a record) before the whole header
/// frame (alone, or holding events too), and one before a header split
/// across two frames. The reference's `list` fails for the whole root;
/// the doctor reports a `split_line` (no `header_less` that sets the
/// session aside), and `--repair` ends the header or cuts the fragment:
/// the decoded text is the header and every event, the header alone in
/// the first frame, the original in the quarantine folder, and the
/// reference lists and loads the session.
#[test]
fn header_line_fragments_are_ended_or_cut_and_the_session_stays() {
    let (text, ends) = split_case(4);
    let header = &text[..ends[0]];
    let h = header.trim_end();
    let events = &text[ends[0]..];
    let torn = r#"{"type":"x-note","seq":9,"ti"#;
    let cases: [(&str, Vec<Vec<u8>>); 4] = [
        ("header without its newline", vec![frame(h), frame(events)]),
        (
            "stray fragment, header frame",
            vec![frame(torn), frame(header), frame(events)],
        ),
        (
            "stray fragment, header frame holding events",
            vec![frame(torn), frame(&format!("{header}{events}"))],
        ),
        (
            "stray fragment, header split",
            vec![
                frame(torn),
                frame(&h[..30]),
                frame(&h[30..]),
                frame(&format!("\n{events}")),
            ],
        ),
    ];
    for (what, frames) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("_no-cwd").join("splitcase");
        fs::create_dir_all(&dir).unwrap();
        let transcript = dir.join("session.jsonl.zstd");
        let original = frames.concat();
        fs::write(&transcript, &original).unwrap();
        let (before, _) = oracle::run_oracle(&root, &[]);
        assert!(
            before["list"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("first frame is not exactly one header line")),
            "{what}: {before}"
        );

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{what}: {report}");
        let kinds: Vec<&str> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap())
            .collect();
        assert!(
            !kinds.is_empty() && kinds.iter().all(|k| *k == "split_line"),
            "{what}: {report}"
        );
        let f = &report["findings"][0];
        assert_eq!(f["remedy"], "repair", "{what}: {f}");
        assert!(
            f["reference"].as_str().unwrap().starts_with("list() fails"),
            "{what}: {f}"
        );

        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 0, "{what}: {report}");
        assert_eq!(report["summary"]["set_aside"], 0, "{what}: {report}");
        assert_eq!(
            String::from_utf8(zstd_dc(&transcript)).unwrap(),
            text,
            "{what}: {report}"
        );
        let stored = fs::read(&transcript).unwrap();
        let first = zstd::zstd_safe::find_frame_compressed_size(&stored).unwrap();
        assert_eq!(
            zstd::decode_all(&stored[..first]).unwrap(),
            header.as_bytes(),
            "{what}: the header alone in the first frame"
        );
        assert_original_in_quarantine(&report, &original, what);
        let after = assert_oracle_loads(&root, &[]);
        assert_splitcase_events(&after, 4, what);
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 0, "{what}: clean after one repair: {report}");
    }
}

/// Lines split across frames, then a last frame ending inside a line and
/// a torn frame after it (the reference's load fails: it cuts the torn
/// frame, then meets the torn record): one repair cuts the torn tail,
/// joins the runs that a frame completes and cuts the incomplete last
/// line; every complete line stays.
#[test]
fn split_lines_before_a_torn_tail_are_joined_in_one_repair() {
    let (text, ends) = split_case(8);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let dir = root.join("_no-cwd").join("splitcase");
    fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("session.jsonl.zstd");
    let frames = frames_cut(&text, &[ends[0], ends[0] + 30, ends[3], ends[3] + 20]);
    let mut bytes = frames.concat();
    bytes.truncate(bytes.len() - 15);
    fs::write(&transcript, &bytes).unwrap();
    assert_splitcase_torn(&root, "");

    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let split: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "split_line")
        .collect();
    assert_eq!(split.len(), 2, "{report}");
    assert!(split[0]["reference"]
        .as_str()
        .unwrap()
        .starts_with("reads it"));
    assert!(
        split[1]["reference"]
            .as_str()
            .unwrap()
            .starts_with("load fails"),
        "{report}"
    );

    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["summary"]["problems_left"], 0, "{report}");
    assert_eq!(
        zstd_dc(&transcript),
        &text.as_bytes()[..ends[3]],
        "{report}"
    );
    assert!(fs::read(&transcript).unwrap().starts_with(&frames[0]));
    let after = oracle::report(&root);
    assert_splitcase_events(&after, 3, "");
}

/// A split line before a second history: the join re-frames the file,
/// and the split of the histories then cuts at the frame that holds the
/// repeated `seq` in the file as the join left it (not where the scan saw
/// it), so both transcripts are whole frames and load.
#[test]
fn a_split_line_and_a_second_history_are_both_repaired() {
    let (text, ends) = split_case(6);
    let first: Vec<&str> = text.split_inclusive('\n').collect();
    let mut all = text.clone();
    for seq in 3..6 {
        all.push_str(&other_writer(first[seq + 1].trim_end(), seq as u64));
        all.push('\n');
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let project = root.join("_no-cwd");
    fs::create_dir_all(project.join("splitcase")).unwrap();
    let transcript = project.join("splitcase/session.jsonl.zstd");
    let cuts = [ends[0], ends[1] + 25, ends[3], ends[6], ends[6] + 50];
    fs::write(&transcript, frames_cut(&all, &cuts).concat()).unwrap();

    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["summary"]["problems_left"], 0, "{report}");
    assert_eq!(zstd_dc(&transcript), text.as_bytes(), "the first history");
    let forks = fork_dirs(&project, "splitcase");
    assert_eq!(forks.len(), 1, "{report}");
    let after = assert_oracle_loads(&root, &[]);
    assert_splitcase_events(&after, 6, "");
    let check = sessionfs(tmp.path(), &["check".as_ref(), root.as_os_str()]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// The `seq` after the last line of `lines` (no packed rows in these).
fn next_seq(lines: &[String]) -> u64 {
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    last["seq"].as_u64().unwrap() + 1
}

/// Stray fragments (tester F5): a frame holding the start of a record
/// whose rest never came, or a whole record without its newline, followed
/// by a frame that begins a record of its own. The reference joins them
/// into a line that is no record and fails to load either session; the
/// doctor reports a `split_line` saying so (not an invalid line that sets
/// the whole session aside), and `--repair` cuts the torn start or ends
/// the record, every other line kept: the reference then loads both, and
/// the quarantine holds the originals.
#[test]
fn a_stray_fragment_is_cut_or_ended_and_the_session_stays() {
    let (tmp, root) = case_copy("normal");
    let torn = root.join(format!("{APP}/Session-A/session.jsonl.zstd"));
    let unended = root.join(format!("{APP}/clock-skew/session.jsonl.zstd"));
    let record = |seq: u64| {
        format!(r#"{{"type":"x-note","seq":{seq},"time":1,"data":{{}},"ignorable":true}}"#)
    };
    let (a, b) = (lines_of(&torn), lines_of(&unended));
    let (sa, sb) = (next_seq(&a), next_seq(&b));
    let fragment = &record(sa)[..30];
    let mut bytes = fs::read(&torn).unwrap();
    bytes.extend(frame(fragment));
    bytes.extend(frame(&format!("{}\n", record(sa))));
    fs::write(&torn, bytes).unwrap();
    let mut bytes = fs::read(&unended).unwrap();
    bytes.extend(frame(&record(sb)));
    bytes.extend(frame(&format!("{}\n{}\n", record(sb + 1), record(sb + 2))));
    fs::write(&unended, bytes).unwrap();
    let before = tree_bytes(&root);

    let o = oracle::report(&root);
    for id in ["Session-A", "clock-skew"] {
        assert_eq!(
            oracle::oracle_session(&o, id)["load"]["ok"],
            false,
            "the reference loads {id} with its stray fragment"
        );
    }
    let (code, report) = doctor_json(tmp.path(), &root, &[]);
    assert_eq!(code, 1, "{report}");
    let got = findings(&report, &root);
    for (id, says) in [
        ("Session-A", "whose rest never came"),
        ("clock-skew", "without its newline"),
    ] {
        let rel = format!("{APP}/{id}/session.jsonl.zstd");
        assert!(got.contains(&("split_line".into(), rel.clone())), "{got:?}");
        assert!(
            !got.contains(&("invalid_line".into(), rel.clone())),
            "{got:?}"
        );
        let f = finding_at(&report, &rel);
        assert!(f["detail"].as_str().unwrap().contains(says), "{f}");
        assert_eq!(f["remedy"], "repair", "{f}");
    }

    let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let mut want_a = a.clone();
    want_a.push(record(sa));
    assert_eq!(lines_of(&torn), want_a, "the torn start cut, the rest kept");
    let mut want_b = b.clone();
    want_b.extend([record(sb), record(sb + 1), record(sb + 2)]);
    assert_eq!(lines_of(&unended), want_b, "the record ended, both kept");
    let o = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
    for id in ["Session-A", "clock-skew"] {
        assert_eq!(oracle::oracle_session(&o, id)["load"]["ok"], true, "{id}");
    }
    let run = PathBuf::from(report["quarantine"].as_str().unwrap());
    assert_quarantine_holds(&run, &root, &before);
}

/// Writes `bytes` as Session-A's transcript under `root` (in the
/// project [`APP`]) and checks that the doctor reports its two histories
/// for report only (`what` names the case) and that `--repair` leaves the
/// file byte for byte and forks nothing. Returns the finding.
fn assert_two_writers_left_in_place(tmp: &Path, root: &Path, bytes: &[u8], what: &str) -> Value {
    let id = "Session-A";
    let rel = format!("{APP}/{id}/session.jsonl.zstd");
    let path = root.join(&rel);
    fs::write(&path, bytes).unwrap();
    let (_, report) = doctor_json(tmp, root, &[]);
    let f = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["path"].as_str().unwrap().ends_with(&rel)
                && matches!(
                    f["kind"].as_str(),
                    Some("interleaved_writers" | "seq_duplicate")
                )
        })
        .unwrap_or_else(|| panic!("{what}: no two-writer finding: {report}"))
        .clone();
    assert_eq!(f["remedy"], "report", "{what}: {f}");
    let (_, report) = doctor_json(tmp, root, &["--repair"]);
    assert!(
        fs::read(&path).unwrap() == bytes,
        "{what}: the transcript changed: {report}"
    );
    assert!(
        fork_dirs(&root.join(APP), id).is_empty(),
        "{what}: a fork was made: {report}"
    );
    f
}

/// A copy of the `unpacked` case for the two-writer tests: the temporary
/// directory, the root, Session-A's lines, the index `k` of the line a
/// first writer's history ends at, the `seq` after it, and the frames of
/// the header and of lines 1..=k.
fn two_writer_case() -> (tempfile::TempDir, PathBuf, Vec<String>, usize, u64, Vec<u8>) {
    let (tmp, root) = case_copy("unpacked");
    let path = root.join(APP).join("Session-A").join("session.jsonl.zstd");
    let original = lines_of(&path);
    let k = (original.len() - 1) / 2;
    let t = next_seq(&original[..=k]);
    let mut head = frame(&joined(&original[..1]));
    head.extend(frame(&joined(&original[1..=k])));
    (tmp, root, original, k, t, head)
}

/// Two writers continuing from the same tail in turn, one event a frame
/// (A's T, B's T, A's T+1, B's T+1, ...): from T+1 on each line's `seq`
/// continues both histories, so a split would have to guess whose line is
/// whose (tester F1: the split took B's T+1 for A's and mixed the two).
/// The doctor says so, `--repair` leaves the transcript byte for byte and
/// forks nothing.
#[test]
fn interleaved_writers_that_cannot_be_told_apart_are_left_in_place() {
    let (tmp, root, original, k, t, head) = two_writer_case();
    let mut bytes = head;
    for i in 0..3 {
        bytes.extend(frame(&format!("{}\n", original[k + 1 + i])));
        bytes.extend(frame(&format!(
            "{}\n",
            other_writer(&original[k + 1 + i], t + i as u64)
        )));
    }
    let f = assert_two_writers_left_in_place(tmp.path(), &root, &bytes, "one event a frame");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("from seq {} on", t + 1)),
        "{f}"
    );
}

/// Histories the split cannot tell apart beyond the one-event-a-frame
/// case (helper 30): both writers' lines alternating inside one frame
/// (the frame is no one writer's batch), and a third writer's line that
/// continues neither history (it was put in the fork and renumbered,
/// hiding the gap). Each is reported only and left byte for byte.
#[test]
fn histories_mixed_in_one_frame_or_by_a_third_writer_are_left_in_place() {
    let (tmp, root, original, k, t, head) = two_writer_case();
    let a = |i: usize| format!("{}\n", original[k + 1 + i]);
    let b = |i: usize| format!("{}\n", other_writer(&original[k + 1 + i], t + i as u64));
    let c = format!("{}\n", other_writer(&original[k + 1], t));
    let cases: [(&str, Vec<String>); 2] = [
        (
            "alternating in one frame",
            vec![[a(0), b(0), a(1), b(1)].concat()],
        ),
        (
            "a third writer",
            vec![
                [a(0), a(1), a(2)].concat(),
                b(0),
                [c.clone(), a(3)].concat(),
            ],
        ),
    ];
    for (what, frames) in cases {
        let mut bytes = head.clone();
        for f in &frames {
            bytes.extend(frame(f));
        }
        assert_two_writers_left_in_place(tmp.path(), &root, &bytes, what);
    }
}

/// Stray fragments beside other pieces of lines (helper 30): a torn start
/// then a whole record without its newline (and the mirror image), and a
/// torn start then a line split across two frames. Only the torn start
/// goes: the whole record is ended with its newline, the split line is
/// joined, every other line stays, and the reference loads the session
/// (it lost the record, and the session no longer loaded).
#[test]
fn a_stray_fragment_beside_a_whole_record_or_a_split_line_keeps_them() {
    let (tmp, root) = case_copy("normal");
    let path = root.join(format!("{APP}/Session-A/session.jsonl.zstd"));
    let original = lines_of(&path);
    let k = original.len() / 2;
    let head = [
        frame(&joined(&original[..1])),
        frame(&joined(&original[1..k])),
    ]
    .concat();
    let tail = frame(&joined(&original[k + 1..]));
    let line = &original[k];
    let torn = &original[k + 1][..30];
    let cases: [(&str, Vec<Vec<u8>>); 3] = [
        ("torn start, whole record", vec![frame(torn), frame(line)]),
        ("whole record, torn start", vec![frame(line), frame(torn)]),
        (
            "torn start, split line",
            vec![
                frame(torn),
                frame(&line[..20]),
                frame(&format!("{}\n", &line[20..])),
            ],
        ),
    ];
    for (what, middle) in cases {
        let mut bytes = head.clone();
        for f in &middle {
            bytes.extend_from_slice(f);
        }
        // The split-line case ends its line itself.
        if what != "torn start, split line" {
            bytes.extend(frame(&joined(&original[k + 1..k + 2])));
            bytes.extend(frame(&joined(&original[k + 2..])));
        } else {
            bytes.extend_from_slice(&tail);
        }
        fs::write(&path, &bytes).unwrap();
        let (_, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(lines_of(&path), original, "{what}: {report}");
        let o = assert_oracle_loads(&root, &["ünïcödé-🚀"]);
        assert_eq!(
            oracle::oracle_session(&o, "Session-A")["load"]["ok"],
            true,
            "{what}"
        );
    }
}

/// A session of a header and one note whose line is `len` bytes with its
/// newline, in a zstd or raw root under `tmp`: the root and the
/// transcript.
fn long_last_line_case(tmp: &Path, len: usize, raw: bool) -> (PathBuf, PathBuf) {
    let root = tmp.join(if raw { "raw" } else { "zstd" });
    let dir = root.join("_no-cwd").join("longline");
    fs::create_dir_all(&dir).unwrap();
    let header = common::lines::header_line("longline", None, 1_767_614_400_000);
    let (open, close) = (
        r#"{"type":"x-note","seq":0,"time":1767614400000,"data":{"t":""#,
        r#""},"ignorable":true}"#,
    );
    let fill = "x".repeat(len - open.len() - close.len() - 1);
    let line = format!("{open}{fill}{close}\n");
    assert_eq!(line.len(), len);
    let (name, bytes) = if raw {
        ("session.jsonl", format!("{header}{line}").into_bytes())
    } else {
        (
            "session.jsonl.zstd",
            [frame(&header), frame(&line)].concat(),
        )
    };
    let transcript = dir.join(name);
    fs::write(&transcript, bytes).unwrap();
    (root, transcript)
}

/// A last line over 16 MiB, its newline counted (helper 31): the mount
/// and `sessionfs append` refuse to continue the session, so the doctor
/// reports it (the path, the line's offset and length, what to do),
/// `--repair` leaves it byte for byte, and the reference loads it. A
/// line of exactly 16 MiB is continued and not reported. Both encodings.
#[test]
fn a_last_line_over_16_mib_is_reported() {
    const MAX: usize = 16 << 20;
    for raw in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (root, transcript) = long_last_line_case(tmp.path(), MAX + 1, raw);
        let original = fs::read(&transcript).unwrap();
        let next = format!(
            "{}\n",
            r#"{"type":"x-note","seq":1,"time":1767614400001,"data":{},"ignorable":true}"#
        );
        let append = |root: &Path| {
            common::run_with_stdin(
                bin(),
                [
                    std::ffi::OsStr::new("append"),
                    root.as_os_str(),
                    std::ffi::OsStr::new("longline"),
                ],
                next.as_bytes(),
            )
        };
        let refused = append(&root);
        assert_eq!(refused.status.code(), Some(1), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("longer than"),
            "{refused:?}"
        );
        assert_eq!(fs::read(&transcript).unwrap(), original);

        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 1, "{report}");
        let f = &report["findings"][0];
        assert_eq!(f["kind"], "last_line_too_long", "{report}");
        assert_eq!(f["path"], transcript.to_str().unwrap(), "{report}");
        assert_eq!(f["remedy"], "report", "{report}");
        let header_len = common::lines::header_line("longline", None, 1_767_614_400_000).len();
        let detail = f["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("from byte {header_len} "))
                && detail.contains(&format!("is {} bytes", MAX + 1)),
            "{f}"
        );
        let want_offset = if raw {
            header_len
        } else {
            frame_len(&original)
        };
        assert_eq!(f["offset"].as_u64(), Some(want_offset as u64), "{f}");
        assert!(f["fix"].as_str().unwrap().contains("new session"), "{f}");
        let (code, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        assert_eq!(code, 1, "{report}");
        assert_eq!(fs::read(&transcript).unwrap(), original, "left as it is");
        let mode: [&std::ffi::OsStr; 2] = ["--compression".as_ref(), "none".as_ref()];
        let (o, _) = oracle::run_oracle(&root, if raw { &mode } else { &[] });
        assert_eq!(
            oracle::oracle_session(&o, "longline")["load"]["eventCount"].as_u64(),
            Some(1),
            "{o}"
        );

        let tmp = tempfile::tempdir().unwrap();
        let (root, _) = long_last_line_case(tmp.path(), MAX, raw);
        let (code, report) = doctor_json(tmp.path(), &root, &[]);
        assert_eq!(code, 0, "exactly 16 MiB: {report}");
        let taken = append(&root);
        assert!(taken.status.success(), "{taken:?}");
    }
}

/// The compressed length of the first frame of `bytes`.
fn frame_len(bytes: &[u8]) -> usize {
    zstd::zstd_safe::find_frame_compressed_size(bytes).unwrap()
}

/// A second writer's last line repeating the `seq` before it (tester
/// finding, helper 35), that line nested 1,000,000 levels deep or 15 or
/// 17 MiB in one frame: `--repair` either completes (the transcript keeps
/// the first history byte for byte, the fork holds the other line) or
/// leaves the store byte for byte, forks nothing and says what to do
/// instead of the same command. No line is parsed recursively, and a
/// frame too large to decode whole is streamed.
#[test]
fn a_deep_or_long_divergent_last_line_is_forked_or_left_in_place() {
    // `data.extra` set to `value` (JSON text) in `line`.
    fn with_data(line: &str, value: &str) -> String {
        let mut v: Value = serde_json::from_str(line).unwrap();
        v["data"]["extra"] = "EXTRA".into();
        serde_json::to_string(&v)
            .unwrap()
            .replacen("\"EXTRA\"", value, 1)
    }
    let deep = |line: &str| {
        let n = 1_000_000;
        with_data(line, &format!("{}{}", "[".repeat(n), "]".repeat(n)))
    };
    let long =
        |mib: usize| move |line: &str| with_data(line, &format!("\"{}\"", "x".repeat(mib << 20)));
    type Make = Box<dyn Fn(&str) -> String>;
    let cases: [(&str, Make, bool); 3] = [
        ("1,000,000 levels", Box::new(deep), false),
        ("15 MiB", Box::new(long(15)), true),
        ("17 MiB", Box::new(long(17)), true),
    ];
    for (what, make, forked) in cases {
        let (tmp, root, original, k, t, head) = two_writer_case();
        let id = "Session-A";
        let path = root.join(APP).join(id).join("session.jsonl.zstd");
        let mut bytes = head;
        bytes.extend(frame(&format!("{}\n", original[k + 1])));
        let committed = bytes.len();
        let b = make(&other_writer(&original[k + 1], t));
        bytes.extend(frame(&format!("{b}\n")));
        fs::write(&path, &bytes).unwrap();
        let before = tree_bytes(&root);
        let (_, report) = doctor_json(tmp.path(), &root, &["--repair"]);
        let rel = format!("{APP}/{id}/session.jsonl.zstd");
        let f = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str().unwrap().ends_with(&rel) && f["kind"] == "seq_duplicate")
            .unwrap_or_else(|| panic!("{what}: no seq_duplicate: {report}"))
            .clone();
        let forks = fork_dirs(&root.join(APP), id);
        if forked {
            assert!(f["done"].is_string(), "{what}: {f}");
            assert_eq!(fs::read(&path).unwrap(), bytes[..committed], "{what}");
            assert_eq!(forks.len(), 1, "{what}: {forks:?}");
            let got = lines_of(&forks[0].join("session.jsonl.zstd"));
            let last: Value = serde_json::from_str(got.last().unwrap()).unwrap();
            let want: Value = serde_json::from_str(&b).unwrap();
            assert_eq!(last["data"], want["data"], "{what}");
            assert_eq!(last["seq"], t + 1, "{what}");
        } else {
            assert!(f["done"].is_null(), "{what}: {f}");
            assert!(forks.is_empty(), "{what}: a fork was left: {forks:?}");
            let fix = f["fix"].as_str().unwrap();
            assert!(
                fix.contains("by hand") && fix.contains("left"),
                "{what}: the fix: {fix}"
            );
            assert!(
                !fix.contains("recursion") && fix.contains("levels deep"),
                "{what}: {fix}"
            );
            let after = tree_bytes(&root);
            let quarantine = report["quarantine"].as_str().map(PathBuf::from);
            let changed: Vec<&PathBuf> = after
                .keys()
                .chain(before.keys())
                .filter(|p| before.get(*p) != after.get(*p))
                .filter(|p| {
                    quarantine
                        .as_ref()
                        .is_none_or(|q| !root.join(p).starts_with(q))
                })
                .collect();
            assert!(changed.is_empty(), "{what}: the store changed: {changed:?}");
        }
    }
}
