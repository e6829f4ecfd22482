//! Appending one batch of complete lines to a committed transcript.
//!
//! Source: FORMAT.md ("Writing": Append, Continuity) and MOUNT.md
//! ("Appending"). Every append runs under an open-file-description lock
//! (`F_OFD_SETLKW`) on the transcript, so appends from other handles,
//! processes and mounts of the same root are serialized; under the lock
//! the real tail is read again (frames another writer appended included),
//! the batch is checked against it, written as one frame (or raw lines) at
//! the end, and fsynced. A failed write or fsync is undone by truncating
//! back to the previous length; committed bytes are never rewritten, and a
//! torn tail is never truncated here (that is `sessionfs check --repair`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::thread;
use std::time::Duration;

use super::classify::{classify, Failure, WalkEnd};
use super::error::{Result, StoreError};
use super::frame::{encode_frame, walk_frame, FrameError, FrameInfo, FrameKind, Step};
use super::lines::SeqCursor;
use super::tail::{last_line_of_frames, last_raw_line, next_seq_from_last_line, prev_newline};
use super::transcript::Encoding;

/// How long a torn tail is given to complete (another writer may still be
/// writing it) before each re-check.
pub const TORN_TAIL_WAIT: Duration = Duration::from_millis(50);

/// How many times a torn tail that keeps changing is re-checked before the
/// append gives up (a tail that did not change fails at the first re-check).
const TORN_TAIL_CHECKS: usize = 5;

/// The committed end of a transcript, read under the append lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendTail {
    /// The `seq` the batch's first line must have (0 after the header).
    pub next_seq: u64,
    /// Length of the backing file: the end of its last complete frame
    /// (zstd) or line (raw). The batch is written here.
    pub file_len: u64,
}

/// A known frame boundary of a transcript, from an earlier append, so that
/// the next append walks only the frames added since instead of the whole
/// file. Used only while the file keeps its device and inode and is at
/// least `offset` bytes long; otherwise the file is walked from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailHint {
    /// Device of the backing file.
    pub dev: u64,
    /// Inode of the backing file.
    pub ino: u64,
    /// End of a complete frame (zstd) or line (raw) of the file.
    pub offset: u64,
    /// The next expected `seq` at `offset`.
    pub next_seq: u64,
}

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Where the new frame (raw: the new lines) starts in the backing file.
    pub frame_offset: u64,
    /// Its length in the backing file (0 when the batch was empty and
    /// nothing was written).
    pub frame_len: u64,
    /// Length of the backing file after the append.
    pub new_file_len: u64,
    /// Decompressed bytes appended (the batch's length).
    pub plain_len: u64,
    /// Lines appended.
    pub lines: usize,
    /// The batch's first `seq` (the tail's next seq).
    pub first_seq: u64,
    /// The next expected `seq` after the batch.
    pub next_seq: u64,
    /// The new end, to pass to the next [`append_with`] on this file.
    pub hint: TailHint,
}

/// Appends `batch` (complete lines) to the transcript at `path`, after
/// `expected` has approved the tail read under the lock (it may, say,
/// refuse a tail that moved since the caller last looked). The batch is
/// always checked too: every line one valid event or packed row, `seq`
/// continuing the tail.
///
/// Errors: as [`append_with`].
pub fn append_batch(
    path: &Path,
    encoding: Encoding,
    batch: &[u8],
    expected: impl FnOnce(&AppendTail) -> Result<()>,
) -> Result<AppendOutcome> {
    append_with(path, encoding, None, |tail| {
        expected(tail)?;
        Ok(batch.to_vec())
    })
}

/// Appends the batch that `build` makes from the tail read under the lock:
/// a caller that numbers its lines from `tail.next_seq` can never conflict
/// with another sessionfs writer. An empty batch writes nothing.
///
/// Steps: open `path` for appending (never truncating); take the
/// `F_OFD_SETLKW` write lock on the whole file; find the real end (walking
/// from `hint` when it still applies, else from the start) — a torn tail is
/// re-read after [`TORN_TAIL_WAIT`]; compute the next `seq`; call `build`;
/// check the batch; write it as one frame (zstd, one write call) or as the
/// raw lines; fsync. If the write or the fsync fails, the file is truncated
/// back to its previous length and the error returned.
///
/// Errors: [`StoreError::NotFound`] when there is no transcript;
/// [`StoreError::TornTail`] (EIO) when the last frame stays incomplete;
/// [`StoreError::InvalidLine`] / [`StoreError::SeqConflict`] (EINVAL) for a
/// batch that is not valid complete lines continuing the tail (nothing is
/// written); [`StoreError::Corrupt`] / [`StoreError::HeaderLess`] when the
/// committed transcript cannot be continued; [`StoreError::Io`] for the
/// lock, the write (ENOSPC, EIO, EFBIG) or the fsync; any error of `build`.
pub fn append_with(
    path: &Path,
    encoding: Encoding,
    hint: Option<&TailHint>,
    build: impl FnOnce(&AppendTail) -> Result<Vec<u8>>,
) -> Result<AppendOutcome> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| StoreError::io("open for append", path, e))?;
    lock_whole_file(&file).map_err(|e| StoreError::io("lock (F_OFD_SETLKW)", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?;
    let (dev, ino) = (meta.dev(), meta.ino());
    let hint = hint.filter(|h| h.dev == dev && h.ino == ino);
    let tail = settled_tail(path, &file, encoding, hint)?;

    let batch = build(&tail)?;
    let mut cursor = SeqCursor::after(tail.next_seq);
    let check = cursor.check_batch(&batch).map_err(|e| e.into_store(path))?;
    if batch.last().is_some_and(|&b| b != b'\n') {
        return Err(StoreError::InvalidLine {
            path: path.to_path_buf(),
            line: check.lines + 1,
            reason: "the line has no newline at its end (a batch holds complete lines only)".into(),
        });
    }
    let mut outcome = AppendOutcome {
        frame_offset: tail.file_len,
        frame_len: 0,
        new_file_len: tail.file_len,
        plain_len: batch.len() as u64,
        lines: check.lines,
        first_seq: tail.next_seq,
        next_seq: cursor.next_seq(),
        hint: TailHint {
            dev,
            ino,
            offset: tail.file_len,
            next_seq: tail.next_seq,
        },
    };
    if batch.is_empty() {
        return Ok(outcome);
    }
    let bytes = match encoding {
        Encoding::Zstd => encode_frame(&batch).map_err(|e| StoreError::io("compress", path, e))?,
        Encoding::Raw => batch,
    };
    write_durably(path, &file, &bytes, tail.file_len)?;
    outcome.frame_len = bytes.len() as u64;
    outcome.new_file_len = tail.file_len + outcome.frame_len;
    outcome.hint.offset = outcome.new_file_len;
    outcome.hint.next_seq = outcome.next_seq;
    Ok(outcome)
    // Dropping `file` closes the only descriptor of this open file
    // description, which releases the lock.
}

/// Takes the open-file-description write lock on the whole file, waiting
/// for other holders (other descriptions: handles, processes, mounts).
pub(crate) fn lock_whole_file(file: &File) -> io::Result<()> {
    // SAFETY: a zeroed `flock` is a valid value; every field is an integer.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // to the end of the file, however far it grows
    fl.l_pid = 0; // required for OFD locks
                  // Polled with a deadline rather than F_OFD_SETLKW: a writer that holds
                  // the lock forever (stopped, or a forked child that inherited it) must
                  // not hang the mount's request threads.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        // SAFETY: `fl` is a valid `flock` that outlives the call, and the
        // descriptor is open for the life of `file`.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
            Some(libc::EAGAIN) | Some(libc::EACCES) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "another writer has held the append lock for {LOCK_WAIT:?}; \
                         retry, or find the stuck writer (fuser -v FILE)"
                    ),
                ))
            }
            _ => return Err(e),
        }
    }
}

/// Longest wait for the append lock of a transcript.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Result of one look at the end of the file.
enum Scan {
    Complete(AppendTail),
    /// The file ends inside the frame (raw: the line) starting at `at`.
    Torn {
        at: u64,
    },
}

/// The tail, giving a torn one time to complete: re-checked after
/// [`TORN_TAIL_WAIT`]; refused when unchanged (or still changing after
/// [`TORN_TAIL_CHECKS`] looks).
fn settled_tail(
    path: &Path,
    file: &File,
    encoding: Encoding,
    hint: Option<&TailHint>,
) -> Result<AppendTail> {
    let mut previous: Option<u64> = None;
    let mut torn_at = 0;
    for _ in 0..TORN_TAIL_CHECKS {
        let len = file
            .metadata()
            .map_err(|e| StoreError::io("stat", path, e))?
            .len();
        if previous == Some(len) {
            break;
        }
        let scan = match encoding {
            Encoding::Zstd => scan_zstd(path, file, len, hint)?,
            Encoding::Raw => scan_raw(path, file, len, hint)?,
        };
        match scan {
            Scan::Complete(tail) => return Ok(tail),
            Scan::Torn { at } => {
                log::debug!(
                    "{}: torn tail at byte {at}; re-reading in {TORN_TAIL_WAIT:?}",
                    path.display()
                );
                torn_at = at;
                previous = Some(len);
                thread::sleep(TORN_TAIL_WAIT);
            }
        }
    }
    Err(StoreError::TornTail {
        path: path.to_path_buf(),
        offset: torn_at,
    })
}

/// Walks the frames of a zstd transcript of `len` bytes from the hint (or
/// the start) and derives the next `seq` from the last non-empty frame.
fn scan_zstd(path: &Path, file: &File, len: u64, hint: Option<&TailHint>) -> Result<Scan> {
    let hint = hint.filter(|h| h.offset <= len);
    let (mut pos, hinted_next) = hint.map_or((0, None), |h| (h.offset, Some(h.next_seq)));
    let mut frames: Vec<FrameInfo> = Vec::new();
    loop {
        let failure = match walk_frame(file, pos, len) {
            Ok(Step::End) => break,
            Ok(Step::Torn) => Failure::Torn,
            Ok(Step::Frame(info)) => {
                if matches!(info.kind, FrameKind::Data { .. }) {
                    frames.push(info);
                }
                pos = info.offset + info.len;
                continue;
            }
            // The hint is not a frame boundary of this file after all
            // (replaced in place): walk it from the start.
            Err(FrameError::Corrupt { .. }) if hint.is_some() && frames.is_empty() => {
                return scan_zstd(path, file, len, None);
            }
            Err(FrameError::Corrupt { reason, .. }) => Failure::Corrupt(reason),
            Err(e) => return Err(StoreError::from_frame(path, e)),
        };
        // The one classifier decides whether this is a torn tail (wait for
        // it, or refuse with TornTail) or damage (refused, never cut).
        let end = classify(file, len, frames.last(), pos, failure)
            .map_err(|e| StoreError::from_frame(path, e))?;
        return match end {
            WalkEnd::Clean | WalkEnd::Torn { .. } => Ok(Scan::Torn { at: pos }),
            WalkEnd::Damaged(d) => Err(StoreError::Damaged {
                path: path.to_path_buf(),
                at: d.at,
                resumes_at: d.resumes_at,
                reason: d.reason,
            }),
        };
    }
    let next_seq = match last_line_of_frames(path, file, &frames)? {
        Some((line, offset)) => next_seq_from_last_line(path, Some(&line), offset)?,
        None => match hinted_next {
            Some(next) => next,
            None if frames.is_empty() => {
                return Err(StoreError::header_less(path, "it holds no data frame"))
            }
            None => return Err(StoreError::header_less(path, "its frames hold no line")),
        },
    };
    Ok(Scan::Complete(AppendTail {
        next_seq,
        file_len: len,
    }))
}

/// Finds the end of a raw transcript of `len` bytes: torn when it does not
/// end with `\n`; else the next `seq` from its last line.
fn scan_raw(path: &Path, file: &File, len: u64, hint: Option<&TailHint>) -> Result<Scan> {
    let read_err = |e| StoreError::io("read", path, e);
    if len == 0 {
        return Err(StoreError::header_less(path, "the file is empty"));
    }
    let mut last = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut last, len - 1).map_err(read_err)?;
    if last[0] != b'\n' {
        let at = prev_newline(file, len)
            .map_err(read_err)?
            .map_or(0, |i| i + 1);
        return Ok(Scan::Torn { at });
    }
    if let Some(h) = hint.filter(|h| h.offset == len) {
        return Ok(Scan::Complete(AppendTail {
            next_seq: h.next_seq,
            file_len: len,
        }));
    }
    let line = last_raw_line(path, file, len)?;
    let offset = len - line.as_ref().map_or(0, |l| l.len() as u64);
    let next_seq = next_seq_from_last_line(path, line.as_deref(), offset)?;
    Ok(Scan::Complete(AppendTail {
        next_seq,
        file_len: len,
    }))
}

/// Writes `bytes` at the end of `file` (opened `O_APPEND`) and fsyncs it;
/// on failure truncates back to `prev_len` (and fsyncs that) before
/// returning the error.
fn write_durably(path: &Path, file: &File, bytes: &[u8], prev_len: u64) -> Result<()> {
    let mut f = file;
    let written = f
        .write_all(bytes)
        .map_err(|e| ("append", e))
        .and_then(|()| file.sync_all().map_err(|e| ("fsync", e)));
    let Err((op, error)) = written else {
        return Ok(());
    };
    if let Err(rollback) = file.set_len(prev_len).and_then(|()| file.sync_all()) {
        log::error!(
            "{}: {op} failed ({error}) and truncating back to {prev_len} bytes failed too \
             ({rollback}); run `sessionfs check --repair {}`",
            path.display(),
            path.display()
        );
    }
    Err(StoreError::io(op, path, error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;

    const HEADER: &[u8] =
        b"{\"type\":\"session\",\"version\":0,\"id\":\"a\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn ev(seq: u64) -> String {
        format!("{{\"type\":\"x\",\"seq\":{seq}}}\n")
    }

    fn zstd_file(dir: &Path, parts: &[&[u8]]) -> std::path::PathBuf {
        let path = dir.join("session.jsonl.zstd");
        let mut f = File::create(&path).unwrap();
        for p in parts {
            f.write_all(&encode_frame(p).unwrap()).unwrap();
        }
        path
    }

    #[test]
    fn appends_frames_and_follows_hints() {
        let dir = tempfile::tempdir().unwrap();
        let path = zstd_file(dir.path(), &[HEADER]);
        let out = append_batch(&path, Encoding::Zstd, ev(0).as_bytes(), |t| {
            assert_eq!(t.next_seq, 0);
            Ok(())
        })
        .unwrap();
        assert_eq!(out.next_seq, 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), out.new_file_len);
        let out2 = append_with(&path, Encoding::Zstd, Some(&out.hint), |t| {
            assert_eq!(t.next_seq, 1);
            Ok(format!("{}{}", ev(1), ev(2)).into_bytes())
        })
        .unwrap();
        assert_eq!(out2.frame_offset, out.new_file_len);
        assert_eq!((out2.first_seq, out2.next_seq, out2.lines), (1, 3, 2));
        // A stale hint (the file grew since) still finds the real tail.
        let out3 = append_with(&path, Encoding::Zstd, Some(&out.hint), |t| {
            assert_eq!(t.next_seq, 3);
            Ok(Vec::new())
        })
        .unwrap();
        assert_eq!(out3.frame_len, 0);
        // A hint that is not a frame boundary falls back to a full walk.
        let bogus = TailHint {
            offset: 3,
            next_seq: 99,
            ..out.hint
        };
        let out4 = append_with(&path, Encoding::Zstd, Some(&bogus), |t| {
            assert_eq!(t.next_seq, 3);
            Ok(ev(3).into_bytes())
        })
        .unwrap();
        assert_eq!(out4.next_seq, 4);
    }

    #[test]
    fn refusals_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = zstd_file(dir.path(), &[HEADER, ev(0).as_bytes()]);
        let before = std::fs::read(&path).unwrap();
        let cases: Vec<(Vec<u8>, i32)> = vec![
            (ev(2).into_bytes(), libc::EINVAL),
            (ev(0).into_bytes(), libc::EINVAL),
            (b"{\"type\":\"x\",\"seq\":1".to_vec(), libc::EINVAL),
            (b"{nope}\n".to_vec(), libc::EINVAL),
            (
                b"{\"type\":\"x\",\"seq\":1,\"t\":\"\xc3\"}\n".to_vec(),
                libc::EINVAL,
            ),
            (HEADER.to_vec(), libc::EINVAL),
        ];
        for (batch, errno) in cases {
            let e = append_batch(&path, Encoding::Zstd, &batch, |_| Ok(())).unwrap_err();
            assert_eq!(e.errno(), errno, "{e}");
            assert_eq!(std::fs::read(&path).unwrap(), before);
        }
        let e = append_batch(&path, Encoding::Zstd, ev(1).as_bytes(), |t| {
            Err(StoreError::SeqConflict {
                path: path.clone(),
                line: 1,
                expected: t.next_seq,
                found: 0,
            })
        })
        .unwrap_err();
        assert!(matches!(e, StoreError::SeqConflict { .. }));
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn torn_tail_is_refused_unless_it_completes() {
        let dir = tempfile::tempdir().unwrap();
        let path = zstd_file(dir.path(), &[HEADER, ev(0).as_bytes()]);
        let committed = std::fs::metadata(&path).unwrap().len();
        let frame = encode_frame(ev(1).as_bytes()).unwrap();
        let (head, rest) = frame.split_at(frame.len() / 2);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(head).unwrap();
        let torn = std::fs::read(&path).unwrap();
        let e = append_batch(&path, Encoding::Zstd, ev(1).as_bytes(), |_| Ok(())).unwrap_err();
        assert!(
            matches!(e, StoreError::TornTail { offset, .. } if offset == committed),
            "{e}"
        );
        assert_eq!(e.errno(), libc::EIO);
        assert!(e.to_string().contains("sessionfs check --repair"));
        assert_eq!(std::fs::read(&path).unwrap(), torn);

        // Another writer completes the frame while the append waits.
        let rest = rest.to_vec();
        let finisher = thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            f.write_all(&rest).unwrap();
        });
        let out = append_batch(&path, Encoding::Zstd, ev(2).as_bytes(), |t| {
            assert_eq!(t.next_seq, 2);
            Ok(())
        })
        .unwrap();
        finisher.join().unwrap();
        assert_eq!(out.next_seq, 3);
    }

    #[test]
    fn raw_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, [HEADER, ev(0).as_bytes()].concat()).unwrap();
        let out = append_batch(&path, Encoding::Raw, ev(1).as_bytes(), |_| Ok(())).unwrap();
        assert_eq!(out.next_seq, 2);
        let out = append_with(&path, Encoding::Raw, Some(&out.hint), |t| {
            Ok(ev(t.next_seq).into_bytes())
        })
        .unwrap();
        assert_eq!(out.next_seq, 3);
        let text = std::fs::read(&path).unwrap();
        assert_eq!(
            text,
            [HEADER, ev(0).as_bytes(), ev(1).as_bytes(), ev(2).as_bytes()].concat()
        );
        // An incomplete last line is a torn tail.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"type\":").unwrap();
        let e = append_batch(&path, Encoding::Raw, ev(3).as_bytes(), |_| Ok(())).unwrap_err();
        assert!(matches!(e, StoreError::TornTail { offset, .. } if offset == text.len() as u64));
    }
}
