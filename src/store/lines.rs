//! Validation of written lines: splitting a write into complete lines,
//! checking that each is one valid record, and `seq` continuity.
//!
//! Source: FORMAT.md ("Event lines", "Header line", "Decisions where the
//! reference is silent") and MOUNT.md ("Appending"); packed chunk rows are
//! checked as the reference's `validateRow` checks them, so that every line
//! sessionfs accepts is one the reference can decode.
//!
//! Nothing here touches the disk: the FUSE adapter checks lines as they
//! arrive (against the committed tail plus the lines pending on a handle),
//! and the append and publication paths check them again at commit.

use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use super::error::StoreError;
use super::header::{header_from_fields, header_from_line, Header, HeaderError};
use super::json::{parse_object, parse_object_keeping, parse_object_spans, Utf8};
use super::json_view::Spanned;

/// Largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// The `type` tags of packed chunk rows, with the key of their member array.
const ROW_TYPES: [(&str, &str); 3] = [
    ("text-chunks", "texts"),
    ("reasoning-chunks", "texts"),
    ("tool-call-chunks", "args"),
];

/// Splits `buf` at its last `\n`: the complete lines (each ending in `\n`,
/// possibly none) and the incomplete remainder (possibly empty).
pub fn split_complete(buf: &[u8]) -> (&[u8], &[u8]) {
    match buf.iter().rposition(|&b| b == b'\n') {
        Some(i) => buf.split_at(i + 1),
        None => (&buf[..0], buf),
    }
}

/// The lines of `complete` (as returned by [`split_complete`]), each
/// without its `\n`. Bytes after the last `\n` are not yielded.
pub fn complete_lines(complete: &[u8]) -> impl Iterator<Item = &[u8]> {
    let (complete, _) = split_complete(complete);
    let body = complete.strip_suffix(b"\n").unwrap_or(complete);
    let empty = complete.is_empty();
    body.split(|&b| b == b'\n').filter(move |_| !empty)
}

/// The event numbers one line covers: `first .. first + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqSpan {
    /// `seq` of an event line, `seq0` of a packed chunk row.
    pub first: u64,
    /// 1 for an event line, the member count of a packed row.
    pub count: u64,
}

impl SeqSpan {
    /// The `seq` that the next line must start with.
    pub fn end(&self) -> u64 {
        self.first + self.count
    }
}

/// What one valid line is.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A session header (`type` = "session"), valid per FORMAT.md.
    Header(Box<Header>),
    /// An event line or a packed chunk row.
    Event(SeqSpan),
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineProblem {
    /// Not UTF-8, not one JSON object, no valid `seq`, a malformed packed
    /// row, an invalid header, or a header where an event belongs (or the
    /// reverse).
    Invalid(String),
    /// The line's first `seq` is `found`; `expected` continues the
    /// transcript.
    Seq { expected: u64, found: u64 },
}

/// A refused line: its 1-based number within the batch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number within the checked batch.
    pub line: usize,
    /// What is wrong with it.
    pub problem: LineProblem,
}

impl LineError {
    /// The store error for a write to `path` (errno EINVAL either way).
    pub fn into_store(self, path: &Path) -> StoreError {
        match self.problem {
            LineProblem::Invalid(reason) => StoreError::InvalidLine {
                path: path.to_path_buf(),
                line: self.line,
                reason,
            },
            LineProblem::Seq { expected, found } => StoreError::SeqConflict {
                path: path.to_path_buf(),
                line: self.line,
                expected,
                found,
            },
        }
    }

    /// The same error numbered `by` lines later (a batch checked after
    /// `by` other lines of the same write).
    pub fn shifted(mut self, by: usize) -> Self {
        self.line += by;
        self
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            LineProblem::Invalid(reason) => write!(
                f,
                "line {}: {reason}; write one JSON object per line, ending in a newline",
                self.line
            ),
            LineProblem::Seq { expected, found } => write!(
                f,
                "line {}: seq {found} does not continue the transcript (expected {expected}); \
                 re-read the transcript's end and number the line from {expected}",
                self.line
            ),
        }
    }
}

impl std::error::Error for LineError {}

/// A non-negative safe integer (`Number.isSafeInteger(n) && n >= 0`),
/// whether written as `5`, `5.0` or `5e0`.
pub(crate) fn safe_non_negative(value: Option<&Value>) -> Option<u64> {
    safe_integer(value).and_then(|n| u64::try_from(n).ok())
}

/// A safe integer (`Number.isSafeInteger`), possibly negative.
pub(crate) fn safe_integer(value: Option<&Value>) -> Option<i64> {
    let value = value?;
    let limit = MAX_SAFE_INTEGER as i64;
    if let Some(n) = value.as_i64() {
        return (-limit..=limit).contains(&n).then_some(n);
    }
    if value.as_u64().is_some() {
        return None; // above i64::MAX, so above the safe range
    }
    let f = value.as_f64()?;
    let ok = f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64;
    ok.then_some(f as i64)
}

/// Checks a packed chunk row as the reference's `validateRow` does and
/// returns the events it covers.
fn check_row(tag: &str, members_key: &str, row: &Map<String, Value>) -> Result<SeqSpan, String> {
    let bad = |why: &str| Err(format!("malformed {tag} row: {why}"));
    let exact = |map: &Map<String, Value>, keys: &[&str]| {
        map.len() == keys.len() && keys.iter().all(|k| map.contains_key(*k))
    };
    if !exact(row, &["type", "seq0", "time0", "data"]) {
        return bad("the row must have exactly the keys type, seq0, time0, data");
    }
    let Some(seq0) = safe_non_negative(row.get("seq0")) else {
        return bad("seq0 must be a non-negative safe integer");
    };
    let Some(time0) = safe_integer(row.get("time0")) else {
        return bad("time0 must be a safe integer");
    };
    let Some(Value::Object(data)) = row.get("data") else {
        return bad("data must be an object");
    };
    if tag == "tool-call-chunks" {
        let with_name = exact(data, &["turn", "step", "index", "id", "name", "dt", "args"]);
        if !with_name && !exact(data, &["turn", "step", "index", "id", "dt", "args"]) {
            return bad(
                "data must have exactly the keys turn, step, index, id, name (optional), dt, args",
            );
        }
        if !data["id"].is_string() || (with_name && !data["name"].is_string()) {
            return bad("data.id (and data.name when present) must be strings");
        }
    } else if !exact(data, &["turn", "step", "index", "dt", "texts"]) {
        return bad("data must have exactly the keys turn, step, index, dt, texts");
    }
    if !["turn", "step", "index"]
        .iter()
        .all(|k| data[*k].is_number())
    {
        return bad("data.turn, data.step and data.index must be numbers");
    }
    let members = match data.get(members_key) {
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => a.len(),
        _ => {
            return bad(&format!(
                "data.{members_key} must be a non-empty array of strings"
            ))
        }
    };
    let Some(Value::Array(dt)) = data.get("dt") else {
        return bad("data.dt must be an array of safe integers");
    };
    if dt.len() != members - 1 {
        return bad(&format!(
            "data.dt has {} gaps for {members} members (it needs {})",
            dt.len(),
            members - 1
        ));
    }
    let limit = MAX_SAFE_INTEGER as i64;
    let mut time = time0;
    for gap in dt {
        let Some(gap) = safe_integer(Some(gap)) else {
            return bad("data.dt must be an array of safe integers");
        };
        time += gap;
        if !(-limit..=limit).contains(&time) {
            return bad("member times must stay safe integers");
        }
    }
    let count = members as u64;
    if seq0 + count - 1 > MAX_SAFE_INTEGER {
        return bad("member seqs must stay safe integers");
    }
    Ok(SeqSpan { first: seq0, count })
}

/// Whether `tag` is a packed chunk row's type (a row stands for several
/// `assistant/chunk` events, which the reference expands itself).
pub(crate) fn is_row_type(tag: &str) -> bool {
    ROW_TYPES.iter().any(|(t, _)| *t == tag)
}

/// Checks one line to be written (without its `\n`): valid UTF-8, then
/// as [`read_record`], and an event (not a packed row) also as the
/// reference checks each event it loads ([`super::event_shape`]).
///
/// Errors: the reason, as a sentence fragment.
pub fn parse_record(line: &[u8]) -> Result<Record, String> {
    parse_record_noting(line).map(|(record, _)| record)
}

/// The deepest nesting a line written through sessionfs may reach (its
/// object is level 1). The reference parses any depth, but its `load`
/// copies every event with `structuredClone`, which fails with "Maximum
/// call stack size exceeded" from about 2,500 nested arrays (measured
/// with the oracle: 2,000 loads, 2,500 fails); half that keeps a margin
/// for other machines' stack sizes.
pub const MAX_LOADABLE_DEPTH: usize = 1_000;

/// [`parse_record`], and the line's event type when the reference does
/// not know it and it is not marked ignorable
/// ([`super::doctor::content::unknown_event_type`]).
fn parse_record_noting(line: &[u8]) -> Result<(Record, Option<String>), String> {
    let (map, spanned) = parse_object_spans(line, Utf8::Require).map_err(|e| e.to_string())?;
    if spanned.max_depth() > MAX_LOADABLE_DEPTH {
        return Err(format!(
            "the reference would refuse to load the session: the line nests {} levels deep, \
             more than the {MAX_LOADABLE_DEPTH} sessionfs takes (the reference's load copies \
             each event recursively and fails with \"Maximum call stack size exceeded\" \
             from about 2,500 levels); flatten the value",
            spanned.max_depth()
        ));
    }
    let unknown = super::doctor::content::unknown_event_type(&map).map(str::to_owned);
    let record = record_from(map, Some(&spanned), line, Utf8::Require)?;
    if let Record::Event(_) = record {
        if let Some(why) = super::event_shape::refusal(&spanned) {
            return Err(format!(
                "the reference would refuse to load the session: {why}"
            ));
        }
    }
    Ok((record, unknown))
}

/// Reads one committed line (without its `\n`) as the reference does
/// (bytes that are not UTF-8 decoded with replacement): exactly one JSON
/// object as `JSON.parse` reads it ([`super::json`]), and either a valid
/// session header or an event with a `type` string and a `seq` (a
/// non-negative safe integer), or a valid packed chunk row (`seq0` and its
/// members).
///
/// Errors: the reason, as a sentence fragment.
pub fn read_record(line: &[u8]) -> Result<Record, String> {
    record_of(line, Utf8::Replace)
}

fn record_of(line: &[u8], utf8: Utf8) -> Result<Record, String> {
    let map = parse_object(line, utf8).map_err(|e| e.to_string())?;
    record_from(map, None, line, utf8)
}

/// As [`record_of`], from the line's top-level members `map` (and its
/// spans when the caller scanned them: a header then keeps the UTF-16
/// units of an id or cwd holding a lone surrogate, [`Header::units`]).
fn record_from(
    map: Map<String, Value>,
    spanned: Option<&Spanned>,
    line: &[u8],
    utf8: Utf8,
) -> Result<Record, String> {
    let Some(tag) = map.get("type").and_then(Value::as_str).map(str::to_owned) else {
        return Err("the record has no \"type\" string".into());
    };
    if tag == "session" {
        let header = match spanned {
            Some(spanned) => header_from_line(map, spanned),
            None => header_from_fields(map),
        };
        return match header {
            Ok(h) => Ok(Record::Header(Box::new(h))),
            Err(HeaderError::Invalid(why)) => Err(format!("invalid session header: {why}")),
            Err(HeaderError::UnsupportedVersion(why)) => Err(format!(
                "invalid session header: {why}; sessionfs writes format version 0 only"
            )),
        };
    }
    if let Some((tag, key)) = ROW_TYPES.iter().find(|(t, _)| *t == tag) {
        // A packed row is checked down to its members: read again, with
        // the contents of `data` (other lines keep no nested values).
        let map = parse_object_keeping(line, utf8, &["data"]).map_err(|e| e.to_string())?;
        return check_row(tag, key, &map).map(Record::Event);
    }
    match map.get("seq") {
        None => Err("the event has no \"seq\"".into()),
        Some(v) => match safe_non_negative(Some(v)) {
            Some(seq) => Ok(Record::Event(SeqSpan {
                first: seq,
                count: 1,
            })),
            None => Err(format!("seq {v} is not a non-negative safe integer")),
        },
    }
}

/// The next `seq` after a committed line (without its `\n`): 0 after the
/// header, `seq + 1` after an event, `seq0 + n` after a packed row.
///
/// Errors: the reason, when the line is not a valid record.
pub fn next_seq_after_line(line: &[u8]) -> Result<u64, String> {
    match read_record(line)? {
        Record::Header(_) => Ok(0),
        Record::Event(span) => Ok(span.end()),
    }
}

/// The next expected `seq` after a committed transcript, from its plain
/// tail: any suffix of the decompressed transcript that ends at the end of
/// a complete line and holds the whole last line (the decoded last
/// non-empty frame does). 0 when the last line is the header.
///
/// Errors: the reason, when the tail has no complete line or the last line
/// is not a valid record.
pub fn next_seq_of_transcript(plain_tail: &[u8]) -> Result<u64, String> {
    let Some(body) = plain_tail.strip_suffix(b"\n") else {
        return Err("the transcript does not end with a complete line".into());
    };
    let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    next_seq_after_line(&body[start..])
        .map_err(|why| format!("the last committed line cannot be continued: {why}"))
}

/// What a checked batch held.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchCheck {
    /// Complete lines checked.
    pub lines: usize,
    /// The header, when the batch began a new session.
    pub header: Option<Header>,
    /// Line numbers (from 1) and types of the events whose type the
    /// reference does not know and that are not marked ignorable: taken
    /// (a newer harness may know them), but this reference refuses to load
    /// the session.
    pub unknown_types: Vec<(usize, String)>,
}

/// `seq` continuity over the lines of one transcript, line after line.
///
/// A cursor for an existing session starts at the committed tail's next
/// `seq` ([`SeqCursor::after`]); one for a new session first expects the
/// header line, then `seq` 0 ([`SeqCursor::new_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqCursor {
    expect_header: bool,
    next: u64,
}

impl SeqCursor {
    /// A cursor whose next line must start at `next_seq`.
    pub fn after(next_seq: u64) -> Self {
        SeqCursor {
            expect_header: false,
            next: next_seq,
        }
    }

    /// A cursor for a new session: the first line must be a header, the
    /// next event `seq` 0.
    pub fn new_session() -> Self {
        SeqCursor {
            expect_header: true,
            next: 0,
        }
    }

    /// Whether the next line must be the header.
    pub fn expects_header(&self) -> bool {
        self.expect_header
    }

    /// The `seq` the next event line must start with (0 while the header
    /// is still expected).
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Checks one line (without its `\n`) and advances past it. Returns
    /// the header when the line was the expected header. The cursor does
    /// not move when the line is refused.
    ///
    /// Errors: [`LineError`] numbered `line_number`.
    pub fn check_line(
        &mut self,
        line: &[u8],
        line_number: usize,
    ) -> Result<Option<Header>, LineError> {
        self.check_line_noting(line, line_number).map(|(h, _)| h)
    }

    /// [`SeqCursor::check_line`], and the line's event type when the
    /// reference does not know it and it is not marked ignorable.
    fn check_line_noting(
        &mut self,
        line: &[u8],
        line_number: usize,
    ) -> Result<(Option<Header>, Option<String>), LineError> {
        let invalid = |reason: String| LineError {
            line: line_number,
            problem: LineProblem::Invalid(reason),
        };
        let (record, unknown) = parse_record_noting(line).map_err(invalid)?;
        let header = match record {
            Record::Header(h) if self.expect_header => {
                self.expect_header = false;
                self.next = 0;
                Ok(Some(*h))
            }
            Record::Header(_) => Err(invalid(
                "a session header can only be the first line of a new session".into(),
            )),
            Record::Event(_) if self.expect_header => Err(invalid(
                "the first line of a new session must be its session header \
                 ({\"type\":\"session\",\"version\":0,\"id\":…})"
                    .into(),
            )),
            Record::Event(span) if span.first != self.next => Err(LineError {
                line: line_number,
                problem: LineProblem::Seq {
                    expected: self.next,
                    found: span.first,
                },
            }),
            Record::Event(span) => {
                self.next = span.end();
                Ok(None)
            }
        };
        header.map(|h| (h, unknown))
    }

    /// Checks the complete lines of `complete` (bytes after its last `\n`
    /// are ignored), numbering them from 1. All or nothing: the cursor
    /// moves past the batch only when every line passes.
    ///
    /// Errors: the first refused line's [`LineError`].
    pub fn check_batch(&mut self, complete: &[u8]) -> Result<BatchCheck, LineError> {
        let mut cursor = *self;
        let mut out = BatchCheck::default();
        for (i, line) in complete_lines(complete).enumerate() {
            let (header, unknown) = cursor.check_line_noting(line, i + 1)?;
            if let Some(h) = header {
                out.header = Some(h);
            }
            if let Some(t) = unknown {
                out.unknown_types.push((i + 1, t));
            }
            out.lines = i + 1;
        }
        *self = cursor;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64) -> String {
        format!("{{\"type\":\"turn/start\",\"seq\":{seq},\"time\":1,\"data\":{{\"turn\":1}}}}\n")
    }

    const HEADER: &str =
        "{\"type\":\"session\",\"version\":0,\"id\":\"a\",\"createdAt\":1,\"delegationDepth\":0}\n";

    #[test]
    fn splits_complete_lines_from_the_rest() {
        assert_eq!(split_complete(b"a\nb\nc"), (&b"a\nb\n"[..], &b"c"[..]));
        assert_eq!(split_complete(b"abc"), (&b""[..], &b"abc"[..]));
        assert_eq!(split_complete(b"a\n"), (&b"a\n"[..], &b""[..]));
        let lines: Vec<&[u8]> = complete_lines(b"a\n\nb\nrest").collect();
        assert_eq!(lines, vec![&b"a"[..], b"", b"b"]);
        assert_eq!(complete_lines(b"").count(), 0);
        assert_eq!(complete_lines(b"x").count(), 0);
        assert_eq!(complete_lines(b"\n").count(), 1);
    }

    #[test]
    fn events_of_types_the_reference_does_not_know_are_taken_and_named() {
        let mut c = SeqCursor::after(0);
        let lines = [
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
            r#"{"type":"x-new","seq":1,"time":1,"data":{}}"#,
            r#"{"type":"x-new","seq":2,"time":1,"data":{},"ignorable":true}"#,
            r#"{"type":"x-other","seq":3,"time":1,"data":{}}"#,
        ];
        let batch: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let check = c.check_batch(batch.as_bytes()).unwrap();
        assert_eq!(check.lines, 4);
        assert_eq!(
            check.unknown_types,
            [(2, "x-new".to_string()), (4, "x-other".to_string())]
        );
    }

    #[test]
    fn continuity_over_events_and_packed_rows() {
        let mut c = SeqCursor::after(5);
        let row = r#"{"type":"text-chunks","seq0":6,"time0":10,"data":{"turn":1,"step":1,"index":1,"dt":[0,-3,30],"texts":["a","b","c","d"]}}"#;
        let batch = format!("{}{row}\n{}", event(5), event(10));
        let check = c.check_batch(batch.as_bytes()).unwrap();
        assert_eq!(check.lines, 3);
        assert!(check.unknown_types.is_empty(), "{check:?}");
        assert_eq!(c.next_seq(), 11);
        let tool = r#"{"type":"tool-call-chunks","seq0":11,"time0":10,"data":{"turn":1,"step":1,"index":2,"dt":[8],"id":"c","args":["x","y"]}}"#;
        assert_eq!(next_seq_after_line(tool.as_bytes()), Ok(13));
    }

    #[test]
    fn gaps_and_duplicates_are_refused_with_their_line() {
        let mut c = SeqCursor::after(3);
        let gap = format!("{}{}", event(3), event(5));
        let e = c.check_batch(gap.as_bytes()).unwrap_err();
        assert_eq!(
            e,
            LineError {
                line: 2,
                problem: LineProblem::Seq {
                    expected: 4,
                    found: 5
                }
            }
        );
        assert_eq!(c.next_seq(), 3, "a refused batch does not move the cursor");
        let dup = format!("{}{}", event(3), event(3));
        assert!(matches!(
            c.check_batch(dup.as_bytes()).unwrap_err().problem,
            LineProblem::Seq {
                expected: 4,
                found: 3
            }
        ));
    }

    #[test]
    fn invalid_lines_are_refused() {
        let cases: &[&[u8]] = &[
            b"not json",
            b"",
            b"[1,2]",
            b"{\"type\":\"x\",\"seq\":0} {}",
            b"{\"type\":\"x\",\"seq\":0",
            b"{\"type\":\"x\",\"seq\":-1}",
            b"{\"type\":\"x\",\"seq\":0.5}",
            b"{\"type\":\"x\",\"seq\":\"0\"}",
            b"{\"type\":\"x\",\"seq\":9007199254740992}",
            b"{\"seq\":0}",
            b"{\"type\":\"x\"}",
            b"{\"type\":\"x\",\"seq\":0,\"t\":\"\xff\"}",
            br#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":1,"dt":[],"texts":[]}}"#,
            br#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":1,"dt":[1],"texts":["a"]}}"#,
            br#"{"type":"text-chunks","seq0":0,"time0":1,"extra":1,"data":{"turn":1,"step":1,"index":1,"dt":[],"texts":["a"]}}"#,
            br#"{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":1,"dt":[],"texts":["a"]}}"#,
            br#"{"type":"reasoning-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":1,"dt":[],"texts":[1]}}"#,
        ];
        for line in cases {
            let mut c = SeqCursor::after(0);
            let e = c.check_line(line, 7).unwrap_err();
            assert_eq!(e.line, 7);
            assert!(
                matches!(e.problem, LineProblem::Invalid(_)),
                "{}",
                String::from_utf8_lossy(line)
            );
            assert!(e.to_string().starts_with("line 7: "), "{e}");
        }
    }

    #[test]
    fn accepted_oddities() {
        let mut c = SeqCursor::after(0);
        // Trailing CR is JSON whitespace; a float-spelled integer is a safe integer;
        // lone surrogates are valid JSON for the reference.
        c.check_line(b"{\"type\":\"x\",\"seq\":0,\"time\":1,\"data\":0}\r", 1)
            .unwrap();
        c.check_line(b"{\"type\":\"x\",\"seq\":1.0,\"time\":1e3,\"data\":0}", 2)
            .unwrap();
        c.check_line(br#"{"type":"x","seq":2,"time":1,"data":{"t":"\ud83d"}}"#, 3)
            .unwrap();
        c.check_line(
            br#"{"type":"x","seq":3,"time":1,"data":{"t":"\ud83d\ude80 \\ud800"}}"#,
            4,
        )
        .unwrap();
        assert_eq!(c.next_seq(), 4);
    }

    #[test]
    fn deep_lines_and_committed_bytes_that_are_not_utf8() {
        let deep = format!(
            "{{\"type\":\"x\",\"seq\":0,\"time\":1,\"data\":{{\"v\":{}\"x\"{}}}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        // Committed by someone else, it is read at any depth; written, it
        // is refused (the reference's load fails on it).
        assert_eq!(next_seq_after_line(deep.as_bytes()), Ok(1));
        let mut c = SeqCursor::after(0);
        assert!(c.check_line(deep.as_bytes(), 1).is_err());
        // Committed by someone else, a byte that is not UTF-8 is read as
        // the reference reads it (U+FFFD); written, it is refused.
        let ff = b"{\"type\":\"x\",\"seq\":4,\"t\":\"\xff\"}";
        assert_eq!(next_seq_after_line(ff), Ok(5));
        assert!(parse_record(ff).is_err());
        assert_eq!(
            next_seq_after_line(br#"{"type":"x","seq":4e0,"seq":6.0}"#),
            Ok(7)
        );
    }

    #[test]
    fn new_sessions_start_with_their_header() {
        let mut c = SeqCursor::new_session();
        assert!(c.expects_header());
        let e = c.check_batch(event(0).as_bytes()).unwrap_err();
        assert!(matches!(e.problem, LineProblem::Invalid(_)));
        let batch = format!("{HEADER}{}{}", event(0), event(1));
        let check = c.check_batch(batch.as_bytes()).unwrap();
        assert_eq!(check.header.unwrap().id, "a");
        assert_eq!(c.next_seq(), 2);
        let e = c.check_batch(HEADER.as_bytes()).unwrap_err();
        assert!(matches!(e.problem, LineProblem::Invalid(_)));
        let bad = HEADER.replace("\"version\":0", "\"version\":1");
        let e = SeqCursor::new_session()
            .check_batch(bad.as_bytes())
            .unwrap_err();
        assert!(matches!(e.problem, LineProblem::Invalid(_)));
    }

    #[test]
    fn next_seq_from_the_tail() {
        assert_eq!(next_seq_of_transcript(HEADER.as_bytes()), Ok(0));
        let tail = format!("{HEADER}{}{}", event(0), event(1));
        assert_eq!(next_seq_of_transcript(tail.as_bytes()), Ok(2));
        assert_eq!(next_seq_of_transcript(event(41).as_bytes()), Ok(42));
        assert!(next_seq_of_transcript(b"").is_err());
        assert!(next_seq_of_transcript(b"{\"type\":\"x\",\"seq\":1}").is_err());
        assert!(next_seq_of_transcript(b"garbage\n").is_err());
    }

    #[test]
    fn errors_become_einval_store_errors() {
        let e = LineError {
            line: 2,
            problem: LineProblem::Seq {
                expected: 4,
                found: 9,
            },
        }
        .into_store(Path::new("/r/p/s/session.jsonl.zstd"));
        assert_eq!(e.errno(), libc::EINVAL);
        let msg = e.to_string();
        assert!(msg.contains("line 2") && msg.contains("seq 9") && msg.contains("seq 4"));
        assert!(msg.contains("session.jsonl.zstd"), "{msg}");
        // A gap is not explained by another writer; a repeated seq may be.
        assert!(
            msg.contains("gap") && !msg.contains("another writer"),
            "{msg}"
        );
        let repeated = LineError {
            line: 1,
            problem: LineProblem::Seq {
                expected: 7,
                found: 6,
            },
        }
        .into_store(Path::new("/r/p/s/session.jsonl.zstd"))
        .to_string();
        assert!(
            repeated.contains("expected seq 7") && repeated.contains("another writer"),
            "{repeated}"
        );
    }
}
