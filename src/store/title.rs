//! A session's title: the first words of its first user message, as the
//! rendered transcript (issue 16) and the views of issue 14 show it.
//!
//! Rules: the text of the message's `text` content blocks, joined by a
//! space; every control or white-space character (NUL, newline and tab
//! included) becomes a space and `/` becomes `_`; runs of spaces collapse to one and leading
//! spaces go; then at most [`TITLE_MAX_CHARS`] characters (Unicode scalar
//! values) are kept, cut after the last whole word that fits (a single
//! longer word is cut at the limit); finally trailing spaces and dots are
//! removed. A session with no user message, or one with no text, has the
//! empty title.

use serde_json::Value;

/// Longest title, in characters (Unicode scalar values).
pub const TITLE_MAX_CHARS: usize = 60;

/// The title made of `text` (see the module rules); may be empty.
pub fn title_from_text(text: &str) -> String {
    let mut clean = String::with_capacity(text.len().min(4 * TITLE_MAX_CHARS + 8));
    let mut chars = 0usize;
    // One character more than the limit tells whether a word was cut.
    for c in text.chars() {
        let c = if c.is_control() || c.is_whitespace() {
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
}
