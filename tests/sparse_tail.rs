//! A transcript grown by `truncate -s 20G` (its frames, then a hole of
//! zeros to 20 GiB) is damage after the header frame, not a torn tail,
//! and costs its readers what its frames cost, not a read of its zeros: a
//! tester's first `stat` of one through the mount took 9.4 s of the
//! daemon's CPU while `.by-title` waited 3.5–7 s behind it.
//!
//! Work is counted in bytes read (`rchar` of `/proc/<pid>/io`), with
//! deadlines far above what the holes cost now and far below a read of
//! the gigabyte the classifier's search may examine.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::Mount;
use sessionfs::store::frame::encode_frame;
use sessionfs::store::{Encoding, FrameCache, Transcript};

const CWD: &str = "/home/alice/app";
const HOLE_TO: u64 = 20 << 30;
/// Bytes a reader may read of such a file: its frames and a few chunks.
const READ_BOUND: u64 = 64 << 20;

/// Writes session `id` (a header frame and a first user message titled
/// `text`); returns its transcript and its decompressed length.
fn write_session(root: &Path, id: &str, text: &str) -> (PathBuf, u64) {
    let key = sessionfs::store::naming::project_key(CWD).unwrap();
    let dir = root.join(key).join(id);
    fs::create_dir_all(&dir).unwrap();
    let header = serde_json::json!({
        "type": "session", "version": 0, "id": id, "createdAt": 1_767_600_000_000u64,
        "cwd": CWD, "delegationDepth": 0,
    });
    let msg = serde_json::json!({
        "type": "user/message", "seq": 0, "time": 1_767_600_000_000u64, "data": {
            "id": "m1", "role": "user", "content": [{"type": "text", "text": text}],
        },
    });
    let (header, msg) = (format!("{header}\n"), format!("{msg}\n"));
    let mut bytes = encode_frame(header.as_bytes()).unwrap();
    bytes.extend(encode_frame(msg.as_bytes()).unwrap());
    let path = dir.join("session.jsonl.zstd");
    fs::write(&path, bytes).unwrap();
    (path, (header.len() + msg.len()) as u64)
}

/// Extends `path` to [`HOLE_TO`] bytes with a hole (as `truncate -s`);
/// false when the file system stores the zeros (no holes: nothing to
/// test).
fn punch_tail(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(HOLE_TO).unwrap();
    let sparse = f.metadata().unwrap().blocks() * 512 < 1 << 20;
    if !sparse {
        eprintln!(
            "{}: the file system keeps no holes; skipped",
            path.display()
        );
    }
    sparse
}

/// Bytes process `pid` has read (`rchar`), `None` when not readable.
fn rchar(pid: &str) -> Option<u64> {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
}

/// The store's view and `check` of a 20 GiB hole after the frames: damage
/// at the end of the frames (the search gives up at its bound, as a read
/// of the zeros did), found without reading the hole.
#[test]
fn a_hole_of_20_gib_after_the_frames_is_classified_without_reading_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, _) = write_session(tmp.path(), "sparse", "a sparse tail");
    let frames_end = fs::metadata(&path).unwrap().len();
    if !punch_tail(&path) {
        return;
    }
    let before = rchar("self").expect("/proc/self/io");
    let t = Instant::now();
    let transcript = Transcript::open(&path, Encoding::Zstd, Arc::new(FrameCache::new(1 << 20)))
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let opened_in = t.elapsed();
    let read = rchar("self").unwrap() - before;
    let d = transcript.damage().expect("damage after the header frame");
    assert_eq!((d.at, d.resumes_at), (frames_end, None), "{d:?}");
    assert!(!d.nothing_verifiable_follows, "{d:?}");
    assert!(
        d.reason.contains("could not all be examined"),
        "{}",
        d.reason
    );
    assert!(
        read < READ_BOUND,
        "opening read {read} bytes of a file of {frames_end} bytes of frames \
         and a hole ({opened_in:?})"
    );

    let before = rchar("self").unwrap();
    let report = sessionfs::store::check::check_transcript(&path, false).unwrap();
    let read = rchar("self").unwrap() - before;
    assert_eq!(
        report.damage.as_ref(),
        Some(&d),
        "check and the store agree"
    );
    assert!(read < READ_BOUND, "check read {read} bytes");
}

/// Through the mount: the first `stat` of such a session answers with the
/// damage rule's size (the prefix plus one byte) in well under a second
/// of reading, and `.by-title` lists another session meanwhile.
#[test]
fn a_sparse_session_is_stated_at_once_and_the_views_answer_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let (sparse, prefix) = write_session(&root, "sparse", "a sparse tail");
    write_session(&root, "other", "another session");
    if !punch_tail(&sparse) {
        return;
    }
    let mnt = Mount::start(&root, &["--attr-timeout", "0"]);
    let pid = mnt.pid().to_string();
    let before = rchar(&pid);
    let key = sessionfs::store::naming::project_key(CWD).unwrap();
    let view = mnt.join(&key).join("sparse").join("session.jsonl");
    let stat = thread::spawn(move || {
        let t = Instant::now();
        let len = fs::metadata(&view).map(|m| m.len());
        (len, t.elapsed())
    });
    thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let titles = common::list_dir(&mnt.join(".by-title"));
    let listed_in = t.elapsed();
    let (len, stated_in) = stat.join().unwrap();
    let read = before.zip(rchar(&pid)).map(|(b, a)| a - b);
    let log = mnt.stop();
    assert_eq!(
        len.ok(),
        Some(prefix + 1),
        "st_size is the prefix plus one byte"
    );
    assert!(
        titles
            .iter()
            .any(|n| n.to_string_lossy().contains("another session")),
        "{titles:?}"
    );
    assert!(
        stated_in < Duration::from_secs(3) && listed_in < Duration::from_secs(3),
        "stat took {stated_in:?}, the .by-title listing {listed_in:?}\n{log}"
    );
    if let Some(read) = read {
        assert!(
            read < READ_BOUND,
            "the daemon read {read} bytes (stat {stated_in:?}, listing {listed_in:?})\n{log}"
        );
    }
}
