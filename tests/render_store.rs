//! The renderer and its cache without a mount (issue 16):
//!
//! * a second "mount" (a new store and mount core over the same root and
//!   index cache) `stat`s `session.md` without decoding a frame (counted by
//!   the store's `frames_decoded`), and gets the same size;
//! * a transcript growing one frame at a time, its rendering continued
//!   after each frame (and reopened from the persisted state half way),
//!   ends byte-identical to a fresh rendering of the whole transcript, and
//!   every intermediate rendering is a prefix of the final one; two
//!   mounts continuing the same persisted rendering in turns both end with
//!   the fresh rendering;
//! * the same calls stored packed (`normal`), unpacked and raw render to
//!   the same Markdown, session by session.
//! * a line longer than `MAX_RENDERED_LINE` is listed with its length and
//!   skipped, and the lines around it rendered; eight renderings at once
//!   of transcripts whose last frame decodes to a 1 GiB line peak under
//!   the README's 64 MiB (measured in a child process, `VmHWM`);
//! * a user message nested deeper than serde_json goes (200 levels and
//!   more) renders its text and gives the title; the events around it
//!   render.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sessionfs::fuse::fs::SessionFs;
use sessionfs::store::frame::encode_frame;
use sessionfs::store::render::cache::Rendering;
use sessionfs::store::render::{render_range, Renderer};
use sessionfs::store::{Encoding, FrameCache, Store, StoreOptions, Transcript};

use common::lines::{framed, rewrite_in_place, same_length_rewrite};
use common::{copy_tree, corpus_dir, zstd_dc};

const ROOT_INO: u64 = 1;

fn store(root: &Path, index_dir: &Path) -> Arc<Store> {
    Arc::new(
        Store::open(
            root,
            StoreOptions {
                index_dir: Some(index_dir.to_path_buf()),
                ..StoreOptions::default()
            },
        )
        .unwrap(),
    )
}

/// A fresh rendering of the whole transcript.
fn fresh(t: &Transcript) -> Vec<u8> {
    let mut md = Vec::new();
    let mut r = Renderer::new();
    render_range(t, &mut r, t.cached_attr().plain_len, &mut |b| {
        md.extend_from_slice(b);
        Ok(())
    })
    .unwrap();
    md
}

/// `stat` of `project/session/session.md` through a mount core: its size.
fn stat_md(fs: &SessionFs, project: &str, session: &str) -> u64 {
    let p = fs.lookup(ROOT_INO, OsStr::new(project)).unwrap();
    let s = fs.lookup(p.ino, OsStr::new(session)).unwrap();
    fs.lookup(s.ino, OsStr::new("session.md")).unwrap().size
}

#[test]
fn a_second_mount_stats_session_md_without_decoding() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let cache = tmp.path().join("cache");
    copy_tree(&corpus_dir().join("normal").join("root"), &root);
    // The reference writes frames without a content size, which the frame
    // index decodes once per mount to learn it; re-encoded here with
    // content sizes (one frame per line), a second mount decodes nothing
    // at all.
    let (project, resized) = (
        "--home-alice-work-app--",
        "3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f",
    );
    let backing = root.join(project).join(resized).join("session.jsonl.zstd");
    let plain = zstd_dc(&backing);
    let mut framed = Vec::new();
    for line in plain.split_inclusive(|&b| b == b'\n') {
        framed.extend(encode_frame(line).unwrap());
    }
    fs::write(&backing, framed).unwrap();

    for session in [resized, "Session-A"] {
        let first = store(&root, &cache);
        let fs1 = SessionFs::new(Arc::clone(&first), Duration::from_millis(200));
        let size1 = stat_md(&fs1, project, session);
        let t1 = first
            .transcript(OsStr::new(project), OsStr::new(session))
            .unwrap();
        let decoded1 = t1.frames_decoded();
        assert_eq!(size1, fresh(&t1).len() as u64);
        drop((fs1, first));

        let second = store(&root, &cache);
        let fs2 = SessionFs::new(Arc::clone(&second), Duration::from_millis(200));
        // What the transcript's view costs by itself (session.jsonl)...
        let p = fs2.lookup(ROOT_INO, OsStr::new(project)).unwrap();
        let s = fs2.lookup(p.ino, OsStr::new(session)).unwrap();
        fs2.lookup(s.ino, OsStr::new("session.jsonl")).unwrap();
        let t2 = second
            .transcript(OsStr::new(project), OsStr::new(session))
            .unwrap();
        let view_cost = t2.frames_decoded();
        // ... and what session.md adds: nothing.
        let size2 = fs2.lookup(s.ino, OsStr::new("session.md")).unwrap().size;
        assert_eq!(size2, size1, "{session}");
        assert_eq!(
            t2.frames_decoded(),
            view_cost,
            "{session}: the second mount's stat of session.md decoded frames"
        );
        if session == resized {
            assert!(
                decoded1 > 0,
                "the first rendering decoded nothing: the counter counts nothing"
            );
            assert_eq!(
                view_cost, 0,
                "{session}: frames with content sizes were decoded"
            );
        }
        eprintln!(
            "{session}: first mount {decoded1} frames decoded; second mount {} (view alone {view_cost})",
            t2.frames_decoded()
        );
    }
}

/// The session directory and plaintext lines of corpus session `rel`.
fn corpus_lines(rel: &str) -> Vec<Vec<u8>> {
    let plain = zstd_dc(
        &corpus_dir()
            .join("normal/root")
            .join(rel)
            .join("session.jsonl.zstd"),
    );
    plain
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

#[test]
fn growing_frame_by_frame_renders_as_a_fresh_rendering() {
    let tmp = tempfile::tempdir().unwrap();
    let cache_dir = tmp.path().join("cache");
    for rel in [
        "--home-alice-work-app--/Session-A",
        "--home-alice-work-app--/fork-of-3f6c1d2e",
        "_no-cwd/ignorable-event",
    ] {
        let lines = corpus_lines(rel);
        let path: PathBuf = tmp.path().join(rel.replace('/', "_") + ".jsonl.zstd");
        let mut file = fs::File::create(&path).unwrap();
        file.write_all(&encode_frame(&lines[0]).unwrap()).unwrap();
        let cache = Arc::new(FrameCache::new(1 << 20));
        let t = Transcript::open_with(&path, Encoding::Zstd, cache, None).unwrap();
        let mut rendering = Rendering::open(&t, Some(&cache_dir)).unwrap();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        // One, two or three lines per frame.
        let mut i = 1;
        let mut n = 1;
        while i < lines.len() {
            let end = (i + n).min(lines.len());
            file.write_all(&encode_frame(&lines[i..end].concat()).unwrap())
                .unwrap();
            i = end;
            n = n % 3 + 1;
            t.refresh().unwrap();
            let len = rendering.catch_up(&t).unwrap();
            seen.push(rendering.read(&t, 0, len as u32 + 10).unwrap());
            if i > lines.len() / 2 && i <= lines.len() / 2 + 3 {
                // Continue from the persisted state, as a new mount would.
                drop(rendering);
                rendering = Rendering::open(&t, Some(&cache_dir)).unwrap();
            }
        }
        let whole = fresh(&t);
        let last = seen.last().unwrap();
        assert_eq!(
            last, &whole,
            "{rel}: the grown rendering differs from a fresh one"
        );
        for (k, s) in seen.iter().enumerate() {
            assert!(
                whole.starts_with(s),
                "{rel}: rendering after frame {k} is not a prefix"
            );
        }
    }
}

#[test]
fn packed_unpacked_and_raw_stores_render_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let mut renderings = Vec::new();
    for case in ["normal", "unpacked", "raw"] {
        let root = tmp.path().join(case);
        copy_tree(&corpus_dir().join(case).join("root"), &root);
        let store = Store::open(&root, StoreOptions::default()).unwrap();
        let mut all = std::collections::BTreeMap::new();
        for project in store.list_projects().unwrap() {
            for e in store.list_project(&project).unwrap() {
                let Ok(t) = store.transcript(&project, &e.name) else {
                    continue;
                };
                all.insert(t.header().id.clone(), fresh(&t));
            }
        }
        renderings.push((case, all));
    }
    let (_, normal) = &renderings[0];
    assert_eq!(normal.len(), 23);
    for (case, other) in &renderings[1..] {
        assert_eq!(other.len(), normal.len(), "{case}: sessions");
        for (id, md) in normal {
            assert_eq!(
                other.get(id),
                Some(md),
                "{case}: session {id} renders differently"
            );
        }
    }
}

#[test]
fn two_mounts_sharing_a_cache_directory_both_render_right() {
    let tmp = tempfile::tempdir().unwrap();
    let cache_dir = tmp.path().join("cache");
    let lines = corpus_lines("--home-alice-work-app--/Session-A");
    let path = tmp.path().join("session.jsonl.zstd");
    let mut file = fs::File::create(&path).unwrap();
    file.write_all(&encode_frame(&lines[0]).unwrap()).unwrap();
    let open = || {
        let cache = Arc::new(FrameCache::new(1 << 20));
        Transcript::open_with(&path, Encoding::Zstd, cache, None).unwrap()
    };
    let (ta, tb) = (open(), open());
    let a = Rendering::open(&ta, Some(&cache_dir)).unwrap();
    let b = Rendering::open(&tb, Some(&cache_dir)).unwrap();
    for (k, line) in lines[1..].iter().enumerate() {
        file.write_all(&encode_frame(line).unwrap()).unwrap();
        // In turns: each continues where it stopped, whatever the other did.
        let (t, r) = if k % 2 == 0 { (&ta, &a) } else { (&tb, &b) };
        t.refresh().unwrap();
        r.catch_up(t).unwrap();
    }
    let c = Rendering::open(&ta, Some(&cache_dir)).unwrap();
    for (t, r) in [(&ta, &a), (&tb, &b), (&ta, &c)] {
        t.refresh().unwrap();
        let len = r.catch_up(t).unwrap();
        assert_eq!(r.read(t, 0, len as u32 + 1).unwrap(), fresh(t));
    }
}

#[test]
fn a_line_too_long_to_render_is_listed_and_skipped() {
    use sessionfs::store::render::MAX_RENDERED_LINE;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("session.jsonl");
    let header = r#"{"type":"session","version":0,"id":"long","createdAt":1767614400000,"cwd":"/w","delegationDepth":0}"#;
    let user =
        r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"before"}]}}"#;
    let long = format!(
        r#"{{"type":"user/message","seq":1,"data":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
        "a".repeat(MAX_RENDERED_LINE + 10)
    );
    let after =
        r#"{"type":"user/message","seq":2,"data":{"content":[{"type":"text","text":"after"}]}}"#;
    let text = format!("{header}\n{user}\n{long}\n{after}\n");
    fs::write(&path, &text).unwrap();
    let cache = Arc::new(FrameCache::new(1 << 20));
    let t = Transcript::open_with(&path, Encoding::Raw, cache, None).unwrap();
    let md = String::from_utf8(fresh(&t)).unwrap();
    assert!(
        md.len() < 4096,
        "the long line was rendered ({} bytes)",
        md.len()
    );
    let offset = header.len() + user.len() + 2;
    assert!(
        md.contains(&format!(
            "- line 3: {} bytes, not rendered (longer than the {MAX_RENDERED_LINE} bytes a line may have here); \
             read it in session.jsonl at byte {offset}\n",
            long.len() + 1
        )),
        "{md}"
    );
    assert!(
        md.contains("\n\nbefore\n\n") && md.ends_with("\n\nafter\n\n"),
        "{md}"
    );
}

/// `path` opened as a mount would (a transcript of its own cache) and
/// rendered with the persisted renderings under `cache_dir`: the
/// transcript and the whole rendering.
fn render_persisted(path: &Path, cache_dir: &Path) -> (Transcript, Vec<u8>) {
    let cache = Arc::new(FrameCache::new(1 << 20));
    let t = Transcript::open_with(path, Encoding::Zstd, cache, None).unwrap();
    let r = Rendering::open(&t, Some(cache_dir)).unwrap();
    let len = r.catch_up(&t).unwrap();
    let md = r.read(&t, 0, len as u32 + 1).unwrap();
    (t, md)
}

#[test]
fn a_transcript_rewritten_in_place_to_the_same_length_is_rendered_again() {
    // Found by a fresh tester: a persisted rendering was checked by device,
    // inode and header only, so a transcript rewritten in place (another
    // first user message, the same compressed length) kept showing the old
    // text in every later mount.
    let tmp = tempfile::tempdir().unwrap();
    let cache_dir = tmp.path().join("cache");
    let path = tmp.path().join("session.jsonl.zstd");
    let lines = corpus_lines("--home-alice-work-app--/Session-A");
    let (new_lines, word) = same_length_rewrite(&lines, "Because");
    fs::write(&path, framed(&lines)).unwrap();
    let (_, before) = render_persisted(&path, &cache_dir);
    assert!(String::from_utf8_lossy(&before).contains("Because"));

    let (inode, size) = (
        fs::metadata(&path).unwrap().ino(),
        fs::metadata(&path).unwrap().len(),
    );
    rewrite_in_place(&path, &framed(&new_lines));
    assert_eq!(fs::metadata(&path).unwrap().ino(), inode);
    assert_eq!(fs::metadata(&path).unwrap().len(), size);

    let (second, after) = render_persisted(&path, &cache_dir);
    assert!(
        String::from_utf8_lossy(&after).contains(&word),
        "the rendering of the rewritten transcript shows the old text"
    );
    assert_eq!(after, fresh(&second));
}

/// A persisted rendering whose transcript was rewritten in place by a
/// longer copy (helper 29: the same first frames, then another last frame
/// and one more, so the file looked grown) is rendered afresh by a later
/// mount, not continued from the old text.
#[test]
fn a_transcript_rewritten_in_place_by_a_longer_copy_is_rendered_again() {
    let tmp = tempfile::tempdir().unwrap();
    let cache_dir = tmp.path().join("cache");
    let path = tmp.path().join("session.jsonl.zstd");
    let lines = corpus_lines("--home-alice-work-app--/Session-A");
    fs::write(&path, framed(&lines)).unwrap();
    let (_, before) = render_persisted(&path, &cache_dir);

    // The last event becomes a user message of its seq; the old last
    // event follows with the next seq.
    let n = lines.len();
    let with_seq = |line: &[u8], seq: u64| {
        let mut v: serde_json::Value = serde_json::from_slice(line).unwrap();
        v["seq"] = seq.into();
        let mut out = serde_json::to_vec(&v).unwrap();
        out.push(b'\n');
        out
    };
    let last: serde_json::Value = serde_json::from_slice(&lines[n - 1]).unwrap();
    let seq = last["seq"].as_u64().unwrap();
    let user = lines
        .iter()
        .find(|l| l.starts_with(br#"{"type":"user/message""#))
        .unwrap();
    let mut new_lines = lines[..n - 1].to_vec();
    new_lines.push(with_seq(user, seq));
    new_lines.push(with_seq(&lines[n - 1], seq + 1));
    let inode = fs::metadata(&path).unwrap().ino();
    rewrite_in_place(&path, &framed(&new_lines));
    assert_eq!(fs::metadata(&path).unwrap().ino(), inode);

    let (second, after) = render_persisted(&path, &cache_dir);
    let want = fresh(&second);
    assert!(want != before, "the rewrite does not change the rendering");
    assert!(
        after == want,
        "the rendering of the rewritten transcript is not a fresh one"
    );
}

/// One zstd frame decoding to `blocks` RLE blocks of 128 KiB of `a`, then
/// `\n` (FORMAT.md: frames are independent standard zstd frames): a line
/// of `blocks` × 128 KiB bytes in a frame of about 4 bytes a block. The
/// frame header gives no content size and a 128 KiB window.
fn rle_line_frame(blocks: usize) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x38];
    let rle = (128u32 << 10) << 3 | 1 << 1; // size, type RLE, not last
    for _ in 0..blocks {
        f.extend_from_slice(&rle.to_le_bytes()[..3]);
        f.push(b'a');
    }
    let raw_last = 1u32 << 3 | 1; // one raw byte, last block
    f.extend_from_slice(&raw_last.to_le_bytes()[..3]);
    f.push(b'\n');
    f
}

/// The peak resident memory of this process in KiB (`VmHWM` of
/// /proc/self/status).
fn vm_hwm_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("no VmHWM in /proc/self/status")
}

/// Sessions rendered at once by [`huge_lines_rendered_at_once_child`].
const HUGE_SESSIONS: usize = 8;

/// Run in a child process by
/// [`renderings_of_1_gib_lines_at_once_stay_within_the_memory_budget`]
/// (its own peak RSS): eight transcripts of a few frames whose last frame
/// (about 32 KiB) decodes to one 1 GiB line, rendered at once on eight
/// threads as a mount would (`Rendering`, an 8 MiB frame cache shared).
/// Prints `peak VmHWM before: N KiB` and `peak VmHWM after: N KiB`.
#[test]
#[ignore = "run in a child process by renderings_of_1_gib_lines_at_once_stay_within_the_memory_budget"]
fn huge_lines_rendered_at_once_child() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = rle_line_frame(8192);
    let mut paths = Vec::new();
    for i in 0..HUGE_SESSIONS {
        let path = tmp.path().join(format!("s{i}.jsonl.zstd"));
        let header = format!(
            r#"{{"type":"session","version":0,"id":"huge-{i}","createdAt":1767614400000,"cwd":"/w","delegationDepth":0}}"#
        );
        let user = r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"before the huge line"}]}}"#;
        let mut bytes = encode_frame(format!("{header}\n").as_bytes()).unwrap();
        bytes.extend_from_slice(&encode_frame(format!("{user}\n").as_bytes()).unwrap());
        bytes.extend_from_slice(&huge);
        fs::write(&path, &bytes).unwrap();
        paths.push(path);
    }
    let cache = Arc::new(FrameCache::new(8 << 20));
    let before = vm_hwm_kib();
    let mds: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = paths
            .iter()
            .map(|path| {
                let cache = Arc::clone(&cache);
                scope.spawn(move || {
                    let t = Transcript::open_with(path, Encoding::Zstd, cache, None).unwrap();
                    let r = Rendering::open(&t, None).unwrap();
                    let len = r.catch_up(&t).unwrap();
                    String::from_utf8(r.read(&t, 0, len as u32).unwrap()).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let after = vm_hwm_kib();
    for md in &mds {
        assert!(md.starts_with("# before the huge line\n"), "{md}");
        assert!(
            md.contains(&format!("- line 3: {} bytes, ", (1u64 << 30) + 1))
                && md.contains("read it in session.jsonl at byte "),
            "{md}"
        );
    }
    eprintln!("peak VmHWM before: {before} KiB");
    eprintln!("peak VmHWM after: {after} KiB");
}

/// The README's memory budget: a rendering holds a bounded part of one
/// line, and renderings at once share a bound. The old renderer carried
/// up to 64 MiB of each line: eight such renderings at once peaked at
/// hundreds of MiB.
#[test]
fn renderings_of_1_gib_lines_at_once_stay_within_the_memory_budget() {
    let stderr = common::run_test_in_child("huge_lines_rendered_at_once_child", true, &[]);
    let figure = |what: &str| -> u64 {
        stderr
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|v| v.trim().trim_end_matches("KiB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{what}` in the child's output: {stderr}"))
    };
    let before = figure("peak VmHWM before:");
    let after = figure("peak VmHWM after:");
    eprintln!("{HUGE_SESSIONS} renderings of a 1 GiB line at once: VmHWM {before} KiB before, {after} KiB after");
    assert!(
        after < 64 * 1024,
        "{HUGE_SESSIONS} renderings at once peaked at {after} KiB (before: {before} KiB): \
         over the README's 64 MiB budget"
    );
}

/// The lines of a raw transcript of `lines` after a header, and its
/// fresh rendering.
fn render_raw(lines: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("session.jsonl");
    let header = r#"{"type":"session","version":0,"id":"deep","createdAt":1767614400000,"cwd":"/w","delegationDepth":0}"#;
    let mut text = format!("{header}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    fs::write(&path, &text).unwrap();
    let cache = Arc::new(FrameCache::new(1 << 20));
    let t = Transcript::open_with(&path, Encoding::Raw, cache, None).unwrap();
    assert_eq!(
        sessionfs::store::title::scan_title(&t, 0, u64::MAX).unwrap(),
        sessionfs::store::title::TitleScan::Found("hello deep".into()),
    );
    String::from_utf8(fresh(&t)).unwrap()
}

/// A content item holding a value nested 200 levels deep (the reference
/// loads it; serde_json stops at 128): the message's text is rendered and
/// is the title, and the events around it are rendered. The old renderer
/// found no title in it and rendered nothing at all.
#[test]
fn a_user_message_nested_deeper_than_serde_json_goes_renders_its_text() {
    for depth in [100, 200, 100_000] {
        let deep = format!(
            r#"{{"type":"user/message","seq":0,"time":1767614401000,"data":{{"content":[{{"type":"text","text":"hello deep","x":{}{}}}]}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let tool_deep = format!(
            r#"{{"type":"tool/call","seq":2,"data":{{"turn":1,"step":1,"name":"read_file","callId":"c1","arguments":"{{}}","x":{}0{}}}}}"#,
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        );
        let after = r#"{"type":"user/message","seq":3,"data":{"content":[{"type":"text","text":"after it"}]}}"#;
        let md = render_raw(&[
            &deep,
            r#"{"type":"step/start","seq":1,"data":{"turn":1,"step":1}}"#,
            &tool_deep,
            after,
        ]);
        assert!(md.starts_with("# hello deep\n"), "depth {depth}: {md}");
        assert!(md.contains("\n\nhello deep\n\n"), "depth {depth}: {md}");
        assert!(md.contains("### Step 1\n"), "depth {depth}: {md}");
        assert!(
            md.contains("**Tool call** `read_file` · `c1`\n"),
            "depth {depth}: {md}"
        );
        assert!(md.ends_with("\n\nafter it\n\n"), "depth {depth}: {md}");
        assert!(!md.contains("Rendering stopped"), "depth {depth}: {md}");
    }
}
