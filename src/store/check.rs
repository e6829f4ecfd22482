//! `sessionfs check`: a full verification of transcripts (every frame
//! decoded and its checksum verified), and the one repair the format
//! allows: truncating a torn last frame (FORMAT.md, Reading and recovery).
//!
//! The mount never repairs (MOUNT.md, Appending); this is the explicit,
//! user-run counterpart it points to.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::append::lock_whole_file;
use super::error::{Result, StoreError};
use super::frame::{decode_frame, walk_frame, FrameError, FrameKind, Step};
use super::header::parse_header;
use super::index::read_frame;
use super::transcript::Encoding;

/// What a check found in one transcript.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// The transcript checked.
    pub path: PathBuf,
    /// Complete data frames.
    pub frames: usize,
    /// Decompressed bytes of the complete frames.
    pub plain_len: u64,
    /// Offsets of skippable frames (the reference refuses them).
    pub skippable: Vec<u64>,
    /// Where a torn last frame starts, if the file ends inside one.
    pub torn_at: Option<u64>,
    /// Problems that make the transcript unreadable in part or whole:
    /// corrupt frames, a bad header; each names its byte offset.
    pub problems: Vec<String>,
    /// Whether `--repair` truncated the torn tail.
    pub repaired: bool,
}

impl CheckReport {
    /// Whether the transcript is fully readable by the reference as is.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.torn_at.is_none() && self.skippable.is_empty()
    }
}

/// Checks the zstd transcript at `path`: walks every frame, decodes each
/// (verifying checksums), checks that the first frame is exactly one valid
/// header line and that every frame ends with a complete line. With
/// `repair`, a torn last frame is truncated away under the append lock
/// (after which the file ends at its last complete frame); nothing else is
/// ever changed.
///
/// Errors: [`StoreError::Io`] / [`StoreError::NotFound`] when the file
/// cannot be opened, locked or truncated.
pub fn check_transcript(path: &Path, repair: bool) -> Result<CheckReport> {
    let file = OpenOptions::new()
        .read(true)
        .write(repair)
        .open(path)
        .map_err(|e| StoreError::io("open", path, e))?;
    if repair {
        lock_whole_file(&file).map_err(|e| StoreError::io("lock (F_OFD_SETLKW)", path, e))?;
    }
    let len = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?
        .len();
    let mut report = CheckReport {
        path: path.to_path_buf(),
        ..CheckReport::default()
    };
    if len == 0 {
        report.problems.push("the file is empty (no header)".into());
        return Ok(report);
    }
    walk_all(&file, len, &mut report)?;
    if let (true, Some(at)) = (repair, report.torn_at) {
        file.set_len(at)
            .and_then(|()| file.sync_all())
            .map_err(|e| StoreError::io("truncate the torn tail of", path, e))?;
        report.repaired = true;
    }
    Ok(report)
}

fn walk_all(file: &File, len: u64, report: &mut CheckReport) -> Result<()> {
    let mut offset = 0;
    loop {
        let info = match walk_frame(file, offset, len) {
            Ok(Step::End) => return Ok(()),
            Ok(Step::Torn) => {
                report.torn_at = Some(offset);
                return Ok(());
            }
            Ok(Step::Frame(info)) => info,
            Err(FrameError::Io(e)) => return Err(StoreError::io("read", &report.path, e)),
            Err(FrameError::Corrupt { offset, reason }) => {
                report.problems.push(format!(
                    "byte {offset}: {reason}; nothing after it can be read"
                ));
                return Ok(());
            }
        };
        offset = info.offset + info.len;
        if info.kind == FrameKind::Skippable {
            report.skippable.push(info.offset);
            continue;
        }
        let plain = read_frame(file, &info).and_then(|bytes| decode_frame(&bytes, &info));
        let plain = match plain {
            Ok(p) => p,
            Err(FrameError::Io(e)) => return Err(StoreError::io("read", &report.path, e)),
            Err(FrameError::Corrupt { offset, reason }) => {
                report
                    .problems
                    .push(format!("frame at byte {offset}: {reason}"));
                continue;
            }
        };
        if report.frames == 0 {
            let one_line =
                plain.last() == Some(&b'\n') && plain.iter().filter(|&&b| b == b'\n').count() == 1;
            if !one_line {
                report
                    .problems
                    .push("the first frame is not exactly one header line".into());
            } else if let Err(e) = parse_header(&plain[..plain.len() - 1]) {
                report.problems.push(format!("invalid header: {e:?}"));
            }
        } else if plain.last().is_some_and(|&b| b != b'\n') {
            report
                .problems
                .push(format!("frame at byte {}: ends inside a line", info.offset));
        }
        report.frames += 1;
        report.plain_len += plain.len() as u64;
    }
}

/// The transcripts under `root`: `<project>/<session>/session.jsonl.zstd`.
pub fn transcripts_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let dirs = |p: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(p)
            .map(|it| {
                it.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default()
    };
    for project in dirs(root) {
        for session in dirs(&project) {
            let t = session.join(Encoding::Zstd.file_name());
            if t.is_file() {
                out.push(t);
            }
        }
    }
    out.sort();
    out
}
