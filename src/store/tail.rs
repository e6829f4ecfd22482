//! The end of a committed transcript: its last complete line, from which
//! the next expected `seq` follows (see [`super::lines`]).
//!
//! Source: FORMAT.md ("Event lines", "Writing": Continuity). Only complete
//! frames (zstd) or complete lines (raw) are committed; a torn tail is not
//! part of the transcript.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::decode;
use super::error::{Result, StoreError};
use super::frame::{FrameInfo, FrameKind, ReadAt};
use super::index::FrameIndex;
use super::limits::MAX_LINE_BYTES;
use super::lines::next_seq_after_line;

/// The last line (with its `\n`) of the last non-empty data frame among
/// `frames` (file order), and that frame's offset; `None` when every frame
/// is empty. Frames whose header says they are empty are not decoded;
/// the others are decoded streaming, holding only their last line.
///
/// Errors: [`StoreError::Corrupt`] when the frame fails its checksum or
/// decoding, or does not end with a complete line;
/// [`StoreError::LastLineTooLong`] when its last line is longer than
/// [`MAX_LINE_BYTES`]; [`StoreError::Io`].
pub fn last_line_of_frames<R: ReadAt + ?Sized>(
    path: &Path,
    src: &R,
    frames: &[FrameInfo],
) -> Result<Option<(Vec<u8>, u64)>> {
    last_line_from_end(path, src, frames.iter().rev().copied())
}

/// [`last_line_of_frames`] over frames given from the last to the first,
/// taken one at a time (so that no list of every frame is made).
fn last_line_from_end<R: ReadAt + ?Sized>(
    path: &Path,
    src: &R,
    frames_from_end: impl Iterator<Item = FrameInfo>,
) -> Result<Option<(Vec<u8>, u64)>> {
    for info in frames_from_end {
        let FrameKind::Data { content_size, .. } = info.kind else {
            continue;
        };
        if content_size == Some(0) {
            continue;
        }
        // Streamed: only the last line is kept, whatever the frame holds.
        let summary =
            decode::scan(src, &info, true).map_err(|e| StoreError::from_frame(path, e))?;
        if summary.plain_len == 0 {
            continue;
        }
        if summary.last_byte != Some(b'\n') {
            return Err(StoreError::corrupt(
                path,
                info.offset,
                "complete frame ends inside a line",
            ));
        }
        let Some(line) = summary.last_line else {
            return Err(StoreError::LastLineTooLong {
                path: path.to_path_buf(),
                offset: info.offset,
                limit: MAX_LINE_BYTES as u64,
            });
        };
        return Ok(Some((line, info.offset)));
    }
    Ok(None)
}

/// The last complete line (with its `\n`) of a zstd transcript whose
/// frame index is `index`: the last line of its last non-empty frame, and
/// that frame's compressed offset (for errors about the line). `None` when
/// the index holds no non-empty frame.
///
/// Errors: as [`last_line_of_frames`].
pub fn last_complete_line(
    path: &Path,
    file: &File,
    index: &FrameIndex,
) -> Result<Option<(Vec<u8>, u64)>> {
    let frames = index.frames();
    let from_end = (0..frames.len())
        .rev()
        .filter_map(|i| frames.get(i))
        .filter(|f| f.plain_len > 0)
        .map(|f| f.info);
    last_line_from_end(path, file, from_end)
}

/// Position of the last `\n` strictly before byte `before` of `file`.
pub fn prev_newline(file: &File, before: u64) -> io::Result<Option<u64>> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = before;
    let mut buf = vec![0u8; CHUNK.min(before) as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + i as u64));
        }
        end = start;
    }
    Ok(None)
}

/// The last complete line (with its `\n`) of a raw transcript whose first
/// `end` bytes are complete lines (`end` is 0 or follows a `\n`).
///
/// Errors: [`StoreError::Io`]; [`StoreError::LastLineTooLong`] when the
/// line is longer than [`MAX_LINE_BYTES`].
pub fn last_raw_line(path: &Path, file: &File, end: u64) -> Result<Option<Vec<u8>>> {
    if end == 0 {
        return Ok(None);
    }
    let start = prev_newline(file, end - 1)
        .map_err(|e| StoreError::io("read", path, e))?
        .map_or(0, |i| i + 1);
    if end - start > MAX_LINE_BYTES as u64 {
        return Err(StoreError::LastLineTooLong {
            path: path.to_path_buf(),
            offset: start,
            limit: MAX_LINE_BYTES as u64,
        });
    }
    let mut line = vec![0u8; (end - start) as usize];
    file.read_exact_at(&mut line, start)
        .map_err(|e| StoreError::io("read", path, e))?;
    Ok(Some(line))
}

/// The next expected `seq` after the committed transcript whose last line
/// is `last_line` (with or without its `\n`): 0 after the header.
/// `offset` is where that line's frame (or the line) starts, for the error.
///
/// Errors: [`StoreError::HeaderLess`] when there is no line at all;
/// [`StoreError::Corrupt`] when the last line is not a valid record.
pub fn next_seq_from_last_line(path: &Path, last_line: Option<&[u8]>, offset: u64) -> Result<u64> {
    let Some(line) = last_line else {
        return Err(StoreError::header_less(
            path,
            "the transcript holds no line",
        ));
    };
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    next_seq_after_line(line).map_err(|why| {
        StoreError::corrupt(
            path,
            offset,
            format!("the last committed line cannot be continued: {why}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;
    use std::io::Write;

    #[test]
    fn last_line_skips_empty_frames() {
        let mut bytes = Vec::new();
        for part in [
            &b"h\n"[..],
            b"{\"type\":\"x\",\"seq\":0}\n{\"type\":\"x\",\"seq\":1}\n",
            b"",
        ] {
            bytes.extend(encode_frame(part).unwrap());
        }
        let (tmp, file, index) = indexed_file(&bytes);
        let line = last_complete_line(tmp.path(), &file, &index)
            .unwrap()
            .map(|(line, _)| line);
        assert_eq!(line.as_deref(), Some(&b"{\"type\":\"x\",\"seq\":1}\n"[..]));
        let next = next_seq_from_last_line(tmp.path(), line.as_deref(), 0).unwrap();
        assert_eq!(next, 2);
    }

    /// `bytes` in a temporary file, open, with its frame index.
    fn indexed_file(bytes: &[u8]) -> (tempfile::NamedTempFile, File, FrameIndex) {
        let mut index = FrameIndex::new();
        let mut decoded = 0;
        index
            .extend(bytes, bytes.len() as u64, &mut decoded)
            .unwrap();
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(bytes).unwrap();
        let file = File::open(tmp.path()).unwrap();
        (tmp, file, index)
    }

    #[test]
    fn raw_last_line() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        let long = format!(
            "{{\"type\":\"x\",\"seq\":7,\"pad\":\"{}\"}}\n",
            "p".repeat(200_000)
        );
        tmp.write_all(b"{\"a\":1}\n").unwrap();
        tmp.write_all(long.as_bytes()).unwrap();
        let file = File::open(tmp.path()).unwrap();
        let end = file.metadata().unwrap().len();
        let line = last_raw_line(tmp.path(), &file, end).unwrap().unwrap();
        assert_eq!(line, long.as_bytes());
        assert_eq!(
            next_seq_from_last_line(tmp.path(), Some(&line), 0).unwrap(),
            8
        );
        let first = last_raw_line(tmp.path(), &file, 8).unwrap().unwrap();
        assert_eq!(first, b"{\"a\":1}\n");
        assert!(last_raw_line(tmp.path(), &file, 0).unwrap().is_none());
    }

    /// A valid transcript whose last line is longer than sessionfs holds
    /// cannot be continued, but is not called corrupt: `EFBIG`, naming the
    /// frame (or the line) the line starts in, and saying it is intact.
    #[test]
    fn a_last_line_over_the_limit_is_too_long_not_corrupt() {
        let long = format!(
            "{{\"type\":\"x\",\"seq\":0,\"pad\":\"{}\"}}\n",
            "p".repeat(MAX_LINE_BYTES + 10)
        );
        let mut bytes = encode_frame(b"h\n").unwrap();
        let frame_at = bytes.len() as u64;
        bytes.extend(encode_frame(long.as_bytes()).unwrap());
        let (tmp, file, index) = indexed_file(&bytes);
        let e = last_complete_line(tmp.path(), &file, &index).unwrap_err();
        assert!(
            matches!(e, StoreError::LastLineTooLong { offset, .. } if offset == frame_at),
            "{e:?}"
        );
        assert_eq!(e.errno(), libc::EFBIG);
        assert!(e.to_string().contains("intact"), "{e}");

        let mut raw = tempfile::NamedTempFile::new().unwrap();
        raw.write_all(b"h\n").unwrap();
        raw.write_all(long.as_bytes()).unwrap();
        let file = File::open(raw.path()).unwrap();
        let end = file.metadata().unwrap().len();
        let e = last_raw_line(raw.path(), &file, end).unwrap_err();
        assert!(
            matches!(e, StoreError::LastLineTooLong { offset: 2, .. }),
            "{e:?}"
        );
    }
}
