//! A session's title: the first words of its first user message, as the
//! rendered transcript (issue 16) and the views of issue 14 show it.
//!
//! Rules: the text of the message's `text` content blocks, joined by a
//! space; every control or white-space character (NUL, newline and tab
//! included) and every bidirectional format character ([`is_bidi_format`]:
//! U+202E would show a link name reversed in a file manager) becomes a
//! space and `/` becomes `_`; runs of spaces collapse to one and leading
//! spaces go; then at most [`TITLE_MAX_CHARS`] characters (Unicode scalar
//! values) are kept, cut after the last whole word that fits (a single
//! longer word is cut at the limit); finally trailing spaces and dots are
//! removed. A session with no user message, or one with no text, has the
//! empty title.
//!
//! Which message: the first line of the transcript's view after the header
//! that is a `user/message` event, whatever comes before it
//! ([`scan_title`]), among the lines that end within the view's first
//! [`TITLE_SCAN_LIMIT`] bytes; a session with none there has the empty
//! title for good. The views and `session.md` both take it from
//! [`scan_title`].

use serde_json::Value;

use super::error::Result;
use super::long_lines::{LongLine, LONG_LINE_BYTES};
use super::transcript::Transcript;

/// Longest title, in characters (Unicode scalar values).
pub const TITLE_MAX_CHARS: usize = 60;

/// Whether `c` is a bidirectional format character (the marks U+061C,
/// U+200E, U+200F, the embeddings and overrides U+202A–U+202E, the
/// isolates U+2066–U+2069): it reorders the text around it when shown.
pub fn is_bidi_format(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// The title made of `text` (see the module rules); may be empty.
pub fn title_from_text(text: &str) -> String {
    let mut clean = String::with_capacity(text.len().min(4 * TITLE_MAX_CHARS + 8));
    let mut chars = 0usize;
    // One character more than the limit tells whether a word was cut.
    for c in text.chars() {
        let c = if c.is_control() || c.is_whitespace() || is_bidi_format(c) {
            ' '
        } else if c == '/' {
            '_'
        } else {
            c
        };
        if c == ' ' && (clean.is_empty() || clean.ends_with(' ')) {
            continue;
        }
        clean.push(c);
        chars += 1;
        if chars > TITLE_MAX_CHARS {
            break;
        }
    }
    if chars > TITLE_MAX_CHARS {
        // Drop the extra character, then the cut word (if a space precedes it).
        let next = clean.pop();
        if next != Some(' ') {
            if let Some(space) = clean.rfind(' ') {
                clean.truncate(space);
            }
        }
    }
    let kept = clean.trim_end_matches([' ', '.']).len();
    clean.truncate(kept);
    clean
}

/// The title of a message whose `text` content blocks are `texts`, joined
/// by a space (see the module rules); may be empty. Reads no more of them
/// than the title can hold.
pub fn title_of_texts<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = String::new();
    for (i, t) in texts.into_iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(t);
        if text.chars().count() > 4 * TITLE_MAX_CHARS {
            break;
        }
    }
    title_from_text(&text)
}

/// The title of a `user/message` event's `data` (a `UserMessage`: its
/// `content` blocks); `None` when `data` holds no text block.
pub fn title_of_user_message(data: &Value) -> Option<String> {
    let texts: Vec<&str> = data
        .get("content")?
        .as_array()?
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| title_of_texts(texts))
}

/// Plaintext of the view looked at for the first user message, in bytes:
/// a session without one in the lines that end within its first 16 MiB has
/// the empty title for good.
pub const TITLE_SCAN_LIMIT: u64 = 16 * 1024 * 1024;

/// Plaintext read per step while looking for the first user message.
const STEP: u64 = 64 * 1024;

/// What [`scan_title`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TitleScan {
    /// The title, settled: the first user message's (empty when it holds
    /// no text), or empty when none ends within [`TITLE_SCAN_LIMIT`].
    Found(String),
    /// No user message in the complete lines up to view offset `checked`
    /// (a line boundary past the header): the title may come when the
    /// transcript grows; a later scan may start at `checked`.
    NotYet { checked: u64 },
}

/// Looks for the session title in `t`'s view (see the module rules), from
/// view offset `from` (0: the start, the header line skipped; else a
/// `checked` offset of an earlier [`TitleScan::NotYet`]) up to view offset
/// `to` (`u64::MAX`: the whole view, re-stat'ed at its end), decoding only
/// the frames up to the first user message. Holds at most one line of at
/// most [`TITLE_SCAN_LIMIT`] bytes; one longer than [`LONG_LINE_BYTES`]
/// only with a [`LongLine`] permit, which this call may wait for (until a
/// rendering or another scan is done with its long line).
///
/// Errors: [`Transcript::read`]'s (damage before the first user message,
/// I/O errors); nothing is settled then.
pub fn scan_title(t: &Transcript, from: u64, to: u64) -> Result<TitleScan> {
    let to = to.min(TITLE_SCAN_LIMIT);
    let mut offset = from;
    let mut checked = from;
    let mut header = from == 0;
    // Held while `pending` is longer than a long line (see [`LongLine`]);
    // declared first, so that `pending` is dropped before it.
    let mut permit: Option<LongLine> = None;
    let mut pending: Vec<u8> = Vec::new();
    while offset < to {
        let chunk = t.read(offset, (to - offset).min(STEP) as u32)?;
        if chunk.is_empty() {
            break;
        }
        offset += chunk.len() as u64;
        if pending.len() + chunk.len() > LONG_LINE_BYTES && permit.is_none() {
            permit = Some(LongLine::take());
        }
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(nl) = memchr::memchr(b'\n', &pending[start..]) {
            let line = &pending[start..start + nl];
            start += nl + 1;
            checked += nl as u64 + 1;
            if std::mem::take(&mut header) {
                continue;
            }
            if let Some(title) = user_message_title(line) {
                return Ok(TitleScan::Found(title));
            }
        }
        pending.drain(..start);
        if pending.len() <= LONG_LINE_BYTES && permit.is_some() {
            // The long line's memory goes before its permit does.
            pending.shrink_to_fit();
            permit = None;
        }
    }
    if offset >= TITLE_SCAN_LIMIT {
        return Ok(TitleScan::Found(String::new()));
    }
    Ok(TitleScan::NotYet { checked })
}

/// `Some(title)` when `line` (one line of the view, without its `\n`) is
/// a `user/message` event (the empty title when it holds no text), `None`
/// for any other line (other events, lines that are not JSON).
pub fn user_message_title(line: &[u8]) -> Option<String> {
    // Cheap test before parsing: most lines are other events.
    memchr::memmem::find(line, b"\"user/message\"")?;
    // A lone surrogate escape, which serde_json refuses, is read as
    // `JSON.parse` shows it (U+FFFD).
    let v: Option<Value> = serde_json::from_slice(line).ok().or_else(|| {
        serde_json::from_slice(&crate::store::json::lone_surrogates_replaced(line)?).ok()
    });
    let Some(v) = v else {
        return deep_user_message_title(line);
    };
    if v.get("type").and_then(Value::as_str) != Some("user/message") {
        return None;
    }
    Some(
        v.get("data")
            .and_then(title_of_user_message)
            .unwrap_or_default(),
    )
}

/// [`user_message_title`] of a line serde_json refuses (nested deeper
/// than its 128 levels, say) read by the store's iterative scanner, as
/// `JSON.parse` reads it: the content blocks' texts are found through the
/// member spans of its one scan ([`crate::store::json::parse_object_spans`],
/// no recursion chosen by the line), whatever a member beside them holds.
/// `None` when the line is not a JSON object or not a `user/message`.
fn deep_user_message_title(line: &[u8]) -> Option<String> {
    use crate::store::json::{parse_object_spans, Utf8};
    let (members, spanned) = parse_object_spans(line, Utf8::Replace).ok()?;
    if members.get("type").and_then(Value::as_str) != Some("user/message") {
        return None;
    }
    let content = spanned.root().get("data").and_then(|d| d.get("content"));
    let texts: Vec<String> = content
        .map(|c| c.items())
        .unwrap_or_default()
        .iter()
        .filter(|b| b.get("type").and_then(|t| t.string()).as_deref() == Some("text"))
        .filter_map(|b| {
            b.get("text")
                .and_then(|t| t.string())
                .map(|t| t.into_owned())
        })
        .collect();
    Some(if texts.is_empty() {
        String::new()
    } else {
        title_of_texts(texts.iter().map(String::as_str))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_after_whole_words_and_cleans() {
        assert_eq!(
            title_from_text("  Fix the\tparser/lexer\n now... "),
            "Fix the parser_lexer now"
        );
        let long = "word ".repeat(30);
        let t = title_from_text(&long);
        assert!(t.chars().count() <= TITLE_MAX_CHARS);
        assert_eq!(t, "word ".repeat(12).trim_end());
        let one = "x".repeat(100);
        assert_eq!(title_from_text(&one), "x".repeat(60));
        assert_eq!(title_from_text("a\0b"), "a b");
        assert_eq!(
            title_from_text("gpj\u{202E}.exe ok\u{2066}x"),
            "gpj .exe ok x"
        );
        assert_eq!(title_from_text(""), "");
        assert_eq!(title_from_text(" ... "), "");
        // Exactly 60 characters: kept whole.
        let sixty = format!("{} {}", "a".repeat(29), "b".repeat(30));
        assert_eq!(title_from_text(&sixty), sixty);
    }

    #[test]
    fn of_user_message_reads_text_blocks() {
        let data: Value =
            serde_json::json!({"content":[{"type":"image"},{"type":"text","text":"Hello there."}]});
        assert_eq!(title_of_user_message(&data).as_deref(), Some("Hello there"));
        assert_eq!(
            title_of_user_message(&serde_json::json!({"text":"x"})),
            None
        );
    }

    /// A title scan holds a line longer than a long line only with one of
    /// the process's permits, as a rendering does: with every permit held
    /// elsewhere, a scan past a 1 MiB line before the first user message
    /// waits (it held up to 16 MiB outside them until now).
    #[test]
    fn a_scan_over_a_long_line_waits_for_a_long_line_permit() {
        use crate::store::cache::FrameCache;
        use crate::store::frame::encode_frame;
        use crate::store::long_lines::LONG_LINES_AT_ONCE;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let header = br#"{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/w","delegationDepth":0}"#;
        let long = format!(
            r#"{{"type":"x/log","seq":0,"data":"{}"}}"#,
            "a".repeat(1 << 20)
        );
        let user = r#"{"type":"user/message","seq":1,"data":{"content":[{"type":"text","text":"After the long line"}]}}"#;
        let mut bytes = Vec::new();
        for line in [&header[..], long.as_bytes(), user.as_bytes()] {
            bytes.extend(encode_frame(&[line, b"\n"].concat()).unwrap());
        }
        std::fs::write(&path, &bytes).unwrap();
        let t = Transcript::open(
            &path,
            crate::store::Encoding::Zstd,
            Arc::new(FrameCache::new(8 << 20)),
        )
        .unwrap();
        let permits: Vec<LongLine> = (0..LONG_LINES_AT_ONCE).map(|_| LongLine::take()).collect();
        let waiting_before = LongLine::waiting();
        std::thread::scope(|s| {
            let scan = s.spawn(|| scan_title(&t, 0, u64::MAX));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while LongLine::waiting() <= waiting_before && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(
                !scan.is_finished(),
                "the scan held the long line without a permit"
            );
            drop(permits);
            let found = scan.join().unwrap().unwrap();
            assert_eq!(found, TitleScan::Found("After the long line".into()));
        });
    }
}
