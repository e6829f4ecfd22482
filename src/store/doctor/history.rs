//! Second histories of one session: a sync tool's conflict copy beside a
//! transcript, compared line by line with it to find where they diverge.
//!
//! Source: MOUNT.md ("The tree": conflict copies).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::super::classify::{walk, WalkEnd};
use super::super::decode;
use super::super::frame::{FrameError, FrameInfo, FrameKind};
use super::super::transcript::Encoding;
use super::finding::{Finding, Kind, Remedy};
use super::layout::ConflictCopy;

/// The decoded text of a transcript's readable prefix: every frame (or
/// line) up to the first that fails, complete lines only. Holds the whole
/// prefix in memory: for repairs of one session, not for scans.
///
/// Errors: opening or reading the file.
pub fn readable_text(path: &Path, encoding: Encoding) -> std::io::Result<Vec<u8>> {
    readable_prefix(path, encoding).map(|(text, _)| text)
}

/// [`readable_text`] of the file's first `len` bytes alone (all of it when
/// it is shorter): what the file would read as if it ended there, with no
/// copy of those bytes written anywhere.
///
/// Errors: opening or reading the file.
pub fn readable_text_before(path: &Path, encoding: Encoding, len: u64) -> std::io::Result<Vec<u8>> {
    read_prefix(path, encoding, Some(len)).map(|(text, _, _)| text)
}

/// [`readable_text`], and the offset (bytes) of the first complete frame
/// that fails to decode (damage, or a window larger than sessionfs
/// decodes), `None` when every complete frame decodes: the text then holds
/// every complete line of the file.
///
/// Errors: opening or reading the file.
pub fn readable_prefix(path: &Path, encoding: Encoding) -> std::io::Result<(Vec<u8>, Option<u64>)> {
    read_prefix(path, encoding, None).map(|(text, failed_at, _)| (text, failed_at))
}

/// [`readable_text`], and the decoded offsets (bytes) where its data
/// frames start (`[0]` for a raw transcript: no frames, its lines count
/// as one).
///
/// Errors: opening or reading the file.
pub fn readable_frames(path: &Path, encoding: Encoding) -> std::io::Result<(Vec<u8>, Vec<u64>)> {
    read_prefix(path, encoding, None).map(|(text, _, starts)| (text, starts))
}

/// The readable prefix's text, the offset of the first frame that fails
/// (see [`readable_prefix`]) and the decoded offsets of its frames' starts
/// (see [`readable_frames`]), of the file's first `limit` bytes when given.
fn read_prefix(
    path: &Path,
    encoding: Encoding,
    limit: Option<u64>,
) -> std::io::Result<(Vec<u8>, Option<u64>, Vec<u64>)> {
    let mut failed_at = None;
    let file = File::open(path)?;
    let len = file.metadata()?.len().min(limit.unwrap_or(u64::MAX));
    let mut out = Vec::new();
    let mut starts = Vec::new();
    match encoding {
        Encoding::Raw => {
            starts.push(0);
            (&file).take(len).read_to_end(&mut out)?;
        }
        Encoding::Zstd => {
            let mut failed = false;
            let mut io_err = None;
            let end = walk(&file, 0, len, None, |info: &FrameInfo| {
                if failed || info.kind == FrameKind::Skippable {
                    return !failed;
                }
                let mut one = Vec::new();
                match decode::open(&file, info).map(|mut r| r.read_to_end(&mut one)) {
                    Ok(Ok(_)) => {
                        starts.push(out.len() as u64);
                        out.extend_from_slice(&one);
                        true
                    }
                    Ok(Err(e)) if e.kind() != std::io::ErrorKind::InvalidData => {
                        io_err = Some(e);
                        false
                    }
                    _ => {
                        failed = true;
                        failed_at = Some(info.offset);
                        false
                    }
                }
            });
            if let Some(e) = io_err {
                return Err(e);
            }
            // Damage the walk stops at, unless no verifiable frame can
            // follow it (garbage at the end, which holds no frame).
            failed_at = failed_at.or(match end {
                Ok(WalkEnd::Damaged(d)) if !d.nothing_verifiable_follows => Some(d.at),
                Err(FrameError::Corrupt { offset, .. }) => Some(offset),
                _ => None,
            });
        }
    }
    let complete = out.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.truncate(complete);
    Ok((out, failed_at, starts))
}

/// The lines of `text` (each without its `\n`).
pub fn lines(text: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    if v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// How two histories relate: the number of leading lines they share (the
/// header included).
pub fn common_lines(a: &[&[u8]], b: &[&[u8]]) -> usize {
    a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count()
}

/// How a conflict copy's lines `a` relate to its transcript's lines `b`:
/// the number of leading lines they share, the header counted as shared
/// when both are headers of the same session id (a copy whose header line
/// differs in bytes only, another `createdAt` or key order, still shares
/// the session); `None` when the copy's first line is not a header of the
/// transcript's session (another session's transcript, or no header).
pub fn copy_history(a: &[&[u8]], b: &[&[u8]]) -> Option<usize> {
    let id = |lines: &[&[u8]]| {
        lines
            .first()
            .and_then(|l| super::super::header::parse_header(l).ok())
            .map(|h| h.id)
    };
    let (ida, idb) = (id(a), id(b));
    if ida.is_none() || ida != idb {
        return None;
    }
    Some(1 + common_lines(&a[1..], &b[1..]))
}

/// What a file under a conflict copy's name that is not a copy of its
/// session is, and what to do about it (`--repair` leaves it in place).
const STRANGER: &str = "a file named like a sync tool's conflict copy that is not a copy of this \
     session: its first line is not this session's header";
pub const STRANGER_FIX: &str = "it is another session's transcript or no transcript, and \
     --repair leaves it in place: move it into a session directory of its own (named by its \
     header's id), or out of the root";

/// A conflict copy with no transcript beside it (the sync tool renamed the
/// transcript away, or it was deleted): the copy is the session's only
/// history, which the reference does not see.
const LONE_COPY: &str = "a sync tool's conflict copy with no transcript beside it: it may be the \
     session's only history, and the reference does not list the session";

/// What to do about a [`LONE_COPY`] (`--repair` leaves it in place: which
/// copy is the history is the user's call): check it, and give it the
/// transcript's name without replacing one that appeared since.
fn lone_copy_fix(c: &ConflictCopy) -> String {
    use super::super::error::ShellArg;
    format!(
        "--repair leaves it in place: check it with `zstd -dc {copy}`, then make it the \
         transcript with `mv -n {copy} {transcript}`",
        copy = ShellArg(&c.path),
        transcript = ShellArg(&c.transcript)
    )
}

/// What a conflict copy is whose frame at byte `at` does not decode.
pub fn damaged_copy(at: u64) -> String {
    format!(
        "a sync tool's conflict copy whose frame at byte {at} does not decode (damaged, or a \
         window larger than sessionfs reads): frames after it may hold events the transcript \
         lacks"
    )
}

/// What to do about it (`--repair` leaves it in place).
pub const DAMAGED_COPY_FIX: &str = "--repair leaves it in place: read what it holds with \
     `zstd -dc` (add --long=31 for a large window) and compare it with the transcript, or \
     restore an intact copy";

/// The finding about a conflict copy: where it diverges from the
/// transcript beside it.
pub fn conflict_finding(c: &ConflictCopy) -> Finding {
    let detail = match (
        readable_prefix(&c.path, c.encoding),
        readable_text(&c.transcript, c.encoding),
    ) {
        (Ok((_, Some(at))), _) => {
            return Finding::new(&c.path, Kind::ConflictCopy, damaged_copy(at))
                .at(at)
                .with_remedy(Remedy::Report)
                .with_fix(DAMAGED_COPY_FIX)
        }
        (Ok((a, None)), Ok(b)) => {
            let (la, lb) = (lines(&a), lines(&b));
            match copy_history(&la, &lb) {
                None => {
                    return Finding::new(&c.path, Kind::ConflictCopy, STRANGER)
                        .with_remedy(Remedy::Report)
                        .with_fix(STRANGER_FIX)
                }
                Some(same) => copy_detail(same, la.len(), lb.len()),
            }
        }
        (Err(e), _) => format!("a sync tool's conflict copy that cannot be read: {e}"),
        (_, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Finding::new(&c.path, Kind::ConflictCopy, LONE_COPY)
                .with_remedy(Remedy::Report)
                .with_fix(lone_copy_fix(c))
        }
        (_, Err(e)) => format!("a sync tool's conflict copy whose transcript cannot be read: {e}"),
    };
    Finding::new(&c.path, Kind::ConflictCopy, detail)
}

/// The words of a conflict copy of `copy` lines sharing `same` leading
/// lines with a transcript of `main` lines.
fn copy_detail(same: usize, copy: usize, main: usize) -> String {
    if same == copy && copy == main {
        "a sync tool's conflict copy with the same history as the transcript".to_string()
    } else if same == copy {
        format!("a sync tool's conflict copy holding a prefix ({copy} lines) of the transcript")
    } else {
        format!(
            "a sync tool's conflict copy: it diverges from the transcript after {same} common \
             lines (copy: {copy} lines, transcript: {main} lines)"
        )
    }
}
