//! `sessionfs check`: finds what the corpus' damaged stores hold, and
//! `--repair` truncates a torn tail so that `zstd -dc` reads exactly the
//! committed prefix the reference's `readRaw` returned.

mod common;

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

use common::corpus_copy;
use common::lines::header_line_version;
use common::shared_dir as shared;

/// `$XDG_STATE_HOME` of the commands run here (the quarantine folder of
/// `--repair` is under it): in the build's scratch folder, not `$HOME`.
const QUARANTINE_HOME: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/check-cli-state");

fn check(args: &[&Path], repair: bool) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionfs"));
    // Repairs copy what they cut to the quarantine folder: keep it out of $HOME.
    cmd.env("XDG_STATE_HOME", QUARANTINE_HOME);
    cmd.arg("check");
    if repair {
        cmd.arg("--repair");
    }
    let out = cmd.args(args).output().expect("run sessionfs check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn clean_store_passes() {
    let (code, out) = check(&[&shared().join("corpus/normal/root")], false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok\t")).count(),
        23,
        "{out}"
    );
}

#[test]
fn damage_is_reported_with_its_offset() {
    let (code, out) = check(&[&shared().join("corpus/corrupt-tail/root")], false);
    assert_eq!(code, 1);
    assert!(
        out.contains("byte 1098: frame failed validation")
            && out.contains("damaged in the middle: verifiable data resumes at byte 4317"),
        "{out}"
    );
    assert!(out.contains("byte 6527: invalid frame magic"), "{out}");
    let (code, out) = check(&[&shared().join("corpus/torn/root")], false);
    assert_eq!(code, 1);
    assert_eq!(out.matches("torn last frame").count(), 5, "{out}");
}

#[test]
fn repair_truncates_a_torn_tail_to_the_committed_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let rel = "--home-alice-work-app--/torn-multiblock-mid/session.jsonl.zstd";
    let file = dir.path().join("session.jsonl.zstd");
    std::fs::copy(shared().join("corpus/torn/root").join(rel), &file).unwrap();
    let (code, out) = check(&[&file], true);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("truncated (repaired)"), "{out}");
    let plain = Command::new("zstd").arg("-dc").arg(&file).output().unwrap();
    assert!(plain.status.success(), "zstd -dc fails after repair");
    let sha = format!("{:x}", Sha256::digest(&plain.stdout));
    assert_eq!(
        sha,
        common::expected_readraw_sha("torn", "torn-multiblock-mid")
    );
    assert_eq!(check(&[&file], false).0, 0);
}

// ---- Helpers of the tests below: private stores in temporary directories. ----

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args(args)
        .env("XDG_STATE_HOME", QUARANTINE_HOME)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sessionfs")
}

/// `check [--repair] PATH`: exit status, stdout, stderr.
fn check_full(path: &Path, repair: bool) -> (i32, String, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["check".as_ref()];
    if repair {
        args.push("--repair".as_ref());
    }
    args.push(path.as_os_str());
    let out = run(&args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn header_line(id: &str, cwd: &str, version: u64) -> String {
    header_line_version(id, Some(cwd), 1_767_600_000_000, version)
}

const EVENTS: &str = "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n\
                      {\"type\":\"turn/end\",\"seq\":1,\"time\":2,\"data\":{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}}\n";

/// A valid zstd transcript of session `id` in `cwd`: header frame, one batch.
fn zstd_transcript(id: &str, cwd: &str, version: u64) -> Vec<u8> {
    use sessionfs::store::frame::encode_frame;
    let mut bytes = encode_frame(header_line(id, cwd, version).as_bytes()).unwrap();
    bytes.extend(encode_frame(EVENTS.as_bytes()).unwrap());
    bytes
}

/// A zstd skippable frame holding `payload`.
fn skippable_frame(payload: &[u8]) -> Vec<u8> {
    let mut bytes = 0x184D_2A50u32.to_le_bytes().to_vec();
    bytes.extend((payload.len() as u32).to_le_bytes());
    bytes.extend(payload);
    bytes
}

fn status_of<'a>(out: &'a str, path: &Path) -> Option<&'a str> {
    let path = path.display().to_string();
    out.lines().find_map(|l| {
        let mut cells = l.split('\t');
        let status = cells.next()?;
        (cells.next()? == path).then_some(status)
    })
}

// ---- Defect 1: a skippable frame is a problem, never "repaired". ----

#[test]
fn skippable_frame_is_a_problem_and_is_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("session.jsonl.zstd");
    let mut bytes = zstd_transcript("s", "/w", 0);
    let at = bytes.len();
    bytes.extend(skippable_frame(b"metadata"));
    std::fs::write(&file, &bytes).unwrap();
    for repair in [false, true] {
        let (code, out, _) = check_full(&file, repair);
        assert_eq!(code, 1, "repair {repair}: {out}");
        assert_eq!(status_of(&out, &file), Some("PROBLEM"), "{out}");
        assert!(
            out.contains(&format!(
                "skippable frame at byte {at}: the reference refuses it"
            )),
            "{out}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "the file was changed");
    }

    // A torn tail after it is repaired, and the skippable frame still
    // leaves the file a problem.
    let mut torn = bytes.clone();
    let tail = sessionfs::store::frame::encode_frame(EVENTS.as_bytes()).unwrap();
    torn.extend(&tail[..tail.len() / 2]);
    std::fs::write(&file, &torn).unwrap();
    let (code, out, _) = check_full(&file, true);
    assert_eq!(code, 1, "{out}");
    assert_eq!(status_of(&out, &file), Some("PROBLEM"), "{out}");
    assert!(out.contains("truncated (repaired)"), "{out}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes);

    // Clean is "ok", a repair that leaves nothing wrong is "repaired".
    let clean = zstd_transcript("s", "/w", 0);
    std::fs::write(&file, &clean).unwrap();
    let (code, out, _) = check_full(&file, true);
    assert_eq!((code, status_of(&out, &file)), (0, Some("ok")), "{out}");
    let mut torn = clean.clone();
    torn.extend(&tail[..5]);
    std::fs::write(&file, &torn).unwrap();
    let (code, out, _) = check_full(&file, true);
    assert_eq!(
        (code, status_of(&out, &file)),
        (0, Some("repaired")),
        "{out}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), clean);
}

/// 100,000 skippable frames after a valid transcript: one note (where the
/// run starts and ends, how many, their bytes) and one problem in the
/// summary, not one per frame; the verified prefix is still reported.
#[test]
fn many_skippable_frames_are_one_problem() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let session = root.join("--w--/s");
    std::fs::create_dir_all(&session).unwrap();
    let file = session.join("session.jsonl.zstd");
    let mut bytes = zstd_transcript("s", "/w", 0);
    let at = bytes.len();
    for _ in 0..100_000 {
        bytes.extend(skippable_frame(b""));
    }
    std::fs::write(&file, &bytes).unwrap();
    let plain = header_line("s", "/w", 0).len() + EVENTS.len();
    for target in [&root, &file] {
        let (code, out, err) = check_full(target, false);
        assert_eq!(code, 1, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            [
                format!(
                    "PROBLEM\t{}\t2 frames, {plain} bytes decompressed",
                    file.display()
                ),
                format!(
                    "\t100000 skippable frames at bytes {at}..{} (800000 bytes): the reference \
                     refuses them (sessionfs skips them); check does not remove them (committed \
                     data is never rewritten); `sessionfs doctor` says what to do",
                    bytes.len()
                ),
            ],
            "{out}"
        );
        if target == &root {
            assert!(
                err.contains("1 transcript checked, 1 problem found"),
                "{err}"
            );
        }
    }
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "the file was changed");
}

// ---- Defect 2: a file torn inside its header frame is never truncated. ----

#[test]
fn repair_refuses_a_file_torn_inside_its_header_frame() {
    let (_tmp, root) = corpus_copy("torn");
    let file = root.join("--home-alice-work-app--/torn-in-header-frame/session.jsonl.zstd");
    let before = std::fs::read(&file).unwrap();
    assert!(!before.is_empty());
    let want = "torn inside its header frame: nothing committed; \
                restore it from a backup or remove the session directory";
    let (code, out, _) = check_full(&file, true);
    assert_eq!(code, 1, "{out}");
    assert_eq!(status_of(&out, &file), Some("PROBLEM"), "{out}");
    assert!(out.contains(want), "{out}");
    assert!(!out.contains("repaired"), "{out}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file was changed"
    );

    // Over the whole root the other torn files are repaired, this one not.
    let (code, out, _) = check_full(&root, true);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("truncated (repaired)").count(), 4, "{out}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file was changed"
    );

    // The same after a skippable frame: it does not count as a header.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("session.jsonl.zstd");
    let mut bytes = skippable_frame(b"x");
    bytes.extend(&before);
    std::fs::write(&file, &bytes).unwrap();
    let (code, out, _) = check_full(&file, true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(want), "{out}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
}

// ---- Defect 3: raw transcripts. ----

#[test]
fn raw_root_is_checked() {
    let (code, out, _) = check_full(&shared().join("corpus/raw/root"), false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok\t")).count(),
        23,
        "{out}"
    );
    // Besides the ok lines, one note: the reference's refusal of the
    // Windows cwd (the doctor's content check), not a problem.
    let notes: Vec<&str> = out.lines().filter(|l| !l.starts_with("ok\t")).collect();
    assert_eq!(notes.len(), 1, "{out}");
    assert!(notes[0].starts_with("\tcwd_rejected"), "{out}");
    let one = shared().join("corpus/raw/root/--home-alice-work-app--/Session-A/session.jsonl");
    let (code, out, _) = check_full(&one, false);
    assert_eq!((code, status_of(&out, &one)), (0, Some("ok")), "{out}");
}

#[test]
fn raw_damage_is_reported_with_lines_and_offsets_and_torn_tails_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("session.jsonl");
    let header = header_line("r", "/w", 0);
    let good = format!("{header}{EVENTS}");
    let bad1 = "not json\n";
    let bad2 = "[1]\n";
    let text = format!("{good}{bad1}{bad2}{{\"type\":\"turn");
    std::fs::write(&file, &text).unwrap();
    let (code, out, _) = check_full(&file, false);
    assert_eq!(code, 1, "{out}");
    assert_eq!(status_of(&out, &file), Some("PROBLEM"), "{out}");
    assert!(
        out.contains(&format!("line 4 (byte {}): not valid JSON", good.len())),
        "{out}"
    );
    let at2 = good.len() + bad1.len();
    assert!(
        out.contains(&format!("line 5 (byte {at2}): not a JSON object")),
        "{out}"
    );
    let torn_at = at2 + bad2.len();
    assert!(
        out.contains(&format!(
            "torn last line at byte {torn_at}: run with --repair"
        )),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    // --repair cuts the torn tail only; the bad lines stay a problem.
    let (code, out, _) = check_full(&file, true);
    assert_eq!(
        (code, status_of(&out, &file)),
        (1, Some("PROBLEM")),
        "{out}"
    );
    assert_eq!(std::fs::metadata(&file).unwrap().len(), torn_at as u64);

    // Only a torn tail: repaired, then ok.
    std::fs::write(&file, format!("{good}{{\"type\"")).unwrap();
    let (code, out, _) = check_full(&file, true);
    assert_eq!(
        (code, status_of(&out, &file)),
        (0, Some("repaired")),
        "{out}"
    );
    assert!(out.contains("truncated (repaired)"), "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), good);
    let (code, out, _) = check_full(&file, false);
    assert_eq!((code, status_of(&out, &file)), (0, Some("ok")), "{out}");

    // A bad header.
    std::fs::write(
        &file,
        format!("{{\"type\":\"turn/start\",\"seq\":0}}\n{EVENTS}"),
    )
    .unwrap();
    let (code, out, _) = check_full(&file, false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 1 (byte 0): invalid header"), "{out}");

    // Torn inside the header line: refused, unchanged.
    let torn_header = &header[..20];
    std::fs::write(&file, torn_header).unwrap();
    let (code, out, _) = check_full(&file, true);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("torn inside its header line: nothing committed"),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), torn_header);

    // Empty.
    std::fs::write(&file, "").unwrap();
    let (code, out, _) = check_full(&file, false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("empty"), "{out}");
}

#[test]
fn a_zstd_transcript_in_a_raw_root_is_checked_and_reported() {
    let (_tmp, root) = corpus_copy("raw");
    let dir = root.join("--w--/zs");
    std::fs::create_dir_all(&dir).unwrap();
    let zs = dir.join("session.jsonl.zstd");
    std::fs::write(&zs, zstd_transcript("zs", "/w", 0)).unwrap();
    let (code, out, _) = check_full(&root, false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("\t{}\t2 frames", zs.display())),
        "{out}"
    );
    assert!(out.contains("PROBLEM\t"), "{out}");
}

// ---- Defect 4: what the mount and list refuse, and paths that are no root. ----

#[test]
fn root_reports_what_the_mount_refuses() {
    for (case, needle) in [
        ("flat", "legacy-flat.jsonl.zstd"),
        ("duplicate", "dup-id"),
        (
            "identity-moved",
            "--home-alice-work-other--/moved/session.jsonl.zstd",
        ),
        ("mismatch", "raw-session/session.jsonl"),
    ] {
        let (_tmp, root) = corpus_copy(case);
        let (code, out, _) = check_full(&root, false);
        assert_eq!(code, 1, "{case}: {out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("PROBLEM\t") && l.contains(needle)),
            "{case}: {out}"
        );
    }

    let (_tmp, root) = corpus_copy("normal");
    let project = root.join("--home-alice-work-app--");
    // A directory under a transcript's name.
    let as_dir = project.join("dir-as-transcript/session.jsonl.zstd");
    std::fs::create_dir_all(&as_dir).unwrap();
    // A symbolic link loop as transcript.
    let looped = project.join("looped");
    std::fs::create_dir_all(&looped).unwrap();
    std::os::unix::fs::symlink("session.jsonl.zstd", looped.join("session.jsonl.zstd")).unwrap();
    let (code, out, _) = check_full(&root, false);
    assert_eq!(code, 1, "{out}");
    for bad in [&as_dir, &looped.join("session.jsonl.zstd")] {
        assert_eq!(
            status_of(&out, bad),
            Some("PROBLEM"),
            "{}: {out}",
            bad.display()
        );
    }
    assert!(out.contains("not a regular file: a directory"), "{out}");
    assert!(
        out.contains("not a regular file: a symbolic link loop"),
        "{out}"
    );
}

/// A copy of a session in a project directory whose name is not UTF-8
/// is refused by `list` and the mount as misplaced; `check` and the doctor
/// report it too, and the command they suggest names the real path.
#[test]
fn a_misplaced_copy_under_a_project_name_that_is_not_utf8_is_reported() {
    use std::os::unix::ffi::OsStrExt;
    let (_tmp, root) = corpus_copy("normal");
    let project = root.join(std::ffi::OsStr::from_bytes(b"--x\xff--"));
    let copy = project.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(
        root.join("--home-alice-work-app--/Session-A/session.jsonl.zstd"),
        copy.join("session.jsonl.zstd"),
    )
    .unwrap();
    let (code, out, _) = check_full(&root, false);
    assert_eq!(code, 1, "{out}");
    let line = out
        .lines()
        .skip_while(|l| !(l.starts_with("PROBLEM\t") && l.contains("--x\\xff--/copy/")))
        .nth(1)
        .unwrap_or_else(|| panic!("no problem reported for the copy: {out}"));
    assert!(line.contains("misplaced"), "{out}");
    let doctor = run(&[std::ffi::OsStr::new("doctor"), root.as_os_str()]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report
            .lines()
            .any(|l| l.contains("misplaced") && l.contains("--x\\xff--/copy/")),
        "{report}"
    );
    // The suggested fix reads back as the real path in bash.
    let fix = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("fix: sessionfs doctor --repair "))
        .filter(|f| f.contains("xff"))
        .unwrap_or_else(|| panic!("no fix for the copy: {report}"));
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("printf %s {fix}"))
        .output()
        .unwrap();
    assert_eq!(
        out.stdout,
        copy.join("session.jsonl.zstd").as_os_str().as_bytes()
    );
}

#[test]
fn paths_that_are_no_transcript_and_no_root_fail_with_what_they_are() {
    let (_tmp, root) = corpus_copy("normal");
    let session = root.join("--home-alice-work-app--/Session-A");
    let as_dir = root.join("--w--/d/session.jsonl.zstd");
    std::fs::create_dir_all(&as_dir).unwrap();
    let fifo = root.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let looped = root.join("loop");
    std::os::unix::fs::symlink("loop", &looped).unwrap();
    for (path, what) in [
        (as_dir.as_path(), "not a regular file"),
        (fifo.as_path(), "not a regular file: a FIFO"),
        (looped.as_path(), "symbolic link loop"),
        (session.as_path(), "a session directory"),
        (session.parent().unwrap(), "a project directory"),
        (&root.join("missing"), "no such file"),
        (&shared().join("spec"), "not a session store root"),
    ] {
        let (code, out, _) = check_full(path, false);
        assert_eq!(code, 1, "{}: {out}", path.display());
        assert!(out.starts_with("PROBLEM\t"), "{}: {out}", path.display());
        assert!(out.contains(what), "{}: {out}", path.display());
    }
    // An empty directory is an empty store: said so, and fine.
    let empty = tempfile::tempdir().unwrap();
    let (code, out, _) = check_full(empty.path(), false);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok\t"), "{out}");
}

// ---- Defect 5: header errors in words, not Debug formatting. ----

#[test]
fn header_errors_are_reported_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("session.jsonl.zstd");
    std::fs::write(&file, zstd_transcript("v1", "/w", 1)).unwrap();
    let raw = dir.path().join("session.jsonl");
    std::fs::write(&raw, format!("{}{EVENTS}", header_line("v1", "/w", 1))).unwrap();
    for path in [&file, &raw] {
        let (code, out, _) = check_full(path, false);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("unsupported format version: header version 1 (only 0 is supported)"),
            "{out}"
        );
        assert!(!out.contains("UnsupportedVersion("), "{out}");
    }
    let mut bytes = sessionfs::store::frame::encode_frame(b"{\"type\":\"turn/start\"}\n").unwrap();
    bytes.extend(sessionfs::store::frame::encode_frame(EVENTS.as_bytes()).unwrap());
    std::fs::write(&file, bytes).unwrap();
    let (code, out, _) = check_full(&file, false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("invalid header: first line is not a session header"),
        "{out}"
    );
    assert!(!out.contains("Invalid("), "{out}");
}

// ---- Defects 6 and 7: `list`. ----

#[test]
fn list_json_into_a_closed_pipe_ends_quietly() {
    use sessionfs::store::naming::{encode_id, project_dir_name};
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // Far more JSON than a pipe holds, so that the writer meets the
    // closed pipe.
    for i in 0..600 {
        let id = format!("session-{i:04}");
        let dir = root
            .join(project_dir_name(Some("/w")).unwrap())
            .join(encode_id(&id).unwrap());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("session.jsonl.zstd"),
            zstd_transcript(&id, "/w", 0),
        )
        .unwrap();
    }
    for json in [true, false] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionfs"));
        cmd.arg("list").arg(&root).env_remove("RUST_LOG");
        if json {
            cmd.arg("--json");
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 10];
        stdout.read_exact(&mut first).unwrap();
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "json {json}: {stderr}");
        assert!(stderr.is_empty(), "json {json}: {stderr}");
    }
}

#[test]
fn list_logs_no_identity_root_line_by_default() {
    let out = run(&[
        "list".as_ref(),
        shared().join("corpus/normal/root").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("identity root"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// `check --repair` takes the writers' lock file before it cuts (MOUNT.md,
/// Shared roots): while a live writer holds it, the torn tail is left as
/// it is and the command fails saying the lock is busy; once the writer
/// is gone the repair goes ahead.
#[test]
fn repair_waits_for_a_writer_holding_the_lock_file() {
    use sessionfs::store::fskind::CommitProtocol;
    use sessionfs::store::lease::{self, HolderId, LeaseConfig};
    let dir = tempfile::tempdir().unwrap();
    let rel = "--home-alice-work-app--/torn-multiblock-mid/session.jsonl.zstd";
    let file = dir.path().join("session.jsonl.zstd");
    std::fs::copy(shared().join("corpus/torn/root").join(rel), &file).unwrap();
    let torn = std::fs::read(&file).unwrap();
    // A live writer: its lease (300 ms) is renewed while the guard lives.
    let cfg = LeaseConfig::from_lease(std::time::Duration::from_millis(300));
    let guard = lease::acquire(
        dir.path(),
        &file,
        &cfg,
        CommitProtocol::Local,
        &HolderId::current(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args(["check".as_ref(), "--repair".as_ref(), file.as_os_str()])
        .env("XDG_STATE_HOME", QUARANTINE_HOME)
        .env("SESSIONFS_LEASE_MS", "300")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(".sessionfs.lock"), "names the lock: {text}");
    assert_eq!(std::fs::read(&file).unwrap(), torn, "nothing cut");
    drop(guard);
    let (code, out) = check(&[&file], true);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("truncated (repaired)"), "{out}");
    assert!(!dir.path().join(".sessionfs.lock").exists());
}

/// A complete frame in the middle that fails its checksum is damage in
/// the middle, as the mount reads it: `check` names the frame and where
/// verifiable data resumes, which is the next frame start from which
/// `zstd -dc` decodes the rest.
#[test]
fn a_corrupt_middle_frame_is_reported_with_where_data_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let rel = "--home-alice-work-app--/fork-of-3f6c1d2e/session.jsonl.zstd";
    let file = dir.path().join("session.jsonl.zstd");
    let mut bytes = std::fs::read(shared().join("corpus/normal/root").join(rel)).unwrap();
    let flip = bytes.len() / 3;
    bytes[flip] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    // Independent expectation: frame starts are zstd magics; data resumes
    // at the first one after the flipped byte whose rest zstd decodes.
    let magic = [0x28u8, 0xb5, 0x2f, 0xfd];
    let starts: Vec<usize> = (0..bytes.len() - 3)
        .filter(|&i| bytes[i..i + 4] == magic)
        .collect();
    let damaged_at = *starts.iter().rev().find(|&&s| s <= flip).unwrap();
    let resumes = starts.iter().copied().find(|&s| {
        if s <= flip {
            return false;
        }
        let rest = dir.path().join("rest.zst");
        std::fs::write(&rest, &bytes[s..]).unwrap();
        Command::new("zstd")
            .args(["-tq".as_ref(), rest.as_os_str()])
            .status()
            .unwrap()
            .success()
    });
    let resumes = resumes.expect("a verifiable frame after the damage");
    let (code, out) = check(&[&file], false);
    assert_eq!(code, 1, "{out}");
    let want = format!(
        "byte {damaged_at}: frame failed validation: Data corruption detected; damaged in the \
         middle: verifiable data resumes at byte {resumes}"
    );
    assert!(out.contains(&want), "want {want:?} in {out}");
    let problems = out.lines().filter(|l| l.starts_with('\t')).count();
    assert_eq!(problems, 1, "one problem line: {out}");
}
