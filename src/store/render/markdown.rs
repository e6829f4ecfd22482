//! Markdown building blocks of the rendered transcript: inline code spans,
//! fenced blocks and one-line texts that no input can break out of.

/// Longest run of backticks in `s`.
fn longest_backtick_run(s: &str) -> usize {
    let (mut best, mut run) = (0, 0);
    for b in s.bytes() {
        if b == b'`' {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

/// `s` on one line: control characters (newlines included) become spaces.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `s` as an inline code span (on one line, delimited by more backticks
/// than it holds); `*(empty)*` for the empty string.
pub fn code(s: &str) -> String {
    let s = one_line(s);
    if s.is_empty() {
        return "*(empty)*".to_string();
    }
    let ticks = "`".repeat(longest_backtick_run(&s) + 1);
    if s.starts_with('`') || s.ends_with('`') {
        format!("{ticks} {s} {ticks}")
    } else {
        format!("{ticks}{s}{ticks}")
    }
}

/// Appends `body` as a fenced code block with info string `info`: the
/// fence is longer than any backtick run of `body`; a blank line follows.
pub fn fence(out: &mut Vec<u8>, info: &str, body: &str) {
    let ticks = "`".repeat((longest_backtick_run(body) + 1).max(3));
    out.extend_from_slice(ticks.as_bytes());
    out.extend_from_slice(info.as_bytes());
    out.push(b'\n');
    super::push(out, body);
    if !body.is_empty() && !body.ends_with('\n') {
        out.push(b'\n');
    }
    out.extend_from_slice(ticks.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// What [`shorten`] kept of a text.
pub struct Shortened<'a> {
    /// The lines shown (a prefix of the text).
    pub shown: &'a str,
    /// Lines left out (a partly shown line counts).
    pub lines_left: usize,
    /// Bytes left out.
    pub bytes_left: usize,
}

/// The first `max_lines` lines of `text`, and at most `max_bytes` bytes of
/// them (cut at a character boundary).
pub fn shorten(text: &str, max_lines: usize, max_bytes: usize) -> Shortened<'_> {
    let mut end = text.len();
    let mut lines = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            lines += 1;
            if lines == max_lines {
                end = i + 1;
                break;
            }
        }
    }
    if end > max_bytes {
        end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
    }
    let rest = &text[end..];
    let lines_left = if rest.is_empty() {
        0
    } else {
        rest.bytes().filter(|&b| b == b'\n').count() + usize::from(!rest.ends_with('\n'))
    };
    Shortened {
        shown: &text[..end],
        lines_left,
        bytes_left: rest.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_and_fences_hold_backticks() {
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(code("a\nb"), "`a b`");
        let mut out = Vec::new();
        fence(&mut out, "json", "x ``` y");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "````json\nx ``` y\n````\n\n"
        );
    }

    #[test]
    fn shorten_counts_what_is_left() {
        let s = shorten("a\nb\nc\nd", 2, 100);
        assert_eq!((s.shown, s.lines_left, s.bytes_left), ("a\nb\n", 2, 3));
        let s = shorten("a\nb\n", 2, 100);
        assert_eq!((s.shown, s.lines_left, s.bytes_left), ("a\nb\n", 0, 0));
        let s = shorten("ééé", 10, 3);
        assert_eq!((s.shown, s.lines_left, s.bytes_left), ("é", 1, 4));
    }
}
