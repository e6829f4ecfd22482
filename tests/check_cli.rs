//! `sessionfs check`: finds what the corpus' damaged stores hold, and
//! `--repair` truncates a torn tail so that `zstd -dc` reads exactly the
//! committed prefix the reference's `readRaw` returned.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
}

fn check(args: &[&Path], repair: bool) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionfs"));
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

fn expected_sha(case: &str, id: &str) -> String {
    let text =
        std::fs::read_to_string(shared().join("corpus").join(case).join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["report"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .and_then(|s| s["readRaw"]["sha256"].as_str())
        .unwrap()
        .to_string()
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
    assert!(out.contains("frame at byte 1098"), "{out}");
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
    assert_eq!(sha, expected_sha("torn", "torn-multiblock-mid"));
    assert_eq!(check(&[&file], false).0, 0);
}
