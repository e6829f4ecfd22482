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
