//! The store-level write path without a mount (issue 4): publication of new
//! sessions, appends, refusals that leave the file byte-identical, the
//! corpus replay against what the reference wrote, and concurrency.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::Rng;
use serde_json::Value;
use sha2::{Digest, Sha256};

use sessionfs::store::append::{append_batch, append_with, TailHint};
use sessionfs::store::frame::{decode_frame, encode_frame, walk_frame, Step};
use sessionfs::store::publish::{
    header_line_from_fields, plan_session, publish_session, publish_session_using, PublishMethod,
};
use sessionfs::store::{Encoding, FrameCache, StoreError, Transcript};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus")
}

fn header(id: &str, cwd: Option<&str>) -> Vec<u8> {
    common::lines::header_line(id, cwd, 1_767_603_600_000).into_bytes()
}

fn ev(seq: u64, note: &str) -> String {
    format!(
        "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1,\"data\":{{\"note\":\"{note}\"}},\"ignorable\":true}}\n"
    )
}

fn events(from: u64, n: u64, note: &str) -> String {
    (from..from + n).map(|s| ev(s, note)).collect()
}

/// Decodes every frame of a zstd transcript with the zstd CLI.
fn zstd_cli(path: &Path) -> Vec<u8> {
    let out = Command::new("zstd").arg("-dc").arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "zstd -dc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The decoded contents of each frame, in order.
fn frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        match walk_frame(bytes, pos, bytes.len() as u64).unwrap() {
            Step::Frame(info) => {
                let start = info.offset as usize;
                let end = start + info.len as usize;
                out.push(decode_frame(&bytes[start..end], &info).unwrap());
                pos = info.offset + info.len;
            }
            Step::End => return out,
            Step::Torn => panic!("torn frame at {pos}"),
        }
    }
}

fn read_view(path: &Path, encoding: Encoding) -> Vec<u8> {
    let t = Transcript::open(path, encoding, Arc::new(FrameCache::new(1 << 20))).unwrap();
    let len = t.refresh().unwrap().plain_len;
    let mut out = Vec::new();
    while (out.len() as u64) < len {
        let chunk = t.read(out.len() as u64, 1 << 16).unwrap();
        assert!(!chunk.is_empty());
        out.extend(chunk);
    }
    out
}

fn seq_of(line: &[u8]) -> u64 {
    let v: Value = serde_json::from_slice(line).unwrap();
    v["seq"].as_u64().unwrap()
}

#[test]
fn publish_then_append_reads_back_everywhere() {
    let root = tempfile::tempdir().unwrap();
    let h = header("0193c7e2-a", Some(common::CORPUS_APP_CWD));
    let first = events(0, 3, "first");
    let path = publish_session(root.path(), Encoding::Zstd, &h, first.as_bytes()).unwrap();
    let mut expected = [h.clone(), first.into_bytes()].concat();
    let mut next = 3;
    for (i, n) in [1u64, 5, 2].into_iter().enumerate() {
        let batch = events(next, n, &format!("batch {i}"));
        let out = append_batch(&path, Encoding::Zstd, batch.as_bytes(), |tail| {
            assert_eq!(tail.next_seq, next);
            Ok(())
        })
        .unwrap();
        assert_eq!((out.first_seq, out.next_seq), (next, next + n));
        assert_eq!(fs::metadata(&path).unwrap().len(), out.new_file_len);
        next += n;
        expected.extend(batch.into_bytes());
    }
    assert_eq!(zstd_cli(&path), expected);
    let bytes = fs::read(&path).unwrap();
    let decoded = frames(&bytes);
    assert_eq!(decoded.len(), 5, "header frame, first batch, three appends");
    assert_eq!(
        decoded[0], h,
        "the first frame holds exactly the header line"
    );
    assert_eq!(read_view(&path, Encoding::Zstd), expected);

    // Raw mode: the same lines, as plain text.
    let raw_root = tempfile::tempdir().unwrap();
    let first = events(0, 2, "raw");
    let raw = publish_session(raw_root.path(), Encoding::Raw, &h, first.as_bytes()).unwrap();
    assert_eq!(raw.file_name().unwrap(), "session.jsonl");
    let more = events(2, 2, "raw more");
    append_batch(&raw, Encoding::Raw, more.as_bytes(), |_| Ok(())).unwrap();
    let text = [h.clone(), first.into_bytes(), more.into_bytes()].concat();
    assert_eq!(fs::read(&raw).unwrap(), text);
    assert_eq!(read_view(&raw, Encoding::Raw), text);
}

/// What the store refused, as (op, id, errno).
type Refusal = (String, String, i32);

#[test]
fn replay_of_the_corpus_matches_what_the_reference_wrote() {
    let ops = fs::read_to_string(corpus().join("normal/ops.jsonl")).unwrap();
    let normal: Value =
        serde_json::from_str(&fs::read_to_string(corpus().join("normal/expected.json")).unwrap())
            .unwrap();
    let unpacked: Value =
        serde_json::from_str(&fs::read_to_string(corpus().join("unpacked/expected.json")).unwrap())
            .unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut created: HashMap<String, Vec<u8>> = HashMap::new();
    let mut published: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut batches: HashMap<String, usize> = HashMap::new();
    let mut refused: Vec<Refusal> = Vec::new();

    for line in ops.lines() {
        let op: Value = serde_json::from_str(line).unwrap();
        match op["op"].as_str().unwrap() {
            "create" => {
                let meta = op["meta"].as_object().unwrap();
                let id = meta["id"].as_str().unwrap().to_string();
                let h = header_line_from_fields(meta);
                // Creation writes nothing; what publication would refuse is
                // refused now, as the reference refuses it at create.
                if let Err(e) = plan_session(root.path(), Encoding::Zstd, &h) {
                    if e.errno() == libc::ENAMETOOLONG {
                        assert!(e.to_string().contains("244"), "{e}");
                    }
                    refused.push(("create".into(), id, e.errno()));
                    continue;
                }
                if let Some(path) = published.get(&id) {
                    let before = fs::read(path).unwrap();
                    let e = publish_session(root.path(), Encoding::Zstd, &h, b"").unwrap_err();
                    assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");
                    assert_eq!(fs::read(path).unwrap(), before);
                    refused.push(("create".into(), id, e.errno()));
                    continue;
                }
                assert!(created.insert(id, h).is_none());
            }
            "append" => {
                let id = op["id"].as_str().unwrap().to_string();
                let mut batch = Vec::new();
                for event in op["events"].as_array().unwrap() {
                    batch.extend(serde_json::to_vec(event).unwrap());
                    batch.push(b'\n');
                }
                let result = match published.get(&id) {
                    Some(path) => {
                        let before = fs::read(path).unwrap();
                        let r = append_batch(path, Encoding::Zstd, &batch, |_| Ok(()))
                            .map(|_| path.clone());
                        if r.is_err() {
                            assert_eq!(fs::read(path).unwrap(), before);
                        }
                        r
                    }
                    None => publish_session(root.path(), Encoding::Zstd, &created[&id], &batch),
                };
                match result {
                    Ok(path) => {
                        published.insert(id.clone(), path);
                        *batches.entry(id).or_default() += 1;
                    }
                    Err(e) => {
                        assert!(matches!(e, StoreError::SeqConflict { .. }), "{e}");
                        refused.push(("append".into(), id, e.errno()));
                    }
                }
            }
            other => panic!("unknown op {other}"),
        }
    }

    // The same refusals as the reference's, in order.
    let expected_refusals: Vec<Refusal> = normal["writeErrors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let error = w["error"].as_str().unwrap();
            let errno = if w["code"] == "ENAMETOOLONG" {
                libc::ENAMETOOLONG
            } else if error.contains("already exists") {
                libc::EEXIST
            } else {
                libc::EINVAL // the empty id, the seq mismatch
            };
            (
                w["op"].as_str().unwrap().to_string(),
                w["id"].as_str().unwrap().to_string(),
                errno,
            )
        })
        .collect();
    assert_eq!(refused, expected_refusals);

    // Every session the reference stored, with the same text.
    let sessions = unpacked["report"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), published.len());
    let reference_files: HashMap<&str, &Value> = unpacked["report"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f))
        .collect();
    let mut same_compressed = 0;
    for s in sessions {
        let id = s["id"].as_str().unwrap();
        let path = &published[id];
        let locate = s["locate"].as_str().unwrap();
        assert_eq!(*path, root.path().join(locate), "{id}");
        let bytes = fs::read(path).unwrap();
        let text = zstd::stream::decode_all(&bytes[..]).unwrap();
        let sha = format!("{:x}", Sha256::digest(&text));
        assert_eq!(
            sha,
            s["readRaw"]["sha256"].as_str().unwrap(),
            "readRaw of {id}"
        );
        assert_eq!(text.len() as u64, s["readRaw"]["bytes"].as_u64().unwrap());
        let file = reference_files[locate];
        assert_eq!(
            frames(&bytes).len() as u64,
            file["zstdFrames"].as_u64().unwrap(),
            "{id}: one frame per call, as the reference"
        );
        assert_eq!(frames(&bytes).len(), 1 + batches[id]);
        if format!("{:x}", Sha256::digest(&bytes)) == file["sha256"].as_str().unwrap() {
            same_compressed += 1;
        }
        // sessionfs itself reads it back.
        assert_eq!(read_view(path, Encoding::Zstd), text);
    }
    eprintln!(
        "{same_compressed} of {} compressed files are byte-identical to the reference's",
        sessions.len()
    );
}

#[test]
fn refusals_leave_the_file_byte_identical() {
    let root = tempfile::tempdir().unwrap();
    let h = header("refusals", Some("/w"));
    let path = publish_session(
        root.path(),
        Encoding::Zstd,
        &h,
        events(0, 3, "x").as_bytes(),
    )
    .unwrap();
    let before = fs::read(&path).unwrap();
    let cases: Vec<(&str, Vec<u8>, i32)> = vec![
        ("seq gap", events(4, 1, "gap").into_bytes(), libc::EINVAL),
        (
            "duplicate seq",
            events(2, 2, "dup").into_bytes(),
            libc::EINVAL,
        ),
        (
            "gap inside the batch",
            [ev(3, "a"), ev(5, "b")].concat().into_bytes(),
            libc::EINVAL,
        ),
        (
            "bad JSON",
            b"{\"type\":\"x\",\"seq\":3,}\n".to_vec(),
            libc::EINVAL,
        ),
        (
            "invalid UTF-8",
            b"{\"type\":\"x\",\"seq\":3,\"t\":\"\xff\xfe\"}\n".to_vec(),
            libc::EINVAL,
        ),
        (
            "two objects",
            b"{\"type\":\"x\",\"seq\":3} {}\n".to_vec(),
            libc::EINVAL,
        ),
        (
            "no newline",
            b"{\"type\":\"x\",\"seq\":3}".to_vec(),
            libc::EINVAL,
        ),
        ("a second header", h.clone(), libc::EINVAL),
    ];
    for (what, batch, errno) in cases {
        let e = append_batch(&path, Encoding::Zstd, &batch, |_| Ok(())).unwrap_err();
        assert_eq!(e.errno(), errno, "{what}: {e}");
        assert_eq!(fs::read(&path).unwrap(), before, "{what}");
    }
    // Line numbers point at the culprit.
    let e = append_batch(
        &path,
        Encoding::Zstd,
        [ev(3, "a"), ev(4, "b"), "nope\n".into()]
            .concat()
            .as_bytes(),
        |_| Ok(()),
    )
    .unwrap_err();
    assert!(matches!(e, StoreError::InvalidLine { line: 3, .. }), "{e}");

    // A torn tail: a frame cut short by a crash.
    let frame = encode_frame(events(3, 2, "torn").as_bytes()).unwrap();
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&frame[..frame.len() - 3]).unwrap();
    drop(f);
    let torn = fs::read(&path).unwrap();
    let started = Instant::now();
    let e = append_batch(&path, Encoding::Zstd, events(3, 1, "t").as_bytes(), |_| {
        Ok(())
    })
    .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "re-read after a wait"
    );
    assert!(
        matches!(e, StoreError::TornTail { offset, .. } if offset == before.len() as u64),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EIO);
    assert!(e.to_string().contains("sessionfs check --repair"), "{e}");
    assert_eq!(fs::read(&path).unwrap(), torn);
}

#[test]
fn same_id_publication_race_has_one_winner() {
    for round in 0..200 {
        let root = tempfile::tempdir().unwrap();
        let id = format!("race-{round}");
        let method = if round % 2 == 0 {
            None
        } else {
            Some(PublishMethod::RenameNoReplace)
        };
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|writer| {
                let root = root.path().to_path_buf();
                let barrier = Arc::clone(&barrier);
                let h = header(&id, Some("/race"));
                thread::spawn(move || {
                    let batch = events(0, 2, &format!("writer {writer}"));
                    barrier.wait();
                    let r =
                        publish_session_using(&root, Encoding::Zstd, &h, batch.as_bytes(), method);
                    (r, [h, batch.into_bytes()].concat())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<_> = results.iter().filter(|(r, _)| r.is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}");
        for (r, _) in &results {
            if let Err(e) = r {
                assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");
                assert_eq!(e.errno(), libc::EEXIST);
            }
        }
        let (Ok(path), content) = winners[0] else {
            unreachable!()
        };
        let bytes = fs::read(path).unwrap();
        assert_eq!(&zstd::stream::decode_all(&bytes[..]).unwrap(), content);
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["session.jsonl.zstd"], "no temporary left");
    }
}

#[test]
fn concurrent_appenders_keep_seq_contiguous() {
    let root = tempfile::tempdir().unwrap();
    let h = header("busy", Some("/w"));
    let path = publish_session(root.path(), Encoding::Zstd, &h, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let handles: Vec<_> = (0..4)
        .map(|writer| {
            let path = path.clone();
            thread::spawn(move || {
                let mut acknowledged: Vec<String> = Vec::new();
                let mut hint: Option<TailHint> = None;
                let mut stale_next = 0;
                let (mut conflicts, mut n) = (0, 0u64);
                while Instant::now() < deadline {
                    n += 1;
                    let size = 1 + n % 4;
                    let notes: Vec<String> =
                        (0..size).map(|k| format!("w{writer}-{n}-{k}")).collect();
                    if writer == 3 {
                        // Numbers its batch from what it last saw, outside
                        // the lock: refused when another writer got there
                        // first, then retried with fresh numbers.
                        loop {
                            let batch: String = notes
                                .iter()
                                .enumerate()
                                .map(|(k, note)| ev(stale_next + k as u64, note))
                                .collect();
                            match append_batch(&path, Encoding::Zstd, batch.as_bytes(), |_| Ok(()))
                            {
                                Ok(out) => {
                                    stale_next = out.next_seq;
                                    break;
                                }
                                Err(StoreError::SeqConflict { expected, .. }) => {
                                    conflicts += 1;
                                    stale_next = expected;
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                    } else {
                        let out = append_with(&path, Encoding::Zstd, hint.as_ref(), |tail| {
                            Ok(notes
                                .iter()
                                .enumerate()
                                .map(|(k, note)| ev(tail.next_seq + k as u64, note))
                                .collect::<String>()
                                .into_bytes())
                        })
                        .unwrap();
                        hint = Some(out.hint);
                    }
                    acknowledged.extend(notes);
                }
                (acknowledged, conflicts)
            })
        })
        .collect();
    let mut acknowledged = HashSet::new();
    let mut conflicts = 0;
    for handle in handles {
        let (notes, c) = handle.join().unwrap();
        conflicts += c;
        for note in notes {
            assert!(acknowledged.insert(note));
        }
    }
    let text = zstd_cli(&path);
    let mut lines = text.split_inclusive(|&b| b == b'\n');
    assert_eq!(lines.next().unwrap(), &h[..]);
    let mut seen = HashSet::new();
    let mut count = 0u64;
    for (expected_seq, line) in lines.enumerate() {
        assert_eq!(
            seq_of(line),
            expected_seq as u64,
            "contiguous, no duplicate"
        );
        let v: Value = serde_json::from_slice(line).unwrap();
        assert!(seen.insert(v["data"]["note"].as_str().unwrap().to_string()));
        count += 1;
    }
    assert_eq!(seen, acknowledged, "every acknowledged line exactly once");
    assert_eq!(read_view(&path, Encoding::Zstd), text);
    eprintln!("{count} events from 4 writers, {conflicts} refused stale batches retried");
    assert!(count > 100);
}

/// A write that fails (here: EFBIG past RLIMIT_FSIZE, as ENOSPC would) is
/// truncated back: runs in a child process so that the limit binds only it.
#[test]
fn a_failed_write_is_truncated_back() {
    const CHILD: &str = "SESSIONFS_TEST_FSIZE_CHILD";
    if let Ok(path) = std::env::var(CHILD) {
        let path = PathBuf::from(path);
        let len = fs::metadata(&path).unwrap().len();
        // SAFETY: plain libc calls on this process's own signal disposition
        // and limits.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            // Room for the session's lock file (BODY_LEN bytes), not for
            // the frame.
            let limit = libc::rlimit {
                rlim_cur: len.max(sessionfs::store::lease::BODY_LEN as u64) + 100,
                rlim_max: libc::RLIM_INFINITY,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
        }
        // Incompressible: the frame is far longer than the 100 bytes left.
        let mut rng = proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        );
        let noise: String = (0..20_000)
            .map(|_| char::from(b'a' + (rng.next_u32() % 26) as u8))
            .collect();
        let e =
            append_batch(&path, Encoding::Zstd, ev(2, &noise).as_bytes(), |_| Ok(())).unwrap_err();
        assert_eq!(e.errno(), libc::EFBIG, "{e}");
        assert!(
            e.to_string().starts_with("write "),
            "the frame's write failed: {e}"
        );
        assert_eq!(fs::metadata(&path).unwrap().len(), len);
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let path = publish_session(
        root.path(),
        Encoding::Zstd,
        &header("full", None),
        events(0, 2, "x").as_bytes(),
    )
    .unwrap();
    let before = fs::read(&path).unwrap();
    // The child gets its own stdout and stderr (pipes): its RLIMIT_FSIZE
    // would otherwise also limit an inherited stdout redirected to a file.
    common::run_test_in_child(
        "a_failed_write_is_truncated_back",
        false,
        &[(CHILD, path.as_os_str())],
    );
    assert_eq!(fs::read(&path).unwrap(), before);
    // And the transcript still takes appends.
    append_batch(&path, Encoding::Zstd, ev(2, "after").as_bytes(), |_| Ok(())).unwrap();
}
