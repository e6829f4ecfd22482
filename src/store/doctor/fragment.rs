//! A stray fragment: the frames before a frame ended inside a line, and
//! the frame after them begins a whole record of its own instead of
//! continuing it (a writer that framed part of a line and was cut off, or
//! one that left out a record's newline). The reference joins the frames'
//! contents, so the joined line is no JSON record and its load fails
//! ("invalid record"); the scan reports it as a `split_line` finding and
//! the join repair ends the fragment or cuts it instead of joining.
//!
//! One predicate for the scan ([`super::scan_file`]) and the repair
//! ([`super::repair`]), so that the repair does what the report said.

use super::super::json::{parse_object, Utf8};

/// What the unfinished start of a line is, when the next frame does not
/// continue it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragment {
    /// Not a JSON object on its own: the start of a record whose rest
    /// never came. The repair cuts it (the original kept in quarantine).
    Torn,
    /// A whole JSON object without its newline. The repair ends it with
    /// one, so both records stay.
    Unended,
}

/// Whether `start` (the unfinished line's bytes, no `\n`) followed by
/// `next` (the next frame's first line, no `\n`) is a stray fragment: the
/// joined line is no JSON object, and `next` is one on its own. `None`
/// when the join is a record (a line split across frames, which the
/// reference loads), or when neither reading gives a record.
pub fn stray_fragment(start: &[u8], next: &[u8]) -> Option<Fragment> {
    let is_object = |b: &[u8]| parse_object(b, Utf8::Replace).is_ok();
    if start.is_empty() || !is_object(next) {
        return None;
    }
    let mut joined = Vec::with_capacity(start.len() + next.len());
    joined.extend_from_slice(start);
    joined.extend_from_slice(next);
    if is_object(&joined) {
        return None;
    }
    Some(if is_object(start) {
        Fragment::Unended
    } else {
        Fragment::Torn
    })
}

/// How the scan's finding describes a fragment of `len` bytes.
pub fn describe(fragment: Fragment, len: u64) -> String {
    match fragment {
        Fragment::Torn => format!(
            "the frame ends inside a line that the next frame does not continue (it begins a \
             record of its own): {len} bytes of a record whose rest never came"
        ),
        Fragment::Unended => format!(
            "the frame ends a record ({len} bytes) without its newline, and the next frame \
             begins a record of its own"
        ),
    }
}

/// What the reference does with such a file (the finding's reference).
pub const REFERENCE: &str =
    "load fails (invalid record: it joins the frames' contents into a line that is no record)";

#[cfg(test)]
mod tests {
    use super::*;

    const NEXT: &[u8] = br#"{"type":"x-note","seq":5,"time":1,"data":{},"ignorable":true}"#;

    #[test]
    fn a_torn_start_before_a_whole_record_is_a_stray_fragment() {
        assert_eq!(
            stray_fragment(br#"{"type":"x-note","seq":5,"ti"#, NEXT),
            Some(Fragment::Torn)
        );
        assert_eq!(
            stray_fragment(br#"{"type":"x-note","seq":4,"time":1,"data":{}}"#, NEXT),
            Some(Fragment::Unended)
        );
    }

    #[test]
    fn a_line_split_across_frames_is_not() {
        let line = br#"{"type":"x-note","seq":5,"time":1,"data":{"a":{"b":1}},"ignorable":true}"#;
        for cut in 1..line.len() {
            let (start, rest) = line.split_at(cut);
            assert_eq!(stray_fragment(start, rest), None, "cut at {cut}");
        }
        // Neither reading a record: left to the invalid-line finding.
        assert_eq!(stray_fragment(b"{\"a\":", b"not json"), None);
        assert_eq!(stray_fragment(b"", NEXT), None);
    }
}
