//! The commit protocol of shared roots (MOUNT.md "Shared roots") between
//! processes on a local root, through the store API:
//!
//! 1. several processes, each with its own holder identity, append to one
//!    transcript at once, retrying refused batches: every acknowledged line
//!    is stored exactly once and `seq` stays contiguous (decoded by the
//!    `zstd` tool, not by sessionfs);
//! 2. a holder killed with SIGKILL in the middle of a frame, while holding
//!    the lock: writers in other processes continue once its lease ends
//!    (bounded), exactly one of them cuts the torn frame and keeps it in
//!    quarantine, nothing acknowledged is lost;
//! 3. the same with the holder's wall clock 30 s ahead and the lock file's
//!    mtime 30 s in the future: nothing depends on either.
//!
//! Child processes are this test binary run again with
//! `--ignored --exact child_process` and a role in `SHARED_ROOT_CHILD`.
//! Leases are shortened with `SESSIONFS_LEASE_MS`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use sessionfs::store::append::{append_with, append_with_options, CommitHooks, CommitOptions};
use sessionfs::store::frame::encode_frame;
use sessionfs::store::lease::{LeaseConfig, LockBody, LOCK_NAME};
use sessionfs::store::publish::{header_line_from_fields, publish_session};
use sessionfs::store::{Encoding, StoreError};

const CHILD_ENV: &str = "SHARED_ROOT_CHILD";
/// The lease every process of these tests uses.
const LEASE_MS: u64 = 1500;

fn lease() -> LeaseConfig {
    LeaseConfig::from_lease(Duration::from_millis(LEASE_MS))
}

/// A new session (header and seq 0) under `root`; returns its transcript.
fn new_session(root: &Path, id: &str) -> PathBuf {
    let mut fields = serde_json::Map::new();
    fields.insert("version".into(), 0.into());
    fields.insert("id".into(), id.into());
    fields.insert("createdAt".into(), 1_767_603_600_000u64.into());
    fields.insert("cwd".into(), "/home/a/app".into());
    let header = header_line_from_fields(&fields);
    let first = event(0, "setup");
    publish_session(root, Encoding::Zstd, &header, first.as_bytes()).unwrap()
}

fn event(seq: u64, tag: &str) -> String {
    format!("{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1,\"data\":{{\"tag\":\"{tag}\"}},\"ignorable\":true}}\n")
}

/// Starts this binary as a child in `role`.
fn spawn_child(role: &str, envs: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, role)
    .env("SESSIONFS_LEASE_MS", LEASE_MS.to_string())
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn wait_exit(child: &mut Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "a child failed: {status}");
            return;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a child did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "a child process of the other tests of this file; not a test on its own"]
fn child_process() {
    let role = std::env::var(CHILD_ENV)
        .expect("run only by the tests of shared_root.rs, with SHARED_ROOT_CHILD set");
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let transcript = PathBuf::from(var("TRANSCRIPT"));
    match role.as_str() {
        "append" => child_append(
            &transcript,
            &var("WORKER"),
            Duration::from_millis(var("DURATION_MS").parse().unwrap()),
            Path::new(&var("ACK_FILE")),
        ),
        "crash" => child_crash(&transcript, Path::new(&var("MARKER"))),
        other => panic!("unknown role {other}"),
    }
}

/// Appends batches of 1–3 lines numbered from the tail until `duration`
/// has passed, retrying refusals; writes one line per acknowledged event
/// (`<worker>-<k>`) to `ack_file` after each acknowledgement, then
/// `refused N`.
fn child_append(transcript: &Path, worker: &str, duration: Duration, ack_file: &Path) {
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(ack_file)
        .unwrap();
    let deadline = Instant::now() + duration;
    let (mut k, mut refused) = (0u64, 0u64);
    while Instant::now() < deadline {
        let n = k % 3 + 1;
        let tags: Vec<String> = (0..n).map(|i| format!("{worker}-{}", k + i)).collect();
        let r = append_with(transcript, Encoding::Zstd, None, |tail| {
            Ok(tags
                .iter()
                .enumerate()
                .map(|(i, t)| event(tail.next_seq + i as u64, t))
                .collect::<String>()
                .into_bytes())
        });
        match r {
            Ok(_) => {
                for t in &tags {
                    writeln!(acks, "{t}").unwrap();
                }
                k += n;
            }
            Err(StoreError::LockBusy { .. }) => refused += 1,
            Err(e) => panic!("{worker}: unexpected refusal: {e}"),
        }
    }
    writeln!(acks, "refused {refused}").unwrap();
}

/// Takes the lock for a commit, writes half of its frame at the end,
/// fsyncs, tells the parent (the marker file) and waits to be killed.
fn child_crash(transcript: &Path, marker: &Path) {
    let marker = marker.to_path_buf();
    let hooks = CommitHooks {
        before_write: Some(Box::new(move |p: &Path| {
            let f = OpenOptions::new().read(true).write(true).open(p).unwrap();
            let len = f.metadata().unwrap().len();
            let frame = encode_frame(event(999, "never-acknowledged").as_bytes()).unwrap();
            f.write_all_at(&frame[..frame.len() / 2], len).unwrap();
            f.sync_all().unwrap();
            fs::write(&marker, len.to_string()).unwrap();
            loop {
                thread::sleep(Duration::from_secs(1));
            }
        })),
        ..CommitHooks::default()
    };
    let opts = CommitOptions {
        hooks: Some(std::sync::Arc::new(hooks)),
        ..CommitOptions::default()
    };
    let _ = append_with_options(transcript, Encoding::Zstd, None, &opts, |tail| {
        Ok(event(tail.next_seq, "crash").into_bytes())
    });
    unreachable!("the crash child is killed inside its commit");
}

/// The transcript's lines as the `zstd` tool decodes them.
fn decoded_lines(transcript: &Path) -> Vec<Value> {
    let text = common::zstd_dc(transcript);
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// Checks `seq` contiguous from 0 after the header and returns the count
/// of every tag.
fn tags_checked(transcript: &Path) -> BTreeMap<String, usize> {
    let lines = decoded_lines(transcript);
    assert_eq!(lines[0]["type"], "session");
    let mut counts = BTreeMap::new();
    for (i, line) in lines[1..].iter().enumerate() {
        assert_eq!(
            line["seq"].as_u64(),
            Some(i as u64),
            "seq contiguous at line {}",
            i + 2
        );
        let tag = line["data"]["tag"].as_str().unwrap().to_string();
        *counts.entry(tag).or_insert(0) += 1;
    }
    counts
}

/// Reads an ack file: (acknowledged tags, refusals).
fn read_acks(path: &Path) -> (Vec<String>, u64) {
    let text = fs::read_to_string(path).unwrap();
    let mut tags = Vec::new();
    let mut refused = None;
    for line in text.lines() {
        match line.strip_prefix("refused ") {
            Some(n) => refused = Some(n.parse().unwrap()),
            None => tags.push(line.to_string()),
        }
    }
    (
        tags,
        refused.expect("the worker finished and reported its refusals"),
    )
}

/// Runs `workers` append children for `duration`; returns each one's
/// acknowledged tags.
fn run_workers(
    transcript: &Path,
    scratch: &Path,
    prefix: &str,
    workers: usize,
    duration: Duration,
) -> Vec<Vec<String>> {
    let mut children = Vec::new();
    for w in 0..workers {
        let ack = scratch.join(format!("{prefix}{w}.acks"));
        let child = spawn_child(
            "append",
            &[
                ("TRANSCRIPT", transcript.display().to_string()),
                ("WORKER", format!("{prefix}{w}")),
                ("DURATION_MS", duration.as_millis().to_string()),
                ("ACK_FILE", ack.display().to_string()),
                ("SESSIONFS_HOST_ID", format!("host-{prefix}{w}")),
                ("SESSIONFS_BOOT_ID", format!("boot-{prefix}{w}")),
                (
                    "XDG_STATE_HOME",
                    scratch.join("state").display().to_string(),
                ),
            ],
        );
        children.push((child, ack));
    }
    let mut all = Vec::new();
    for (mut child, ack) in children {
        wait_exit(
            &mut child,
            duration + lease().wait + Duration::from_secs(30),
        );
        let (tags, refused) = read_acks(&ack);
        println!(
            "{}: {} lines acknowledged, {refused} batches refused",
            ack.display(),
            tags.len()
        );
        all.push(tags);
    }
    all
}

fn protocol_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(LOCK_NAME))
        .collect()
}

#[test]
fn racing_processes_store_every_acknowledged_line_exactly_once() {
    let root = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let transcript = new_session(root.path(), "race-1");
    let acked = run_workers(&transcript, scratch.path(), "w", 4, Duration::from_secs(4));
    let counts = tags_checked(&transcript);
    let mut total = 0;
    let all: usize = acked.iter().map(Vec::len).sum();
    for tags in &acked {
        // Fairness under any load of the machine: no writer starves.
        assert!(
            tags.len() >= 3 && tags.len() >= all / 16,
            "every worker makes progress: {} of {all}",
            tags.len()
        );
        for t in tags {
            assert_eq!(
                counts.get(t),
                Some(&1),
                "acknowledged line {t} stored exactly once"
            );
        }
        total += tags.len();
    }
    // Nothing stored twice, and nothing stored that was not acknowledged
    // (no commit failed after writing here).
    assert!(counts.values().all(|&c| c == 1), "no line stored twice");
    assert_eq!(
        counts.len(),
        total + 1,
        "the setup line and the acknowledged lines only"
    );
    assert!(protocol_files(transcript.parent().unwrap()).is_empty());
}

/// Kills a holder mid-frame, then lets three writers in other processes
/// race on, and checks the takeover (`envs`: extra environment of the
/// holder; `skew_lock_mtime`: seconds to move the lock's mtime ahead).
fn crash_and_continue(envs: &[(&str, String)], skew_lock_mtime: Option<i64>) {
    let root = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let transcript = new_session(root.path(), "crash-1");
    let dir = transcript.parent().unwrap().to_path_buf();
    let committed = fs::read(&transcript).unwrap();
    let marker = scratch.path().join("marker");
    let mut env: Vec<(&str, String)> = vec![
        ("TRANSCRIPT", transcript.display().to_string()),
        ("MARKER", marker.display().to_string()),
        ("SESSIONFS_HOST_ID", "crashing-host".into()),
        ("SESSIONFS_BOOT_ID", "boot-crash".into()),
    ];
    env.extend(envs.iter().cloned());
    let mut holder = spawn_child("crash", &env);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the crash child never reached its write"
        );
        assert!(
            holder.try_wait().unwrap().is_none(),
            "the crash child exited early"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let lock = LockBody::parse(&fs::read(dir.join(LOCK_NAME)).unwrap()).unwrap();
    assert_eq!(lock.holder.host, "crashing-host");
    assert_eq!(
        lock.len,
        Some(committed.len() as u64),
        "the length before the commit"
    );
    let torn = fs::read(&transcript).unwrap();
    assert!(torn.len() > committed.len(), "half a frame was written");
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    if let Some(secs) = skew_lock_mtime {
        let t = SystemTime::now() + Duration::from_secs(secs as u64);
        OpenOptions::new()
            .write(true)
            .open(dir.join(LOCK_NAME))
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    let killed = Instant::now();
    let cfg = lease();
    let acked = run_workers(
        &transcript,
        scratch.path(),
        "after",
        3,
        cfg.takeover_after() + Duration::from_secs(2),
    );
    let elapsed = killed.elapsed();
    let counts = tags_checked(&transcript);
    let mut total = 0;
    for tags in &acked {
        for t in tags {
            assert_eq!(
                counts.get(t),
                Some(&1),
                "acknowledged line {t} stored exactly once"
            );
        }
        total += tags.len();
    }
    assert!(
        total >= 3,
        "writers continued after the takeover: {total} lines"
    );
    assert!(!counts.contains_key("never-acknowledged"));
    assert!(!counts.contains_key("crash"));
    assert_eq!(counts.len(), total + 1);
    let stored = fs::read(&transcript).unwrap();
    assert_eq!(
        &stored[..committed.len()],
        &committed[..],
        "the committed prefix is intact"
    );
    // Exactly one taker cut the torn frame and kept it in quarantine.
    let qroot = scratch.path().join("state/sessionfs/quarantine");
    let kept: Vec<PathBuf> = common::walk_files(&qroot)
        .into_iter()
        .filter(|p| p.file_name().unwrap() != "note.txt")
        .collect();
    assert_eq!(kept.len(), 1, "one cut, kept once: {kept:?}");
    assert_eq!(fs::read(&kept[0]).unwrap(), &torn[committed.len()..]);
    assert!(
        protocol_files(&dir).is_empty(),
        "{:?}",
        protocol_files(&dir)
    );
    assert!(elapsed < cfg.takeover_after() + Duration::from_secs(2) + Duration::from_secs(30));
}

#[test]
fn a_holder_killed_mid_frame_is_taken_over_after_its_lease() {
    crash_and_continue(&[], None);
}

#[test]
fn a_holder_with_its_clock_30_s_ahead_is_taken_over_the_same_way() {
    crash_and_continue(&[("SESSIONFS_CLOCK_OFFSET_MS", "30000".into())], Some(30));
}

#[test]
fn the_takeover_waits_the_lease_on_the_takers_own_clock() {
    // One taker in this process: the wait is at least lease + margin from
    // its first look, whatever the lock's mtime says.
    let root = tempfile::tempdir().unwrap();
    let q = tempfile::tempdir().unwrap();
    let transcript = new_session(root.path(), "bound-1");
    let dir = transcript.parent().unwrap();
    let mut body = LockBody::parse(&{
        // A real body, written by a holder that stops at once.
        let cfg = LeaseConfig {
            renew_every: Duration::from_secs(3600),
            ..lease()
        };
        let g = sessionfs::store::lease::acquire(
            dir,
            &transcript,
            &cfg,
            sessionfs::store::fskind::CommitProtocol::Local,
            &sessionfs::store::lease::HolderId::current(),
        )
        .unwrap();
        let bytes = fs::read(dir.join(LOCK_NAME)).unwrap();
        std::mem::forget(g); // the holder "dies": no release
        bytes
    })
    .unwrap();
    body.wall_ms -= 3_600_000; // an hour in the past: must not matter
    fs::write(dir.join(LOCK_NAME), body.encode()).unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    OpenOptions::new()
        .write(true)
        .open(dir.join(LOCK_NAME))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let opts = CommitOptions {
        lease: Some(lease()),
        quarantine: Some(q.path().to_path_buf()),
        ..CommitOptions::default()
    };
    let t0 = Instant::now();
    append_with_options(&transcript, Encoding::Zstd, None, &opts, |t| {
        Ok(event(t.next_seq, "after").into_bytes())
    })
    .unwrap();
    let waited = t0.elapsed();
    assert!(waited >= lease().takeover_after(), "{waited:?}");
    assert!(
        waited < lease().takeover_after() + Duration::from_secs(2),
        "{waited:?}"
    );
    let tags: BTreeSet<String> = tags_checked(&transcript).into_keys().collect();
    assert!(tags.contains("after"));
}
