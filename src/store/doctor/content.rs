//! Line-level checks of a transcript's decoded text, fed one complete line
//! at a time: the header, each record, `seq` continuity (gaps, a second
//! writer's duplicates, two interleaved writers) and the reference's own
//! refusals that are not damage (unknown non-ignorable event types, a cwd
//! it rejects).
//!
//! Source: FORMAT.md (records, `seq`, packed rows); the reference's
//! `validateSessionHeader` and `KNOWN_SESSION_EVENT_TYPES`
//! (`@deepseek-ai/dsh-session`).

use serde_json::Value;

use super::super::event_shape;
use super::super::header::{header_from_line, Header, HeaderError};
use super::super::json::{parse_object, parse_object_spans, Utf8};
use super::super::lines::MAX_LOADABLE_DEPTH;
use super::super::lines::{is_row_type, read_record, Record};
use super::finding::Kind;

/// The `type` of an event line (its top-level members `map`) that the
/// reference does not know and that is not marked `"ignorable": true`: the
/// reference refuses to load a session holding one. `None` for every
/// other line (a known type, an ignorable one, a header, a packed chunk
/// row, no type).
pub fn unknown_event_type(map: &serde_json::Map<String, Value>) -> Option<&str> {
    let tag = map.get("type")?.as_str()?;
    let ignorable = map.get("ignorable") == Some(&Value::Bool(true));
    // A legacy steering message is upgraded to a user message before the
    // reference asks whether it knows the type.
    let known = tag == "session"
        || tag == "steering/message"
        || is_row_type(tag)
        || KNOWN_EVENT_TYPES.binary_search(&tag).is_ok();
    (!ignorable && !known).then_some(tag)
}

/// Event types the reference knows (`KNOWN_SESSION_EVENT_TYPES` of
/// dsh-session 0.1.0-rc.8), sorted.
pub const KNOWN_EVENT_TYPES: &[&str] = &[
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "assistant/chunk",
    "assistant/message",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "request/context",
    "request/header",
    "sandbox/mode",
    "schedule/change",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "step/end",
    "step/start",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/call",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool/result",
    "turn/end",
    "turn/start",
    "user/message",
    "web/deepseek-search-llm-request",
];

/// A problem found in the lines: its kind, the byte offset of its line in
/// the decoded text, and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineFinding {
    pub kind: Kind,
    /// Offset of the line in the decoded text.
    pub plain_offset: u64,
    pub detail: String,
}

/// Where a second history starts in a transcript whose `seq` went back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqSplit {
    /// Offset (decoded text) of the first line that repeats a `seq`.
    pub plain_offset: u64,
    /// The `seq` that line starts with (the other history's first event).
    pub seq: u64,
    /// The first `seq` after the split that continues both histories with
    /// nothing to tell whose it is, or neither ([`Fit`]): from there on,
    /// which line is whose cannot be told from the transcript (`None` when
    /// every line continues one history, or goes with its frame).
    pub ambiguous_at: Option<u64>,
}

/// One of the two histories of a transcript whose `seq` went back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Side {
    /// The first writer's, which the transcript keeps.
    #[default]
    Main,
    /// The second writer's, which becomes a fork.
    Other,
}

/// How a line after a split fits the history [`assign`] gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// It continues that history.
    Continues,
    /// It continues neither (a gap): counted to the second history.
    Gap,
    /// It continues both, and nothing tells whose it is.
    Ambiguous,
}

/// Which history a line whose `seq` starts at `first` goes to, after a
/// split: the one whose next `seq` (`main_next`, `other_next`) it
/// continues. A line that continues both goes with the previous event
/// line (in history `previous`) when both lie in one frame that holds
/// lines of one history only (`with_previous`: then the frame is one
/// writer's batch); otherwise whose it is cannot be told
/// ([`Fit::Ambiguous`]; counted to the second history). A raw transcript
/// has no frames: its lines count as one, which the split itself mixes.
/// One rule for the scan and the repair that splits the histories.
pub fn assign(
    first: u64,
    main_next: u64,
    other_next: u64,
    previous: Side,
    with_previous: bool,
) -> (Side, Fit) {
    match (first == main_next, first == other_next) {
        (true, true) if with_previous => (previous, Fit::Continues),
        (true, true) => (Side::Other, Fit::Ambiguous),
        (false, true) => (Side::Other, Fit::Continues),
        (true, false) => (Side::Main, Fit::Continues),
        (false, false) => (Side::Other, Fit::Gap),
    }
}

/// The state of the line checks over one transcript.
#[derive(Debug, Default)]
pub struct ContentCheck {
    /// Complete lines seen.
    pub lines: u64,
    /// The header, once the first line was one.
    pub header: Option<Header>,
    /// The next `seq` expected (of the first writer's history).
    next_seq: u64,
    /// The first repeated `seq`, if any.
    pub split: Option<SeqSplit>,
    /// The next `seq` of the second history, after a split.
    other_next: Option<u64>,
    /// Whether lines after the split went back to the first history.
    interleaved: bool,
    /// Whether the last line was skipped unread (longer than sessionfs
    /// reads): the next `seq` is taken as it comes.
    seq_unknown: bool,
    /// Problems found, at most one per kind (the first), with counts.
    found: Vec<(LineFinding, u64)>,
    /// The `seq` after the last line checked: 0 after a valid header, the
    /// end of an event's or packed row's span; `None` after any other line.
    after_last: Option<u64>,
    /// Whether the last line checked continued the line before it (see
    /// [`Self::last_line_continued`]).
    continued: bool,
    /// The history the last event line went to.
    side: Side,
    /// Decoded offset of the last event line's start.
    previous_start: u64,
    /// Decoded offset where the frame being read starts (0 for a raw
    /// transcript: its lines count as one frame).
    frame_start: u64,
    /// Whether the frame being read holds lines of both histories (the
    /// split is in it, or its lines went from one history to the other):
    /// then it is no one writer's batch, and tells nothing of whose a line
    /// is.
    frame_mixed: bool,
}

impl ContentCheck {
    /// A check of a transcript whose first line must be the header.
    pub fn new() -> ContentCheck {
        ContentCheck::default()
    }

    /// Counts `count` lines with a problem of `kind`; the first of a kind
    /// is kept with its offset and `detail` (made only then: a transcript
    /// may hold a billion bad lines).
    fn note_n(
        &mut self,
        kind: Kind,
        plain_offset: u64,
        count: u64,
        detail: impl FnOnce() -> String,
    ) {
        if let Some((_, n)) = self.found.iter_mut().find(|(f, _)| f.kind == kind) {
            *n += count;
            return;
        }
        self.found.push((
            LineFinding {
                kind,
                plain_offset,
                detail: detail(),
            },
            count,
        ));
    }

    /// Counts one line with a problem of `kind` (see [`Self::note_n`]).
    fn note(&mut self, kind: Kind, plain_offset: u64, detail: impl FnOnce() -> String) {
        self.note_n(kind, plain_offset, 1, detail);
    }

    /// Checks `count` empty lines, the first at `plain_offset`: what
    /// `count` calls of [`Self::line`] with an empty line do, at the cost
    /// of one (a frame of RLE blocks of newlines decodes to a billion of
    /// them from a few kilobytes).
    pub fn empty_lines(&mut self, count: u64, plain_offset: u64) {
        if count == 0 {
            return;
        }
        self.after_last = None;
        self.continued = false;
        let why = match parse_object(b"", Utf8::Replace) {
            Err(e) => e.to_string(),
            // Not reached: an empty line is no JSON object.
            Ok(_) => {
                for k in 0..count {
                    self.line(b"", plain_offset + k);
                }
                return;
            }
        };
        let mut first = self.lines + 1;
        let mut offset = plain_offset;
        let mut left = count;
        if first == 1 {
            self.lines += 1;
            self.note(Kind::HeaderLess, offset, || format!("line 1: {why}"));
            first += 1;
            offset += 1;
            left -= 1;
        }
        if left > 0 {
            self.lines += left;
            self.note_n(Kind::InvalidLine, offset, left, || {
                format!("line {first}: {why}")
            });
        }
    }

    /// A frame starts at decoded offset `plain` (its lines are checked
    /// next): lines of one frame are one writer's ([`assign`]).
    pub fn frame_begins(&mut self, plain: u64) {
        self.frame_start = plain;
        self.frame_mixed = false;
    }

    /// Counts a line too long to be read (more than 16 MiB): it is not
    /// judged, and the `seq` after it is taken as it comes.
    pub fn skip_line(&mut self) {
        self.lines += 1;
        self.seq_unknown = true;
        self.after_last = None;
        // Not judged: nothing said against it.
        self.continued = true;
    }

    /// Whether the last line checked continued the one before it, as the
    /// reference's load needs: a valid header as the first line, or a
    /// record whose first `seq` is the one after the line before it
    /// ([`Self::next_after_last_line`] before it was checked; any `seq`
    /// after a line too long to judge). `false` after an empty or invalid
    /// line, a gap or a repeated `seq`.
    pub fn last_line_continued(&self) -> bool {
        self.continued
    }

    /// The `seq` that continues the last line checked, whatever history
    /// it went to: 0 after a valid header, `seq + 1` after an event,
    /// `seq0 + n` after a packed row; `None` when no line was checked or
    /// the last was no valid record (empty, invalid, too long, a second
    /// header). What [`crate::store::lines::next_seq_after_line`] gives
    /// for the same line.
    pub fn next_after_last_line(&self) -> Option<u64> {
        self.after_last
    }

    /// Checks one complete line (without its `\n`) at `plain_offset`.
    pub fn line(&mut self, line: &[u8], plain_offset: u64) {
        self.lines += 1;
        let before = self.after_last.take();
        let any_seq = self.seq_unknown;
        self.continued = false;
        let n = self.lines;
        let (map, spanned) = match parse_object_spans(line, Utf8::Replace) {
            Ok(parsed) => parsed,
            Err(e) => {
                let kind = if n == 1 {
                    Kind::HeaderLess
                } else {
                    Kind::InvalidLine
                };
                self.note(kind, plain_offset, || format!("line {n}: {e}"));
                return;
            }
        };
        let tag = map.get("type").and_then(Value::as_str).map(str::to_owned);
        if n == 1 {
            if tag.as_deref() != Some("session") {
                self.note(Kind::HeaderLess, plain_offset, || {
                    "the first line is not a session header".into()
                });
                return;
            }
            match header_from_line(map, &spanned) {
                Ok(h) => {
                    if let Some(cwd) = h.cwd.as_deref() {
                        if !cwd.starts_with('/') {
                            self.note(Kind::CwdRejected, plain_offset, || {
                                format!("the header's cwd {cwd:?} is not an absolute path")
                            });
                        }
                    }
                    self.header = Some(h);
                    self.after_last = Some(0);
                    self.continued = true;
                }
                Err(HeaderError::UnsupportedVersion(why)) => {
                    self.note(Kind::UnsupportedVersion, plain_offset, || why)
                }
                Err(HeaderError::Invalid(why)) => self.note(Kind::BadHeader, plain_offset, || {
                    format!("invalid header: {why}")
                }),
            }
            return;
        }
        let Some(tag) = tag else {
            self.note(Kind::InvalidLine, plain_offset, || {
                format!("line {n}: the record has no \"type\" string")
            });
            return;
        };
        let span = if tag == "session" {
            self.note(Kind::InvalidLine, plain_offset, || {
                format!("line {n}: a second session header")
            });
            return;
        } else if is_row_type(&tag) {
            match read_record(line) {
                Ok(Record::Event(span)) => span,
                Ok(Record::Header(_)) => return,
                Err(why) => {
                    self.note(Kind::InvalidLine, plain_offset, || {
                        format!("line {n}: {why}")
                    });
                    return;
                }
            }
        } else {
            let Some(seq) = map.get("seq").and_then(safe_seq) else {
                self.note(Kind::InvalidLine, plain_offset, || {
                    format!("line {n}: no valid \"seq\" (a non-negative safe integer)")
                });
                return;
            };
            if unknown_event_type(&map).is_some() {
                self.note(
                    Kind::UnknownEventType,
                    plain_offset,
                    || format!("event type {tag:?} (seq {seq}) is unknown to the reference and not marked ignorable"),
                );
            }
            if let Some(why) = event_shape::refusal(&spanned) {
                self.note(Kind::EventRefused, plain_offset, || {
                    format!("line {n} (seq {seq}): the reference would refuse to load the session: {why}")
                });
            }
            let depth = spanned.max_depth();
            if depth > MAX_LOADABLE_DEPTH {
                self.note(Kind::EventRefused, plain_offset, || {
                    format!(
                        "line {n} (seq {seq}) nests {depth} levels deep: the reference's load \
                         fails on such a line from about 2,500 levels (\"Maximum call stack \
                         size exceeded\"), and sessionfs refuses to write lines deeper than \
                         {MAX_LOADABLE_DEPTH}"
                    )
                });
            }
            super::super::lines::SeqSpan {
                first: seq,
                count: 1,
            }
        };
        self.after_last = Some(span.end());
        self.continued = any_seq || before == Some(span.first);
        self.seq(span.first, span.end(), plain_offset);
    }

    fn seq(&mut self, first: u64, end: u64, plain_offset: u64) {
        if std::mem::take(&mut self.seq_unknown) && self.other_next.is_none() {
            self.next_seq = end;
            return;
        }
        if let Some(other) = self.other_next {
            // After a split: a line continues one of the two histories.
            let same_frame = self.previous_start >= self.frame_start;
            let with_previous = same_frame && !self.frame_mixed;
            let (side, fit) = assign(first, self.next_seq, other, self.side, with_previous);
            self.frame_mixed |= same_frame && side != self.side;
            if fit != Fit::Continues {
                if let Some(split) = &mut self.split {
                    split.ambiguous_at.get_or_insert(first);
                }
            }
            if fit == Fit::Gap {
                let next = self.next_seq;
                self.note(Kind::SeqGap, plain_offset, || {
                    format!("seq {first} continues neither history (expected {next} or {other})")
                });
            }
            match side {
                Side::Other => self.other_next = Some(end),
                Side::Main => {
                    self.interleaved = true;
                    self.next_seq = end;
                }
            }
            self.side = side;
            self.previous_start = plain_offset;
            return;
        }
        let same_frame = self.previous_start >= self.frame_start;
        self.previous_start = plain_offset;
        if first == self.next_seq {
            self.next_seq = end;
        } else if first < self.next_seq {
            self.split = Some(SeqSplit {
                plain_offset,
                seq: first,
                ambiguous_at: None,
            });
            self.other_next = Some(end);
            self.side = Side::Other;
            self.frame_mixed |= same_frame;
        } else {
            let next = self.next_seq;
            self.note(Kind::SeqGap, plain_offset, || {
                format!("seq jumps from {next} to {first}")
            });
            self.next_seq = end;
        }
    }

    /// The problems found, one per kind, in the order first met; a count
    /// of later lines of the same kind is added to the sentence.
    pub fn finish(mut self) -> (Vec<LineFinding>, Option<SeqSplit>, Option<Header>) {
        if let Some(split) = self.split {
            let (kind, what) = if self.interleaved {
                (
                    Kind::InterleavedWriters,
                    "two writers interleaved their events",
                )
            } else {
                (
                    Kind::SeqDuplicate,
                    "a second writer continued from an older tail",
                )
            };
            let mut detail = format!("seq {} appears again: {what}", split.seq);
            if let Some(seq) = split.ambiguous_at {
                detail.push_str(&format!(
                    "; from seq {seq} on, a line continues both histories (in no frame of one \
                     writer's alone) or neither, so which line is whose cannot be told from the \
                     transcript"
                ));
            }
            self.found.push((
                LineFinding {
                    kind,
                    plain_offset: split.plain_offset,
                    detail,
                },
                1,
            ));
        }
        let out = self
            .found
            .into_iter()
            .map(|(mut f, n)| {
                if n > 1 {
                    f.detail
                        .push_str(&format!(" ({} more lines like it)", n - 1));
                }
                f
            })
            .collect();
        (out, self.split, self.header)
    }
}

/// A JSON value as a `seq`: a non-negative safe integer (`1.0` is 1).
fn safe_seq(v: &Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return (u < (1 << 53)).then_some(u);
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_991.0).then_some(f as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Vec<Kind> {
        let mut c = ContentCheck::new();
        let mut at = 0;
        for l in lines {
            c.line(l.as_bytes(), at);
            at += l.len() as u64 + 1;
        }
        c.finish().0.into_iter().map(|f| f.kind).collect()
    }

    const H: &str =
        r#"{"type":"session","version":0,"id":"a","createdAt":1,"cwd":"/x","delegationDepth":0}"#;

    #[test]
    fn known_types_are_sorted() {
        assert!(KNOWN_EVENT_TYPES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn seq_problems() {
        let e =
            |s: u64| format!(r#"{{"type":"turn/start","seq":{s},"time":1,"data":{{"turn":1}}}}"#);
        let (e0, e1, e2, e3) = (e(0), e(1), e(2), e(3));
        assert!(run(&[H, &e0, &e1]).is_empty());
        assert_eq!(run(&[H, &e0, &e2]), vec![Kind::SeqGap]);
        assert_eq!(
            run(&[H, &e0, &e1, &e2, &e1, &e2, &e3]),
            vec![Kind::SeqDuplicate]
        );
        assert_eq!(
            run(&[H, &e0, &e1, &e1, &e2, &e2, &e3]),
            vec![Kind::InterleavedWriters]
        );
    }

    /// Each line continues the one before it or not, whatever history
    /// it goes to; the `seq` after it is what the line gives.
    #[test]
    fn each_line_continues_the_one_before_or_not() {
        let e =
            |s: u64| format!(r#"{{"type":"turn/start","seq":{s},"time":1,"data":{{"turn":1}}}}"#);
        let mut c = ContentCheck::new();
        let mut steps = Vec::new();
        for l in [H, &e(0), &e(1), &e(3), &e(4), &e(1), "", &e(2), H] {
            c.line(l.as_bytes(), 0);
            steps.push((c.last_line_continued(), c.next_after_last_line()));
        }
        assert_eq!(
            steps,
            [
                (true, Some(0)),
                (true, Some(1)),
                (true, Some(2)),
                (false, Some(4)),
                (true, Some(5)),
                (false, Some(2)),
                (false, None),
                (false, Some(3)),
                (false, None),
            ]
        );
    }

    #[test]
    fn refusals() {
        let u = r#"{"type":"x/new","seq":0,"time":1,"data":{}}"#;
        let i = r#"{"type":"x/new","seq":1,"time":1,"data":{},"ignorable":true}"#;
        assert_eq!(run(&[H, u, i]), vec![Kind::UnknownEventType]);
        let w = r#"{"type":"session","version":0,"id":"a","createdAt":1,"cwd":"C:\\x","delegationDepth":0}"#;
        assert_eq!(run(&[w]), vec![Kind::CwdRejected]);
        assert_eq!(run(&[u]), vec![Kind::HeaderLess]);
        // The tester's event: a user message without its source.
        let no_source = r#"{"type":"user/message","seq":0,"time":1,"data":{"id":"m","role":"user","content":[]},"surfaceOp":"append"}"#;
        assert_eq!(run(&[H, no_source]), vec![Kind::EventRefused]);
        let ok = r#"{"type":"user/message","seq":0,"time":1,"data":{"id":"m","role":"user","content":[],"source":{"kind":"user"}},"surfaceOp":"append"}"#;
        assert!(run(&[H, ok]).is_empty());
        let marked = r#"{"type":"turn/start","seq":0,"time":1,"data":{},"surfaceOp":"append"}"#;
        assert_eq!(run(&[H, marked]), vec![Kind::EventRefused]);
        // The envelope, for every type: a time, a data, no other member.
        for bad in [
            r#"{"type":"goal/change","seq":0,"data":{}}"#,
            r#"{"type":"goal/change","seq":0,"time":1.5,"data":{}}"#,
            r#"{"type":"goal/change","seq":0,"time":1}"#,
            r#"{"type":"goal/change","seq":0,"time":1,"data":{},"note":"x"}"#,
        ] {
            assert_eq!(run(&[H, bad]), vec![Kind::EventRefused], "{bad}");
        }
        let dated = r#"{"type":"goal/change","seq":0,"time":-1,"data":null}"#;
        assert!(run(&[H, dated]).is_empty());
    }
}
