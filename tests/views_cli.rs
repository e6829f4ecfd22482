//! `sessionfs list --by cwd|date|title`, `--since` and `--grep-title` (issue 14)
//! over a copy of the corpus, against the corpus's own headers and
//! `date(1)`.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use common::lines::{framed, rewrite_in_place, same_length_rewrite};
use common::{copy_tree, corpus_dir};

const TZ: &str = "XYZ-14";

fn list(root: &Path, cache: &Path, args: &[&str]) -> (String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .arg("list")
        .arg(root)
        .args(args)
        .env("TZ", TZ)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

/// id → (createdAt, project/session) of the corpus sessions.
fn headers() -> BTreeMap<String, (u64, String)> {
    let case = corpus_dir().join("normal");
    let doc: Value =
        serde_json::from_slice(&fs::read(case.join("expected.json")).unwrap()).unwrap();
    let dirs: BTreeMap<String, String> = doc["report"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let d = s["dirs"][0].as_str().unwrap().trim_end_matches('/');
            (s["id"].as_str().unwrap().to_string(), d.to_string())
        })
        .collect();
    doc["report"]["list"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let id = h["id"].as_str().unwrap().to_string();
            let dir = dirs[&id].clone();
            (id, (h["createdAt"].as_u64().unwrap(), dir))
        })
        .collect()
}

fn date(ms: u64, format: &str) -> String {
    let out = Command::new("date")
        .env("TZ", TZ)
        .arg("-d")
        .arg(format!("@{}", ms / 1000))
        .arg(format!("+{format}"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `list --by VIEW` over a copy of the normal corpus (in `root/` of the
/// returned directory, its catalog in `cache/`): what it printed.
fn listed_by(view: &str) -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal/root"), &root);
    let (text, code) = list(&root, &tmp.path().join("cache"), &["--by", view]);
    assert_eq!(code, 0, "{text}");
    (tmp, text)
}

#[test]
fn list_by_date_prints_each_session_once_under_its_day_and_filters() {
    let (tmp, text) = listed_by("date");
    let (root, cache) = (tmp.path().join("root"), tmp.path().join("cache"));
    // Walk the printed tree: indentation gives the directory.
    let mut path: Vec<String> = Vec::new();
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let depth = (line.len() - line.trim_start().len()) / 2;
        let item = line.trim_start();
        path.truncate(depth - 1);
        if let Some(dir) = item.strip_suffix('/') {
            path.push(dir.to_string());
        } else {
            let (_, target) = item.rsplit_once(" -> ").unwrap();
            assert!(
                found.insert(target.to_string(), path.join("/")).is_none(),
                "{target}"
            );
        }
    }
    let headers = headers();
    assert_eq!(found.len(), headers.len());
    for (created, dir) in headers.values() {
        assert_eq!(found[dir], date(*created, "%Y/%m/%d"), "{dir}");
    }

    // --since: the start of a local day; --grep-title: every word.
    let (text, _) = list(&root, &cache, &["--by", "cwd", "--since", "2026-01-06"]);
    let since_ms = headers
        .values()
        .filter(|(c, _)| date(*c, "%Y-%m-%d").as_str() >= "2026-01-06")
        .count();
    assert!(since_ms > 0 && since_ms < headers.len());
    assert_eq!(text.matches(" -> ").count(), since_ms, "{text}");
    let (text, code) = list(&root, &cache, &["--grep-title", "eof UNICODE tokenizer"]);
    assert_eq!(code, 0);
    let ids: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(ids, ["cwd-root"], "{text}");
    let (_, code) = list(&root, &cache, &["--since", "yesterday-ish"]);
    assert_eq!(code, 2);
}

/// `list --by` reports the sessions its trees leave out, as the table does
/// (on stderr, exit 1): the stray-files case holds an empty transcript
/// (found by a fresh tester: `--by cwd|date` exited 0 without a word).
#[test]
fn list_by_reports_the_sessions_it_leaves_out() {
    let root = corpus_dir().join("stray-files/root");
    let cache = tempfile::tempdir().unwrap();
    let table = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .arg("list")
        .arg(&root)
        .env("XDG_CACHE_HOME", cache.path())
        .output()
        .unwrap();
    let table_err = String::from_utf8_lossy(&table.stderr).into_owned();
    assert_eq!(table.status.code(), Some(1));
    assert!(table_err.contains("zero-byte"), "{table_err}");
    for by in ["cwd", "date"] {
        let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .arg("list")
            .arg(&root)
            .args(["--by", by])
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "--by {by}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), table_err, "--by {by}");
        assert!(!out.stdout.is_empty(), "--by {by}: no tree");
    }
}

#[test]
fn list_by_title_prints_each_session_once_named_by_its_short_id() {
    let (_tmp, text) = listed_by("title");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(".by-title/"));
    // A flat view: every other line is one link, indented once.
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for line in lines {
        let item = line
            .strip_prefix("  ")
            .unwrap_or_else(|| panic!("{line:?}"));
        assert!(!item.starts_with(' ') && !item.ends_with('/'), "{line:?}");
        let (name, target) = item.rsplit_once(" -> ").unwrap();
        assert!(
            found.insert(target.to_string(), name.to_string()).is_none(),
            "{target}"
        );
    }
    let headers = headers();
    assert_eq!(found.len(), headers.len(), "{text}");
    for (id, (_, dir)) in &headers {
        // The short id: the first 8 characters of the id's body (the
        // part after its last `_`), unless the name carries the full id.
        let body = id.rsplit('_').next().unwrap();
        // `/` and control characters cannot be in a name: `_`.
        let short: String = body
            .chars()
            .take(8)
            .map(|c| if c == '/' || c.is_control() { '_' } else { c })
            .collect();
        let name = &found[dir];
        assert!(
            name.ends_with(&short) || name.ends_with(id.as_str()),
            "{name} for {id}"
        );
    }
}

#[test]
fn a_transcript_rewritten_in_place_to_the_same_length_gets_its_new_title() {
    // Found by a fresh tester: the persisted catalog took a transcript of
    // the same inode and length for unchanged, so one rewritten in place
    // (another first user message) kept its old title in every later list
    // and mount.
    let tmp = tempfile::tempdir().unwrap();
    let (root, cache) = (tmp.path().join("root"), tmp.path().join("cache"));
    copy_tree(&corpus_dir().join("normal/root"), &root);
    let path = root.join("--home-alice-work-app--/Session-A/session.jsonl.zstd");
    let lines: Vec<Vec<u8>> = common::zstd_dc(&path)
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    // One line per frame, so that a one-letter change keeps the length.
    fs::write(&path, framed(&lines)).unwrap();
    let (text, _) = list(&root, &cache, &["--by", "title"]);
    assert!(text.contains("Because a and the need"), "{text}");
    let (new_lines, word) = same_length_rewrite(&lines, "Because");
    let size = fs::metadata(&path).unwrap().len();
    rewrite_in_place(&path, &framed(&new_lines));
    assert_eq!(fs::metadata(&path).unwrap().len(), size);
    let (text, code) = list(&root, &cache, &["--by", "title"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("{word} a and the need")),
        "the old title is still listed: {text}"
    );
    assert!(!text.contains("Because a and the need"), "{text}");

    // Grown (a list records the new length), then rewritten in place to
    // that length: rewritten, not grown.
    let mut grown = new_lines.clone();
    grown.push(grown.last().unwrap().clone());
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&framed(&grown[grown.len() - 1..]))
        .unwrap();
    let (text, _) = list(&root, &cache, &["--by", "title"]);
    assert!(text.contains(&format!("{word} a and the need")), "{text}");
    let (again, word2) = same_length_rewrite(&grown, &word);
    rewrite_in_place(&path, &framed(&again));
    let (text, _) = list(&root, &cache, &["--by", "title"]);
    assert!(
        text.contains(&format!("{word2} a and the need")),
        "a rewrite to the grown length kept the old title: {text}"
    );
}
