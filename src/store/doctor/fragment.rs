//! A stray fragment: the frames before a frame ended inside a line, and
//! the frame after them begins a whole record of its own instead of
//! continuing it (a writer that framed part of a line and was cut off, or
//! one that left out a record's newline). The reference joins the frames'
//! contents, so the joined line is no JSON record and its load fails
//! ("invalid record"); the scan reports it as a `split_line` finding and
//! the join repair ends the fragment or cuts it instead of joining.
//!
//! One predicate for the scan ([`super::scan_file`]) and the repair
//! ([`super::repair`]), so that the repair does what the report said:
//! [`stray_fragments`].

use super::super::header::parse_header;
use super::super::json::{parse_object, Utf8};
use super::super::lines::{next_seq_after_line, read_record, Record};

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

/// Pieces of an unfinished line tried as strays at most (a line split
/// over more frames is judged whole or by its last frame alone).
const MAX_PIECES_TRIED: usize = 64;

/// Whether the unfinished start of a line, as the frames since the line
/// began gave it (`pieces`, in order, none holding a newline), ends in
/// stray fragments before `next` (the next frame's first line, no `\n`):
/// the pieces joined with `next` are no JSON object, but the last pieces
/// from some point on joined with `next` are one (or `next` alone is).
/// Returns how each piece before that point is to be taken, one
/// [`Fragment`] a piece; `None` when the whole join is a record (a line
/// split across frames, which the reference loads) or no suffix gives
/// one.
pub fn stray_fragments(pieces: &[&[u8]], next: &[u8]) -> Option<Vec<Fragment>> {
    let is_object = |b: &[u8]| parse_object(b, Utf8::Replace).is_ok();
    if pieces.iter().all(|p| p.is_empty()) {
        return None;
    }
    let joined_from = |k: usize| {
        let mut line = pieces[k..].concat();
        line.extend_from_slice(next);
        line
    };
    if is_object(&joined_from(0)) {
        return None;
    }
    let n = pieces.len();
    let tried = (1..n.min(MAX_PIECES_TRIED)).chain(std::iter::once(n));
    let k = tried.into_iter().find(|&k| is_object(&joined_from(k)))?;
    Some(
        pieces[..k]
            .iter()
            .map(|p| {
                if is_object(p) {
                    Fragment::Unended
                } else {
                    Fragment::Torn
                }
            })
            .collect(),
    )
}

/// Whether `line`, the unfinished last line of a transcript (no `\n`,
/// and no later frame completes it), is a whole record that continues
/// the transcript: read as the reference reads a line ([`read_record`]),
/// an event or packed row whose first `seq` is `next`, the `seq` after
/// the last complete line (`None` when that line is no valid record).
/// The reference's load fails on it as on a torn record; the join repair
/// ends it with its newline instead of cutting it (the original kept in
/// quarantine). One rule for the scan's finding and the repair.
pub fn is_unended_last_record(line: &[u8], next: Option<u64>) -> bool {
    let Some(next) = next else { return false };
    matches!(read_record(line), Ok(Record::Event(span)) if span.first == next)
}

/// Whether the unfinished last line of a transcript, as the frames since
/// the line began gave it (`pieces`, in order, none holding a newline,
/// no later frame), ends in stray fragments before a whole record that
/// continues the transcript: the pieces joined are no record, but the
/// last pieces from some point on are ([`stray_fragments`] with the last
/// piece as the line after), and they are a record whose first `seq`
/// continues from `next` (the `seq` after the last complete line) or
/// from the last piece before them judged [`Fragment::Unended`]
/// ([`is_unended_last_record`]). Returns how each piece before that
/// point is to be taken; `None` for one piece, or when no suffix is such
/// a record. One rule for the scan's finding and the join repair, which
/// cuts each torn piece, ends each whole one and ends the record.
pub fn last_line_strays(pieces: &[&[u8]], next: Option<u64>) -> Option<Vec<Fragment>> {
    let (last, before) = pieces.split_last()?;
    if before.is_empty() {
        return None;
    }
    let strays = stray_fragments(before, last)?;
    let mut next = next;
    for (fragment, piece) in strays.iter().zip(pieces) {
        if *fragment == Fragment::Unended {
            next = next_seq_after_line(piece).ok();
        }
    }
    let rest = pieces[strays.len()..].concat();
    is_unended_last_record(&rest, next).then_some(strays)
}

/// Whether `line`, the unfinished first line of a transcript (no `\n`,
/// nothing after it), is a whole valid session header
/// ([`parse_header`]): the reference refuses the file (zstd: its `list()`
/// fails for the whole root, "first frame is not exactly one header
/// line"; raw: "empty or header-less session log"); the repair ends it
/// with its newline, which makes it a session of no events. One rule for
/// the scan's finding and the repair.
pub fn is_unended_header(line: &[u8]) -> bool {
    parse_header(line).is_ok()
}

/// What the reference does with a raw transcript (`session.jsonl`) whose
/// last line is such a whole record ([`is_unended_last_record`]): its
/// scan ignores a final line without a newline as a torn tail, and its
/// load truncates the file at the end of the line before (the record is
/// lost). Source: the reference's `scanLog` and `commitRepair`, run by
/// the oracle with `--compression none`.
pub const RAW_UNENDED_REFERENCE: &str =
    "load() truncates the file before it: the record is lost (it reads the lines before it)";

/// Bytes of the `strays` (one verdict per piece, from the first of
/// `pieces`) that are torn starts: what a repair cuts.
pub fn torn_bytes(strays: &[Fragment], pieces: &[&[u8]]) -> u64 {
    strays
        .iter()
        .zip(pieces)
        .filter(|(f, _)| **f == Fragment::Torn)
        .map(|(_, p)| p.len() as u64)
        .sum()
}

/// Appends to `emit` each of the `strays`' pieces that is a whole record
/// (`Unended`), ended with a newline, and leaves out the torn starts.
/// Returns (bytes left out, records ended).
pub fn end_whole_records(
    strays: &[Fragment],
    pieces: &[&[u8]],
    emit: &mut Vec<u8>,
) -> (usize, usize) {
    let (mut torn, mut ended) = (0, 0);
    for (fragment, piece) in strays.iter().zip(pieces) {
        match fragment {
            Fragment::Torn => torn += piece.len(),
            Fragment::Unended => {
                emit.extend_from_slice(piece);
                emit.push(b'\n');
                ended += 1;
            }
        }
    }
    (torn, ended)
}

/// How the scan's finding describes stray pieces: `torn` bytes of records
/// whose rest never came, `unended` whole records without their newline;
/// one sentence, the counts after what the frame does (an empty count
/// left out).
pub fn describe(torn: u64, unended: usize) -> String {
    let mut held = Vec::new();
    if torn > 0 {
        held.push(format!("{torn} bytes of records whose rest never came"));
    }
    if unended > 0 {
        held.push(format!(
            "{unended} whole {} without {} newline",
            if unended == 1 { "record" } else { "records" },
            if unended == 1 { "its" } else { "their" }
        ));
    }
    let mut text = "the frame ends inside a line that the next frames do not continue (a \
                    record of its own begins there)"
        .to_string();
    if !held.is_empty() {
        text.push_str("; the frames before that record hold ");
        text.push_str(&held.join(" and "));
    }
    text
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
        let torn: &[u8] = br#"{"type":"x-note","seq":5,"ti"#;
        let whole: &[u8] = br#"{"type":"x-note","seq":4,"time":1,"data":{}}"#;
        assert_eq!(stray_fragments(&[torn], NEXT), Some(vec![Fragment::Torn]));
        assert_eq!(
            stray_fragments(&[whole], NEXT),
            Some(vec![Fragment::Unended])
        );
        // A torn start, then a whole record (and the mirror image): the
        // record is kept (helper 30: both were cut).
        assert_eq!(
            stray_fragments(&[torn, whole], NEXT),
            Some(vec![Fragment::Torn, Fragment::Unended])
        );
        assert_eq!(
            stray_fragments(&[whole, torn], NEXT),
            Some(vec![Fragment::Unended, Fragment::Torn])
        );
        // A torn start, then a line split across frames: only the start
        // goes.
        let line = br#"{"type":"x-note","seq":5,"time":1,"data":{}}"#;
        let (a, b) = line.split_at(20);
        assert_eq!(stray_fragments(&[torn, a], b), Some(vec![Fragment::Torn]));
    }

    #[test]
    fn an_unended_last_record_must_continue_seq() {
        assert!(is_unended_last_record(NEXT, Some(5)));
        assert!(!is_unended_last_record(NEXT, Some(4)), "a gap");
        assert!(!is_unended_last_record(NEXT, None), "after no record");
        assert!(!is_unended_last_record(&NEXT[..30], Some(5)), "torn");
        let row = br#"{"type":"text-chunks","seq0":5,"time0":1,"data":{"turn":1,"step":1,"index":1,"dt":[0],"texts":["a","b"]}}"#;
        assert!(is_unended_last_record(row, Some(5)), "a packed row");
    }

    #[test]
    fn a_torn_start_before_a_whole_last_record_is_cut_apart() {
        let torn: &[u8] = br#"{"type":"x-note","seq":5,"ti"#;
        let whole: &[u8] = br#"{"type":"x-note","seq":5,"time":1,"data":{}}"#;
        assert_eq!(
            last_line_strays(&[torn, NEXT], Some(5)),
            Some(vec![Fragment::Torn])
        );
        // A whole record before it moves seq on.
        let six = br#"{"type":"x-note","seq":6,"time":1,"data":{}}"#;
        assert_eq!(
            last_line_strays(&[whole, six], Some(5)),
            Some(vec![Fragment::Unended])
        );
        assert_eq!(last_line_strays(&[torn, six], Some(5)), None, "a gap");
        assert_eq!(last_line_strays(&[NEXT], Some(5)), None, "one piece");
        let (a, b) = NEXT.split_at(20);
        assert_eq!(last_line_strays(&[a, b], Some(5)), None, "one record");
    }

    #[test]
    fn the_description_is_one_sentence() {
        let base = "the frame ends inside a line that the next frames do not continue (a \
                    record of its own begins there)";
        assert_eq!(describe(0, 0), base);
        assert_eq!(
            describe(20, 0),
            format!("{base}; the frames before that record hold 20 bytes of records whose rest never came")
        );
        assert_eq!(
            describe(20, 2),
            format!(
                "{base}; the frames before that record hold 20 bytes of records whose rest \
                 never came and 2 whole records without their newline"
            )
        );
        assert_eq!(describe(0, 2).matches(": ").count(), 0);
    }

    #[test]
    fn a_line_split_across_frames_is_not() {
        let line = br#"{"type":"x-note","seq":5,"time":1,"data":{"a":{"b":1}},"ignorable":true}"#;
        for cut in 1..line.len() {
            let (start, rest) = line.split_at(cut);
            assert_eq!(stray_fragments(&[start], rest), None, "cut at {cut}");
        }
        // Neither reading a record: left to the invalid-line finding.
        assert_eq!(stray_fragments(&[b"{\"a\":"], b"not json"), None);
        assert_eq!(stray_fragments(&[b""], NEXT), None);
    }
}
