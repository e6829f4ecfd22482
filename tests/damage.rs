//! Issue 9, store half: damage in the middle is never a torn tail, repair
//! never destroys a verifiable frame, memory stays bounded whatever a file
//! holds, and a bad frame fails only the reads that start inside it.
//!
//! Every input is built here; expectations come from how it was built
//! (offsets of the frames written) and from `zstd -dc`.

mod common;

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use common::{assert_errno, sh, Mount};
use sessionfs::store::classify::{walk, WalkEnd};
use sessionfs::store::frame::encode_frame;
use sessionfs::store::{Encoding, FrameCache, StoreError, Transcript};

const PROJECT: &str = "--home-alice-work-app--";
const AS_LIMIT: u64 = 256 << 20;

fn header(id: &str) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1767600000000,\
         \"cwd\":\"{}\",\"delegationDepth\":0}}\n",
        common::CORPUS_APP_CWD
    )
}

/// Event `seq` padded with `pad` bytes of varied text (so frames do not
/// compress to nothing).
fn event(seq: u64, pad: usize) -> String {
    let mut state = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let text: String = (0..pad)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = state % 62;
            (match x {
                0..=9 => b'0' + x as u8,
                10..=35 => b'a' + (x - 10) as u8,
                _ => b'A' + (x - 36) as u8,
            }) as char
        })
        .collect();
    format!(
        "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1,\"data\":{{\"t\":\"{text}\"}},\"ignorable\":true}}\n"
    )
}

/// Frames of `parts`, concatenated; and each frame's start.
fn frames(parts: &[String]) -> (Vec<u8>, Vec<usize>) {
    let mut file = Vec::new();
    let mut starts = Vec::new();
    for p in parts {
        starts.push(file.len());
        file.extend(encode_frame(p.as_bytes()).unwrap());
    }
    (file, starts)
}

/// Writes `bytes` as the transcript of session `id` under `root`.
fn write_session(root: &Path, id: &str, bytes: &[u8]) -> PathBuf {
    let dir = root.join(PROJECT).join(id);
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.jsonl.zstd");
    fs::write(&path, bytes).unwrap();
    path
}

/// `sessionfs ARGS` with `$XDG_STATE_HOME` = `state` (the quarantine
/// folder is under it), optionally under an address-space limit.
fn sessionfs(args: &[&std::ffi::OsStr], state: &Path, as_limit: Option<u64>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionfs"));
    cmd.args(args)
        .env("XDG_STATE_HOME", state)
        .env("XDG_CACHE_HOME", state.join("cache"))
        .env_remove("RUST_LOG");
    if let Some(bytes) = as_limit {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs here.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.output().expect("run sessionfs")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Files under `dir` (recursively), if it exists.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn open_store_level(path: &Path) -> Transcript {
    Transcript::open(path, Encoding::Zstd, Arc::new(FrameCache::new(1 << 20)))
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// The checks every damaged-in-the-middle input must pass: the store's
/// view, `check`, `check --repair` (file unchanged, exit 1, nothing in
/// the quarantine), and the mount (prefix readable, `st_size` = prefix +
/// 1, EIO at the damage, appends refused).
fn assert_damaged_in_the_middle(bytes: &[u8], prefix: &[u8], at: u64, resumes_at: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let state = tmp.path().join("state");
    let path = write_session(&root, "damaged", bytes);

    // The classifier itself.
    match walk(bytes, 0, bytes.len() as u64, None, |_| true).unwrap() {
        WalkEnd::Damaged(d) => {
            assert_eq!((d.at, d.resumes_at), (at, Some(resumes_at)), "{d:?}")
        }
        other => panic!("classified as {other:?}"),
    }

    // The store's view: the verified prefix plus one byte.
    let t = open_store_level(&path);
    let d = t.damage().expect("the view ends at damage");
    assert_eq!((d.at, d.resumes_at), (at, Some(resumes_at)));
    assert_eq!(t.cached_attr().plain_len, prefix.len() as u64 + 1);
    assert_eq!(t.read(0, 1 << 20).unwrap(), prefix);
    let e = t.read(prefix.len() as u64, 10).unwrap_err();
    assert!(matches!(e, StoreError::Damaged { .. }), "{e}");
    assert_eq!(e.errno(), libc::EIO);
    let e = t.next_seq().unwrap_err();
    assert!(matches!(e, StoreError::Damaged { .. }), "{e}");

    // check: both offsets.
    let out = sessionfs(&["check".as_ref(), path.as_os_str()], &state, None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains(&format!("byte {at}:")), "{report}");
    assert!(
        report.contains(&format!("resumes at byte {resumes_at}")),
        "{report}"
    );
    assert!(!report.contains("torn last frame"), "{report}");

    // check --repair: refuses, changes nothing.
    let out = sessionfs(
        &["check".as_ref(), "--repair".as_ref(), path.as_os_str()],
        &state,
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("repaired"),
        "{}",
        text(&out)
    );
    assert_eq!(fs::read(&path).unwrap(), bytes, "--repair changed the file");
    assert!(files_under(&state).is_empty(), "nothing was cut");

    // Through the mount.
    let mut mount = Mount::start(&root, &[]);
    let view = mount.join(PROJECT).join("damaged/session.jsonl");
    let meta = fs::metadata(&view).unwrap();
    assert_eq!(meta.len(), prefix.len() as u64 + 1, "st_size");
    let f = fs::File::open(&view).unwrap();
    let mut head = vec![0u8; prefix.len().min(100)];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, &prefix[..head.len()]);
    let mut buf = [0u8; 10];
    assert_errno(
        f.read_at(&mut buf, prefix.len() as u64),
        libc::EIO,
        "read at the damage",
    );
    // A read running into the damage returns the bytes before it.
    let mut buf = vec![0u8; 64];
    let from = prefix.len().saturating_sub(20);
    let n = f.read_at(&mut buf, from as u64).unwrap();
    assert_eq!(&buf[..n], &prefix[from..]);
    // `cat` gets the prefix, then fails: no tool takes it for the whole.
    let cat = sh("cat \"$1\"", [&view]);
    assert!(!cat.status.success(), "cat succeeded");
    assert_eq!(cat.stdout, prefix);
    // Appends are refused with EIO, and the file on disk is unchanged.
    let append = sh(
        "printf '%s\\n' \"$2\" >> \"$1\"",
        [
            view.as_os_str(),
            event(1, 3).trim_end().as_ref() as &std::ffi::OsStr,
        ],
    );
    assert!(!append.status.success(), "append succeeded");
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the append changed the file"
    );
    mount.assert_alive();
    let log = mount.stop();
    assert!(log.contains("damaged at byte"), "{log}");
}

/// Issue 9 input 1: header, seq 0, a skippable frame whose size field is
/// 0xFFFFFFFF, then seq 1–3 intact.
#[test]
fn a_huge_skippable_frame_before_intact_frames_is_damage_not_a_torn_tail() {
    let parts = [header("damaged"), event(0, 20)];
    let (mut bytes, _) = frames(&parts);
    let prefix: Vec<u8> = parts.concat().into_bytes();
    let at = bytes.len() as u64;
    bytes.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    let resumes_at = bytes.len() as u64;
    let (rest, _) = frames(&[event(1, 20), event(2, 20), event(3, 20)]);
    bytes.extend(rest);
    assert_damaged_in_the_middle(&bytes, &prefix, at, resumes_at);
}

/// Issue 9 input 2: one byte deleted inside the frame header of the 2nd of
/// 4 frames.
#[test]
fn a_byte_deleted_in_the_second_frame_header_is_damage_not_a_torn_tail() {
    let parts = [header("damaged"), event(0, 40), event(1, 40), event(2, 40)];
    let (good, starts) = frames(&parts);
    let prefix = parts[0].as_bytes().to_vec();
    let mut bytes = good.clone();
    bytes.remove(starts[1] + 4); // the frame header descriptor
    assert_damaged_in_the_middle(&bytes, &prefix, starts[1] as u64, starts[2] as u64 - 1);
}

/// Every position of the second frame's header (magic included): a
/// deleted byte is never called a torn tail, and `--repair` never changes
/// the file.
#[test]
fn no_deleted_header_byte_lets_repair_cut_intact_frames() {
    let parts = [header("damaged"), event(0, 40), event(1, 40), event(2, 40)];
    let (good, starts) = frames(&parts);
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    for pos in starts[1]..starts[1] + 14 {
        let mut bytes = good.clone();
        bytes.remove(pos);
        let end = walk(&bytes[..], 0, bytes.len() as u64, None, |_| true).unwrap();
        assert!(
            !matches!(end, WalkEnd::Torn { .. } | WalkEnd::Clean),
            "byte {pos} deleted: {end:?}"
        );
        let path = write_session(&tmp.path().join("root"), "damaged", &bytes);
        let out = sessionfs(
            &["check".as_ref(), "--repair".as_ref(), path.as_os_str()],
            &state,
            None,
        );
        assert_eq!(out.status.code(), Some(1), "byte {pos}: {}", text(&out));
        assert_eq!(fs::read(&path).unwrap(), bytes, "byte {pos}: file changed");
        assert!(
            String::from_utf8_lossy(&out.stdout)
                .contains(&format!("resumes at byte {}", starts[2] - 1)),
            "byte {pos}: {}",
            text(&out)
        );
    }
    assert!(files_under(&state).is_empty());
}

/// Issue 9 input 4: a ~2 KB transcript whose middle frame fails its
/// checksum; `head -c 200` through the mount gets the right bytes.
#[test]
fn head_of_a_transcript_with_a_bad_middle_frame_succeeds() {
    // The bad frame starts past the first two pages: through the page
    // cache (whole pages), only the pages that hold it fail.
    let parts = [
        header("badmiddle"),
        event(0, 9000),
        event(1, 740),
        event(2, 740),
    ];
    let (mut bytes, starts) = frames(&parts);
    assert!(
        (7000..14000).contains(&bytes.len()),
        "{} bytes",
        bytes.len()
    );
    // The last byte of the middle frame is in its checksum.
    bytes[starts[3] - 1] ^= 0x55;
    let plain = parts.concat().into_bytes();
    let bad_at = parts[0].len() + parts[1].len();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let path = write_session(&root, "badmiddle", &bytes);

    // Store level: a short read before the bad frame, EIO inside it.
    let t = open_store_level(&path);
    assert_eq!(t.cached_attr().plain_len, plain.len() as u64);
    assert_eq!(t.read(0, 1 << 20).unwrap(), &plain[..bad_at]);
    assert_eq!(t.read(100, 1 << 20).unwrap(), &plain[100..bad_at]);
    // Through the page cache's reads, never short.
    assert_eq!(t.read_no_short(0, 1 << 20).unwrap_err().errno(), libc::EIO);
    assert_eq!(t.read_no_short(0, 4096).unwrap(), &plain[..4096]);
    assert_eq!(t.read(bad_at as u64, 10).unwrap_err().errno(), libc::EIO);
    let after = (bad_at + parts[2].len()) as u64;
    assert_eq!(t.read(after, 4096).unwrap(), &plain[after as usize..]);

    let mut mount = Mount::start(&root, &[]);
    let view = mount.join(PROJECT).join("badmiddle/session.jsonl");
    let head = sh("head -c 200 \"$1\"", [&view]);
    assert!(head.status.success(), "head failed: {}", text(&head));
    assert_eq!(head.stdout, &plain[..200]);
    let f = fs::File::open(&view).unwrap();
    let mut buf = [0u8; 10];
    assert_errno(
        f.read_at(&mut buf, bad_at as u64),
        libc::EIO,
        "read inside the bad frame",
    );
    // `cat` never ends early at the bad frame: the first reader through
    // the page cache, then one opened once the damage is known (without
    // the page cache: the bytes before it, then EIO).
    for round in ["first", "known"] {
        let cat = sh("cat \"$1\"", [&view]);
        assert!(
            !cat.status.success(),
            "{round}: cat exited 0 with {} bytes",
            cat.stdout.len()
        );
        assert!(
            plain.starts_with(&cat.stdout),
            "{round}: cat gave other bytes"
        );
    }
    mount.assert_alive();
    mount.stop();
}

#[test]
fn a_frame_ending_inside_a_line_never_passes_for_the_end_of_the_transcript() {
    // The audit's case: the second frame ends 5 bytes before its newline,
    // the third completes the line.
    let e0 = event(0, 40);
    let (cut, rest) = e0.split_at(e0.len() - 5);
    let parts = [
        header("midline"),
        cut.to_string(),
        format!("{rest}{}", event(1, 40)),
    ];
    let (bytes, _) = frames(&parts);
    let prefix = parts[0].len();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    write_session(&root, "midline", &bytes);
    let mut mount = Mount::start(&root, &[]);
    let view = mount.join(PROJECT).join("midline/session.jsonl");
    let first = sh("cat \"$1\"", [&view]);
    assert!(
        !first.status.success(),
        "cat exited 0 with {} bytes",
        first.stdout.len()
    );
    // Known now: served without the page cache, the header line, then EIO.
    let again = sh("cat \"$1\"", [&view]);
    assert!(
        !again.status.success(),
        "cat exited 0 with {} bytes",
        again.stdout.len()
    );
    assert_eq!(again.stdout, &parts[0].as_bytes()[..prefix]);
    // Known damage takes no append (a fresh tester's append was stored
    // after such a frame): EIO at open, the file as it was.
    let backing = root.join(PROJECT).join("midline/session.jsonl.zstd");
    let stored = fs::read(&backing).unwrap();
    let append = fs::OpenOptions::new().append(true).open(&view);
    assert_errno(
        append.map(drop),
        libc::EIO,
        "an append after a known bad frame",
    );
    assert_eq!(fs::read(&backing).unwrap(), stored);
    mount.assert_alive();
    mount.stop();
}

/// A frame of `rle_blocks` RLE blocks of 128 KiB of `byte` after a raw
/// block holding `first`: no content size, a 128 KiB window, no checksum
/// (legal zstd: RFC 8878 §3.1.1).
fn rle_frame(first: &[u8], rle_blocks: usize, byte: u8, last: Option<&[u8]>) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 7 << 3];
    let block = |f: &mut Vec<u8>, header: u32| f.extend_from_slice(&header.to_le_bytes()[..3]);
    block(&mut f, (first.len() as u32) << 3);
    f.extend_from_slice(first);
    for i in 0..rle_blocks {
        let is_last = last.is_none() && i + 1 == rle_blocks;
        block(&mut f, u32::from(is_last) | (1 << 1) | (131_072 << 3));
        f.push(byte);
    }
    if let Some(tail) = last {
        block(&mut f, 1 | ((tail.len() as u32) << 3));
        f.extend_from_slice(tail);
    }
    f
}

/// Runs `list`, `check` and a mount lookup of the session in `root`, each
/// under RLIMIT_AS 256 MiB: each fails cleanly with `message`, never by a
/// signal.
fn assert_refused_in_bounded_memory(root: &Path, id: &str, message: &str) {
    let state = root.parent().unwrap().join("state");
    for args in [
        ["list".as_ref(), root.as_os_str()],
        ["check".as_ref(), root.as_os_str()],
    ] {
        let out = sessionfs(&args, &state, Some(AS_LIMIT));
        assert_eq!(out.status.code(), Some(1), "{:?}: {}", args[0], text(&out));
        let all = text(&out);
        assert!(all.contains(message), "{:?}: {all}", args[0]);
        assert!(all.contains(id), "{:?}: {all}", args[0]);
    }
    let mut mount = Mount::start_with_rlimit_as(root, &[], AS_LIMIT);
    let view = mount.join(PROJECT).join(id).join("session.jsonl");
    assert_errno(
        fs::metadata(&view),
        libc::EIO,
        "stat of the refused session",
    );
    mount.assert_alive();
    assert!(
        mount.wait_log_contains(message, std::time::Duration::from_secs(5)),
        "{}",
        mount.log()
    );
    mount.stop();
}

/// Issue 9 input 2 (memory): a 48 KB transcript whose first frame holds
/// the header line and then 12,000 RLE blocks of 128 KiB (1.5 GiB).
#[test]
fn a_first_frame_of_one_and_a_half_gib_costs_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let id = "hugeframe";
    let frame = rle_frame(header(id).as_bytes(), 12_000, b'\n', None);
    assert!((40_000..60_000).contains(&frame.len()), "{}", frame.len());
    let path = write_session(&root, id, &frame);
    // A legal frame: zstd decodes it (the first bytes are the header line).
    let mut dec = zstd::stream::read::Decoder::new(fs::File::open(&path).unwrap()).unwrap();
    let mut first = vec![0u8; header(id).len()];
    dec.read_exact(&mut first).unwrap();
    assert_eq!(first, header(id).as_bytes());
    assert_refused_in_bounded_memory(&root, id, "first frame is not exactly one header line");
}

/// A header line longer than 16 MiB has its own error, not "header-less".
#[test]
fn a_header_line_longer_than_the_limit_has_its_own_error() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let id = "longheader";
    let start = format!("{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"pad\":\"");
    let frame = rle_frame(start.as_bytes(), 136, b'a', Some(b"\"}\n")); // 17 MiB
    write_session(&root, id, &frame);
    assert_refused_in_bounded_memory(&root, id, "header line longer than");
}

/// RLE blocks (500 MiB, twice the address-space limit) as the last frame
/// of a valid transcript (one line of `x`, no content size): `list`, `check` and a mount (stat,
/// the last bytes, an append) under RLIMIT_AS 256 MiB. The frame's length
/// is learned and its last line looked for through the bounded stream; the
/// line is longer than 16 MiB, so appends are refused with a message.
#[test]
fn a_last_frame_larger_than_the_address_space_costs_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let state = tmp.path().join("state");
    let id = "hugelast";
    let (mut bytes, _) = frames(&[header(id), event(0, 10)]);
    let prefix_len = (header(id).len() + event(0, 10).len()) as u64;
    bytes.extend(rle_frame(b"x", 4_000, b'x', Some(b"\n")));
    let path = write_session(&root, id, &bytes);
    let plain_len = prefix_len + 1 + 4_000 * 131_072 + 1;

    let out = sessionfs(&["list".as_ref(), root.as_os_str()], &state, Some(AS_LIMIT));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&plain_len.to_string()),
        "{}",
        text(&out)
    );
    let out = sessionfs(
        &["check".as_ref(), path.as_os_str()],
        &state,
        Some(AS_LIMIT),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let mut mount = Mount::start_with_rlimit_as(&root, &[], AS_LIMIT);
    let view = mount.join(PROJECT).join(id).join("session.jsonl");
    assert_eq!(fs::metadata(&view).unwrap().len(), plain_len);
    let f = fs::File::open(&view).unwrap();
    let mut tail = [0u8; 8];
    f.read_exact_at(&mut tail, plain_len - 8).unwrap();
    assert_eq!(&tail, b"xxxxxxx\n");
    let append = sh(
        "printf '%s\\n' \"$2\" >> \"$1\"",
        [
            view.as_os_str(),
            event(1, 3).trim_end().as_ref() as &std::ffi::OsStr,
        ],
    );
    assert!(
        !append.status.success(),
        "append after a 500 MiB line succeeded"
    );
    assert_eq!(fs::read(&path).unwrap(), bytes);
    mount.assert_alive();
    let log = mount.stop();
    assert!(log.contains("longer than 16777216 bytes"), "{log}");
}
