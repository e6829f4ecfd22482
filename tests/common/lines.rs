//! Lines of a transcript as tests write them: a session header in the
//! reference's key order, and event lines serialized the way
//! `JSON.stringify` does, so that the reference hands back the same bytes.

/// `s` as a JSON string literal.
pub fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A version-0 header line (with its `\n`) in the reference's key order
/// (`type, version, id, createdAt, cwd, delegationDepth`); `cwd` omitted
/// when `None` (a `_no-cwd` session).
pub fn header_line(id: &str, cwd: Option<&str>, created_at: u64) -> String {
    header_line_version(id, cwd, created_at, 0)
}

/// [`header_line`] with another format `version` (which readers refuse
/// unless it is 0).
pub fn header_line_version(id: &str, cwd: Option<&str>, created_at: u64, version: u64) -> String {
    let mut s = format!(
        "{{\"type\":\"session\",\"version\":{version},\"id\":{},\"createdAt\":{created_at}",
        json_str(id)
    );
    if let Some(cwd) = cwd {
        s.push_str(&format!(",\"cwd\":{}", json_str(cwd)));
    }
    s.push_str(",\"delegationDepth\":0}\n");
    s
}

/// One event line (with its `\n`) of a type the harness does not know,
/// marked `ignorable` (else the reference refuses the whole log as written
/// by a newer harness).
pub fn note(seq: u64, writer: &str, n: u64) -> String {
    format!(
        "{{\"type\":\"x-sessionfs/note\",\"seq\":{seq},\"time\":{},\"data\":{{\"writer\":{},\"n\":{n}}},\"ignorable\":true}}\n",
        1_767_600_000_000u64 + seq,
        json_str(writer)
    )
}

/// `lines` framed one line per frame.
pub fn framed(lines: &[Vec<u8>]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|l| sessionfs::store::frame::encode_frame(l).unwrap())
        .collect()
}

/// `lines` with the first occurrence of `word` in its first user message
/// changed in its first letter, so that [`framed`] gives as many bytes as
/// for `lines` (a transcript rewritten in place to the same length); with
/// the new word. Panics when no letter tried keeps the length.
pub fn same_length_rewrite(lines: &[Vec<u8>], word: &str) -> (Vec<Vec<u8>>, String) {
    let user = lines
        .iter()
        .position(|l| l.starts_with(br#"{"type":"user/message""#))
        .expect("no user message");
    let len = framed(lines).len();
    let text = String::from_utf8(lines[user].clone()).unwrap();
    assert!(
        text.contains(word),
        "{word:?} is not in the first user message"
    );
    "QZXJVWK"
        .chars()
        .filter(|&c| !word.starts_with(c))
        .find_map(|c| {
            let new = format!("{c}{}", &word[1..]);
            let mut changed = lines.to_vec();
            changed[user] = text.replacen(word, &new, 1).into_bytes();
            (framed(&changed).len() == len).then_some((changed, new))
        })
        .expect("no one-letter change keeps the framed length")
}

/// Writes `bytes` over `path` in place (the same inode, no truncation) and
/// sets its mtime 1 s after the old one (two writes within one clock tick
/// share an mtime).
pub fn rewrite_in_place(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
    f.set_modified(mtime + std::time::Duration::from_secs(1))
        .unwrap();
}
