//! `sessionfs check`: a full verification of transcripts (every frame
//! decoded and its checksum verified, or every raw line parsed), and the one
//! repair the format allows: truncating a torn tail (FORMAT.md, Reading and
//! recovery).
//!
//! The mount never repairs (MOUNT.md, Appending); this is the explicit,
//! user-run counterpart it points to. Committed data is never rewritten: a
//! repair only cuts bytes after the last complete frame (zstd) or the last
//! `\n` (raw), and never when nothing committed would remain.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::append::lock_for_repair;
use super::classify::{walk as walk_frames, Damage, WalkEnd};
use super::decode::{self, HeaderFrameError};
use super::error::{Result, StoreError};
use super::frame::{FrameError, FrameInfo, FrameKind};
use super::header::parse_header;
use super::limits::MAX_LINE_BYTES;
use super::quarantine::{root_and_rel, Quarantine};
use super::transcript::Encoding;

/// How many bad raw lines are named one by one; the rest are counted.
const MAX_BAD_LINES: usize = 20;

/// Problems of frames after the header listed per transcript; more are
/// counted, so a file of many small bad frames stays one short report.
const MAX_FRAME_PROBLEMS: usize = 20;

/// What a check found in one transcript.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// The transcript checked.
    pub path: PathBuf,
    /// Whether it was checked as a raw transcript (`session.jsonl`, plain
    /// lines) rather than as zstd frames.
    pub raw: bool,
    /// Complete data frames (zstd).
    pub frames: usize,
    /// Complete lines (raw).
    pub lines: usize,
    /// Decompressed bytes of the complete frames (zstd), or bytes of the
    /// complete lines (raw).
    pub plain_len: u64,
    /// The skippable frames walked (the reference refuses them), counted:
    /// never listed one by one, whatever the file holds.
    pub skippable: SkippableFrames,
    /// Where a torn tail starts, if the file ends inside a frame (zstd) or
    /// after its last `\n` (raw).
    pub torn_at: Option<u64>,
    /// Whether the torn tail is the header itself: no complete header
    /// frame (or line) precedes it, so nothing committed would remain after
    /// a truncation, which is therefore refused.
    pub torn_in_header: bool,
    /// Problems that make the transcript unreadable in part or whole:
    /// corrupt frames, a bad header, bad lines; each names its byte offset.
    pub problems: Vec<String>,
    /// Damage that is not a torn tail (from the classifier,
    /// [`super::classify`]): where the walk fails and where verifiable
    /// data resumes. `--repair` never changes such a file.
    pub damage: Option<Damage>,
    /// Whether `--repair` truncated the torn tail.
    pub repaired: bool,
    /// Where `--repair` copied the bytes it cut (the quarantine folder).
    pub quarantined: Option<PathBuf>,
    /// Frames after the header that failed to decode or ended inside a
    /// line: the first [`MAX_FRAME_PROBLEMS`] are in `problems`, the
    /// others counted in one more problem.
    pub frame_problems: usize,
}

impl CheckReport {
    /// Whether the transcript is fully readable by the reference as is.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.torn_at.is_none() && self.skippable.is_empty()
    }

    /// Whether something is still wrong after the check (and its repair, if
    /// any): a problem, a skippable frame, a torn tail left in place.
    pub fn has_problem(&self) -> bool {
        !self.problems.is_empty()
            || !self.skippable.is_empty()
            || self.torn_in_header
            || (self.torn_at.is_some() && !self.repaired)
    }
}

/// The skippable frames of one transcript, summarised: how many, their
/// bytes and where the first starts and the last ends. Held in four
/// numbers, so a file of millions of 8-byte skippable frames costs no
/// memory per frame; `check` and `doctor` report them as one problem.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkippableFrames {
    /// How many skippable frames were walked.
    pub count: u64,
    /// Their total length on disk in bytes (frame headers included).
    pub bytes: u64,
    /// Byte offset of the first one in the file (0 when `count` is 0).
    pub first: u64,
    /// Byte offset just past the last one (exclusive; 0 when `count` is 0).
    pub end: u64,
}

impl SkippableFrames {
    /// Counts one more skippable frame, `info` (as the frame walk
    /// delimited it; walks go forward, so it ends after the ones counted).
    pub fn add(&mut self, info: &FrameInfo) {
        if self.count == 0 {
            self.first = info.offset;
        }
        self.count = self.count.saturating_add(1);
        self.bytes = self.bytes.saturating_add(info.len);
        self.end = info.offset.saturating_add(info.len);
    }

    /// Whether none was walked.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether they lie back to back, with no data frame between them.
    pub fn contiguous(&self) -> bool {
        self.end.saturating_sub(self.first) == self.bytes
    }

    /// Where they are, in words: `skippable frame at byte X` for one,
    /// `N skippable frames at bytes X..Y (B bytes)` for a run (`Y`
    /// exclusive), or `N skippable frames (B bytes) between bytes X and Y,
    /// data frames among them` when they are not back to back.
    pub fn describe(&self) -> String {
        let (n, first, end, bytes) = (self.count, self.first, self.end, self.bytes);
        if n == 1 {
            format!("skippable frame at byte {first}")
        } else if self.contiguous() {
            format!("{n} skippable frames at bytes {first}..{end} ({bytes} bytes)")
        } else {
            format!(
                "{n} skippable frames ({bytes} bytes) between bytes {first} and {end}, data \
                 frames among them"
            )
        }
    }
}

/// Whether `path` names a raw transcript (`….jsonl`); anything else is
/// checked as zstd frames.
pub fn is_raw_name(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.as_encoded_bytes().ends_with(b".jsonl"))
}

/// What `path` is, when it is not a regular file (following symbolic
/// links): `None` for a regular file.
pub fn describe_non_regular(path: &Path) -> Option<String> {
    let kind = match fs::metadata(path) {
        Ok(meta) => meta.file_type(),
        Err(e) => {
            let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            return Some(match e.raw_os_error() {
                Some(libc::ELOOP) => "not a regular file: a symbolic link loop".to_string(),
                _ if link && e.kind() == std::io::ErrorKind::NotFound => {
                    "not a regular file: a dangling symbolic link".to_string()
                }
                _ if e.kind() == std::io::ErrorKind::NotFound => {
                    "no such file or directory".to_string()
                }
                _ => format!("cannot stat it: {e}"),
            });
        }
    };
    let what = if kind.is_file() {
        return None;
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a file or directory"
    };
    Some(format!("not a regular file: {what}"))
}

/// Checks the transcript at `path`, by its name: `….jsonl` as raw lines,
/// anything else as zstd frames.
///
/// Zstd: walks every frame, decodes each (verifying checksums), checks that
/// the first frame is exactly one valid header line and that every frame
/// ends with a complete line. Raw: checks that the first line is a valid
/// header and every other line one JSON object.
///
/// Where the frame walk fails, the classifier ([`super::classify`])
/// decides between a torn tail and damage in the middle (verifiable data
/// after the failure point), which is reported with both offsets.
///
/// With `repair`, a torn tail is copied to the quarantine folder
/// ([`super::quarantine`], path in [`CheckReport::quarantined`]) and then
/// truncated away under the append lock (after which the file ends at its
/// last complete frame or line), unless the header itself is torn; nothing
/// else is ever changed (damage in the middle never is). A path that is
/// not a regular file is reported as a problem, not opened.
///
/// Errors: [`StoreError::Io`] / [`StoreError::NotFound`] when the file
/// cannot be opened, read, locked or truncated.
pub fn check_transcript(path: &Path, repair: bool) -> Result<CheckReport> {
    let mut report = CheckReport {
        path: path.to_path_buf(),
        raw: is_raw_name(path),
        ..CheckReport::default()
    };
    // Before opening: opening a FIFO would block, a directory would open.
    if let Some(what) = describe_non_regular(path) {
        report.problems.push(what);
        return Ok(report);
    }
    let file = OpenOptions::new()
        .read(true)
        .write(repair)
        .open(path)
        .map_err(|e| StoreError::io("open", path, e))?;
    // A repair holds the writers' locks (the lock file too, for writers
    // on other machines of a shared root) until the report is made.
    let _locked = if repair {
        Some(lock_for_repair(path, &file)?)
    } else {
        None
    };
    let meta = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?;
    if !meta.is_file() {
        report
            .problems
            .push("not a regular file (it was replaced while checking)".into());
        return Ok(report);
    }
    let len = meta.len();
    if len == 0 {
        report.problems.push("the file is empty (no header)".into());
        return Ok(report);
    }
    if report.raw {
        walk_lines(&file, len, &mut report)?;
    } else {
        walk_all(&file, len, &mut report)?;
    }
    if let (true, Some(at), false) = (repair, report.torn_at, report.torn_in_header) {
        // Every byte cut is copied to the quarantine folder first.
        let (root, rel) = root_and_rel(path);
        // The root is named by its real path, wherever check was run from.
        let root = fs::canonicalize(&root).unwrap_or(root);
        let copy = Quarantine::create(&root)
            .and_then(|q| q.copy_range(&file, at, len, &rel))
            .map_err(|e| {
                StoreError::io("copy the torn tail to the quarantine folder for", path, e)
            })?;
        report.quarantined = Some(copy);
        file.set_len(at)
            .and_then(|()| file.sync_all())
            .map_err(|e| StoreError::io("truncate the torn tail of", path, e))?;
        report.repaired = true;
    }
    Ok(report)
}

fn walk_all(file: &File, len: u64, report: &mut CheckReport) -> Result<()> {
    // Complete data frames walked, decodable or not (the header frame is
    // complete once one is), and what the last one added to the counts.
    let mut data_frames = 0usize;
    let mut last_counted: Option<(u64, bool, u64)> = None;
    let mut io_error: Option<std::io::Error> = None;
    // The first complete data frame after the header that does not verify
    // (its offset and the index of its problem line), and the first frame
    // after it that does: the mount reads such a file up to that frame
    // only (damage in the middle), and check says so too.
    let mut first_corrupt: Option<(u64, usize)> = None;
    let mut verified_after: Option<u64> = None;
    let end = walk_frames(file, 0, len, None, |info| {
        if info.kind == FrameKind::Skippable {
            report.skippable.add(info);
            return true;
        }
        data_frames += 1;
        let outcome = if data_frames == 1 {
            check_header_frame(file, info, report)
        } else {
            check_frame(file, info, report)
        };
        match outcome {
            Ok(Some(plain_len)) => {
                report.frames += 1;
                report.plain_len += plain_len;
                last_counted = Some((info.offset, true, plain_len));
                if first_corrupt.is_some() && verified_after.is_none() {
                    verified_after = Some(info.offset);
                }
            }
            Ok(None) => {
                last_counted = Some((info.offset, false, 0));
                // Rewritten below as the damage: only a problem listed.
                if data_frames > 1
                    && first_corrupt.is_none()
                    && report.frame_problems <= MAX_FRAME_PROBLEMS
                {
                    first_corrupt = Some((info.offset, report.problems.len().saturating_sub(1)));
                }
            }
            Err(e) => {
                io_error = Some(e);
                return false;
            }
        }
        true
    });
    if let Some(e) = io_error {
        return Err(StoreError::io("read", &report.path, e));
    }
    if report.frame_problems > MAX_FRAME_PROBLEMS {
        report.problems.push(format!(
            "{} more frames fail to decode or end inside a line",
            report.frame_problems - MAX_FRAME_PROBLEMS
        ));
    }
    let end = end.map_err(|e| match e {
        FrameError::Io(e) => StoreError::io("read", &report.path, e),
        FrameError::Corrupt { offset, reason } => StoreError::corrupt(&report.path, offset, reason),
    })?;
    if let (Some((at, idx)), false) = (first_corrupt, matches!(end, WalkEnd::Damaged(_))) {
        if let Some(problem) = report.problems.get_mut(idx) {
            let prefix = format!("frame at byte {at}: ");
            let reason = problem
                .strip_prefix(&prefix)
                .unwrap_or(problem.as_str())
                .to_string();
            let d = Damage {
                at,
                reason,
                resumes_at: verified_after,
                nothing_verifiable_follows: false,
            };
            *problem = damage_text(&d);
            report.damage = Some(d);
        }
    }
    match end {
        WalkEnd::Clean => {}
        WalkEnd::Torn { at } => {
            report.torn_at = Some(at);
            report.torn_in_header = data_frames == 0;
        }
        WalkEnd::Damaged(d) => {
            // The classifier may put the damage at the last frame walked
            // (it overlaps verifiable data): it is not counted then.
            if let Some((offset, counted, plain_len)) = last_counted {
                if offset >= d.at && counted {
                    report.frames -= 1;
                    report.plain_len -= plain_len;
                }
            }
            report.problems.push(damage_text(&d));
            report.damage = Some(d);
        }
    }
    Ok(())
}

/// The problem line of damage in the middle.
fn damage_text(d: &Damage) -> String {
    if super::decode::is_window_too_large(&d.reason) {
        return format!(
            "byte {}: {}; {}",
            d.at,
            d.reason,
            super::decode::window_note()
        );
    }
    match d.resumes_at {
        Some(r) => format!(
            "byte {}: {}; damaged in the middle: verifiable data resumes at byte {r}; not a \
             torn tail, so --repair changes nothing: restore the file from a backup",
            d.at, d.reason
        ),
        None => format!(
            "byte {}: {}; nothing after it can be read, and --repair changes nothing \
             (`sessionfs doctor --repair` cuts it when no complete frame starts in it, else \
             sets the transcript aside; a copy is kept either way)",
            d.at, d.reason
        ),
    }
}

/// Checks the header frame: one line, a valid header. Returns its plain
/// length when it decodes, `None` (a problem noted) when it does not.
fn check_header_frame(
    file: &File,
    info: &FrameInfo,
    report: &mut CheckReport,
) -> std::io::Result<Option<u64>> {
    match decode::header_line(file, info) {
        Ok(line) => {
            if let Err(e) = parse_header(&line[..line.len() - 1]) {
                report.problems.push(e.to_string());
            }
            Ok(Some(line.len() as u64))
        }
        Err(HeaderFrameError::Frame(FrameError::Io(e))) => Err(e),
        Err(HeaderFrameError::Frame(FrameError::Corrupt { offset, reason })) => {
            let note = if decode::is_window_too_large(&reason) {
                format!("; {}", decode::window_note())
            } else {
                String::new()
            };
            report
                .problems
                .push(format!("frame at byte {offset}: {reason}{note}"));
            Ok(None)
        }
        Err(HeaderFrameError::LineTooLong) => {
            report.problems.push(format!(
                "header line longer than {MAX_LINE_BYTES} bytes (16 MiB), more than sessionfs \
                 reads"
            ));
            Ok(None)
        }
        Err(HeaderFrameError::NotOneLine(why)) => {
            report.problems.push(format!(
                "the first frame is not exactly one header line ({why})"
            ));
            Ok(None)
        }
    }
}

/// Notes a problem of a frame after the header: listed while fewer than
/// [`MAX_FRAME_PROBLEMS`] are, counted always.
fn push_frame_problem(report: &mut CheckReport, text: String) {
    if report.frame_problems < MAX_FRAME_PROBLEMS {
        report.problems.push(text);
    }
    report.frame_problems += 1;
}

/// Checks a frame after the header: decodes it (streaming, checksum
/// verified) and checks that it ends with a complete line.
fn check_frame(
    file: &File,
    info: &FrameInfo,
    report: &mut CheckReport,
) -> std::io::Result<Option<u64>> {
    match decode::scan(file, info, false) {
        Ok(summary) => {
            if summary.last_byte.is_some_and(|b| b != b'\n') {
                push_frame_problem(
                    report,
                    format!("frame at byte {}: ends inside a line", info.offset),
                );
            }
            Ok(Some(summary.plain_len))
        }
        Err(FrameError::Io(e)) => Err(e),
        Err(FrameError::Corrupt { offset, reason }) => {
            push_frame_problem(report, format!("frame at byte {offset}: {reason}"));
            Ok(None)
        }
    }
}

/// Why a raw event line is not one JSON object, if it is not.
fn json_object_problem(line: &[u8]) -> Option<String> {
    super::json::parse_object(line, super::json::Utf8::Replace)
        .err()
        .map(|e| e.to_string())
}

/// Checks the first `len` bytes of a raw transcript, line by line.
fn walk_lines(file: &File, len: u64, report: &mut CheckReport) -> Result<()> {
    let mut reader = BufReader::with_capacity(256 * 1024, Read::take(file, len));
    let mut line = Vec::new();
    let mut offset = 0u64;
    let mut bad = 0usize;
    loop {
        line.clear();
        // At most MAX_LINE_BYTES of a line are held; the rest is skipped.
        let mut n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| StoreError::io("read", &report.path, e))?;
        if n == 0 {
            break;
        }
        let too_long = line.last() != Some(&b'\n') && n > MAX_LINE_BYTES;
        if too_long {
            let (skipped, ended) =
                skip_line(&mut reader).map_err(|e| StoreError::io("read", &report.path, e))?;
            n += skipped as usize;
            if ended {
                line.truncate(0);
                line.push(b'\n');
            }
        }
        if line.last() != Some(&b'\n') {
            report.torn_at = Some(offset);
            report.torn_in_header = report.lines == 0;
            break;
        }
        report.lines += 1;
        if too_long {
            report.problems.push(format!(
                "line {} (byte {offset}): longer than {MAX_LINE_BYTES} bytes (16 MiB), more \
                 than sessionfs reads",
                report.lines
            ));
            offset += n as u64;
            continue;
        }
        let body = &line[..n - 1];
        if report.lines == 1 {
            if let Err(e) = parse_header(body) {
                report.problems.push(format!("line 1 (byte 0): {e}"));
            }
        } else if let Some(why) = json_object_problem(body) {
            bad += 1;
            if bad <= MAX_BAD_LINES {
                report
                    .problems
                    .push(format!("line {} (byte {offset}): {why}", report.lines));
            }
        }
        offset += n as u64;
    }
    if bad > MAX_BAD_LINES {
        report.problems.push(format!(
            "{} more lines are not one JSON object",
            bad - MAX_BAD_LINES
        ));
    }
    report.plain_len = offset;
    Ok(())
}

/// Consumes `reader` up to and including the next `\n`, holding nothing:
/// the bytes consumed, and whether a `\n` ended them.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<(u64, bool)> {
    let mut skipped = 0u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((skipped, false));
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok((skipped + i as u64 + 1, true));
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

/// What a path given to `check` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckTarget {
    /// A regular file: checked as one transcript.
    File,
    /// A directory taken as a store root.
    Root,
    /// A session directory (it holds a transcript itself), not a root.
    SessionDir,
    /// A project directory (its subdirectories hold transcripts), not a
    /// root.
    ProjectDir,
    /// Anything else; the text says what it is.
    Other(String),
}

fn is_transcript_name(name: &std::ffi::OsStr) -> bool {
    name == Encoding::Zstd.file_name() || name == Encoding::Raw.file_name()
}

fn holds_transcript_entry(dir: &Path) -> bool {
    fs::read_dir(dir)
        .is_ok_and(|mut it| it.any(|e| e.is_ok_and(|e| is_transcript_name(&e.file_name()))))
}

/// Why the directory `path`, given as a session store root, is not one,
/// judged cheaply (no walk of the root): it holds a transcript itself (a
/// session directory), or it is named like a project directory and a
/// directory in it holds one (a project directory). `None` otherwise.
pub fn not_a_root(path: &Path) -> Option<&'static str> {
    if holds_transcript_entry(path) {
        return Some(
            "a session directory, not a session store root: give the root (the directory \
             that holds its project directory)",
        );
    }
    let project_named = path
        .file_name()
        .is_some_and(super::naming::is_project_dir_os);
    if project_named && subdirs(path).iter().any(|d| holds_transcript_entry(d)) {
        return Some(
            "a project directory, not a session store root: give the root (the directory \
             that holds it)",
        );
    }
    None
}

/// Classifies a path given to `check`.
pub fn classify(path: &Path) -> CheckTarget {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => CheckTarget::File,
        Ok(meta) if meta.is_dir() => {
            if path.file_name().is_some_and(is_transcript_name) {
                return CheckTarget::Other(
                    "not a regular file: a directory named like a transcript".into(),
                );
            }
            if holds_transcript_entry(path) {
                return CheckTarget::SessionDir;
            }
            // A project directory: its subdirectories hold transcripts and
            // it has none two levels down (asked second: it walks).
            if subdirs(path).iter().any(|d| holds_transcript_entry(d))
                && transcripts_under(path).is_empty()
            {
                return CheckTarget::ProjectDir;
            }
            CheckTarget::Root
        }
        _ => CheckTarget::Other(
            describe_non_regular(path).unwrap_or_else(|| "not a regular file".into()),
        ),
    }
}

/// The directories directly in `dir` (following symbolic links).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// The transcripts under `root`: every `<project>/<session>/session.jsonl.zstd`
/// and `<project>/<session>/session.jsonl` of the root's catalog (the
/// store's one walk, [`super::Discovery`]), whatever they are (a directory
/// or a dangling link under a transcript's name is listed too, for
/// [`check_transcript`] to report). Symbolic links to project or session
/// directories are not followed, as the mount does not follow them.
pub fn transcripts_under(root: &Path) -> Vec<PathBuf> {
    let catalog = super::Discovery::new(root, super::discovery::MIN_TTL);
    let mut out = Vec::new();
    for dir in catalog.session_dirs().unwrap_or_default() {
        let session = root.join(&dir.project).join(&dir.session);
        for encoding in [Encoding::Zstd, Encoding::Raw] {
            let t = session.join(encoding.file_name());
            if fs::symlink_metadata(&t).is_ok() {
                out.push(t);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;

    /// A valid transcript (header frame, one event frame) followed by
    /// `n` empty skippable frames (8 bytes each): the file's bytes and the
    /// length of the verifiable prefix.
    fn with_skippable_frames(n: usize) -> (Vec<u8>, usize) {
        let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1767603700000,\"cwd\":\"/tmp/h\",\"delegationDepth\":0}\n";
        let event = b"{\"type\":\"user/message\",\"seq\":0,\"time\":1767603700001,\"data\":{}}\n";
        let mut bytes = encode_frame(header).unwrap();
        bytes.extend(encode_frame(event).unwrap());
        let prefix = bytes.len();
        let mut skippable = 0x184D_2A50u32.to_le_bytes().to_vec();
        skippable.extend(0u32.to_le_bytes());
        for _ in 0..n {
            bytes.extend_from_slice(&skippable);
        }
        (bytes, prefix)
    }

    #[test]
    fn many_frames_ending_inside_a_line_are_listed_up_to_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1767603700000,\"cwd\":\"/tmp/h\",\"delegationDepth\":0}\n";
        let mut bytes = encode_frame(header).unwrap();
        for _ in 0..5_000 {
            bytes.extend(encode_frame(b"{\"type\":").unwrap());
        }
        fs::write(&path, &bytes).unwrap();
        let r = check_transcript(&path, false).unwrap();
        assert_eq!(r.frame_problems, 5_000);
        assert_eq!(r.problems.len(), MAX_FRAME_PROBLEMS + 1, "{:?}", r.problems);
        assert!(
            r.problems[0].ends_with("ends inside a line"),
            "{}",
            r.problems[0]
        );
        assert_eq!(
            r.problems.last().unwrap(),
            &format!(
                "{} more frames fail to decode or end inside a line",
                5_000 - MAX_FRAME_PROBLEMS
            )
        );
        assert_eq!(r.frames, 5_001);
    }

    #[test]
    fn many_skippable_frames_are_counted_in_one_summary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let (bytes, prefix) = with_skippable_frames(100_000);
        fs::write(&path, &bytes).unwrap();
        let r = check_transcript(&path, false).unwrap();
        assert_eq!(
            r.skippable,
            SkippableFrames {
                count: 100_000,
                bytes: 800_000,
                first: prefix as u64,
                end: bytes.len() as u64,
            }
        );
        assert!(r.skippable.contiguous());
        assert_eq!(
            r.skippable.describe(),
            format!(
                "100000 skippable frames at bytes {prefix}..{} (800000 bytes)",
                bytes.len()
            )
        );
        // The verified prefix is still reported as such.
        assert_eq!(r.frames, 2, "{r:?}");
        assert_eq!(r.plain_len, 164);
        assert_eq!((r.torn_at, &r.damage), (None, &None));
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert!(r.has_problem() && !r.is_clean());
        // One frame reads as one, skippable frames among data frames say so.
        let (one, _) = with_skippable_frames(1);
        fs::write(&path, &one).unwrap();
        let r = check_transcript(&path, false).unwrap();
        assert_eq!(r.skippable.count, 1);
        assert_eq!(
            r.skippable.describe(),
            format!("skippable frame at byte {prefix}")
        );
        let mut gaps = SkippableFrames::default();
        for offset in [10, 30] {
            gaps.add(&FrameInfo {
                offset,
                len: 8,
                kind: FrameKind::Skippable,
            });
        }
        assert!(!gaps.contiguous());
        assert_eq!(
            gaps.describe(),
            "2 skippable frames (16 bytes) between bytes 10 and 38, data frames among them"
        );
    }

    #[test]
    fn a_raw_line_longer_than_the_limit_is_reported_not_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let mut text = b"{\"type\":\"session\",\"version\":0,\"id\":\"r\",\"createdAt\":1,\"delegationDepth\":0}\n".to_vec();
        text.extend(std::iter::repeat_n(b'a', MAX_LINE_BYTES + 10));
        text.push(b'\n');
        text.extend_from_slice(b"{\"type\":\"x\",\"seq\":0}\n");
        fs::write(&path, &text).unwrap();
        let r = check_transcript(&path, false).unwrap();
        assert_eq!(r.lines, 3, "{r:?}");
        assert_eq!(r.torn_at, None);
        assert_eq!(r.plain_len, text.len() as u64);
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(r.problems[0].contains("longer than"), "{:?}", r.problems);
    }
}
