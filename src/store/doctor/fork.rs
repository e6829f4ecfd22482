//! A second history turned into a fork session, written the way the
//! reference writes forks (`@deepseek-ai/dsh-session` `fork`): the header
//! names `parentSession` and `seedLength`; the seed events (`seq` 0 ..
//! seedLength) come first, then a `session/end-seed` event at `seq` =
//! seedLength, then the divergent events renumbered after it.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::super::header::Header;
use super::super::json::{parse_object, parse_object_spans, Utf8};
use super::super::naming::encode_id;

/// The longest encoded session directory name the reference reads back.
pub const MAX_ENCODED_ID: usize = 244;

/// `<id>-fork-<8 hex of sha256(copy)>`, the id shortened (by characters)
/// until the encoded name fits in [`MAX_ENCODED_ID`] bytes.
pub fn fork_id(parent: &str, copy_bytes: &[u8]) -> String {
    let hash = Sha256::digest(copy_bytes);
    let suffix: String = format!(
        "-fork-{:02x}{:02x}{:02x}{:02x}",
        hash[0], hash[1], hash[2], hash[3]
    );
    let mut base: Vec<char> = parent.chars().collect();
    loop {
        let id: String = base.iter().collect::<String>() + &suffix;
        if encode_id(&id).is_ok_and(|e| e.len() <= MAX_ENCODED_ID) || base.is_empty() {
            return id;
        }
        base.pop();
    }
}

/// The `seq` (or `seq0`) a line starts with and how many events it holds
/// (a packed row counts its members), as the store reads lines.
pub fn line_span(line: &[u8]) -> Option<(u64, u64)> {
    match super::super::lines::read_record(line) {
        Ok(super::super::lines::Record::Event(s)) => Some((s.first, s.count)),
        _ => None,
    }
}

/// The fork's header line and event lines (each ending in `\n`): `parent`
/// is the parent's header, `seed` its lines before the divergence (events
/// with `seq` < the divergent history's first), `divergent` the other
/// history's lines after the common part. The fork's `createdAt` is the
/// time of its last seed event (the same bytes on every run).
///
/// The divergent lines keep their bytes but for their `seq` (or `seq0`)
/// value; no line is parsed recursively, so any nesting depth is read.
///
/// Errors: a line that is not a JSON object with a `seq` (or `seq0`).
pub fn fork_lines(
    parent: &Header,
    id: &str,
    seed: &[&[u8]],
    divergent: &[&[u8]],
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut events = Vec::new();
    let mut next = 0u64;
    let mut last_time = parent.created_at_ms;
    for line in seed {
        // Top-level members only (json.rs scans without recursion, at any
        // depth).
        let v = parse_object(line, Utf8::Replace).map_err(|e| format!("a seed line: {e}"))?;
        let (first, n) = line_span(line).ok_or("a seed line without seq")?;
        if first != next {
            return Err(format!("the seed is not contiguous at seq {first}"));
        }
        next = first + n;
        if let Some(t) = v
            .get("time")
            .or_else(|| v.get("time0"))
            .and_then(Value::as_u64)
        {
            last_time = last_time.max(t);
        }
        events.extend_from_slice(line);
        events.push(b'\n');
    }
    let seed_len = next;
    let end_seed = serde_json::json!({
        "type": "session/end-seed", "seq": seed_len, "time": last_time, "data": {}
    });
    events.extend(serde_json::to_vec(&end_seed).expect("json"));
    events.push(b'\n');
    next = seed_len + 1;
    for line in divergent {
        let (_, n) = line_span(line).ok_or("a divergent line without seq")?;
        events.extend(renumbered(line, next)?);
        next += n;
        events.push(b'\n');
    }
    let mut h = parent.fields.clone();
    h.insert("id".into(), Value::from(id));
    // Deterministic, so that a repair run again after a crash writes the
    // same fork: the time of the last seed event.
    h.insert("createdAt".into(), Value::from(last_time));
    h.insert("parentSession".into(), Value::from(parent.id.clone()));
    h.insert("seedLength".into(), Value::from(seed_len));
    let mut header = serde_json::to_vec(&h).map_err(|e| e.to_string())?;
    header.push(b'\n');
    Ok((header, events))
}

/// `line` (without its `\n`) with the value of its top-level `seq` (an
/// event) or `seq0` (a packed row) replaced by `seq`; every other byte
/// kept (a line that is not UTF-8 as read, with U+FFFD replacement). The
/// last of repeated keys is the one replaced, the one `JSON.parse` keeps.
///
/// Errors: the line is not a JSON object, or has neither key.
fn renumbered(line: &[u8], seq: u64) -> Result<Vec<u8>, String> {
    let (map, spanned) =
        parse_object_spans(line, Utf8::Replace).map_err(|e| format!("a divergent line: {e}"))?;
    let key = if map.contains_key("seq") {
        "seq"
    } else {
        "seq0"
    };
    let (start, end) = spanned
        .root()
        .get(key)
        .map(|v| v.span())
        .ok_or("a divergent line without seq")?;
    let text = spanned.text().as_bytes();
    let mut out = Vec::with_capacity(text.len() + 20);
    out.extend_from_slice(&text[..start]);
    out.extend_from_slice(seq.to_string().as_bytes());
    out.extend_from_slice(&text[end..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divergent_line_keeps_its_bytes_but_its_seq_at_any_depth() {
        assert_eq!(
            renumbered(br#"{"type":"t","seq":4,"data":{"seq":1},"seq":5 }"#, 9).unwrap(),
            br#"{"type":"t","seq":4,"data":{"seq":1},"seq":9 }"#
        );
        let deep = format!(
            r#"{{"type":"t","seq":3,"data":{}{}}}"#,
            "[".repeat(200_000),
            "]".repeat(200_000)
        );
        let got = renumbered(deep.as_bytes(), 12).unwrap();
        assert_eq!(got, deep.replace(r#""seq":3"#, r#""seq":12"#).as_bytes());
        assert!(renumbered(br#"{"type":"t"}"#, 1).is_err());
    }

    #[test]
    fn fork_ids_fit() {
        let id = fork_id("a", b"x");
        assert!(id.starts_with("a-fork-") && id.len() == "a-fork-".len() + 8);
        let long = "é".repeat(200);
        let id = fork_id(&long, b"x");
        assert!(encode_id(&id).unwrap().len() <= MAX_ENCODED_ID);
        assert!(id.ends_with(&fork_id("a", b"x")["a".len()..]));
    }
}
