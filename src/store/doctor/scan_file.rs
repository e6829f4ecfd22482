//! The doctor's scan of one transcript file: every frame walked (the
//! damage classifier, [`crate::store::classify::walk`]) and decoded through
//! the bounded streaming decoder, checksum verified, with its lines fed to
//! the line checks ([`super::content`]); or, for `session.jsonl`, every line.
//! One decode per frame serves both.
//!
//! Source: FORMAT.md ("Reading and recovery"), MOUNT.md ("The tree").

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use super::super::check::SkippableFrames;
use super::super::classify::{walk, WalkEnd};
use super::super::decode;
use super::super::frame::{FrameError, FrameInfo, FrameKind};
use super::super::header::Header;
use super::super::limits::MAX_LINE_BYTES;
use super::content::{ContentCheck, SeqSplit};
use super::finding::{Finding, Kind, Remedy};
use super::fragment::{self, stray_fragments, Fragment};
use super::long_line;

/// What the scan of one transcript found.
#[derive(Debug, Clone, Default)]
pub struct FileScan {
    /// The transcript.
    pub path: PathBuf,
    /// Whether it was read as raw lines (`session.jsonl`).
    pub raw: bool,
    /// Its length on disk in bytes.
    pub bytes: u64,
    /// Complete data frames on disk (decodable or not); 0 for raw.
    pub frames: u64,
    /// Of those, frames that decoded with a valid checksum.
    pub frames_ok: u64,
    /// Complete lines read (before any damage).
    pub lines: u64,
    /// Decoded bytes read before any damage.
    pub plain_len: u64,
    /// The header, when the first line is one.
    pub header: Option<Header>,
    /// Where the committed data ends when the tail is torn (file offset).
    pub torn_at: Option<u64>,
    /// The first repeated `seq`: decoded offset and `seq`; with the file
    /// offset of the frame (zstd) or line (raw) it lies in.
    pub split: Option<(SeqSplit, u64)>,
    /// The skippable frames walked (zstd), counted: they make one
    /// [`Kind::SkippableFrame`] finding however many there are.
    pub skippable: SkippableFrames,
    /// The problems found (skippable frames, however many, are one).
    pub findings: Vec<Finding>,
    /// (decoded offset, file offset) of each frame whose lines were read.
    frame_starts: Vec<(u64, u64)>,
}

impl FileScan {
    /// Whether a finding of `kind` was made.
    pub fn has(&self, kind: Kind) -> bool {
        self.findings.iter().any(|f| f.kind == kind)
    }
}

/// Splits decoded bytes into lines, holding at most [`MAX_LINE_BYTES`] of
/// an unfinished one.
struct Lines {
    pending: Vec<u8>,
    /// Bytes of the unfinished line so far (dropped ones included).
    pending_len: u64,
    /// Decoded offset of the unfinished line's first byte.
    start: u64,
    /// Whether the unfinished line grew past the cap (its bytes dropped).
    too_long: bool,
    /// Where in `pending` each frame after the one the line began in
    /// starts (the pieces [`stray_fragments`] judges).
    piece_starts: Vec<usize>,
    /// The decoded start of the last line joined from several frames
    /// while the line after it is still to be checked.
    watched: Option<u64>,
    /// Decoded starts of the first lines joined from several frames that
    /// the reference's load fails at: the joined line, or the line after
    /// it, does not continue the line before it (the join may be one
    /// record's start and another's rest). At most
    /// [`FRAME_FINDINGS_KEPT`], the lines of the split findings kept.
    broken_joins: Vec<u64>,
    /// The decoded start and length (its newline included) of the last
    /// complete line.
    last_line: Option<(u64, u64)>,
}

impl Lines {
    fn new() -> Lines {
        Lines {
            pending: Vec::new(),
            pending_len: 0,
            start: 0,
            too_long: false,
            piece_starts: Vec::new(),
            watched: None,
            broken_joins: Vec::new(),
            last_line: None,
        }
    }

    /// After a line was checked (`joined`: from several frames, starting
    /// at `at`): notes a joined line at which the load fails, it or the
    /// line after it not continuing `seq`.
    fn judged(&mut self, joined: bool, at: u64, check: &ContentCheck) {
        let broken = if let Some(start) = self.watched.take() {
            (!check.last_line_continued()).then_some(start)
        } else {
            None
        };
        let broken = broken.or((joined && !check.last_line_continued()).then_some(at));
        if let Some(start) = broken {
            if self.broken_joins.len() < FRAME_FINDINGS_KEPT {
                self.broken_joins.push(start);
            }
        } else if joined {
            self.watched = Some(at);
        }
    }

    /// A frame's bytes come next: they start a new piece of the unfinished
    /// line, if there is one.
    fn frame_begins(&mut self) {
        if self.pending_len > 0 && !self.too_long {
            self.piece_starts.push(self.pending.len());
        }
    }

    /// Where in `pending` each piece starts, then where the last one ends.
    fn piece_bounds(&self) -> Vec<usize> {
        let mut bounds = vec![0];
        bounds.extend(self.piece_starts.iter().copied());
        bounds.push(self.pending.len());
        bounds
    }

    /// The unfinished line's bytes by the frames that gave them, when
    /// some are held whole (the header line's too: a stray fragment
    /// before the header frame, or a header frame without its newline,
    /// is judged as any line's).
    fn unfinished_pieces(&self) -> Option<Vec<&[u8]>> {
        if self.pending_len == 0 || self.too_long {
            return None;
        }
        let bounds = self.piece_bounds();
        Some(
            bounds
                .windows(2)
                .map(|w| &self.pending[w[0]..w[1]])
                .collect(),
        )
    }

    /// Ends the first `strays.len()` pieces of the unfinished line as
    /// [`stray_fragments`] judged them: a torn start is skipped, an
    /// unended record checked as a line of its own; the pieces after them
    /// stay the line's start.
    fn end_fragments(&mut self, strays: &[Fragment], check: &mut ContentCheck) {
        let bounds = self.piece_bounds();
        for (i, fragment) in strays.iter().enumerate() {
            if *fragment == Fragment::Unended {
                let at = self.start + bounds[i] as u64;
                check.line(&self.pending[bounds[i]..bounds[i + 1]], at);
                self.judged(false, at, check);
            }
        }
        let kept_from = bounds[strays.len()];
        self.pending.drain(..kept_from);
        self.start += kept_from as u64;
        self.pending_len -= kept_from as u64;
        // The kept pieces after the first of them start where they did.
        self.piece_starts = self
            .piece_starts
            .get(strays.len()..)
            .unwrap_or_default()
            .iter()
            .map(|b| b - kept_from)
            .collect();
    }

    fn feed(&mut self, mut bytes: &[u8], check: &mut ContentCheck) {
        while let Some(i) = memchr::memchr(b'\n', bytes) {
            if i == 0 && self.pending_len == 0 {
                // A run of empty lines is judged at once.
                let run = newline_run(bytes);
                check.empty_lines(run as u64, self.start);
                self.judged(false, self.start, check);
                self.last_line = Some((self.start + run as u64 - 1, 1));
                self.start += run as u64;
                bytes = &bytes[run..];
                continue;
            }
            let at = self.start;
            let total = self.pending_len + i as u64 + 1;
            if self.too_long {
                check.skip_line();
            } else if self.pending.is_empty() {
                check.line(&bytes[..i], at);
            } else {
                self.pending.extend_from_slice(&bytes[..i]);
                check.line(&self.pending, at);
            }
            self.judged(self.pending_len > 0, at, check);
            self.last_line = Some((at, total));
            self.pending.clear();
            self.pending_len = 0;
            self.too_long = false;
            self.piece_starts.clear();
            self.start = at + total;
            bytes = &bytes[i + 1..];
        }
        self.pending_len += bytes.len() as u64;
        if !self.too_long {
            if self.pending.len() + bytes.len() > MAX_LINE_BYTES {
                self.too_long = true;
                self.pending = Vec::new();
                self.piece_starts.clear();
            } else {
                self.pending.extend_from_slice(bytes);
            }
        }
    }
}

/// How many bytes at the start of `bytes` are newlines (a word at a
/// time: a frame may decode to gigabytes of them).
fn newline_run(bytes: &[u8]) -> usize {
    const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut n = 0;
    for word in bytes.chunks_exact(8) {
        if u64::from_ne_bytes(word.try_into().expect("8 bytes")) != NEWLINES {
            break;
        }
        n += 8;
    }
    n + bytes[n..].iter().take_while(|&&b| b == b'\n').count()
}

/// Scans the transcript at `path` (any name; `raw` says how to read it).
/// Never fails: what cannot be read is a finding.
/// The finding of a frame that fails to decode for `reason`: a window
/// too large is not damage (the reference reads it).
fn frame_kind(reason: &str) -> Kind {
    if super::super::decode::is_window_too_large(reason) {
        Kind::WindowTooLarge
    } else {
        Kind::CorruptFrame
    }
}

pub fn scan_file(path: &Path, raw: bool) -> FileScan {
    let mut scan = FileScan {
        path: path.to_path_buf(),
        raw,
        ..FileScan::default()
    };
    if let Some(what) = super::super::check::describe_non_regular(path) {
        let shown = super::super::error::ShellArg(path).to_string();
        let fix = if what.starts_with("not a regular file") {
            format!(
                "move {shown} out of the root (until a transcript is there, the session's \
                 session.jsonl and session.md fail with EIO)"
            )
        } else {
            format!("restore {shown} from a backup")
        };
        scan.findings
            .push(Finding::new(path, Kind::Unreadable, what).with_fix(fix));
        return scan;
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => {
            scan.findings.push(Finding::new(
                path,
                Kind::Unreadable,
                format!("cannot open it: {e}"),
            ));
            return scan;
        }
    };
    let len = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => {
            scan.findings.push(Finding::new(
                path,
                Kind::Unreadable,
                format!("cannot stat it: {e}"),
            ));
            return scan;
        }
    };
    scan.bytes = len;
    if len == 0 {
        scan.findings.push(Finding::new(
            path,
            Kind::Empty,
            "the file is empty: no header, nothing committed",
        ));
        return scan;
    }
    let mut check = ContentCheck::new();
    let result = if raw {
        scan_lines(&file, len, &mut scan, &mut check)
    } else {
        scan_frames(&file, len, &mut scan, &mut check)
    };
    if let Err(e) = result {
        scan.findings.push(Finding::new(
            path,
            Kind::Unreadable,
            format!("reading failed: {e}"),
        ));
    }
    scan.lines = check.lines;
    let (found, split, header) = check.finish();
    scan.header = header;
    let whole = |k: Kind| {
        matches!(
            k,
            Kind::HeaderLess | Kind::BadHeader | Kind::UnsupportedVersion
        )
    };
    let header_problem = found.iter().find(|f| whole(f.kind)).cloned();
    let found = match header_problem {
        // Without a valid header nothing else in the lines matters: one
        // finding for the session.
        Some(f) => vec![f],
        None => found,
    };
    let starts = std::mem::take(&mut scan.frame_starts);
    let frame_of = |plain: u64| -> Option<u64> {
        if raw {
            Some(plain)
        } else {
            starts
                .iter()
                .take_while(|(p, _)| *p <= plain)
                .last()
                .map(|(_, f)| *f)
        }
    };
    let ambiguous = split.is_some_and(|s| s.ambiguous_at.is_some());
    let mut extra = Vec::new();
    for f in found {
        let at = frame_of(f.plain_offset);
        let mut finding = Finding::new(path, f.kind, f.detail);
        if raw && f.kind == Kind::SeqGap {
            finding = finding.with_reference(super::finding::SEQ_GAP_RAW_REFERENCE);
        }
        if ambiguous && matches!(f.kind, Kind::SeqDuplicate | Kind::InterleavedWriters) {
            // A split would have to guess whose line is whose: reported,
            // the transcript left as it is.
            let shown = super::super::error::ShellArg(path).to_string();
            finding = finding.with_remedy(Remedy::Report).with_fix(format!(
                "split it by hand: `sessionfs doctor` cannot tell the two writers' lines apart \
                 (`zstd -dc {shown}` shows them in the order they were written; each writer's \
                 batches are whole frames); --repair leaves it in place"
            ));
        }
        if let Some(at) = at {
            finding = finding.at(at);
        }
        extra.push(finding);
    }
    scan.split = split.map(|s| (s, frame_of(s.plain_offset).unwrap_or(0)));
    if scan.has(Kind::HeaderFrameHoldsEvents) && extra.iter().any(|f| whole(f.kind)) {
        scan.findings
            .retain(|f| f.kind != Kind::HeaderFrameHoldsEvents);
    }
    scan.findings.extend(extra);
    scan
}

/// Reads a raw transcript line by line.
fn scan_lines(
    file: &File,
    len: u64,
    scan: &mut FileScan,
    check: &mut ContentCheck,
) -> std::io::Result<()> {
    let mut reader = BufReader::with_capacity(256 * 1024, Read::take(file, len));
    let mut line = Vec::new();
    let mut offset = 0u64;
    // Start and length (its newline included) of the last complete line.
    let mut last = None;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            if n > MAX_LINE_BYTES {
                // Longer than sessionfs reads: skipped unjudged, up to its
                // newline (64 KiB at a time).
                let mut skipped = n as u64;
                let mut ended = false;
                while !ended {
                    line.clear();
                    let m = (&mut reader).take(64 * 1024).read_until(b'\n', &mut line)?;
                    if m == 0 {
                        break;
                    }
                    skipped += m as u64;
                    ended = line.last() == Some(&b'\n');
                }
                if ended {
                    check.skip_line();
                    last = Some((offset, skipped));
                    offset += skipped;
                    continue;
                }
                scan.torn_at = Some(offset);
                scan.findings.push(
                    Finding::new(
                        &scan.path,
                        Kind::TornTail,
                        format!(
                            "the last line ({skipped} bytes) has no newline: an interrupted write"
                        ),
                    )
                    .at(offset),
                );
                break;
            }
            let kind = if check.lines == 0 {
                Kind::TornHeader
            } else {
                Kind::TornTail
            };
            scan.torn_at = Some(offset);
            // A whole record continuing `seq` is ended, not cut, by the
            // repair (the reference's load truncates the file before it).
            let finding = if kind == Kind::TornTail
                && fragment::is_unended_last_record(&line, check.next_after_last_line())
            {
                Finding::new(
                    &scan.path,
                    kind,
                    format!(
                        "the last line ({n} bytes) is a whole record that continues seq but \
                         has no newline (--repair ends it with one)"
                    ),
                )
                .with_reference(fragment::RAW_UNENDED_REFERENCE)
            } else if kind == Kind::TornHeader && fragment::is_unended_header(&line) {
                Finding::new(
                    &scan.path,
                    kind,
                    format!(
                        "the file is its header line ({n} bytes), whole but without its \
                         newline (--repair ends it with one)"
                    ),
                )
                .with_remedy(Remedy::Repair)
            } else {
                Finding::new(
                    &scan.path,
                    kind,
                    format!("the last line ({n} bytes) has no newline: an interrupted write"),
                )
            };
            scan.findings.push(finding.at(offset));
            break;
        }
        check.line(&line[..n - 1], offset);
        last = Some((offset, n as u64));
        offset += n as u64;
    }
    scan.plain_len = offset;
    if let Some((start, len)) = last.filter(|_| scan.torn_at.is_none()) {
        let path = scan.path.clone();
        scan.findings
            .extend(long_line::last_line_finding(&path, start, len, start));
    }
    Ok(())
}

/// Walks and decodes every frame.
fn scan_frames(
    file: &File,
    len: u64,
    scan: &mut FileScan,
    check: &mut ContentCheck,
) -> std::io::Result<()> {
    let path = scan.path.clone();
    let mut lines = Lines::new();
    // Once a frame fails, the lines after it are not read.
    let mut reading = true;
    let mut plain = 0u64;
    let mut io_error = None;
    let mut buf = vec![0u8; 64 * 1024];
    let mut frame_findings: Vec<Finding> = Vec::new();
    let mut capped = CappedFindings::default();
    let mut frame_starts: Vec<(u64, u64)> = Vec::new();
    let mut data_frames = 0u64;
    // Skippable frames are counted, not listed (a file may hold millions);
    // their one finding goes where the first one was met.
    let mut skippable = SkippableFrames::default();
    let mut skippable_index = 0usize;
    // (frame offset, decoded start of the line it ends inside) of the
    // split findings kept.
    let mut split_starts: Vec<(u64, u64)> = Vec::new();
    let end = walk(file, 0, len, None, |info: &FrameInfo| {
        if info.kind == FrameKind::Skippable {
            if skippable.is_empty() {
                skippable_index = frame_findings.len();
            }
            skippable.add(info);
            return true;
        }
        data_frames += 1;
        let lines_before = check.lines;
        let mut reader = match decode::open(file, info) {
            Ok(r) => r,
            Err(FrameError::Io(e)) => {
                io_error = Some(e);
                return false;
            }
            Err(FrameError::Corrupt { offset, reason }) => {
                capped.note(
                    &mut frame_findings,
                    Finding::new(
                        &path,
                        frame_kind(&reason),
                        format!("frame {data_frames}: {reason}"),
                    )
                    .at(offset),
                );
                reading = false;
                return true;
            }
        };
        // A frame is decoded whole before its lines count: a checksum
        // failure at its end must not leave half its lines checked.
        let mut decoded: Vec<u8> = Vec::new();
        let mut fed_in_pieces = false;
        let mut failed = None;
        loop {
            match reader.read_frame(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if reading {
                        if decoded.len() + n > 4 * MAX_LINE_BYTES {
                            // Large frames are fed as they come.
                            if !fed_in_pieces {
                                check.frame_begins(plain);
                                lines.frame_begins();
                            }
                            fed_in_pieces = true;
                            frame_starts.push((plain, info.offset));
                            lines.feed(&decoded, check);
                            plain += decoded.len() as u64;
                            decoded.clear();
                        }
                        decoded.extend_from_slice(&buf[..n]);
                    }
                }
                Err(FrameError::Io(e)) => {
                    io_error = Some(e);
                    return false;
                }
                Err(FrameError::Corrupt { offset, reason }) => {
                    failed = Some((offset, reason));
                    break;
                }
            }
        }
        if let Some((offset, reason)) = failed {
            capped.note(
                &mut frame_findings,
                Finding::new(
                    &path,
                    frame_kind(&reason),
                    format!("frame {data_frames}: {reason}"),
                )
                .at(offset),
            );
            reading = false;
            return true;
        }
        scan.frames_ok += 1;
        if reading {
            // (A frame fed in pieces already continued the line.)
            let first_line = memchr::memchr(b'\n', &decoded)
                .filter(|_| !fed_in_pieces)
                .map(|i| &decoded[..i]);
            let stray = lines
                .unfinished_pieces()
                .zip(first_line)
                .and_then(|(pieces, next)| {
                    let strays = stray_fragments(&pieces, next)?;
                    let torn = fragment::torn_bytes(&strays, &pieces);
                    Some((strays, torn))
                });
            if let Some((strays, torn)) = stray {
                // The frames since the one the line starts in each said
                // they end inside a line: they hold these fragments.
                let run = frame_starts
                    .iter()
                    .take_while(|(p, _)| *p <= lines.start)
                    .last()
                    .map_or(0, |(_, f)| *f);
                let unended = strays.iter().filter(|f| **f == Fragment::Unended).count();
                // Before the header line ends, the reference refuses the
                // first frame itself.
                let reference = if check.lines == 0 {
                    SPLIT_HEADER_REFERENCE
                } else {
                    fragment::REFERENCE
                };
                for f in frame_findings
                    .iter_mut()
                    .filter(|f| f.kind == Kind::SplitLine && f.offset >= Some(run))
                {
                    f.detail = fragment::describe(torn, unended);
                    f.reference = reference.into();
                }
                lines.end_fragments(&strays, check);
            }
            if !fed_in_pieces {
                check.frame_begins(plain);
                lines.frame_begins();
            }
            frame_starts.push((plain, info.offset));
            lines.feed(&decoded, check);
            plain += decoded.len() as u64;
            if decoded.last().is_some_and(|&b| b != b'\n') {
                let f = if data_frames == 1 {
                    Finding::new(
                        &path,
                        Kind::SplitLine,
                        "the header frame ends inside a line",
                    )
                    .with_reference(SPLIT_HEADER_REFERENCE)
                } else if check.lines == 0 {
                    Finding::new(
                        &path,
                        Kind::SplitLine,
                        "the frame ends inside the header line",
                    )
                    .with_reference(SPLIT_HEADER_REFERENCE)
                } else {
                    Finding::new(&path, Kind::SplitLine, "the frame ends inside a line")
                };
                if split_starts.len() < FRAME_FINDINGS_KEPT {
                    split_starts.push((info.offset, lines.start));
                }
                capped.note(&mut frame_findings, f.at(info.offset));
            }
            if data_frames == 1 && check.lines > lines_before + 1 && check.header.is_some() {
                frame_findings.push(
                    Finding::new(
                        &path,
                        Kind::HeaderFrameHoldsEvents,
                        format!(
                            "the first frame holds the header and {} more lines",
                            check.lines - lines_before - 1
                        ),
                    )
                    .at(info.offset),
                );
            }
        }
        true
    });
    if let Some(e) = io_error {
        return Err(e);
    }
    scan.skippable = skippable;
    if !skippable.is_empty() {
        let detail = if skippable.count == 1 {
            format!("a skippable frame of {} bytes", skippable.bytes)
        } else {
            skippable.describe()
        };
        frame_findings.insert(
            skippable_index,
            Finding::new(&path, Kind::SkippableFrame, detail).at(skippable.first),
        );
    }
    scan.frames = data_frames;
    scan.plain_len = plain;
    if reading && lines.pending_len > 0 && matches!(end, Ok(WalkEnd::Clean | WalkEnd::Torn { .. }))
    {
        // The complete frames of the last line end inside it and none
        // completes it (a torn last frame is cut by the reference's load):
        // the reference's load fails there.
        let last_run = frame_starts
            .iter()
            .take_while(|(p, _)| *p <= lines.start)
            .last()
            .map_or(0, |(_, f)| *f);
        // A whole record continuing `seq` is ended, not cut, by the
        // repair.
        const ENDED: &str = "the last frame ends with a whole record that continues seq but \
             has no newline, and no later frame completes it (--repair ends it with one)";
        let unended = !lines.too_long
            && check.lines > 0
            && fragment::is_unended_last_record(&lines.pending, check.next_after_last_line());
        // Or stray fragments before such a record (the repair cuts or
        // ends each, then ends the record).
        let strays = lines
            .unfinished_pieces()
            .filter(|_| !unended)
            .and_then(|pieces| {
                let strays = fragment::last_line_strays(&pieces, check.next_after_last_line())?;
                let torn = fragment::torn_bytes(&strays, &pieces);
                Some((strays, torn))
            });
        // The header line alone, whole: the repair ends it too.
        let header_ended =
            !lines.too_long && check.lines == 0 && fragment::is_unended_header(&lines.pending);
        let detail = if header_ended {
            "the header frame ends with the whole header line but no newline, and no later \
             frame completes it (--repair ends it with one)"
                .to_string()
        } else if unended {
            ENDED.to_string()
        } else if let Some((strays, torn)) = &strays {
            let whole = strays.iter().filter(|f| **f == Fragment::Unended).count();
            lines.end_fragments(strays, check);
            format!("{}; {ENDED}", fragment::describe(*torn, whole))
        } else {
            "the frame ends inside a line that no later frame completes".to_string()
        };
        for f in frame_findings.iter_mut().filter(|f| {
            f.kind == Kind::SplitLine
                && f.offset >= Some(last_run)
                && (f.offset != Some(0) || header_ended)
        }) {
            f.detail = detail.clone();
            if !header_ended {
                f.reference = "load fails (complete frame contains a torn JSONL record)".into();
            }
        }
    }
    broken_joins(&mut frame_findings, &split_starts, &lines.broken_joins);
    // The last line, when the transcript ends with it (the line the mount
    // and `append` continue from): in the frame holding its end.
    if let Some((start, len)) = lines.last_line.filter(|_| {
        reading
            && lines.pending_len == 0
            && matches!(end, Ok(WalkEnd::Clean | WalkEnd::Torn { .. }))
    }) {
        let at = frame_starts
            .iter()
            .take_while(|(p, _)| *p < start + len)
            .last()
            .map_or(0, |(_, f)| *f);
        frame_findings.extend(long_line::last_line_finding(&path, start, len, at));
    }
    match end {
        Err(FrameError::Io(e)) => return Err(e),
        Err(FrameError::Corrupt { offset, reason }) => {
            frame_findings.push(Finding::new(&path, Kind::Damaged, reason).at(offset))
        }
        Ok(WalkEnd::Clean) => {}
        Ok(WalkEnd::Torn { at }) => {
            scan.torn_at = Some(at);
            if data_frames == 0 {
                frame_findings.push(
                    Finding::new(
                        &path,
                        Kind::TornHeader,
                        "the file ends inside its header frame: nothing committed",
                    )
                    .at(at),
                );
            } else {
                frame_findings.push(
                    Finding::new(
                        &path,
                        Kind::TornTail,
                        format!(
                            "the last frame ends early ({} bytes after its start): an \
                             interrupted write",
                            len - at
                        ),
                    )
                    .at(at),
                );
            }
        }
        Ok(WalkEnd::Damaged(d))
            if d.nothing_verifiable_follows
                && data_frames > 0
                && holds_no_frame_start(file, d.at, len)? =>
        {
            frame_findings.push(
                Finding::new(
                    &path,
                    Kind::TrailingGarbage,
                    format!(
                        "{} bytes after the last verifiable frame are no frame ({}), and no \
                         verifiable frame follows",
                        len - d.at,
                        d.reason.trim_end_matches("; nothing verifiable follows")
                    ),
                )
                .at(d.at),
            );
        }
        Ok(WalkEnd::Damaged(d)) => {
            // The classifier may put the damage at a frame already walked.
            frame_findings.retain(|f| !(f.kind == Kind::CorruptFrame && f.offset == Some(d.at)));
            let detail = match d.resumes_at {
                Some(r) => format!("{}; verifiable data resumes at byte {r}", d.reason),
                None => d.reason.clone(),
            };
            frame_findings.push(Finding::new(&path, Kind::Damaged, detail).at(d.at));
        }
    }
    capped.finish(&path, &mut frame_findings);
    scan.findings.extend(frame_findings);
    scan.frame_starts = frame_starts;
    Ok(())
}

/// What the reference does with a line joined from several frames that
/// its load fails at (the joined line, or the line after it, does not
/// continue `seq`).
const BROKEN_JOIN_REFERENCE: &str = "reads it, joining the frames' contents, but load fails \
     there (complete frame contains a torn JSONL record): the joined line, or the line after \
     it, does not continue seq (the join may be the start of one record and the rest of \
     another)";

/// Says, in the split findings still claiming that the reference loads
/// the joined line, that its load fails there when the line (its decoded
/// start found through `split_starts`, pairs of frame offset and line
/// start) is one of `broken` ([`Lines::broken_joins`]). The header line
/// keeps its own text (the reference's `list` fails first).
fn broken_joins(findings: &mut [Finding], split_starts: &[(u64, u64)], broken: &[u64]) {
    if broken.is_empty() {
        return;
    }
    let claim = Finding::new(Path::new(""), Kind::SplitLine, "").reference;
    for f in findings
        .iter_mut()
        .filter(|f| f.kind == Kind::SplitLine && f.reference == claim)
    {
        let start = split_starts
            .iter()
            .find(|(frame, _)| Some(*frame) == f.offset)
            .map(|(_, start)| *start);
        if start.is_some_and(|s| s > 0 && broken.contains(&s)) {
            f.reference = BROKEN_JOIN_REFERENCE.into();
        }
    }
}

/// What the reference does with a header frame that ends inside a line
/// (its `list` and `load` refuse a first frame that is not exactly one
/// header line).
const SPLIT_HEADER_REFERENCE: &str =
    "list() fails for the whole root (first frame is not exactly one header line)";

/// Findings made per frame (a frame that fails to decode, one that ends
/// inside a line) kept whole per file and kind; more are counted in one
/// finding each, so that a file of many small bad frames costs a short
/// report and bounded memory.
const FRAME_FINDINGS_KEPT: usize = 20;

/// The per-frame findings of one file beyond [`FRAME_FINDINGS_KEPT`] of a
/// kind: how many, and where the first of them is.
#[derive(Default)]
struct CappedFindings {
    kept: BTreeMap<Kind, usize>,
    more: BTreeMap<Kind, (u64, Option<u64>)>,
}

impl CappedFindings {
    /// Keeps `f` in `findings`, or counts it when its kind has enough.
    fn note(&mut self, findings: &mut Vec<Finding>, f: Finding) {
        let kept = self.kept.entry(f.kind).or_default();
        if *kept < FRAME_FINDINGS_KEPT {
            *kept += 1;
            findings.push(f);
            return;
        }
        let more = self.more.entry(f.kind).or_insert((0, f.offset));
        more.0 += 1;
    }

    /// One finding per kind for the counted ones.
    fn finish(self, path: &Path, findings: &mut Vec<Finding>) {
        for (kind, (n, first)) in self.more {
            let at = first.map_or_else(String::new, |o| format!(", the first at byte {o}"));
            let mut f = Finding::new(
                path,
                kind,
                format!("{n} more frames like the {FRAME_FINDINGS_KEPT} above{at}"),
            );
            if let Some(o) = first {
                f = f.at(o);
            }
            findings.push(f);
        }
    }
}

/// Most bytes after the last verifiable frame that are examined for frame
/// starts (the damage classifier's search bound); more are never taken for
/// garbage to cut.
const GARBAGE_LIMIT: u64 = super::super::limits::SCAN_BYTES;

/// Most frame magic numbers in the bytes after the last verifiable frame
/// that are walked before they are given up (and then not cut).
const GARBAGE_CANDIDATES: usize = super::super::limits::SCAN_CANDIDATES;

/// Whether bytes `[at, len)` of `file` hold no start of a complete frame
/// of any kind: every zstd or skippable frame magic number in them starts
/// no frame that walks to its end (header, blocks and checksum within the
/// file, [`walk_frame`]). Only such bytes are cut as garbage: a complete
/// frame the classifier cannot verify (no checksum, a window over its
/// limit, a failing checksum) is kept (FORMAT.md: readers accept frames
/// without a checksum). Bytes past [`GARBAGE_LIMIT`], or more than
/// [`GARBAGE_CANDIDATES`] magic numbers, are not examined and answer
/// `false`. Reads 64 KiB at a time.
///
/// Errors: reading the file.
pub fn holds_no_frame_start(file: &File, at: u64, len: u64) -> std::io::Result<bool> {
    use super::super::frame::{walk_frame, FrameError, Step};
    if len <= at || len - at > GARBAGE_LIMIT {
        return Ok(len <= at);
    }
    const CHUNK: usize = 64 * 1024;
    // The last three bytes of either magic, little-endian: zstd
    // 28 B5 2F FD; skippable 5? 2A 4D 18.
    let zstd_tail = memchr::memmem::Finder::new(&[0xB5, 0x2F, 0xFD]);
    let skip_tail = memchr::memmem::Finder::new(&[0x2A, 0x4D, 0x18]);
    let mut buf = vec![0u8; CHUNK + 3];
    let mut candidates = 0usize;
    let mut pos = at;
    while pos + 4 <= len {
        let want = ((len - pos) as usize).min(buf.len());
        std::os::unix::fs::FileExt::read_exact_at(file, &mut buf[..want], pos)?;
        let chunk = &buf[..want];
        let mut starts: Vec<usize> = zstd_tail
            .find_iter(chunk)
            .filter(|&i| i >= 1 && chunk[i - 1] == 0x28)
            .chain(
                skip_tail
                    .find_iter(chunk)
                    .filter(|&i| i >= 1 && chunk[i - 1] & 0xF0 == 0x50),
            )
            .map(|i| i - 1)
            .collect();
        starts.sort_unstable();
        for i in starts {
            candidates += 1;
            if candidates > GARBAGE_CANDIDATES {
                return Ok(false);
            }
            match walk_frame(file, pos + i as u64, len) {
                Ok(Step::Frame(_)) => return Ok(false),
                Ok(_) | Err(FrameError::Corrupt { .. }) => {}
                Err(FrameError::Io(e)) => return Err(e),
            }
        }
        if want < buf.len() {
            break;
        }
        // A magic number across the boundary is found in the next chunk.
        pos += (want - 3) as u64;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;

    /// Runs of empty lines (judged in bulk) give what judging each line
    /// alone gives: the same findings, offsets, counts and line numbers,
    /// at the start (header-less), in the middle and across pieces.
    #[test]
    fn runs_of_empty_lines_are_judged_like_single_lines() {
        let h = "{\"type\":\"session\",\"version\":0,\"id\":\"a\",\"createdAt\":1,\"cwd\":\"/x\",\"delegationDepth\":0}";
        let e = "{\"type\":\"turn/start\",\"seq\":0,\"time\":2,\"data\":{\"turn\":1}}";
        for text in [
            format!("\n\n\n{h}\n{e}\n"),
            format!("{h}\n{}{e}\n\n\nx\n", "\n".repeat(37)),
            format!("{h}\n{e}\n{}", "\n".repeat(9)),
        ] {
            let mut one = ContentCheck::new();
            let mut at = 0;
            for line in text.split_inclusive('\n') {
                one.line(&line.as_bytes()[..line.len() - 1], at);
                at += line.len() as u64;
            }
            for cut in [1, 3, 8, 17, text.len()] {
                let mut bulk = ContentCheck::new();
                let mut lines = Lines::new();
                for piece in text.as_bytes().chunks(cut) {
                    lines.feed(piece, &mut bulk);
                }
                assert_eq!(bulk.lines, one.lines, "{text:?} in pieces of {cut}");
                let mut expected = ContentCheck::new();
                let mut at = 0;
                for line in text.split_inclusive('\n') {
                    expected.line(&line.as_bytes()[..line.len() - 1], at);
                    at += line.len() as u64;
                }
                assert_eq!(
                    bulk.finish().0,
                    expected.finish().0,
                    "{text:?} in pieces of {cut}"
                );
            }
        }
        assert_eq!(newline_run(b"\n\n\n\n\n\n\n\n\n\nx\n"), 10);
        assert_eq!(newline_run(b"x\n"), 0);
        assert_eq!(newline_run(&[b'\n'; 20]), 20);
    }

    /// A transcript of a header frame and one event frame followed by
    /// 100,000 empty skippable frames makes one skippable-frame finding
    /// (at the first, with the count), held in counts, not per frame; the
    /// two frames before them still verify and their lines are read.
    #[test]
    fn many_skippable_frames_make_one_finding() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1767603700000,\"cwd\":\"/tmp/h\",\"delegationDepth\":0}\n";
        let event =
            b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1767603700001,\"data\":{\"turn\":1}}\n";
        let mut bytes = encode_frame(header).unwrap();
        bytes.extend(encode_frame(event).unwrap());
        let prefix = bytes.len() as u64;
        for _ in 0..100_000 {
            bytes.extend(0x184D_2A50u32.to_le_bytes());
            bytes.extend(0u32.to_le_bytes());
        }
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan_file(&path, false);
        let kinds: Vec<Kind> = scan.findings.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [Kind::SkippableFrame], "{:?}", scan.findings);
        let f = &scan.findings[0];
        assert_eq!(f.offset, Some(prefix));
        assert_eq!(
            f.detail,
            format!(
                "100000 skippable frames at bytes {prefix}..{} (800000 bytes)",
                bytes.len()
            )
        );
        assert_eq!(scan.skippable.count, 100_000);
        assert_eq!(scan.skippable.bytes, 800_000);
        assert_eq!((scan.frames, scan.frames_ok, scan.lines), (2, 2, 2));
        assert_eq!(scan.plain_len, (header.len() + event.len()) as u64);
        assert_eq!(scan.torn_at, None);
        assert!(scan.header.is_some());
    }

    /// 5,000 frames that each end inside a line: the first 20 findings
    /// kept, the others counted in one more finding of the same kind.
    #[test]
    fn many_frames_ending_inside_a_line_make_21_findings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1767603700000,\"cwd\":\"/tmp/h\",\"delegationDepth\":0}\n";
        let mut bytes = encode_frame(header).unwrap();
        let first_split = bytes.len() as u64;
        for _ in 0..5_000 {
            bytes.extend(encode_frame(b"{\"type\":").unwrap());
        }
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan_file(&path, false);
        let split: Vec<&Finding> = scan
            .findings
            .iter()
            .filter(|f| f.kind == Kind::SplitLine)
            .collect();
        assert_eq!(split.len(), FRAME_FINDINGS_KEPT + 1, "{:?}", scan.findings);
        assert_eq!(split[0].offset, Some(first_split));
        let last = split.last().unwrap();
        assert!(
            last.detail
                .starts_with(&format!("{} more frames like", 5_000 - FRAME_FINDINGS_KEPT)),
            "{}",
            last.detail
        );
        assert_eq!(scan.frames, 5_001);
    }
}
