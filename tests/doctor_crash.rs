//! `sessionfs doctor --repair` killed with SIGKILL at random moments, 50
//! times (issue 13, must show 3): every file of the root is as before or as
//! after its own repair, and running the repair again finishes it (the root
//! then equals the root of an uninterrupted repair).
//!
//! The root holds one of each repair: torn tails, a torn header, a
//! header-less session, a misplaced session, a transcript of the other
//! encoding, a stale publication temporary, an empty transcript, a
//! Syncthing conflict copy and a transcript two writers duplicated `seq` in.
//! `SESSIONFS_CRASH_RUNS` raises the count (scripts/torture.sh).

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{corpus_dir, zstd_dc};

const APP: &str = "--home-alice-work-app--";

fn sh(script: &str, args: &[&Path]) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn lines_of(path: &Path) -> Vec<String> {
    String::from_utf8(zstd_dc(path))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn other_writer(line: &str, seq: u64) -> String {
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line).unwrap();
    v.insert("seq".into(), seq.into());
    v.insert("time".into(), (v["time"].as_u64().unwrap() + 7).into());
    serde_json::to_string(&v).unwrap()
}

fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn frame(text: &str) -> Vec<u8> {
    zstd::encode_all(text.as_bytes(), 3).unwrap()
}

/// The template root (see the module doc).
fn template(at: &Path) {
    let c = corpus_dir();
    fs::create_dir_all(at).unwrap();
    sh(
        "cp -a \"$1/.\" \"$2\" && chmod -R u+w \"$2\"",
        &[&c.join("torn/root"), at],
    );
    let app = at.join(APP);
    for (case, rel) in [
        ("corrupt-header", "--home-alice-work-app--/headerless"),
        ("mismatch", "--home-alice-work-app--/raw-session"),
        ("stray-files", "--home-alice-work-app--/with-extras"),
        ("stray-files", "--home-alice-work-app--/zero-byte"),
        ("identity-moved", "--home-alice-work-other--/moved"),
    ] {
        let dest = at.join(rel);
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        sh(
            "cp -a \"$1\" \"$2\" && chmod -R u+w \"$2\"",
            &[&c.join(case).join("root").join(rel), &dest],
        );
    }
    // A conflict copy diverging after a common prefix.
    let dir = app.join("intact-control");
    let original = lines_of(&dir.join("session.jsonl.zstd"));
    let k = (original.len() - 1) / 2;
    let mut copy = original[..=k].to_vec();
    copy.extend((0..4).map(|i| other_writer(&original[k + 1 + i], (k + i) as u64)));
    fs::write(
        dir.join("session.sync-conflict-20260105-101010-ABCDEFG.jsonl.zstd"),
        frame(&joined(&copy)),
    )
    .unwrap();
    // Two writers: a second one continued from an older tail.
    let unpacked = corpus_dir()
        .join("unpacked/root")
        .join(APP)
        .join("clock-skew/session.jsonl.zstd");
    let original = lines_of(&unpacked);
    let k = (original.len() - 1) / 2;
    let mut bytes = frame(&joined(&original[..1]));
    bytes.extend(frame(&joined(&original[1..=k])));
    let b: Vec<String> = (0..6)
        .map(|i| other_writer(&original[k - 2 + i], (k - 3 + i) as u64))
        .collect();
    bytes.extend(frame(&joined(&b)));
    fs::create_dir_all(app.join("clock-skew")).unwrap();
    fs::write(app.join("clock-skew/session.jsonl.zstd"), bytes).unwrap();
}

/// Whether `p` is one of the lock protocol's files (`.sessionfs.lock` and
/// its waiters' and takeovers' files): a repair killed while holding the
/// lock leaves it for the next holder to take over.
fn is_lock_file(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(".sessionfs.lock"))
}

/// The lock protocol's files under `root`.
fn lock_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if is_lock_file(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Every file under `root` but temporaries (`*.tmp`) and the lock
/// protocol's files, by relative path.
fn state(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else if !p.to_string_lossy().ends_with(".tmp") && !is_lock_file(&p) {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// `sessionfs doctor --repair ROOT` with its state under `state_dir` and
/// its temporary directory (`TMPDIR`) the `tmp` beside it.
fn doctor(root: &Path, state_dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sessionfs"));
    c.args(["doctor".as_ref(), "--repair".as_ref(), root.as_os_str()])
        .env("XDG_STATE_HOME", state_dir)
        .env("TMPDIR", state_dir.with_file_name("tmp"))
        // A short lease: the rerun takes over the lock file a killed
        // repair left within a second, not 20 s.
        .env("SESSIONFS_LEASE_MS", "300")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn copy_root(from: &Path, to: &Path) {
    sh("cp -a \"$1\" \"$2\"", &[from, to]);
}

#[test]
fn kill_9_during_repairs() {
    let work = tempfile::tempdir().unwrap();
    let tpl = work.path().join("template");
    template(&tpl);
    fs::create_dir(work.path().join("tmp")).unwrap();
    let before = state(&tpl);
    // The root after an uninterrupted repair, and how long that takes.
    let full = work.path().join("full");
    copy_root(&tpl, &full);
    let t0 = Instant::now();
    let out = doctor(&full, &work.path().join("state-full"))
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "the uninterrupted repair left problems: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after = state(&full);
    assert_ne!(before, after);
    let runs: u64 = std::env::var("SESSIONFS_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let mut seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("seed {seed}, an uninterrupted repair takes {took:?}");
    let mut killed_mid = 0;
    for run in 0..runs {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Uniform over the repair's run time, start-up excluded (a quarter).
        let span = took.as_micros() as u64;
        let delay = Duration::from_micros(span / 4 + seed % (span - span / 4 + 1));
        let root = work.path().join(format!("run-{run}"));
        copy_root(&tpl, &root);
        let state_dir = work.path().join(format!("state-{run}"));
        let mut child = doctor(&root, &state_dir).spawn().unwrap();
        let killed_pid = u64::from(child.id());
        std::thread::sleep(delay);
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        child.wait().unwrap();
        let mid = state(&root);
        if mid != before && mid != after {
            killed_mid += 1;
        }
        for rel in before.keys().chain(after.keys()).chain(mid.keys()) {
            let now = mid.get(rel);
            assert!(
                now == before.get(rel) || now == after.get(rel),
                "run {run} (killed after {delay:?}, finished: {finished}): {} is neither as \
                 before nor as after its repair",
                rel.display()
            );
        }
        let again = doctor(&root, &state_dir)
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            again.status.success(),
            "run {run} (killed after {delay:?}): the repair run again did not finish: {}",
            String::from_utf8_lossy(&again.stdout)
        );
        let end = state(&root);
        assert_eq!(
            end.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "run {run}: the files after the second repair"
        );
        assert!(
            end == after,
            "run {run}: a file differs from the uninterrupted repair's"
        );
        // The rerun released every lock it took: a lock file left is the
        // killed repair's (on a session the rerun had no need to touch),
        // for the next writer to take over once its lease ends.
        for lock in lock_files(&root) {
            let body = sessionfs::store::lease::LockBody::parse(&fs::read(&lock).unwrap());
            assert_eq!(
                body.map(|b| u64::from(b.holder.pid)),
                Some(killed_pid),
                "run {run}: {} is not the killed repair's lock",
                lock.display()
            );
        }
        fs::remove_dir_all(&root).unwrap();
    }
    eprintln!("{killed_mid} of {runs} runs were killed between before and after");
    // A killed repair leaves nothing outside the root and its state either.
    let left: Vec<_> = fs::read_dir(work.path().join("tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "killed repairs left temporary files: {left:?}"
    );
    // The line scripts/torture.sh reads (every run passed the checks above).
    println!(
        "torture-summary: kills={runs} killed_mid_repair={killed_mid} | \
         neither_before_nor_after=0 unfinished_reruns=0 differing_files=0"
    );
}
