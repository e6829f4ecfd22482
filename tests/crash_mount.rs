//! Crash tests (issue 9, "Must show" 3): `kill -9` of the mount daemon
//! while a writer appends batches of 1 line to 1 MiB through it, each batch
//! written and fsynced through one O_APPEND descriptor.
//!
//! Every kill comes after at least one acknowledged batch (write and fsync
//! returned 0), while the next batch is under way. After each kill the
//! transcript on disk, decoded by `zstd -dc` (not by sessionfs), must hold
//! the header, every acknowledged line exactly once and in order, and then
//! at most a prefix of the batch that was under way; nothing else. A torn
//! last frame (the kill landed inside the daemon's write) is repaired with
//! `sessionfs check --repair`, the documented procedure, before the next
//! mount appends. At the end every session is copied into one root and the
//! reference oracle reads and loads all of them in one run.
//!
//! `SESSIONFS_CRASH_KILLS` sets the number of kills (default 30, as in CI;
//! `scripts/torture.sh` runs 1,000) and `SESSIONFS_CRASH_SEED` the seed of
//! the random batch sizes and kill points (printed, so a failure replays).
//! The last line printed, `torture-summary: TRIED | BROKE`, is what
//! `scripts/torture.sh` puts into its table (any loss, duplicate or foreign
//! byte fails the test first, so a printed summary has them at 0).

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use serde_json::Value;
use sessionfs::store::naming::{encode_id, project_dir_name};

use common::oracle::oracle_dir;
use common::{sha256_hex, zstd_dc, Mount};

const CWD: &str = "/home/alice/crash";
const VIEW: &str = "session.jsonl";
const ZSTD_NAME: &str = "session.jsonl.zstd";
/// A new session is started after this many kills, so that no transcript
/// grows without bound in the long run.
const KILLS_PER_SESSION: usize = 25;
/// Largest batch written between two fsyncs.
const MAX_BATCH: usize = 1 << 20;
/// Every mount lives far shorter than this.
const WATCHDOG: Duration = Duration::from_secs(120);

fn kills() -> usize {
    std::env::var("SESSIONFS_CRASH_KILLS")
        .ok()
        .map(|v| v.parse().expect("SESSIONFS_CRASH_KILLS is a number"))
        .unwrap_or(30)
}

fn seed() -> u64 {
    std::env::var("SESSIONFS_CRASH_SEED")
        .ok()
        .map(|v| v.parse().expect("SESSIONFS_CRASH_SEED is a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

fn rng_from(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// A number in `lo..=hi`.
fn between(rng: &mut TestRng, lo: u64, hi: u64) -> u64 {
    lo + rng.next_u64() % (hi - lo + 1)
}

fn header_line(id: &str) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":{},\"createdAt\":1767600000000,\"cwd\":{},\"delegationDepth\":0}}\n",
        serde_json::to_string(id).unwrap(),
        serde_json::to_string(CWD).unwrap()
    )
}

/// One event line of about `pad` bytes more than its fixed part.
fn event(seq: u64, pad: usize) -> String {
    format!(
        "{{\"type\":\"x-sessionfs/crash\",\"seq\":{seq},\"time\":{},\"data\":{{\"pad\":\"{}\"}},\"ignorable\":true}}\n",
        1_767_600_000_000u64 + seq,
        "p".repeat(pad)
    )
}

/// A batch starting at `seq`: one line, or lines up to a size drawn
/// log-uniformly between one line and 1 MiB.
fn batch(rng: &mut TestRng, seq: u64) -> Vec<String> {
    let bits = between(rng, 6, 20);
    let target = (1usize << bits).min(MAX_BATCH);
    let mut lines = Vec::new();
    let mut size = 0;
    loop {
        let pad = between(rng, 0, 4096.min(target as u64)) as usize;
        let line = event(seq + lines.len() as u64, pad);
        if !lines.is_empty() && size + line.len() > target {
            break;
        }
        size += line.len();
        lines.push(line);
        if size >= target {
            break;
        }
    }
    lines
}

/// What the writer thread saw before the daemon died.
struct Written {
    /// Lines of acknowledged batches (write and fsync returned 0).
    acked: Vec<String>,
    /// How many batches were acknowledged.
    acked_batches: usize,
    /// The batch under way when a call failed (may be partly stored).
    in_flight: Vec<String>,
}

/// Appends batches to `file` until a call fails; reports each
/// acknowledged batch on `acks` and returns what was written.
fn writer(file: PathBuf, mut seq: u64, seed: u64, acks: mpsc::Sender<usize>) -> Written {
    let mut rng = rng_from(seed);
    let mut w = Written {
        acked: Vec::new(),
        acked_batches: 0,
        in_flight: Vec::new(),
    };
    let mut f = match OpenOptions::new().append(true).open(&file) {
        Ok(f) => f,
        Err(e) => panic!("open {} for appending: {e}", file.display()),
    };
    loop {
        let lines = batch(&mut rng, seq);
        let bytes = lines.concat();
        let r = f.write_all(bytes.as_bytes()).and_then(|()| f.sync_all());
        if r.is_err() {
            w.in_flight = lines;
            return w;
        }
        seq += lines.len() as u64;
        w.acked.extend(lines);
        w.acked_batches += 1;
        if acks.send(w.acked_batches).is_err() {
            // The test is gone: stop.
            return w;
        }
    }
}

fn sessionfs(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Checks the transcript after a kill; repairs a torn last frame. Returns
/// whether a repair was needed.
fn check_and_repair(backing: &Path) -> bool {
    let (code, report) = sessionfs(&["check".as_ref(), backing.as_os_str()]);
    if code == 0 {
        return false;
    }
    assert!(
        report.contains("torn"),
        "after a kill, `sessionfs check` found more than a torn tail in {}:\n{report}",
        backing.display()
    );
    let (code, repaired) = sessionfs(&["check".as_ref(), "--repair".as_ref(), backing.as_os_str()]);
    assert_eq!(code, 0, "check --repair {}:\n{repaired}", backing.display());
    let (code, report) = sessionfs(&["check".as_ref(), backing.as_os_str()]);
    assert_eq!(code, 0, "still not clean after --repair:\n{report}");
    true
}

struct Session {
    id: String,
    rel: PathBuf,
    /// The transcript's text as it must be: header, then stored lines.
    text: String,
    next_seq: u64,
}

fn new_session(root: &Path, n: usize) -> Session {
    let id = format!("crash-{n:04}");
    let rel = PathBuf::from(project_dir_name(Some(CWD)).unwrap()).join(encode_id(&id).unwrap());
    let mnt = Mount::start_with_watchdog(root, &[], WATCHDOG);
    let project = mnt.join(rel.parent().unwrap());
    if !project.exists() {
        fs::create_dir(&project).unwrap();
    }
    fs::create_dir(mnt.join(&rel)).unwrap();
    let header = header_line(&id);
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(mnt.join(&rel).join(VIEW))
        .unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.sync_all().unwrap();
    drop(f);
    mnt.stop();
    Session {
        id,
        rel,
        text: header,
        next_seq: 0,
    }
}

#[test]
fn kill_9_during_appends_loses_and_duplicates_no_acknowledged_line() {
    let kills = kills();
    let seed = seed();
    eprintln!("crash test: {kills} kills, SESSIONFS_CRASH_SEED={seed}");
    let oracle = oracle_dir();
    let mut rng = rng_from(seed);
    let tmp = tempfile::Builder::new()
        .prefix("sessionfs-crash-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();

    let mut sessions: Vec<Session> = Vec::new();
    let (mut acked_batches, mut acked_lines, mut repairs, mut in_flight_kept) = (0, 0, 0, 0);
    let started = Instant::now();
    for kill in 0..kills {
        if kill % KILLS_PER_SESSION == 0 {
            sessions.push(new_session(&root, sessions.len()));
        }
        let s = sessions.last_mut().unwrap();
        let backing = root.join(&s.rel).join(ZSTD_NAME);
        let mut mnt = Mount::start_with_watchdog(&root, &[], WATCHDOG);
        let (tx, rx) = mpsc::channel();
        let file = mnt.join(&s.rel).join(VIEW);
        let (next_seq, writer_seed) = (s.next_seq, rng.next_u64());
        let handle = thread::spawn(move || writer(file, next_seq, writer_seed, tx));

        // Kill once 1 to 3 batches are acknowledged, at a random point of
        // the next one.
        let need = between(&mut rng, 1, 3) as usize;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(n) if n >= need => break,
                Ok(_) => {}
                Err(e) => panic!(
                    "kill {kill}: the writer acknowledged no {need} batches within 60 s ({e}); \
                     daemon log:\n{}",
                    mnt.log()
                ),
            }
        }
        // The kill point inside the next batch (write, commit or fsync).
        thread::sleep(Duration::from_micros(between(&mut rng, 0, 30_000)));
        mnt.assert_alive();
        // SAFETY: kill(2) of our own child, the daemon.
        unsafe {
            libc::kill(mnt.pid() as libc::pid_t, libc::SIGKILL);
        }
        let w = handle.join().expect("the writer thread");
        drop(mnt); // reaps the daemon and detaches the dead mount point

        repairs += usize::from(check_and_repair(&backing));
        let stored = String::from_utf8(zstd_dc(&backing)).unwrap();
        let mut expected = s.text.clone();
        expected.push_str(&w.acked.concat());
        assert!(
            stored.starts_with(&expected),
            "kill {kill} (seed {seed}): the transcript does not hold the header and every \
             acknowledged line in order ({} bytes stored, {} expected at least)",
            stored.len(),
            expected.len()
        );
        // After the acknowledged lines: a prefix of the batch under way.
        let rest = &stored[expected.len()..];
        let mut kept = 0;
        let mut at = 0;
        for line in &w.in_flight {
            if rest[at..].starts_with(line.as_str()) {
                at += line.len();
                kept += 1;
            } else {
                break;
            }
        }
        assert_eq!(
            at,
            rest.len(),
            "kill {kill} (seed {seed}): the transcript holds bytes that are neither \
             acknowledged lines nor a prefix of the batch under way: {:?}",
            &rest[at..rest.len().min(at + 200)]
        );
        in_flight_kept += kept;
        acked_batches += w.acked_batches;
        acked_lines += w.acked.len();
        s.next_seq += (w.acked.len() + kept) as u64;
        s.text = stored;
    }

    // One oracle run over a copy of every session.
    let copies = tmp.path().join("copies");
    for s in &sessions {
        let dir = copies.join(&s.rel);
        fs::create_dir_all(&dir).unwrap();
        fs::copy(root.join(&s.rel).join(ZSTD_NAME), dir.join(ZSTD_NAME)).unwrap();
    }
    let out = Command::new("timeout")
        .args(["-k", "5", "600"])
        .arg(oracle.join("node_modules/.bin/node"))
        .arg(oracle.join("oracle.mjs"))
        .arg(&copies)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oracle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the oracle's JSON report");
    assert_eq!(report["list"]["ok"], true, "list(): {}", report["list"]);
    assert_eq!(report["list"]["count"], sessions.len());
    for s in &sessions {
        let r = report["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == s.id.as_str())
            .unwrap_or_else(|| panic!("the oracle found no session {}", s.id));
        assert_eq!(
            r["readRaw"]["ok"], true,
            "{} readRaw: {}",
            s.id, r["readRaw"]
        );
        assert_eq!(
            r["readRaw"]["sha256"],
            sha256_hex(s.text.as_bytes()),
            "{}: the oracle reads other text than zstd -dc",
            s.id
        );
        assert_eq!(r["load"]["ok"], true, "{} load: {}", s.id, r["load"]);
        assert_eq!(
            r["load"]["contiguous"], true,
            "{} load: {}",
            s.id, r["load"]
        );
    }
    println!(
        "torture-summary: kills={kills} sessions={} acked_batches={acked_batches} \
         acked_lines={acked_lines} in_flight_lines_kept={in_flight_kept} | lost_lines=0 \
         duplicated_lines=0 foreign_bytes=0 oracle_failures=0 \
         torn_tails_repaired={repairs}",
        sessions.len(),
    );
    eprintln!("crash test: {:?}", started.elapsed());
}
