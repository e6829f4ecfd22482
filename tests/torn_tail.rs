//! Torn tails, every byte offset of the last frame (issue 9, Must show 3):
//! the classifier, the store's view, `check` and `check --repair` agree
//! that a last frame cut anywhere is a torn tail; the repair keeps the cut
//! bytes in the quarantine folder and leaves exactly the committed prefix
//! (as `zstd -dc` reads it). A sample of 20 offsets goes through a mount.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{sh, zstd_dc, Mount};
use sessionfs::store::check::check_transcript;
use sessionfs::store::classify::{walk, WalkEnd};
use sessionfs::store::frame::encode_frame;
use sessionfs::store::{Encoding, FrameCache, Transcript};

const PROJECT: &str = "--home-alice-work-app--";

fn lines(id: &str) -> Vec<String> {
    let mut v = vec![format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1767600000000,\
         \"cwd\":\"{}\",\"delegationDepth\":0}}\n",
        common::CORPUS_APP_CWD
    )];
    for seq in 0..3 {
        v.push(format!(
            "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":{},\"data\":{{\"n\":\"note {seq} of a small transcript\"}},\"ignorable\":true}}\n",
            1000 + seq
        ));
    }
    v
}

/// The whole transcript of session `id`, the start of its last frame, and
/// the plaintext of the frames before it.
fn transcript(id: &str) -> (Vec<u8>, usize, Vec<u8>) {
    let parts = lines(id);
    let mut file = Vec::new();
    let mut last_start = 0;
    for p in &parts {
        last_start = file.len();
        file.extend(encode_frame(p.as_bytes()).unwrap());
    }
    let prefix = parts[..parts.len() - 1].concat().into_bytes();
    (file, last_start, prefix)
}

fn write_session(root: &Path, id: &str, bytes: &[u8]) -> PathBuf {
    let dir = root.join(PROJECT).join(id);
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.jsonl.zstd");
    fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn every_cut_of_the_last_frame_is_a_torn_tail_at_the_store_level() {
    let tmp = tempfile::tempdir().unwrap();
    // The quarantine folder of the repairs below (read by this process
    // only; no other test of this binary repairs).
    let state = tmp.path().join("state");
    std::env::set_var("XDG_STATE_HOME", &state);
    let (full, last_start, prefix) = transcript("torn");
    assert!(full.len() - last_start > 40);
    let root = tmp.path().join("root");
    for cut in last_start + 1..full.len() {
        let bytes = &full[..cut];
        // The classifier.
        assert_eq!(
            walk(bytes, 0, cut as u64, None, |_| true).unwrap(),
            WalkEnd::Torn {
                at: last_start as u64
            },
            "cut {cut}"
        );
        // The store's view: the complete frames, no damage.
        let path = write_session(&root, "torn", bytes);
        let t = Transcript::open(&path, Encoding::Zstd, Arc::new(FrameCache::new(1 << 20)))
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert!(t.damage().is_none(), "cut {cut}");
        assert_eq!(t.cached_attr().plain_len, prefix.len() as u64, "cut {cut}");
        assert_eq!(t.read(0, 1 << 16).unwrap(), prefix, "cut {cut}");
        // check: a torn tail, nothing else.
        let r = check_transcript(&path, false).unwrap();
        assert_eq!(r.torn_at, Some(last_start as u64), "cut {cut}: {r:?}");
        assert!(
            r.damage.is_none() && r.problems.is_empty(),
            "cut {cut}: {r:?}"
        );
        assert!(!r.torn_in_header);
        // --repair: the cut bytes are copied first, then cut.
        let r = check_transcript(&path, true).unwrap();
        assert!(r.repaired, "cut {cut}: {r:?}");
        let copy = r.quarantined.clone().expect("a quarantine copy");
        assert!(copy.starts_with(&state), "{}", copy.display());
        assert_eq!(
            fs::read(&copy).unwrap(),
            &full[last_start..cut],
            "cut {cut}"
        );
        assert_eq!(fs::read(&path).unwrap(), &full[..last_start], "cut {cut}");
        assert_eq!(zstd_dc(&path), prefix, "cut {cut}");
        let again = check_transcript(&path, false).unwrap();
        assert!(again.is_clean(), "cut {cut}: {again:?}");
    }
    std::env::remove_var("XDG_STATE_HOME");
}

#[test]
fn twenty_cuts_of_the_last_frame_through_a_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let mut cases = Vec::new();
    for k in 0..20 {
        let id = format!("torn-{k:02}");
        let (full, last_start, prefix) = transcript(&id);
        let span = full.len() - last_start - 1;
        let cut = last_start + 1 + k * span / 19;
        let cut = cut.min(full.len() - 1);
        write_session(&root, &id, &full[..cut]);
        cases.push((id, cut, prefix));
    }
    let mut mount = Mount::start(&root, &[]);
    for (id, cut, prefix) in &cases {
        let view = mount.join(PROJECT).join(id).join("session.jsonl");
        let meta = fs::metadata(&view).unwrap_or_else(|e| panic!("{id} cut {cut}: {e}"));
        assert_eq!(meta.len(), prefix.len() as u64, "{id} cut {cut}");
        let cat = sh("cat \"$1\"", [&view]);
        assert!(cat.status.success(), "{id} cut {cut}: cat failed");
        assert_eq!(&cat.stdout, prefix, "{id} cut {cut}");
    }
    mount.assert_alive();
    mount.stop();
}
